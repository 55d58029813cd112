// tessera-demo-cluster: the cluster act of `tessera demo` (`tessera demo cluster`). The real
// tessera-extender (the placement engine behind kube-scheduler) on a simulated cluster of four
// nodes of four GPUs, twice side by side: nodes labelled tessera.io/gpu.placement=tessera and the
// same nodes labelled binpack. A burst of pods of mixed shapes (GPU shares, whole GPUs, 2 GPUs)
// arrives; each is scheduled through the extender's verbs as kube-scheduler calls them and bound
// through the API server; pods that fit nowhere are tried once more, as kube-scheduler's queue
// retries them. Then some share pods leave (deleted at the API server) and pods of 1, 2 and 4
// whole GPUs arrive. Then each GPU's holders, the pods still waiting and the GPUs left stranded
// (free capacity none of the waiting pods can use), from the extender's /inspect; and the same
// placement engine on the openb trace, where the two policies differ. STAND-INS: the API server
// (testing/standins/test_apiserver.h) and kube-scheduler's calls
// (testing/standins/scheduler_driver.h). No GPU process runs in this act (the node act runs them).
// Demo tooling: it drives and prints, decides nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "k8s/extender/extender_app.h"
#include "placement/frag.h"
#include "placement/simulator.h"
#include "placement/trace.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using k8s::Json;

constexpr int kNodes = 4;
constexpr int kGpusPerNode = 4;

struct Shape {
  const char* name;
  const char* asks;  // for people
  std::map<std::string, std::string> limits;
  int count;
  int gpu_count, gpu_milli, gpu_mem_gib;  // the same, as the placement engine's request
};

// The burst: 15.3 GPUs' worth of GPU time for 16 GPUs.
const Shape kShapes[] = {
    {"infer",
     "25% + 4 GiB",
     {{"tessera.io/gpu-core", "25"}, {"tessera.io/gpu-mem", "4"}},
     10,
     1,
     250,
     4},
    {"notebook",
     "10% + 2 GiB",
     {{"tessera.io/gpu-core", "10"}, {"tessera.io/gpu-mem", "2"}},
     8,
     1,
     100,
     2},
    {"tune",
     "50% + 8 GiB",
     {{"tessera.io/gpu-core", "50"}, {"tessera.io/gpu-mem", "8"}},
     6,
     1,
     500,
     8},
    {"train", "1 GPU", {{"tessera.io/gpu-count", "1"}}, 5, 1, 1000, 16},
    {"dist", "2 GPUs", {{"tessera.io/gpu-count", "2"}}, 2, 2, 1000, 16},
};

// After some pods leave: pods that need whole GPUs.
const Shape kWave[] = {
    {"batch", "1 GPU", {{"tessera.io/gpu-count", "1"}}, 2, 1, 1000, 16},
    {"pair", "2 GPUs", {{"tessera.io/gpu-count", "2"}}, 1, 2, 1000, 16},
    {"node", "4 GPUs", {{"tessera.io/gpu-count", "4"}}, 1, 4, 1000, 16},
};

std::vector<Shape> AllShapes() {
  std::vector<Shape> all(std::begin(kShapes), std::end(kShapes));
  all.insert(all.end(), std::begin(kWave), std::end(kWave));
  return all;
}

// The tessera policy's target workload (FGD's M): the act's own shapes, as an operator gives
// them with tessera-extender --workload.
std::shared_ptr<placement::TargetWorkload> Workload() {
  std::vector<placement::Request> requests;
  for (const Shape& s : AllShapes()) {
    placement::Request r;
    r.cpu_milli = 1000;
    r.memory_mib = 1024;
    r.gpu_count = s.gpu_count;
    r.gpu_milli = s.gpu_milli;
    r.gpu_mem_mib = int64_t{s.gpu_mem_gib} * 1024;
    for (int i = 0; i < s.count; ++i) requests.push_back(r);
  }
  return std::make_shared<placement::TargetWorkload>(
      placement::TargetWorkload::FromRequests(requests));
}

