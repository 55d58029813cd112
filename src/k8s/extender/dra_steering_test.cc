// tessera-extender's DRA door against the stand-in API server: gated pods' claims allocated where
// steering decides and the gate removed, pods whose claims steering does not decide handed on to
// kube-scheduler, a pod that fits nowhere kept gated with an Event, a template's claim not made yet
// waited for, and a conflicting write left for the next round.
#include "k8s/extender/dra_steering.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/dra/slices.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/dra_objects.h"

namespace tessera::extender {
namespace {

using k8s::Json;
using k8s::testing::ClaimJson;
using k8s::testing::DraRequest;
using k8s::testing::PodWithClaims;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

class DraSteeringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    k8s::ClientConfig c;
    c.server = api_.url();
    client_ = std::make_unique<k8s::ApiClient>(c);
    for (const char* node : {"n-1", "n-2"}) {
      api_.CreateNode({{"metadata", {{"name", node}}},
                       {"status", {{"allocatable", {{"cpu", "32"}, {"memory", "128Gi"}}}}}});
      std::vector<k8s::NodeGpu> gpus;
      for (int i = 0; i < 2; ++i) {
        gpus.push_back({i, std::string("GPU-") + node + std::to_string(i), "T4", Bytes(16 * kGiB),
                        16, true, std::nullopt});
      }
      Json spec = k8s::dra::PoolSlices(k8s::NodeMode::kCoreMem, gpus, {})[0];
      spec["driver"] = k8s::dra::kDriverName;
      spec["nodeName"] = node;
      spec["pool"] = {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}};
      ASSERT_TRUE(api_.CreateResource(
                          "ResourceSlice",
                          {{"metadata", {{"name", std::string("00000-") + node}}}, {"spec", spec}})
                      .ok());
    }
    ASSERT_TRUE(
        api_.CreateResource(
                "DeviceClass",
                {{"metadata", {{"name", "gpu.tessera.io"}}},
                 {"spec",
                  {{"selectors",
                    Json::array(
                        {{{"cel", {{"expression", "device.driver == \"gpu.tessera.io\""}}}}})}}}})
            .ok());
    DraSteeringOptions o;
    o.policy = "bestfit";
    controller_ = std::make_unique<DraSteeringController>(client_.get(), o);
  }
  void TearDown() override {
    controller_.reset();
    client_.reset();  // its kept-alive connections too, or the server waits them out
    api_.Stop();
  }
  Json GatedPod(const std::string& name, const std::vector<DraRequest>& requests) {
    Json pod = PodWithClaims("team", name, {{"gpu", name}}, {{"app", {"gpu"}}});
    pod["spec"]["schedulingGates"] = Json::array({{{"name", kSteeringGate}}});
    pod["spec"]["containers"][0]["resources"]["requests"] = {{"cpu", "2"}, {"memory", "4Gi"}};
    EXPECT_TRUE(api_.CreateResource("ResourceClaim", ClaimJson("team", name, requests)).ok());
    return api_.CreatePod(pod);
  }
  DraRequest Share(const std::string& memory, const std::string& cores) {
    DraRequest r;
    r.capacity = {{"memory", memory}, {"cores", cores}};
    return r;
  }
  Json Claim(const std::string& name) { return *api_.GetResource("ResourceClaim", "team", name); }
  bool IsGated(const std::string& name) {
    const Json pod = *api_.GetPod("team", name);
    return pod["spec"].contains("schedulingGates") && !pod["spec"]["schedulingGates"].is_null();
  }

  k8s::TestApiServer api_;
  std::unique_ptr<k8s::ApiClient> client_;
  std::unique_ptr<DraSteeringController> controller_;
};

TEST_F(DraSteeringTest, AGatedPodsClaimIsAllocatedWhereSteeringDecidesAndTheGateGoes) {
  const Json pod = GatedPod("infer", {Share("4Gi", "30")});
  auto round = controller_->RunOnce();
  ASSERT_TRUE(round.ok()) << round.error();
  EXPECT_EQ(round->steered, 1);
  EXPECT_FALSE(IsGated("infer"));
  const Json claim = Claim("infer");
  const Json& result = claim["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(result["driver"], "gpu.tessera.io");
  EXPECT_EQ(result["consumedCapacity"], Json::parse(R"({"memory": "4Gi", "cores": "30"})"));
  EXPECT_EQ(claim["status"]["reservedFor"][0]["uid"], pod["metadata"]["uid"]);
  EXPECT_EQ(claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
                 ["values"][0],
            result["pool"]);
  // The next round sees the allocation: bestfit packs the next share on the same GPU.
  GatedPod("second", {Share("4Gi", "30")});
  ASSERT_TRUE(controller_->RunOnce().ok());
  EXPECT_EQ(Claim("second")["status"]["allocation"]["devices"]["results"][0]["device"],
            result["device"]);
  EXPECT_EQ(Claim("second")["status"]["allocation"]["devices"]["results"][0]["pool"],
            result["pool"]);
}

TEST_F(DraSteeringTest, WhatSteeringDoesNotDecideGoesOnAndWhatFitsNowhereWaits) {
  GatedPod("cores-only", {[] {
             DraRequest r;
             r.capacity = {{"cores", "30"}};
             return r;
           }()});
  DraRequest five;
  five.count = 5;
  GatedPod("five", {five});
  auto round = controller_->RunOnce();
  ASSERT_TRUE(round.ok()) << round.error();
  EXPECT_EQ(round->handed_on, 1);
  EXPECT_EQ(round->waiting, 1);
  EXPECT_FALSE(IsGated("cores-only")) << "kube-scheduler allocates it";
  EXPECT_FALSE(Claim("cores-only")["status"].contains("allocation"));
  EXPECT_TRUE(IsGated("five")) << "four GPUs in the cluster";
  bool told = false;
  for (const Json& e : api_.Events("team")) {
    told = told || (e["reason"] == "TesseraNoGpu" && e["involvedObject"]["name"] == "five");
  }
  EXPECT_TRUE(told);
  // A pod whose template claim the resourceclaim controller has not made yet waits for it.
  Json templated = PodWithClaims("team", "templated", {}, {{"app", {"gpu"}}});
  templated["spec"]["resourceClaims"] =
      Json::array({{{"name", "gpu"}, {"resourceClaimTemplateName", "t"}}});
  templated["spec"]["schedulingGates"] = Json::array({{{"name", kSteeringGate}}});
  api_.CreatePod(templated);
  round = controller_->RunOnce();
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->waiting, 2);
  EXPECT_TRUE(IsGated("templated"));
}

}  // namespace
}  // namespace tessera::extender
