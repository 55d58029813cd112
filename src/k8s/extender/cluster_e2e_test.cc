// A whole cluster in one test: the stand-in API server; tessera-extender (in
// process, on its real HTTP verbs, driven as kube-scheduler drives an extender, over HTTPS with
// kube-scheduler's client certificate as deploy/kubernetes wires it); three simulated
// GPU nodes, each with its own simgpu state, a real tesserad and the real tessera-device-plugin;
// a stand-in kubelet per node that admits pods as kubelet does (Allocate per container) and a
// stand-in container runtime that starts each container's process in its own mount namespace with
// the returned mounts and environment. Pods are created as a user creates them. The test checks
// that each pod lands where the placement engine decides (the same engine run beside it on the
// same cluster), that each process stops exactly at its cap, that a pod that cannot fit stays
// Pending with a reason naming the resource, and that deleting half the pods makes room for the
// next wave.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/extender/extender_app.h"
#include "placement/policy.h"
#include "process/child_process.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/standins/test_kubelet.h"
#include "testing/support/cluster_node.h"
#include "testing/support/http_attack.h"
#include "testing/support/test_objects.h"
#include "testing/support/test_support.h"

namespace tessera::extender {
namespace {

using namespace std::chrono_literals;
using k8s::Json;
using process::BuildDir;
using process::ChildProcess;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A simulated node: tesserad on its own simgpu state, the real device plugin talking to the
// stand-in API server, a stand-in kubelet (testing/support/cluster_node.h).
using NodeParts = k8s::testing::ClusterNode;

// Stops the cluster; when the test failed, prints each node's tesserad and plugin output after the
// failures (it is kept in files while the test runs, so that the failures come first).
template <typename Nodes>
void StopCluster(std::vector<std::unique_ptr<ChildProcess>>& containers,
                 std::unique_ptr<ExtenderApp>& extender, Nodes& nodes, k8s::TestApiServer& api) {
  if (::testing::Test::HasFailure()) {
    for (const NodeParts& n : nodes) std::fprintf(stderr, "%s", n.Logs().c_str());
  }
  k8s::testing::StopCluster(containers, extender, nodes, api);
}

// kubelet on `node` admits pod `name` and the runtime starts a tenant that allocates until refused;
// the tenant joins `containers` (nullptr and a test failure when kubelet refuses it).
ChildProcess* StartPod(k8s::TestApiServer& api, NodeParts& node,
                       std::vector<std::unique_ptr<ChildProcess>>& containers,
                       const std::string& name, const Json& created) {
  auto started = k8s::testing::AdmitAndStart(api, node, containers, name, created);
  EXPECT_TRUE(started.ok()) << started.error();
  return started.ok() ? *started : nullptr;
}

// One simulated GPU node of the cluster.
struct GpuNode : NodeParts {
  std::string name;
  std::string sim_gpus;  // TESSERA_SIM_GPUS
  std::string model;
  uint64_t gpu_gib = 0;
  std::vector<std::string> uuids;  // from the inventory the plugin published
};

// One pod of the test, as the user asked for it and as the engine beside the test decides it.
struct TestPod {
  std::string name;
  std::map<std::string, std::string> limits;
  std::map<std::string, std::string> annotations;
  placement::Request request;  // what the engine is asked
  uint64_t cap_bytes = 0;      // the memory cap on each of its GPUs
  Json created;                // as the API server returned it
  std::optional<placement::Assignment> expected;
  std::string node;
  std::set<std::string> gpus;
  ChildProcess* process = nullptr;
};

class ClusterE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start(0).ok());
    api_.RequireToken("t");  // every component authenticates, as to a real API server
    for (const auto& [name, gpus, model, gib] :
         {std::tuple{"gpu-a", "SimA:16GiB:80,SimA:16GiB:80", "SimA", 16},
          std::tuple{"gpu-b", "SimA:16GiB:80,SimA:16GiB:80", "SimA", 16},
          std::tuple{"gpu-c", "SimB:24GiB:80,SimB:24GiB:80", "SimB", 24}}) {
      GpuNode n;
      n.name = name;
      n.sim_gpus = gpus;
      n.model = model;
      n.gpu_gib = static_cast<uint64_t>(gib);
      nodes_.push_back(std::move(n));
    }
    for (GpuNode& n : nodes_) {
      n.sim = std::make_unique<k8s::testing::SimNode>(n.sim_gpus,
                                                      std::vector<std::string>{"--policy", "3"});
      n.KeepLogs();
      ASSERT_TRUE(n.sim->Start()) << n.name;
      api_.CreateNode(
          {{"metadata", {{"name", n.name}, {"labels", {{"tessera.io/gpu.schedule", "core_mem"}}}}},
           {"status", {{"allocatable", {{"cpu", "16"}, {"memory", "64Gi"}, {"pods", "110"}}}}}});
      {
        const Status s = n.StartKubeletAndPlugin(n.name, api_.url(), {"--resource-names", "both"});
        ASSERT_TRUE(s.ok()) << s.message();
      }
    }
    for (GpuNode& n : nodes_) {
      for (const char* r : {"tessera.io/gpu-mem", "tessera.io/gpu-core", "tessera.io/gpu-count",
                            "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"}) {
        ASSERT_TRUE(n.kubelet->WaitForResource(r, 30s)) << n.name << " " << r;
      }
      ASSERT_TRUE(k8s::testing::WaitUntil(
          [&] {
            auto node = api_.GetNode(n.name);
            return node && (*node)["metadata"].contains("annotations") &&
                   (*node)["metadata"]["annotations"].contains(k8s::kInventoryAnnotation);
          },
          10s))
          << n.name << " published no inventory";
      auto inv = k8s::ParseGpuInventory(
          (*api_.GetNode(n.name))["metadata"]["annotations"][k8s::kInventoryAnnotation]
              .get<std::string>());
      ASSERT_TRUE(inv.ok()) << inv.error();
      for (const auto& g : inv->gpus) n.uuids.push_back(g.uuid);
      names_.push_back(n.name);
    }
  }

  void TearDown() override { StopCluster(containers_, extender_, nodes_, api_); }

  // The engine beside the test: the same nodes (sorted by name), the same target workload.
  void StartEngineAndExtender(const std::vector<TestPod>& pods) {
    placement::ModelTable models;
    std::vector<placement::NodeSpec> specs;
    for (const GpuNode& n : nodes_) {
      const int64_t mib = static_cast<int64_t>(n.gpu_gib) * 1024;
      const int model = *models.Intern(n.model + "/" + std::to_string(mib), mib);
      specs.push_back({n.name, 16000, 65536, 2, model, placement::NodeMode::kMemoryAndCompute});
    }
    engine_cluster_ = std::make_unique<placement::Cluster>(models, specs);
    std::vector<placement::Request> shapes;
    for (const TestPod& p : pods) shapes.push_back(p.request);
    workload_ = std::make_shared<placement::TargetWorkload>(
        placement::TargetWorkload::FromRequests(shapes));
    placement::PolicyOptions po;
    po.workload = workload_.get();
    engine_ = std::move(placement::MakePolicy("tessera", po).value());
    // The certificates as docs/kubernetes.md makes them (deploy/kubernetes/extender-certs.sh).
    auto tls = tessera::testing::MakeTlsFiles(nodes_[0].sim->Scratch("extender-tls"));
    ASSERT_TRUE(tls.ok()) << tls.error();
    AppConfig c;
    c.api.server = api_.url();
    c.api.token = "t";
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.tls = http::HttpServer::TlsOptions{tls->cert, tls->key, tls->ca};
    c.state.workload = workload_;
    c.quiet = true;
    extender_ = std::make_unique<ExtenderApp>(c);
    ASSERT_TRUE(extender_->Start().ok());
    ASSERT_TRUE(extender_->WaitReady(10s));
    // The extender has read every node's inventory.
    ASSERT_TRUE(k8s::testing::WaitUntil(
        [&] { return extender_->state().Stats().gpu_milli_capacity == 6000; }, 10s));
    driver_ = std::make_unique<testing::SchedulerDriver>(
        extender_->port(), testing::SchedulerTls{tls->ca, tls->client_cert, tls->client_key});
  }

  // A pod as a user writes it (one container, "app").
  TestPod MakePod(const std::string& name, std::map<std::string, std::string> limits,
                  std::map<std::string, std::string> annotations = {}) {
    TestPod p;
    p.name = name;
    p.limits = std::move(limits);
    p.annotations = std::move(annotations);
    auto value = [&](const char* a, const char* b) -> int {
      if (auto it = p.limits.find(a); it != p.limits.end()) return std::stoi(it->second);
      if (auto it = p.limits.find(b); it != p.limits.end()) return std::stoi(it->second);
      return 0;
    };
    const int count = std::max(1, value("tessera.io/gpu-count", "aliyun.com/gpu-count"));
    const int core = value("tessera.io/gpu-core", "aliyun.com/gpu-core.percentage");
    const int mem_gib = value("tessera.io/gpu-mem", "aliyun.com/gpu-mem");
    const bool whole = core == 0 && mem_gib == 0;
    placement::ModelSet allowed = placement::ModelSet::Any();
    if (p.annotations.count("tessera.io/gpu-model") != 0) {
      allowed = placement::ModelSet::Of(engine_model(p.annotations["tessera.io/gpu-model"]));
    }
    p.request = *placement::RequestFromShares(
        500, 512, count, whole ? 0 : int64_t{mem_gib} * 1024 / count, whole ? 100 : core, allowed);
    p.cap_bytes = whole ? 0 : uint64_t(mem_gib) * kGiB / uint64_t(count);
    return p;
  }
  // Model ids as the engine beside the test interns them (nodes in name order).
  static int engine_model(const std::string& model) { return model == "SimB" ? 1 : 0; }

  // Creates the pod, schedules it through the extender as kube-scheduler would, and checks the
  // decision against the engine's.
  void Place(TestPod& p) {
    testing::TestContainer c;
    c.limits = p.limits;
    c.cpu = "500m";
    c.memory = "512Mi";
    Json pod = testing::Pod(p.name, std::vector<testing::TestContainer>{c}, p.annotations);
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    p.created = api_.CreatePod(pod);
    p.expected = engine_->Select(*engine_cluster_, p.request);
    const testing::ScheduleResult r = driver_->Schedule(p.created, names_);
    ASSERT_TRUE(r.error.empty()) << p.name << ": " << r.error;
    ASSERT_EQ(r.bound, p.expected.has_value()) << p.name;
    if (!r.bound) return;
    ASSERT_TRUE(engine_cluster_->Place(p.request, *p.expected).ok());
    const GpuNode& node = nodes_[static_cast<size_t>(p.expected->node)];
    EXPECT_EQ(r.node, node.name) << p.name << " landed elsewhere than the engine decided";
    p.node = r.node;
    auto a = k8s::ParseAssignment(
        (*api_.GetPod("default", p.name))["metadata"]["annotations"][k8s::kAssignmentAnnotation]
            .get<std::string>());
    ASSERT_TRUE(a.ok()) << a.error();
    for (const auto& g : a->containers.at(0).gpus) p.gpus.insert(g.uuid);
    std::set<std::string> expected_gpus;
    for (int g = 0; g < 2; ++g) {
      if ((p.expected->gpus >> g) & 1) expected_gpus.insert(node.uuids[static_cast<size_t>(g)]);
    }
    EXPECT_EQ(p.gpus, expected_gpus) << p.name << " got other GPUs than the engine decided";
    if (p.cap_bytes == 0) p.cap_bytes = node.gpu_gib * kGiB;  // a whole GPU
  }

  // kubelet on the pod's node admits it (Allocate) and the runtime starts its process: a tenant
  // that allocates 64 MiB at a time until refused, then holds what it got.
  void Run(TestPod& p) {
    GpuNode& node = *std::find_if(nodes_.begin(), nodes_.end(),
                                  [&](const GpuNode& n) { return n.name == p.node; });
    auto admitted = node.kubelet->Admit(*api_.GetPod("default", p.name));
    ASSERT_TRUE(admitted.ok()) << p.name << ": " << admitted.error();
    ASSERT_EQ(admitted->size(), 1u);
    const k8s::TestKubelet::ContainerAllocation& a = (*admitted)[0];
    const Status started = node.kubelet->PreStart(p.created["metadata"]["uid"], a.name);
    ASSERT_TRUE(started.ok()) << p.name << ": " << started.message();
    containers_.push_back(node.StartTenant(p.name, a));
    p.process = containers_.back().get();
    api_.SetPodPhase("default", p.name, "Running");
  }

  void ExpectStoppedAtCap(TestPod& p) {
    auto allocated = p.process->WaitForKey("allocated", 60s);
    ASSERT_TRUE(allocated.has_value()) << p.name << ": the process did not report";
    EXPECT_EQ(*allocated, std::to_string(p.cap_bytes)) << p.name;
    // The line after "allocated", which may not be read yet.
    EXPECT_EQ(p.process->WaitForKey("failure", 10s), "2")
        << p.name << ": not CUDA_ERROR_OUT_OF_MEMORY";
  }

  // Places every pod in turn, starts each bound one's process, then checks that `expected_bound`
  // were bound and that each process stopped at its cap.
  void PlaceRunAndCheck(std::vector<TestPod>& pods, int expected_bound) {
    int bound = 0;
    for (TestPod& p : pods) {
      ASSERT_NO_FATAL_FAILURE(Place(p));
      if (p.node.empty()) continue;
      ++bound;
      ASSERT_NO_FATAL_FAILURE(Run(p));
    }
    EXPECT_EQ(bound, expected_bound);
    for (TestPod& p : pods) {
      if (!p.node.empty()) {
        ASSERT_NO_FATAL_FAILURE(ExpectStoppedAtCap(p));
      }
    }
  }

  void Delete(TestPod& p) {
    if (p.process != nullptr) {
      p.process->CloseStdin();  // the container stops
      p.process->Wait(10s);
    }
    ASSERT_TRUE(api_.DeletePod("default", p.name));
    GpuNode& node = *std::find_if(nodes_.begin(), nodes_.end(),
                                  [&](const GpuNode& n) { return n.name == p.node; });
    node.kubelet->RemovePod(p.created["metadata"]["uid"]);
    ASSERT_TRUE(engine_cluster_->Remove(p.request, *p.expected).ok());
  }

  k8s::TestApiServer api_;
  std::vector<GpuNode> nodes_;
  std::vector<std::string> names_;
  std::unique_ptr<placement::Cluster> engine_cluster_;
  std::shared_ptr<placement::TargetWorkload> workload_;
  std::unique_ptr<placement::Policy> engine_;
  std::unique_ptr<ExtenderApp> extender_;
  std::unique_ptr<testing::SchedulerDriver> driver_;
  std::vector<std::unique_ptr<ChildProcess>> containers_;
};