struct Arrival {
  std::string name;
  const Shape* shape;
};

// Each shape's pods, named <shape>-01, -02, ..., in the shapes' order.
template <size_t N>
std::vector<Arrival> Named(const Shape (&shapes)[N]) {
  std::vector<Arrival> out;
  for (const Shape& s : shapes) {
    for (int i = 1; i <= s.count; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "%s-%02d", s.name, i);
      out.push_back({name, &s});
    }
  }
  return out;
}

// The pods in a fixed mixed order (a small linear congruential shuffle, the same every run).
std::vector<Arrival> Burst() {
  std::vector<Arrival> out = Named(kShapes);
  uint32_t x = 12345;
  for (size_t i = out.size(); i > 1; --i) {
    x = x * 1103515245u + 12345u;
    std::swap(out[i - 1], out[(x >> 8) % i]);
  }
  return out;
}

Json Created(Json object) {
  object["metadata"].erase("uid");
  object["metadata"].erase("resourceVersion");
  return object;
}

// One simulated cluster under one placement policy.
struct Cluster {
  std::string policy;
  k8s::TestApiServer api;
  std::unique_ptr<ExtenderApp> app;
  std::unique_ptr<testing::SchedulerDriver> driver;
  std::vector<std::string> nodes;
  std::map<std::string, Json> created;  // by pod name

  Status Start() {
    if (auto s = api.Start(0); !s.ok()) return s;
    for (int n = 1; n <= kNodes; ++n) {
      const std::string name = "node-" + std::to_string(n);
      api.CreateNode(
          Created(testing::Node(name, std::vector<testing::TestGpu>(kGpusPerNode), "core_mem", "64",
                                "256Gi", {{"tessera.io/gpu.placement", policy}})));
      nodes.push_back(name);
    }
    AppConfig c;
    c.api.server = api.url();
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.state.workload = Workload();
    c.quiet = true;
    app = std::make_unique<ExtenderApp>(c);
    if (auto s = app->Start(); !s.ok()) return s;
    if (!app->WaitReady(std::chrono::seconds(10)))
      return Status::Error("tessera-extender did not list nodes and pods within 10 s");
    driver = std::make_unique<testing::SchedulerDriver>(app->port());
    return Status::Ok();
  }

  // One scheduling attempt; the node it landed on, or "" when it waits.
  std::string Schedule(const std::string& name, const Shape& shape) {
    auto it = created.find(name);
    if (it == created.end())
      it = created.emplace(name, api.CreatePod(Created(testing::Pod(name, shape.limits)))).first;
    auto r = driver->Schedule(it->second, nodes);
    return r.bound ? r.node : "";
  }

