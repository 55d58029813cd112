// Reports of simulator runs: one JSON object per run (the `tessera sim --json` contract), CSV
// curves and SVG plots: allocation ratio against arrived workload (the FGD protocol), and
// allocation and pods waiting over time (the replay with departures). The only place in
// src/placement that writes files; it formats results and decides nothing.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "placement/replay.h"
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

// One line of JSON for a replay with departures (`tessera sim --replay --json`): mode "replay",
// policy, seed, queue ("kube-scheduler" or "fcfs"), reservations (bool), pods, placed, unplaceable,
// never_placed, waited, total_gpus, speedup, peak_demand_gpus, timeline_start_s, last_arrival_s,
// end_s, the timeline allocation_ratio / waiting_pods / waiting_gpus (objects keyed by the
// instant's index, "0".."100" for 101 points), allocation_mean, allocation_while_waiting,
// waiting_time_share, peak_waiting_pods, wait_s_p50, wait_s_p99, wait_s_max, wait_s_mean, attempts,
// decisions, reservations_made, decision_us_p50, decision_us_p99, seconds.
std::string ReplayResultJson(const ReplayResult& result);

// Writes into `dir` (created if missing): replay_allocation.csv, replay_waiting_pods.csv and
// replay_waiting_gpus.csv (one row per run: policy, seed, speedup, then one column per timeline
// instant), replay_waits.csv (per run: the summary numbers), and replay_allocation.svg and
// replay_waiting.svg (per policy, the mean over its runs against the instant's index).
Status WriteReplayReports(const std::vector<ReplayResult>& results, const std::string& dir);

}  // namespace tessera::placement
