// ComputeService implementation: the arbiter thread's loop over the shared ledger.
#include "daemon/compute.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "ipc/futex.h"

namespace tessera::daemon {
namespace {

using ipc::MonotonicNs;
using tessera::ArbiterPolicy;

constexpr uint64_t kIdleBeatNs = 50'000'000;    // the longest the thread sleeps
constexpr uint64_t kDrainPollNs = 200'000;      // re-check a drain this often (besides wakes)
constexpr uint64_t kBeatFreshNs = 100'000'000;  // a process's sampler beat counts this long
constexpr uint64_t kLatePassNs = 100'000'000;   // a pass this late is logged
constexpr uint64_t kHighPriorityBoundNs = 500'000;
// The work a holder may keep queued ahead of the device when no high-priority container is
// present: quota_min, but at least 4 ms, so a launcher woken a few milliseconds late (a loaded
// node, a CPU-throttled pod) still finds the device busy. A hand-off waits for this queue to drain,
// which keeps the device busy meanwhile; only the high-priority lane needs a shorter one.
constexpr uint64_t kInflightFloorNs = 4'000'000;
constexpr uint64_t kNativeBoundNs = 1'000'000'000;
// The next holder is let in this long before the previous one's queued work is expected to end:
// enough for this thread's publication and the next launcher's wake-up on a loaded node.
constexpr uint64_t kHandoffLeadNs = 200'000;
// The same where the previous holder's queue is one launch it made before going quiet (a tenant
// that synchronises after each kernel, or a high-priority request): its end is known to the
// kernel, and the wake-ups on the way (its sampler's, this thread's, the next launcher's) are
// all that keep the GPU idle; a high-priority request arriving meanwhile waits for at most this
// and one best-effort kernel. A revoked saturating holder's drain keeps the shorter lead: the
// next holder's queue adds to it, and a high-priority request would wait for both.
constexpr uint64_t kTailLeadNs = 500'000;
// An interval may end this far after the arbiter's now (a gate's calibration error) and is placed
// no later; time a process reports without intervals is charged at most this much per pass.
constexpr uint64_t kFutureSlackNs = 10'000'000;
constexpr uint64_t kMaxPlainChargeNs = 10'000'000'000;
// The reported figures (Shares, the book's gate_gpu_ns) take a GPU's timeline as settled this
// long after it ran: by then the samplers have reported what ran, on a loaded node too, so the
// figures are final and counters never go down. The arbiter uses it at once.
constexpr uint64_t kSettleNs = 50'000'000;
constexpr uint64_t kSettlePassNs = 10'000'000;

uint64_t ToNs(Nanos n) { return static_cast<uint64_t>(std::max<int64_t>(n.count(), 0)); }

// Whether `ps` published that its queued work on GPU `d` ends within `lead` (it launches no more:
// see ProcessCounters::idle_at_ns). A later end lowers *wake to when it is due.
bool Ending(const ledger::ProcessCounters& ps, int d, uint64_t now, uint64_t* wake, uint64_t lead) {
  const uint64_t idle_at = ps.idle_at_ns[d].load(std::memory_order_acquire);
  if (idle_at == 0) return false;
  if (idle_at <= now + lead) return true;
  *wake = std::min(*wake, idle_at - lead);
  return false;
}

}  // namespace

Result<std::unique_ptr<ComputeService>> ComputeService::Create(const ledger::MemoryLedger& ledger,
                                                               const ComputeOptions& options) {
  if (Status s = arbiter::ValidateArbiterConfig(options.defaults); !s.ok()) return s;
  std::unique_ptr<ComputeService> service(new ComputeService(ledger, options));
  return service;
}

ComputeService::ComputeService(const ledger::MemoryLedger& ledger, const ComputeOptions& options)
    : layout_(ledger.layout()),
      segments_(ledger.segments()),
      exchange_(&ledger.exchange()),
      book_(&ledger.book()),
      compute_book_(&ledger.compute_book()),
      options_(options),
      devices_(static_cast<size_t>(ledger.device_count())) {
  const int devices = ledger.device_count();
  for (Device& d : devices_) {
    Result<arbiter::Arbiter> a = arbiter::Arbiter::Create(&clock_, options.defaults);
    d.arbiter.emplace(std::move(a).value());  // validated in Create
    for (arbiter::UsageWindow& w : d.ran) w.SetLength(options.defaults.window);
  }
  const char* trace = std::getenv("TESSERA_TRACE_ARBITER");
  trace_ = trace != nullptr && *trace == '1';
  layout_->gate.loss_timeout_ns.store(options.loss_timeout_ns);
  // A restarted daemon takes the live processes' GPU time as charged so far: their totals since
  // they started are not this window's usage. A free slot's total is a dead process's: the next
  // process there starts from zero in the same generation (it is bumped when a slot is freed), so
  // it is not taken as seen, or that process would run uncharged up to the dead one's total.
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::ProcessCounters& ps = Process(p);
    const bool live = book_->processes[p].state.load() == ledger::kLive;
    process_generation_[p] = book_->processes[p].generation.load();
    process_tracked_[p] = live;
    for (int d = 0; d < ledger::kMaxDevices; ++d) {
      process_seen_ns_[static_cast<size_t>(p) * ledger::kMaxDevices + d] =
          live ? ps.gpu_ns[d].load() : 0;
    }
    ring_next_[p] = live ? ps.interval_head.load() : 0;
  }
  layout_->gate.arbiter_pid.store(static_cast<uint32_t>(getpid()));
  // A restarted daemon starts from no grant: whoever held the token under the previous one asks
  // again (its launches wait briefly) rather than keeping a grant nobody accounts for.
  for (int d = 0; d < devices; ++d) {
    for (auto& word : layout_->gate.devices[d].lane_open) word.store(0);
    for (auto& word : layout_->gate.devices[d].may_run) word.store(0);
    Publish(d, options.defaults.policy != ArbiterPolicy::kNative);
  }
}

