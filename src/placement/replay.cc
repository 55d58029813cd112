// The replay with departures: arrivals, departures, waiting through kube-scheduler's queue
// (or first come first served), reservations for waiting pods, and its metrics. No I/O.
#include "placement/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>

#include "placement/policy.h"
#include "placement/rng.h"
#include "placement/sim_support.h"

namespace tessera::placement {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// How long a pod runs, in seconds (kNever when the trace has no deletion time).
double RunTime(const PodTimes& t) {
  return t.deleted < 0 ? kNever : static_cast<double>(t.deleted - t.created);
}

// The GPU demand changes when the pods of `order` arrive at creation / speedup and leave after
// their run times, with no capacity limit, in time order (departures first at equal times: a pod
// that leaves as another arrives does not overlap it). `draw` is the pod's place in `order`.
struct DemandEvent {
  double at;
  double milli;  // > 0 arrival, < 0 departure
  uint32_t draw;
};
std::vector<DemandEvent> DemandEvents(std::span<const Request> pods,
                                      std::span<const PodTimes> times, std::span<const int> order,
                                      double speedup) {
  std::vector<DemandEvent> events;
  events.reserve(order.size() * 2);
  for (size_t d = 0; d < order.size(); ++d) {
    const auto u = static_cast<size_t>(order[d]);
    const double milli = static_cast<double>(pods[u].total_gpu_milli());
    if (milli == 0) continue;
    const double at = static_cast<double>(times[u].created) / speedup;
    events.push_back({at, milli, static_cast<uint32_t>(d)});
    if (const double run = RunTime(times[u]); run != kNever) {
      events.push_back({at + run, -milli, static_cast<uint32_t>(d)});
    }
  }
  std::sort(events.begin(), events.end(), [](const DemandEvent& a, const DemandEvent& b) {
    return a.at != b.at ? a.at < b.at : a.milli < b.milli;
  });
  return events;
}

// The highest demand (GPU milli) of the first `draws` pods of the events' order, and when the
// demand first reaches `threshold` (kNever if it does not).
struct DemandProfile {
  double peak = 0;
  double reaches_threshold_at = kNever;
};
DemandProfile Profile(const std::vector<DemandEvent>& events, size_t draws, double threshold) {
  DemandProfile profile;
  double now = 0;
  for (const DemandEvent& e : events) {
    if (e.draw >= draws) continue;
    now += e.milli;
    profile.peak = std::max(profile.peak, now);
    if (now >= threshold && profile.reaches_threshold_at == kNever) {
      profile.reaches_threshold_at = e.at;
    }
  }
  return profile;
}

}  // namespace

Result<std::vector<int>> SampleForLoad(std::span<const Request> pods,
                                       std::span<const PodTimes> times, uint64_t seed,
                                       double speedup, int64_t gpu_milli_capacity, double load) {
  constexpr size_t kMostPods = 4'000'000;  // ~200 MB of demand events at most
  const double target = load * static_cast<double>(gpu_milli_capacity);
  bool any_gpu = false;
  for (const Request& r : pods) any_gpu = any_gpu || r.total_gpu_milli() > 0;
  if (!any_gpu) {
    return Result<std::vector<int>>::Error("the pod list asks for no GPU; nothing to load");
  }
  Rng rng(seed);  // the draws of SampleWorkload, continued
  std::vector<int> draws;
  auto peak_of_first = [&](size_t n) {
    while (draws.size() < n) draws.push_back(static_cast<int>(rng.Below(pods.size())));
    return Profile(DemandEvents(pods, times, std::span<const int>(draws.data(), n), speedup), n,
                   kNever)
        .peak;
  };
  // The peak only grows with more pods: double until it is reached, then bisect on the events
  // of the largest prefix, leaving out the later draws.
  size_t high = 1024;
  while (peak_of_first(high) < target) {
    if (high >= kMostPods) {
      return Result<std::vector<int>>::Error(
          "the pod list cannot load the cluster to " + std::to_string(load) +
          " x its GPUs at speed-up " + std::to_string(speedup) + " with " +
          std::to_string(kMostPods) + " pods; raise the speed-up or lower the load");
    }
    high = std::min(high * 2, kMostPods);
  }
  const std::vector<DemandEvent> events =
      DemandEvents(pods, times, std::span<const int>(draws.data(), high), speedup);
  size_t low = 0;  // peak of the first `low` < target <= peak of the first `high`
  while (high - low > 1) {
    const size_t mid = low + (high - low) / 2;
    (Profile(events, mid, kNever).peak >= target ? high : low) = mid;
  }
  draws.resize(high);
  return draws;
}

