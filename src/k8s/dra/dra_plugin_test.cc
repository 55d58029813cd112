// tessera-dra-plugin end to end, with real peers where they can run here and stand-ins, named as
// such, where they cannot: the real plugin program; a real tesserad on simulated GPUs; the
// stand-in kubelet (TestDraKubelet: the plugin watcher's registration, the DRA manager's
// NodePrepareResources and NodeUnprepareResources, the health stream, the wiping of a gone
// driver's slices); the stand-in API server (TestApiServer with resource.k8s.io/v1); the stand-in
// container runtime (k8s_container_run applying the claim's CDI spec as the CDI library does), in
// which real tenants allocate through the real shim, captured by /etc/ld.so.preload alone. Claims
// are allocated as kube-scheduler writes them (status.allocation with the consumed capacity and a
// share ID, reservedFor the pod).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "ipc/futex.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/container_edits.h"
#include "k8s/dra/preparer.h"
#include "k8s/dra/slices.h"
#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"
#include "testing/standins/test_dra_kubelet.h"
#include "testing/support/dra_node.h"
#include "testing/support/dra_objects.h"
#include "testing/support/test_support.h"

namespace tessera::k8s::dra {
namespace {

using namespace std::chrono_literals;
using k8s::testing::AllocatedStatus;
using k8s::testing::ClaimJson;
using k8s::testing::DraContainer;
using k8s::testing::DraNode;
using k8s::testing::DraRequest;
using k8s::testing::DraResult;
using k8s::testing::kGiB;
using k8s::testing::PodWithClaims;
using k8s::testing::SimNode;
using k8s::testing::TestProgram;
using k8s::testing::WaitUntil;
using process::ChildProcess;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-node-1";

class DraPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    api_.CreateNode({{"metadata", {{"name", kNode}, {"labels", Json::object()}}}});
    node_ = std::make_unique<DraNode>(kNode, "SimA:16GiB:80,SimA:16GiB:80", api_.url(), 2s);
    ASSERT_TRUE(node_->Start());
  }
  void TearDown() override {
    node_.reset();
    api_.Stop();
  }

  void StartPlugin() { node_->StartPlugin(); }
  void StopPlugin(int signal) { node_->StopPlugin(signal); }
  void WaitRegistered(int registrations = 1) { ASSERT_TRUE(node_->WaitRegistered(registrations)); }
  TestDraKubelet* kubelet() { return &node_->kubelet(); }
  SimNode& sim() { return node_->sim(); }
  std::vector<Json> Slices() {
    std::vector<Json> out;
    for (const Json& s : api_.ListResources("ResourceSlice")) {
      if (s["spec"].value("driver", "") == kDriverName) out.push_back(s);
    }
    return out;
  }
  // The pool published: one slice, of `generation`.
  bool Published(int64_t generation, size_t devices = 2) {
    auto slices = Slices();
    return slices.size() == 1 && slices[0]["spec"]["pool"]["generation"] == generation &&
           slices[0]["spec"].value("devices", Json::array()).size() == devices;
  }

  // A claim of `consumed` on `device`, allocated and reserved for a new pod whose container "app"
  // uses it (as kube-scheduler would leave them), with `config` as the allocation copies it.
  Json ClaimAndPod(const std::string& name, const std::string& device,
                   const std::map<std::string, std::string>& consumed,
                   const Json& config = Json::array()) {
    Json pod = api_.CreatePod(PodWithClaims("team", name, {{"gpu", name}}, {{"app", {"gpu"}}}));
    DraRequest request;
    request.capacity = consumed;
    auto claim = api_.CreateResource("ResourceClaim", ClaimJson("team", name, {request}));
    EXPECT_TRUE(claim.ok()) << claim.error();
    EXPECT_TRUE(api_.SetClaimStatus("team", name,
                                    AllocatedStatus(kNode, {{"gpu", "", device, consumed}}, config,
                                                    name, pod["metadata"]["uid"])));
    EXPECT_TRUE(node_->client().BindPod("team", name, pod["metadata"]["uid"], kNode).ok());
    return *api_.GetPod("team", name);
  }
  std::string ClaimUid(const std::string& name) {
    return (*api_.GetResource("ResourceClaim", "team", name))["metadata"]["uid"];
  }
  std::string ContainerOf(const std::string& claim) {
    return MakeContainerId(kClaimContainerPrefix, "team", claim, ClaimUid(claim));
  }
  ChildProcess* Run(const Json& pod, const std::string& container, std::vector<std::string> argv) {
    return node_->Run(pod, container, std::move(argv));
  }
  std::string Tenant(const std::string& name) { return TestProgram(name); }

  TestApiServer api_;
  std::unique_ptr<DraNode> node_;
};

