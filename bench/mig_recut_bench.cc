// mig_recut_bench: a MIG cluster (data/mig) replayed with departures through tessera-extender's
// HTTP verbs, with fixed layouts and with MIG re-cuts done as a cluster does them, beside
// `tessera sim --replay` on the same node files in the same run.
//
// For each seed and each node file (--fixed, --dynamic): the replay (placement/replay.h, the
// seed's pods for the load, kube-scheduler's queue model, speed-up 1 unless --speedup) in process
// (what `tessera sim --replay` runs) and through the extender (testing/standins/scheduler_replay.h:
// kube-scheduler's side, the stand-in API server, and on nodes labelled for re-cuts the
// extender's re-cut loop on the replay's clock with the node side stood in by
// testing/standins/mig_node_standin.h). Reported per run and as means over the seeds: the GPU
// allocation, the allocation while a pod waits, the share of pods that waited, the peak of
// waiting pods, wait p50/p99/max, and for the extender the pods placed (node, GPU, instance) or
// waiting otherwise than in process, the re-cut requests and the nodes' answers. The --dynamic
// file's GPUs need a first cut (the extender sees a GPU only through its MIG devices).
//
// Settings of the exchange (seconds on the replay's clock): --recut-interval (the extender's
// and the plugin's --mig-recut-interval, default 300), --poll (the extender's loop, 1),
// --reconcile (the plugin's --reconcile-interval, 1), --cut (a cut's new devices listed after,
// 1), --later-devices on|off (tesserad refuses a cut while a later GPU's device is used; on);
// --layouts fixed|dynamic|both (both).
// Writes JSON (default build/bench/mig_recut_bench.json). A benchmark of placement outcomes,
// not of speed; nothing asserted. Test tooling: the API server and the node side are stand-ins.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "k8s/objects.h"
#include "placement/replay.h"
#include "placement/trace.h"
#include "testing/standins/scheduler_replay.h"

