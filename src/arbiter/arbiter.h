// Arbiter: the scheduling core that shares ONE GPU's time among its containers (docs/contracts.md,
// the policies). It decides which container holds the GPU's exclusive time token now and until
// when; it is told which containers have work waiting and how much GPU time each one actually used.
//
// What this file must not do: no I/O, no logging, no threads, no shared memory, no sleeping. The
// time comes from an injected Clock, so every decision is deterministic and unit-tested with a
// ManualClock. The daemon (not this library) turns decisions into futex hand-offs in shared
// memory. An Arbiter is not thread-safe: its owner serialises calls.
//
// How it decides (one scheduler for all six policies):
//  * Accounting. Every container has a sliding window (config.window, 1 s by default) of the GPU
//    time it was charged: measured time, overrun included (UsageWindow). Each container also has a
//    virtual time, the GPU time it was charged in total, and a share time, each charge divided by
//    the fraction of the window its cap was (a 25 % container's 1 ms counts 4 ms). A floor follows
//    the smallest of each among containers with work and never decreases; a container that starts
//    having work again after more than a tenth of the window without any is raised to them (no
//    banked credit for the time it idled). A shorter pause (a process between two launches, a
//    sync, a data-loader stall) keeps its place: raising it at every such pause cost a tenant
//    that paused often its catch-up each time (2 % of a 33 % share in the scenario benchmark).
//  * Caps. A container's cap is a budget of GPU time per window:
//      0 fair                 min(window / max_inst, core limit)
//      1 preemptive, 4 weak   core limit
//      2 weighted preemptive  min(window * weight / (sum of the weights of all containers that
//                             exist), core limit)
//      3 fixed percentage     core limit when one is set (< 100 %), else window * weight / max_inst
//      5 native               none
//    A container whose window usage has reached its cap may not hold the token, except under 0, 2
//    and 3 while the caps of the containers with work add up to the whole window (a saturated
//    30/70 or 1:2:3 split): then no share is idle to protect, and the order below alone keeps each
//    at its cap. Checking the cap there too left each tenant about half a grant above its share,
//    which favoured the smallest (16.87 / 33.67 / 49.47 % for 1:2:3 with 10 ms kernels in the
//    unit test; 17.2 % for 16.7 % in the scenario benchmark). Under 0, 2 and 3
//    the cap is also the container's reserved share: another container never gets it, so the GPU
//    idles when the owner has no work (policy 2 reserves the share of an existing but idle
//    container, as cGPU does). Under 1 and 4 only containers with pending work count.
//  * Order. Among the containers with pending work under their cap: policies 1 and 4 pick the
//    smallest virtual time (equal shares, work-conserving); policies 0, 2 and 3 pick the smallest
//    share time (the one furthest behind its share: weighted fair queueing, whose long-run shares
//    carry no bias from grant sizes, unlike an order by window usage). Ties go to the one granted
//    least recently.
//  * High-priority lane, ahead of the policy (not under 5). A high-priority container with pending
//    work whose window usage is below prio_ratio % of the window (and below its core limit) is
//    granted before anyone else, and a grant to a best-effort holder ends at once when that
//    happens. Beyond prio_ratio it competes under the policy like anyone else, its lane time
//    counted (so under 0, 2 and 3 it gets max(prio_ratio, its share) while it is saturated).
//    Such a container's lane is also open (Decision::lane_open) while it has no work: the owner
//    lets its next launch in at once and tells the arbiter, instead of waiting for a decision.
//  * Quota. A grant lasts min(quota hint, remaining cap budget) within [quota_min, quota_max]; the
//    hint comes from the container's measured kernel bursts (SetQuotaHint; quota_max without one).
//    So a grant is never shorter than quota_min nor longer than quota_max (2 ms
//    and 20 ms by default: a futex hand-off costs microseconds, so milliseconds are affordable). A
//    grant is kept until its end unless the holder stops having work, is removed, or the
//    high-priority lane takes over; what the holder overran is charged and the window corrects
//    it. Hence any window's usage stays within cap + quota_min + one kernel, which bounds the share
//    error over a 10 s measurement to well under the 2 points issue 4 asks for with 1 ms kernels.
//  * Weak (4) is policy 1's token plus overlap: the decision is not exclusive, and every other
//    container with pending work under its cap may also run (the gate lets them launch; their
//    time is charged too, so the order still evens out who is the token holder).
//  * Native (5): no compute control. Every container that exists may run at any time; no caps, no
//    high-priority lane.
//  * Idle. When nobody may hold the token, the decision says until when nothing can change by
//    itself (the earliest instant a capped container with work falls back under its cap).
// The owner calls Decide() after every SetPending, Charge, container or config change, and when
// the current grant's `until` has passed.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arbiter/usage_window.h"
#include "core/arbiter_policy.h"
#include "core/clock.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::arbiter {

