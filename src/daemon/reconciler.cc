// Reconciler implementation: one pass per interval over the device's process lists and the ledger.
#include "daemon/reconciler.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "core/bytes.h"
#include "ledger/ledger_layout.h"

namespace tessera::daemon {
namespace {

std::string Human(uint64_t bytes) { return FormatBytes(Bytes(bytes)); }

std::string Millis(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

// a + b, or the largest count when that overflows (the processes' counters are their claims).
uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return b > ~uint64_t{0} - a ? ~uint64_t{0} : a + b;
}

}  // namespace

bool DescendsFrom(int32_t pid, int32_t ancestor) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    if (pid == ancestor) return true;
    char path[48];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
    std::FILE* f = std::fopen(path, "re");
    if (f == nullptr) return false;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "PID (COMM) STATE PPID ...": the command may hold spaces and parentheses.
    const char* close = std::strrchr(buf, ')');
    if (close == nullptr || close[1] == '\0' || close[2] == '\0') return false;
    pid = static_cast<int32_t>(std::strtol(close + 4, nullptr, 10));
  }
  return pid == ancestor;
}

bool Reconciler::Exempt(int32_t pid) const {
  if (pid == static_cast<int32_t>(getpid())) return true;
  return options_.exempt && options_.exempt(pid);
}

Reconciler::Reconciler(Registry* registry, int devices, ProcessLister lister,
                       ReconcilerOptions options)
    : registry_(registry),
      devices_(devices),
      lister_(std::move(lister)),
      options_(std::move(options)) {}

Reconciler::~Reconciler() { Stop(); }

void Reconciler::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Reconciler::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Reconciler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    RunOnce();
    lock.lock();
    wake_.wait_for(lock, options_.interval, [this] { return stop_; });
  }
}

void Reconciler::Log(const ReconcileEvent& e) {
  if (!options_.log) return;
  const std::string gpu = "GPU " + std::to_string(e.device);
  const std::string action(config::OverLimitActionName(options_.action));
  switch (e.kind) {
    case ReconcileEvent::Kind::kOverLimit: {
      std::string what = "tesserad: reconcile: container " + e.container +
                         " is over its limit on " + gpu + ": " + Human(e.reserved) +
                         " reserved through the shim + " + Human(e.unseen) +
                         " the shim did not see > limit " + Human(e.limit) + "; action " + action;
      if (options_.action == config::OverLimitAction::kBlock) {
        what += ": its allocations are refused until it is back under";
      }
      if (options_.action == config::OverLimitAction::kKill) {
        what += ": its processes on " + gpu + " are killed";
      }
      options_.log(what);
      break;
    }
    case ReconcileEvent::Kind::kBackUnder:
      options_.log("tesserad: reconcile: container " + e.container +
                   " is back under its limit on " + gpu + " (" + Human(e.reserved) +
                   " reserved + " + Human(e.unseen) + " unseen <= " + Human(e.limit) + ")");
      break;
    case ReconcileEvent::Kind::kKilled:
      if (e.unattributed) {
        options_.log("tesserad: reconcile: killed pid " + std::to_string(e.pid) + " on " + gpu +
                     " (it belongs to no container; unattributed action kill)");
        break;
      }
      options_.log("tesserad: reconcile: killed pid " + std::to_string(e.pid) + " of container " +
                   e.container +
                   (e.gpu_time ? " (it ran on " + gpu + " around its gate)"
                               : " (over its limit on " + gpu + ")"));
      break;
    case ReconcileEvent::Kind::kGpuTimeUnseen: {
      std::string what = "tesserad: reconcile: container " + e.container + " ran on " + gpu +
                         " for " + Millis(e.unseen) + " where its gates measured " +
                         Millis(e.reserved) +
                         ": a process goes around the shim (the driver loaded by path) or rewrites "
                         "its own counters; " +
                         Millis(e.limit) + " charged to its share; action " + action;
      if (options_.action == config::OverLimitAction::kBlock) {
        what += ": its allocations are refused until its device time is back in line";
      }
      if (options_.action == config::OverLimitAction::kKill) {
        what += ": its processes on " + gpu + " are killed";
      }
      options_.log(what);
      break;
    }
    case ReconcileEvent::Kind::kGpuTimeBackInLine:
      options_.log("tesserad: reconcile: container " + e.container + " is back in line on " + gpu +
                   " (the device saw " + Millis(e.unseen) + ", its gates measured " +
                   Millis(e.reserved) + ")");
      break;
    case ReconcileEvent::Kind::kUnregistered: {
      const std::string what = e.unseen > 0 ? "holds " + Human(e.unseen) + " on " + gpu
                                            : "ran on " + gpu + " for " + Millis(e.limit);
      options_.log("tesserad: reconcile: pid " + std::to_string(e.pid) + " " + what +
                   " and belongs to no container (it never registered with tesserad, and its "
                   "cgroup is no identified container's); action " +
                   std::string(config::UnattributedActionName(options_.unattributed)) +
                   (options_.unattributed == config::UnattributedAction::kKill
                        ? ": it is killed"
                        : ": no container's limit applies to it"));
      break;
    }
    case ReconcileEvent::Kind::kAttributed:
      options_.log("tesserad: reconcile: pid " + std::to_string(e.pid) + " on " + gpu +
                   " never registered with tesserad; its cgroup is container " + e.container +
                   "'s, which is charged with what it holds (" + Human(e.unseen) + ") and runs");
      break;
  }
}

