// DraSteering: the placement engine's choice for pods with claims, written as upstream's allocator
// writes allocations (the stand-in allocator restricted to the chosen devices writes the same),
// selectors respected, what is held counted, capacity back when allocations go, and claims it does
// not decide refused with the reason.
#include "k8s/dra/steering.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "k8s/dra/slices.h"
#include "testing/standins/dra_allocator.h"
#include "testing/support/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using k8s::testing::ClaimJson;
using k8s::testing::DraRequest;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

Json Slice(const std::string& node, NodeMode mode, int gpus, uint64_t gib,
           const std::string& model) {
  std::vector<NodeGpu> list;
  for (int i = 0; i < gpus; ++i) {
    list.push_back(
        {i, "GPU-" + node + std::to_string(i), model, Bytes(gib * kGiB), 16, true, std::nullopt});
  }
  Json spec = PoolSlices(mode, list, {})[0];
  spec["driver"] = kDriverName;
  spec["nodeName"] = node;
  spec["pool"] = {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}};
  return {{"metadata", {{"name", "00000-" + node}}}, {"spec", spec}};
}

Json GpuClass() {
  return {
      {"metadata", {{"name", "gpu.tessera.io"}}},
      {"spec",
       {{"selectors",
         Json::array(
             {{{"cel",
                {{"expression", "device.attributes[\"gpu.tessera.io\"].type == \"gpu\""}}}}})}}}};
}

Json Claim(const std::string& name, const std::map<std::string, std::string>& capacity,
           int count = 1, std::vector<std::string> selectors = {}) {
  DraRequest r;
  r.capacity = capacity;
  r.count = count;
  r.selectors = std::move(selectors);
  return ClaimJson("ns", name, {r});
}

class DraSteeringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    slices_ = {Slice("a-node", NodeMode::kCoreMem, 2, 16, "T4"),
               Slice("b-node", NodeMode::kCoreMem, 4, 32, "V100M32"),
               Slice("c-node", NodeMode::kExclusive, 2, 80, "H100")};
    auto s = DraSteering::Create(
        {{"a-node", 32000, 131072}, {"b-node", 64000, 262144}, {"c-node", 64000, 262144}}, slices_,
        {GpuClass()}, "bestfit", nullptr);
    ASSERT_TRUE(s.ok()) << s.error();
    steering_ = std::move(*s);
    verify_.SetSlices(slices_);
    verify_.SetClasses({GpuClass()});
  }
  // Steers and checks the stand-in allocator, restricted to the chosen devices, writes the same.
  std::optional<SteeringDecision> Steer(const std::vector<Json>& claims, int64_t cpu = 1000) {
    auto d = steering_->Steer(cpu, 1024, claims);
    EXPECT_TRUE(d.ok()) << d.error();
    if (!d.ok() || !*d) return std::nullopt;
    std::set<std::string> chosen;
    for (const Json& a : (*d)->allocations) {
      for (const Json& r : a["devices"]["results"]) chosen.insert(r["device"].get<std::string>());
    }
    auto check =
        verify_.Allocate({(*d)->node, {}}, claims,
                         [&](size_t, const std::string&, const DraAllocator::DeviceId& id) {
                           return chosen.count(id.device) != 0;
                         });
    EXPECT_TRUE(check.ok() && *check) << "the stand-in allocator refuses the steered devices";
    if (check.ok() && *check) {
      for (size_t c = 0; c < claims.size(); ++c) {
        const Json& mine = (*d)->allocations[c]["devices"]["results"];
        const Json& theirs = (**check)[c]["devices"]["results"];
        EXPECT_EQ(mine.size(), theirs.size());
        for (size_t k = 0; k < std::min(mine.size(), theirs.size()); ++k) {
          EXPECT_EQ(mine[k]["device"], theirs[k]["device"]);
          EXPECT_EQ(mine[k].value("consumedCapacity", Json()),
                    theirs[k].value("consumedCapacity", Json()));
        }
        EXPECT_EQ((*d)->allocations[c].value("nodeSelector", Json()),
                  (**check)[c].value("nodeSelector", Json()));
      }
      for (const Json& a : (*d)->allocations) verify_.AddAllocation(a);
    }
    return **d;
  }
  std::vector<Json> slices_;
  std::unique_ptr<DraSteering> steering_;
  DraAllocator verify_;
};