TEST_F(ClusterE2ETest, ThirtyPodsLandAsTheEngineDecidesAndStopAtTheirCaps) {
  std::vector<TestPod> pods;
  pods.push_back(MakePod("whole-0", {{"tessera.io/gpu-count", "1"}}));
  for (int i = 0; i < 10; ++i) {
    pods.push_back(MakePod("frac-" + std::to_string(i),
                           {{"tessera.io/gpu-core", "20"}, {"tessera.io/gpu-mem", "2"}}));
  }
  for (int i = 0; i < 3; ++i) {
    pods.push_back(MakePod("multi-" + std::to_string(i), {{"tessera.io/gpu-count", "2"},
                                                          {"tessera.io/gpu-core", "10"},
                                                          {"tessera.io/gpu-mem", "2"}}));
  }
  for (int i = 0; i < 4; ++i) {
    pods.push_back(MakePod("simb-" + std::to_string(i),
                           {{"tessera.io/gpu-core", "15"}, {"tessera.io/gpu-mem", "3"}},
                           {{"tessera.io/gpu-model", "SimB"}}));
  }
  for (int i = 0; i < 6; ++i) {
    pods.push_back(MakePod("ack-" + std::to_string(i), {{"aliyun.com/gpu-core.percentage", "10"},
                                                        {"aliyun.com/gpu-mem", "1"}}));
  }
  for (int i = 0; i < 6; ++i) {
    pods.push_back(MakePod("small-" + std::to_string(i),
                           {{"tessera.io/gpu-core", "5"}, {"tessera.io/gpu-mem", "1"}}));
  }
  ASSERT_EQ(pods.size(), 30u);
  StartEngineAndExtender(pods);
  ASSERT_NO_FATAL_FAILURE(PlaceRunAndCheck(pods, 30));
  for (TestPod& p : pods) {
    if (p.name.rfind("simb-", 0) == 0) {
      EXPECT_EQ(p.node, "gpu-c") << p.name << " left its model";
    }
  }

  // Pods that cannot fit stay Pending, and the reason names the resource.
  TestPod three = MakePod("three-gpus", {{"tessera.io/gpu-count", "3"}});
  ASSERT_NO_FATAL_FAILURE(Place(three));
  const testing::ScheduleResult r3 = driver_->Schedule(three.created, names_);
  ASSERT_FALSE(r3.bound);
  ASSERT_EQ(r3.failures.size(), names_.size());
  for (const std::string& n : names_) {
    EXPECT_NE(r3.failures.at(n).find("tessera.io/gpu-count=3"), std::string::npos)
        << r3.failures.at(n);
  }
  TestPod big = MakePod("too-big", {{"tessera.io/gpu-core", "5"}, {"tessera.io/gpu-mem", "30"}});
  ASSERT_NO_FATAL_FAILURE(Place(big));
  const testing::ScheduleResult rb = driver_->Schedule(big.created, names_);
  ASSERT_FALSE(rb.bound);
  ASSERT_EQ(rb.failures.size(), names_.size());
  for (const std::string& n : names_) {
    // No GPU has 30 GiB: the fit rule says so, naming the GPUs' size, whatever runs there.
    EXPECT_NE(rb.failures.at(n).find("tessera: it asks tessera.io/gpu-mem=30, "
                                     "tessera.io/gpu-core=5, 30GiB on each of 1 GPU, more than "
                                     "the node's GPUs have ("),
              std::string::npos)
        << n << ": " << rb.failures.at(n);
  }
  EXPECT_EQ((*api_.GetPod("default", "too-big"))["spec"].value("nodeName", ""), "");

  // Half of them are deleted; the next wave fits where they were, as the engine decides.
  for (size_t i = 0; i < pods.size(); i += 2) ASSERT_NO_FATAL_FAILURE(Delete(pods[i]));
  ASSERT_TRUE(k8s::testing::WaitUntil(
      [&] {
        return extender_->state().Stats().gpu_milli_allocated ==
               engine_cluster_->gpu_milli_allocated();
      },
      10s))
      << "the extender did not release the deleted pods' shares";
  std::vector<TestPod> wave;
  for (size_t i = 0; i < pods.size(); i += 2) {
    TestPod next = pods[i];
    next.name = "next-" + pods[i].name;
    next.node.clear();
    next.gpus.clear();
    next.process = nullptr;
    wave.push_back(std::move(next));
  }
  ASSERT_NO_FATAL_FAILURE(PlaceRunAndCheck(wave, 15));
  // The pod that was too big is still Pending, for the same reason.
  const testing::ScheduleResult still = driver_->Schedule(big.created, names_);
  EXPECT_FALSE(still.bound);
  EXPECT_EQ(still.failures.size(), names_.size());
}