double ReplayScheduler::NextEvent(double) const { return kNever; }
Result<bool> ReplayScheduler::Advance(double) { return false; }

std::string_view QueueModelName(QueueModel model) {
  return model == QueueModel::kFcfs ? "fcfs" : "kube-scheduler";
}

namespace {

Status CheckOptions(const ReplayOptions& options) {
  if (!(options.speedup >= 1e-6 && options.speedup <= 1e12)) {
    return Status::Error("speed-up " + std::to_string(options.speedup) +
                         ": expected a factor from 1e-6 to 1e12");
  }
  if (!(options.load > 0 && options.load <= 100)) {
    return Status::Error("load " + std::to_string(options.load) +
                         ": expected a multiple of the cluster's GPUs in (0, 100]");
  }
  if (options.points < 2 || options.points > 10000) {
    return Status::Error("points " + std::to_string(options.points) +
                         ": expected 2 to 10000 timeline samples");
  }
  if (!(options.hold_after_s >= 0 && options.hold_after_s <= 1e9)) {
    return Status::Error("hold after " + std::to_string(options.hold_after_s) +
                         " s: expected 0 to 1e9 seconds of waiting before a pod holds a node");
  }
  return Status::Ok();
}

// The policy in process: Select (SelectAmong the nodes the reservations allow).
class PolicyScheduler final : public ReplayScheduler {
 public:
  explicit PolicyScheduler(std::unique_ptr<Policy> policy) : policy_(std::move(policy)) {}
  std::string_view name() const override { return policy_->name(); }
  bool ReservesForWaiting() const override { return policy_->ReservesForWaiting(); }
  Status Arrive(int, const Request&, double) override { return Status::Ok(); }
  Result<std::optional<Assignment>> Attempt(const Cluster& cluster, int pod, const Request& r,
                                            const Reservations* reservations) override {
    if (reservations == nullptr || reservations->empty()) return policy_->Select(cluster, r);
    reservations->AllowedNodes(cluster, static_cast<uint64_t>(pod), r, &allowed_);
    return policy_->SelectAmong(cluster, r, allowed_, nullptr);
  }
  Status MarkWaiting(int, const Request&) override { return Status::Ok(); }
  void Placed(const Cluster& cluster, int, const Request& r, const Assignment& a) override {
    policy_->OnPlaced(cluster, r, a);
  }
  Status Leave(const Cluster& cluster, int, const Request& r, const Assignment& a) override {
    policy_->OnRemoved(cluster, r, a);
    return Status::Ok();
  }