TEST_F(DraPluginTest, RegistersThroughThePluginWatcherAndReportsHealth) {
  StartPlugin();
  WaitRegistered();
  auto p = kubelet()->Plugin(kDriverName);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->socket, node_->registry() + "/gpu.tessera.io-reg.sock");
  EXPECT_EQ(p->endpoint, node_->plugins() + "/gpu.tessera.io/dra.sock");
  EXPECT_EQ(p->supported,
            (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                                      "v1alpha1.DRAResourceHealth"}));
  EXPECT_EQ(p->service, "v1.DRAPlugin") << "kubelet takes the first it knows";
  EXPECT_EQ(p->health_service, "v1.DRAResourceHealth");
  ASSERT_TRUE(WaitUntil([&] { return kubelet()->Health(kDriverName).size() == 2; }, 10s));
  for (const char* d : {"gpu-node-1/gpu-0", "gpu-node-1/gpu-1"}) {
    EXPECT_EQ(kubelet()->Health(kDriverName)[d].first, "HEALTHY") << d;
  }
  // tesserad gone: the devices turn unhealthy, naming why, and healthy again when it is back.
  sim().Stop();
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto h = kubelet()->Health(kDriverName);
        return h.size() == 2 && h["gpu-node-1/gpu-0"].first == "UNHEALTHY";
      },
      15s));
  EXPECT_THAT(kubelet()->Health(kDriverName)["gpu-node-1/gpu-0"].second,
              HasSubstr("is not reachable"));
  ASSERT_TRUE(sim().Start());
  EXPECT_TRUE(WaitUntil(
      [&] { return kubelet()->Health(kDriverName)["gpu-node-1/gpu-0"].first == "HEALTHY"; }, 15s));
}

TEST_F(DraPluginTest, PublishesTheNodesPoolAndFollowsTheNode) {
  StartPlugin();
  WaitRegistered();
  ASSERT_TRUE(WaitUntil([&] { return Published(1); }, 20s)) << ::testing::PrintToString(Slices());
  const Json slice = Slices()[0];
  EXPECT_THAT(slice["metadata"]["name"].get<std::string>(),
              ::testing::StartsWith("00000-gpu.tessera.io-gpu-node-1-"));
  EXPECT_EQ(slice["spec"]["nodeName"], kNode);
  EXPECT_EQ(slice["spec"]["pool"],
            Json::parse(R"({"name": "gpu-node-1", "generation": 1, "resourceSliceCount": 1})"));
  const Json owner = slice["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "Node");
  EXPECT_EQ(owner["name"], kNode);
  EXPECT_EQ(owner["uid"], (*api_.GetNode(kNode))["metadata"]["uid"]);
  const Json& dev = slice["spec"]["devices"][1];
  EXPECT_EQ(dev["name"], "gpu-1");
  EXPECT_EQ(dev["attributes"]["uuid"]["string"], sim().Uuid(1));
  EXPECT_EQ(dev["capacity"]["memory"]["value"], "16Gi");
  EXPECT_EQ(dev["allowMultipleAllocations"], true);

  // The mode changes: the same slice, updated once, keeps its generation (one update).
  api_.SetNodeLabel(kNode, kScheduleLabel, "exclusive");
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = Slices();
        return s.size() == 1 && !s[0]["spec"]["devices"][0].contains("allowMultipleAllocations");
      },
      10s));
  EXPECT_EQ(Slices()[0]["metadata"]["name"], slice["metadata"]["name"]);
  EXPECT_EQ(Slices()[0]["spec"]["pool"]["generation"], 1);
  EXPECT_EQ(Slices()[0]["metadata"]["generation"], 2) << "the API server counts spec changes";
  // Someone deletes the slice: it comes back, a new slice. With no slice of the pool left, the
  // generation starts again from the first (as upstream's controller does).
  ASSERT_TRUE(api_.DeleteResource("ResourceSlice", "", slice["metadata"]["name"]));
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = Slices();
        return s.size() == 1 && s[0]["metadata"]["name"] != slice["metadata"]["name"];
      },
      10s))
      << ::testing::PrintToString(Slices());
  EXPECT_EQ(Slices()[0]["spec"]["pool"]["generation"], 1);
  EXPECT_NE(Slices()[0]["metadata"]["name"], slice["metadata"]["name"]);
  // The plugin goes: kubelet forgets it and, after its grace, deletes the node's slices.
  const int wipes = kubelet()->wipes();
  StopPlugin(SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return Slices().empty(); }, 15s));
  // kubelet counts its wipe once the API server has answered the delete.
  EXPECT_TRUE(WaitUntil([&] { return kubelet()->wipes() > wipes; }, 5s));
  // Back: registered again, the pool published again.
  StartPlugin();
  WaitRegistered(2);
  EXPECT_TRUE(WaitUntil([&] { return Slices().size() == 1; }, 20s));
}

