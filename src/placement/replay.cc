// The replay with departures: arrivals, waiting, retries in arrival order, and its metrics.
// No I/O.
#include "placement/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <queue>

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

// A pod of the run: which pod of the list, when it arrived and (once placed) where.
struct Arrival {
  int pod = 0;
  double at = 0;
  bool tried = false;  // has been offered to the policy since it arrived
  Assignment where;
};

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

Result<ReplayResult> Replay(const Cluster& initial, std::span<const Request> pods,
                            std::span<const PodTimes> times, const TargetWorkload& workload,
                            std::string_view policy_name, const ReplayOptions& options) {
  if (!(options.speedup >= 1e-6 && options.speedup <= 1e12)) {
    return Result<ReplayResult>::Error("speed-up " + std::to_string(options.speedup) +
                                       ": expected a factor from 1e-6 to 1e12");
  }
  if (!(options.load > 0 && options.load <= 100)) {
    return Result<ReplayResult>::Error("load " + std::to_string(options.load) +
                                       ": expected a multiple of the cluster's GPUs in (0, 100]");
  }
  if (options.points < 2 || options.points > 10000) {
    return Result<ReplayResult>::Error("points " + std::to_string(options.points) +
                                       ": expected 2 to 10000 timeline samples");
  }
  if (times.size() != pods.size()) {
    return Result<ReplayResult>::Error("the replay needs one creation and deletion time per pod");
  }
  const auto start = std::chrono::steady_clock::now();
  Cluster cluster = initial;
  if (cluster.gpu_milli_capacity() == 0) {
    return Result<ReplayResult>::Error("the cluster has no GPUs; nothing to measure");
  }
  PolicyOptions popts;
  popts.seed = options.seed ^ internal::kPolicySeedSalt;
  popts.workload = &workload;
  auto made = MakePolicy(policy_name, popts);
  if (!made.ok()) return made.status();
  std::unique_ptr<Policy> policy = std::move(made.value());
  for (size_t i = 0; i < times.size(); ++i) {
    if (times[i].created < 0) {
      return Result<ReplayResult>::Error(
          "pod " + std::to_string(i + 1) +
          " of the list has no creation time; the replay needs the columns creation_time and "
          "deletion_time");
    }
  }
  std::vector<int> order;
  if (options.resample) {
    auto sampled = SampleForLoad(pods, times, options.seed, options.speedup,
                                 cluster.gpu_milli_capacity(), options.load);
    if (!sampled.ok()) return sampled.status();
    order = std::move(sampled.value());
  } else {
    for (size_t i = 0; i < pods.size(); ++i) order.push_back(static_cast<int>(i));
  }

  ReplayResult res;
  res.policy = std::string(policy->name());
  res.seed = options.seed;
  res.pods = static_cast<int64_t>(order.size());
  res.total_gpus = cluster.total_gpus();
  res.speedup = options.speedup;
  const double capacity = static_cast<double>(cluster.gpu_milli_capacity());
  const DemandProfile demand =
      Profile(DemandEvents(pods, times, order, res.speedup), order.size(), 0.1 * capacity);
  res.peak_demand_gpus = demand.peak / kMilliPerGpu;

  std::vector<Arrival> arrivals;
  arrivals.reserve(order.size());
  for (int i : order) {
    Arrival a;
    a.pod = i;
    a.at = static_cast<double>(times[static_cast<size_t>(i)].created) / res.speedup;
    arrivals.push_back(a);
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const Arrival& a, const Arrival& b) { return a.at < b.at; });
  res.last_arrival_s = arrivals.empty() ? 0 : arrivals.back().at;
  res.timeline_start_s = std::min(demand.reaches_threshold_at, res.last_arrival_s);

  // Whether a pod of the list fits some node of the empty cluster (else it is refused).
  std::vector<int8_t> placeable(pods.size(), -1);
  auto can_ever_fit = [&](int pod) {
    int8_t& known = placeable[static_cast<size_t>(pod)];
    if (known < 0) {
      known = 0;
      for (int n = 0; n < initial.node_count() && known == 0; ++n) {
        known = initial.Fits(n, pods[static_cast<size_t>(pod)]) == FitResult::kFits ? 1 : 0;
      }
    }
    return known == 1;
  };

  // Departures, soonest first (ties in arrival order).
  using Departure = std::pair<double, size_t>;  // (time, index into arrivals)
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> running;
  std::vector<size_t> waiting;  // indices into arrivals, in arrival order
  // Nodes that gained capacity since the last pass: the only ones a pod that has been tried can
  // fit now (every other node has only lost capacity since it last fitted nowhere).
  std::vector<int> freed;
  std::vector<char> is_freed(static_cast<size_t>(cluster.node_count()), 0);
  // The pass in which a pod of the list last fitted nowhere: its equals need no try in that pass.
  std::vector<int64_t> failed_in_pass(pods.size(), -1);
  std::vector<double> waits;
  std::vector<float> decision_us;

  int64_t waiting_gpu_pods = 0;
  double waiting_gpu_milli = 0;
  auto record_until = [&](double t) {  // timeline samples at instants before t
    while (static_cast<int>(res.allocation_ratio.size()) < options.points) {
      const double at = res.timeline_start_s +
                        (res.last_arrival_s - res.timeline_start_s) *
                            static_cast<double>(res.allocation_ratio.size()) / (options.points - 1);
      if (at >= t) break;
      res.allocation_ratio.push_back(100.0 * static_cast<double>(cluster.gpu_milli_allocated()) /
                                     capacity);
      res.waiting_pods.push_back(static_cast<double>(waiting.size()));
      res.waiting_gpus.push_back(waiting_gpu_milli / kMilliPerGpu);
    }
  };

  double now = 0, alloc_integral = 0, waiting_alloc_integral = 0, waiting_time = 0;
  size_t next = 0;
  int64_t pass = 0;
  while (next < arrivals.size() || !waiting.empty()) {
    double t = next < arrivals.size() ? arrivals[next].at : kNever;
    if (!running.empty()) t = std::min(t, running.top().first);
    if (t == kNever) break;  // pods wait that nothing will ever make room for
    record_until(t);
    // Means over the timeline's window, the same for every policy.
    const double dt =
        std::max(0.0, std::min(t, res.last_arrival_s) - std::max(now, res.timeline_start_s));
    const double alloc = 100.0 * static_cast<double>(cluster.gpu_milli_allocated()) / capacity;
    alloc_integral += alloc * dt;
    if (waiting_gpu_pods > 0) {
      waiting_alloc_integral += alloc * dt;
      waiting_time += dt;
    }
    now = t;
    while (!running.empty() && running.top().first <= t) {
      Arrival& a = arrivals[running.top().second];
      running.pop();
      const Request& r = pods[static_cast<size_t>(a.pod)];
      Status removed = cluster.Remove(r, a.where);
      if (!removed.ok()) return Result<ReplayResult>::Error("replay: " + removed.message());
      policy->OnRemoved(cluster, r, a.where);
      if (!is_freed[static_cast<size_t>(a.where.node)]) {
        is_freed[static_cast<size_t>(a.where.node)] = 1;
        freed.push_back(a.where.node);
      }
    }
    for (; next < arrivals.size() && arrivals[next].at <= t; ++next) {
      if (!can_ever_fit(arrivals[next].pod)) {
        ++res.unplaceable;
        continue;
      }
      waiting.push_back(next);
    }
    // One pass over the waiting pods in arrival order.
    ++pass;
    size_t kept = 0;
    for (size_t w : waiting) {
      Arrival& a = arrivals[w];
      const Request& r = pods[static_cast<size_t>(a.pod)];
      bool may_fit = failed_in_pass[static_cast<size_t>(a.pod)] != pass;
      if (may_fit && a.tried) {
        may_fit = false;
        for (int n : freed) may_fit = may_fit || cluster.Fits(n, r) == FitResult::kFits;
      }
      std::optional<Assignment> chosen;
      if (may_fit) {
        const auto t0 = std::chrono::steady_clock::now();
        chosen = policy->Select(cluster, r);
        decision_us.push_back(
            std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
        a.tried = true;
        if (!chosen) failed_in_pass[static_cast<size_t>(a.pod)] = pass;
      }
      if (!chosen) {
        waiting[kept++] = w;
        continue;
      }
      if (Status placed = internal::PlaceChosen(cluster, *policy, r, *chosen); !placed.ok()) {
        return placed;
      }
      a.where = *chosen;
      ++res.placed;
      waits.push_back(t - a.at);
      if (t > a.at) ++res.waited;
      if (const double run = RunTime(times[static_cast<size_t>(a.pod)]); run != kNever) {
        running.push({t + run, w});
      }
    }
    waiting.resize(kept);
    for (int n : freed) is_freed[static_cast<size_t>(n)] = 0;
    freed.clear();
    waiting_gpu_pods = 0;
    waiting_gpu_milli = 0;
    for (size_t w : waiting) {
      const Request& r = pods[static_cast<size_t>(arrivals[w].pod)];
      waiting_gpu_pods += r.gpu_count > 0 ? 1 : 0;
      waiting_gpu_milli += static_cast<double>(r.total_gpu_milli());
    }
    res.peak_waiting_pods = std::max(res.peak_waiting_pods, static_cast<int64_t>(waiting.size()));
  }
  res.end_s = std::max(now, res.last_arrival_s);
  record_until(kNever);
  for (size_t w : waiting) {  // never placed: their wait so far
    ++res.never_placed;
    ++res.waited;
    waits.push_back(res.end_s - arrivals[w].at);
  }
  if (const double window = res.last_arrival_s - res.timeline_start_s; window > 0) {
    res.allocation_mean = alloc_integral / window;
    res.waiting_time_share = waiting_time / window;
  }
  res.allocation_while_waiting = waiting_time > 0 ? waiting_alloc_integral / waiting_time : 0;
  double wait_sum = 0;
  for (double w : waits) wait_sum += w;
  res.wait_s_mean = waits.empty() ? 0 : wait_sum / static_cast<double>(waits.size());
  res.wait_s_max = waits.empty() ? 0 : *std::max_element(waits.begin(), waits.end());
  res.wait_s_p50 = internal::Percentile(waits, 0.50);
  res.wait_s_p99 = internal::Percentile(waits, 0.99);
  res.decision_us_p50 = internal::Percentile(decision_us, 0.50);
  res.decision_us_p99 = internal::Percentile(decision_us, 0.99);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace tessera::placement