  // The pod leaves: deleted at the API server, and gone from the extender's view once its watch
  // has seen it.
  bool Delete(const std::string& name) {
    if (!api.DeletePod("default", name)) return false;
    created.erase(name);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      const Json view = *app->state().Inspect(std::nullopt);
      bool held = false;
      for (const Json& n : view["nodes"])
        for (const Json& g : n["gpus"])
          for (const Json& h : g["holders"]) held |= h.value("pod", "") == "default/" + name;
      if (!held) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  void Stop() {
    if (app) app->Stop();
    api.Stop();
  }
};

// Each GPU as "pods holding it" / "free" / "STRANDED", one line per node.
void PrintGpus(const Json& view) {
  for (const Json& node : view["nodes"]) {
    std::printf("    %-7s", node["name"].get<std::string>().c_str());
    for (const Json& g : node["gpus"]) {
      const double core_free = g.value("core_free_percent", 0.0);
      std::string cell;
      if (g["holders"].empty()) {
        cell = "free";
      } else {
        cell = std::to_string(static_cast<int>(100 - core_free + 0.5)) + "% held";
      }
      if (g.value("stranded", false)) cell += " STRANDED";
      std::printf(" | GPU %d %-19s", g["index"].get<int>(), cell.c_str());
    }
    std::printf("\n");
  }
}

// The arrivals scheduled one at a time on both clusters, then the waiting ones tried once more as
// kube-scheduler's queue retries them; a line per pod.
void Arrive(const std::vector<Arrival>& pods, Cluster& tessera, Cluster& binpack) {
  std::printf("    %-12s %-13s %-10s %-10s\n", "pod", "asks", "tessera", "binpack");
  for (const Arrival& a : pods) {
    const std::string t = tessera.Schedule(a.name, *a.shape);
    const std::string b = binpack.Schedule(a.name, *a.shape);
    std::printf("    %-12s %-13s %-10s %-10s\n", a.name.c_str(), a.shape->asks,
                t.empty() ? "waits" : t.c_str(), b.empty() ? "waits" : b.c_str());
  }
  for (const Arrival& a : pods) {
    for (Cluster* c : {&tessera, &binpack}) {
      const Json view = *c->app->state().Inspect(std::nullopt);
      for (const Json& p : view["pending"]) {
        if (p["pod"] == "default/" + a.name) c->Schedule(a.name, *a.shape);
      }
    }
  }
}

// The same placement engine at a real cluster's scale: Alibaba's openb trace (data/openb), pods
// sampled until they ask for every GPU (the FGD paper's protocol, as `tessera sim` runs it), seeds
// 1-5. A line per policy: GPUs allocated and GPUs left unallocated at 100 % asked.
void PrintAtScale() {
  const std::string dir = TESSERA_OPENB_DATA_DIR;
  auto nodes = placement::LoadNodeCsv(dir + "/openb_node_list_gpu_node.csv");
  if (!nodes.ok()) {
    std::printf("\n(the openb trace is not readable: %s)\n", nodes.error().c_str());
    return;
  }
  auto pods = placement::LoadPodCsv(dir + "/openb_pod_list_default.csv", nodes->models);
  auto cluster = placement::Cluster::Create(nodes->models, nodes->nodes);
  if (!pods.ok() || !cluster.ok()) {
    std::printf("\n(the openb trace is not readable: %s)\n",
                pods.ok() ? cluster.error().c_str() : pods.error().c_str());
    return;
  }
  const placement::TargetWorkload workload =
      placement::TargetWorkload::FromRequests(pods->requests);
  std::printf(
      "\nOn a cluster this small both policies place alike. At a real cluster's scale they do "
      "not:\n"
      "the same engine on Alibaba's openb trace (%d nodes, %d GPUs), pods arriving until they ask\n"
      "for every GPU (the FGD paper's protocol, `tessera sim`), mean of seeds 1-5:\n",
      cluster->node_count(), cluster->total_gpus());
  for (const char* policy : {"tessera", "binpack"}) {
    double allocated = 0, idle = 0;
    const int seeds = 5;
    for (int seed = 1; seed <= seeds; ++seed) {
      placement::SimOptions o;
      o.seed = seed;
      o.measure_frag = false;
      auto r = placement::Simulate(*cluster, pods->requests, workload, policy, o);
      if (!r.ok()) {
        std::printf("    %s: %s\n", policy, r.error().c_str());
        return;
      }
      allocated += r->allocation_ratio[std::min<size_t>(100, r->allocation_ratio.size() - 1)];
      idle += r->unallocated_gpus_at_100;
    }
    std::printf("    %-8s %6.2f %% of GPU capacity allocated, %5.0f GPUs left unallocated\n",
                policy, allocated / seeds, idle / seeds);
  }
}

int Run() {
  const auto start = std::chrono::steady_clock::now();
  std::printf(
      "Tessera demo, act 2: a simulated cluster of %d nodes x %d GPUs (SimGPU 16 GiB), twice: "
      "its nodes\nlabelled tessera.io/gpu.placement=tessera, and the same nodes labelled binpack. "
      "Real: tessera-extender\n(the placement engine kube-scheduler calls). STAND-INS: the API "
      "server and kube-scheduler's calls\n(filter, prioritize, bind, one pod at a time).\n\n",
      kNodes, kGpusPerNode);
  Cluster tessera, binpack;
  tessera.policy = "tessera";
  binpack.policy = "binpack";
  for (Cluster* c : {&tessera, &binpack}) {
    if (auto s = c->Start(); !s.ok()) {
      std::fprintf(stderr, "tessera demo cluster: %s: %s\n", c->policy.c_str(),
                   s.message().c_str());
      return 1;
    }
  }
  const std::vector<Arrival> burst = Burst();
  std::printf("A burst of %zu pods arrives (15.3 GPUs' worth of GPU time for %d GPUs):\n",
              burst.size(), kNodes * kGpusPerNode);
  Arrive(burst, tessera, binpack);
  // Pods leave: every other share pod, as jobs end.
  std::vector<std::string> leaving;
  for (const Arrival& a : burst)
    if (a.shape->gpu_milli < 1000 && (a.name.back() - '0') % 2 == 1) leaving.push_back(a.name);
  std::printf("\n%zu share pods leave:", leaving.size());
  for (const std::string& n : leaving) {
    std::printf(" %s", n.c_str());
    for (Cluster* c : {&tessera, &binpack}) {
      if (!c->Delete(n)) {
        std::fprintf(stderr, "\ntessera demo cluster: %s: %s still held 10 s after its deletion\n",
                     c->policy.c_str(), n.c_str());
        return 1;
      }
    }
  }
  const std::vector<Arrival> wave = Named(kWave);
  std::printf("\n\nThen %zu pods that need whole GPUs arrive:\n", wave.size());
  Arrive(wave, tessera, binpack);
  std::vector<Arrival> all = burst;
  all.insert(all.end(), wave.begin(), wave.end());
  std::printf("\nWhere it stands (from each extender's /inspect):\n");
  struct Summary {
    size_t waiting = 0;
    int stranded = 0, in_use = 0;
  };
  std::map<std::string, Summary> summary;
  for (Cluster* c : {&tessera, &binpack}) {
    const Json view = *c->app->state().Inspect(std::nullopt);
    std::printf("\n  %s:\n", c->policy.c_str());
    PrintGpus(view);
    Summary& s = summary[c->policy];
    s.waiting = view["pending"].size();
    s.stranded = view["stranded_gpus"].get<int>();
    for (const Json& n : view["nodes"])
      for (const Json& g : n["gpus"]) s.in_use += g["holders"].empty() ? 0 : 1;
    for (const Json& p : view["pending"]) {
      std::printf("    waiting: %-12s %-13s %s\n", p["pod"].get<std::string>().c_str(),
                  p["asks"].get<std::string>().c_str(), p["reason"].get<std::string>().c_str());
    }
  }
  const Summary& t = summary["tessera"];
  const Summary& b = summary["binpack"];
  std::printf(
      "\n                      tessera   binpack\n"
      "  pods placed         %7zu   %7zu\n"
      "  pods waiting        %7zu   %7zu\n"
      "  GPUs in use         %7d   %7d\n"
      "  GPUs stranded       %7d   %7d   (free capacity none of the waiting pods can use)\n",
      all.size() - t.waiting, all.size() - b.waiting, t.waiting, b.waiting, t.in_use, b.in_use,
      t.stranded, b.stranded);
  PrintAtScale();
  std::printf(
      "\nAct 2 took %.1f s. tessera-extender draws the same picture per GPU as a page at "
      "/ui\n(ctest -L browser keeps one as build/browser/cluster_page.png).\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  tessera.Stop();
  binpack.Stop();
  return 0;
}

}  // namespace
}  // namespace tessera::extender

int main() { return tessera::extender::Run(); }