// ---- a mig node in a cluster ------------------------------------------------------------------

// The same machinery with a mig node (one simulated H100 of 8 GiB named after its model, cut by
// the real `tessera mig apply` into 3g.40gb@0 and 1g.10gb@4, @5 before its tesserad starts) beside
// a core_mem node: MIG pods go to free instances of their profile, the assignment names the MIG
// UUID, the plugin hands the container that instance, and its process stops at the instance's
// memory; a MIG pod that finds no free instance stays Pending with the reason, until one frees.
class MigClusterE2ETest : public ::testing::Test {
 protected:
  struct Node : NodeParts {
    std::string name, mode, sim_gpus;
  };

  void SetUp() override {
    ASSERT_TRUE(api_.Start(0).ok());
    api_.RequireToken("t");  // every component authenticates, as to a real API server
    for (const auto& [name, mode, gpus] :
         {std::tuple{"core-a", "core_mem", "SimA:16GiB:80"},
          std::tuple{"mig-a", "mig", "H100-80GB:8GiB:132:mig=H100-80GB"}}) {
      Node n;
      n.name = name;
      n.mode = mode;
      n.sim_gpus = gpus;
      nodes_.push_back(std::move(n));
    }
    for (Node& n : nodes_) {
      n.sim = std::make_unique<k8s::testing::SimNode>(n.sim_gpus, std::vector<std::string>{});
      if (n.mode == "mig") {
        std::string env;
        for (const std::string& e : n.sim->SimEnv()) env += e + " ";
        const auto [status, out] = process::RunShell(
            env + "'" + BuildDir() + "/bin/tessera' mig apply --sim 3g.40gb=1 1g.10gb=2 2>&1");
        ASSERT_EQ(status, 0) << out;
      }
      n.KeepLogs();
      ASSERT_TRUE(n.sim->Start()) << n.name;
      api_.CreateNode(
          {{"metadata", {{"name", n.name}, {"labels", {{"tessera.io/gpu.schedule", n.mode}}}}},
           {"status", {{"allocatable", {{"cpu", "16"}, {"memory", "64Gi"}, {"pods", "110"}}}}}});
      {
        const Status s = n.StartKubeletAndPlugin(n.name, api_.url(), {});
        ASSERT_TRUE(s.ok()) << s.message();
      }
      names_.push_back(n.name);
    }
    ASSERT_TRUE(nodes_[1].kubelet->WaitForResource("tessera.io/mig-3g.40gb", 30s));
    ASSERT_TRUE(nodes_[1].kubelet->WaitForResource("tessera.io/mig-1g.10gb", 30s));
    AppConfig c;
    c.api.server = api_.url();
    c.api.token = "t";
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.quiet = true;
    extender_ = std::make_unique<ExtenderApp>(c);
    ASSERT_TRUE(extender_->Start().ok());
    ASSERT_TRUE(extender_->WaitReady(10s));
    // The extender has read the mig node's three MIG devices.
    ASSERT_TRUE(k8s::testing::WaitUntil(
        [&] {
          auto j = extender_->state().Inspect(std::string("mig-a"));
          return j && (*j)["mode"] == "mig" && (*j)["gpus"].size() == 3;
        },
        20s))
        << "the extender never saw the mig node's MIG devices";
    driver_ = std::make_unique<testing::SchedulerDriver>(extender_->port());
  }

