// tessera-demo-cluster: the cluster act of `tessera demo` (`tessera demo cluster`). A simulated
// cluster of four nodes of four GPUs, twice side by side: nodes labelled
// tessera.io/gpu.placement=tessera and the same nodes labelled binpack. Each node runs a real
// tesserad on its own simgpu state and the real tessera-device-plugin, which publishes the node's
// GPUs to the API server; the real tessera-extender (the placement engine behind kube-scheduler)
// places pods on what the plugins published. A burst of pods of mixed shapes (GPU shares, whole
// GPUs, 2 GPUs) arrives; each is scheduled through the extender's verbs as kube-scheduler calls
// them and bound through the API server; pods that fit nowhere are tried once more, as
// kube-scheduler's queue retries them. Then a few pods of each half are admitted by their node's
// kubelet (Allocate on the real plugin) and their containers run a tenant through the real shim
// that allocates GPU memory until refused: each must stop within one 64 MiB step of its cap (the
// act fails otherwise, as it does when kubelet or the plugin refuses a pod the extender bound).
// Then some share pods leave (deleted at the API server) and pods of 1, 2 and 4 whole GPUs arrive.
// Then each GPU's holders, the pods still waiting and the GPUs left stranded (free capacity none
// of the waiting pods can use), from the extender's /inspect; and the same placement engine on the
// openb trace, where the two policies differ. STAND-INS: the API server
// (testing/standins/test_apiserver.h), kube-scheduler's calls
// (testing/standins/scheduler_driver.h), kubelet's device manager (testing/standins/test_kubelet.h)
// and the container runtime (build/tests/k8s_container_run); the nodes are
// testing/support/cluster_node.h. Demo tooling: it drives and prints, decides nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.h"
#include "k8s/annotations.h"
#include "k8s/extender/extender_app.h"
#include "placement/frag.h"
#include "placement/simulator.h"
#include "placement/trace.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/cluster_node.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using k8s::Json;
using process::ChildProcess;
using namespace std::chrono_literals;

