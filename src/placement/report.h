// Reports of simulator runs: one JSON object per run (the `tessera sim --json` contract), CSV
// curves and an SVG plot of allocation ratio against arrived workload. The only place in
// src/placement that writes files; it formats results and decides nothing.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "placement/simulator.h"

namespace tessera::placement {

// One line of JSON (no newline) with the fields of the `tessera sim` contract: policy, seed, pods,
// scheduled, failed, total_gpus, allocation_ratio / frag_ratio / frag_amount (objects keyed by
// arrived percent "0".."130"), unallocated_gpus_at_100, decision_us_p50, decision_us_p99, plus
// decision_us_max and seconds.
std::string SimResultJson(const SimResult& result);

// Writes into `dir` (created if missing): allocation_ratio.csv, frag_amount.csv, frag_ratio.csv
// (one row per run: policy, seed, total_gpus, then one column per arrived percent, as the FGD
// reference files), allocation_ratio_mean.csv (per policy, the mean over its runs) and
// allocation_ratio.svg (the means against arrived workload, one line per policy).
Status WriteReports(const std::vector<SimResult>& results, const std::string& dir);

}  // namespace tessera::placement
