// The DRA plugin's parts on their own: the pool a node publishes (checked against upstream's
// ResourceSlice validation, as the stand-in API server applies it), reading a claim's allocation
// and our opaque configuration, and the refusals, each naming the claim, the field and the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/dra/claims.h"
#include "k8s/dra/slices.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using k8s::testing::AllocatedStatus;
using k8s::testing::ClaimJson;
using k8s::testing::DraRequest;
using k8s::testing::DraResult;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

std::vector<NodeGpu> TwoGpus() {
  return {{0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", Bytes(80 * kGiB), 16, true, std::nullopt},
          {1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", Bytes(81559ull << 20), 16, true, std::nullopt}};
}

// A slice as the publisher writes it around `content`.
Json Slice(const Json& content, int64_t count = 1) {
  Json spec = {{"driver", kDriverName},
               {"pool", {{"name", "node-a"}, {"generation", 1}, {"resourceSliceCount", count}}},
               {"nodeName", "node-a"}};
  for (const char* k : {"devices", "sharedCounters"}) {
    if (content.contains(k)) spec[k] = content[k];
  }
  return {{"metadata", {{"name", "00000-gpu.tessera.io-node-a-abcde"}}}, {"spec", spec}};
}

TEST(DraSlicesTest, ASharedNodePublishesConsumableMemoryAndCores) {
  const std::vector<Json> slices = PoolSlices(NodeMode::kCoreMem, TwoGpus(), {true, "535.104.05"});
  ASSERT_EQ(slices.size(), 1u);
  const Json& devices = slices[0]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  const Json expected = Json::parse(R"({
    "name": "gpu-0",
    "allowMultipleAllocations": true,
    "attributes": {
      "type": {"string": "gpu"}, "uuid": {"string": "GPU-aaaa"}, "index": {"int": 0},
      "productName": {"string": "NVIDIA A100-SXM4-80GB"}, "mode": {"string": "core_mem"},
      "driverVersion": {"version": "535.104.5"}},
    "capacity": {
      "memory": {"value": "80Gi", "requestPolicy": {"default": "80Gi",
                 "validRange": {"min": "256Mi", "max": "80Gi", "step": "256Mi"}}},
      "cores": {"value": "100", "requestPolicy": {"default": "100",
                "validRange": {"min": "1", "max": "100", "step": "1"}}}}})");
  EXPECT_EQ(devices[0], expected) << devices[0].dump(2);
  // A GPU whose memory is no whole number of steps: the range stops at the last whole step.
  EXPECT_EQ(devices[1]["capacity"]["memory"]["value"], "81559Mi");
  EXPECT_EQ(devices[1]["capacity"]["memory"]["requestPolicy"]["validRange"]["max"], "81408Mi");
  Status valid = ValidateResourceSlice(Slice(slices[0]));
  EXPECT_TRUE(valid.ok()) << valid.message();
}

TEST(DraSlicesTest, EveryModesPoolPassesUpstreamsValidation) {
  for (NodeMode mode : {NodeMode::kCoreMem, NodeMode::kMem, NodeMode::kShare, NodeMode::kMps,
                        NodeMode::kExclusive}) {
    const std::vector<Json> slices = PoolSlices(mode, TwoGpus(), {});
    ASSERT_EQ(slices.size(), 1u);
    Status valid = ValidateResourceSlice(Slice(slices[0]));
    EXPECT_TRUE(valid.ok()) << NodeModeName(mode) << ": " << valid.message();
  }
  const Json mem = PoolSlices(NodeMode::kMem, TwoGpus(), {})[0]["devices"][0];
  EXPECT_FALSE(mem["capacity"].contains("cores")) << "a mem node does not divide GPU time";
  const Json exclusive = PoolSlices(NodeMode::kExclusive, TwoGpus(), {})[0]["devices"][0];
  EXPECT_FALSE(exclusive.contains("allowMultipleAllocations"));
  EXPECT_FALSE(exclusive["capacity"]["memory"].contains("requestPolicy"));
  EXPECT_TRUE(PoolSlices(NodeMode::kCoreMem, {}, {}).empty()) << "no devices: no pool";
}

TEST(DraSlicesTest, MigInstancesConsumeTheirMemorySlicesFromTheirGpusCounterSet) {
  std::vector<NodeGpu> gpus = {
      {0, "MIG-1111", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", Bytes(40 * kGiB), 16, true,
       InventoryMig{"GPU-p0", "H100-80GB", "3g.40gb", 0}},
      {1, "MIG-2222", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", Bytes(10 * kGiB), 16, true,
       InventoryMig{"GPU-p0", "H100-80GB", "1g.10gb", 6}},
      {2, "MIG-3333", "NVIDIA H100 80GB HBM3 MIG 7g.80gb", Bytes(80 * kGiB), 16, true,
       InventoryMig{"GPU-p1", "H100-80GB", "7g.80gb", 0}}};
  const std::vector<Json> slices = PoolSlices(NodeMode::kMig, gpus, {});
  ASSERT_EQ(slices.size(), 2u) << "counters and devices may not share a slice";
  ASSERT_EQ(slices[0]["sharedCounters"].size(), 2u);
  EXPECT_EQ(slices[0]["sharedCounters"][0]["name"], "gpu-0-memory-slices");
  EXPECT_EQ(slices[0]["sharedCounters"][0]["counters"].size(), 8u);
  const Json& devices = slices[1]["devices"];
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0]["name"], "gpu-0-mig-0");
  EXPECT_EQ(devices[1]["name"], "gpu-0-mig-6");
  EXPECT_EQ(devices[2]["name"], "gpu-1-mig-0");
  EXPECT_EQ(devices[0]["consumesCounters"][0]["counters"].size(), 4u) << "3g.40gb takes 4 slices";
  EXPECT_TRUE(devices[1]["consumesCounters"][0]["counters"].contains("memory-slice-6"));
  EXPECT_EQ(devices[1]["attributes"]["profile"]["string"], "1g.10gb");
  EXPECT_EQ(devices[1]["attributes"]["type"]["string"], "mig");
  for (const Json& s : slices) {
    Status valid = ValidateResourceSlice(Slice(s, 2));
    EXPECT_TRUE(valid.ok()) << valid.message();
  }
  const std::vector<Json> plain = PoolSlices(NodeMode::kMig, gpus, {false, ""});
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0]["devices"][0].contains("consumesCounters"));
}