std::vector<ReconcileEvent> Reconciler::RunOnce() {
  std::vector<ReconcileEvent> events;
  for (int d = 0; d < devices_; ++d) {
    // Each process's reservations just before the device is asked: the device's list is read
    // outside the lock, and a free in between (the driver's first, then the shim's uncharge) would
    // otherwise show as bytes the shim did not see. A reservation always precedes the device's
    // bytes and outlives them, so the larger of this and the reading after the list covers them.
    std::vector<std::pair<uint32_t, uint64_t>> reserved_before(ledger::kMaxProcesses);
    registry_->WithLedger([&](const ledger::MemoryLedger& ledger) {
      for (int p = 0; p < ledger::kMaxProcesses; ++p) {
        reserved_before[static_cast<size_t>(p)] = {
            ledger.book().processes[p].generation.load(),
            ledger.process(static_cast<uint32_t>(p)).used[d].load()};
      }
    });
    Result<std::vector<DeviceProcess>> listed = lister_(d);
    if (!listed.ok()) {
      if (list_error_reported_.insert(d).second && options_.log) {
        options_.log("tesserad: reconcile: GPU " + std::to_string(d) + ": " + listed.error() +
                     "; memory the shim cannot see is not charged until this works");
      }
      continue;
    }
    list_error_reported_.erase(d);
    std::vector<ReconcileEvent> to_kill;  // kKilled events, for the processes still to kill
    // The device's busy time per process, where it reports one and the GPU's policy measures.
    std::optional<std::vector<DeviceProcess>> busy;
    if (options_.busy && (!options_.measured || options_.measured(d))) {
      if (auto b = options_.busy(d); b.ok()) busy = std::move(*b);
    }
    // Processes on the device that hold no process slot: whose they are, by their cgroups, is
    // read from /proc outside the registry's lock.
    std::set<int32_t> registered;
    registry_->WithLedger([&](const ledger::MemoryLedger& ledger) {
      for (int p = 0; p < ledger::kMaxProcesses; ++p) {
        const ledger::LedgerBook::Process& ps = ledger.book().processes[p];
        if (ps.state.load() == ledger::kLive) registered.insert(ps.host_pid.load());
      }
    });
    std::set<int32_t> strangers;
    for (const DeviceProcess& dp : *listed) {
      if (registered.count(dp.pid) == 0 && !Exempt(dp.pid)) strangers.insert(dp.pid);
    }
    for (const DeviceProcess& dp : busy ? *busy : std::vector<DeviceProcess>{}) {
      if (registered.count(dp.pid) == 0 && !Exempt(dp.pid)) strangers.insert(dp.pid);
    }
    const std::map<int32_t, std::string> owner = options_.container_of && !strangers.empty()
                                                     ? options_.container_of(strangers)
                                                     : std::map<int32_t, std::string>{};
    std::set<int32_t> unregistered_now;
    registry_->WithLedger([&](ledger::MemoryLedger& ledger) {
      // Who is who comes from the daemon's book; what a process holds, from its counters.
      const ledger::LedgerBook& book = ledger.book();
      std::map<int32_t, int> slot_of_pid;
      for (int p = 0; p < ledger::kMaxProcesses; ++p) {
        const ledger::LedgerBook::Process& ps = book.processes[p];
        if (ps.state.load() == ledger::kLive) slot_of_pid[ps.host_pid.load()] = p;
      }
      // Processes that never registered, charged to the container their cgroup is in.
      std::map<int32_t, uint32_t> attributed;
      for (const auto& [pid, id] : owner) {
        if (slot_of_pid.count(pid) != 0) continue;  // registered since
        const int c = ledger.FindContainer(id);
        if (c >= 0) attributed[pid] = static_cast<uint32_t>(c);
      }
      std::vector<uint64_t> unseen(ledger::kMaxContainers, 0);
      std::vector<std::vector<int32_t>> pids(ledger::kMaxContainers);
      for (const DeviceProcess& dp : *listed) {
        auto found = slot_of_pid.find(dp.pid);
        if (found == slot_of_pid.end()) {
          if (Exempt(dp.pid)) continue;
          if (auto a = attributed.find(dp.pid); a != attributed.end()) {
            // Everything it holds went around the shim.
            unseen[a->second] = SaturatingAdd(unseen[a->second], dp.bytes);
            pids[a->second].push_back(dp.pid);
            const std::string id = book.containers[a->second].id;
            if (attributed_reported_.insert({d, dp.pid, id}).second) {
              events.push_back({ReconcileEvent::Kind::kAttributed, d, id, dp.pid, 0, dp.bytes, 0});
            }
            continue;
          }
          unregistered_now.insert(dp.pid);
          if (dp.bytes == 0) continue;  // a context and nothing in it
          if (unregistered_reported_.insert({d, dp.pid}).second) {
            ReconcileEvent e{ReconcileEvent::Kind::kUnregistered, d, "", dp.pid, 0, dp.bytes, 0};
            events.push_back(e);
          }
          if (options_.unattributed == config::UnattributedAction::kKill) {
            ReconcileEvent kill{ReconcileEvent::Kind::kKilled, d, "", dp.pid, 0, 0, 0};
            kill.unattributed = true;
            to_kill.push_back(kill);
          }
          continue;
        }
        const uint32_t c = book.processes[found->second].container.load();
        const auto& [generation, before] = reserved_before[static_cast<size_t>(found->second)];
        uint64_t reserved = ledger.process(found->second).used[d].load();
        if (generation == book.processes[found->second].generation.load()) {
          reserved = std::max(reserved, before);
        }
        if (dp.bytes > reserved) unseen[c] = SaturatingAdd(unseen[c], dp.bytes - reserved);
        pids[c].push_back(dp.pid);
      }
      for (int c = 0; c < ledger::kMaxContainers; ++c) {
        const ledger::LedgerBook::Container& slot = book.containers[c];
        if (slot.state.load() != ledger::kLive) continue;
        const uint32_t cu = static_cast<uint32_t>(c);
        ledger.SetUnseen(cu, d, unseen[c]);
        const uint64_t reserved = ledger.Used(cu, d);
        const uint64_t limit = slot.limit[d].load();
        const bool over = limit != ledger::kUnlimited && unseen[c] > 0 &&
                          SaturatingAdd(reserved, unseen[c]) > limit;
        const auto key = std::make_tuple(d, c, slot.generation.load());
        const bool was = over_.count(key) != 0;
        ReconcileEvent e{ReconcileEvent::Kind::kOverLimit,
                         d,
                         std::string(slot.id),
                         0,
                         reserved,
                         unseen[c],
                         limit};
        if (over && !was) {
          over_.insert(key);
          events.push_back(e);
        } else if (!over && was) {
          over_.erase(key);
          e.kind = ReconcileEvent::Kind::kBackUnder;
          events.push_back(e);
        }
        if (over && options_.action == config::OverLimitAction::kKill) {
          for (int32_t pid : pids[c]) {
            to_kill.push_back({ReconcileEvent::Kind::kKilled, d, e.container, pid, 0, 0, 0});
          }
        }
      }
      if (busy) CheckGpuTime(ledger, d, *busy, attributed, &events, &to_kill);
      // Forget containers that went away while over their limit.
      for (auto it = over_.begin(); it != over_.end();) {
        const auto [dev, c, generation] = *it;
        const ledger::LedgerBook::Container& slot = book.containers[c];
        const bool gone =
            slot.state.load() != ledger::kLive || slot.generation.load() != generation;
        it = dev == d && gone ? over_.erase(it) : std::next(it);
      }
    });
    for (auto it = unregistered_reported_.begin(); it != unregistered_reported_.end();) {
      const bool stale = it->first == d && unregistered_now.count(it->second) == 0;
      it = stale ? unregistered_reported_.erase(it) : std::next(it);
    }
    for (auto it = attributed_reported_.begin(); it != attributed_reported_.end();) {
      const bool stale = std::get<0>(*it) == d && owner.count(std::get<1>(*it)) == 0;
      it = stale ? attributed_reported_.erase(it) : std::next(it);
    }
    for (auto it = unregistered_busy_reported_.begin(); it != unregistered_busy_reported_.end();) {
      const bool stale = it->first == d && strangers.count(it->second) == 0;
      it = stale ? unregistered_busy_reported_.erase(it) : std::next(it);
    }
    // One signal per process, whichever rule (memory, GPU time, unattributed) asked for it.
    std::set<int32_t> signalled;
    for (const ReconcileEvent& kill : to_kill) {
      if (kill.pid <= 0 || !signalled.insert(kill.pid).second) continue;
      if (options_.signal(kill.pid, SIGKILL) == 0) events.push_back(kill);
    }
  }
  // The block flag follows the state every pass, over every GPU (a container over on one GPU stays
  // blocked while another GPU's pass finds it under), so a restarted daemon (or one whose action
  // changed) never leaves a container blocked that is over nowhere.
  registry_->WithLedger([&](ledger::MemoryLedger& ledger) {
    std::set<std::pair<int, uint32_t>> over;  // (container slot, generation)
    if (options_.action == config::OverLimitAction::kBlock) {
      for (const auto& [d, c, generation] : over_) over.insert({c, generation});
      for (const auto& [d, c, generation] : gpu_time_over_) over.insert({c, generation});
    }
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      const ledger::LedgerBook::Container& slot = ledger.book().containers[c];
      if (slot.state.load() != ledger::kLive) continue;
      const bool block = over.count({c, slot.generation.load()}) != 0;
      ledger.SetFlags(static_cast<uint32_t>(c), block ? ledger::kContainerBlocked : 0,
                      block ? 0 : ledger::kContainerBlocked);
    }
  });
  for (const ReconcileEvent& e : events) Log(e);
  return events;
}

