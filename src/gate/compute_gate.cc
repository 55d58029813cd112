// ComputeGate implementation: token checks, tracks and marks, the sampler thread, drains and the
// daemon-loss fallback. See compute_gate.h for the design. Messages go to stderr, prefixed
// "tessera:", only from slow paths (a gate wait that loses the daemon, the sampler).
#include "gate/compute_gate.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "core/arbiter_policy.h"
#include "ipc/futex.h"

namespace tessera::gate {

using ipc::MonotonicNs;

namespace {

constexpr int kRing = 8;                      // marks a track may have outstanding
constexpr uint32_t kMaxMarkEvery = 4096;      // launches per mark, at most
constexpr uint64_t kTickBusyNs = 500'000;     // sampler period while work is in flight
constexpr uint64_t kTickIdleNs = 10'000'000;  // ... and while the process is idle
constexpr uint64_t kTickQuietNs = 100'000;    // ... and while a holder's quiet ticks run out
// A launcher whose one outstanding mark is expected to end within this may queue the next one.
constexpr uint64_t kLaunchLeadNs = 200'000;
// A launcher waiting for room in flight stops sleeping this long before the room is expected, less
// the work queued behind the oldest mark, and yields in a loop instead. On a virtual machine a
// sleeping vCPU is often resumed late (steal: 100 us sleeps overslept by 0.5-1 ms at p99 on the
// 2-vCPU CI-class host), and with a high-priority tenant's 0.5 ms bound the queue behind the
// oldest mark is a quarter of a ms; with the 4 ms bound of the other policies it is 2 ms and the
// launcher need not spin at all.
constexpr uint64_t kSpinNs = 1'000'000;
constexpr uint64_t kWaitSliceNs = 5'000'000;  // a gate wait re-checks the daemon this often
constexpr uint64_t kDefaultBoundNs = 2'000'000;
// How long a new track polls its calibration event before it waits for it (work queued ahead).
constexpr uint64_t kCalibrationPollNs = 2'000'000;
constexpr int kQuietTicks = 2;  // ticks without work before a process counts as idle
// A launcher just handed the token counts as busy this long before the sampler sees its work.
constexpr uint64_t kGrantedGraceNs = 2'000'000;
// A high-priority process whose launcher has recorded no mark for this long is taken to be done
// launching: it publishes when its queued work ends (idle_at_ns), and the arbiter hands the token
// on just before then instead of after its quiet ticks.
constexpr uint64_t kLauncherQuietNs = 100'000;
// How precisely the sampler's timed waits end (the kernel's default slack is 50 us, half a quiet
// tick).
constexpr unsigned long kSamplerTimerSlackNs = 5'000;

struct Mark {
  CUevent event = nullptr;
  uint64_t start_ns = 0;  // host time of the first launch it covers
  // The revoked holders' drain end (GateDevice::drain_end_ns) when it was recorded: its work
  // queued behind theirs. Taken then, not when its end is estimated: by then the drain end may be
  // this process's own, published because it was revoked in turn.
  uint64_t ahead_ns = 0;
  uint32_t launches = 0;
};

// A spin lock that yields, then sleeps: held for a driver call or two, except by a launch that
// waits for its oldest mark (then others on the same stream would wait anyway).
class TrackLock {
 public:
  bool TryLock() { return !flag_.test_and_set(std::memory_order_acquire); }
  void Lock() {
    for (int spins = 0; !TryLock(); ++spins) {
      if (spins < 64) continue;
      if (spins < 128) {
        sched_yield();
      } else {
        timespec ts{0, 50'000};
        nanosleep(&ts, nullptr);
      }
    }
  }
  void Unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

}  // namespace

struct Track {
  // Identity (immutable while live).
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;    // as the application passed it
  bool per_thread = false;      // the owning thread's per-thread default stream
  bool legacy = false;          // the context's legacy default stream
  const void* owner = nullptr;  // per-thread tracks: the owning thread
  int device = -1;              // ledger device index
  std::atomic<bool> live{false};
  // Launcher side.
  std::atomic<uint32_t> since_mark{0};
  std::atomic<uint32_t> mark_every{1};
  std::atomic<uint32_t> max_outstanding{kRing - 1};
  std::atomic<uint32_t> outstanding{0};
  std::atomic<uint64_t> first_launch_ns{0};
  // Set while a launch that AwaitInflight let queue early is between its token check and its
  // launch: a drain that began meanwhile waits for it before estimating its end.
  std::atomic<bool> lead_launch{false};
  // The ring of outstanding marks and the calibration chain; guarded by `lock`.
  TrackLock lock;
  Mark ring[kRing];
  uint32_t head = 0;
  uint32_t count = 0;
  CUevent ref = nullptr;  // a completed event whose device instant is ref_ns
  uint64_t ref_ns = 0;
  uint64_t last_end_ns = 0;  // device instant the previous completed mark ended
  // Host time of the launchers' latest activity on the track: their latest mark, or the first
  // launch of a batch the sampler closed for them (the sampler's own marks are not activity).
  uint64_t last_marked_ns = 0;
  double kernel_ns = 0;   // average device time per launch (EWMA)
  bool measured = false;  // kernel_ns holds a measurement (until then: one launch per mark)
  // Sampler side.
  uint32_t seen_since_mark = 0;
};

namespace {

struct DeviceGate {
  std::atomic<const std::atomic<uint64_t>*> word{nullptr};  // the token word, or g_all_ones
  bool busy = false;                                        // sampler's view
  uint64_t busy_since_ns = 0;
  double burst_ns = 0;
  int quiet_ticks = 0;  // consecutive ticks without work while still published as busy
  // When a launcher last got the token after waiting (it launches next). Written by launchers.
  std::atomic<uint64_t> granted_ns{0};
  uint64_t confirmed_ns = 0;  // the granted_ns whose launches a tick has seen (sampler's)
  // Bumped by a launcher after each mark it records: a sampler that computed idle_at_ns before a
  // bump withdraws it (the process launched more meanwhile).
  std::atomic<uint32_t> mark_epoch{0};
  uint64_t published_idle_at = 0;  // the sampler's last idle_at_ns for this device
  // Launchers waiting in AwaitInflight for room in flight: they launch more as soon as a mark
  // completes, so the process is not done launching however long ago its last mark was.
  std::atomic<uint32_t> room_waiters{0};
};

struct GateState {
  GateDriver driver;
  const ledger::LedgerLayout* layout = nullptr;  // the node view, read-only
  ledger::ContainerSegment* own = nullptr;       // this process's container's segment
  ledger::Exchange* exchange = nullptr;
  uint32_t container = 0;
  uint32_t process = 0;
  uint64_t bit = 0;
  int word_index = 0;
  int physical[ledger::kMaxDevices] = {};
  int visible_count = 0;
  int primary_device = 0;
  DeviceGate devices[ledger::kMaxDevices];
  std::atomic<bool> started{false};
  std::atomic<bool> ungated{false};
  std::atomic<bool> sampler_running{false};
  std::atomic<bool> exiting{false};
  std::atomic<bool> sampler_done{true};
  // How often and how long launches waited, for TESSERA_GATE_STATS (slow paths only).
  std::atomic<uint64_t> token_waits{0}, token_wait_ns{0}, room_waits{0}, room_wait_ns{0},
      room_naps{0}, room_syncs{0}, drains{0};
  std::mutex mu;        // tracks list; the sampler's tick
  TrackLock ring_lock;  // this process's ring of intervals (Record)
  std::vector<Track*> tracks;
  std::vector<Track*> free_tracks;
};

GateState* g = nullptr;
std::atomic<uint64_t> g_all_ones{~uint64_t{0}};
std::atomic<uint32_t> g_stream_generation{1};  // bumped when a stream or context is forgotten
// Stream captures in progress in this process (CaptureBegins/CaptureEnds). While one runs, a launch
// asks whether its stream captures (a captured launch runs nothing and passes ungated), and the
// gate's own event calls run in relaxed capture mode (RelaxedWhileCapturing).
std::atomic<int> g_captures{0};

// The calling thread's last launch's track: the fast path's one thread-local read. A change of
// the thread's current context empties it (CurrentContextChanged).
struct TrackCache {
  CUstream stream = nullptr;
  bool per_thread_entry = false;
  uint32_t stream_generation = 0;
  Track* track = nullptr;
};
thread_local TrackCache t_cache;
thread_local char t_thread_tag;  // its address identifies the thread

ledger::ProcessCounters& Self() { return g->own->processes[g->process]; }

// Whether a launch on `stream` (`per_thread`: through a _ptsz entry point) goes into a capture.
// The legacy stream never captures (and asking about it while another stream captures is an
// implicit synchronisation, which would invalidate that capture).
bool LaunchCaptured(CUstream stream, bool per_thread) {
  if (stream == TESSERA_CU_STREAM_LEGACY || (stream == nullptr && !per_thread)) return false;
  auto is_capturing =
      per_thread ? g->driver.stream_is_capturing_ptsz : g->driver.stream_is_capturing;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// While a capture runs in the process, the calling thread's capture mode is relaxed for the scope:
// the gate's event records and waits are then not the "unsafe" calls that invalidate a capture in
// global mode. Costs nothing when no capture runs.
class RelaxedWhileCapturing {
 public:
  // `capturing`: whether a capture runs in the process (g_captures, as the caller read it).
  explicit RelaxedWhileCapturing(bool capturing) {
    if (!capturing || g->driver.exchange_capture_mode == nullptr) return;
    active_ = g->driver.exchange_capture_mode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedWhileCapturing() {
    if (active_) g->driver.exchange_capture_mode(&mode_);
  }
  RelaxedWhileCapturing(const RelaxedWhileCapturing&) = delete;
  RelaxedWhileCapturing& operator=(const RelaxedWhileCapturing&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool active_ = false;
};

// Whether this process's container is high-priority (it may change with a control-tree write).
bool HighPriority() {
  return g->layout->containers[g->container].high_priority.load(std::memory_order_relaxed) != 0;
}

void WakeArbiter() {
  g->exchange->demand_seq.fetch_add(1, std::memory_order_acq_rel);
  ipc::FutexWakeAll(&g->exchange->demand_seq);
}

bool ArbiterAlive(uint64_t now) {
  const uint64_t beat = g->layout->gate.beat_ns.load(std::memory_order_acquire);
  const uint64_t timeout = g->layout->gate.loss_timeout_ns.load(std::memory_order_relaxed);
  return beat != 0 && now < beat + std::max<uint64_t>(timeout, 10'000'000);
}

void SetUngated(bool ungated) {
  for (int d = 0; d < ledger::kMaxDevices; ++d) {
    g->devices[d].word.store(
        ungated ? &g_all_ones : &g->layout->gate.devices[d].may_run[g->word_index],
        std::memory_order_release);
  }
  g->ungated.store(ungated, std::memory_order_release);
}

// ---- Charging -----------------------------------------------------------------------------------
// Raises `word` to at least `value`; returns what it held before.
uint64_t RaiseTo(std::atomic<uint64_t>& word, uint64_t value) {
  uint64_t cur = word.load(std::memory_order_acquire);
  while (cur < value && !word.compare_exchange_weak(cur, value, std::memory_order_acq_rel)) {
  }
  return cur;
}

// Adds [from, end) of device time on `device` to this process's ring of intervals and then to its
// gpu_ns (ledger_layout.h: GpuInterval), which the arbiter reads in the other order: every time it
// sees in gpu_ns has its interval visible. Called by launchers consuming their marks and by the
// sampler, one at a time (the ring's lock).
void Record(int device, uint64_t from, uint64_t end) {
  ledger::ProcessCounters& self = Self();
  g->ring_lock.Lock();
  const uint64_t total = self.gpu_ns[device].load(std::memory_order_relaxed) + (end - from);
  const uint64_t head = self.interval_head.load(std::memory_order_relaxed);
  ledger::GpuInterval& e = self.intervals[head % ledger::kIntervalRing];
  e.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.start_ns.store(from, std::memory_order_relaxed);
  e.end_ns.store(end, std::memory_order_relaxed);
  e.total_ns.store(total, std::memory_order_relaxed);
  e.device.store(static_cast<uint32_t>(device), std::memory_order_relaxed);
  e.seq.store(static_cast<uint32_t>(head + 1), std::memory_order_release);
  self.interval_head.store(head + 1, std::memory_order_release);
  self.gpu_ns[device].store(total, std::memory_order_release);
  g->ring_lock.Unlock();
  // Half a ring since the arbiter was last rung for it: it reads them before the ring laps.
  if ((head + 1) % (ledger::kIntervalRing / 2) == 0) WakeArbiter();
}

// Adds [start, end) of device time on `device` to this process, minus what its container already
// charged (another stream or process of it: overlapping work of one container is never counted
// twice). Time this interval waited behind other containers' work is the arbiter's to take out
// (it compares the intervals of all containers: arbiter/device_timeline.h). Returns where this
// interval's own work began, for the kernel-length estimate: after another container's work it
// waited behind, as far as the arbiter said so (GateDevice::charge_from_ns: while its container
// holds the token, the revoked holders' queued work ends there; except under the weak policy,
// where tenants overlap by design). The container's own streams overlapping each other do not
// count: they share the GPU, not wait for it.
uint64_t Charge(int device, uint64_t start, uint64_t end) {
  const ledger::GateDevice& gd = g->layout->gate.devices[device];
  const bool overlap = gd.policy.load(std::memory_order_relaxed) == 4;
  const uint64_t handed =
      !overlap && gd.holder.load(std::memory_order_acquire) == static_cast<int32_t>(g->container)
          ? std::min(gd.charge_from_ns.load(std::memory_order_acquire), end)
          : 0;
  const uint64_t container_until = RaiseTo(g->own->counters.charged_until_ns[device], end);
  const uint64_t from = std::max(start, container_until);
  if (end > from) Record(device, from, end);
  const uint64_t behind = handed > container_until ? handed : 0;
  return std::min(std::max(start, behind), end);
}

// Re-derives how often a track marks and how many marks it may keep outstanding from its kernels'
// average length and the device's in-flight bound.
void Retune(Track* t) {
  uint64_t bound = g->layout->gate.devices[t->device].inflight_bound_ns.load();
  if (bound == 0) bound = kDefaultBoundNs;
  if (!t->measured) {
    // Nothing known about this stream's kernels yet: mark every launch, keep two outstanding, or
    // one beside a high-priority tenant (two 10 ms kernels queued at a tenant's first launches
    // made its first admissions wait 15 ms).
    t->mark_every.store(1, std::memory_order_relaxed);
    t->max_outstanding.store(bound < kSpinNs ? 1 : 2, std::memory_order_relaxed);
    return;
  }
  if (t->kernel_ns < 1.0) {
    t->mark_every.store(kMaxMarkEvery, std::memory_order_relaxed);
    t->max_outstanding.store(kRing - 1, std::memory_order_relaxed);
    return;
  }
  const double every = std::clamp(static_cast<double>(bound) / 2.0 / t->kernel_ns, 1.0,
                                  static_cast<double>(kMaxMarkEvery));
  // Rounded, not truncated: kernels measured a hair over half the bound still pair up.
  const auto mark_every = static_cast<uint32_t>(std::lround(every));
  const double outstanding = static_cast<double>(bound) / (mark_every * t->kernel_ns);
  t->mark_every.store(mark_every, std::memory_order_relaxed);
  t->max_outstanding.store(
      static_cast<uint32_t>(std::lround(std::clamp(outstanding, 1.0, kRing - 1.0))),
      std::memory_order_relaxed);
}

// Retires completed marks in order (the first one waited for when `wait_first`), charging their
// intervals. Caller holds t->lock.
void ConsumeLocked(Track* t, bool wait_first) {
  const GateDriver& drv = g->driver;
  while (t->count > 0) {
    Mark& m = t->ring[t->head];
    const CUresult q = wait_first ? drv.event_synchronize(m.event) : drv.event_query(m.event);
    wait_first = false;
    if (q == CUDA_ERROR_NOT_READY) break;
    if (q == CUDA_SUCCESS) {
      // Seen complete now, so it ended no later. The chain's calibration is the host time its
      // first event was seen complete, which is late by however long the host ran that thread
      // late; every end derived from it would be late by as much, and each interval that long.
      // The bound takes such an error out of the chain at the first mark seen promptly.
      const uint64_t seen = MonotonicNs();
      float ms = 0;
      if (drv.event_elapsed(&ms, t->ref, m.event) == CUDA_SUCCESS) {
        const double delta = std::max(0.0, static_cast<double>(ms) * 1e6);
        const uint64_t end = std::min(t->ref_ns + static_cast<uint64_t>(delta), seen);
        std::swap(t->ref, m.event);  // the completed mark is the new reference
        t->ref_ns = end;
        const uint64_t start = std::max(m.start_ns, t->last_end_ns);
        t->measured = true;
        if (end > start) {
          // The kernel length from where this work began: a launch queued behind another
          // holder's work did not run while it waited (a high-priority launch always waits so).
          // A mark charged only after later work of another container (this sampler ran late)
          // tells nothing about its length and leaves the estimate alone: taken as zero, it cut
          // a 10 ms tenant's estimate by a quarter, which queued its next kernel ms too early.
          const uint64_t ran_from = Charge(t->device, start, end);
          if (end > ran_from) {
            const double per_launch =
                static_cast<double>(end - ran_from) / std::max(m.launches, 1u);
            t->kernel_ns =
                t->kernel_ns < 1.0 ? per_launch : 0.75 * t->kernel_ns + 0.25 * per_launch;
          }
        }
        t->last_end_ns = std::max(t->last_end_ns, end);
      }
    }
    // Any other answer (a capture, a destroyed context): the mark is dropped uncharged.
    t->head = (t->head + 1) % kRing;
    --t->count;
  }
  t->outstanding.store(t->count, std::memory_order_release);
  Retune(t);
}

// Records a mark after everything launched on the track so far. `by_sampler`: from the sampler
// thread, which records a per-thread track's mark on the context's legacy stream (ordered after
// every blocking stream, the owner's per-thread stream included). Caller holds t->lock.
void MarkLocked(Track* t, bool by_sampler) {
  const uint32_t n = t->since_mark.load(std::memory_order_relaxed);
  if (n == 0) return;
  CUstream on = t->stream;
  if (t->per_thread) on = by_sampler ? TESSERA_CU_STREAM_LEGACY : TESSERA_CU_STREAM_PER_THREAD;
  // While a capture runs, the sampler records nothing on the legacy stream (an implicit
  // synchronisation with a capturing stream) or into a capturing stream; the launchers' own marks
  // close those launches instead.
  if (by_sampler && g_captures.load(std::memory_order_acquire) != 0 &&
      (t->per_thread || t->legacy || LaunchCaptured(t->stream, false))) {
    return;
  }
  if (t->count == kRing) ConsumeLocked(t, /*wait_first=*/true);
  Mark& m = t->ring[(t->head + t->count) % kRing];
  t->since_mark.store(0, std::memory_order_relaxed);
  if (g->driver.event_record(m.event, on) != CUDA_SUCCESS) return;  // e.g. a capturing stream
  m.start_ns = t->first_launch_ns.load(std::memory_order_relaxed);
  m.ahead_ns = g->layout->gate.devices[t->device].drain_end_ns.load(std::memory_order_relaxed);
  t->last_marked_ns = by_sampler ? std::max(t->last_marked_ns, m.start_ns) : MonotonicNs();
  m.launches = n;
  ++t->count;
  t->outstanding.store(t->count, std::memory_order_release);
  if (!by_sampler) {
    // More work queued: any end this process published is stale. The epoch bump comes before the
    // load of the slot, and PublishIdleAt stores before it loads the epoch (all seq_cst): a
    // publication racing this mark is withdrawn by one side or the other. The shared slot is
    // written only when it holds an end, so marks do not dirty its cache line.
    g->devices[t->device].mark_epoch.fetch_add(1);
    std::atomic<uint64_t>& idle_at = Self().idle_at_ns[t->device];
    if (idle_at.load() != 0) idle_at.store(0);
  }
}

// ---- Tracks -------------------------------------------------------------------------------------
Track* NewTrack(CUcontext ctx, CUstream stream, bool per_thread, bool legacy, int device) {
  const GateDriver& drv = g->driver;
  Track* t = nullptr;
  if (!g->free_tracks.empty()) {
    t = g->free_tracks.back();
    g->free_tracks.pop_back();
    t->~Track();
    new (t) Track();
  } else {
    t = new (std::nothrow) Track();
    if (t == nullptr) return nullptr;
  }
  t->ctx = ctx;
  t->stream = stream;
  t->per_thread = per_thread;
  t->legacy = legacy;
  t->owner = per_thread ? &t_thread_tag : nullptr;
  t->device = device;
  bool ok = drv.event_create(&t->ref, 0) == CUDA_SUCCESS;
  for (Mark& m : t->ring) ok = ok && drv.event_create(&m.event, 0) == CUDA_SUCCESS;
  // Calibration: the reference event's device instant is the host time it is seen complete.
  // Polled, not waited for: a blocking wait returns when the host next runs the thread, which on
  // a busy host is late, and the whole chain of ends measured from it would be as late (the
  // bound in ConsumeLocked takes a late calibration out again, at the first mark seen promptly).
  // A stream with work queued ahead of the event is waited for after a short poll.
  CUstream on = per_thread ? TESSERA_CU_STREAM_PER_THREAD : stream;
  ok = ok && drv.event_record(t->ref, on) == CUDA_SUCCESS;
  if (ok) {
    const uint64_t give_up = MonotonicNs() + kCalibrationPollNs;
    CUresult q = drv.event_query(t->ref);
    while (q == CUDA_ERROR_NOT_READY && MonotonicNs() < give_up) {
      sched_yield();
      q = drv.event_query(t->ref);
    }
    if (q == CUDA_ERROR_NOT_READY) q = drv.event_synchronize(t->ref);
    ok = q == CUDA_SUCCESS;
  }
  if (!ok) {
    if (t->ref != nullptr) drv.event_destroy(t->ref);
    for (Mark& m : t->ring) {
      if (m.event != nullptr) drv.event_destroy(m.event);
    }
    t->ref = nullptr;
    for (Mark& m : t->ring) m.event = nullptr;
    g->free_tracks.push_back(t);
    return nullptr;
  }
  t->ref_ns = MonotonicNs();
  t->last_end_ns = t->ref_ns;
  Retune(t);
  t->live.store(true, std::memory_order_release);
  g->tracks.push_back(t);
  return t;
}

void StartSampler();

Track* LookupSlow(CUstream stream, bool per_thread_entry) {
  const GateDriver& drv = g->driver;
  CUcontext ctx = nullptr;
  if (drv.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  const bool per_thread =
      stream == TESSERA_CU_STREAM_PER_THREAD || (per_thread_entry && stream == nullptr);
  const bool legacy =
      stream == TESSERA_CU_STREAM_LEGACY || (!per_thread_entry && stream == nullptr);
  const CUstream key = per_thread ? TESSERA_CU_STREAM_PER_THREAD
                       : legacy   ? TESSERA_CU_STREAM_LEGACY
                                  : stream;
  Track* found = nullptr;
  {
    std::lock_guard<std::mutex> lock(g->mu);
    for (Track* t : g->tracks) {
      if (t->live.load() && t->ctx == ctx && t->stream == key &&
          (!per_thread || t->owner == &t_thread_tag)) {
        found = t;
        break;
      }
    }
    if (found == nullptr) {
      CUdevice ordinal = -1;
      if (drv.ctx_get_device(&ordinal) != CUDA_SUCCESS || ordinal < 0 ||
          ordinal >= g->visible_count) {
        return nullptr;
      }
      found = NewTrack(ctx, key, per_thread, legacy, g->physical[ordinal]);
      if (found == nullptr) return nullptr;
    }
  }
  StartSampler();
  t_cache = TrackCache{stream, per_thread_entry,
                       g_stream_generation.load(std::memory_order_acquire), found};
  return found;
}

// ---- Waiting ------------------------------------------------------------------------------------
// Whether this process's container holds `device`'s token from the arbiter, not only through
// its open high-priority lane (GateDevice::lane_open: the bit is published set for the lane, and
// the arbiter has not yet made the container the holder).
bool Granted(int device) {
  const ledger::GateDevice& gd = g->layout->gate.devices[device];
  if ((gd.may_run[g->word_index].load() & g->bit) == 0) return false;
  return (gd.lane_open[g->word_index].load() & g->bit) == 0 ||
         gd.holder.load() == static_cast<int32_t>(g->container);
}

// Where the device's revoked holders' queued work is expected to end (GateDevice::drain_end_ns,
// published by the arbiter from what they said; never further ahead than a grant lasts).
uint64_t DrainEnd(int device) {
  return g->layout->gate.devices[device].drain_end_ns.load(std::memory_order_acquire);
}

// The same while this process's container holds `device`'s token (may_run), else 0: a revoked
// process's own queue is among what the drain end covers.
uint64_t HeldDrainEnd(int device) {
  const ledger::GateDevice& gd = g->layout->gate.devices[device];
  return (gd.may_run[g->word_index].load(std::memory_order_acquire) & g->bit) != 0
             ? DrainEnd(device)
             : 0;
}

void AwaitToken(int device) {
  ledger::ProcessCounters& self = Self();
  const ledger::GateDevice& gd = g->layout->gate.devices[device];
  ledger::ExchangeDevice& xd = g->exchange->devices[device];
  const ledger::ContainerSlot& container = g->layout->containers[g->container];
  const bool high_priority = HighPriority();
  self.waiting[device].fetch_add(1, std::memory_order_acq_rel);
  const uint64_t wait_start = MonotonicNs();
  self.beat_ns.store(wait_start, std::memory_order_release);  // a waiting thread is alive
  if (high_priority) xd.priority_wait_ns.store(wait_start);
  bool woke = false;  // the arbiter, once this launch is counted as waiting
  for (;;) {
    const uint32_t seq = gd.grant_seq.load(std::memory_order_acquire);
    if (g->devices[device].word.load(std::memory_order_acquire)->load(std::memory_order_acquire) &
        g->bit) {
      break;
    }
    if (container.state.load() != ledger::kLive) break;  // removed: woken, not held forever
    if (!ArbiterAlive(MonotonicNs())) {
      bool expected = false;
      if (g->ungated.compare_exchange_strong(expected, true)) {
        std::fprintf(
            stderr,
            "tessera: WARNING: the Tessera daemon's arbiter has not answered for %llu ms; "
            "launching UNGATED until it returns\n",
            static_cast<unsigned long long>(g->layout->gate.loss_timeout_ns.load() / 1000000));
        SetUngated(true);
      }
      break;
    }
    if (!woke) {
      WakeArbiter();
      woke = true;
    }
    // A high-priority process is let in within about a ms (it runs ahead of the policy): it
    // yields in a loop that long rather than sleep, since a vCPU resumed late adds its steal
    // straight to the admission latency.
    if (high_priority && MonotonicNs() < wait_start + kSpinNs) {
      sched_yield();
      continue;
    }
    ipc::FutexWait(&gd.grant_seq, seq, kWaitSliceNs);
    self.beat_ns.store(MonotonicNs(), std::memory_order_release);
  }
  if (high_priority) {
    uint64_t stamp = wait_start;
    xd.priority_wait_ns.compare_exchange_strong(stamp, 0);  // unless another launcher waits now
  }
  // The wait, for tessera_container_token_wait_seconds_total (one add on the slow path).
  const uint64_t now = MonotonicNs();
  g->own->counters.token_wait_ns.fetch_add(now - wait_start, std::memory_order_relaxed);
  g->token_waits.fetch_add(1, std::memory_order_relaxed);
  g->token_wait_ns.fetch_add(now - wait_start, std::memory_order_relaxed);
  // Busy before no longer waiting: between the wake-up and the sampler's next look at this
  // process's streams it would otherwise show no work at all, and the arbiter would take the
  // token straight back (on a loaded CPU the two tenants then traded it every 2-3 ms, and the
  // one that woke slower lost share). The sampler keeps the bit for kGrantedGraceNs.
  g->devices[device].granted_ns.store(now, std::memory_order_release);
  self.busy_mask.fetch_or(1u << device, std::memory_order_acq_rel);
  self.waiting[device].fetch_sub(1, std::memory_order_acq_rel);
}

// A launch went through this process's open high-priority lane while it was published idle on
// `device` (see AfterLaunch): busy, as AwaitToken marks a granted launcher, and the arbiter rung,
// so the open lane turns into a grant (and the best-effort holders' revocation) at its next step.
void NoteLaunchWhileIdle(int device) {
  g->devices[device].granted_ns.store(MonotonicNs(), std::memory_order_release);
  Self().busy_mask.fetch_or(1u << device, std::memory_order_acq_rel);
  WakeArbiter();
}

// When the track's oldest mark is expected to complete (its launches at the measured kernel
// length), or 0 when nothing measured is outstanding. Caller holds t->lock.
uint64_t ExpectedEndLocked(const Track* t) {
  if (t->count == 0 || !t->measured || t->kernel_ns < 1.0) return 0;
  const Mark& m = t->ring[t->head];
  // Not before the revoked holders' drain ends: a mark launched during it queued behind it (a
  // launch anchored on itself looked due a whole 10 ms kernel early, and the next one went in
  // early behind it, doubling a high-priority request's wait). The drain as it was when the mark
  // was recorded, or as it is now while this process holds the token (a high-priority launch
  // through its open lane is recorded before the arbiter revokes the holders it queues behind).
  return std::max({m.start_ns, t->last_end_ns, m.ahead_ns, HeldDrainEnd(t->device)}) +
         static_cast<uint64_t>(m.launches * t->kernel_ns);
}

// When everything marked on the track is expected to have run: each mark at the measured kernel
// length, after the one before it, the first no earlier than the last completed one and `ahead`
// (other holders' queued work that it waits behind now), each no earlier than the drain it was
// recorded behind. 0 when unknown: launches unmarked, or the kernel length not measured. Caller
// holds t->lock.
uint64_t QueueEndLocked(const Track* t, uint64_t ahead) {
  if (t->since_mark.load(std::memory_order_relaxed) != 0) return 0;
  if (t->count == 0) return std::max<uint64_t>(t->last_end_ns, 1);
  if (!t->measured || t->kernel_ns < 1.0) return 0;
  uint64_t end = std::max(t->last_end_ns, ahead);
  for (uint32_t i = 0; i < t->count; ++i) {
    const Mark& m = t->ring[(t->head + i) % kRing];
    end =
        std::max({end, m.start_ns, m.ahead_ns}) + static_cast<uint64_t>(m.launches * t->kernel_ns);
  }
  return end;
}

// Whether a high-priority launcher of another container began waiting for `device`'s token within
// the last kSpinNs (see GateDevice::priority_wait_ns).
bool PriorityWaiting(int device, uint64_t now) {
  if (HighPriority()) return false;
  const uint64_t since = g->exchange->devices[device].priority_wait_ns.load();
  return since != 0 && since <= now && now < since + kSpinNs;
}

// Waits for room in flight. Returns true when the launch may go ahead although the ring is at its
// bound: a bound of one mark (long kernels beside a high-priority tenant) would otherwise leave
// the device idle from each kernel's end until this thread wakes and launches the next, so the
// next is queued once the one in flight is expected to end within kLaunchLeadNs (one mark more,
// never two: a second waits for the first to complete).
//
// Where the work queued behind the oldest mark is under kSpinNs, the wait sleeps until the
// difference before that mark is expected to end (or the lead begins), then yields in a loop:
// that queue is all that keeps the device busy, and a sleep that overslept it idled the device
// (see kSpinNs). Otherwise, and for a mark whose end is not known or that runs past its
// estimate, it waits on the mark's event.
bool AwaitInflight(Track* t) {
  std::atomic<uint32_t>& waiters = g->devices[t->device].room_waiters;
  waiters.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<uint32_t>& w;
    uint64_t since;
    ~Leave() {
      w.fetch_sub(1, std::memory_order_relaxed);
      g->room_waits.fetch_add(1, std::memory_order_relaxed);
      g->room_wait_ns.fetch_add(MonotonicNs() - since, std::memory_order_relaxed);
    }
  } leave{waiters, MonotonicNs()};
  t->lock.Lock();
  ConsumeLocked(t, /*wait_first=*/false);
  while (t->count >= t->max_outstanding.load(std::memory_order_relaxed)) {
    const uint64_t expected_end = ExpectedEndLocked(t);
    const uint64_t now = MonotonicNs();
    if (expected_end == 0 || now >= expected_end) {
      g->room_syncs.fetch_add(1, std::memory_order_relaxed);
      ConsumeLocked(t, /*wait_first=*/true);
      continue;
    }
    const bool may_lead = t->count == 1;
    if (may_lead && now + kLaunchLeadNs >= expected_end) {
      if (PriorityWaiting(t->device, now)) {
        // The arbiter is about to revoke this token for a high-priority launch, which would wait
        // behind a kernel queued now (a whole one more: p99 admission past kernel + 1 ms whenever
        // the arbiter woke a little late). The next launch goes after the mark ends, if at all.
        t->lock.Unlock();
        sched_yield();
        t->lock.Lock();
        ConsumeLocked(t, /*wait_first=*/false);
        continue;
      }
      t->lead_launch.store(true);
      t->lock.Unlock();
      return true;
    }
    const uint64_t until = may_lead ? expected_end - kLaunchLeadNs : expected_end;
    // Work queued behind the oldest mark covers that much of an oversleep by itself.
    uint32_t behind_launches = t->since_mark.load(std::memory_order_relaxed);
    for (uint32_t i = 1; i < t->count; ++i) {
      behind_launches += t->ring[(t->head + i) % kRing].launches;
    }
    const auto behind = static_cast<uint64_t>(behind_launches * t->kernel_ns);
    const uint64_t spin = behind < kSpinNs ? kSpinNs - behind : 0;
    if (spin == 0 && !may_lead) {
      g->room_syncs.fetch_add(1, std::memory_order_relaxed);
      ConsumeLocked(t, /*wait_first=*/true);
      continue;
    }
    t->lock.Unlock();
    if (until > now + spin) {
      g->room_naps.fetch_add(1, std::memory_order_relaxed);
      const uint64_t nap = std::min(until - spin - now, kTickBusyNs);
      timespec ts{0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
    } else {
      sched_yield();
    }
    t->lock.Lock();
    ConsumeLocked(t, /*wait_first=*/false);
  }
  t->lock.Unlock();
  return false;
}

// ---- The sampler --------------------------------------------------------------------------------
// Publishes `end` as when this process's work on `device` is expected to have run (0: unknown),
// unless a launcher recorded a mark since `epoch` was read: then it is launching again.
void PublishIdleAt(int device, uint64_t end, uint32_t epoch) {
  DeviceGate& dg = g->devices[device];
  std::atomic<uint64_t>& slot = Self().idle_at_ns[device];
  slot.store(end);
  if (end != 0 && dg.mark_epoch.load() != epoch) {
    slot.store(0);
    end = 0;
  }
  dg.published_idle_at = end;
}

// Waits for every mark of `device` to complete (closing unmarked launches first). Before waiting
// it publishes when they are expected to (idle_at_ns, which the arbiter passes on as the device's
// drain_end_ns) and wakes the arbiter, which lets the next holder launch just before then: its
// first kernels queue behind
// this process's last ones instead of starting on an idle GPU after two wake-ups. Returns false
// when the process has work on the device after all: the token came back during the drain (its
// launchers went on), or a launch let through just before the revocation landed after it.
bool DrainDevice(int device) {
  g->drains.fetch_add(1, std::memory_order_relaxed);
  const ledger::GateDevice& gd = g->layout->gate.devices[device];
  auto holds = [&] { return (gd.may_run[g->word_index].load() & g->bit) != 0; };
  const uint32_t epoch = g->devices[device].mark_epoch.load();
  // Its marks recorded during an earlier drain queued behind it (Mark::ahead_ns); the drain end
  // published now may be its own.
  const uint64_t ahead = 0;
  uint64_t end = 0;
  bool known = true;
  for (Track* t : g->tracks) {
    if (!t->live.load() || t->device != device) continue;
    g->driver.ctx_set_current(t->ctx);
    // A launch let through just before the revocation lands first (it would otherwise be missing
    // from the estimate: with kernels of 10 ms, quota expiries fell on exactly those launches).
    for (int i = 0; i < 100 && t->lead_launch.load(std::memory_order_acquire); ++i) {
      timespec ts{0, 10'000};
      nanosleep(&ts, nullptr);
    }
    t->lock.Lock();
    MarkLocked(t, /*by_sampler=*/true);
    ConsumeLocked(t, /*wait_first=*/false);
    const uint64_t e = QueueEndLocked(t, ahead);
    t->lock.Unlock();
    known = known && e != 0;
    end = std::max(end, e);
  }
  if (known && end > MonotonicNs()) {
    PublishIdleAt(device, end, epoch);  // the arbiter publishes it as the device's drain end
    WakeArbiter();
  }
  bool idle = true;
  for (Track* t : g->tracks) {
    if (!t->live.load() || t->device != device) continue;
    g->driver.ctx_set_current(t->ctx);
    t->lock.Lock();
    while (t->count > 0 && !holds()) ConsumeLocked(t, /*wait_first=*/true);
    idle = idle && t->count == 0 && t->since_mark.load(std::memory_order_relaxed) == 0;
    t->seen_since_mark = 0;
    t->lock.Unlock();
  }
  if (g->devices[device].published_idle_at != 0) PublishIdleAt(device, 0, epoch);
  // Re-granted while it waited (a lane that ended at once, say), its launchers queued more: it
  // is a holder with work, not an idle process (reported idle, the next holder was let in
  // without a drain and queued behind a whole 10 ms kernel).
  return idle && !holds();
}

// One sampler tick. Returns how long to wait for the next: kTickQuietNs while a device counts
// down its quiet ticks (the token, idle meanwhile, goes on that much sooner), kTickBusyNs while
// work is in flight or this process holds a token (less when a track's last mark is expected to
// end sooner: its end is seen then, not up to a period later), else kTickIdleNs.
uint64_t Tick(uint64_t now) {
  std::lock_guard<std::mutex> lock(g->mu);
  bool busy[ledger::kMaxDevices] = {};
  bool worked[ledger::kMaxDevices] = {};  // had work since the last tick (done or not)
  double kernel[ledger::kMaxDevices] = {};
  uint64_t last_end = UINT64_MAX;  // the soonest expected end of a track's last outstanding mark
  // A holder's estimate of when its queued work ends (see kLauncherQuietNs): 0 when some track's
  // end is unknown; the latest activity of its launchers.
  uint64_t queue_end[ledger::kMaxDevices] = {};
  bool end_known[ledger::kMaxDevices] = {};
  uint64_t last_mark[ledger::kMaxDevices] = {};
  uint32_t epoch[ledger::kMaxDevices] = {};
  uint64_t ahead[ledger::kMaxDevices] = {};
  for (int d = 0; d < ledger::kMaxDevices; ++d) {
    const ledger::GateDevice& gd = g->layout->gate.devices[d];
    epoch[d] = g->devices[d].mark_epoch.load();
    end_known[d] = true;
    // Work it launched while holding the token queues behind what revoked holders still drain.
    if ((gd.may_run[g->word_index].load() & g->bit) != 0) ahead[d] = DrainEnd(d);
  }
  for (Track* t : g->tracks) {
    if (!t->live.load() || !t->lock.TryLock()) {
      if (t->live.load()) busy[t->device] = true;  // a launcher holds it: it is active
      continue;
    }
    worked[t->device] = worked[t->device] || t->count > 0;
    ConsumeLocked(t, false);
    const uint32_t n = t->since_mark.load(std::memory_order_relaxed);
    worked[t->device] = worked[t->device] || n != 0;
    if (n != 0 && (n == t->seen_since_mark || t->count == 0)) {
      // Launches left unmarked since the last tick: the stream went quiet; close them. So too
      // when nothing else is outstanding (a sporadic launcher): its burst's end is then seen a
      // tick sooner, and the token it holds goes on a tick sooner.
      g->driver.ctx_set_current(t->ctx);
      MarkLocked(t, /*by_sampler=*/true);
    }
    t->seen_since_mark = t->since_mark.load(std::memory_order_relaxed);
    busy[t->device] = busy[t->device] || t->count > 0 || t->seen_since_mark != 0;
    kernel[t->device] = std::max(kernel[t->device], t->kernel_ns);
    if (const uint64_t due = ExpectedEndLocked(t); t->count == 1 && due != 0) {
      last_end = std::min(last_end, due);
    }
    {
      const uint64_t end = QueueEndLocked(t, ahead[t->device]);
      end_known[t->device] = end_known[t->device] && end != 0;
      queue_end[t->device] = std::max(queue_end[t->device], end);
      last_mark[t->device] = std::max(last_mark[t->device], t->last_marked_ns);
    }
    t->lock.Unlock();
  }
  uint64_t wake_at = UINT64_MAX;  // when a high-priority launcher will have been quiet long enough
  ledger::ProcessCounters& self = Self();
  const bool gated_now = !g->ungated.load();
  bool drained[ledger::kMaxDevices] = {};
  bool any = false, quiet = false;
  for (int d = 0; d < ledger::kMaxDevices; ++d) {
    DeviceGate& dg = g->devices[d];
    // A revoked token: finish what is queued so the next holder starts on an idle device.
    if (busy[d] && gated_now &&
        (g->layout->gate.devices[d].may_run[g->word_index].load() & g->bit) == 0) {
      if (DrainDevice(d)) {
        busy[d] = false;
        drained[d] = true;
      }
    }
    // A launcher just handed the token is about to launch: busy (AwaitToken set the bit; it is
    // read before granted_ns, which AwaitToken writes first, so a bit seen set is never cleared
    // below for a grant that this tick has not seen).
    const bool published = (self.busy_mask.load(std::memory_order_acquire) & (1u << d)) != 0;
    // Only until a tick has seen work: a holder that launched and finished is idle by the
    // quiet-tick rule below, not held busy for the rest of the grace.
    const uint64_t granted = dg.granted_ns.load(std::memory_order_acquire);
    const bool holds = (g->layout->gate.devices[d].may_run[g->word_index].load() & g->bit) != 0;
    if (busy[d] || worked[d]) {
      dg.confirmed_ns = granted;  // its launches were seen (a short kernel may be done already)
    } else if (!drained[d] && holds && granted != dg.confirmed_ns &&
               now < granted + kGrantedGraceNs) {
      busy[d] = true;
    }
    // A holder between two launches (its marks all complete, its thread about to launch again)
    // is not idle: it must stay quiet for kQuietTicks ticks before the token goes on.
    if (busy[d] || drained[d]) {
      dg.quiet_ticks = 0;
    } else if (dg.busy && ++dg.quiet_ticks < kQuietTicks) {
      busy[d] = true;
    }
    if (busy[d] && !dg.busy) dg.busy_since_ns = now;
    if (!busy[d] && dg.busy && !drained[d]) {
      // A burst that ended on its own (not cut short by a revocation) tells the quota it needs.
      const double burst = static_cast<double>(now - dg.busy_since_ns);
      dg.burst_ns = dg.burst_ns < 1.0 ? burst : 0.75 * dg.burst_ns + 0.25 * burst;
    }
    // Published: the sampler's view, except a bit AwaitToken set that no tick confirmed (the
    // launcher never launched, or this thread slept past the grace) is cleared here too.
    if (busy[d] != dg.busy || busy[d] != published) {
      dg.busy = busy[d];
      if (busy[d]) {
        self.busy_mask.fetch_or(1u << d, std::memory_order_acq_rel);
      } else {
        self.busy_mask.fetch_and(~(1u << d), std::memory_order_acq_rel);
        WakeArbiter();  // the holder went idle or finished draining: hand the token on
      }
    }
    // The quota this process's bursts call for: its natural burst length, at least 8 kernels.
    // A process that never goes idle by itself has no hint: it gets the longest quota.
    self.quota_hint_ns[d].store(
        dg.burst_ns > 0 ? static_cast<uint64_t>(std::max(dg.burst_ns, 8.0 * kernel[d])) : 0,
        std::memory_order_relaxed);
    // A holder done launching for now says when its work ends: a high-priority one hands the
    // lane back just before then, and a best-effort one offers the token to the others at its
    // tail (the arbiter keeps it there while it is still the furthest behind its share), so the
    // GPU does not idle while this process finds out that its last kernel finished, nor while it
    // makes its host round trip (a synchronisation) before the next. A launcher waiting for room
    // in flight is not done launching.
    {
      uint64_t idle_at = 0;
      // Quiet since its last mark, or since it was handed the token (it launches next).
      const uint64_t quiet_from = std::max(last_mark[d], granted);
      if (dg.busy && holds && gated_now && end_known[d] && queue_end[d] != 0 &&
          dg.room_waiters.load(std::memory_order_relaxed) == 0) {
        if (quiet_from + kLauncherQuietNs <= now) {
          idle_at = queue_end[d];
        } else {
          wake_at = std::min(wake_at, quiet_from + kLauncherQuietNs);
        }
      }
      if (idle_at != dg.published_idle_at) {
        PublishIdleAt(d, idle_at, epoch[d]);
        if (dg.published_idle_at != 0) WakeArbiter();
      }
    }
    // A holder ticks fast even when idle: a launcher that got the token just after this tick
    // (its bit set, its kernel possibly done by the next) must not keep it for an idle period.
    // An open lane alone is not a grant: an idle high-priority process ticks slowly.
    any = any || dg.busy || (holds && gated_now && Granted(d));
    quiet = quiet || (dg.busy && dg.quiet_ticks > 0);
  }
  self.beat_ns.store(now, std::memory_order_release);
  uint64_t wait = kTickBusyNs;
  if (quiet) {
    wait = kTickQuietNs;
  } else if (!any) {
    wait = kTickIdleNs;
  } else if (last_end < now + kTickBusyNs) {
    wait = std::max(last_end > now ? last_end - now + kTickQuietNs / 4 : 0, kTickQuietNs);
  }
  return std::min(wait, wake_at - now);
}

void* SamplerMain(void*) {
  prctl(PR_SET_TIMERSLACK, kSamplerTimerSlackNs, 0, 0, 0);  // this thread only
  // The sampler may query events while the application captures a graph in global mode.
  if (g->driver.exchange_capture_mode != nullptr) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    g->driver.exchange_capture_mode(&mode);
  }
  uint64_t wait_ns = kTickBusyNs;
  while (!g->exiting.load(std::memory_order_acquire)) {
    const uint64_t now = MonotonicNs();
    if (g->ungated.load() && ArbiterAlive(now)) {
      std::fprintf(stderr, "tessera: the Tessera daemon's arbiter is back; gating resumes\n");
      SetUngated(false);
    }
    wait_ns = Tick(now);
    const ledger::GateDevice& gd = g->layout->gate.devices[g->primary_device];
    const uint32_t seq = gd.grant_seq.load(std::memory_order_acquire);
    ipc::FutexWait(&gd.grant_seq, seq, wait_ns);
  }
  g->sampler_done.store(true, std::memory_order_release);
  return nullptr;
}

// TESSERA_GATE_STATS=1: one line at exit with how this process's launches waited, and one per
// track with what the gate learned of its kernels (docs/contracts.md).
void PrintStats() {
  const char* on = std::getenv("TESSERA_GATE_STATS");
  if (on == nullptr || std::strcmp(on, "1") != 0) return;
  std::fprintf(stderr,
               "tessera: gate stats pid %d: token waits %llu (%.3f ms), room waits %llu (%.3f ms, "
               "%llu naps, %llu syncs), drains %llu\n",
               static_cast<int>(getpid()), static_cast<unsigned long long>(g->token_waits.load()),
               static_cast<double>(g->token_wait_ns.load()) / 1e6,
               static_cast<unsigned long long>(g->room_waits.load()),
               static_cast<double>(g->room_wait_ns.load()) / 1e6,
               static_cast<unsigned long long>(g->room_naps.load()),
               static_cast<unsigned long long>(g->room_syncs.load()),
               static_cast<unsigned long long>(g->drains.load()));
  std::lock_guard<std::mutex> lock(g->mu);
  for (const Track* t : g->tracks) {
    std::fprintf(stderr,
                 "tessera: gate stats track %p: kernel %.0f ns (%s), a mark every %u launches, "
                 "%u marks in flight at most\n",
                 static_cast<const void*>(t->stream), t->kernel_ns,
                 t->measured ? "measured" : "not measured", t->mark_every.load(),
                 t->max_outstanding.load());
  }
}

void StopSamplerAtExit() {
  if (g == nullptr) return;
  if (g->sampler_running.load()) {
    g->exiting.store(true, std::memory_order_release);
    ipc::FutexWakeAll(&g->layout->gate.devices[g->primary_device].grant_seq);
    // Wait briefly (it may be finishing a drain); the process is exiting either way.
    for (int i = 0; i < 200 && !g->sampler_done.load(std::memory_order_acquire); ++i) {
      timespec ts{0, 250'000};
      nanosleep(&ts, nullptr);
    }
  }
  PrintStats();
}

void StartSampler() {
  if (g->sampler_running.load(std::memory_order_acquire)) return;
  bool expected = false;
  if (!g->sampler_running.compare_exchange_strong(expected, true)) return;
  g->sampler_done.store(false);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, SamplerMain, nullptr) != 0) {
    std::fprintf(stderr,
                 "tessera: cannot start the GPU-time sampler thread; launches stay gated "
                 "but this process's GPU time is not measured\n");
    g->sampler_done.store(true);
  }
  pthread_attr_destroy(&attr);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(StopSamplerAtExit); });
}

}  // namespace

void StartGate(const GateDriver& driver, const GateLedger& ledger, uint32_t container,
               uint32_t process, const int* physical, int visible_count) {
  if (g == nullptr) g = new GateState();
  g->driver = driver;
  g->layout = ledger.node;
  g->own = ledger.own;
  g->exchange = ledger.exchange;
  g->container = container;
  g->process = process;
  g->bit = uint64_t{1} << (container % 64);
  g->word_index = static_cast<int>(container / 64);
  g->visible_count = std::min(visible_count, ledger::kMaxDevices);
  for (int i = 0; i < g->visible_count; ++i) g->physical[i] = physical[i];
  g->primary_device = g->visible_count > 0 ? physical[0] : 0;
  SetUngated(false);
  g->started.store(true, std::memory_order_release);
}

void ResetGateAfterFork() {
  if (g == nullptr) return;
  // The parent's threads do not exist here: the mutex may have been held by one of them.
  new (&g->mu) std::mutex();
  g->ring_lock.Unlock();
  for (Track* t : g->tracks) t->live.store(false);
  g->tracks.clear();  // the parent's events are not ours to destroy (CUDA forbids it anyway)
  g->free_tracks.clear();
  for (DeviceGate& d : g->devices) {
    d.busy = false;
    d.burst_ns = 0;
    d.granted_ns.store(0);
    d.confirmed_ns = 0;
  }
  g->sampler_running.store(false);
  g->sampler_done.store(true);
  g->started.store(false);
  g_stream_generation.fetch_add(1);
}

Track* BeforeLaunch(CUstream stream, bool per_thread) {
  if (g == nullptr || !g->started.load(std::memory_order_acquire)) return nullptr;
  const bool capturing = __builtin_expect(g_captures.load(std::memory_order_acquire) != 0, 0);
  if (capturing && LaunchCaptured(stream, per_thread)) return nullptr;
  RelaxedWhileCapturing relaxed(capturing);
  const TrackCache& cache = t_cache;
  Track* t = cache.track;
  if (__builtin_expect(
          t == nullptr || cache.stream != stream || cache.per_thread_entry != per_thread ||
              cache.stream_generation != g_stream_generation.load(std::memory_order_relaxed),
          0)) {
    t = LookupSlow(stream, per_thread);
    if (t == nullptr) return nullptr;
  }
  const int d = t->device;
  // Policy 5 (native): no compute control at all; the launch is neither gated nor measured.
  if (__builtin_expect(g->layout->gate.devices[d].gated.load(std::memory_order_relaxed) == 0, 0)) {
    return nullptr;
  }
  // The token first, then room in flight; a wait for room re-checks the token, since it may have
  // been revoked meanwhile (else a revoked holder would slip one more kernel in after the wait).
  bool lead = false;  // AwaitInflight let this launch queue behind a mark about to end
  for (;;) {
    if (__builtin_expect(
            (g->devices[d].word.load(std::memory_order_acquire)->load(std::memory_order_acquire) &
             g->bit) == 0,
            0)) {
      t->lead_launch.store(false, std::memory_order_relaxed);  // it waits: no launch is imminent
      AwaitToken(d);
    }
    if (__builtin_expect(t->outstanding.load(std::memory_order_relaxed) <
                             t->max_outstanding.load(std::memory_order_relaxed),
                         1) ||
        lead) {
      break;
    }
    lead = AwaitInflight(t);
  }
  return t;
}

void AfterLaunch(Track* t, CUresult launched) {
  if (t == nullptr) return;
  if (__builtin_expect(t->lead_launch.load(std::memory_order_relaxed), 0)) {
    t->lead_launch.store(false, std::memory_order_release);
  }
  if (launched != CUDA_SUCCESS) return;
  const uint32_t n = t->since_mark.load(std::memory_order_relaxed) + 1;
  t->since_mark.store(n, std::memory_order_relaxed);
  if (n == 1) {
    t->first_launch_ns.store(MonotonicNs(), std::memory_order_relaxed);
    // The first launch through an open high-priority lane after a quiet spell (it did not wait
    // for the token, so nothing told the arbiter): the arbiter learns of it now, not at the
    // sampler's next idle tick, and revokes the best-effort holder. Anyone else's launch here
    // costs two loads (a holder whose busy bit the sampler cleared is seen at the next tick, as
    // before: no system call on this path).
    if (__builtin_expect(
            (Self().busy_mask.load(std::memory_order_relaxed) & (1u << t->device)) == 0, 0) &&
        HighPriority() && !Granted(t->device)) {
      NoteLaunchWhileIdle(t->device);
    }
  }
  if (__builtin_expect(n >= t->mark_every.load(std::memory_order_relaxed), 0)) {
    RelaxedWhileCapturing relaxed(g_captures.load(std::memory_order_acquire) != 0);
    t->lock.Lock();
    MarkLocked(t, /*by_sampler=*/false);
    t->lock.Unlock();
  }
}

namespace {
// Drops the tracks matching `match` (the sampler is not inside a tick while g->mu is held).
template <typename Match>
void Forget(Match match) {
  if (g == nullptr) return;
  std::lock_guard<std::mutex> lock(g->mu);
  for (auto it = g->tracks.begin(); it != g->tracks.end();) {
    Track* t = *it;
    if (!match(t)) {
      ++it;
      continue;
    }
    t->live.store(false);
    t->lock.Lock();
    while (t->count > 0) ConsumeLocked(t, /*wait_first=*/true);
    g->driver.event_destroy(t->ref);
    for (Mark& m : t->ring) g->driver.event_destroy(m.event);
    t->lock.Unlock();
    g->free_tracks.push_back(t);
    it = g->tracks.erase(it);
  }
  g_stream_generation.fetch_add(1, std::memory_order_acq_rel);
}
}  // namespace

void BeforeSynchronize() {
  if (g == nullptr || !g->started.load(std::memory_order_acquire)) return;
  // During a capture a synchronisation is the application's own error; nothing is marked then.
  if (g_captures.load(std::memory_order_acquire) != 0) return;
  std::unique_lock<std::mutex> lock(g->mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  CUcontext ctx = nullptr;
  if (g->driver.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  for (Track* t : g->tracks) {
    if (!t->live.load() || t->ctx != ctx || t->since_mark.load(std::memory_order_relaxed) == 0) {
      continue;
    }
    // Another thread's per-thread stream is that thread's to mark (a mark there must be recorded
    // by its owner).
    if (t->per_thread && t->owner != &t_thread_tag) continue;
    t->lock.Lock();
    MarkLocked(t, /*by_sampler=*/false);
    t->lock.Unlock();
  }
}

void ForgetStream(CUstream stream) {
  if (stream == nullptr || stream == TESSERA_CU_STREAM_LEGACY ||
      stream == TESSERA_CU_STREAM_PER_THREAD) {
    return;
  }
  Forget([&](Track* t) { return t->stream == stream; });
}

void ForgetContext(CUcontext ctx) {
  Forget([&](Track* t) { return t->ctx == ctx; });
}

void CurrentContextChanged() { t_cache.track = nullptr; }

void CaptureBegins() {
  BeforeSynchronize();  // the calling thread's open launches are marked while they still may be
  g_captures.fetch_add(1, std::memory_order_acq_rel);
}
void CaptureEnds() {
  if (g_captures.fetch_sub(1, std::memory_order_acq_rel) <= 0) g_captures.fetch_add(1);
}

}  // namespace tessera::gate
