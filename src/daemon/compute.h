// ComputeService: tesserad's side of compute isolation. One Arbiter per GPU (src/arbiter), driven
// by a thread of its own that turns the shared ledger into arbiter input and the arbiter's
// decisions into the token the shim's gate reads:
//   - it reads the busy intervals each process's gate measured (ProcessCounters::intervals) and
//     rebuilds from them who held each GPU when (arbiter::DeviceTimeline), so every container is
//     charged the device time its kernels occupied, not the time they waited behind another's
//     (what a process's gpu_ns holds beyond its intervals is charged as it is); that is also the
//     GPU time it reports (Shares, and the book's gate_gpu_ns counters that the metrics and the
//     reconciler read); a container has work while one of its processes waits at the gate or
//     has work in flight (and its sampler still beats: a stopped process holds nobody up);
//   - it publishes who may launch (GateDevice::may_run) and wakes the waiters through the futex;
//     a best-effort holder whose queued work is about to end and that launches nothing more (a
//     host round trip between kernels) offers the token back (Arbiter::Yield), and the next
//     holder, if the order picks another, is let in before that work ends;
//     a revoked holder's queued work drains before the next holder is let in (bounded by
//     quota_max, so a hung holder loses the token within one quota), except for the
//     high-priority lane, which is admitted at once; the next holder is let in kHandoffLeadNs
//     before the drain is expected to end (ProcessCounters::idle_at_ns), so that its first kernels
//     queue behind the last ones instead of meeting an idle GPU; likewise a high-priority
//     process done launching stops counting as having work that much before its work ends;
//   - it beats (GateHeader::beat_ns), so processes can tell a lost daemon from a busy GPU.
// It sleeps on the ledger's demand futex, which processes bump when they start waiting or go
// idle, or until the current grant ends.
//
// Thread-safety: every public method may be called from the daemon's event loop while the thread
// runs; one mutex guards the arbiters. What it must not do: registry bookkeeping (slots, sockets)
// and I/O other than a log line to stderr.
#pragma once

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arbiter/arbiter.h"
#include "arbiter/device_timeline.h"
#include "arbiter/usage_window.h"
#include "core/clock.h"
#include "core/result.h"
#include "ledger/memory_ledger.h"

namespace tessera::daemon {

struct ComputeOptions {
  arbiter::ArbiterConfig defaults;           // every GPU's config at start
  uint64_t loss_timeout_ns = 2'000'000'000;  // processes go ungated after this without a beat
};

// One container's share of one GPU, for `tessera smi` and the metrics.
struct ContainerShare {
  int container = 0;
  std::optional<double> target;  // percent of the GPU; nullopt under policy 5 (no control)
  // Percent of the GPU over the arbiter's window: the device time its kernels occupied there (as
  // the gates' intervals place it, and what reconciliation found beyond them).
  double achieved = 0;
  // The same since the container took its slot (or this daemon started), in seconds: cumulative,
  // never decreasing (tessera_container_gpu_seconds_total).
  double gpu_seconds = 0;
  bool holder = false;
  bool pending = false;
  int weight = 1;
  bool high_priority = false;
  // Times the arbiter granted the container the token on this GPU since it joined the GPU's
  // arbiter (tessera_container_token_grants_total); back to 0 when it leaves.
  uint64_t grants = 0;
};

struct DeviceShares {
  arbiter::ArbiterConfig config;
  int free_weight = 0;
  // The instant (CLOCK_MONOTONIC ns) the containers' GPU-time figures run to: a little before
  // now, once what ran has been reported by every process (they are final from there).
  uint64_t gpu_time_until_ns = 0;
  std::vector<ContainerShare> containers;
};

class ComputeService {
 public:
  // Validates the options; the thread starts with Start().
  // `ledger` is the daemon's (CreateOrOpen): the service keeps its segment and book, which stay
  // where they are when the ledger object itself is moved (into the Registry).
  static Result<std::unique_ptr<ComputeService>> Create(const ledger::MemoryLedger& ledger,
                                                        const ComputeOptions& options);
  ~ComputeService();
  ComputeService(const ComputeService&) = delete;
  ComputeService& operator=(const ComputeService&) = delete;

  void Start();
  void Stop();
  // One arbiter pass now, on the caller's thread (the ledger fuzzer; the thread runs the same).
  void RunOnce();

  int device_count() const { return static_cast<int>(devices_.size()); }
  arbiter::ArbiterConfig Config(int device) const;
  // Changes one GPU's policy, max_inst or prio_ratio live (validated by the arbiter).
  Status Configure(int device, const arbiter::ArbiterConfig& config);
  // Whether a new container of `weight` fits every listed GPU's free weight (max_inst).
  Status CanAdmit(const std::vector<int>& devices, int weight) const;
  DeviceShares Shares(int device) const;

