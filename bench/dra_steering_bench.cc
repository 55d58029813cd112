// dra_steering_bench: the openb trace placed through DRA, by upstream's allocation alone and with
// Tessera's steering, in one run on the same sampled pods (FGD's protocol, as `tessera sim`: pods
// sampled with replacement by seed until their GPU request reaches `inflation` x the cluster's
// GPUs, scheduled one by one, no departures).
//
// Every GPU node publishes the pool tessera-dra-plugin publishes (slices.h, mode core_mem); every
// GPU pod asks one claim of DeviceClass gpu.tessera.io: a whole GPU (count num_gpu, no capacity)
// or a share (cores = gpu_milli / 10, memory = the same fraction of 16 GiB, rounded up to the
// 256 MiB step; every openb GPU has at least 16 GiB, so memory binds on the smallest GPUs as the
// trace's proportional memory does).
//   upstream  the stand-in kube-scheduler (dra_scheduler.h: NodeResourcesFit and the DRA
//             allocator's Filter, numFeasibleNodesToFind from a rotating start, LeastAllocated +
//             BalancedAllocation scores, random ties) with the stand-in of upstream's structured
//             allocator (first fit on the chosen node);
//   steered   DraSteering (src/k8s/dra/steering.h: the placement engine's tessera policy, the one
//             `tessera sim` and the extender run) chooses node and GPUs and writes the claim's
//             allocation; the stand-in allocator, restricted to the chosen devices, must accept
//             it exactly (disagreements are counted, and should be 0). CPU-only pods go through
//             the stand-in kube-scheduler in both runs.
// Also `tessera sim`'s engine on the trace's own requests (proportional memory), for reference.
// Prints the allocation ratio (GPU milli allocated / capacity) when the arrived workload reaches
// 100 % and at the end, and the GPU pods that found no place; writes JSON (default
// build/bench/dra_steering_bench.json). A benchmark, not a test.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "k8s/dra/slices.h"
#include "k8s/dra/steering.h"
#include "placement/simulator.h"
#include "placement/trace.h"
#include "testing/standins/dra_allocator.h"
#include "testing/standins/dra_scheduler.h"
#include "testing/support/dra_objects.h"

namespace {

namespace pl = tessera::placement;
namespace k8s = tessera::k8s;
namespace dra = tessera::k8s::dra;
using tessera::k8s::Json;

struct Options {
  std::string dir = TESSERA_OPENB_DIR;
  uint64_t seed = 42;
  double inflation = 1.3;
  int nodes = 0;  // 0: all
  std::string json = "build/bench/dra_steering_bench.json";
};

struct RunResult {
  std::string name;
  int64_t gpu_pods = 0, gpu_failed = 0, cpu_failed = 0;
  double ratio_at_100 = 0, ratio_end = 0;
  int disagreements = 0, fallbacks = 0, rechosen = 0;
  double seconds = 0;
};

Json DeviceClass() {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", "gpu.tessera.io"}}},
          {"spec",
           {{"selectors",
             Json::array({{{"cel",
                            {{"expression",
                              "device.driver == \"gpu.tessera.io\" && "
                              "device.attributes[\"gpu.tessera.io\"].type == \"gpu\""}}}}})}}}};
}

// The pool a node's plugin publishes, as the slice the publisher writes.
std::vector<Json> SlicesOf(const pl::NodeList& list) {
  std::vector<Json> out;
  for (const pl::NodeSpec& n : list.nodes) {
    if (n.gpu_count == 0) continue;
    std::vector<k8s::NodeGpu> gpus;
    const pl::GpuModel& model = list.models.model(n.model);
    for (int g = 0; g < n.gpu_count; ++g) {
      gpus.push_back({g, "GPU-" + n.name + "-" + std::to_string(g), model.name,
                      tessera::Bytes(static_cast<uint64_t>(model.memory_mib) << 20), 16, true,
                      std::nullopt});
    }
    for (const Json& content : dra::PoolSlices(k8s::NodeMode::kCoreMem, gpus, {})) {
      Json spec = content;
      spec["driver"] = dra::kDriverName;
      spec["nodeName"] = n.name;
      spec["pool"] = {{"name", n.name}, {"generation", 1}, {"resourceSliceCount", 1}};
      out.push_back({{"metadata", {{"name", "00000-gpu.tessera.io-" + n.name}}}, {"spec", spec}});
    }
  }
  return out;
}