ComputeService::~ComputeService() { Stop(); }

void ComputeService::Start() {
  if (thread_.joinable()) return;
  stop_.store(false);
  thread_ = std::thread([this] { Loop(); });
}

void ComputeService::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  exchange_->demand_seq.fetch_add(1);
  ipc::FutexWakeAll(&exchange_->demand_seq);
  thread_.join();
}

void ComputeService::RunOnce() {
  std::lock_guard<std::mutex> lock(mu_);
  (void)Step(MonotonicNs());
}

arbiter::ArbiterConfig ComputeService::Config(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_.at(static_cast<size_t>(device)).arbiter->config();
}

Status ComputeService::Configure(int device, const arbiter::ArbiterConfig& config) {
  std::lock_guard<std::mutex> lock(mu_);
  if (device < 0 || device >= device_count()) {
    return Status::Error("GPU " + std::to_string(device) + " does not exist (this node has " +
                         std::to_string(device_count()) + ")");
  }
  Device& dev = devices_[static_cast<size_t>(device)];
  if (Status s = dev.arbiter->Configure(config); !s.ok()) return s;
  for (arbiter::UsageWindow& w : dev.ran) w.SetLength(config.window);
  dev.next_ns = 0;
  exchange_->demand_seq.fetch_add(1);
  ipc::FutexWakeAll(&exchange_->demand_seq);
  return Status::Ok();
}

Status ComputeService::CanAdmit(const std::vector<int>& devices, int weight) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int d : devices) {
    if (d < 0 || d >= device_count()) continue;
    const arbiter::Arbiter& a = *devices_[static_cast<size_t>(d)].arbiter;
    if (weight > a.config().max_inst) {
      return Status::Error("weight=" + std::to_string(weight) + " exceeds GPU " +
                           std::to_string(d) +
                           "'s max_inst=" + std::to_string(a.config().max_inst));
    }
    if (weight > a.free_weight()) {
      return Status::Error(
          "GPU " + std::to_string(d) + " is full: max_inst=" + std::to_string(a.config().max_inst) +
          ", free_weight=" + std::to_string(a.free_weight()) + ", this container needs weight " +
          std::to_string(weight) + " (raise it with `tessera ctl set " + std::to_string(d) +
          "/max_inst N`)");
    }
  }
  return Status::Ok();
}