namespace {

namespace pl = tessera::placement;
namespace ts = tessera::extender::testing;
using tessera::k8s::Json;

struct Options {
  std::string fixed = TESSERA_DATA_DIR "/mig/nodes_fixed.csv";
  std::string dynamic = TESSERA_DATA_DIR "/mig/nodes_recut.csv";
  std::string pods = TESSERA_DATA_DIR "/mig/pods.csv";
  uint64_t first_seed = 42, last_seed = 51;
  double speedup = 1;
  double recut_interval = 300, poll = 1;
  ts::MigNodeOptions node;
  bool run_fixed = true, run_dynamic = true;
  std::string json = "build/bench/mig_recut_bench.json";
};

Json Summary(const pl::ReplayResult& r) {
  return {{"alloc", r.allocation_mean},
          {"alloc_while_waiting", r.allocation_while_waiting},
          {"waited_share", r.pods > 0 ? static_cast<double>(r.waited) / r.pods : 0},
          {"pods", r.pods},
          {"waited", r.waited},
          {"never_placed", r.never_placed},
          {"peak_waiting", r.peak_waiting_pods},
          {"wait_p50_s", r.wait_s_p50},
          {"wait_p99_s", r.wait_s_p99},
          {"wait_max_s", r.wait_s_max}};
}

void Add(Json& sum, const Json& one) {
  for (auto it = one.begin(); it != one.end(); ++it) {
    sum[it.key()] = sum.value(it.key(), 0.0) + it.value().get<double>();
  }
}

void Print(const char* what, const Json& m) {
  std::printf("%-34s %7.2f %% %7.2f %% %7.2f %% %6.1f %8.0f s %8.0f s %8.0f s\n", what,
              m["alloc"].get<double>(), m["alloc_while_waiting"].get<double>(),
              100 * m["waited_share"].get<double>(), m["peak_waiting"].get<double>(),
              m["wait_p50_s"].get<double>(), m["wait_p99_s"].get<double>(),
              m["wait_max_s"].get<double>());
}

int Run(const Options& o) {
  auto pods_text = [&]() -> std::string {
    std::ifstream f(o.pods);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  Json out = {{"pods", o.pods},        {"seeds", {o.first_seed, o.last_seed}},
              {"speedup", o.speedup},  {"recut_interval_s", o.recut_interval},
              {"poll_s", o.poll},      {"reconcile_s", o.node.reconcile_s},
              {"cut_s", o.node.cut_s}, {"later_devices_block", o.node.later_devices_block},
              {"runs", Json::array()}};
  std::printf("%-34s %9s %9s %9s %6s %10s %10s %10s\n", "layouts / placed by", "alloc",
              "alloc|wait", "waited", "peak", "wait p50", "wait p99", "wait max");
  for (const auto& [label, path] : {std::pair{"fixed", o.fixed}, {"dynamic", o.dynamic}}) {
    if (!(std::string(label) == "fixed" ? o.run_fixed : o.run_dynamic)) continue;
    auto nodes = pl::LoadNodeCsv(path);
    if (!nodes.ok()) {
      std::fprintf(stderr, "mig_recut_bench: %s\n", nodes.error().c_str());
      return 1;
    }
    const pl::Cluster cluster = *pl::Cluster::Create(nodes->models, nodes->nodes);
    auto pods = pl::ParsePodCsv(pods_text, o.pods, cluster.models());
    if (!pods.ok()) {
      std::fprintf(stderr, "mig_recut_bench: %s\n", pods.error().c_str());
      return 1;
    }
    auto workload =
        std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(pods->requests));
    Json sim_sum = Json::object(), ext_sum = Json::object(), exchange = Json::object();
    int runs = 0;
    for (uint64_t seed = o.first_seed; seed <= o.last_seed; ++seed) {
      pl::ReplayOptions ro;
      ro.seed = seed;
      ro.speedup = o.speedup;
      auto sim = pl::Replay(cluster, pods->requests, pods->times, *workload, "tessera", ro);
      if (!sim.ok()) {
        std::fprintf(stderr, "mig_recut_bench: sim: %s\n", sim.error().c_str());
        return 1;
      }
      auto ext = ts::ReplayMigThroughExtender(cluster, pods->requests, pods->times, workload, ro,
                                              o.node, o.recut_interval, o.poll);
      if (!ext.ok()) {
        std::fprintf(stderr, "mig_recut_bench: extender, seed %llu: %s\n",
                     static_cast<unsigned long long>(seed), ext.error().c_str());
        return 1;
      }
      Json s = Summary(*sim), e = Summary(ext->result);
      // Pods placed elsewhere (node, GPU, instance) or waiting otherwise than in process.
      int64_t differ = 0;
      for (size_t i = 0; i < sim->pod_waits.size() && i < ext->result.pod_waits.size(); ++i) {
        const pl::Assignment& a = sim->pod_placements[i];
        const pl::Assignment& b = ext->result.pod_placements[i];
        const bool same = a.node == b.node && a.gpus == b.gpus && a.mig_start == b.mig_start &&
                          sim->pod_waits[i] == ext->result.pod_waits[i];
        differ += same ? 0 : 1;
      }
      e["pods_unlike_sim"] = differ;
      const Json x = {{"requests", ext->recuts_written},
                      {"not_written", ext->recuts_not_written},
                      {"applied", ext->nodes.applied},
                      {"refused_interval", ext->nodes.refused_interval},
                      {"refused_pod", ext->nodes.refused_pod},
                      {"refused_later_device", ext->nodes.refused_later_device},
                      {"refused_other", ext->nodes.refused_other},
                      {"failed", ext->nodes.failed}};
      std::fprintf(stderr,
                   "%s seed %llu: sim alloc %.2f, extender %.2f; %lld pods unlike the sim; %lld "
                   "cut requests, %lld applied (%.0f s)\n",
                   label, static_cast<unsigned long long>(seed), sim->allocation_mean,
                   ext->result.allocation_mean, static_cast<long long>(differ),
                   static_cast<long long>(ext->recuts_written),
                   static_cast<long long>(ext->nodes.applied), ext->result.seconds);
      out["runs"].push_back(
          {{"layouts", label}, {"seed", seed}, {"sim", s}, {"extender", e}, {"recuts", x}});
      Add(sim_sum, s);
      Add(ext_sum, e);
      Add(exchange, x);
      ++runs;
    }
    for (Json* j : {&sim_sum, &ext_sum, &exchange}) {
      for (auto it = j->begin(); it != j->end(); ++it) it.value() = it.value().get<double>() / runs;
    }
    Print((std::string(label) + ", tessera sim --replay").c_str(), sim_sum);
    Print((std::string(label) + ", extender").c_str(), ext_sum);
    std::printf("  pods placed or waiting otherwise than in process, per run: %.1f\n",
                ext_sum.value("pods_unlike_sim", 0.0));
    std::printf(
        "  re-cut requests per run %.1f: applied %.1f, refused: interval %.1f, pod %.1f, "
        "later device %.1f, other %.1f\n",
        exchange.value("requests", 0.0), exchange.value("applied", 0.0),
        exchange.value("refused_interval", 0.0), exchange.value("refused_pod", 0.0),
        exchange.value("refused_later_device", 0.0), exchange.value("refused_other", 0.0));
    out["mean"][label] = {{"sim", sim_sum}, {"extender", ext_sum}, {"recuts", exchange}};
  }
  std::filesystem::path p(o.json);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}

bool Number(const char* text, double low, double high, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= low && v <= high)) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mig_recut_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](double low, double high, double* out) {
      const char* v = value();
      if (!Number(v, low, high, out)) {
        std::fprintf(stderr, "mig_recut_bench: %s \"%s\": expected a number from %g to %g\n",
                     a.c_str(), v, low, high);
        std::exit(2);
      }
    };
    double seed = 0;
    if (a == "--fixed") {
      o.fixed = value();
    } else if (a == "--dynamic") {
      o.dynamic = value();
    } else if (a == "--pods") {
      o.pods = value();
    } else if (a == "--seeds") {
      const std::string v = value();
      const size_t dash = v.find('-');
      double lo = 0, hi = 0;
      if (dash == std::string::npos || !Number(v.substr(0, dash).c_str(), 0, 1e9, &lo) ||
          !Number(v.substr(dash + 1).c_str(), lo, lo + 1000, &hi)) {
        std::fprintf(stderr, "mig_recut_bench: --seeds \"%s\": expected A-B, A <= B\n", v.c_str());
        return 2;
      }
      o.first_seed = static_cast<uint64_t>(lo);
      o.last_seed = static_cast<uint64_t>(hi);
    } else if (a == "--seed") {
      number(0, 1e9, &seed);
      o.first_seed = o.last_seed = static_cast<uint64_t>(seed);
    } else if (a == "--speedup") {
      number(1e-6, 1e12, &o.speedup);
    } else if (a == "--recut-interval") {
      number(1, 1e6, &o.recut_interval);
      o.node.recut_interval_s = o.recut_interval;
    } else if (a == "--poll") {
      number(0.001, 3600, &o.poll);
    } else if (a == "--reconcile") {
      number(0.001, 3600, &o.node.reconcile_s);
    } else if (a == "--cut") {
      number(0, 3600, &o.node.cut_s);
    } else if (a == "--later-devices") {
      const std::string v = value();
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "mig_recut_bench: --later-devices \"%s\": expected on or off\n",
                     v.c_str());
        return 2;
      }
      o.node.later_devices_block = v == "on";
    } else if (a == "--layouts") {
      const std::string v = value();
      if (v != "fixed" && v != "dynamic" && v != "both") {
        std::fprintf(stderr, "mig_recut_bench: --layouts \"%s\": expected fixed, dynamic or both\n",
                     v.c_str());
        return 2;
      }
      o.run_fixed = v != "dynamic";
      o.run_dynamic = v != "fixed";
    } else if (a == "--json") {
      o.json = value();
    } else {
      std::fprintf(
          stderr,
          "usage: mig_recut_bench [--fixed CSV] [--dynamic CSV] [--pods CSV] "
          "[--seeds A-B | --seed S] [--speedup F] [--recut-interval S] [--poll S] "
          "[--reconcile S] [--cut S] [--later-devices on|off] [--layouts fixed|dynamic|both] "
          "[--json PATH]\n");
      return 2;
    }
  }
  return Run(o);
}