void Reconciler::CheckGpuTime(ledger::MemoryLedger& ledger, int d,
                              const std::vector<DeviceProcess>& busy,
                              const std::map<int32_t, uint32_t>& attributed,
                              std::vector<ReconcileEvent>* events,
                              std::vector<ReconcileEvent>* to_kill) {
  const ledger::LedgerBook& book = ledger.book();
  std::map<int32_t, uint64_t> device_ns;  // per host pid
  for (const DeviceProcess& dp : busy)
    device_ns[dp.pid] = SaturatingAdd(device_ns[dp.pid], dp.bytes);
  std::vector<uint64_t> seen_by_device(ledger::kMaxContainers, 0);
  std::vector<uint64_t> measured_by_gate(ledger::kMaxContainers, 0);
  std::vector<std::vector<int32_t>> pids(ledger::kMaxContainers);
  std::set<int32_t> registered;
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    if (book.processes[p].state.load() == ledger::kLive) {
      registered.insert(book.processes[p].host_pid.load());
    }
  }
  // Processes that never registered: a container's by its cgroup (no gate measured any of their
  // time), or nobody's (the unattributed action).
  for (const auto& [pid, ns] : device_ns) {
    if (registered.count(pid) != 0 || Exempt(pid) || ns == 0) continue;
    if (auto a = attributed.find(pid); a != attributed.end()) {
      seen_by_device[a->second] = SaturatingAdd(seen_by_device[a->second], ns);
      pids[a->second].push_back(pid);
      continue;
    }
    if (unregistered_busy_reported_.insert({d, pid}).second) {
      events->push_back({ReconcileEvent::Kind::kUnregistered, d, "", pid, 0, 0, ns});
    }
    if (options_.unattributed == config::UnattributedAction::kKill) {
      ReconcileEvent kill{ReconcileEvent::Kind::kKilled, d, "", pid, 0, 0, 0};
      kill.unattributed = true;
      to_kill->push_back(kill);
    }
  }
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::LedgerBook::Process& entry = book.processes[p];
    Seen& seen = seen_gpu_ns_[static_cast<size_t>(p) * ledger::kMaxDevices + d];
    if (entry.state.load() != ledger::kLive) {
      seen.known = false;
      continue;
    }
    const uint32_t c = entry.container.load();
    // What its gates measured, as the arbiter placed it on the device's timeline (time spent
    // queued behind other containers' work taken out: LedgerBook::Process::gate_gpu_ns).
    const uint64_t now = entry.gate_gpu_ns[d].load();
    const uint32_t generation = entry.generation.load();
    // A process first seen this pass has no interval yet: its time counts from the next one.
    uint64_t delta = 0;
    if (seen.known && seen.generation == generation) {
      delta = now > seen.gpu_ns ? now - seen.gpu_ns : 0;
      auto found = device_ns.find(entry.host_pid.load());
      if (found != device_ns.end()) {
        seen_by_device[c] = SaturatingAdd(seen_by_device[c], found->second);
      }
    }
    measured_by_gate[c] = SaturatingAdd(measured_by_gate[c], delta);
    seen = {generation, now, true};
    pids[c].push_back(entry.host_pid.load());
  }
  const double slack = static_cast<double>(options_.gpu_time_slack.count());
  // What the device saw beyond every gate together (see device_gpu_time_balance_).
  double unmeasured = 0;
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    if (book.containers[c].state.load() != ledger::kLive) continue;
    unmeasured += static_cast<double>(seen_by_device[c]) - static_cast<double>(measured_by_gate[c]);
  }
  double& device_balance = device_gpu_time_balance_[static_cast<size_t>(d)];
  device_balance = device_balance / 2 + unmeasured;
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::LedgerBook::Container& slot = book.containers[c];
    if (slot.state.load() != ledger::kLive) continue;
    const auto key = std::make_tuple(d, c, slot.generation.load());
    const double difference =
        static_cast<double>(seen_by_device[c]) - static_cast<double>(measured_by_gate[c]);
    double& balance = gpu_time_balance_[key];
    balance = balance / 2 + difference;
    const bool beyond = balance > slack && device_balance > slack;
    const bool was = gpu_time_over_.count(key) != 0;
    const bool over = beyond && (was || gpu_time_pending_.count(key) != 0);
    if (beyond && !over) gpu_time_pending_.insert(key);
    if (!beyond) gpu_time_pending_.erase(key);
    ReconcileEvent e{ReconcileEvent::Kind::kGpuTimeUnseen,
                     d,
                     std::string(slot.id),
                     0,
                     measured_by_gate[c],
                     seen_by_device[c],
                     0};
    if (over) {
      // Charged while over: the share pays for the time the gate did not grant.
      // No more than the device saw beyond all the gates: the rest was a neighbour's to pay.
      const double owed = std::min(difference, unmeasured);
      const uint64_t charge = owed > 0 ? static_cast<uint64_t>(owed) : 0;
      ledger.AddUnseenGpuTime(static_cast<uint32_t>(c), d, charge);
      e.limit = charge;
      if (!was) {
        gpu_time_over_.insert(key);
        events->push_back(e);
      }
      if (options_.action == config::OverLimitAction::kKill) {
        for (int32_t pid : pids[c]) {
          ReconcileEvent kill{ReconcileEvent::Kind::kKilled, d, e.container, pid, 0, 0, 0};
          kill.gpu_time = true;
          to_kill->push_back(kill);
        }
      }
    } else if (was) {
      gpu_time_over_.erase(key);
      e.kind = ReconcileEvent::Kind::kGpuTimeBackInLine;
      events->push_back(e);
    }
  }
  // Forget containers that went away.
  for (auto it = gpu_time_balance_.begin(); it != gpu_time_balance_.end();) {
    const auto [dev, c, generation] = it->first;
    const ledger::LedgerBook::Container& slot = book.containers[c];
    const bool gone = slot.state.load() != ledger::kLive || slot.generation.load() != generation;
    if (dev == d && gone) {
      gpu_time_over_.erase(it->first);
      gpu_time_pending_.erase(it->first);
      it = gpu_time_balance_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace tessera::daemon