  void TearDown() override { StopCluster(containers_, extender_, nodes_, api_); }

  Json Create(const std::string& name, const std::map<std::string, std::string>& limits) {
    testing::TestContainer c;
    c.limits = limits;
    c.cpu = "500m";
    c.memory = "512Mi";
    Json pod = testing::Pod(name, std::vector<testing::TestContainer>{c});
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    return api_.CreatePod(pod);
  }
  k8s::Assignment AssignmentOf(const std::string& name) {
    auto a = k8s::ParseAssignment(
        (*api_.GetPod("default", name))["metadata"]["annotations"][k8s::kAssignmentAnnotation]
            .get<std::string>());
    EXPECT_TRUE(a.ok()) << a.error();
    return a.ok() ? *a : k8s::Assignment{};
  }
  ChildProcess* Run(Node& node, const std::string& name, const Json& created) {
    return StartPod(api_, node, containers_, name, created);
  }
  // The MIG device of `profile` at slot `start` in mig-a's inventory.
  std::string MigDevice(const std::string& profile, int start) {
    auto inv = k8s::ParseGpuInventory(
        (*api_.GetNode("mig-a"))["metadata"]["annotations"][k8s::kInventoryAnnotation]
            .get<std::string>());
    if (!inv.ok()) return "";
    for (const auto& g : inv->gpus) {
      if (g.mig && g.mig->profile == profile && g.mig->start == start) return g.uuid;
    }
    return "";
  }