// The claim a trace request becomes; none for a CPU-only request.
std::vector<Json> ClaimsOf(const pl::Request& r, size_t index) {
  if (r.gpu_count == 0) return {};
  k8s::testing::DraRequest q;
  q.count = r.gpu_count;
  if (r.gpu_milli < pl::kMilliPerGpu) {
    const int64_t bytes = (int64_t{16} << 30) * r.gpu_milli / pl::kMilliPerGpu;
    const int64_t mib =
        (bytes + dra::kMemoryStep - 1) / dra::kMemoryStep * (dra::kMemoryStep >> 20);
    q.capacity = {{"memory", std::to_string(mib) + "Mi"},
                  {"cores", std::to_string(r.gpu_milli / 10)}};
  }
  Json claim = k8s::testing::ClaimJson("bench", "pod-" + std::to_string(index), {q});
  claim["metadata"]["uid"] = "uid-" + std::to_string(index);
  return {claim};
}

// Tracks the allocation ratio as the arrived workload grows.
struct Tracker {
  int64_t capacity = 0, arrived = 0, allocated = 0;
  double at_100 = 0;
  void Arrive(const pl::Request& r, bool placed) {
    arrived += r.total_gpu_milli();
    if (placed) allocated += r.total_gpu_milli();
    if (arrived <= capacity)
      at_100 = 100.0 * static_cast<double>(allocated) / static_cast<double>(capacity);
  }
};