// The issue's claim end to end: 4 GiB and 30 % of a GPU's time.
TEST_F(DraPluginTest, AClaimOfFourGibAndThirtyPercentStopsAtExactlyFourGib) {
  StartPlugin();
  WaitRegistered();
  const Json pod = ClaimAndPod("infer", "gpu-0", {{"memory", "4Gi"}, {"cores", "30"}});
  Status prepared = kubelet()->PrepareResources(pod);
  ASSERT_TRUE(prepared.ok()) << prepared.message();
  const std::string uid = ClaimUid("infer");
  auto cdi = kubelet()->CdiDevices(pod, "app");
  ASSERT_TRUE(cdi.ok());
  EXPECT_EQ(*cdi, std::vector<std::string>{"gpu.tessera.io/claim=" + uid + "-0"});
  // tesserad holds the claim as one container: 4 GiB on GPU 0, nothing on GPU 1, 30 % of time.
  const TesseradContainer* c = nullptr;
  TesseradStatus status = sim().Status();
  c = status.Find(ContainerOf("infer"));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->limits[0], Bytes(4 * kGiB));
  EXPECT_EQ(c->limits[1], Bytes(0));
  EXPECT_EQ(c->core_percent, 30u);
  // The process sees a 4 GiB GPU, and one that links no libcuda stops at exactly 4 GiB.
  ChildProcess* meminfo = Run(pod, "app", {Tenant("shim_tenant"), "meminfo"});
  EXPECT_EQ(meminfo->WaitForKey("total", 30s), std::to_string(4 * kGiB));
  EXPECT_EQ(meminfo->Wait(20s), 0);
  ChildProcess* oom = Run(pod, "app", {Tenant("preload_tenant")});
  auto allocated = oom->WaitForKey("allocated", 30s);
  ASSERT_TRUE(allocated.has_value()) << "the tenant did not start";
  EXPECT_EQ(*allocated, std::to_string(4 * kGiB));
  EXPECT_EQ(oom->values().at("failure"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(oom->Wait(20s), 0);

  // Idempotent: preparing again (kubelet restarted) changes nothing; a restarted plugin keeps
  // the claim (its checkpoint) and registers nothing twice.
  const std::string spec_file = node_->cdi() + "/gpu.tessera.io-claim-" + uid + ".json";
  struct stat before {};
  ASSERT_EQ(stat(spec_file.c_str(), &before), 0);
  StopPlugin(SIGKILL);
  StartPlugin();
  WaitRegistered(2);
  Json second =
      api_.CreatePod(PodWithClaims("team", "infer-2", {{"gpu", "infer"}}, {{"app", {"gpu"}}}));
  Json claim = *api_.GetResource("ResourceClaim", "team", "infer");
  claim["status"]["reservedFor"].push_back(
      {{"resource", "pods"}, {"name", "infer-2"}, {"uid", second["metadata"]["uid"]}});
  ASSERT_TRUE(api_.SetClaimStatus("team", "infer", claim["status"]));
  ASSERT_TRUE(kubelet()->PrepareResources(second).ok());
  EXPECT_EQ(kubelet()->PreparedClaims()["team/infer"].size(), 2u) << "one claim, two pods";
  int dra_containers = 0;
  for (const TesseradContainer& t : sim().Status().containers)
    dra_containers += t.id.rfind("dra.", 0) == 0;
  EXPECT_EQ(dra_containers, 1);
  // Unprepared when its last pod goes: the container leaves tesserad and the spec is deleted.
  ASSERT_TRUE(kubelet()->UnprepareResources(pod).ok());
  EXPECT_NE(sim().Status().Find(ContainerOf("infer")), nullptr) << "the second pod still uses it";
  ASSERT_TRUE(kubelet()->UnprepareResources(second).ok());
  EXPECT_EQ(sim().Status().Find(ContainerOf("infer")), nullptr);
  struct stat after {};
  EXPECT_NE(stat(spec_file.c_str(), &after), 0) << "the claim's CDI spec is deleted";
}

TEST_F(DraPluginTest, WeightAndPriorityComeFromTheClaimsConfig) {
  StartPlugin();
  WaitRegistered();
  const Json config = Json::parse(R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "weight": 4,
                     "highPriority": true}}}])");
  const Json pod = ClaimAndPod("weighted", "gpu-1", {{"memory", "2Gi"}, {"cores", "100"}}, config);
  Status prepared = kubelet()->PrepareResources(pod);
  ASSERT_TRUE(prepared.ok()) << prepared.message();
  const TesseradStatus status = sim().Status();
  const TesseradContainer* c = status.Find(ContainerOf("weighted"));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weight, 4u);
  EXPECT_TRUE(c->high_priority);
  EXPECT_EQ(c->core_percent, 100u) << "all of the GPU's time: no cap";
  EXPECT_EQ(c->limits[1], Bytes(2 * kGiB));
}

