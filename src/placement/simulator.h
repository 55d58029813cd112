// The trace simulator: FGD's evaluation protocol (Weng et al., ATC'23) over one policy and seed.
//
// From the pod list, requests are sampled uniformly with replacement (seed S) until their total
// GPU request reaches `inflation` x the cluster's GPUs; they are then scheduled one by one in that
// order on an initially empty copy of the cluster, with no departures and no retries. After every
// request the simulator tracks the arrived workload (cumulative GPU requested / GPU capacity) and
// records, for each whole percent x from 0 to floor(inflation x 100), the state after the last
// request whose arrival kept the arrived workload at or below x %:
//   allocation ratio  GPU milli allocated / capacity, in %
//   frag amount       sum over nodes of F_n(M) / capacity, in % (frag.h)
//   frag ratio        frag amount / unallocated share, in %
// The sampled sequence depends only on the pod list and the seed, so every policy sees the same
// requests for the same seed. Runs on one thread; no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/model.h"

namespace tessera::placement {

struct SimOptions {
  uint64_t seed = 42;
  double inflation = 1.3;  // (0, 10]
  bool measure_frag = true;
};

struct SimResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t pods = 0;
  int64_t scheduled = 0;
  int64_t failed = 0;
  int total_gpus = 0;
  // Indexed by arrived percent, 0..floor(inflation x 100).
  std::vector<double> allocation_ratio;
  std::vector<double> frag_amount;
  std::vector<double> frag_ratio;
  double unallocated_gpus_at_100 = 0;  // at 100 % arrived (or the last point when below)
  double decision_us_p50 = 0;
  double decision_us_p99 = 0;
  double decision_us_max = 0;
  double seconds = 0;  // wall time of the whole run, sampling and metrics included
};

// The requests of one run: `pods` sampled with replacement by `seed` until their GPU request
// reaches inflation x `gpu_milli_capacity`. Fails when the pods ask for no GPU at all.
Result<std::vector<int>> SampleWorkload(std::span<const Request> pods, int64_t gpu_milli_capacity,
                                        double inflation, uint64_t seed);

// One run of `policy` (a PolicyNames() name). `cluster` is copied; `workload` is the target
// workload of the fragmentation measure and of the policies that use it.
Result<SimResult> Simulate(const Cluster& cluster, std::span<const Request> pods,
                           const TargetWorkload& workload, std::string_view policy,
                           const SimOptions& options);

}  // namespace tessera::placement