 private:
  std::unique_ptr<Policy> policy_;
  std::vector<int> allowed_;
};

// A request's shape, and the node its pod holds (-1: none): attempts of equal keys on the same
// cluster capacity and reservations have the same outcome.
struct AttemptKey {
  int64_t cpu, memory, gpu_mem;
  int32_t gpu_count, gpu_milli, mig_profile;
  uint64_t allowed;
  uint32_t gpu_modes;
  int held_node;
  bool operator==(const AttemptKey&) const = default;
};
struct AttemptKeyHash {
  size_t operator()(const AttemptKey& k) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (uint64_t v : {static_cast<uint64_t>(k.cpu), static_cast<uint64_t>(k.memory),
                       static_cast<uint64_t>(k.gpu_mem), static_cast<uint64_t>(k.gpu_count),
                       static_cast<uint64_t>(k.gpu_milli), static_cast<uint64_t>(k.mig_profile),
                       k.allowed, static_cast<uint64_t>(k.held_node)}) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};
// When a key last failed, and the nodes that last showed who rejects it.
struct KnownFailure {
  uint64_t capacity_gen = ~uint64_t{0};
  uint64_t reservation_gen = ~uint64_t{0};
  int passes_fit = -1;  // a node whose CPU and memory fit the request (the extender filtered it)
  int fails_fit = -1;   // a node whose CPU or memory does not
};

// One run: the cluster, the pods in arrival order, the queue, and every metric.
class Run {
 public:
  Run(const Cluster& initial, std::span<const Request> pods, std::span<const PodTimes> times,
      ReplayScheduler& scheduler, const ReplayOptions& options, ReplayPods run_pods)
      : initial_(initial),
        cluster_(initial),
        pods_(pods),
        times_(times),
        scheduler_(scheduler),
        options_(options),
        order_(std::move(run_pods.order)),
        at_(std::move(run_pods.arrival_s)),
        queue_(options.queue_options),
        reservations_(options.hold_after_s) {
    reserving_ = options.reservations && scheduler.ReservesForWaiting();
  }

  Result<ReplayResult> Go();

 private:
  const Request& RequestOf(int pod) const { return pods_[static_cast<size_t>(order_[pod])]; }
  double RunTimeOf(int pod) const { return RunTime(times_[static_cast<size_t>(order_[pod])]); }
  bool CanEverFit(int pod);
  uint8_t Rejectors(const Request& r, KnownFailure& known);
  // One attempt at `pod` at `now`: true when it was placed.
  Result<bool> Attempt(int pod, double now);
  Status Depart(double now);
  void RecordUntil(double t);
  void Integrate(double t);
  void AddPending(int pod);
  void ErasePending(int pod);

  const Cluster& initial_;
  Cluster cluster_;
  std::span<const Request> pods_;
  std::span<const PodTimes> times_;
  ReplayScheduler& scheduler_;
  const ReplayOptions& options_;
  std::vector<int> order_;
  std::vector<double> at_;
  SchedulingQueue queue_;
  bool reserving_ = false;
  ReplayResult res_;
  double capacity_ = 0;

  std::vector<int8_t> placeable_;  // per pod of the list: -1 unknown, 0 no, 1 yes
  std::vector<Assignment> where_;  // per pod of the run
  std::vector<double> started_;    // per pod of the run: when it was placed
  std::vector<char> failed_once_;
  std::vector<double> waiting_since_;  // per pod: its first failed attempt
  using Departure = std::pair<double, int>;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> running_;
  std::vector<int> fcfs_waiting_;  // FCFS: pending pods in arrival order
  std::set<int> pending_;          // pods arrived, not placed, not refused
  std::set<int> holders_;          // pending pods that failed once and would hold a node
  bool plan_dirty_ = false;
  Reservations reservations_;
  std::set<uint64_t> ever_held_;  // pods that held a node at some point
  uint64_t capacity_gen_ = 0;     // departures so far
  std::unordered_map<AttemptKey, KnownFailure, AttemptKeyHash> known_;

