// `tessera sim` (the program tessera-sim): replays a cluster trace through the placement engine
// (src/placement) with the FGD paper's protocol and reports allocation and fragmentation, or
// (--replay) with the trace's arrivals and departures and reports allocation over time and waits.
// A thin door: it validates the flags' values, loads the CSVs, runs Simulate or Replay for each
// policy and seed, and prints; no policy or metric logic lives here.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "placement/policy.h"
#include "placement/replay.h"
#include "placement/report.h"
#include "placement/simulator.h"
#include "placement/trace.h"
#include "process/child_process.h"

namespace tessera::cli {

namespace {

namespace pl = tessera::placement;

std::string PolicyList() {
  std::string names;
  for (std::string_view n : pl::PolicyNames()) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  return names;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "tessera sim: %s\n(see tessera sim --help)\n", message.c_str());
  return 2;
}

std::string FlagError(std::string_view flag, std::string_view value, std::string_view expected) {
  return std::string(flag) + " \"" + std::string(value) + "\": expected " + std::string(expected);
}

bool ParseSeed(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(ch - '0');
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

// "42", "42-51" or "42,43,50".
bool ParseSeeds(std::string_view text, std::vector<uint64_t>* out) {
  out->clear();
  const size_t dash = text.find('-');
  if (dash != std::string_view::npos) {
    uint64_t a = 0, b = 0;
    if (!ParseSeed(text.substr(0, dash), &a) || !ParseSeed(text.substr(dash + 1), &b) || b < a ||
        b - a >= 1000) {
      return false;
    }
    for (uint64_t s = a; s <= b; ++s) out->push_back(s);
    return true;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    uint64_t s = 0;
    if (!ParseSeed(text.substr(start, comma == text.npos ? text.npos : comma - start), &s)) {
      return false;
    }
    out->push_back(s);
    if (comma == text.npos) break;
    start = comma + 1;
  }
  return out->size() <= 1000;
}

std::string DefaultTraceDir() {
  if (const char* env = std::getenv("TESSERA_OPENB_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  // build/bin/tessera -> <repo>/data/openb, which ships the default trace; else the source tree
  // this binary was built from (a build directory elsewhere).
  const std::string beside = process::ExecutableDir() + "/../../data/openb";
  if (std::filesystem::exists(beside + "/openb_node_list_gpu_node.csv")) return beside;
  return TESSERA_OPENB_DATA_DIR;
}

// One JSON Lines record, flushed so that a reader sees each run as it ends.
void PrintJsonLine(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

bool ParseNumber(const std::string& value, double min, double max, double* out) {
  char* end = nullptr;
  *out = std::strtod(value.c_str(), &end);
  return !value.empty() && *end == '\0' && *out >= min && *out <= max;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double Stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// --replay: each policy and seed through pl::Replay; a table of means, or JSON Lines.
int RunReplays(const pl::Cluster& cluster, const pl::PodList& pods,
               const pl::TargetWorkload& workload, const std::vector<std::string>& policies,
               const std::vector<uint64_t>& seeds, pl::ReplayOptions options, bool json,
               const std::string& out_dir, const std::string& pods_path) {
  for (const pl::PodTimes& t : pods.times) {
    if (t.created < 0) {
      std::fprintf(stderr,
                   "tessera sim: --replay: %s has no creation_time column; the replay needs the "
                   "trace's creation_time and deletion_time\n",
                   pods_path.c_str());
      return 1;
    }
  }
  if (!json) {
    std::printf(
        "tessera sim --replay: %d nodes, %d GPUs; %zu pods in the list; peak load %.2f; "
        "speed-up %g; queue %s; %zu seed(s)\n",
        cluster.node_count(), cluster.total_gpus(), pods.requests.size(), options.load,
        options.speedup, std::string(pl::QueueModelName(options.queue)).c_str(), seeds.size());
    std::printf("%-11s %5s %7s %9s %8s %7s %8s %9s %9s %9s %9s %7s\n", "policy", "runs", "pods",
                "alloc", "alloc|w", "waited", "peak w", "wait p50", "wait p99", "wait max",
                "wait mean", "s/run");
  }
  std::vector<pl::ReplayResult> all;
  for (const std::string& policy : policies) {
    std::vector<double> count, alloc, alloc_waiting, waited, peak, p50, p99, max, mean, secs;
    for (uint64_t seed : seeds) {
      options.seed = seed;
      auto result = pl::Replay(cluster, pods.requests, pods.times, workload, policy, options);
      if (!result.ok()) {
        std::fprintf(stderr, "tessera sim: %s\n", result.error().c_str());
        return 1;
      }
      const pl::ReplayResult& r = *result;
      if (json) PrintJsonLine(pl::ReplayResultJson(r));
      count.push_back(static_cast<double>(r.pods));
      alloc.push_back(r.allocation_mean);
      alloc_waiting.push_back(r.allocation_while_waiting);
      waited.push_back(100.0 * static_cast<double>(r.waited) / static_cast<double>(r.pods));
      peak.push_back(static_cast<double>(r.peak_waiting_pods));
      p50.push_back(r.wait_s_p50);
      p99.push_back(r.wait_s_p99);
      max.push_back(r.wait_s_max);
      mean.push_back(r.wait_s_mean);
      secs.push_back(r.seconds);
      if (!out_dir.empty()) all.push_back(r);
    }
    if (!json) {
      std::printf(
          "%-11s %5zu %7.0f %8.2f%% %7.2f%% %6.2f%% %8.0f %8.0fs %8.0fs %8.0fs %8.1fs %7.2f\n",
          policy.c_str(), seeds.size(), Mean(count), Mean(alloc), Mean(alloc_waiting), Mean(waited),
          Mean(peak), Mean(p50), Mean(p99), Mean(max), Mean(mean), Mean(secs));
    }
  }
  if (!json) {
    std::printf(
        "pods: sampled per run; alloc: GPU allocation averaged over time once the cluster is "
        "busy; alloc|w: while some GPU pod waits;\nwaited: pods that waited; peak w: most pods "
        "waiting at once; waits in the trace's seconds\n");
  }
  if (!out_dir.empty()) {
    Status written = pl::WriteReplayReports(all, out_dir);
    if (!written.ok()) {
      std::fprintf(stderr, "tessera sim: %s\n", written.message().c_str());
      return 1;
    }
    if (!json) {
      std::printf("wrote CSV curves, replay_allocation.svg and replay_waiting.svg to %s\n",
                  out_dir.c_str());
    }
  }
  return 0;
}

}  // namespace

std::string SimPolicyList() { return PolicyList(); }

int RunSim(const SimArgs& args) {
  for (const auto& [flag, value] :
       {std::pair{"--nodes", &args.nodes}, {"--pods", &args.pods}, {"--out", &args.out}}) {
    if (*value && (*value)->empty()) return Usage(FlagError(flag, "", "a path"));
  }
  std::string nodes_path = args.nodes.value_or(""), pods_path = args.pods.value_or("");
  const std::string out_dir = args.out.value_or("");
  const bool json = args.json;
  std::vector<std::string> policies{std::string(pl::kDefaultPolicy)};
  std::vector<uint64_t> seeds{42};
  double inflation = 1.3;
  pl::ReplayOptions replay_options;

  if (args.policy) {
    const std::string& value = *args.policy;
    policies.clear();
    if (value == "all") {
      for (std::string_view n : pl::PolicyNames()) policies.emplace_back(n);
    } else {
      size_t start = 0;
      while (true) {
        const size_t comma = value.find(',', start);
        const std::string name =
            value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        bool valid = false;
        for (std::string_view n : pl::PolicyNames()) valid = valid || n == name;
        if (!valid) {
          return Usage(
              FlagError("--policy", value, "one of " + PolicyList() + ", all, or a comma list"));
        }
        policies.push_back(name);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
  }
  if (args.seed) {
    uint64_t s = 0;
    if (!ParseSeed(*args.seed, &s)) {
      return Usage(
          FlagError("--seed", *args.seed, "a whole number from 0 to 18446744073709551615"));
    }
    seeds = {s};
  }
  if (args.seeds && !ParseSeeds(*args.seeds, &seeds)) {
    return Usage(FlagError("--seeds", *args.seeds,
                           "a range A-B with A <= B (at most 1000 seeds) or a comma list of "
                           "whole numbers, e.g. 42-51"));
  }
  if (args.inflation && !ParseNumber(*args.inflation, 0.01, 10, &inflation)) {
    return Usage(FlagError("--inflation", *args.inflation, "a factor from 0.01 to 10, e.g. 1.3"));
  }
  if (args.load && !ParseNumber(*args.load, 0.01, 100, &replay_options.load)) {
    return Usage(
        FlagError("--load", *args.load, "a multiple of the cluster's GPUs from 0.01 to 100"));
  }
  if (args.speedup && !ParseNumber(*args.speedup, 1e-6, 1e12, &replay_options.speedup)) {
    return Usage(FlagError("--speedup", *args.speedup, "a factor from 1e-6 to 1e12"));
  }
  if (args.queue) {
    if (*args.queue == "kube-scheduler") {
      replay_options.queue = pl::QueueModel::kKubeScheduler;
    } else if (*args.queue == "fcfs") {
      replay_options.queue = pl::QueueModel::kFcfs;
    } else {
      return Usage(FlagError("--queue", *args.queue, "kube-scheduler or fcfs"));
    }
  }
  if (args.reservations) {
    if (*args.reservations != "on" && *args.reservations != "off") {
      return Usage(FlagError("--reservations", *args.reservations, "on or off"));
    }
    replay_options.reservations = *args.reservations == "on";
  }
  if (args.hold_after && !ParseNumber(*args.hold_after, 0, 1e9, &replay_options.hold_after_s)) {
    return Usage(FlagError("--hold-after", *args.hold_after, "seconds from 0 to 1e9"));
  }
  for (const auto& [flag, given] : {std::pair{"--load", args.load.has_value()},
                                    {"--speedup", args.speedup.has_value()},
                                    {"--queue", args.queue.has_value()},
                                    {"--reservations", args.reservations.has_value()},
                                    {"--hold-after", args.hold_after.has_value()}}) {
    if (!args.replay && given) return Usage(std::string(flag) + " needs --replay");
  }
  if (args.replay && args.inflation) {
    return Usage(
        "--inflation is the no-departure protocol's; with --replay, --load sets how "
        "many pods are sampled");
  }

  if (nodes_path.empty() || pods_path.empty()) {
    const std::string dir = DefaultTraceDir();
    std::vector<std::string> defaulted;
    if (nodes_path.empty()) defaulted.push_back(nodes_path = dir + "/openb_node_list_gpu_node.csv");
    if (pods_path.empty()) defaulted.push_back(pods_path = dir + "/openb_pod_list_default.csv");
    for (const std::string& p : defaulted) {
      if (!std::filesystem::exists(p)) {
        return Usage("the default trace file " + p +
                     " does not exist; pass --nodes CSV and --pods CSV, or set TESSERA_OPENB_DIR");
      }
    }
  }

  auto nodes = pl::LoadNodeCsv(nodes_path);
  if (!nodes.ok()) {
    std::fprintf(stderr, "tessera sim: %s\n", nodes.error().c_str());
    return 1;
  }
  auto pods = pl::LoadPodCsv(pods_path, nodes->models);
  if (!pods.ok()) {
    std::fprintf(stderr, "tessera sim: %s\n", pods.error().c_str());
    return 1;
  }
  auto cluster = pl::Cluster::Create(nodes->models, nodes->nodes);
  if (!cluster.ok()) {
    std::fprintf(stderr, "tessera sim: %s: %s\n", nodes_path.c_str(), cluster.error().c_str());
    return 1;
  }
  const pl::TargetWorkload workload = pl::TargetWorkload::FromRequests(pods->requests);
  if (args.replay) {
    return RunReplays(*cluster, *pods, workload, policies, seeds, replay_options, json, out_dir,
                      pods_path);
  }

  if (!json) {
    std::printf(
        "tessera sim: %d nodes, %d GPUs; %zu pods in the list; inflation %.2f; %zu seed(s)\n",
        cluster->node_count(), cluster->total_gpus(), pods->requests.size(), inflation,
        seeds.size());
    std::printf("%-11s %6s %8s %8s %8s %8s %8s %9s %9s %7s\n", "policy", "runs", "alloc@90",
                "alloc@100", "±sd", "alloc@max", "unalloc", "frag@100", "p99 us", "s/run");
  }
  std::vector<pl::SimResult> all;
  for (const std::string& policy : policies) {
    std::vector<double> a90, a100, amax, unalloc, frag100, p99, secs;
    for (uint64_t seed : seeds) {
      pl::SimOptions options;
      options.seed = seed;
      options.inflation = inflation;
      auto result = pl::Simulate(*cluster, pods->requests, workload, policy, options);
      if (!result.ok()) {
        std::fprintf(stderr, "tessera sim: %s\n", result.error().c_str());
        return 1;
      }
      const pl::SimResult& r = *result;
      if (json) PrintJsonLine(pl::SimResultJson(r));
      const size_t at100 = std::min<size_t>(100, r.allocation_ratio.size() - 1);
      const size_t at90 = std::min<size_t>(90, r.allocation_ratio.size() - 1);
      a90.push_back(r.allocation_ratio[at90]);
      a100.push_back(r.allocation_ratio[at100]);
      amax.push_back(r.allocation_ratio.back());
      unalloc.push_back(r.unallocated_gpus_at_100);
      frag100.push_back(r.frag_amount.empty() ? 0 : r.frag_amount[at100]);
      p99.push_back(r.decision_us_p99);
      secs.push_back(r.seconds);
      if (!out_dir.empty()) all.push_back(r);
    }
    if (!json) {
      std::printf("%-11s %6zu %8.2f %8.2f %8.2f %8.2f %8.1f %9.2f %9.1f %7.2f\n", policy.c_str(),
                  seeds.size(), Mean(a90), Mean(a100), Stddev(a100), Mean(amax), Mean(unalloc),
                  Mean(frag100), Mean(p99), Mean(secs));
    }
  }
  if (!out_dir.empty()) {
    Status written = pl::WriteReports(all, out_dir);
    if (!written.ok()) {
      std::fprintf(stderr, "tessera sim: %s\n", written.message().c_str());
      return 1;
    }
    if (!json) std::printf("wrote CSV curves and allocation_ratio.svg to %s\n", out_dir.c_str());
  }
  return 0;
}

}  // namespace tessera::cli
