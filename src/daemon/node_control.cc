// DaemonNodeControl implementation: snapshots of the ledger and the arbiters, and setters that
// re-check the control tree's rules under the registry's mutex.
#include "daemon/node_control.h"

#include <algorithm>
#include <cstring>

namespace tessera::daemon {
namespace {

// The live container slot named `id`, or -1. The ledger's FindContainer compares the same way.
int FindLive(const ledger::MemoryLedger& ledger, std::string_view id) {
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::LedgerBook::Container& slot = ledger.book().containers[c];
    if (slot.state.load() == ledger::kLive && std::string_view(slot.id) == id) return c;
  }
  return -1;
}

std::string Path(int gpu, std::string_view container, const char* file) {
  return std::to_string(gpu) + "/" + std::string(container) + "/" + file;
}

Status Refuse(const std::string& path, const std::string& value, const std::string& why) {
  return Status::Error(path + "=\"" + value + "\": " + why);
}

Status NoContainer(int gpu, std::string_view container, const char* file,
                   const std::string& value) {
  return Refuse(Path(gpu, container, file), value,
                "container " + std::string(container) + " no longer exists");
}

// The sum of the weights of every live container (what max_inst may not go below).
int WeightSum(const ledger::MemoryLedger& ledger) {
  int sum = 0;
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::LedgerBook::Container& slot = ledger.book().containers[c];
    if (slot.state.load() == ledger::kLive) {
      sum += static_cast<int>(std::clamp<uint32_t>(slot.weight.load(), 1, 256));
    }
  }
  return sum;
}

}  // namespace

DaemonNodeControl::DaemonNodeControl(Registry* registry, ComputeService* compute,
                                     std::string version)
    : registry_(registry), compute_(compute), version_(std::move(version)) {}

ctl::NodeSnapshot DaemonNodeControl::Snapshot() const {
  return registry_->WithLedger([&](const ledger::MemoryLedger& ledger) {
    const ledger::LedgerBook& book = ledger.book();
    ctl::NodeSnapshot out;
    out.version = version_;
    if (const uint64_t d = registry_->default_limit(); d != ledger::kUnlimited) {
      out.default_memsize = Bytes(d);
    }
    const int devices = ledger.device_count();
    for (int d = 0; d < devices; ++d) {
      const DeviceShares shares = compute_->Shares(d);
      ctl::GpuState gpu;
      gpu.index = d;
      gpu.policy = shares.config.policy;
      gpu.max_inst = shares.config.max_inst;
      gpu.prio_ratio = shares.config.prio_ratio;
      gpu.free_weight = shares.free_weight;
      uint64_t used_total = 0;
      for (int c = 0; c < ledger::kMaxContainers; ++c) {
        // Who exists and their settings: the daemon's book; bytes in use: the segment's counters.
        const ledger::LedgerBook::Container& slot = book.containers[c];
        if (slot.state.load() != ledger::kLive) continue;
        ctl::ContainerState state;
        state.id = slot.id;
        state.weight = static_cast<int>(std::clamp<uint32_t>(slot.weight.load(), 1, 256));
        state.high_priority = slot.high_priority.load() != 0;
        if (const uint64_t limit = slot.limit[d].load(); limit != ledger::kUnlimited) {
          state.memsize = Bytes(limit);
        }
        const uint64_t used = ledger.counters(static_cast<uint32_t>(c)).used[d].load();
        state.used = Bytes(used);
        used_total += used;
        for (int p = 0; p < ledger::kMaxProcesses; ++p) {
          const ledger::LedgerBook::Process& ps = book.processes[p];
          if (ps.state.load() != ledger::kLive || ps.container.load() != static_cast<uint32_t>(c)) {
            continue;
          }
          state.processes.push_back(
              {ps.local_pid.load(),
               Bytes(ledger.process(static_cast<uint32_t>(p)).used[d].load())});
        }
        gpu.containers.push_back(std::move(state));
      }
      const uint64_t total = book.devices[d].total_bytes;
      gpu.memory_free = Bytes(total > used_total ? total - used_total : 0);
      out.gpus.push_back(std::move(gpu));
    }
    return out;
  });
}

Status DaemonNodeControl::CheckGpu(const ledger::MemoryLedger& ledger, int gpu,
                                   const std::string& path) const {
  if (gpu >= 0 && gpu < ledger.device_count()) return Status::Ok();
  return Status::Error(path + ": GPU " + std::to_string(gpu) + " does not exist; this node has " +
                       std::to_string(ledger.device_count()) + " GPU(s)");
}

Status DaemonNodeControl::SetDefaultMemsize(Bytes memsize) {
  return registry_->WithLedger([&](const ledger::MemoryLedger&) {
    if (memsize.count() == 0 || memsize.count() == ledger::kUnlimited) {
      return Refuse("default_memsize", std::to_string(memsize.count()),
                    "not a limit; expected a size of at least one byte");
    }
    registry_->SetDefaultLimit(memsize.count());
    return Status::Ok();
  });
}

template <typename Change>
Status DaemonNodeControl::Reconfigure(int gpu, const std::string& path, const std::string& value,
                                      Change change) {
  return registry_->WithLedger([&](const ledger::MemoryLedger& ledger) {
    if (Status s = CheckGpu(ledger, gpu, path); !s.ok()) return s;
    arbiter::ArbiterConfig config = compute_->Config(gpu);
    if (Status s = change(ledger, config); !s.ok()) return s;
    if (Status s = compute_->Configure(gpu, config); !s.ok()) {
      return Refuse(path, value, s.message());
    }
    return Status::Ok();
  });
}