// Containers are numbered 0 to kMaxContainers - 1 (the memory ledger's container slots).
inline constexpr int kMaxContainers = 256;
// max_inst is at most this (and every container's weight at most max_inst).
inline constexpr int kMaxInstLimit = kMaxContainers;
inline constexpr int kMinPrioRatio = 20;
inline constexpr int kMaxPrioRatio = 99;
inline constexpr Nanos kMinWindow = std::chrono::milliseconds(10);
inline constexpr Nanos kMaxWindow = std::chrono::seconds(60);
inline constexpr Nanos kMinQuota = std::chrono::microseconds(100);

struct ArbiterConfig {
  ArbiterPolicy policy = ArbiterPolicy::kFair;
  int max_inst = 16;  // 1 to kMaxInstLimit: the GPU's slots (policy 0) and weight units
  Percent prio_ratio = *Percent::FromInt(50);       // 20 to 99: the high-priority lane's cap
  Nanos window = std::chrono::seconds(1);           // kMinWindow to kMaxWindow
  Nanos quota_min = std::chrono::milliseconds(2);   // kMinQuota to quota_max
  Nanos quota_max = std::chrono::milliseconds(20);  // quota_min to window
};

// OK, or an error naming the field, its value and what is allowed.
Status ValidateArbiterConfig(const ArbiterConfig& config);

struct ContainerSpec {
  int weight = 1;                        // 1 to max_inst
  Percent core_limit = Percent::Full();  // 1 to 100; 100 = no limit (TESSERA_CORE_LIMIT)
  bool high_priority = false;            // the cGPU `highprio` flag
};

// What Decide() returns.
struct Decision {
  // The token holder, or nullopt: nobody holds it (no work, or the GPU idles on purpose).
  std::optional<int> holder;
  // Decide() again at this instant at the latest (Nanos::max() when nothing will change by
  // itself). For a holder: the end of its quota.
  Nanos until = Nanos::max();
  // False under policies 4 and 5: the containers in may_run may overlap.
  bool exclusive = true;
  // The holder was granted through the high-priority lane.
  bool high_priority_lane = false;
  // Who may launch now: just the holder when exclusive.
  std::bitset<kMaxContainers> may_run;
  // High-priority containers that may take the lane by themselves, before the owner asks again
  // (their launch would be granted through the lane): under their lane cap, and no other
  // container's lane holds the token. Empty under policy 5.
  std::bitset<kMaxContainers> lane_open;

  bool MayRun(int container) const {
    return container >= 0 && container < kMaxContainers && may_run.test(container);
  }
};

class Arbiter {
 public:
  // An arbiter reading time from `clock` (which must outlive it), or the config's first error.
  static Result<Arbiter> Create(const Clock* clock, const ArbiterConfig& config);

  Arbiter(Arbiter&&) = default;
  Arbiter& operator=(Arbiter&&) = default;
  Arbiter(const Arbiter&) = delete;
  Arbiter& operator=(const Arbiter&) = delete;

  const ArbiterConfig& config() const { return config_; }
  // Changes the config live (e.g. `tessera ctl set 0/policy 2`); usage history is kept, the
  // current grant ends. Refused when invalid, or when max_inst would fall below the weights given.
  Status Configure(const ArbiterConfig& config);