  std::vector<double> waits_;
  std::vector<float> decision_us_;
  int64_t waiting_gpu_pods_ = 0;
  double waiting_gpu_milli_ = 0;
  double last_placement_ = 0;
  double now_ = 0, alloc_integral_ = 0, waiting_alloc_integral_ = 0, waiting_time_ = 0;
};

bool Run::CanEverFit(int pod) {
  int8_t& known = placeable_[static_cast<size_t>(order_[pod])];
  if (known < 0) {
    known = 0;
    for (int n = 0; n < initial_.node_count() && known == 0; ++n) {
      known = initial_.Fits(n, RequestOf(pod)) == FitResult::kFits ? 1 : 0;
    }
  }
  return known == 1;
}

uint8_t Run::Rejectors(const Request& r, KnownFailure& known) {
  // kube-scheduler's NodeResourcesFit rejects the nodes short of CPU or memory; the extender is
  // asked about the rest, and filters every one of them (the pod fitted none it may use).
  auto passes = [&](int n) {
    return cluster_.cpu_free(n) >= r.cpu_milli && cluster_.memory_free(n) >= r.memory_mib;
  };
  // Capacity only shrinks between departures, so a node short stays short until one; a node
  // that passed is checked again.
  if (known.passes_fit < 0 || !passes(known.passes_fit)) {
    known.passes_fit = -1;
    for (int n = 0; n < cluster_.node_count() && known.passes_fit < 0; ++n) {
      if (passes(n)) known.passes_fit = n;
    }
  }
  if (known.fails_fit < 0 || passes(known.fails_fit)) {
    known.fails_fit = -1;
    for (int n = 0; n < cluster_.node_count() && known.fails_fit < 0; ++n) {
      if (!passes(n)) known.fails_fit = n;
    }
  }
  return static_cast<uint8_t>((known.fails_fit >= 0 ? kRejectedByFit : 0) |
                              (known.passes_fit >= 0 ? kRejectedByExtender : 0));
}

Result<bool> Run::Attempt(int pod, double now) {
  const Request& r = RequestOf(pod);
  ++res_.attempts;
  cluster_.set_now(now);
  if (reserving_ && (plan_dirty_ || now >= reservations_.next_change_s())) {
    std::vector<WaitingPod> waiting;
    waiting.reserve(holders_.size());
    for (int h : holders_) {
      waiting.push_back(WaitingPod{static_cast<uint64_t>(h), RequestOf(h),
                                   waiting_since_[static_cast<size_t>(h)]});
    }
    if (reservations_.Plan(cluster_, waiting)) {
      for (const Reservations::Held& held : reservations_.held()) ever_held_.insert(held.key);
      res_.reservations_made = static_cast<int64_t>(ever_held_.size());
    }
    plan_dirty_ = false;
  }
  int held_node = -1;
  if (reserving_) {
    for (const Reservations::Held& h : reservations_.held()) {
      if (h.key == static_cast<uint64_t>(pod)) held_node = h.node;
    }
  }
  const AttemptKey key{r.cpu_milli,   r.memory_mib,     r.gpu_mem_mib, r.gpu_count, r.gpu_milli,
                       r.mig_profile, r.allowed.bits(), r.gpu_modes,   held_node};
  KnownFailure& known = known_[key];
  std::optional<Assignment> chosen;
  if (!options_.skip_known_failures || known.capacity_gen != capacity_gen_ ||
      known.reservation_gen != reservations_.generation()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto decided = scheduler_.Attempt(cluster_, pod, r, reserving_ ? &reservations_ : nullptr);
    decision_us_.push_back(
        std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - t0).count());
    ++res_.decisions;
    if (!decided.ok()) return decided.status();
    chosen = *decided;
    if (!chosen) {
      known.capacity_gen = capacity_gen_;
      known.reservation_gen = reservations_.generation();
    }
  }
  if (!chosen) {
    const uint8_t rejectors = Rejectors(r, known);
    if (options_.queue == QueueModel::kKubeScheduler) queue_.AddUnschedulable(pod, rejectors, now);
    if (!failed_once_[static_cast<size_t>(pod)]) {
      failed_once_[static_cast<size_t>(pod)] = 1;
      waiting_since_[static_cast<size_t>(pod)] = now;
      if (Status s = scheduler_.MarkWaiting(pod, r); !s.ok()) return s;
      if (reserving_ && reservations_.Holds(cluster_, r)) {
        holders_.insert(pod);
        plan_dirty_ = true;
      }
    }
    return false;
  }
  Status placed = cluster_.Place(r, *chosen, now);
  if (!placed.ok()) {
    return Status::Error("scheduler " + std::string(scheduler_.name()) +
                         " chose an invalid placement: " + placed.message());
  }
  scheduler_.Placed(cluster_, pod, r, *chosen);
  where_[static_cast<size_t>(pod)] = *chosen;
  started_[static_cast<size_t>(pod)] = now;
  ErasePending(pod);
  if (holders_.erase(pod) > 0) plan_dirty_ = true;
  ++res_.placed;
  last_placement_ = now;
  const double wait = now - at_[static_cast<size_t>(pod)];
  waits_.push_back(wait);
  res_.pod_waits[static_cast<size_t>(pod)] = wait;
  if (wait > 0) ++res_.waited;
  if (const double run = RunTimeOf(pod); run != kNever) running_.push({now + run, pod});
  if (options_.queue == QueueModel::kKubeScheduler) {
    queue_.Done(pod);
    // The bind, and the extender's commit on the node (its annotation) that came before it.
    queue_.MoveAll(QueueEvent::kAssignedPodAdd, now);
    queue_.MoveAll(QueueEvent::kNodeAnnotationUpdate, now);
  }
  return true;
}

