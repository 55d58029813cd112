// The FGD evaluation protocol: sampling, the one-by-one replay and its metrics. No I/O.
#include "placement/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "placement/policy.h"
#include "placement/rng.h"
#include "placement/sim_support.h"

namespace tessera::placement {

using internal::kPolicySeedSalt;
using internal::Percentile;

Result<std::vector<int>> SampleWorkload(std::span<const Request> pods, int64_t gpu_milli_capacity,
                                        double inflation, uint64_t seed) {
  int64_t any_gpu = 0;
  for (const Request& r : pods) any_gpu += r.total_gpu_milli();
  if (any_gpu == 0) {
    return Result<std::vector<int>>::Error("the pod list asks for no GPU; nothing to inflate");
  }
  const double target = inflation * static_cast<double>(gpu_milli_capacity);
  Rng rng(seed);
  std::vector<int> order;
  double total = 0;
  while (total < target) {
    const int i = static_cast<int>(rng.Below(pods.size()));
    order.push_back(i);
    total += static_cast<double>(pods[static_cast<size_t>(i)].total_gpu_milli());
  }
  return order;
}

Result<SimResult> Simulate(const Cluster& initial, std::span<const Request> pods,
                           const TargetWorkload& workload, std::string_view policy_name,
                           const SimOptions& options) {
  if (!(options.inflation > 0 && options.inflation <= 10)) {
    return Result<SimResult>::Error("inflation " + std::to_string(options.inflation) +
                                    ": expected a factor in (0, 10]");
  }
  const auto start = std::chrono::steady_clock::now();
  Cluster cluster = initial;
  if (cluster.gpu_milli_capacity() == 0) {
    return Result<SimResult>::Error("the cluster has no GPUs; nothing to measure");
  }
  PolicyOptions popts;
  popts.seed = options.seed ^ kPolicySeedSalt;
  popts.workload = &workload;
  auto made = MakePolicy(policy_name, popts);
  if (!made.ok()) return made.status();
  std::unique_ptr<Policy> policy = std::move(made.value());

  auto sampled =
      SampleWorkload(pods, cluster.gpu_milli_capacity(), options.inflation, options.seed);
  if (!sampled.ok()) return sampled.status();
  const std::vector<int>& order = *sampled;

  SimResult res;
  res.policy = std::string(policy->name());
  res.seed = options.seed;
  res.pods = static_cast<int64_t>(order.size());
  res.total_gpus = cluster.total_gpus();
  const int points = static_cast<int>(std::floor(options.inflation * 100.0 + 1e-9)) + 1;
  res.allocation_ratio.reserve(static_cast<size_t>(points));
  FragEvaluator frag(cluster, workload);
  const double capacity = static_cast<double>(cluster.gpu_milli_capacity());

  auto record = [&] {
    const double alloc = 100.0 * static_cast<double>(cluster.gpu_milli_allocated()) / capacity;
    res.allocation_ratio.push_back(alloc);
    if (options.measure_frag) {
      const double amount = 100.0 * frag.ClusterFragMilli() / capacity;
      res.frag_amount.push_back(amount);
      res.frag_ratio.push_back(alloc < 100.0 ? 100.0 * amount / (100.0 - alloc) : 0.0);
    }
  };

  std::vector<float> decision_us;
  decision_us.reserve(order.size());
  int64_t arrived = 0;  // GPU milli
  int next_point = 0;
  for (int index : order) {
    const Request& r = pods[static_cast<size_t>(index)];
    const int64_t after = arrived + r.total_gpu_milli();
    // Points x with x % < the arrived workload after this request are complete now.
    while (next_point < points &&
           static_cast<double>(next_point) * capacity / 100.0 < static_cast<double>(after) - 1e-9) {
      record();
      ++next_point;
    }
    arrived = after;
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<Assignment> a = policy->Select(cluster, r);
    const auto t1 = std::chrono::steady_clock::now();
    decision_us.push_back(std::chrono::duration<float, std::micro>(t1 - t0).count());
    if (!a) {
      ++res.failed;
      continue;
    }
    if (Status placed = internal::PlaceChosen(cluster, *policy, r, *a); !placed.ok()) {
      return placed;
    }
    ++res.scheduled;
  }
  while (next_point < points) {
    record();
    ++next_point;
  }
  const size_t at100 = std::min<size_t>(100, res.allocation_ratio.size() - 1);
  res.unallocated_gpus_at_100 =
      (100.0 - res.allocation_ratio[at100]) / 100.0 * static_cast<double>(res.total_gpus);
  res.decision_us_max =
      decision_us.empty() ? 0 : *std::max_element(decision_us.begin(), decision_us.end());
  res.decision_us_p50 = Percentile(decision_us, 0.50);
  res.decision_us_p99 = Percentile(decision_us, 0.99);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace tessera::placement