DeviceShares ComputeService::Shares(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceShares out;
  if (device < 0 || device >= device_count()) return out;
  const Device& dev = devices_[static_cast<size_t>(device)];
  arbiter::Arbiter& a = const_cast<arbiter::Arbiter&>(*dev.arbiter);  // UsedInWindow reads
  const arbiter::ArbiterConfig& config = a.config();
  out.config = config;
  // The figures run to where the arbiter thread last settled the timeline (kSettleNs before its
  // last pass, which comes at least every kSettlePassNs while anything is left to settle).
  const Nanos until = Nanos(static_cast<int64_t>(dev.timeline.settled_until()));
  out.gpu_time_until_ns = ToNs(until);
  out.free_weight = a.free_weight();
  int weight_sum = 0;
  int active = 0;
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    if (!dev.present.test(c)) continue;
    weight_sum += members_[c].spec.weight;
    if (dev.pending.test(c)) ++active;
  }
  const double window = static_cast<double>(config.window.count());
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    if (!dev.present.test(c)) continue;
    const arbiter::ContainerSpec& spec = members_[c].spec;
    ContainerShare share;
    share.container = c;
    share.weight = spec.weight;
    share.high_priority = spec.high_priority;
    share.holder = dev.holder == c;
    share.pending = dev.pending.test(c);
    share.grants = dev.grants[static_cast<size_t>(c)];
    const double core = spec.core_limit.value();
    switch (config.policy) {
      case ArbiterPolicy::kFair:
        share.target = std::min(100.0 / config.max_inst, core);
        break;
      case ArbiterPolicy::kPreemptive:
      case ArbiterPolicy::kWeak:
        share.target = std::min(core, 100.0 / std::max(active, 1));
        if (!share.pending) share.target = 0;
        break;
      case ArbiterPolicy::kWeightedPreemptive:
        share.target = std::min(core, 100.0 * spec.weight / std::max(weight_sum, 1));
        break;
      case ArbiterPolicy::kFixedPercentage:
        share.target = core < 100 ? core : 100.0 * spec.weight / config.max_inst;
        break;
      case ArbiterPolicy::kNative:
        break;
    }
    // What it ran (not what the arbiter's order was charged: no deadline charges or credits).
    const Nanos ran =
        const_cast<arbiter::UsageWindow&>(dev.ran[static_cast<size_t>(c)]).Used(until);
    share.achieved = 100.0 * static_cast<double>(ran.count()) / window;
    const ledger::LedgerBook::Container& slot = book_->containers[c];
    share.gpu_seconds =
        static_cast<double>(slot.gate_gpu_ns[device].load() + slot.unseen_gpu_ns[device].load()) /
        1e9;
    out.containers.push_back(share);
  }
  return out;
}

void ComputeService::Loop() {
  // Timed waits end within 5 us rather than the default 50: hand-offs are timed to 200 us.
  prctl(PR_SET_TIMERSLACK, 5'000UL, 0UL, 0UL, 0UL);  // this thread only
  uint64_t due = 0;                                  // when the last wait was to end at the latest
  while (!stop_.load()) {
    const uint32_t seq = exchange_->demand_seq.load(std::memory_order_acquire);
    const uint64_t woke = MonotonicNs();
    uint64_t next;
    uint64_t locked;
    {
      std::lock_guard<std::mutex> lock(mu_);
      locked = MonotonicNs();
      next = Step(locked);
    }
    const uint64_t after = MonotonicNs();
    // A pass far later than due stalls every launcher waiting for the token: say so.
    if (due != 0 && after > due + kLatePassNs) {
      std::fprintf(stderr,
                   "tesserad: arbiter: a pass ended %llu ms after it was due at %.3f s "
                   "(CLOCK_MONOTONIC; woke %llu ms late, waited %llu ms for its lock, ran %llu "
                   "ms)\n",
                   static_cast<unsigned long long>((after - due) / 1'000'000),
                   static_cast<double>(due) / 1e9,
                   static_cast<unsigned long long>((woke > due ? woke - due : 0) / 1'000'000),
                   static_cast<unsigned long long>((locked - woke) / 1'000'000),
                   static_cast<unsigned long long>((after - locked) / 1'000'000));
    }
    const uint64_t sleep = next > after ? std::min(next - after, kIdleBeatNs) : 0;
    due = after + sleep;
    if (sleep > 0) ipc::FutexWait(&exchange_->demand_seq, seq, sleep);
  }
}

void ComputeService::SyncContainers() {
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::LedgerBook::Container& slot = book_->containers[c];
    const bool live = slot.state.load() == ledger::kLive && slot.process_count.load() > 0;
    const uint32_t generation = slot.generation.load();
    Member& m = members_[c];
    arbiter::ContainerSpec spec;
    if (live) {
      const uint32_t core = std::clamp<uint32_t>(slot.core_percent.load(), 1, 100);
      spec.core_limit = *Percent::FromInt(static_cast<int>(core));
      spec.weight = static_cast<int>(std::clamp<uint32_t>(slot.weight.load(), 1, 256));
      spec.high_priority = slot.high_priority.load() != 0;
    }
    const bool replaced = m.known && m.generation != generation;
    for (size_t d = 0; d < devices_.size(); ++d) {
      Device& dev = devices_[d];
      arbiter::Arbiter& a = *dev.arbiter;
      if (dev.present.test(c) && (!live || replaced)) {
        (void)a.RemoveContainer(c);
        dev.ran[static_cast<size_t>(c)].Clear();
        dev.present.reset(c);
        dev.pending.reset(c);
        dev.grants[static_cast<size_t>(c)] = 0;
        dev.next_ns = 0;
      }
      if (!live) continue;
      if (!dev.present.test(c)) {
        arbiter::ContainerSpec admitted = spec;
        admitted.weight = std::min(spec.weight, a.config().max_inst);
        if (Status s = a.AddContainer(c, admitted); s.ok()) {
          dev.present.set(c);
          dev.next_ns = 0;
        } else if (!m.refused_logged) {
          std::fprintf(stderr, "tesserad: GPU %zu cannot schedule container %s: %s\n", d, slot.id,
                       s.message().c_str());
          m.refused_logged = true;
        }
      } else if (spec.weight != m.spec.weight || spec.high_priority != m.spec.high_priority ||
                 spec.core_limit.value() != m.spec.core_limit.value()) {
        if (a.UpdateContainer(c, spec).ok()) dev.next_ns = 0;
      }
    }
    m.known = live;
    m.generation = generation;
    if (live) m.spec = spec;
    if (!live) m.refused_logged = false;
  }
}