Status Run::Depart(double t) {
  while (!running_.empty() && running_.top().first <= t) {
    const int pod = running_.top().second;
    running_.pop();
    const Request& r = RequestOf(pod);
    const Assignment a = where_[static_cast<size_t>(pod)];
    if (Status removed = cluster_.Remove(r, a, started_[static_cast<size_t>(pod)]); !removed.ok()) {
      return Status::Error("replay: " + removed.message());
    }
    if (Status left = scheduler_.Leave(cluster_, pod, r, a); !left.ok()) return left;
    ++capacity_gen_;
    plan_dirty_ = reserving_;
    if (options_.queue == QueueModel::kKubeScheduler) {
      queue_.MoveAll(QueueEvent::kAssignedPodDelete, t);
    }
  }
  return Status::Ok();
}

void Run::RecordUntil(double t) {  // timeline samples at instants before t
  while (static_cast<int>(res_.allocation_ratio.size()) < options_.points) {
    const double at = res_.timeline_start_s +
                      (res_.last_arrival_s - res_.timeline_start_s) *
                          static_cast<double>(res_.allocation_ratio.size()) / (options_.points - 1);
    if (at >= t) break;
    res_.allocation_ratio.push_back(100.0 * static_cast<double>(cluster_.gpu_milli_allocated()) /
                                    capacity_);
    res_.waiting_pods.push_back(static_cast<double>(pending_.size()));
    res_.waiting_gpus.push_back(waiting_gpu_milli_ / kMilliPerGpu);
  }
}

void Run::Integrate(double t) {  // means over the timeline's window, the same for every policy
  const double dt =
      std::max(0.0, std::min(t, res_.last_arrival_s) - std::max(now_, res_.timeline_start_s));
  const double alloc = 100.0 * static_cast<double>(cluster_.gpu_milli_allocated()) / capacity_;
  alloc_integral_ += alloc * dt;
  if (waiting_gpu_pods_ > 0) {
    waiting_alloc_integral_ += alloc * dt;
    waiting_time_ += dt;
  }
  now_ = t;
}

void Run::AddPending(int pod) {
  pending_.insert(pod);
  const Request& r = RequestOf(pod);
  waiting_gpu_pods_ += r.gpu_count > 0 ? 1 : 0;
  waiting_gpu_milli_ += static_cast<double>(r.total_gpu_milli());
}

void Run::ErasePending(int pod) {
  pending_.erase(pod);
  const Request& r = RequestOf(pod);
  waiting_gpu_pods_ -= r.gpu_count > 0 ? 1 : 0;
  waiting_gpu_milli_ -= static_cast<double>(r.total_gpu_milli());
}

