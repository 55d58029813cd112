// Arbiter: the per-GPU scheduling decisions (see arbiter.h for the design). Pure logic over an
// injected clock: no I/O, no logging, no threads, no shared memory.
#include "arbiter/arbiter.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace tessera::arbiter {
namespace {

// "1s", "20ms", "150us" or "7ns": the largest unit that divides the value.
std::string FormatNanos(Nanos value) {
  const int64_t ns = value.count();
  if (ns != 0 && ns % 1'000'000'000 == 0) {
    return std::to_string(ns / 1'000'000'000) + "s";
  }
  if (ns != 0 && ns % 1'000'000 == 0) {
    return std::to_string(ns / 1'000'000) + "ms";
  }
  if (ns != 0 && ns % 1'000 == 0) {
    return std::to_string(ns / 1'000) + "us";
  }
  return std::to_string(ns) + "ns";
}

// `percent` % of `window`.
Nanos PercentOf(Nanos window, int percent) { return window * percent / 100; }

bool IsWorkConserving(ArbiterPolicy policy) {
  return policy == ArbiterPolicy::kPreemptive || policy == ArbiterPolicy::kWeak;
}

}  // namespace

Status ValidateArbiterConfig(const ArbiterConfig& config) {
  const int policy = static_cast<int>(config.policy);
  if (policy < 0 || policy >= kArbiterPolicyCount) {
    return Status::Error("policy=" + std::to_string(policy) +
                         ": not a policy; expected 0 (fair), 1 (preemptive), 2 "
                         "(weighted-preemptive), 3 (fixed-percentage), 4 (weak) or 5 (native)");
  }
  if (config.max_inst < 1 || config.max_inst > kMaxInstLimit) {
    return Status::Error("max_inst=" + std::to_string(config.max_inst) +
                         ": out of range; expected a whole number from 1 to " +
                         std::to_string(kMaxInstLimit));
  }
  const int prio = config.prio_ratio.value();
  if (prio < kMinPrioRatio || prio > kMaxPrioRatio) {
    return Status::Error("prio_ratio=" + std::to_string(prio) +
                         ": out of range; expected a percentage from " +
                         std::to_string(kMinPrioRatio) + " to " + std::to_string(kMaxPrioRatio));
  }
  if (config.window < kMinWindow || config.window > kMaxWindow) {
    return Status::Error("window=" + FormatNanos(config.window) + ": out of range; expected " +
                         FormatNanos(kMinWindow) + " to " + FormatNanos(kMaxWindow));
  }
  if (config.quota_min < kMinQuota) {
    return Status::Error("quota_min=" + FormatNanos(config.quota_min) +
                         ": too short; expected at least " + FormatNanos(kMinQuota));
  }
  if (config.quota_max < config.quota_min) {
    return Status::Error("quota_max=" + FormatNanos(config.quota_max) +
                         ": below quota_min=" + FormatNanos(config.quota_min) +
                         "; expected quota_min <= quota_max <= window");
  }
  if (config.quota_max > config.window) {
    return Status::Error("quota_max=" + FormatNanos(config.quota_max) +
                         ": longer than window=" + FormatNanos(config.window) +
                         "; expected quota_min <= quota_max <= window");
  }
  return Status::Ok();
}

Result<Arbiter> Arbiter::Create(const Clock* clock, const ArbiterConfig& config) {
  if (clock == nullptr) {
    return Result<Arbiter>::Error("clock: null; the arbiter needs a clock");
  }
  if (Status status = ValidateArbiterConfig(config); !status.ok()) {
    return status;
  }
  return Arbiter(clock, config);
}

Arbiter::Arbiter(const Clock* clock, const ArbiterConfig& config)
    : clock_(clock), config_(config), slots_(kMaxContainers) {
  for (Slot& slot : slots_) {
    slot.usage.SetLength(config.window);
  }
}

Status Arbiter::Configure(const ArbiterConfig& config) {
  if (Status status = ValidateArbiterConfig(config); !status.ok()) {
    return status;
  }
  if (config.max_inst < weight_sum_) {
    return Status::Error("max_inst=" + std::to_string(config.max_inst) + ": below the " +
                         std::to_string(weight_sum_) +
                         " weight units already given to containers; remove or reweight "
                         "containers first");
  }
  for (int id : present_) {
    if (slots_[id].spec.weight > config.max_inst) {
      return Status::Error("max_inst=" + std::to_string(config.max_inst) + ": container " +
                           std::to_string(id) + " has weight " +
                           std::to_string(slots_[id].spec.weight) +
                           "; weights must be 1 to max_inst");
    }
  }
  config_ = config;
  for (Slot& slot : slots_) {
    slot.usage.SetLength(config.window);
    slot.share_time = 0;  // the shares may have changed: the order starts afresh
  }
  share_floor_ = 0;
  current_.reset();
  return Status::Ok();
}

Status Arbiter::CheckId(int id, const char* action) const {
  if (id < 0 || id >= kMaxContainers) {
    return Status::Error(std::string(action) + ": container " + std::to_string(id) +
                         ": out of range; expected an index from 0 to " +
                         std::to_string(kMaxContainers - 1));
  }
  return Status::Ok();
}

Status Arbiter::CheckSpec(int id, const ContainerSpec& spec) const {
  const std::string who = "container " + std::to_string(id) + ": ";
  if (spec.weight < 1 || spec.weight > config_.max_inst) {
    return Status::Error(
        who + "weight=" + std::to_string(spec.weight) +
        ": out of range; expected 1 to max_inst=" + std::to_string(config_.max_inst));
  }
  if (spec.core_limit.value() < 1) {
    return Status::Error(who + "core_limit=" + std::to_string(spec.core_limit.value()) +
                         ": out of range; expected a percentage from 1 to 100 (100 = no limit)");
  }
  return Status::Ok();
}

Status Arbiter::AddContainer(int id, const ContainerSpec& spec) {
  if (Status status = CheckId(id, "add"); !status.ok()) {
    return status;
  }
  if (slots_[id].present) {
    return Status::Error("add: container " + std::to_string(id) + ": already added");
  }
  if (Status status = CheckSpec(id, spec); !status.ok()) {
    return status;
  }
  if (spec.weight > free_weight()) {
    return Status::Error("add: container " + std::to_string(id) +
                         ": weight=" + std::to_string(spec.weight) +
                         " exceeds free_weight=" + std::to_string(free_weight()) +
                         " (max_inst=" + std::to_string(config_.max_inst) + ")");
  }
  Slot& slot = slots_[id];
  slot = Slot{};
  slot.present = true;
  slot.spec = spec;
  slot.usage.SetLength(config_.window);
  present_.insert(std::upper_bound(present_.begin(), present_.end(), id), id);
  weight_sum_ += spec.weight;
  return Status::Ok();
}

Status Arbiter::UpdateContainer(int id, const ContainerSpec& spec) {
  if (Status status = CheckId(id, "update"); !status.ok()) {
    return status;
  }
  Slot& slot = slots_[id];
  if (!slot.present) {
    return Status::Error("update: container " + std::to_string(id) + ": not added");
  }
  if (Status status = CheckSpec(id, spec); !status.ok()) {
    return status;
  }
  if (spec.weight - slot.spec.weight > free_weight()) {
    return Status::Error("update: container " + std::to_string(id) +
                         ": weight=" + std::to_string(spec.weight) + " exceeds its weight " +
                         std::to_string(slot.spec.weight) +
                         " plus free_weight=" + std::to_string(free_weight()) +
                         " (max_inst=" + std::to_string(config_.max_inst) + ")");
  }
  weight_sum_ += spec.weight - slot.spec.weight;
  slot.spec = spec;
  if (current_ && current_->holder == id) {
    current_.reset();
  }
  return Status::Ok();
}

Status Arbiter::RemoveContainer(int id) {
  if (Status status = CheckId(id, "remove"); !status.ok()) {
    return status;
  }
  Slot& slot = slots_[id];
  if (!slot.present) {
    return Status::Error("remove: container " + std::to_string(id) + ": not added");
  }
  weight_sum_ -= slot.spec.weight;
  slot = Slot{};
  present_.erase(std::find(present_.begin(), present_.end(), id));
  if (current_ && current_->holder == id) {
    current_.reset();
  }
  return Status::Ok();
}

Status Arbiter::SetPending(int id, bool has_work) {
  if (Status status = CheckId(id, "set pending"); !status.ok()) {
    return status;
  }
  Slot& slot = slots_[id];
  if (!slot.present) {
    return Status::Error("set pending: container " + std::to_string(id) + ": not added");
  }
  const Nanos now = clock_->Now();
  if (has_work && !slot.pending &&
      (slot.idle_since == Nanos::min() || now - slot.idle_since > config_.window / 10)) {
    // No banked credit: a container that had no work does not catch up for the time it idled.
    AdvanceVirtualFloor();
    slot.virtual_time = std::max(slot.virtual_time, virtual_floor_);
    slot.share_time = std::max(slot.share_time, share_floor_);
  }
  if (!has_work && slot.pending) {
    slot.idle_since = now;
  }
  slot.pending = has_work;
  return Status::Ok();
}

Status Arbiter::Charge(int id, Nanos gpu_time) {
  if (Status status = CheckId(id, "charge"); !status.ok()) {
    return status;
  }
  Slot& slot = slots_[id];
  if (!slot.present) {
    return Status::Error("charge: container " + std::to_string(id) + ": not added");
  }
  if (gpu_time < Nanos{0}) {
    return Status::Error("charge: container " + std::to_string(id) +
                         ": gpu_time=" + FormatNanos(gpu_time) + ": negative; expected >= 0");
  }
  slot.usage.Add(clock_->Now(), gpu_time);
  slot.virtual_time += gpu_time;
  const Nanos cap = Cap(slot);
  slot.share_time += cap == Nanos::max() || cap <= Nanos{0}
                         ? static_cast<double>(gpu_time.count())
                         : static_cast<double>(gpu_time.count()) *
                               static_cast<double>(config_.window.count()) /
                               static_cast<double>(cap.count());
  return Status::Ok();
}

Status Arbiter::Refund(int id, Nanos gpu_time) {
  if (Status status = CheckId(id, "refund"); !status.ok()) {
    return status;
  }
  Slot& slot = slots_[id];
  if (!slot.present) {
    return Status::Error("refund: container " + std::to_string(id) + ": not added");
  }
  if (gpu_time < Nanos{0}) {
    return Status::Error("refund: container " + std::to_string(id) +
                         ": gpu_time=" + FormatNanos(gpu_time) + ": negative; expected >= 0");
  }
  slot.usage.Remove(gpu_time);
  slot.virtual_time = std::max(Nanos{0}, slot.virtual_time - gpu_time);
  const Nanos cap = Cap(slot);
  slot.share_time =
      std::max(0.0, slot.share_time - (cap == Nanos::max() || cap <= Nanos{0}
                                           ? static_cast<double>(gpu_time.count())
                                           : static_cast<double>(gpu_time.count()) *
                                                 static_cast<double>(config_.window.count()) /
                                                 static_cast<double>(cap.count())));
  return Status::Ok();
}

Status Arbiter::SetQuotaHint(int id, Nanos hint) {
  if (Status status = CheckId(id, "set quota hint"); !status.ok()) {
    return status;
  }
  if (!slots_[id].present) {
    return Status::Error("set quota hint: container " + std::to_string(id) + ": not added");
  }
  if (hint < Nanos{0}) {
    return Status::Error("set quota hint: container " + std::to_string(id) +
                         ": hint=" + FormatNanos(hint) + ": negative; expected >= 0");
  }
  slots_[id].quota_hint = hint;
  return Status::Ok();
}

Status Arbiter::Yield(int id, Nanos queued) {
  if (Status status = CheckId(id, "yield"); !status.ok()) {
    return status;
  }
  if (current_ && current_->holder == id && !current_->high_priority_lane) {
    current_.reset();
    yielded_ = id;
    yielded_queued_ = std::max(queued, Nanos{0});
  }
  return Status::Ok();
}

int Arbiter::free_weight() const { return config_.max_inst - weight_sum_; }

Result<Nanos> Arbiter::UsedInWindow(int id) {
  if (Status status = CheckId(id, "usage"); !status.ok()) {
    return status;
  }
  if (!slots_[id].present) {
    return Result<Nanos>::Error("usage: container " + std::to_string(id) + ": not added");
  }
  return slots_[id].usage.Used(clock_->Now());
}

void Arbiter::AdvanceVirtualFloor() {
  bool any = false;
  Nanos smallest = Nanos::max();
  double smallest_share = 0;
  for (int id : present_) {
    if (slots_[id].pending) {
      smallest_share =
          any ? std::min(smallest_share, slots_[id].share_time) : slots_[id].share_time;
      any = true;
      smallest = std::min(smallest, slots_[id].virtual_time);
    }
  }
  if (any) {
    virtual_floor_ = std::max(virtual_floor_, smallest);
    share_floor_ = std::max(share_floor_, smallest_share);
  }
}

Nanos Arbiter::Cap(const Slot& slot) const {
  const Nanos window = config_.window;
  const int core = slot.spec.core_limit.value();
  const Nanos core_cap = core >= 100 ? Nanos::max() : PercentOf(window, core);
  switch (config_.policy) {
    case ArbiterPolicy::kFair:
      return std::min(window / config_.max_inst, core_cap);
    case ArbiterPolicy::kPreemptive:
    case ArbiterPolicy::kWeak:
      return core_cap;
    case ArbiterPolicy::kWeightedPreemptive:
      return std::min(window * slot.spec.weight / std::max(weight_sum_, 1), core_cap);
    case ArbiterPolicy::kFixedPercentage:
      return core < 100 ? core_cap : window * slot.spec.weight / config_.max_inst;
    case ArbiterPolicy::kNative:
      return Nanos::max();
  }
  return Nanos::max();
}

Nanos Arbiter::LaneCap(const Slot& slot) const {
  const int core = slot.spec.core_limit.value();
  return PercentOf(config_.window, std::min(core, config_.prio_ratio.value()));
}

bool Arbiter::Subscribed() const {
  if (IsWorkConserving(config_.policy)) {
    return false;
  }
  Nanos sum{0};
  int count = 0;
  for (int id : present_) {
    const Slot& slot = slots_[id];
    if (!slot.pending) {
      continue;
    }
    sum += Cap(slot);
    ++count;
  }
  // Caps from weights are rounded down: up to 1 ns short each.
  return count > 0 && sum + Nanos(count) >= config_.window;
}

Nanos Arbiter::ClampQuota(Nanos budget) const {
  return std::max(config_.quota_min, std::min(config_.quota_max, budget));
}

Decision Arbiter::Grant(int id, Nanos now, Nanos budget, bool lane) {
  Decision decision;
  decision.holder = id;
  const Nanos hint = slots_[id].quota_hint;
  decision.until = now + ClampQuota(hint > Nanos{0} ? std::min(hint, budget) : budget);
  decision.exclusive = config_.policy != ArbiterPolicy::kWeak;
  decision.high_priority_lane = lane;
  slots_[id].last_grant = ++grant_sequence_;
  current_ = decision;
  return decision;
}

Decision Arbiter::Decide() {
  const Nanos now = clock_->Now();
  const int yielded = yielded_;
  const Nanos yielded_queued = yielded_queued_;
  yielded_ = -1;
  yielded_queued_ = Nanos{0};
  if (config_.policy == ArbiterPolicy::kNative) {
    current_.reset();
    Decision decision;
    decision.exclusive = false;
    for (int id : present_) {
      decision.may_run.set(id);
    }
    return decision;
  }
  AdvanceVirtualFloor();
  for (int id : present_) {
    used_[id] = slots_[id].usage.Used(now);
  }
  const bool subscribed = Subscribed();

  // The high-priority lane: the pending high-priority container furthest below its lane cap.
  int lane = -1;
  for (int id : present_) {
    const Slot& slot = slots_[id];
    if (!slot.spec.high_priority || !slot.pending || used_[id] >= LaneCap(slot)) {
      continue;
    }
    if (lane < 0 || used_[id] < used_[lane] ||
        (used_[id] == used_[lane] && slot.last_grant < slots_[lane].last_grant)) {
      lane = id;
    }
  }

  Decision decision;
  bool decided = false;
  if (current_ && current_->holder && now < current_->until) {
    const int holder = *current_->holder;
    const Slot& slot = slots_[holder];
    if (slot.present && slot.pending && (current_->high_priority_lane || lane < 0)) {
      decision = *current_;
      decided = true;
    }
  }
  if (!decided && lane >= 0) {
    decision = Grant(lane, now, LaneCap(slots_[lane]) - used_[lane], /*lane=*/true);
    decided = true;
  }
  if (!decided) {
    int best = -1;
    double best_key = 0;
    for (int id : present_) {
      const Slot& slot = slots_[id];
      const Nanos cap = Cap(slot);
      if (!slot.pending || (!subscribed && used_[id] >= cap)) {
        continue;
      }
      double key = IsWorkConserving(config_.policy) ? static_cast<double>(slot.virtual_time.count())
                                                    : slot.share_time;
      if (id == yielded && yielded_queued > Nanos{0}) {
        // Its queued work, as it will be charged (see Yield).
        const double queued = static_cast<double>(yielded_queued.count());
        key += IsWorkConserving(config_.policy) || cap == Nanos::max() || cap <= Nanos{0}
                   ? queued
                   : queued * static_cast<double>(config_.window.count()) /
                         static_cast<double>(cap.count());
      }
      if (best < 0 || key < best_key ||
          (key == best_key && slot.last_grant < slots_[best].last_grant)) {
        best = id;
        best_key = key;
      }
    }
    if (best >= 0) {
      const Nanos cap = Cap(slots_[best]);
      // While the caps fill the window the order alone keeps the shares: no budget to respect.
      decision = Grant(best, now,
                       cap == Nanos::max() || subscribed ? config_.quota_max : cap - used_[best],
                       /*lane=*/false);
      decided = true;
    }
  }
  if (!decided) {
    // Nobody may hold the token: find when a capped container with work gets under a cap again.
    current_.reset();
    decision = Decision{};
    decision.exclusive = config_.policy != ArbiterPolicy::kWeak;
    for (int id : present_) {
      Slot& slot = slots_[id];
      if (!slot.pending) {
        continue;
      }
      Nanos limit = Cap(slot);
      if (slot.spec.high_priority) {
        limit = std::max(limit, LaneCap(slot));
      }
      const Nanos wait = std::max(slot.usage.TimeUntilBelow(now, limit), Nanos{1});
      decision.until = std::min(decision.until, now + wait);
    }
    OpenLanes(&decision);
    return decision;
  }

  decision.may_run.reset();
  decision.may_run.set(*decision.holder);
  if (config_.policy == ArbiterPolicy::kWeak) {
    // Overlap: everyone else with work and under its cap may launch alongside the holder.
    for (int id : present_) {
      if (slots_[id].pending && used_[id] < Cap(slots_[id])) {
        decision.may_run.set(id);
      }
    }
  }
  OpenLanes(&decision);
  return decision;
}

void Arbiter::OpenLanes(Decision* decision) const {
  for (int id : present_) {
    const Slot& slot = slots_[id];
    if (!slot.spec.high_priority || used_[id] >= LaneCap(slot)) {
      continue;
    }
    if (decision->high_priority_lane && decision->holder != id) {
      continue;  // another container's lane holds the token: it keeps it
    }
    decision->lane_open.set(id);
  }
}

}  // namespace tessera::arbiter