void ComputeService::Attribute(int p, uint32_t c, int d, uint64_t end, uint64_t ns) {
  compute_book_->processes[p].gate_gpu_ns[d].fetch_add(ns, std::memory_order_relaxed);
  compute_book_->containers[c].gate_gpu_ns[d].fetch_add(ns, std::memory_order_relaxed);
  devices_[static_cast<size_t>(d)].ran[c].Add(Nanos(static_cast<int64_t>(end)),
                                              Nanos(static_cast<int64_t>(ns)));
}

void ComputeService::ReadIntervals(int p, uint32_t c, uint64_t now,
                                   std::vector<std::vector<int64_t>>* charge) {
  const ledger::ProcessCounters& ps = Process(p);
  const int devices = device_count();
  uint64_t* accounted = &process_seen_ns_[static_cast<size_t>(p) * ledger::kMaxDevices];
  // The totals first: the gate adds to gpu_ns after it publishes the interval (Record in
  // compute_gate.cc), so every nanosecond seen here has its interval in the ring read below.
  uint64_t total[ledger::kMaxDevices] = {};
  for (int d = 0; d < devices; ++d) total[d] = ps.gpu_ns[d].load(std::memory_order_acquire);
  const uint64_t head = ps.interval_head.load(std::memory_order_acquire);
  uint64_t& next = ring_next_[static_cast<size_t>(p)];
  if (head < next) next = head;  // a new process (or a rewritten head): nothing to read
  if (head - next > ledger::kIntervalRing) next = head - ledger::kIntervalRing;
  auto plain = [&](int d, uint64_t ns) {
    // Time with no interval to place it (the ring lapped, or a gate that reports only totals):
    // charged as it is, at most kMaxPlainChargeNs a pass from one process (a forged total moves
    // its own books only, and never past what they can hold).
    ns = std::min<uint64_t>(ns, kMaxPlainChargeNs);
    (*charge)[static_cast<size_t>(d)][c] += static_cast<int64_t>(ns);
    Attribute(p, c, d, now - kSettleNs, ns);  // settled at once, where the reported window ends
  };
  for (; next < head; ++next) {
    const ledger::GpuInterval& e = ps.intervals[next % ledger::kIntervalRing];
    const uint32_t seq = e.seq.load(std::memory_order_acquire);
    const uint64_t start = e.start_ns.load(std::memory_order_relaxed);
    const uint64_t end = e.end_ns.load(std::memory_order_relaxed);
    const uint64_t sum = e.total_ns.load(std::memory_order_relaxed);
    const uint32_t d = e.device.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    // Rewritten meanwhile (the ring lapped): its time is charged from the totals below.
    if (seq != e.seq.load(std::memory_order_relaxed) || seq != static_cast<uint32_t>(next + 1)) {
      continue;
    }
    if (d >= static_cast<uint32_t>(devices)) continue;
    Device& dev = devices_[d];
    // Charged once its container is on the GPU's arbiter (a process can go live between
    // SyncContainers and here); until then its time waits in the totals.
    if (!dev.present.test(c) || end <= start || sum <= accounted[d]) continue;
    const uint64_t unread = sum - accounted[d];
    const uint64_t len = end - start;
    if (unread > len) plain(static_cast<int>(d), unread - len);  // lapped before this one
    // Placed no later than now (a gate's clock cannot run ahead by more than its calibration).
    const uint64_t to = std::min(end, now + kFutureSlackNs);
    const uint64_t own = std::min({len, unread, to});
    deltas_.clear();
    dev.timeline.Add(p, static_cast<int>(c), to - own, to, &deltas_);
    dev.placed_until_ns[c] = std::max(dev.placed_until_ns[c], to);
    for (const arbiter::DeviceTimeline::Delta& delta : deltas_) {
      const uint32_t owner = static_cast<uint32_t>(delta.container) % ledger::kMaxContainers;
      (*charge)[d][owner] += delta.ns;  // for the arbiter at once; reported once settled
    }
    accounted[d] = sum;
  }
  for (int d = 0; d < devices; ++d) {
    if (!devices_[static_cast<size_t>(d)].present.test(c) || total[d] <= accounted[d]) continue;
    plain(d, total[d] - accounted[d]);
    accounted[d] = total[d];
  }
}

