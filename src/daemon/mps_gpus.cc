// MPSGPUS: the list's parser, the occupancy checks and the switch (mps_gpus.h).
#include "daemon/mps_gpus.h"

#include "config/daemon_settings.h"

namespace tessera::daemon {

namespace {

using Out = Result<protocol::Message>;

std::string Pids(const std::set<int32_t>& pids) {
  std::string out;
  for (int32_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

}  // namespace

Result<std::set<int>> ParseMpsGpuList(const std::string& text, int device_count) {
  using List = Result<std::set<int>>;
  if (text == "none") return std::set<int>{};
  auto list = config::ParseGpuIndexList(text, "MPSGPUS gpus=");
  if (!list.ok()) return List::Error(list.error() + "; or none");
  for (int gpu : *list) {
    if (gpu >= device_count) {
      return List::Error("MPSGPUS gpus=\"" + text + "\": GPU " + std::to_string(gpu) +
                         " is not on this node; it has " + std::to_string(device_count) +
                         " GPU(s), indices 0-" + std::to_string(device_count - 1));
    }
  }
  return list;
}

std::string FormatMpsGpuList(const std::set<int>& gpus) {
  if (gpus.empty()) return "none";
  std::string out;
  for (auto it = gpus.begin(); it != gpus.end();) {
    const int first = *it;
    int last = first;
    for (++it; it != gpus.end() && *it == last + 1; ++it) last = *it;
    out += (out.empty() ? "" : ",") + std::to_string(first);
    if (last != first) out += "-" + std::to_string(last);
  }
  return out;
}

std::set<int> MpsGpuSwitch::Running() const {
  std::set<int> out;
  if (context_.supervisor == nullptr) return out;
  for (const mps::MpsGpu& g : context_.supervisor->Gpus()) out.insert(g.index);
  return out;
}

std::string MpsGpuSwitch::Occupants(int index) const {
  std::string containers;
  std::set<int32_t> registered;
  context_.registry->WithLedger([&](const ledger::MemoryLedger& l) {
    const ledger::LedgerBook& book = l.book();
    for (uint32_t c = 0; c < static_cast<uint32_t>(ledger::kMaxContainers); ++c) {
      const std::string id = l.ContainerId(c);
      if (id.empty()) continue;
      const uint32_t processes = book.containers[c].process_count.load();
      // What runs there: memory it holds on the GPU, or processes allowed on it (a limit of 0
      // bars a container from a GPU: the device plugin gives 0 on every GPU but a container's
      // own). A container registered with nothing running is no tenant yet (`tessera run`
      // leaves its container registered after the command).
      const bool on_it = l.Used(c, index) > 0 || (processes > 0 && l.Limit(c, index) != 0);
      if (!on_it) continue;
      std::set<int32_t> pids;
      for (int p = 0; p < ledger::kMaxProcesses; ++p) {
        const ledger::LedgerBook::Process& slot = book.processes[p];
        if (slot.state.load() == ledger::kLive && slot.container.load() == c) {
          pids.insert(slot.host_pid.load());
        }
      }
      registered.insert(pids.begin(), pids.end());
      containers += (containers.empty() ? "" : ", ") + id;
      if (!pids.empty()) containers += " (pids " + Pids(pids) + ")";
    }
    return 0;
  });
  std::set<int32_t> others;
  if (context_.processes) {
    auto listed = context_.processes(index);
    if (listed.ok()) {
      for (const DeviceProcess& p : *listed) {
        if (registered.count(p.pid) != 0) continue;
        if (context_.exempt && context_.exempt(p.pid)) continue;
        others.insert(p.pid);
      }
    }
  }
  std::string out;
  if (!containers.empty()) out = "containers " + containers;
  if (!others.empty()) {
    out += (out.empty() ? "" : "; ") + std::string("processes ") + Pids(others) +
           " (NVML lists them on it)";
  }
  return out;
}

Result<protocol::Message> MpsGpuSwitch::Apply(const protocol::Message& request) {
  if (context_.supervisor == nullptr) {
    return Out::Error(
        "MPSGPUS: this tesserad runs no MPS; start it with --mps-gpus none (or --mps, "
        "--mps-gpus LIST) and --mps-control, --mps-dir");
  }
  for (const auto& [key, value] : request.fields) {
    if (key != "gpus") {
      return Out::Error("MPSGPUS " + key + "=" + value + ": unknown field; expected gpus=LIST");
    }
  }
  if (!request.Has("gpus")) {
    return Out::Error("MPSGPUS: gpus= missing; expected gpus=0-3,5 (device indices) or gpus=none");
  }
  const int devices = static_cast<int>(context_.devices.size());
  auto wanted = ParseMpsGpuList(request.Get("gpus"), devices);
  if (!wanted.ok()) return wanted.status();
  const std::set<int> running = Running();
  std::set<int> started, stopped;
  std::vector<std::string> refused;
  for (int gpu = 0; gpu < devices; ++gpu) {
    const bool want = wanted->count(gpu) != 0, runs = running.count(gpu) != 0;
    if (want == runs) continue;
    const std::string name =
        "GPU " + std::to_string(gpu) + " (" + context_.devices[static_cast<size_t>(gpu)].uuid + ")";
    if (const std::string occupants = Occupants(gpu); !occupants.empty()) {
      refused.push_back(name +
                        (want ? " does not start MPS under tenants that are no MPS clients: "
                              : " does not stop MPS under its MPS clients: ") +
                        occupants);
      continue;
    }
    if (want) {
      const mps::MpsGpu g{gpu, context_.devices[static_cast<size_t>(gpu)].uuid};
      if (Status s = context_.supervisor->Add(g); !s.ok()) {
        refused.push_back(name + " does not run MPS: " + s.message());
        continue;
      }
      started.insert(gpu);
      if (context_.set_policy && context_.compute != nullptr &&
          context_.own_policy.count(gpu) == 0) {
        arbiter::ArbiterConfig config = context_.compute->Config(gpu);
        before_[gpu] = config;
        config.policy = ArbiterPolicy::kNative;
        (void)context_.compute->Configure(gpu, config);
      }
    } else {
      context_.supervisor->Remove(gpu);
      stopped.insert(gpu);
      if (context_.set_policy && context_.compute != nullptr &&
          context_.own_policy.count(gpu) == 0) {
        arbiter::ArbiterConfig config = context_.compute->Config(gpu);
        auto b = before_.find(gpu);
        config.policy = b != before_.end() ? b->second.policy : context_.policy_without_mps;
        if (b != before_.end()) before_.erase(b);
        (void)context_.compute->Configure(gpu, config);
      }
    }
  }
  const std::set<int> now = Running();
  context_.registry->SetMpsGpus(context_.supervisor->options().root, now);
  if (!refused.empty()) {
    std::string message = "MPSGPUS gpus=" + request.Get("gpus") + ": ";
    for (size_t i = 0; i < refused.size(); ++i) message += (i == 0 ? "" : "; ") + refused[i];
    return Out::Error(message + (now.empty()
                                     ? "; MPS runs on no GPU now"
                                     : "; MPS runs on GPUs " + FormatMpsGpuList(now) + " now"));
  }
  protocol::Message reply{"OK", {}};
  reply.fields["mps"] = FormatMpsGpuList(now);
  reply.fields["started"] = FormatMpsGpuList(started);
  reply.fields["stopped"] = FormatMpsGpuList(stopped);
  return reply;
}

}  // namespace tessera::daemon