TEST_F(DraSteeringTest, ASharePacksOntoTheGpuThePolicyChooses) {
  auto first = Steer({Claim("c1", {{"memory", "4Gi"}, {"cores", "30"}})});
  ASSERT_TRUE(first);
  const Json& r = first->allocations[0]["devices"]["results"][0];
  EXPECT_EQ(r["driver"], kDriverName);
  EXPECT_EQ(r["pool"], first->node);
  EXPECT_EQ(r["consumedCapacity"], Json::parse(R"({"memory": "4Gi", "cores": "30"})"));
  EXPECT_EQ(r["shareID"].get<std::string>().size(), 36u);
  // bestfit puts the next share beside the first, on the same GPU.
  auto second = Steer({Claim("c2", {{"memory", "4Gi"}, {"cores", "30"}})});
  ASSERT_TRUE(second);
  EXPECT_EQ(second->node, first->node);
  EXPECT_EQ(second->allocations[0]["devices"]["results"][0]["device"], r["device"]);
  const int node = second->node == "a-node" ? 0 : 1;
  EXPECT_EQ(steering_->cluster().gpu_milli_free(node)[0], 400) << "30 + 30 % of its time held";
}

TEST_F(DraSteeringTest, WholeGpusSelectorsAndCapacityComingBack) {
  auto h100 = Steer(
      {Claim("big", {}, 2, {"device.attributes[\"gpu.tessera.io\"].productName == \"H100\""})});
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->node, "c-node");
  EXPECT_EQ(h100->allocations[0]["devices"]["results"].size(), 2u);
  EXPECT_FALSE(h100->allocations[0]["devices"]["results"][0].contains("shareID"));
  // The H100s are taken: the same ask finds no node.
  auto none = steering_->Steer(
      1000, 1024,
      {Claim("again", {}, 2, {"device.attributes[\"gpu.tessera.io\"].productName == \"H100\""})});
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_FALSE(*none);
  // The claim is deleted: its GPUs come back.
  ASSERT_TRUE(steering_->RemoveAllocation(h100->allocations[0]).ok());
  ASSERT_TRUE(steering_->RemovePod("c-node", 1000, 1024).ok());
  verify_.RemoveAllocation(h100->allocations[0]);
  EXPECT_TRUE(Steer(
      {Claim("again", {}, 2, {"device.attributes[\"gpu.tessera.io\"].productName == \"H100\""})}));
}

TEST_F(DraSteeringTest, WhatItDoesNotDecideIsLeftToKubeScheduler) {
  EXPECT_THAT(steering_->Steer(0, 0, {Claim("x", {{"cores", "30"}})}).error(),
              HasSubstr("asks cores but no memory"));
  Json first_available = Claim("fa", {});
  first_available["spec"]["devices"]["requests"][0] = Json::parse(
      R"({"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.tessera.io"}]})");
  EXPECT_THAT(steering_->Steer(0, 0, {first_available}).error(),
              HasSubstr("firstAvailable is left to kube-scheduler"));
  EXPECT_THAT(steering_->Steer(0, 0, {Claim("bw", {{"bandwidth", "1"}})}).error(),
              HasSubstr("capacity bandwidth is not one of gpu.tessera.io's"));
  EXPECT_THAT(steering_->Steer(0, 0, {}).error(), HasSubstr("ask no device"));
}

TEST_F(DraSteeringTest, AnAllocationKubeSchedulerMadeIsCounted) {
  // Upstream's allocator fills a-node's GPU 0 and 1; steering sees it and goes elsewhere.
  for (const char* name : {"u1", "u2"}) {
    auto a =
        verify_.Allocate({"a-node", {}}, {Claim(name, {{"memory", "16Gi"}, {"cores", "100"}})});
    ASSERT_TRUE(a.ok() && *a);
    verify_.AddAllocation((**a)[0]);
    ASSERT_TRUE(steering_->AddAllocation((**a)[0]).ok());
  }
  auto d = Steer({Claim("s", {{"memory", "8Gi"}, {"cores", "50"}})});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->node, "b-node");
}

}  // namespace
}  // namespace tessera::k8s::dra