Status DaemonNodeControl::SetPolicy(int gpu, ArbiterPolicy policy) {
  return Reconfigure(gpu, std::to_string(gpu) + "/policy", std::to_string(static_cast<int>(policy)),
                     [&](const ledger::MemoryLedger&, arbiter::ArbiterConfig& config) {
                       config.policy = policy;
                       return Status::Ok();
                     });
}

Status DaemonNodeControl::SetMaxInst(int gpu, int max_inst) {
  const std::string path = std::to_string(gpu) + "/max_inst";
  const std::string value = std::to_string(max_inst);
  return Reconfigure(gpu, path, value,
                     [&](const ledger::MemoryLedger& ledger, arbiter::ArbiterConfig& config) {
                       const int sum = WeightSum(ledger);
                       if (max_inst < sum) {
                         return Refuse(path, value,
                                       "below the sum of the containers' weights (" +
                                           std::to_string(sum) + "); expected at least that");
                       }
                       config.max_inst = max_inst;
                       return Status::Ok();
                     });
}

Status DaemonNodeControl::SetPrioRatio(int gpu, Percent prio_ratio) {
  return Reconfigure(gpu, std::to_string(gpu) + "/prio_ratio", std::to_string(prio_ratio.value()),
                     [&](const ledger::MemoryLedger&, arbiter::ArbiterConfig& config) {
                       config.prio_ratio = prio_ratio;
                       return Status::Ok();
                     });
}

Status DaemonNodeControl::SetWeight(int gpu, std::string_view container, int weight) {
  const std::string path = Path(gpu, container, "weight");
  const std::string value = std::to_string(weight);
  return registry_->WithLedger([&](ledger::MemoryLedger& ledger) {
    if (Status s = CheckGpu(ledger, gpu, path); !s.ok()) return s;
    const int c = FindLive(ledger, container);
    if (c < 0) return NoContainer(gpu, container, "weight", value);
    if (weight < 1) return Refuse(path, value, "expected at least 1");
    // Weights are per container: the new one must fit every GPU.
    for (int d = 0; d < ledger.device_count(); ++d) {
      const DeviceShares shares = compute_->Shares(d);
      if (weight > shares.config.max_inst) {
        return Refuse(path, value,
                      "above GPU " + std::to_string(d) +
                          "'s max_inst=" + std::to_string(shares.config.max_inst) +
                          " (a weight applies to the container on every GPU); expected 1 to " +
                          std::to_string(shares.config.max_inst));
      }
      int held = 0;  // what the arbiter already counts for this container on GPU d
      for (const ContainerShare& share : shares.containers) {
        if (share.container == c) held = share.weight;
      }
      if (weight > shares.free_weight + held) {
        return Refuse(path, value,
                      "GPU " + std::to_string(d) +
                          " has free_weight=" + std::to_string(shares.free_weight) +
                          " and the container holds " + std::to_string(held) +
                          " there (a weight applies on every GPU); expected at most " +
                          std::to_string(shares.free_weight + held));
      }
    }
    const ledger::LedgerBook::Container& entry = ledger.book().containers[c];
    ledger.SetCompute(static_cast<uint32_t>(c), entry.core_percent.load(),
                      static_cast<uint32_t>(weight), entry.high_priority.load());
    return Status::Ok();
  });
}

Status DaemonNodeControl::SetMemsize(int gpu, std::string_view container, Bytes memsize,
                                     bool force) {
  const std::string path = Path(gpu, container, "memsize");
  const std::string value = std::to_string(memsize.count());
  return registry_->WithLedger([&](ledger::MemoryLedger& ledger) {
    if (Status s = CheckGpu(ledger, gpu, path); !s.ok()) return s;
    const int c = FindLive(ledger, container);
    if (c < 0) return NoContainer(gpu, container, "memsize", value);
    if (memsize.count() == 0 || memsize.count() == ledger::kUnlimited) {
      return Refuse(path, value, "not a limit; expected a size of at least one byte");
    }
    const uint64_t used = ledger.Used(static_cast<uint32_t>(c), gpu);
    if (memsize.count() < used && !force) {
      return Refuse(path, value,
                    "below what the container uses now (" + std::to_string(used) +
                        " bytes); expected at least that, or force");
    }
    ledger.SetLimit(static_cast<uint32_t>(c), gpu, memsize.count());
    return Status::Ok();
  });
}

Status DaemonNodeControl::SetHighPriority(int gpu, std::string_view container, bool high_priority) {
  const std::string path = Path(gpu, container, "highprio");
  return registry_->WithLedger([&](ledger::MemoryLedger& ledger) {
    if (Status s = CheckGpu(ledger, gpu, path); !s.ok()) return s;
    const int c = FindLive(ledger, container);
    if (c < 0) return NoContainer(gpu, container, "highprio", high_priority ? "1" : "0");
    const ledger::LedgerBook::Container& entry = ledger.book().containers[c];
    ledger.SetCompute(static_cast<uint32_t>(c), entry.core_percent.load(), entry.weight.load(),
                      high_priority ? 1 : 0);
    return Status::Ok();
  });
}

}  // namespace tessera::daemon