 private:
  struct Device {
    std::optional<arbiter::Arbiter> arbiter;
    std::bitset<ledger::kMaxContainers> present;
    std::bitset<ledger::kMaxContainers> published;
    std::bitset<ledger::kMaxContainers> lane_open;  // as published (GateDevice::lane_open)
    std::bitset<ledger::kMaxContainers> draining;
    std::bitset<ledger::kMaxContainers> tail_revoked;  // draining: revoked at its tail (Yield)
    std::bitset<ledger::kMaxContainers> pending;
    std::vector<uint64_t> grants = std::vector<uint64_t>(ledger::kMaxContainers);  // see Shares
    std::optional<int> holder;
    bool lane = false;
    uint64_t drain_deadline_ns = 0;
    bool overrun_charged = false;  // the draining holders were charged for passing the deadline
    // GPU time each revoked holder was measured using since its revoke, and what it was charged
    // ahead at the deadline for the part of the wait that measured time did not cover, which its
    // later measured time pays back (until its next grant): see Step.
    std::vector<uint64_t> drained_ns = std::vector<uint64_t>(ledger::kMaxContainers);
    std::vector<uint64_t> overrun_credit_ns = std::vector<uint64_t>(ledger::kMaxContainers);
    uint64_t charge_from_ns = 0;  // as published with the last grant (GateDevice::charge_from_ns)
    uint64_t next_ns = 0;         // decide again by then
    // Who ran when, from the gates' intervals, and what each container ran over the window (the
    // reported figure: no deadline charges or credits, which only the arbiter's order sees).
    arbiter::DeviceTimeline timeline{500'000'000};  // half a second for late intervals
    std::vector<arbiter::UsageWindow> ran =
        std::vector<arbiter::UsageWindow>(ledger::kMaxContainers, arbiter::UsageWindow(Nanos{0}));
    // Per container: where the latest interval placed on the timeline ended.
    std::vector<uint64_t> placed_until_ns = std::vector<uint64_t>(ledger::kMaxContainers);
  };
  struct Member {  // what the arbiter was told about a container slot
    uint32_t generation = 0;
    arbiter::ContainerSpec spec;
    bool known = false;
    bool refused_logged = false;
  };

  ComputeService(const ledger::MemoryLedger& ledger, const ComputeOptions& options);
  void Loop();
  // One pass: sync containers, charge, decide, publish. Returns when to run again.
  uint64_t Step(uint64_t now);
  void SyncContainers();
  // Reads process `p`'s new intervals (and what its gpu_ns holds beyond them) into the devices'
  // timelines and *charge (per device and container; negative: refunds).
  void ReadIntervals(int p, uint32_t c, uint64_t now, std::vector<std::vector<int64_t>>* charge);
  // Adds `ns` of settled device time, ending at `end`, to the book's counters of process `p` and
  // its container `c` and to the container's reported window on GPU `d`.
  void Attribute(int p, uint32_t c, int d, uint64_t end, uint64_t ns);
  void Publish(int d, bool gated);
  // Whether a process of `containers` still has work on GPU `d` that is not ending within the
  // hand-off lead (the tail lead for those in `tails`); *wake: when the next published end comes
  // within the lead; *end: the latest published end still ahead (left as it is when none is).
  bool Draining(const std::bitset<ledger::kMaxContainers>& containers,
                const std::bitset<ledger::kMaxContainers>& tails, int d, uint64_t now,
                uint64_t* wake, uint64_t* end) const;

  ledger::LedgerLayout* layout_;
  // The ledger's mappings (they outlive the MemoryLedger object, which the registry takes over).
  ledger::ContainerSegment* segments_;
  ledger::Exchange* exchange_;
  // Process `p`'s counters, in the segment of the container the book says it belongs to.
  const ledger::ProcessCounters& Process(int p) const {
    return segments_[book_->processes[p].container.load() % ledger::kMaxContainers].processes[p];
  }
  // Who is live, in which container, with which settings: the daemon's book, never the segment
  // (a tenant can write anything there; ledger/memory_ledger.h).
  const ledger::LedgerBook* book_;
  ledger::LedgerBook* compute_book_;  // its gate_gpu_ns counters (MemoryLedger::compute_book)
  ComputeOptions options_;
  MonotonicClock clock_;
  mutable std::mutex mu_;
  std::vector<Device> devices_;
  std::vector<Member> members_ = std::vector<Member>(ledger::kMaxContainers);
  // Per container slot and GPU: the book's unseen_gpu_ns already charged (reconciliation's charge
  // for device time the gates did not measure), with the container generation it belongs to.
  std::vector<std::pair<uint32_t, uint64_t>> unseen_gpu_charged_ =
      std::vector<std::pair<uint32_t, uint64_t>>(ledger::kMaxContainers * ledger::kMaxDevices);
  // Per process slot: the generation last seen live, whether a live process was seen there by
  // this daemon (or found live at its start), and the GPU time already charged per device.
  std::vector<uint32_t> process_generation_ = std::vector<uint32_t>(ledger::kMaxProcesses);
  std::vector<bool> process_tracked_ = std::vector<bool>(ledger::kMaxProcesses);
  std::vector<uint64_t> process_seen_ns_ =
      std::vector<uint64_t>(ledger::kMaxProcesses * ledger::kMaxDevices);
  // Per process slot: the next entry of its ring of intervals to read.
  std::vector<uint64_t> ring_next_ = std::vector<uint64_t>(ledger::kMaxProcesses);
  bool trace_ = false;  // TESSERA_TRACE_ARBITER=1: every publication to stderr (debugging)
  // With trace_: each container's charges on GPU 0 so far, printed about once a second.
  std::vector<uint64_t> trace_charged_ = std::vector<uint64_t>(ledger::kMaxContainers);
  std::vector<uint64_t> trace_returns_ = std::vector<uint64_t>(ledger::kMaxContainers);
  uint64_t trace_printed_ns_ = 0;
  // With trace_: each process slot's last idle_at_ns on GPU 0 (printed when it changes, in us).
  std::vector<uint64_t> trace_idle_at_ = std::vector<uint64_t>(ledger::kMaxProcesses);
  std::vector<arbiter::DeviceTimeline::Delta> deltas_;  // scratch for ReadIntervals
  std::vector<arbiter::DeviceTimeline::Piece> pieces_;  // scratch for Step
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::daemon