constexpr int kNodes = 4;
constexpr int kGpusPerNode = 4;
// Each node's GPUs, as simgpu makes them (TESSERA_SIM_GPUS): model, memory, SMs.
constexpr const char* kSimGpus = "SimA:16GiB:80,SimA:16GiB:80,SimA:16GiB:80,SimA:16GiB:80";
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// The step the tenants allocate in (build/tests/shim_tenant alloc-until-oom 64).
constexpr uint64_t kStep = 64 * kMiB;

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
  std::vector<k8s::testing::ClusterNode> parts;  // by node, as `nodes`
  std::unique_ptr<ExtenderApp> app;
  std::unique_ptr<testing::SchedulerDriver> driver;
  std::vector<std::string> nodes;
  std::map<std::string, Json> created;       // by pod name
  std::map<std::string, std::string> bound;  // pod name -> node
  std::map<std::string, int> bind_order;     // pod name -> its place in the order of binds
  std::vector<std::unique_ptr<ChildProcess>> containers;
  std::map<std::string, std::string> admitted;   // pod name -> its uid, on its node's kubelet
  std::map<std::string, ChildProcess*> running;  // pod name -> its container's tenant
  std::string log_dir;                           // the device plugins' logs

  // Starts the API server and each node's tesserad, kubelet and device plugin; they come up
  // together (StartExtender waits for them).
  Status StartNodes() {
    if (auto s = api.Start(0); !s.ok()) return s;
    api.RequireToken("t");  // every component authenticates, as to a real API server
    for (int n = 1; n <= kNodes; ++n) {
      const std::string name = "node-" + std::to_string(n);
      api.CreateNode(
          {{"metadata",
            {{"name", name},
             {"labels",
              {{"tessera.io/gpu.schedule", "core_mem"}, {"tessera.io/gpu.placement", policy}}}}},
           {"status", {{"allocatable", {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "110"}}}}}});
      nodes.push_back(name);
      k8s::testing::ClusterNode& node = parts.emplace_back();
      node.sim = std::make_unique<k8s::testing::SimNode>(kSimGpus);
      node.sim->LogTo(log_dir + "/" + policy + "-" + name + "-tesserad.log");
      node.plugin_log = log_dir + "/" + policy + "-" + name + "-device-plugin.log";
      if (!node.sim->Start()) return Status::Error(name + ": tesserad did not start");
      if (auto s = node.StartKubeletAndPlugin(name, api.url(), {}); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // Waits for every plugin's registration and published GPUs, then starts the extender on them.
  Status StartExtender() {
    for (size_t i = 0; i < parts.size(); ++i) {
      for (const char* r : {"tessera.io/gpu-mem", "tessera.io/gpu-core", "tessera.io/gpu-count"}) {
        if (!parts[i].kubelet->WaitForResource(r, 30s)) {
          return Status::Error(nodes[i] + ": tessera-device-plugin did not register " + r +
                               " with the kubelet within 30 s");
        }
      }
      const bool published = k8s::testing::WaitUntil(
          [&] {
            auto node = api.GetNode(nodes[i]);
            return node && (*node)["metadata"].contains("annotations") &&
                   (*node)["metadata"]["annotations"].contains(k8s::kInventoryAnnotation);
          },
          30s);
      if (!published) {
        return Status::Error(nodes[i] + ": tessera-device-plugin published no GPU inventory");
      }
    }
    AppConfig c;
    c.api.server = api.url();
    c.api.token = "t";
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.state.workload = Workload();
    c.quiet = true;
    app = std::make_unique<ExtenderApp>(c);
    if (auto s = app->Start(); !s.ok()) return s;
    if (!app->WaitReady(10s))
      return Status::Error("tessera-extender did not list nodes and pods within 10 s");
    const int64_t capacity = int64_t{kNodes} * kGpusPerNode * 1000;
    if (!k8s::testing::WaitUntil(
            [&] { return app->state().Stats().gpu_milli_capacity == capacity; }, 10s)) {
      return Status::Error("tessera-extender did not see every node's GPUs within 10 s");
    }
    driver = std::make_unique<testing::SchedulerDriver>(app->port());
    return Status::Ok();
  }

  // One scheduling attempt; the node it landed on, or "" when it waits.
  std::string Schedule(const std::string& name, const Shape& shape) {
    auto it = created.find(name);
    if (it == created.end())
      it = created.emplace(name, api.CreatePod(Created(testing::Pod(name, shape.limits)))).first;
    auto r = driver->Schedule(it->second, nodes);
    if (r.bound) {
      bound[name] = r.node;
      bind_order[name] = static_cast<int>(bind_order.size());
    }
    return r.bound ? r.node : "";
  }

  // kubelet on the pod's node admits it (Allocate on the real plugin) and the stand-in runtime
  // starts its container: a tenant that allocates 64 MiB at a time until the shim refuses.
  Result<ChildProcess*> Admit(const std::string& name,
                              k8s::TestKubelet::ContainerAllocation* allocation) {
    const auto node = std::find(nodes.begin(), nodes.end(), bound[name]);
    if (node == nodes.end()) return Result<ChildProcess*>::Error(name + " is not bound");
    auto started = k8s::testing::AdmitAndStart(api, parts[size_t(node - nodes.begin())], containers,
                                               name, created[name], allocation);
    if (started.ok()) {
      admitted[name] = created[name]["metadata"]["uid"].get<std::string>();
      running[name] = *started;
    }
    return started;
  }

  // The pod leaves: its container stops (when it ran), it is deleted at the API server and by its
  // kubelet, and it is gone from the extender's view once its watch has seen it.
  bool Delete(const std::string& name) {
    if (auto r = running.find(name); r != running.end()) {
      r->second->CloseStdin();
      r->second->Wait(10s);
      running.erase(r);
    }
    if (!api.DeletePod("default", name)) return false;
    if (auto a = admitted.find(name); a != admitted.end()) {
      const auto node = std::find(nodes.begin(), nodes.end(), bound[name]);
      parts[size_t(node - nodes.begin())].kubelet->RemovePod(a->second);
      admitted.erase(a);
    }
    created.erase(name);
    bound.erase(name);
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
    if (stopped) return;
    stopped = true;
    k8s::testing::StopCluster(containers, app, parts, api);
  }
  ~Cluster() { Stop(); }
  bool stopped = false;
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

// The shapes whose pods' processes are checked at their caps: on each half, the pod of each shape
// bound first (kubelet admits a node's pods in the order they were bound to it, and the device
// plugin attributes each Allocate by that order).
const char* const kChecked[] = {"notebook", "infer", "train", "dist"};

std::string Mib(uint64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; }

// A few bound pods start on their nodes: kubelet admits each (Allocate on the real plugin, which
// gives its container a memory cap per GPU), the container's tenant allocates 64 MiB at a time
// until the shim refuses, and what it got is checked against the cap: within one step under it,
// and refused past it. A line per pod and half; false (and why, on stderr) when a check fails.
bool CheckCaps(const std::vector<Arrival>& burst, Cluster& tessera, Cluster& binpack) {
  std::vector<std::pair<Cluster*, const Arrival*>> picked;
  for (const char* shape : kChecked) {
    for (Cluster* c : {&tessera, &binpack}) {
      const Arrival* first = nullptr;
      for (const Arrival& a : burst) {
        if (std::string(a.shape->name) != shape || c->bind_order.count(a.name) == 0) continue;
        if (first == nullptr || c->bind_order[a.name] < c->bind_order[first->name]) first = &a;
      }
      if (first != nullptr) picked.emplace_back(c, first);
    }
  }
  std::printf("    %-12s %-13s %-8s %-7s %-25s %s\n", "pod", "asks", "policy", "node",
              "cap (from the plugin)", "the tenant got");
  bool ok = true;
  for (auto [c, a] : picked) {
    k8s::TestKubelet::ContainerAllocation allocation;
    auto fail = [&](const std::string& why) {
      std::fprintf(stderr, "tessera demo cluster: %s: %s: %s\n", c->policy.c_str(), a->name.c_str(),
                   why.c_str());
      ok = false;
    };
    auto started = c->Admit(a->name, &allocation);
    if (!started.ok()) {
      fail("bound by tessera-extender but refused by kubelet or the device plugin: " +
           started.error());
      continue;
    }
    // The cap the plugin gave the container, per GPU (TESSERA_MEM_LIMIT).
    const auto env = allocation.envs.find("TESSERA_MEM_LIMIT");
    if (env == allocation.envs.end()) {
      fail("the device plugin gave its container no TESSERA_MEM_LIMIT");
      continue;
    }
    auto caps = ParseBytesList(env->second, "TESSERA_MEM_LIMIT");
    if (!caps.ok()) {
      fail(caps.error());
      continue;
    }
    // What the pod asked for: its memory on each of its GPUs (a whole GPU's, 16 GiB, for whole
    // GPUs).
    const uint64_t cap = caps->front().count();
    const uint64_t asked = uint64_t(a->shape->gpu_mem_gib) * kGiB;
    if (caps->size() != size_t(a->shape->gpu_count) ||
        std::any_of(caps->begin(), caps->end(), [&](Bytes b) { return b.count() != asked; })) {
      fail("the device plugin gave its container TESSERA_MEM_LIMIT=" + env->second + ", not " +
           FormatBytes(Bytes(asked)) + " on each of " + std::to_string(a->shape->gpu_count) +
           " GPU(s) as the pod asked");
      continue;
    }
    const auto got = (*started)->WaitForKey("allocated", 60s);
    if (!got) {
      fail("its tenant reported nothing within 60 s");
      continue;
    }
    char* end = nullptr;
    const uint64_t allocated = std::strtoull(got->c_str(), &end, 10);
    if (got->empty() || *end != '\0') {
      fail("its tenant reported allocated=\"" + *got + "\", not a number of bytes");
      continue;
    }
    // It prints why the last allocation failed on the line after (it may not be read yet).
    const std::string failure = (*started)->WaitForKey("failure", 10s).value_or("");
    std::string cap_text = FormatBytes(caps->front());
    std::string got_text = Mib(allocated);
    if (caps->size() > 1) {
      cap_text += " on each of " + std::to_string(caps->size()) + " GPUs";
      got_text += " on its first";  // the tenant allocates on its first GPU
    }
    const std::string then =
        failure == "2" ? "the next 64 MiB refused" : "then CUresult " + failure;
    std::printf("    %-12s %-13s %-8s %-7s %-25s %s, %s\n", a->name.c_str(), a->shape->asks,
                c->policy.c_str(), c->bound[a->name].c_str(), cap_text.c_str(), got_text.c_str(),
                then.c_str());
    if (allocated > cap) fail("its process got " + Mib(allocated) + ", past its cap");
    if (allocated + kStep <= cap) {
      fail("its process was refused at " + Mib(allocated) + ", more than 64 MiB under its cap");
    }
    if (failure != "2") fail("the refusal was CUresult " + failure + ", not out of memory (2)");
  }
  return ok;
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
      "Tessera demo, act 2: a simulated cluster of %d nodes x %d GPUs (simgpu, 16 GiB each), "
      "twice:\n"
      "its nodes labelled tessera.io/gpu.placement=tessera, and the same nodes labelled binpack.\n"
      "Real: on each node tesserad and tessera-device-plugin (which publishes the node's GPUs), "
      "and\n"
      "tessera-extender (the placement engine kube-scheduler calls). STAND-INS: the API server,\n"
      "kubelet, the container runtime, and kube-scheduler's calls (filter, prioritize, bind).\n\n",
      kNodes, kGpusPerNode);
  Cluster tessera, binpack;
  tessera.policy = "tessera";
  binpack.policy = "binpack";
  // The device plugins' logs, beside the programs (build/demo-cluster), fresh each run.
  const std::string log_dir = process::ExecutableDir() + "/../demo-cluster";
  std::filesystem::remove_all(log_dir);
  std::filesystem::create_directories(log_dir);
  tessera.log_dir = binpack.log_dir = log_dir;
  auto failed = [](const Cluster& c, const Status& s) {
    std::fprintf(stderr, "tessera demo cluster: %s: %s\n", c.policy.c_str(), s.message().c_str());
    return 1;
  };
  // Both halves' nodes come up together; then each half's extender starts on what they published.
  for (Cluster* c : {&tessera, &binpack}) {
    if (auto s = c->StartNodes(); !s.ok()) return failed(*c, s);
  }
  for (Cluster* c : {&tessera, &binpack}) {
    if (auto s = c->StartExtender(); !s.ok()) return failed(*c, s);
  }
  std::printf("%d tesserads and %d device plugins are up (%.1f s).\n\n", 2 * kNodes, 2 * kNodes,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  const std::vector<Arrival> burst = Burst();
  std::printf("A burst of %zu pods arrives (15.3 GPUs' worth of GPU time for %d GPUs):\n",
              burst.size(), kNodes * kGpusPerNode);
  Arrive(burst, tessera, binpack);
  // Pods leave: every other share pod, as jobs end.
  std::vector<std::string> leaving;
  for (const Arrival& a : burst)
    if (a.shape->gpu_milli < 1000 && (a.name.back() - '0') % 2 == 1) leaving.push_back(a.name);
  std::printf(
      "\nA few pods start: kubelet admits each (Allocate on its node's device plugin), and its\n"
      "container runs a program through Tessera's CUDA shim that allocates GPU memory 64 MiB at\n"
      "a time until refused:\n");
  if (!CheckCaps(burst, tessera, binpack)) {
    std::fprintf(stderr, "tessera demo cluster: a process was not held at its cap (above)\n");
    return 1;
  }
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
      "/ui\n(ctest -L browser keeps one as build/browser/cluster_page.png). Each node's tesserad "
      "and device\nplugin logged to build/demo-cluster/.\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  tessera.Stop();
  binpack.Stop();
  return 0;
}

}  // namespace
}  // namespace tessera::extender

int main() { return tessera::extender::Run(); }
