// placement_bench: how the time of one placement decision grows with the cluster, for tessera,
// fgd and bestfit, from the openb cluster (1213 nodes) up to 10 000 nodes (the node list repeated),
// measured against a baseline in the same run: one scan of the cluster checking only the fit
// rules for the request, the floor any policy pays. Each iteration is one decision plus applying
// it (CPU time per decision; wall time is in the JSON too), on the FGD protocol's workload (sampled
// with replacement, no departures); when the workload is used up the cluster is reset outside the
// timing. "Cold" decisions are a fresh policy's first (a request shape it has not seen since the
// nodes changed: it scores every node), the worst case: BM_DecideCold from an empty cluster on,
// BM_DecideColdBusy from a cluster 85 % allocated on. tessera-unmemoised is tessera scoring every
// node afresh, as it did before its NodeStateMemo; the JSON gives the ratio of the two
// ("cold_speedup", measured in the same run) and the decisions are the same (policy_test).
//
// Uses the openb trace in data/openb, else src/placement/testdata (a small synthetic trace).
// Writes build/bench/placement_bench.json (override with --json PATH).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/policy.h"
#include "placement/policy_internal.h"
#include "placement/simulator.h"
#include "placement/trace.h"

namespace {

namespace pl = tessera::placement;

struct Trace {
  pl::NodeList nodes;
  std::vector<pl::Request> pods;
  pl::TargetWorkload workload;
  std::string source;
};

Trace* g_trace = nullptr;

bool Load(const std::string& dir, Trace* t) {
  const std::string nodes = dir + "/openb_node_list_gpu_node.csv";
  const std::string pods = dir + "/openb_pod_list_default.csv";
  const std::string test_nodes = dir + "/nodes.csv";
  const bool openb = std::filesystem::exists(nodes) && std::filesystem::exists(pods);
  auto n = pl::LoadNodeCsv(openb ? nodes : test_nodes);
  if (!n.ok()) return false;
  auto p = pl::LoadPodCsv(openb ? pods : dir + "/pods.csv", n->models);
  if (!p.ok()) return false;
  t->nodes = std::move(n.value());
  t->pods = std::move(p.value().requests);
  t->workload = pl::TargetWorkload::FromRequests(t->pods);
  t->source = dir;
  return true;
}

// The trace's node list repeated until it has `count` nodes.
pl::Cluster ClusterOf(int count) {
  std::vector<pl::NodeSpec> nodes;
  const auto& base = g_trace->nodes.nodes;
  for (int i = 0; i < count; ++i) {
    pl::NodeSpec s = base[static_cast<size_t>(i) % base.size()];
    s.name += '-';
    s.name += std::to_string(i);
    nodes.push_back(std::move(s));
  }
  return pl::Cluster(g_trace->nodes.models, std::move(nodes));
}

std::unique_ptr<pl::Policy> MakeNamed(const std::string& name) {
  const pl::PolicyOptions options{42, &g_trace->workload};
  if (name == "tessera-unmemoised") return pl::internal::MakeTesseraUnmemoised(options);
  return std::move(pl::MakePolicy(name, options).value());
}

// One decision + placement per iteration on the protocol's workload, from the point where the
// cluster is `start_fill` (0..1) allocated on.
void Decide(benchmark::State& state, const std::string& policy_name, bool cold, double start_fill) {
  const int count = static_cast<int>(state.range(0));
  pl::Cluster start = ClusterOf(count);
  const std::vector<int> order =
      *pl::SampleWorkload(g_trace->pods, start.gpu_milli_capacity(), 1.3, 42);
  size_t first = 0;
  if (start_fill > 0) {  // fill with tessera (warm) up to the start, untimed
    auto filler = MakeNamed("tessera");
    while (first < order.size() &&
           static_cast<double>(start.gpu_milli_allocated()) <
               start_fill * static_cast<double>(start.gpu_milli_capacity())) {
      const pl::Request& r = g_trace->pods[static_cast<size_t>(order[first++])];
      if (const auto a = filler->Select(start, r); a && start.Place(r, *a).ok()) {
        filler->OnPlaced(start, r, *a);
      }
    }
  }
  pl::Cluster cluster = start;
  std::unique_ptr<pl::Policy> policy = MakeNamed(policy_name);
  size_t next = first;
  int64_t placed = 0;
  for (auto _ : state) {
    if (next == order.size() || cold) {
      state.PauseTiming();
      if (next == order.size()) {
        cluster = start;
        next = first;
      }
      policy = MakeNamed(policy_name);
      state.ResumeTiming();
    }
    const pl::Request& r = g_trace->pods[static_cast<size_t>(order[next++])];
    const auto a = policy->Select(cluster, r);
    if (a && cluster.Place(r, *a).ok()) {
      policy->OnPlaced(cluster, r, *a);
      ++placed;
    }
  }
  state.counters["placed"] = static_cast<double>(placed);
}

void BM_Baseline_FitScan(benchmark::State& state) {
  const pl::Cluster cluster = ClusterOf(static_cast<int>(state.range(0)));
  size_t i = 0;
  for (auto _ : state) {
    const pl::Request& r = g_trace->pods[i++ % g_trace->pods.size()];
    int fits = 0;
    for (int n = 0; n < cluster.node_count(); ++n) {
      fits += cluster.Fits(n, r) == pl::FitResult::kFits ? 1 : 0;
    }
    benchmark::DoNotOptimize(fits);
  }
}

constexpr int kSizes[] = {1213, 2500, 5000, 10000};

void Register() {
  auto sizes = [](benchmark::internal::Benchmark* b) {
    for (int n : kSizes) b->Arg(n);
    b->Unit(benchmark::kMicrosecond);
  };
  sizes(benchmark::RegisterBenchmark("BM_Baseline_FitScan", BM_Baseline_FitScan));
  for (const char* p : {"tessera", "fgd", "bestfit"}) {
    sizes(benchmark::RegisterBenchmark((std::string("BM_Decide/") + p).c_str(),
                                       [p](benchmark::State& s) { Decide(s, p, false, 0); }));
  }
  for (const char* p : {"tessera", "tessera-unmemoised", "fgd"}) {
    sizes(benchmark::RegisterBenchmark((std::string("BM_DecideCold/") + p).c_str(),
                                       [p](benchmark::State& s) { Decide(s, p, true, 0); }));
    sizes(benchmark::RegisterBenchmark((std::string("BM_DecideColdBusy/") + p).c_str(),
                                       [p](benchmark::State& s) { Decide(s, p, true, 0.85); }));
  }
}

// "BM_DecideCold/tessera/10000" -> "BM_DecideCold/tessera-unmemoised/10000".
std::string UnmemoisedOf(const std::string& name) {
  const size_t at = name.find("/tessera/");
  if (at == std::string::npos) return "";
  return name.substr(0, at) + "/tessera-unmemoised/" + name.substr(at + 9);
}

std::string SizeOf(const std::string& name) { return name.substr(name.rfind('/') + 1); }

}  // namespace