bool ComputeService::Draining(const std::bitset<ledger::kMaxContainers>& containers,
                              const std::bitset<ledger::kMaxContainers>& tails, int d, uint64_t now,
                              uint64_t* wake, uint64_t* end) const {
  if (containers.none()) return false;
  bool draining = false;
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::LedgerBook::Process& entry = book_->processes[p];
    if (entry.state.load() != ledger::kLive || !containers.test(entry.container.load())) continue;
    const ledger::ProcessCounters& ps = Process(p);
    const uint64_t beat = ps.beat_ns.load();
    if ((ps.busy_mask.load() & (1u << d)) == 0 || beat + kBeatFreshNs <= now) continue;
    const uint64_t idle_at = ps.idle_at_ns[d].load(std::memory_order_acquire);
    if (idle_at > now) *end = std::max(*end, idle_at);
    const bool tail = tails.test(entry.container.load() % ledger::kMaxContainers);
    if (!Ending(ps, d, now, wake, tail ? kTailLeadNs : kHandoffLeadNs)) draining = true;
  }
  return draining;
}

uint64_t ComputeService::Step(uint64_t now) {
  layout_->gate.beat_ns.store(now, std::memory_order_release);
  SyncContainers();
  const int devices = device_count();
  // Charges and demand from every live process.
  std::vector<std::vector<int64_t>> charge(static_cast<size_t>(devices),
                                           std::vector<int64_t>(ledger::kMaxContainers));
  std::vector<std::vector<uint64_t>> hint(static_cast<size_t>(devices),
                                          std::vector<uint64_t>(ledger::kMaxContainers));
  std::vector<std::bitset<ledger::kMaxContainers>> pending(static_cast<size_t>(devices));
  // Containers with work beyond the hand-off lead: waiting at the gate, or queued work not about
  // to end. A pending container outside it is at its tail (see Arbiter::Yield).
  std::vector<std::bitset<ledger::kMaxContainers>> beyond_tail(static_cast<size_t>(devices));
  // Per device and container: where its processes said their queued work ends (idle_at_ns).
  std::vector<std::vector<uint64_t>> queue_end(static_cast<size_t>(devices),
                                               std::vector<uint64_t>(ledger::kMaxContainers));
  std::vector<uint64_t> wake(static_cast<size_t>(devices), UINT64_MAX);  // see Ending
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::ProcessCounters& ps = Process(p);
    // State before generation: a slot seen live with a generation other than the one last seen
    // live holds a new process, whose counters started from zero (AddProcess zeroes them before
    // it marks the slot live). The generation is noted only while live, so a slot first seen
    // free (reclaimed) and then live again is still recognised as new.
    const ledger::LedgerBook::Process& entry = book_->processes[p];
    const bool live = entry.state.load() == ledger::kLive;
    const uint32_t generation = entry.generation.load();
    uint64_t* seen = &process_seen_ns_[static_cast<size_t>(p) * ledger::kMaxDevices];
    if (live && (!process_tracked_[p] || generation != process_generation_[p])) {
      process_generation_[p] = generation;
      process_tracked_[p] = true;
      std::fill(seen, seen + ledger::kMaxDevices, 0);
      ring_next_[p] = 0;
    }
    // The process last seen live here, just reclaimed: its last report is still charged below.
    const bool just_reclaimed =
        !live && process_tracked_[p] && generation == process_generation_[p] + 1;
    if (!live && !just_reclaimed) continue;
    const uint32_t c = entry.container.load() % ledger::kMaxContainers;
    ReadIntervals(p, c, now, &charge);
    if (!live) continue;
    const uint64_t beat = ps.beat_ns.load();
    const bool fresh = beat + kBeatFreshNs > now;
    const uint32_t busy = ps.busy_mask.load();
    for (int d = 0; d < devices; ++d) {
      if (!devices_[static_cast<size_t>(d)].present.test(c)) continue;
      if (trace_ && d == 0) {
        const uint64_t idle_at = ps.idle_at_ns[0].load();
        if (idle_at != trace_idle_at_[static_cast<size_t>(p)]) {
          trace_idle_at_[static_cast<size_t>(p)] = idle_at;
          std::fprintf(stderr, "trace %llu process %d container %u idle_at %llu busy %u\n",
                       static_cast<unsigned long long>(now / 1000), p, c,
                       static_cast<unsigned long long>(idle_at / 1000), busy);
        }
      }
      // A process counts only while it beats: a stopped one (SIGSTOP, a debugger) neither waits
      // nor works, and must not keep the token or the arbiter's attention. A high-priority one
      // whose work is about to end stops counting then, so the token goes on in time; a
      // best-effort one still counts (it is likely between two launches), but its container is
      // at its tail unless another of its processes has work beyond the lead.
      const bool busy_here = (busy & (1u << d)) != 0;
      const bool ending =
          busy_here && Ending(ps, d, now, &wake[static_cast<size_t>(d)], kTailLeadNs);
      const bool working = busy_here && !(members_[c].spec.high_priority && ending);
      const bool waits = ps.waiting[d].load() > 0;
      if (fresh && (waits || working)) pending[d].set(c);
      if (fresh && (waits || (busy_here && !ending))) beyond_tail[d].set(c);
      if (ending) {
        queue_end[d][c] = std::max(queue_end[d][c], ps.idle_at_ns[d].load());
      }
      hint[d][c] = std::max(hint[d][c], ps.quota_hint_ns[d].load());
    }
  }
  if (trace_ && now >= trace_printed_ns_ + 1'000'000'000) {
    trace_printed_ns_ = now;
    std::string line = "trace charged (ms)";
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      if (trace_charged_[static_cast<size_t>(c)] == 0) continue;
      line += " " + std::to_string(c) + "=" +
              std::to_string(trace_charged_[static_cast<size_t>(c)] / 1'000'000) + "/" +
              std::to_string(trace_returns_[static_cast<size_t>(c)]);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  uint64_t next = now + kIdleBeatNs;
  for (int d = 0; d < devices; ++d) {
    Device& dev = devices_[static_cast<size_t>(d)];
    arbiter::Arbiter& a = *dev.arbiter;
    const arbiter::ArbiterConfig& config = a.config();
    const bool native = config.policy == ArbiterPolicy::kNative;
    // What ended long enough ago to be final: the reported figures and the book's counters.
    pieces_.clear();
    dev.timeline.Settle(now - kSettleNs, &pieces_);
    dev.timeline.Expire(now, &pieces_);
    std::sort(pieces_.begin(), pieces_.end(),
              [](const auto& x, const auto& y) { return x.end < y.end; });
    for (const arbiter::DeviceTimeline::Piece& piece : pieces_) {
      const uint32_t owner = static_cast<uint32_t>(piece.container) % ledger::kMaxContainers;
      if (!dev.present.test(owner)) continue;  // it left meanwhile
      Attribute(piece.process, owner, d, piece.end, piece.ns);
    }
    bool high_priority_present = false;
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      if (!dev.present.test(c)) continue;
      // Device time reconciliation found beyond what the container's gates measured.
      auto& [generation, charged] =
          unseen_gpu_charged_[static_cast<size_t>(c) * ledger::kMaxDevices + d];
      const ledger::LedgerBook::Container& slot = book_->containers[c];
      const uint64_t unseen = slot.unseen_gpu_ns[d].load();
      if (generation != slot.generation.load()) {
        generation = slot.generation.load();
        charged = 0;
      }
      const size_t ci = static_cast<size_t>(c);
      if (unseen > charged) {
        // Time the device ran for it beyond its gates: what it ran too (placed now: when is not
        // known), and charged.
        charge[d][c] += static_cast<int64_t>(unseen - charged);
        dev.ran[ci].Add(Nanos(static_cast<int64_t>(now - kSettleNs)),
                        Nanos(static_cast<int64_t>(unseen - charged)));
      }
      charged = std::max(charged, unseen);
      // A refund (the timeline found part of an earlier charge another's) comes off at once.
      uint64_t ran = 0;
      if (charge[d][c] < 0) {
        (void)a.Refund(c, Nanos(-charge[d][c]));
      } else {
        ran = static_cast<uint64_t>(charge[d][c]);
      }
      // A revoked holder's measured time counts against the drain wait it was charged ahead
      // (below): that wait was this work, still running, so it is charged once.
      if (dev.draining.test(ci)) dev.drained_ns[ci] += ran;
      if (uint64_t& credit = dev.overrun_credit_ns[ci]; credit > 0) {
        const uint64_t back = std::min(credit, ran);
        ran -= back;
        credit -= back;
      }
      if (ran > 0) (void)a.Charge(c, Nanos(ran));
      if (trace_ && d == 0) {
        trace_charged_[static_cast<size_t>(c)] += ran;
        if (pending[d].test(c) && !dev.pending.test(c)) ++trace_returns_[static_cast<size_t>(c)];
      }
      (void)a.SetPending(c, pending[d].test(c));
      (void)a.SetQuotaHint(c, Nanos(hint[d][c]));
      high_priority_present = high_priority_present || members_[c].spec.high_priority;
    }
    dev.pending = pending[d] & dev.present;
    // A revoked holder still not drained at the deadline held the device that long: the part of
    // the wait its measured GPU time does not cover is charged to it now. Else the successor,
    // whose grant lapsed unused while it waited, lost the next decision to it on a tie, and a
    // process that never said its drain was done (a hung one, or one that lies in its own
    // counters) kept the GPU idle for everyone else. Work that really was queued is measured
    // when it completes (a graph of four 10 ms kernels, once, at its end): that time pays the
    // charge back instead of being charged again (charged twice, a 1:2:3 split with such a
    // tenant came out 18/35/46).
    if (dev.draining.any() && now >= dev.drain_deadline_ns && !dev.overrun_charged) {
      dev.overrun_charged = true;
      const uint64_t wait = ToNs(config.quota_max);
      for (int c = 0; c < ledger::kMaxContainers; ++c) {
        const size_t ci = static_cast<size_t>(c);
        if (!dev.draining.test(ci)) continue;
        const uint64_t ahead = wait - std::min(wait, dev.drained_ns[ci]);
        if (ahead == 0) continue;
        (void)a.Charge(c, Nanos(ahead));
        dev.overrun_credit_ns[ci] += ahead;
      }
    }
    // A best-effort holder at its tail (its queued work ends within the lead and it has launched
    // nothing more) offers the token back: the arbiter grants it again if it is still the one
    // furthest behind its share, else the next holder's first kernels queue behind its last one
    // instead of the GPU idling through its host round trip.
    std::optional<int> yielded;
    if (dev.holder && !dev.lane && pending[d].test(static_cast<size_t>(*dev.holder)) &&
        !beyond_tail[d].test(static_cast<size_t>(*dev.holder))) {
      yielded = dev.holder;
      // Its work since the last interval placed is still to be charged: the choice counts it.
      const size_t h = static_cast<size_t>(*dev.holder);
      const uint64_t end = queue_end[d][h], placed = dev.placed_until_ns[h];
      const uint64_t queued = end > placed ? std::min(end - placed, ToNs(config.quota_max)) : 0;
      (void)a.Yield(*dev.holder, Nanos(static_cast<int64_t>(queued)));
    }
    const arbiter::Decision decision = a.Decide();
    std::bitset<ledger::kMaxContainers> desired;
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      if (decision.may_run.test(c)) desired.set(c);
    }
    const uint64_t bound = native ? kNativeBoundNs
                           : high_priority_present
                               ? kHighPriorityBoundNs
                               : std::max(ToNs(config.quota_min), kInflightFloorNs);
    bool changed = layout_->gate.devices[d].inflight_bound_ns.load() != bound ||
                   layout_->gate.devices[d].gated.load() != (native ? 0u : 1u) ||
                   dev.lane_open != decision.lane_open;
    dev.lane_open = decision.lane_open;
    layout_->gate.devices[d].inflight_bound_ns.store(bound);
    // Revoke at once; grant once the revoked holders' queued work has drained (or a quota later):
    // a hand-off that did not wait would leave who-ran-when to the order in which the two
    // processes report, and the one reporting late would be undercharged.
    const auto revoke = dev.published & ~desired;
    if (revoke.any()) {
      dev.published &= ~revoke;
      if (decision.exclusive && !native) {
        if (dev.draining.none()) {
          dev.drain_deadline_ns = now + ToNs(config.quota_max);
          dev.overrun_charged = false;
        }
        for (int c = 0; c < ledger::kMaxContainers; ++c) {
          if (revoke.test(static_cast<size_t>(c))) dev.drained_ns[static_cast<size_t>(c)] = 0;
        }
        dev.draining |= revoke;
        if (yielded && revoke.test(static_cast<size_t>(*yielded))) {
          dev.tail_revoked.set(static_cast<size_t>(*yielded));
        }
      }
      changed = true;
    }
    uint64_t& drain_wake = wake[static_cast<size_t>(d)];
    // When the revoked holders' queued work ends, as they published it (GateDevice::drain_end_ns),
    // no further ahead than a grant can last: it is theirs to say, and it moves only estimates.
    uint64_t drain_end = 0;
    if (dev.draining.any() &&
        !Draining(dev.draining, dev.tail_revoked, d, now, &drain_wake, &drain_end)) {
      dev.draining.reset();
    }
    dev.tail_revoked &= dev.draining;
    layout_->gate.devices[d].drain_end_ns.store(std::min(drain_end, now + ToNs(config.quota_max)));
    const auto grant = desired & ~dev.published;
    if (grant.any()) {
      if (dev.draining.none() || decision.high_priority_lane || now >= dev.drain_deadline_ns) {
        dev.published |= grant;
        // The new holder pays from where the revoked work was expected to end, never later than
        // a grant's length: a long launch (a graph of 10 ms kernels) can still run that long, and
        // charging its successor for it split 1:2:3 as 18/35/46. A forged end moves the
        // successor's charges by that much at most, and the holder that forged it pays for the
        // wait it did not fill (the deadline charge above) (GateDevice::charge_from_ns).
        dev.charge_from_ns = std::clamp(drain_end, now, now + ToNs(config.quota_max));
        for (int c = 0; c < ledger::kMaxContainers; ++c) {
          if (!grant.test(static_cast<size_t>(c))) continue;
          ++dev.grants[static_cast<size_t>(c)];
          dev.overrun_credit_ns[static_cast<size_t>(c)] = 0;  // a new turn: its work is its own
        }
        // The lane goes in at once, but the holders it revoked still drain: the best-effort
        // holder after it waits for that too (forgotten here, the next one was let in at the
        // lane's end with a whole 10 ms kernel still queued, and the next request waited 20 ms).
        if (!decision.high_priority_lane) {
          dev.draining.reset();
          dev.tail_revoked.reset();
        }
        changed = true;
      } else {
        next = std::min(next, now + kDrainPollNs);
      }
    }
    next = std::min(next, drain_wake);
    dev.holder = decision.holder;
    dev.lane = decision.high_priority_lane;
    if (changed && trace_ && d == 0) {
      std::string line = "trace " + std::to_string(now / 1000) + " used (ms)";
      for (int c = 0; c < ledger::kMaxContainers; ++c) {
        if (!dev.present.test(c)) continue;
        auto used = a.UsedInWindow(c);
        line += " " + std::to_string(c) + (dev.pending.test(c) ? "*" : "") + "=" +
                std::to_string(used.ok() ? used->count() / 1'000'000 : -1);
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    if (changed) Publish(d, !native);
    if (decision.until != Nanos::max()) next = std::min(next, ToNs(decision.until));
    if (dev.timeline.unsettled()) next = std::min(next, now + kSettlePassNs);
  }
  return next;
}