Result<ReplayResult> Run::Go() {
  const auto start = std::chrono::steady_clock::now();
  capacity_ = static_cast<double>(cluster_.gpu_milli_capacity());
  res_.policy = std::string(scheduler_.name());
  res_.seed = options_.seed;
  res_.queue = std::string(QueueModelName(options_.queue));
  res_.reservations = reserving_;
  res_.pods = static_cast<int64_t>(order_.size());
  res_.total_gpus = cluster_.total_gpus();
  res_.speedup = options_.speedup;
  const DemandProfile demand = Profile(DemandEvents(pods_, times_, order_, options_.speedup),
                                       order_.size(), 0.1 * capacity_);
  res_.peak_demand_gpus = demand.peak / kMilliPerGpu;
  res_.last_arrival_s = at_.empty() ? 0 : at_.back();
  res_.timeline_start_s = std::min(demand.reaches_threshold_at, res_.last_arrival_s);
  placeable_.assign(pods_.size(), -1);
  where_.assign(order_.size(), Assignment{});
  started_.assign(order_.size(), 0);
  failed_once_.assign(order_.size(), 0);
  waiting_since_.assign(order_.size(), 0);
  res_.pod_waits.assign(order_.size(), -1);

  const bool kube = options_.queue == QueueModel::kKubeScheduler;
  size_t next = 0;
  while (true) {
    double t = next < order_.size() ? at_[next] : kNever;
    if (!running_.empty()) t = std::min(t, running_.top().first);
    if (t == kNever) break;  // nothing arrives or leaves: the pods left wait for ever
    if (next == order_.size() && pending_.empty()) break;  // only departures are left
    if (kube && !pending_.empty()) t = std::min(t, queue_.NextFlush(now_));
    if (!pending_.empty()) t = std::min(t, scheduler_.NextEvent(now_));
    RecordUntil(t);
    Integrate(t);
    if (kube) queue_.RunFlushesUntil(t);
    if (Status s = Depart(t); !s.ok()) return s;
    auto changed = scheduler_.Advance(t);
    if (!changed.ok()) return changed.status();
    if (*changed) {
      ++capacity_gen_;  // what fits may have changed: no attempt is known to fail
      if (kube) queue_.MoveAll(QueueEvent::kNodeAnnotationUpdate, t);
    }
    for (; next < order_.size() && at_[next] <= t; ++next) {
      const int pod = static_cast<int>(next);
      if (!CanEverFit(pod)) {
        ++res_.unplaceable;
        continue;
      }
      AddPending(pod);
      if (Status s = scheduler_.Arrive(pod, RequestOf(pod), at_[next]); !s.ok()) return s;
      if (kube) {
        queue_.Add(pod, t);
      } else {
        fcfs_waiting_.push_back(pod);
      }
    }
    if (kube) {
      while (auto pod = queue_.Pop(t)) {
        auto placed = Attempt(*pod, t);
        if (!placed.ok()) return placed.status();
      }
    } else {
      size_t kept = 0;
      for (int pod : fcfs_waiting_) {
        auto placed = Attempt(pod, t);
        if (!placed.ok()) return placed.status();
        if (!*placed) fcfs_waiting_[kept++] = pod;
      }
      fcfs_waiting_.resize(kept);
    }
    res_.peak_waiting_pods =
        std::max(res_.peak_waiting_pods, static_cast<int64_t>(pending_.size()));
  }
  res_.end_s = std::max(last_placement_, res_.last_arrival_s);
  RecordUntil(kNever);
  for (int pod : pending_) {  // never placed: their wait so far
    ++res_.never_placed;
    ++res_.waited;
    const double wait = res_.end_s - at_[static_cast<size_t>(pod)];
    waits_.push_back(wait);
    res_.pod_waits[static_cast<size_t>(pod)] = wait;
  }
  if (const double window = res_.last_arrival_s - res_.timeline_start_s; window > 0) {
    res_.allocation_mean = alloc_integral_ / window;
    res_.waiting_time_share = waiting_time_ / window;
  }
  res_.allocation_while_waiting = waiting_time_ > 0 ? waiting_alloc_integral_ / waiting_time_ : 0;
  double wait_sum = 0;
  for (double w : waits_) wait_sum += w;
  res_.wait_s_mean = waits_.empty() ? 0 : wait_sum / static_cast<double>(waits_.size());
  res_.wait_s_max = waits_.empty() ? 0 : *std::max_element(waits_.begin(), waits_.end());
  res_.wait_s_p50 = internal::Percentile(waits_, 0.50);
  res_.wait_s_p99 = internal::Percentile(waits_, 0.99);
  res_.decision_us_p50 = internal::Percentile(decision_us_, 0.50);
  res_.decision_us_p99 = internal::Percentile(decision_us_, 0.99);
  res_.pod_placements = where_;
  res_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res_;
}

}  // namespace