int main(int argc, char** argv) {
  const char* build_dir = std::getenv("TESSERA_BUILD_DIR");
  std::string json =
      std::string(build_dir != nullptr ? build_dir : "build") + "/bench/placement_bench.json";
  tessera::bench::Initialize(argc, argv, &json);
  Trace trace;
  if (!Load(TESSERA_OPENB_DIR, &trace) && !Load(TESSERA_TESTDATA_DIR, &trace)) {
    std::fprintf(stderr, "placement_bench: no trace in %s nor %s\n", TESSERA_OPENB_DIR,
                 TESSERA_TESTDATA_DIR);
    return 1;
  }
  g_trace = &trace;
  std::printf("placement_bench: trace from %s (%zu nodes, %zu pods)\n", trace.source.c_str(),
              trace.nodes.nodes.size(), trace.pods.size());
  Register();
  tessera::bench::CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::map<std::string, double> baseline;  // per cluster size
  for (const auto& r : reporter.results) {
    if (r.name.rfind("BM_Baseline_FitScan/", 0) == 0) baseline[SizeOf(r.name)] = (r.cpu_ns / 1000);
  }
  const std::string dir = json.substr(0, json.rfind('/'));
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  std::map<std::string, double> cpu_us;
  for (const auto& r : reporter.results) cpu_us[r.name] = r.cpu_ns / 1000;
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& r : reporter.results) {
    const double base = baseline.count(SizeOf(r.name)) ? baseline[SizeOf(r.name)] : 0;
    nlohmann::ordered_json entry = {{"name", r.name},
                                    {"nodes", std::stoi(SizeOf(r.name))},
                                    {"us_per_decision", r.cpu_ns / 1000},
                                    {"wall_us", r.real_ns / 1000},
                                    {"ratio_to_baseline", base > 0 ? (r.cpu_ns / 1000) / base : 0}};
    if (const std::string before = UnmemoisedOf(r.name);
        !before.empty() && cpu_us.count(before) != 0 && r.cpu_ns > 0) {
      entry["unmemoised_us"] = cpu_us[before];
      entry["cold_speedup"] = cpu_us[before] / (r.cpu_ns / 1000);
    }
    results.push_back(std::move(entry));
  }
  const nlohmann::ordered_json report = {
      {"benchmark", "placement_bench"},
      {"trace", trace.source},
      {"baseline", "BM_Baseline_FitScan (same cluster size)"},
      {"cold_speedup", "tessera-unmemoised / tessera, CPU time, same run"},
      {"results", std::move(results)}};
  std::ofstream out(json);
  out << report.dump(2) << "\n";
  std::printf("\nwrote %s\n", json.c_str());
  for (const auto& r : reporter.results) {
    const double base = baseline.count(SizeOf(r.name)) ? baseline[SizeOf(r.name)] : 0;
    std::printf("  %-43s %10.1f us/decision  %8.1fx baseline", r.name.c_str(), (r.cpu_ns / 1000),
                base > 0 ? (r.cpu_ns / 1000) / base : 0);
    if (const std::string before = UnmemoisedOf(r.name);
        !before.empty() && cpu_us.count(before) != 0 && r.cpu_ns > 0) {
      std::printf("  %.1fx faster than unmemoised", cpu_us[before] / (r.cpu_ns / 1000));
    }
    std::printf("\n");
  }
  return out.good() ? 0 : 1;
}
