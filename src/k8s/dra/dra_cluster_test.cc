// The whole DRA cluster in one test: two simulated GPU nodes, each with a real tesserad, the real
// tessera-dra-plugin and the stand-in kubelet (plugin watcher and DRA manager), one stand-in API
// server, and Tessera's steering (DraSteering over the slices the plugins published) in the place
// of kube-scheduler's allocator: claims of mixed shapes (a share, a whole GPU, two GPUs, a
// weighted high-priority share) land where steering decides, each container's process stops at
// its claim's memory and tesserad holds each claim's share; a claim that finds no GPU waits, and
// fits once a claim is deleted and its GPU comes back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "k8s/deviceplugin/container_edits.h"
#include "k8s/dra/preparer.h"
#include "k8s/dra/slices.h"
#include "k8s/dra/steering.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/dra_node.h"
#include "testing/support/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using namespace std::chrono_literals;
using k8s::testing::ClaimJson;
using k8s::testing::DraNode;
using k8s::testing::DraRequest;
using k8s::testing::kGiB;
using k8s::testing::PodWithClaims;
using k8s::testing::TestProgram;
using k8s::testing::WaitUntil;

class DraClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    for (const char* name : {"dra-a", "dra-b"}) {
      api_.CreateNode({{"metadata", {{"name", name}}}});
      nodes_[name] = std::make_unique<DraNode>(name, "SimA:16GiB:80,SimA:16GiB:80", api_.url());
      ASSERT_TRUE(nodes_[name]->Start());
      nodes_[name]->StartPlugin();
    }
    for (auto& [name, n] : nodes_) ASSERT_TRUE(n->WaitRegistered());
    ASSERT_TRUE(WaitUntil([&] { return api_.ListResources("ResourceSlice").size() == 2; }, 20s));
    klass_ = {{"metadata", {{"name", "gpu.tessera.io"}}},
              {"spec",
               {{"selectors",
                 Json::array({{{"cel",
                                {{"expression",
                                  "device.driver == \"gpu.tessera.io\" && "
                                  "device.attributes[\"gpu.tessera.io\"].type == \"gpu\""}}}}})}}}};
    ASSERT_TRUE(api_.CreateResource("DeviceClass", klass_).ok());
    auto s = DraSteering::Create({{"dra-a", 32000, 131072}, {"dra-b", 32000, 131072}},
                                 api_.ListResources("ResourceSlice"),
                                 api_.ListResources("DeviceClass"), "bestfit", nullptr);
    ASSERT_TRUE(s.ok()) << s.error();
    steering_ = std::move(*s);
  }
  void TearDown() override {
    nodes_.clear();
    api_.Stop();
  }

  // A pod whose container "app" uses a new claim `requests`; steering places it (the claim
  // allocated and reserved for the pod, the pod bound) and its node's kubelet prepares it.
  // nullopt when no node takes it.
  std::optional<Json> Place(const std::string& name, const std::vector<DraRequest>& requests,
                            const std::optional<Json>& parameters = std::nullopt) {
    Json pod = api_.CreatePod(PodWithClaims("team", name, {{"gpu", name}}, {{"app", {"gpu"}}}));
    auto claim =
        api_.CreateResource("ResourceClaim", ClaimJson("team", name, requests, parameters));
    EXPECT_TRUE(claim.ok()) << claim.error();
    auto d = steering_->Steer(1000, 1024, {*claim});
    EXPECT_TRUE(d.ok()) << d.error();
    if (!d.ok() || !*d) return std::nullopt;
    Json status = {
        {"allocation", (*d)->allocations[0]},
        {"reservedFor",
         Json::array({{{"resource", "pods"}, {"name", name}, {"uid", pod["metadata"]["uid"]}}})}};
    EXPECT_TRUE(api_.SetClaimStatus("team", name, status));
    EXPECT_TRUE(nodes_.at((*d)->node)
                    ->client()
                    .BindPod("team", name, pod["metadata"]["uid"], (*d)->node)
                    .ok());
    pod = *api_.GetPod("team", name);
    Status prepared = nodes_.at((*d)->node)->kubelet().PrepareResources(pod);
    EXPECT_TRUE(prepared.ok()) << prepared.message();
    return pod;
  }
  // The pod and its claim go: kubelet unprepares, the scheduler's picture lets the devices go.
  void Delete(const Json& pod) {
    const std::string name = pod["metadata"]["name"], node = pod["spec"]["nodeName"];
    ASSERT_TRUE(nodes_.at(node)->kubelet().UnprepareResources(pod).ok());
    const Json claim = *api_.GetResource("ResourceClaim", "team", name);
    ASSERT_TRUE(steering_->RemoveAllocation(claim["status"]["allocation"]).ok());
    ASSERT_TRUE(steering_->RemovePod(node, 1000, 1024).ok());
    ASSERT_TRUE(api_.DeleteResource("ResourceClaim", "team", name));
    ASSERT_TRUE(api_.DeletePod("team", name));
  }
  const TesseradContainer* InTesserad(const Json& pod) {
    const std::string name = pod["metadata"]["name"];
    const std::string uid = (*api_.GetResource("ResourceClaim", "team", name))["metadata"]["uid"];
    status_ = nodes_.at(pod["spec"]["nodeName"])->sim().Status();
    return status_.Find(MakeContainerId(kClaimContainerPrefix, "team", name, uid));
  }
  DraRequest Share(const std::string& memory, const std::string& cores) {
    DraRequest r;
    r.capacity = {{"memory", memory}, {"cores", cores}};
    return r;
  }

  TestApiServer api_;
  std::map<std::string, std::unique_ptr<DraNode>> nodes_;
  Json klass_;
  std::unique_ptr<DraSteering> steering_;
  TesseradStatus status_;
};