TEST_F(DraPluginTest, BadClaimsAreRefusedByNameAndChangeNothing) {
  StartPlugin();
  WaitRegistered();
  const Json over = ClaimAndPod("over", "gpu-0", {{"memory", "20Gi"}, {"cores", "30"}});
  Status s = kubelet()->PrepareResources(over);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "prepare dynamic resources: NodePrepareResources failed for ResourceClaim over: "
            "ResourceClaim team/over (uid " +
                ClaimUid("over") +
                "): status.allocation.devices.results[0].consumedCapacity.memory=\"20Gi\": "
                "device gpu-0 gives from 256Mi to 16Gi");
  const Json odd = Json::parse(R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "priority": "high"}}}])");
  const Json unknown = ClaimAndPod("unknown", "gpu-0", {{"memory", "1Gi"}, {"cores", "30"}}, odd);
  s = kubelet()->PrepareResources(unknown);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("ResourceClaim team/unknown (uid " + ClaimUid("unknown") +
                                     "): status.allocation.devices.config[0].opaque.parameters."
                                     "priority=\"high\": unknown field"));
  // Two claims that together ask more of a GPU than it has: the second is refused (the
  // scheduler's view was stale), naming who holds it.
  const Json first = ClaimAndPod("first", "gpu-1", {{"memory", "12Gi"}, {"cores", "50"}});
  ASSERT_TRUE(kubelet()->PrepareResources(first).ok());
  const Json twice = ClaimAndPod("twice", "gpu-1", {{"memory", "8Gi"}, {"cores", "20"}});
  s = kubelet()->PrepareResources(twice);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("would be given twice: it asks 8GiB and 20% there, and claims "
                                     "team/first hold it already (12GiB, 50%)"));
  // Nothing of the refused claims reached tesserad or the CDI folder.
  const TesseradStatus status = sim().Status();
  ASSERT_EQ(status.containers.size(), 1u);
  EXPECT_EQ(status.containers[0].id, ContainerOf("first"));
  for (const char* name : {"over", "unknown", "twice"}) {
    struct stat st {};
    EXPECT_NE(
        stat((node_->cdi() + "/gpu.tessera.io-claim-" + ClaimUid(name) + ".json").c_str(), &st), 0)
        << name;
  }
}

// 30 % beside 70 % of one GPU through claims, measured by the tenants' own kernels over 10 s
// (label timing): each gets its share of the device time within a point.
TEST_F(DraPluginTest, ClaimsOfThirtyAndSeventyPercentShareAGpuUnderContention) {
  StartPlugin();
  WaitRegistered();
  const Json low = ClaimAndPod("thirty", "gpu-0", {{"memory", "4Gi"}, {"cores", "30"}});
  const Json high = ClaimAndPod("seventy", "gpu-0", {{"memory", "4Gi"}, {"cores", "70"}});
  ASSERT_TRUE(kubelet()->PrepareResources(low).ok());
  ASSERT_TRUE(kubelet()->PrepareResources(high).ok());
  const uint64_t start = ipc::MonotonicNs() + 2'000'000'000ull;
  const int seconds = 10;
  auto spin = [&](const Json& pod) {
    return Run(pod, "app",
               {Tenant("shim_tenant"), "spin", "1000", std::to_string(seconds),
                std::to_string(start), "stream"});
  };
  ChildProcess* t30 = spin(low);
  ChildProcess* t70 = spin(high);
  auto k30 = t30->WaitForKey("kernels", 60s);
  auto k70 = t70->WaitForKey("kernels", 60s);
  ASSERT_TRUE(k30 && k70);
  const double s30 = std::stod(*k30) / (seconds * 10.0), s70 = std::stod(*k70) / (seconds * 10.0);
  const double busy = s30 + s70;
  std::printf("[ shares   ] claims: thirty %.1f %%  seventy %.1f %% of %d s; split %.1f/%.1f\n",
              s30, s70, seconds, 100.0 * s30 / busy, 100.0 * s70 / busy);
  EXPECT_NEAR(100.0 * s30 / busy, 30.0, 1.0) << "of the device time the two claims got";
  EXPECT_NEAR(100.0 * s70 / busy, 70.0, 1.0) << "of the device time the two claims got";
  EXPECT_GT(busy, 94.0) << "the two kept the device busy only " << busy << " % of 10 s";
}

}  // namespace
}  // namespace tessera::k8s::dra