RunResult Upstream(const pl::NodeList& list, const std::vector<Json>& slices,
                   const pl::PodList& pods, const std::vector<int>& sample, const Options& o,
                   int64_t capacity) {
  RunResult out;
  out.name = "upstream allocator (kube-scheduler stand-in)";
  const auto start = std::chrono::steady_clock::now();
  k8s::DraAllocator allocator;
  allocator.SetSlices(slices);
  allocator.SetClasses({DeviceClass()});
  std::vector<k8s::DraScheduler::Node> nodes;
  for (const pl::NodeSpec& n : list.nodes) nodes.push_back({n.name, n.cpu_milli, n.memory_mib});
  k8s::DraScheduler scheduler(nodes, &allocator, o.seed);
  Tracker t{capacity};
  for (size_t i = 0; i < sample.size(); ++i) {
    const pl::Request& r = pods.requests[static_cast<size_t>(sample[i])];
    auto d = scheduler.Schedule(r.cpu_milli, r.memory_mib, ClaimsOf(r, i));
    const bool placed = d.ok() && d->has_value();
    if (r.gpu_count > 0) {
      ++out.gpu_pods;
      out.gpu_failed += placed ? 0 : 1;
    } else {
      out.cpu_failed += placed ? 0 : 1;
    }
    t.Arrive(r, placed);
  }
  out.ratio_at_100 = t.at_100;
  out.ratio_end = 100.0 * static_cast<double>(t.allocated) / static_cast<double>(capacity);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

RunResult Steered(const pl::NodeList& list, const std::vector<Json>& slices,
                  const pl::PodList& pods, const std::vector<int>& sample, const Options& o,
                  int64_t capacity) {
  RunResult out;
  out.name = "Tessera steering (placement engine, tessera policy)";
  const auto start = std::chrono::steady_clock::now();
  std::vector<dra::SteeringNode> steering_nodes;
  std::vector<k8s::DraScheduler::Node> nodes;
  for (const pl::NodeSpec& n : list.nodes) {
    steering_nodes.push_back({n.name, n.cpu_milli, n.memory_mib});
    nodes.push_back({n.name, n.cpu_milli, n.memory_mib});
  }
  // The tessera policy's target workload: the requests as steering sees them.
  auto probe =
      dra::DraSteering::Create(steering_nodes, slices, {DeviceClass()}, "bestfit", nullptr);
  if (!probe.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", probe.error().c_str());
    std::exit(1);
  }
  std::vector<pl::Request> requests;
  for (size_t i = 0; i < pods.requests.size(); ++i) {
    const pl::Request& r = pods.requests[i];
    if (r.gpu_count == 0) {
      requests.push_back(r);
      continue;
    }
    auto rs = (*probe)->RequestsOf(r.cpu_milli, r.memory_mib, ClaimsOf(r, i));
    if (rs.ok()) requests.insert(requests.end(), rs->begin(), rs->end());
  }
  auto workload =
      std::make_shared<const pl::TargetWorkload>(pl::TargetWorkload::FromRequests(requests));
  auto steering =
      dra::DraSteering::Create(steering_nodes, slices, {DeviceClass()}, "tessera", workload);
  if (!steering.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", steering.error().c_str());
    std::exit(1);
  }
  k8s::DraAllocator verify;
  verify.SetSlices(slices);
  verify.SetClasses({DeviceClass()});
  k8s::DraScheduler scheduler(nodes, &verify, o.seed);
  Tracker t{capacity};
  for (size_t i = 0; i < sample.size(); ++i) {
    const pl::Request& r = pods.requests[static_cast<size_t>(sample[i])];
    const std::vector<Json> claims = ClaimsOf(r, i);
    bool placed = false;
    if (claims.empty()) {
      auto d = scheduler.Schedule(r.cpu_milli, r.memory_mib, {});
      placed = d.ok() && d->has_value();
      if (placed) (void)(*steering)->AddPod((*d)->node, r.cpu_milli, r.memory_mib);
      out.cpu_failed += placed ? 0 : 1;
    } else {
      ++out.gpu_pods;
      auto d = (*steering)->Steer(r.cpu_milli, r.memory_mib, claims);
      if (!d.ok()) {
        ++out.fallbacks;  // left to kube-scheduler
        auto s = scheduler.Schedule(r.cpu_milli, r.memory_mib, claims);
        placed = s.ok() && s->has_value();
        if (placed) {
          (void)(*steering)->AddPod((*s)->node, r.cpu_milli, r.memory_mib);
          for (const Json& a : (*s)->allocations) (void)(*steering)->AddAllocation(a);
        }
      } else if (d->has_value()) {
        placed = true;
        const dra::SteeringDecision& decision = **d;
        // Upstream's allocator, restricted to the devices chosen, must write the same.
        std::set<std::string> chosen;
        for (const Json& a : decision.allocations) {
          for (const Json& res : a["devices"]["results"])
            chosen.insert(res["device"].get<std::string>());
        }
        auto check =
            verify.Allocate({decision.node, {}}, claims,
                            [&](size_t, const std::string&, const k8s::DraAllocator::DeviceId& id) {
                              return chosen.count(id.device) != 0;
                            });
        bool same =
            check.ok() && check->has_value() && (*check)->size() == decision.allocations.size();
        for (size_t c = 0; same && c < decision.allocations.size(); ++c) {
          const Json& mine = decision.allocations[c]["devices"]["results"];
          const Json& theirs = (**check)[c]["devices"]["results"];
          same = mine.size() == theirs.size();
          for (size_t k = 0; same && k < mine.size(); ++k) {
            same = mine[k]["device"] == theirs[k]["device"] &&
                   mine[k].value("consumedCapacity", Json()) ==
                       theirs[k].value("consumedCapacity", Json());
          }
        }
        if (!same) ++out.disagreements;
        for (const Json& a : decision.allocations) verify.AddAllocation(a);
        scheduler.Hold(decision.node, r.cpu_milli, r.memory_mib);
      }
      out.gpu_failed += placed ? 0 : 1;
    }
    t.Arrive(r, placed);
  }
  out.ratio_at_100 = t.at_100;
  out.ratio_end = 100.0 * static_cast<double>(t.allocated) / static_cast<double>(capacity);
  out.rechosen = (*steering)->rechosen();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

int Run(const Options& o) {
  auto nodes = pl::LoadNodeCsv(o.dir + "/openb_node_list_gpu_node.csv");
  if (!nodes.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", nodes.error().c_str());
    return 1;
  }
  if (o.nodes > 0 && o.nodes < static_cast<int>(nodes->nodes.size()))
    nodes->nodes.resize(static_cast<size_t>(o.nodes));
  auto pods = pl::LoadPodCsv(o.dir + "/openb_pod_list_default.csv", nodes->models);
  if (!pods.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", pods.error().c_str());
    return 1;
  }
  auto cluster = pl::Cluster::Create(nodes->models, nodes->nodes);
  if (!cluster.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", cluster.error().c_str());
    return 1;
  }
  const int64_t capacity = cluster->gpu_milli_capacity();
  auto sample = pl::SampleWorkload(pods->requests, capacity, o.inflation, o.seed);
  if (!sample.ok()) {
    std::fprintf(stderr, "dra_steering_bench: %s\n", sample.error().c_str());
    return 1;
  }
  const std::vector<Json> slices = SlicesOf(*nodes);
  std::printf(
      "dra_steering_bench: %zu nodes (%d GPUs), %zu pods sampled (seed %llu, inflation %.2f)\n",
      nodes->nodes.size(), cluster->total_gpus(), sample->size(),
      static_cast<unsigned long long>(o.seed), o.inflation);
  const RunResult up = Upstream(*nodes, slices, *pods, *sample, o, capacity);
  const RunResult steered = Steered(*nodes, slices, *pods, *sample, o, capacity);
  // tessera sim's engine on the trace's own (proportional) requests.
  const pl::TargetWorkload workload = pl::TargetWorkload::FromRequests(pods->requests);
  pl::SimOptions so;
  so.seed = o.seed;
  so.inflation = o.inflation;
  so.measure_frag = false;
  auto sim = pl::Simulate(*cluster, pods->requests, workload, "tessera", so);
  std::printf("  %-52s %10s %10s %12s %10s\n", "", "alloc@100%", "alloc@end", "GPU pods out",
              "seconds");
  for (const RunResult& r : {up, steered}) {
    std::printf("  %-52s %9.2f%% %9.2f%% %6lld/%-5lld %10.1f\n", r.name.c_str(), r.ratio_at_100,
                r.ratio_end, static_cast<long long>(r.gpu_failed),
                static_cast<long long>(r.gpu_pods), r.seconds);
  }
  if (sim.ok()) {
    const size_t at = std::min<size_t>(100, sim->allocation_ratio.size() - 1);
    std::printf("  %-52s %9.2f%% %9.2f%%\n", "tessera sim (trace's proportional memory), reference",
                sim->allocation_ratio[at], sim->allocation_ratio.back());
  }
  std::printf(
      "  steering: %d decisions disagreed with upstream's allocator on the chosen devices, %d "
      "pods left to kube-scheduler, %d choices made again\n",
      steered.disagreements, steered.fallbacks, steered.rechosen);
  Json out = {{"nodes", nodes->nodes.size()},
              {"gpus", cluster->total_gpus()},
              {"pods", sample->size()},
              {"seed", o.seed},
              {"inflation", o.inflation}};
  for (const RunResult& r : {up, steered}) {
    out["runs"].push_back({{"name", r.name},
                           {"allocation_at_100", r.ratio_at_100},
                           {"allocation_end", r.ratio_end},
                           {"gpu_pods", r.gpu_pods},
                           {"gpu_pods_unplaced", r.gpu_failed},
                           {"cpu_pods_unplaced", r.cpu_failed},
                           {"disagreements", r.disagreements},
                           {"fallbacks", r.fallbacks},
                           {"rechosen", r.rechosen},
                           {"seconds", r.seconds}});
  }
  out["ratio_steered_over_upstream_at_100"] =
      up.ratio_at_100 > 0 ? steered.ratio_at_100 / up.ratio_at_100 : 0;
  std::filesystem::create_directories(std::filesystem::path(o.json).parent_path());
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("  JSON: %s\n", o.json.c_str());
  return steered.disagreements == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* d = std::getenv("TESSERA_OPENB_DIR")) o.dir = d;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dra_steering_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--seed") {
        o.seed = std::stoull(value());
      } else if (a == "--inflation") {
        o.inflation = std::stod(value());
      } else if (a == "--nodes") {
        o.nodes = std::stoi(value());
      } else if (a == "--json") {
        o.json = value();
      } else {
        std::fprintf(
            stderr,
            "usage: dra_steering_bench [--seed S] [--inflation F] [--nodes N] [--json PATH]\n");
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "dra_steering_bench: %s: not a number\n", a.c_str());
      return 2;
    }
  }
  if (o.inflation <= 0 || o.inflation > 10) {
    std::fprintf(stderr, "dra_steering_bench: --inflation=%g: expected more than 0, at most 10\n",
                 o.inflation);
    return 2;
  }
  return Run(o);
}