  k8s::TestApiServer api_;
  std::vector<Node> nodes_;
  std::vector<std::string> names_;
  std::unique_ptr<ExtenderApp> extender_;
  std::unique_ptr<testing::SchedulerDriver> driver_;
  std::vector<std::unique_ptr<ChildProcess>> containers_;
};

TEST_F(MigClusterE2ETest, MigPodsLandOnTheirInstancesAndWaitWithTheReasonWhenNoneIsFree) {
  const std::string three = MigDevice("3g.40gb", 0), small = MigDevice("1g.10gb", 4);
  ASSERT_FALSE(three.empty());
  ASSERT_FALSE(small.empty());
  // A 3g.40gb pod and a 1g.10gb pod land on the mig node, on the instances the engine chose.
  const Json big = Create("big", {{"tessera.io/mig-3g.40gb", "1"}});
  testing::ScheduleResult r = driver_->Schedule(big, names_);
  ASSERT_TRUE(r.bound) << r.error;
  EXPECT_EQ(r.node, "mig-a");
  k8s::Assignment a = AssignmentOf("big");
  ASSERT_EQ(a.containers.size(), 1u);
  EXPECT_EQ(a.containers[0].gpus[0].uuid, three);
  EXPECT_EQ(a.containers[0].gpus[0].mem, Bytes(4 * kGiB));
  const Json one = Create("one", {{"tessera.io/mig-1g.10gb", "1"}});
  r = driver_->Schedule(one, names_);
  ASSERT_TRUE(r.bound) << r.error;
  EXPECT_EQ(AssignmentOf("one").containers[0].gpus[0].uuid, small) << "the lowest free slot";
  // A share lands on the core_mem node.
  const Json share = Create("share", {{"tessera.io/gpu-core", "30"}, {"tessera.io/gpu-mem", "2"}});
  r = driver_->Schedule(share, names_);
  ASSERT_TRUE(r.bound) << r.error;
  EXPECT_EQ(r.node, "core-a");
  // Each MIG pod's process sees its instance and stops at the instance's memory.
  ChildProcess* big_proc = Run(nodes_[1], "big", big);
  ChildProcess* one_proc = Run(nodes_[1], "one", one);
  ASSERT_NE(big_proc, nullptr);
  ASSERT_NE(one_proc, nullptr);
  EXPECT_EQ(big_proc->WaitForKey("allocated", 60s), std::to_string(4 * kGiB));
  EXPECT_EQ(one_proc->WaitForKey("allocated", 60s), std::to_string(kGiB));
  // A second 3g.40gb finds none free: Pending, with the reason on each node.
  const Json next = Create("next", {{"tessera.io/mig-3g.40gb", "1"}});
  r = driver_->Schedule(next, names_);
  ASSERT_FALSE(r.bound);
  EXPECT_EQ(r.failures.at("mig-a"),
            "tessera: no free 3g.40gb instance on the node (its instances: 1g.10gb 1 free of 2, "
            "3g.40gb 0 free of 1)");
  EXPECT_EQ(r.failures.at("core-a"),
            "tessera: node mode core_mem serves no MIG instances (tessera.io/mig-<profile>); mig "
            "nodes do");
  // The first one leaves: its instance is free again and the waiting pod gets it.
  big_proc->CloseStdin();
  big_proc->Wait(10s);
  ASSERT_TRUE(api_.DeletePod("default", "big"));
  nodes_[1].kubelet->RemovePod(big["metadata"]["uid"]);
  ASSERT_TRUE(k8s::testing::WaitUntil([&] { return driver_->Schedule(next, names_).bound; }, 10s))
      << "the freed instance was not given to the waiting pod";
  EXPECT_EQ(AssignmentOf("next").containers[0].gpus[0].uuid, three);
}