TEST(DraSlicesTest, TheStandInRefusesWhatUpstreamRefuses) {
  Json slice = Slice(PoolSlices(NodeMode::kCoreMem, TwoGpus(), {})[0]);
  Json bad = slice;
  bad["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["default"] = "100Gi";
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("default is more than max"));
  bad = slice;
  bad["spec"]["devices"][0].erase("allowMultipleAllocations");
  EXPECT_THAT(ValidateResourceSlice(bad).message(),
              HasSubstr("allowMultipleAllocations must be true"));
  bad = slice;
  bad["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["max"] = "80000Mi";
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("not a multiple of a given step"));
  bad = slice;
  bad["spec"]["allNodes"] = true;
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("multiple fields are set"));
  bad = slice;
  bad["spec"]["devices"][1]["name"] = "gpu-0";
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("Duplicate value"));
  bad = slice;
  bad["spec"]["devices"][0]["attributes"]["driverVersion"] = {{"version", "535.104.05"}};
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("semver"));
  bad = slice;
  bad["spec"]["pool"]["resourceSliceCount"] = 0;
  EXPECT_THAT(ValidateResourceSlice(bad).message(), HasSubstr("must be greater than zero"));
  Json moved = slice;
  moved["spec"]["nodeName"] = "node-b";
  EXPECT_THAT(ValidateResourceSlice(moved, &slice).message(),
              HasSubstr("spec.nodeName: field is immutable"));
}

TEST(DraSlicesTest, SemverOfDriverVersions) {
  EXPECT_EQ(SemverOf("550.54.15"), "550.54.15");
  EXPECT_EQ(SemverOf("535.104.05"), "535.104.5");
  EXPECT_EQ(SemverOf("470.82"), "470.82.0");
  EXPECT_EQ(SemverOf("550"), "");
  EXPECT_EQ(SemverOf("550.54.15-beta"), "");
}

class DraClaimsTest : public ::testing::Test {
 protected:
  Json Claim(const std::vector<DraResult>& results, const Json& config = Json::array()) {
    Json claim = ClaimJson("team", "infer", {DraRequest{}});
    claim["metadata"]["uid"] = "uid-1";
    claim["status"] = AllocatedStatus("node-a", results, config);
    return claim;
  }
  Result<ClaimPlan> Plan(const Json& claim, NodeMode mode = NodeMode::kCoreMem) {
    return PlanClaim(claim, ref_, "node-a", mode, PoolDevices(mode, TwoGpus()), 16);
  }
  ClaimRef ref_{"team", "uid-1", "infer"};
};

TEST_F(DraClaimsTest, AShareOfAGpu) {
  auto plan = Plan(Claim({{"gpu", "", "gpu-1", {{"memory", "4Gi"}, {"cores", "30"}}}}));
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->gpus.size(), 1u);
  EXPECT_EQ(plan->gpus[0], (ClaimGpu{"GPU-bbbb", 1, Bytes(4 * kGiB), 30, false}));
  ASSERT_EQ(plan->devices.size(), 1u);
  EXPECT_TRUE(plan->devices[0].share_id.has_value());
  EXPECT_EQ(plan->weight, 1u);
}

TEST_F(DraClaimsTest, NoConsumedCapacityIsTheWholeDevice) {
  auto plan = Plan(Claim({{"gpu", "", "gpu-0", {}, false}}));
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->gpus[0].memory, Bytes(80 * kGiB));
  EXPECT_EQ(plan->gpus[0].cores, 100);
  EXPECT_TRUE(plan->gpus[0].whole);
}