TEST_F(DraClusterTest, ClaimsOfMixedShapesLandAsSteeredHoldTheirCapsAndGiveBackTheirGpus) {
  // A share: its process stops at exactly 4 GiB; tesserad holds 4 GiB and 30 %.
  auto share = Place("share", {Share("4Gi", "30")});
  ASSERT_TRUE(share);
  const TesseradContainer* c = InTesserad(*share);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->core_percent, 30u);
  DraNode& share_node = *nodes_.at((*share)["spec"]["nodeName"]);
  process::ChildProcess* oom = share_node.Run(*share, "app", {TestProgram("preload_tenant")});
  EXPECT_EQ(oom->WaitForKey("allocated", 30s), std::to_string(4 * kGiB));
  EXPECT_EQ(oom->Wait(20s), 0);
  // A weighted high-priority share packs beside it (bestfit), on the same GPU.
  auto weighted =
      Place("weighted", {Share("2Gi", "50")},
            Json::parse(R"({"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig",
                                        "weight": 4, "highPriority": true})"));
  ASSERT_TRUE(weighted);
  EXPECT_EQ((*weighted)["spec"]["nodeName"], (*share)["spec"]["nodeName"]);
  c = InTesserad(*weighted);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->weight, 4u);
  EXPECT_TRUE(c->high_priority);
  EXPECT_EQ(c->core_percent, 50u);
  // A whole GPU and two whole GPUs: the three untouched GPUs of the cluster.
  auto whole = Place("whole", {DraRequest{}});
  ASSERT_TRUE(whole);
  DraRequest two;
  two.count = 2;
  auto pair = Place("pair", {two});
  ASSERT_TRUE(pair);
  c = InTesserad(*pair);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->limits[0], Bytes(16 * kGiB));
  EXPECT_EQ(c->limits[1], Bytes(16 * kGiB));
  EXPECT_EQ(c->core_percent, 100u);
  process::ChildProcess* meminfo = nodes_.at((*pair)["spec"]["nodeName"])
                                       ->Run(*pair, "app", {TestProgram("shim_tenant"), "meminfo"});
  EXPECT_EQ(meminfo->WaitForKey("total", 30s), std::to_string(16 * kGiB));
  EXPECT_EQ(meminfo->Wait(20s), 0);
  // No whole GPU is left: the next waits.
  EXPECT_FALSE(Place("waiting", {DraRequest{}})) << "every GPU is held";
  // The whole GPU's claim is deleted: its container leaves tesserad, and the waiting claim fits.
  const TesseradContainer* held = InTesserad(*whole);
  ASSERT_NE(held, nullptr);
  const std::string id = held->id;
  const std::string whole_node = (*whole)["spec"]["nodeName"];
  Delete(*whole);
  EXPECT_EQ(nodes_.at(whole_node)->sim().Status().Find(id), nullptr);
  ASSERT_TRUE(api_.DeletePod("team", "waiting"));
  ASSERT_TRUE(api_.DeleteResource("ResourceClaim", "team", "waiting"));
  auto again = Place("waiting", {DraRequest{}});
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)["spec"]["nodeName"], whole_node);
}

}  // namespace
}  // namespace tessera::k8s::dra