// ---- MIG re-cuts ------------------------------------------------------------------------------

// A mig node labelled tessera.io/mig.recut=true whose simulated H100s (8 GiB each, named after
// their model) are each cut whole (7g.80gb) by the real `tessera mig apply` before its tesserad
// starts; GPU 0 runs a pod whose real tenant holds its instance. The extender, the real plugin
// and the real tesserad as above, the extender planning re-cuts every 200 ms.
class RecutClusterE2ETest : public ::testing::Test {
 protected:
  void StartCluster(int gpus) {
    ASSERT_TRUE(api_.Start(0).ok());
    api_.RequireToken("t");
    std::string sim_gpus;
    for (int g = 0; g < gpus; ++g) {
      sim_gpus += (g ? "," : "") + std::string("H100-80GB:8GiB:132:mig=H100-80GB");
    }
    node_.sim = std::make_unique<k8s::testing::SimNode>(sim_gpus, std::vector<std::string>{});
    std::string env;
    for (const std::string& e : node_.sim->SimEnv()) env += e + " ";
    for (int g = 0; g < gpus; ++g) {
      const auto [status, out] =
          process::RunShell(env + "'" + BuildDir() + "/bin/tessera' mig apply --sim --index " +
                            std::to_string(g) + " 7g.80gb=1 2>&1");
      ASSERT_EQ(status, 0) << out;
    }
    node_.KeepLogs();
    ASSERT_TRUE(node_.sim->Start());
    api_.CreateNode(
        {{"metadata",
          {{"name", "mig-r"},
           {"labels", {{"tessera.io/gpu.schedule", "mig"}, {k8s::kMigRecutLabel, "true"}}}}},
         {"status", {{"allocatable", {{"cpu", "16"}, {"memory", "64Gi"}, {"pods", "110"}}}}}});
    {
      const Status s = node_.StartKubeletAndPlugin("mig-r", api_.url(), {});
      ASSERT_TRUE(s.ok()) << s.message();
    }
    ASSERT_TRUE(node_.kubelet->WaitForResource("tessera.io/mig-7g.80gb", 30s));
    AppConfig c;
    c.api.server = api_.url();
    c.api.token = "t";
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.quiet = true;
    c.recut_poll = 200ms;
    c.state.mig_recut_interval = 60s;
    extender_ = std::make_unique<ExtenderApp>(c);
    ASSERT_TRUE(extender_->Start().ok());
    ASSERT_TRUE(extender_->WaitReady(10s));
    ASSERT_TRUE(k8s::testing::WaitUntil(
        [&] {
          auto j = extender_->state().Inspect(std::string("mig-r"));
          return j && (*j)["gpus"].size() == static_cast<size_t>(gpus);
        },
        20s))
        << "the extender never saw the mig node's MIG devices";
    driver_ = std::make_unique<testing::SchedulerDriver>(extender_->port());
  }

  void TearDown() override {
    std::vector<NodeParts> nodes;
    nodes.push_back(std::move(node_));
    StopCluster(containers_, extender_, nodes, api_);
  }