  // Adds container `id` (0 to kMaxContainers - 1), with no pending work. Refused when the spec is
  // invalid or its weight exceeds free_weight().
  Status AddContainer(int id, const ContainerSpec& spec);
  // Changes an existing container's weight, core limit or priority; ends its grant.
  Status UpdateContainer(int id, const ContainerSpec& spec);
  // Removes a container, its history and its grant.
  Status RemoveContainer(int id);
  // Whether the container has work waiting to be launched (a process blocked at the gate).
  Status SetPending(int id, bool has_work);
  // `gpu_time` (>= 0) of measured GPU time the container used, ending now.
  Status Charge(int id, Nanos gpu_time);
  // Takes back `gpu_time` (>= 0) of what the container was charged: time found to be another
  // container's after all (DeviceTimeline). Its window, virtual and share times go down by it.
  Status Refund(int id, Nanos gpu_time);
  // The quota the container's kernel bursts call for (adaptive quota): its grants last
  // min(hint, remaining budget), within [quota_min, quota_max]. Zero: no hint (quota_max).
  Status SetQuotaHint(int id, Nanos hint);

  // The holder `id` offers its grant back before its end: its queued work is about to end and it
  // has launched nothing more (a host round trip, a synchronisation), though it still has work.
  // The next Decide() chooses again among everyone with work, `id` included, so the token moves
  // only to a container further behind its share (or level with it and granted less recently).
  // `queued` is the holder's work still running and not charged yet: that choice counts it as
  // charged (else a holder would look a kernel lighter at every tail and keep the token for a
  // second kernel, idling the GPU through a second round trip). Nothing happens when `id` does
  // not hold a grant or holds it through the high-priority lane.
  Status Yield(int id, Nanos queued = Nanos{0});

  // Who may run now, and until when.
  Decision Decide();

  // max_inst minus the weights of all containers (the control tree's `free_weight`).
  int free_weight() const;
  // The container's GPU time in the current window, or an error when it does not exist.
  Result<Nanos> UsedInWindow(int id);

 private:
  struct Slot {
    bool present = false;
    bool pending = false;
    ContainerSpec spec;
    Nanos virtual_time{0};
    // Policies 0, 2, 3: the GPU time charged, each charge divided by the share of the window its
    // cap was then (ns; a 25 % container's 1 ms counts 4 ms). Raised to share_floor_ like
    // virtual_time when it gets work again.
    double share_time = 0;
    // When it last stopped having work; Nanos::min(): never had any.
    Nanos idle_since = Nanos::min();
    uint64_t last_grant = 0;  // sequence number of its latest grant; 0 = never
    Nanos quota_hint{0};      // 0: none
    UsageWindow usage{Nanos{0}};
  };

  Arbiter(const Clock* clock, const ArbiterConfig& config);

  Status CheckId(int id, const char* action) const;
  Status CheckSpec(int id, const ContainerSpec& spec) const;
  // The container's GPU time budget per window under the current policy (Nanos::max(): none).
  Nanos Cap(const Slot& slot) const;
  // The high-priority lane's budget per window: min(prio_ratio, core limit) of the window.
  Nanos LaneCap(const Slot& slot) const;
  Nanos ClampQuota(Nanos budget) const;
  // Policies 0, 2, 3: whether the caps of the containers with work add up to the whole window.
  bool Subscribed() const;
  // Raises virtual_floor_ (share_floor_) to the smallest virtual_time (share_time) among
  // containers with work.
  void AdvanceVirtualFloor();
  Decision Grant(int id, Nanos now, Nanos budget, bool lane);
  // Sets decision->lane_open from used_ (see Decision::lane_open).
  void OpenLanes(Decision* decision) const;

  const Clock* clock_;
  ArbiterConfig config_;
  std::vector<Slot> slots_;   // kMaxContainers, indexed by container id
  std::vector<int> present_;  // ids of present containers, ascending
  int weight_sum_ = 0;
  uint64_t grant_sequence_ = 0;
  // Never decreases: a container that gets work again starts no lower (no banked credit).
  Nanos virtual_floor_{0};
  double share_floor_ = 0;                                        // the same for share_time
  std::vector<Nanos> used_ = std::vector<Nanos>(kMaxContainers);  // scratch for Decide()
  std::optional<Decision> current_;                               // the grant in force, if any
  // Set by Yield for the next Decide(): the yielding holder and its work not charged yet.
  int yielded_ = -1;
  Nanos yielded_queued_{0};
};

}  // namespace tessera::arbiter