TEST_F(DraClaimsTest, WeightAndPriorityFromOurConfigTheClaimsOverTheClasss) {
  const Json config = Json::parse(R"([
    {"source": "FromClass", "opaque": {"driver": "gpu.tessera.io", "parameters":
      {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "weight": 2}}},
    {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"x": 1}}},
    {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "weight": 4,
                     "highPriority": true}}}])");
  auto plan = Plan(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}, {"cores", "10"}}}}, config));
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->weight, 4u);
  EXPECT_TRUE(plan->high_priority);
}

TEST_F(DraClaimsTest, RefusalsNameTheClaimTheFieldAndTheValue) {
  const std::string who = "ResourceClaim team/infer (uid uid-1): ";
  auto refused = [&](const Json& claim, NodeMode mode = NodeMode::kCoreMem) {
    auto plan = Plan(claim, mode);
    EXPECT_FALSE(plan.ok());
    return plan.ok() ? std::string() : plan.error();
  };
  EXPECT_EQ(refused(Claim({{"gpu", "", "gpu-0", {{"memory", "90Gi"}, {"cores", "30"}}}})),
            who +
                "status.allocation.devices.results[0].consumedCapacity.memory=\"90Gi\": device "
                "gpu-0 gives from 256Mi to 80Gi");
  EXPECT_EQ(refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}, {"cores", "130"}}}})),
            who +
                "status.allocation.devices.results[0].consumedCapacity.cores=\"130\": expected 1 "
                "to 100 (percent of the GPU's time)");
  EXPECT_EQ(refused(Claim({{"gpu", "", "gpu-7", {{"memory", "1Gi"}}}})),
            who +
                "status.allocation.devices.results[0].device=\"gpu-7\": no such device in pool "
                "node-a (it has gpu-0, gpu-1)");
  EXPECT_EQ(
      refused(Claim({{"gpu", "node-b", "gpu-0", {{"memory", "1Gi"}}}})),
      who + "status.allocation.devices.results[0].pool=\"node-b\": this node's pool is node-a");
  EXPECT_THAT(
      refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}, {"cores", "30"}}}}), NodeMode::kMem),
      HasSubstr("consumedCapacity.cores=\"30\": node mode mem does not divide GPU time"));
  const Json unknown =
      Json::parse(R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "turbo": true}}}])");
  EXPECT_EQ(refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}}}}, unknown)),
            who +
                "status.allocation.devices.config[0].opaque.parameters.turbo=true: unknown field; "
                "GpuConfig has weight and highPriority");
  const Json wrong_kind =
      Json::parse(R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v2", "kind": "GpuConfig"}}}])");
  EXPECT_EQ(
      refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}}}}, wrong_kind)),
      who +
          "status.allocation.devices.config[0].opaque.parameters.apiVersion=\"gpu.tessera.io/v2\": "
          "expected gpu.tessera.io/v1alpha1");
  const Json heavy = Json::parse(R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "weight": 40}}}])");
  EXPECT_EQ(refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}}}}, heavy)),
            who +
                "status.allocation.devices.config[0].opaque.parameters.weight=40: expected 1 to 16 "
                "(the GPUs' max_inst)");
  EXPECT_THAT(
      refused(Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}, {"cores", "30"}}},
                     {"gpu", "", "gpu-1", {{"memory", "1Gi"}, {"cores", "50"}}}})),
      HasSubstr(
          "cores 30 on GPU-aaaa but 50 on GPU-bbbb; tesserad gives a claim one GPU-time share"));
  EXPECT_THAT(refused(Claim({{"gpu", "", "gpu-0", {{"memory", "60Gi"}, {"cores", "30"}}},
                             {"gpu", "", "gpu-0", {{"memory", "30Gi"}, {"cores", "30"}}}})),
              HasSubstr("with the claim's other shares of gpu-0 it asks more than the device has"));
  Json unallocated = ClaimJson("team", "infer", {DraRequest{}});
  unallocated["metadata"]["uid"] = "uid-1";
  EXPECT_EQ(refused(unallocated), who + "status.allocation is empty: the claim is not allocated");
  Json other_uid = Claim({{"gpu", "", "gpu-0", {{"memory", "1Gi"}}}});
  other_uid["metadata"]["uid"] = "uid-2";
  EXPECT_THAT(refused(other_uid), HasSubstr("metadata.uid=\"uid-2\": kubelet asked for uid uid-1"));
}

TEST_F(DraClaimsTest, TwoSharesOfOneGpuInOneClaimAddUp) {
  auto plan = Plan(Claim({{"a", "", "gpu-0", {{"memory", "2Gi"}, {"cores", "20"}}},
                          {"b", "", "gpu-0", {{"memory", "1Gi"}, {"cores", "20"}}}}));
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->gpus.size(), 1u);
  EXPECT_EQ(plan->gpus[0].memory, Bytes(3 * kGiB));
  EXPECT_EQ(plan->gpus[0].cores, 40);
  EXPECT_EQ(plan->devices.size(), 2u);
}

}  // namespace
}  // namespace tessera::k8s::dra