  Json Create(const std::string& name, const std::string& resource) {
    testing::TestContainer c;
    c.limits = {{resource, "1"}};
    c.cpu = "500m";
    c.memory = "512Mi";
    Json pod = testing::Pod(name, std::vector<testing::TestContainer>{c});
    pod["metadata"].erase("uid");
    pod["metadata"].erase("resourceVersion");
    return api_.CreatePod(pod);
  }
  ChildProcess* Run(const std::string& name, const Json& created) {
    return StartPod(api_, node_, containers_, name, created);
  }
  std::string NodeAnnotation(const char* key) {
    auto node = api_.GetNode("mig-r");
    if (!node || !(*node)["metadata"].contains("annotations")) return "";
    const Json& a = (*node)["metadata"]["annotations"];
    return a.contains(key) ? a[key].get<std::string>() : "";
  }
  k8s::GpuInventory Inventory() {
    auto inv = k8s::ParseGpuInventory(NodeAnnotation(k8s::kInventoryAnnotation));
    EXPECT_TRUE(inv.ok()) << inv.error();
    return inv.ok() ? *inv : k8s::GpuInventory{};
  }
  // The 7g.80gb pod "big" on GPU 0, its tenant holding the whole instance.
  void RunBigOnGpuZero(std::string* gpu0) {
    const Json big = Create("big", "tessera.io/mig-7g.80gb");
    const testing::ScheduleResult r = driver_->Schedule(big, {"mig-r"});
    ASSERT_TRUE(r.bound) << r.error;
    ChildProcess* p = Run("big", big);
    ASSERT_NE(p, nullptr);
    auto allocated = p->WaitForKey("allocated", 60s);
    ASSERT_TRUE(allocated.has_value());
    big_bytes_ = std::stoull(*allocated);
    ASSERT_GT(big_bytes_, 4 * kGiB) << "the 7g.80gb instance is the whole GPU";
    auto a = k8s::ParseAssignment(
        (*api_.GetPod("default", "big"))["metadata"]["annotations"][k8s::kAssignmentAnnotation]
            .get<std::string>());
    ASSERT_TRUE(a.ok()) << a.error();
    const k8s::GpuInventory inv = Inventory();
    const k8s::InventoryGpu* dev = inv.Find(a->containers[0].gpus[0].uuid);
    ASSERT_NE(dev, nullptr);
    ASSERT_TRUE(dev->mig.has_value());
    *gpu0 = dev->mig->gpu;
  }

  k8s::TestApiServer api_;
  NodeParts node_;
  std::unique_ptr<ExtenderApp> extender_;
  std::unique_ptr<testing::SchedulerDriver> driver_;
  std::vector<std::unique_ptr<ChildProcess>> containers_;
  uint64_t big_bytes_ = 0;  // what big's tenant holds
};

// GPU 0 busy, GPU 1 idle and cut whole: a pending 1g.10gb pod makes the extender ask the node to
// cut GPU 1 again (tessera.io/mig-recut), the plugin has tesserad cut it (MIGCUT, the code of
// `tessera mig apply`), tesserad restarts with the new MIG devices, the plugin serves
// tessera.io/mig-1g.10gb and publishes them, and the pod is bound, allocated and stops at its
// instance's memory; the tenant on GPU 0 runs on.
TEST_F(RecutClusterE2ETest, recut_APendingOneGPodGetsAnIdleGpuCutAgainAndLands) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  std::string gpu0;
  ASSERT_NO_FATAL_FAILURE(RunBigOnGpuZero(&gpu0));
  std::string gpu1;
  for (const k8s::InventoryGpu& g : Inventory().gpus) {
    if (g.mig && g.mig->gpu != gpu0) gpu1 = g.mig->gpu;
  }
  ASSERT_FALSE(gpu1.empty());
  const Json small = Create("small", "tessera.io/mig-1g.10gb");
  testing::ScheduleResult r = driver_->Schedule(small, {"mig-r"});
  ASSERT_FALSE(r.bound) << "no 1g.10gb instance exists yet";
  // The extender's request, then the node's answer.
  ASSERT_TRUE(k8s::testing::WaitUntil(
      [&] { return !NodeAnnotation(k8s::kMigRecutStatusAnnotation).empty(); }, 30s))
      << "request: " << NodeAnnotation(k8s::kMigRecutAnnotation);
  auto request = k8s::ParseMigRecutRequest(NodeAnnotation(k8s::kMigRecutAnnotation));
  ASSERT_TRUE(request.ok()) << request.error();
  EXPECT_EQ(request->gpu, gpu1) << "only the idle GPU is cut";
  EXPECT_EQ(request->pod, "default/small");
  EXPECT_NE(request->layout.find("1g.10gb="), std::string::npos) << request->layout;
  auto status = k8s::ParseMigRecutStatus(NodeAnnotation(k8s::kMigRecutStatusAnnotation));
  ASSERT_TRUE(status.ok()) << status.error();
  EXPECT_EQ(status->id, request->id);
  ASSERT_EQ(status->state, k8s::MigRecutState::kApplied) << status->reason;
  // The plugin serves the new instances, without anyone restarting anything.
  ASSERT_TRUE(node_.kubelet->WaitForResource("tessera.io/mig-1g.10gb", 30s));
  ASSERT_TRUE(k8s::testing::WaitUntil(
      [&] {
        int small_on_gpu1 = 0;
        for (const k8s::InventoryGpu& g : Inventory().gpus) {
          if (g.mig && g.mig->gpu == gpu1 && g.mig->profile == "1g.10gb") ++small_on_gpu1;
        }
        return small_on_gpu1 > 0;
      },
      20s))
      << "the inventory never showed GPU 1's new instances";
  // The pod lands on one of them.
  ASSERT_TRUE(
      k8s::testing::WaitUntil([&] { return driver_->Schedule(small, {"mig-r"}).bound; }, 30s))
      << "the pending pod was never bound";
  auto a = k8s::ParseAssignment(
      (*api_.GetPod("default", "small"))["metadata"]["annotations"][k8s::kAssignmentAnnotation]
          .get<std::string>());
  ASSERT_TRUE(a.ok()) << a.error();
  const k8s::GpuInventory inv = Inventory();
  const k8s::InventoryGpu* dev = inv.Find(a->containers[0].gpus[0].uuid);
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(dev->mig.has_value());
  EXPECT_EQ(dev->mig->gpu, gpu1);
  EXPECT_EQ(dev->mig->profile, "1g.10gb");
  ChildProcess* p = Run("small", small);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->WaitForKey("allocated", 60s), std::to_string(kGiB));
  // GPU 0's tenant still holds its instance in the restarted tesserad.
  const k8s::TesseradStatus st = node_.sim->Status();
  EXPECT_EQ(st.containers.size(), 2u);
  bool big_holds = false;
  for (const k8s::TesseradContainer& c : st.containers) {
    for (const Bytes& u : c.used) big_holds = big_holds || u == Bytes(big_bytes_);
  }
  EXPECT_TRUE(big_holds) << "GPU 0's tenant lost its memory over the re-cut";
}