namespace {
// Bits 64w to 64w + 63 of `mask`: word `w` of a GateDevice bitset.
uint64_t MaskWord(const std::bitset<ledger::kMaxContainers>& mask, int w) {
  constexpr std::bitset<ledger::kMaxContainers> kWord(~uint64_t{0});
  return ((mask >> static_cast<size_t>(w * 64)) & kWord).to_ullong();
}
}  // namespace

void ComputeService::Publish(int d, bool gated) {
  ledger::GateDevice& gd = layout_->gate.devices[d];
  const Device& dev = devices_[static_cast<size_t>(d)];
  // An open lane's bit is published set (GateDevice::lane_open): the high-priority launcher passes
  // the one-load check at once and rings this loop, which makes it the holder at its next step.
  // Holder and lanes before the bits, so a launcher that sees its bit also sees why it has it.
  gd.charge_from_ns.store(dev.charge_from_ns);
  gd.holder.store(dev.holder ? *dev.holder : -1);
  for (int w = 0; w < ledger::kMaskWords; ++w) {
    gd.lane_open[w].store(MaskWord(dev.lane_open, w), std::memory_order_release);  // empty under 5
  }
  for (int w = 0; w < ledger::kMaskWords; ++w) {
    gd.may_run[w].store(MaskWord(dev.published | dev.lane_open, w), std::memory_order_release);
  }
  gd.policy.store(static_cast<uint32_t>(dev.arbiter->config().policy));
  gd.gated.store(gated ? 1 : 0);
  gd.grant_seq.fetch_add(1, std::memory_order_acq_rel);
  ipc::FutexWakeAll(&gd.grant_seq);
  if (trace_) {
    std::fprintf(stderr,
                 "trace %llu dev %d publish word0=%llx lanes0=%llx holder=%d draining=%zu "
                 "pending=%llx\n",
                 static_cast<unsigned long long>(MonotonicNs() / 1000), d,
                 static_cast<unsigned long long>(gd.may_run[0].load()),
                 static_cast<unsigned long long>(gd.lane_open[0].load()), gd.holder.load(),
                 dev.draining.count(),
                 (dev.pending & std::bitset<ledger::kMaxContainers>(0xffff)).to_ullong());
  }
}

}  // namespace tessera::daemon
