// The CTL verb and /metrics: translations between requests and the control tree (or the ledger,
// for metrics), and the write permission check. RenderMetrics only reads: the
// counters it exports are written by the shim (oom_refusals), the gate (token_wait_ns), the
// arbiter thread (grants, the heartbeat) and the reconciler (unseen, blocked).
#include "daemon/ctl_door.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "daemon/http_door.h"
#include "ipc/futex.h"
#include "metrics/exposition.h"

namespace tessera::daemon {

bool PeerIsAdministrator(const ipc::PeerCredentials& peer, const Administrators& admins) {
  if (peer.uid == 0 || peer.uid == admins.daemon_uid) return true;
  if (!admins.group) return false;
  const gid_t writer_group = *admins.group;
  if (peer.gid == writer_group) return true;
  // Supplementary groups: the kernel's view of the peer process now.
  std::ifstream status("/proc/" + std::to_string(peer.pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream groups(line.substr(7));
    long g;
    while (groups >> g) {
      if (static_cast<gid_t>(g) == writer_group) return true;
    }
  }
  return false;
}

std::string WhoMayAdminister(const ipc::PeerCredentials& peer, const Administrators& admins) {
  std::string who =
      "it needs root, tesserad's own user (uid " + std::to_string(admins.daemon_uid) + ")";
  who += admins.group ? " or a member of its admin group (gid " + std::to_string(*admins.group) +
                            ", tesserad --admin-group)"
                      : " (tesserad --admin-group names a group that may too)";
  return who + "; the peer is uid " + std::to_string(peer.uid) + " gid " + std::to_string(peer.gid);
}

Result<std::string> HandleCtl(const ctl::ControlTree& tree, const protocol::Message& request,
                              bool may_write) {
  using R = Result<std::string>;
  const std::string op = request.Get("op");
  if (!request.Has("path")) return R::Error("CTL needs path=PATH");
  const std::string path = request.Get("path");
  for (const auto& [key, value] : request.fields) {
    if (key != "op" && key != "path" && key != "value" && key != "force") {
      return R::Error("CTL " + key + "=: unknown key; expected op, path, value, force");
    }
  }
  if (op == "ls") {
    auto entries = tree.List(path);
    if (!entries.ok()) return entries.status();
    return EntriesJson(*entries);
  }
  if (op == "get") {
    auto text = tree.Read(path);
    if (!text.ok()) return text.status();
    return ValueJson(*text);
  }
  if (op == "set") {
    if (!request.Has("value")) return R::Error("CTL op=set needs value=VALUE");
    const std::string force = request.Get("force", "0");
    if (force != "0" && force != "1") {
      return R::Error("CTL force=" + force + ": expected 0 or 1");
    }
    if (!may_write) {
      return R::Error(path +
                      ": permission denied; writing the control tree needs an administrator of "
                      "tesserad (root, its own user, or its admin group: tesserad --admin-group)");
    }
    ctl::WriteOptions options;
    options.force = force == "1";
    options.writer_may_write = true;
    if (Status s = tree.Write(path, request.Get("value"), options); !s.ok()) return s;
    return std::string("{}");
  }
  return R::Error("CTL op=" + (op.empty() ? std::string("(missing)") : op) +
                  ": expected ls, get or set");
}

std::string RenderMetrics(const Registry& registry, const ComputeService& compute,
                          const std::string& version) {
  return registry.WithLedger([&](const ledger::MemoryLedger& ledger) {
    // Who exists and their settings: the daemon's book; counters: the segment (tenants' claims).
    const ledger::LedgerLayout* l = ledger.layout();
    const ledger::LedgerBook& book = ledger.book();
    const int devices = ledger.device_count();
    std::vector<DeviceShares> shares;
    for (int d = 0; d < devices; ++d) shares.push_back(compute.Shares(d));
    struct Live {
      int slot;
      std::string id;
    };
    std::vector<Live> live;
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      const ledger::LedgerBook::Container& slot = book.containers[c];
      if (slot.state.load() == ledger::kLive) live.push_back({c, slot.id});
    }
    std::vector<int> process_count(ledger::kMaxContainers, 0);
    int live_processes = 0;
    for (int p = 0; p < ledger::kMaxProcesses; ++p) {
      const ledger::LedgerBook::Process& ps = book.processes[p];
      if (ps.state.load() != ledger::kLive) continue;
      ++process_count[ps.container.load()];
      ++live_processes;
    }
    // Every name and label here is fixed or a validated container id, so the writer refuses
    // nothing; a refusal would be a bug, and it only drops that sample.
    metrics::ExpositionWriter w;
    using metrics::MetricType;
    auto family = [&](const char* name, const char* help, MetricType type = MetricType::kGauge) {
      (void)w.BeginFamily(name, type, help);
    };
    family("tessera_up", "1 while tesserad serves");
    (void)w.AddSample({}, 1);
    family("tessera_build_info", "The daemon's version, as a label");
    (void)w.AddSample({{"version", version}}, 1);
    family("tessera_gpu_memory_total_bytes", "Physical memory of the GPU");
    for (int d = 0; d < devices; ++d) {
      (void)w.AddSample({{"gpu", std::to_string(d)}, {"uuid", book.devices[d].uuid}},
                        book.devices[d].total_bytes);
    }
    family("tessera_gpu_memory_used_bytes", "Memory every container holds on the GPU");
    for (int d = 0; d < devices; ++d) {
      uint64_t used = 0;
      for (const Live& c : live)
        used += ledger.counters(static_cast<uint32_t>(c.slot)).used[d].load();
      (void)w.AddSample({{"gpu", std::to_string(d)}}, used);
    }
    family("tessera_gpu_policy", "The GPU's arbiter policy (0-5, docs/contracts.md)");
    for (int d = 0; d < devices; ++d) {
      (void)w.AddSample({{"gpu", std::to_string(d)}}, static_cast<int>(shares[d].config.policy));
    }
    family("tessera_gpu_max_inst", "The GPU's max_inst (slots and weight units)");
    for (int d = 0; d < devices; ++d) {
      (void)w.AddSample({{"gpu", std::to_string(d)}}, shares[d].config.max_inst);
    }
    family("tessera_gpu_free_weight", "max_inst minus the weights the arbiter schedules");
    for (int d = 0; d < devices; ++d) {
      (void)w.AddSample({{"gpu", std::to_string(d)}}, shares[d].free_weight);
    }
    family("tessera_container_memory_used_bytes", "Memory the container holds on the GPU");
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}},
                          ledger.counters(static_cast<uint32_t>(c.slot)).used[d].load());
      }
    }
    family("tessera_container_memory_limit_bytes",
           "The container's memory limit on the GPU (no sample: unlimited)");
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        const uint64_t limit = book.containers[c.slot].limit[d].load();
        if (limit == ledger::kUnlimited) continue;
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}}, limit);
      }
    }
    auto share_of = [&](int d, int slot) -> const ContainerShare* {
      for (const ContainerShare& s : shares[d].containers) {
        if (s.container == slot) return &s;
      }
      return nullptr;
    };
    family("tessera_container_compute_target_percent",
           "The GPU-time share the policy promises the container (no sample: uncontrolled)");
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        const ContainerShare* s = share_of(d, c.slot);
        if (s == nullptr || !s->target) continue;
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}}, *s->target);
      }
    }
    family("tessera_container_compute_achieved_percent",
           "The GPU time the container's kernels occupied over the arbiter's window, in percent");
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        const ContainerShare* s = share_of(d, c.slot);
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}},
                          s != nullptr ? s->achieved : 0.0);
      }
    }
    family("tessera_container_weight", "The container's scheduling weight (every GPU)");
    for (const Live& c : live) {
      (void)w.AddSample({{"container", c.id}}, book.containers[c.slot].weight.load());
    }
    family("tessera_container_high_priority", "1 when the container is high priority");
    for (const Live& c : live) {
      (void)w.AddSample({{"container", c.id}}, book.containers[c.slot].high_priority.load());
    }
    family("tessera_container_processes", "Processes registered in the container");
    for (const Live& c : live) {
      (void)w.AddSample({{"container", c.id}}, process_count[c.slot]);
    }
    family("tessera_container_memory_unseen_bytes",
           "Memory the GPU reports for the container's processes beyond what the shim reserved");
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}},
                          book.containers[c.slot].unseen[d].load());
      }
    }
    family("tessera_container_blocked",
           "1 while every new reservation of the container is refused (over its limit, block)");
    for (const Live& c : live) {
      const bool blocked = (book.containers[c.slot].flags.load() & ledger::kContainerBlocked) != 0;
      (void)w.AddSample({{"container", c.id}}, blocked ? 1 : 0);
    }
    family("tessera_container_oom_refusals_total",
           "Allocation calls the shim refused with CUDA_ERROR_OUT_OF_MEMORY at the memory limit",
           MetricType::kCounter);
    for (const Live& c : live) {
      (void)w.AddSample({{"container", c.id}},
                        ledger.counters(static_cast<uint32_t>(c.slot)).oom_refusals.load());
    }
    family("tessera_container_token_wait_seconds_total",
           "Time the container's launches waited at the gate for the compute token",
           MetricType::kCounter);
    for (const Live& c : live) {
      const uint64_t ns = ledger.counters(static_cast<uint32_t>(c.slot)).token_wait_ns.load();
      (void)w.AddSample({{"container", c.id}}, static_cast<double>(ns) / 1e9);
    }
    family("tessera_container_gpu_seconds_total",
           "GPU time the container's kernels occupied on the GPU (not the time they waited behind "
           "others'), since it took its slot or tesserad started",
           MetricType::kCounter);
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        const ContainerShare* s = share_of(d, c.slot);
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}},
                          s != nullptr ? s->gpu_seconds : 0.0);
      }
    }
    family("tessera_container_token_grants_total",
           "Times the arbiter granted the container the compute token on the GPU",
           MetricType::kCounter);
    for (const Live& c : live) {
      for (int d = 0; d < devices; ++d) {
        const ContainerShare* s = share_of(d, c.slot);
        (void)w.AddSample({{"container", c.id}, {"gpu", std::to_string(d)}},
                          s != nullptr ? s->grants : uint64_t{0});
      }
    }
    family("tessera_processes", "Processes registered on the node (live process slots)");
    (void)w.AddSample({}, live_processes);
    family("tessera_arbiter_beat_age_seconds",
           "Time since the arbiter's last heartbeat in the ledger (+Inf: it never beat)");
    const uint64_t beat = l->gate.beat_ns.load();
    const uint64_t now = ipc::MonotonicNs();
    (void)w.AddSample({}, beat == 0 ? std::numeric_limits<double>::infinity()
                                    : static_cast<double>(now > beat ? now - beat : 0) / 1e9);
    return w.text();
  });
}

}  // namespace tessera::daemon