// One GPU, running a pod: the extender never asks for it to be cut, and a request that names it
// anyway (an extender whose view lagged, or a hand) is refused by the plugin with the pod named,
// in tessera.io/mig-recut-status and a Node event; tesserad itself refuses MIGCUT while the
// container holds the GPU; the layout and the tenant stay as they were.
TEST_F(RecutClusterE2ETest, recut_AGpuWithARunningPodIsNeverCutAndTheStatusSaysWhy) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  std::string gpu0;
  ASSERT_NO_FATAL_FAILURE(RunBigOnGpuZero(&gpu0));
  const Json small = Create("small", "tessera.io/mig-1g.10gb");
  ASSERT_FALSE(driver_->Schedule(small, {"mig-r"}).bound);
  std::this_thread::sleep_for(2s);  // ten of the extender's planning rounds
  EXPECT_EQ(NodeAnnotation(k8s::kMigRecutAnnotation), "") << "a busy GPU was planned for a cut";
  // A request naming the busy GPU, written through the API server.
  k8s::ClientConfig cc;
  cc.server = api_.url();
  cc.token = "t";
  k8s::ApiClient client(cc);
  const k8s::MigRecutRequest req{1, gpu0, "1g.10gb=7", "default/small"};
  ASSERT_TRUE(
      client.PatchNodeAnnotations("mig-r", {{k8s::kMigRecutAnnotation, WriteMigRecutRequest(req)}})
          .ok());
  ASSERT_TRUE(k8s::testing::WaitUntil(
      [&] { return !NodeAnnotation(k8s::kMigRecutStatusAnnotation).empty(); }, 20s));
  auto status = k8s::ParseMigRecutStatus(NodeAnnotation(k8s::kMigRecutStatusAnnotation));
  ASSERT_TRUE(status.ok()) << status.error();
  EXPECT_EQ(status->id, 1u);
  EXPECT_EQ(status->state, k8s::MigRecutState::kRefused);
  EXPECT_EQ(status->reason,
            "GPU " + gpu0 + " runs pod(s) default/big: a GPU is never cut under a pod");
  // The Node event follows the status annotation.
  EXPECT_TRUE(k8s::testing::WaitUntil(
      [&] {
        for (const Json& e : api_.Events()) {
          if (e.value("reason", "") == "TesseraMigRecutRefused" &&
              e["message"].get<std::string>().find("default/big") != std::string::npos) {
            return true;
          }
        }
        return false;
      },
      10s))
      << "no TesseraMigRecutRefused event names the pod";
  // tesserad refuses too, naming the container that holds the GPU.
  auto cut = node_.sim->client().CutMigGpu(gpu0, "1g.10gb=7");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().find("is not cut while containers use it"), std::string::npos)
      << cut.error();
  // Nothing changed: one 7g.80gb instance, the tenant holding it, the pod still pending.
  const k8s::GpuInventory inv = Inventory();
  ASSERT_EQ(inv.gpus.size(), 1u);
  EXPECT_EQ(inv.gpus[0].mig->profile, "7g.80gb");
  EXPECT_EQ(node_.sim->Status().containers.size(), 1u);
  EXPECT_FALSE(driver_->Schedule(small, {"mig-r"}).bound);
}

}  // namespace
}  // namespace tessera::extender