Result<ReplayPods> ReplayPodsFor(std::span<const Request> pods, std::span<const PodTimes> times,
                                 int64_t gpu_milli_capacity, const ReplayOptions& options) {
  if (Status s = CheckOptions(options); !s.ok()) return s;
  if (times.size() != pods.size()) {
    return Result<ReplayPods>::Error("the replay needs one creation and deletion time per pod");
  }
  for (size_t i = 0; i < times.size(); ++i) {
    if (times[i].created < 0) {
      return Result<ReplayPods>::Error(
          "pod " + std::to_string(i + 1) +
          " of the list has no creation time; the replay needs the columns creation_time and "
          "deletion_time");
    }
  }
  std::vector<int> drawn;
  if (options.resample) {
    auto sampled =
        SampleForLoad(pods, times, options.seed, options.speedup, gpu_milli_capacity, options.load);
    if (!sampled.ok()) return sampled.status();
    drawn = std::move(sampled.value());
  } else {
    for (size_t i = 0; i < pods.size(); ++i) drawn.push_back(static_cast<int>(i));
  }
  // Arrival order: by creation time, draws in their order at equal times.
  std::vector<size_t> index(drawn.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  auto arrival = [&](size_t d) {
    return static_cast<double>(times[static_cast<size_t>(drawn[d])].created) / options.speedup;
  };
  std::stable_sort(index.begin(), index.end(),
                   [&](size_t a, size_t b) { return arrival(a) < arrival(b); });
  ReplayPods out;
  for (size_t d : index) {
    out.order.push_back(drawn[d]);
    out.arrival_s.push_back(arrival(d));
  }
  return out;
}

Result<ReplayResult> ReplayWith(const Cluster& cluster, std::span<const Request> pods,
                                std::span<const PodTimes> times, ReplayScheduler& scheduler,
                                const ReplayOptions& options) {
  if (cluster.gpu_milli_capacity() == 0) {
    return Result<ReplayResult>::Error("the cluster has no GPUs; nothing to measure");
  }
  auto run_pods = ReplayPodsFor(pods, times, cluster.gpu_milli_capacity(), options);
  if (!run_pods.ok()) return run_pods.status();
  Run run(cluster, pods, times, scheduler, options, std::move(*run_pods));
  return run.Go();
}

Result<ReplayResult> Replay(const Cluster& cluster, std::span<const Request> pods,
                            std::span<const PodTimes> times, const TargetWorkload& workload,
                            std::string_view policy_name, const ReplayOptions& options) {
  if (Status s = CheckOptions(options); !s.ok()) return s;
  PolicyOptions popts;
  popts.seed = options.seed ^ internal::kPolicySeedSalt;
  popts.workload = &workload;
  auto made = MakePolicy(policy_name, popts);
  if (!made.ok()) return made.status();
  PolicyScheduler scheduler(std::move(made.value()));
  return ReplayWith(cluster, pods, times, scheduler, options);
}

}  // namespace tessera::placement
