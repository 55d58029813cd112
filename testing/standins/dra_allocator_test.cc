// The DRA rules against upstream's documented behaviour, and the stand-in allocator on the pools
// tessera-dra-plugin publishes: the CEL subset (selectors of our DeviceClasses and claims),
// consumable capacity (requestPolicy rounding, validRange, validValues, defaults), and
// allocation (first fit in pool, slice and device order, shares of one GPU adding up, whole
// devices, distinct GPUs, counters, incomplete pools and generations, the configuration copied),
// and the deploy/ manifests (DeviceClasses and example claim templates) allocated on a pool.
#include "testing/standins/dra_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>

#include "k8s/dra/capacity.h"
#include "k8s/dra/cel.h"
#include "k8s/dra/claims.h"
#include "k8s/dra/slices.h"
#include "testing/support/dra_objects.h"

namespace tessera::k8s {
namespace {

using dra::Amount;
using dra::CapacityPolicy;
using dra::CelDevice;
using dra::CelProgram;
using dra::DeviceCapacity;
using testing::ClaimJson;
using testing::DraRequest;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

Json SliceFor(const std::string& node, NodeMode mode, const std::vector<NodeGpu>& gpus,
              int64_t generation = 1) {
  const std::vector<Json> content = dra::PoolSlices(mode, gpus, {});
  Json spec = {{"driver", dra::kDriverName},
               {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", 1}}},
               {"nodeName", node},
               {"devices", content.back()["devices"]}};
  return {{"metadata", {{"name", node + "-slice"}}}, {"spec", spec}};
}

std::vector<NodeGpu> Gpus(int n, uint64_t gib = 16,
                          const std::string& model = "NVIDIA A100-SXM4-80GB") {
  std::vector<NodeGpu> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(
        {i, "GPU-" + std::to_string(i), model, Bytes(gib * kGiB), 16, true, std::nullopt});
  }
  return out;
}

Json GpuClass() {
  return {{"metadata", {{"name", "gpu.tessera.io"}}},
          {"spec",
           {{"selectors",
             Json::array({{{"cel",
                            {{"expression",
                              "device.driver == \"gpu.tessera.io\" && "
                              "device.attributes[\"gpu.tessera.io\"].type == \"gpu\""}}}}})}}}};
}

Json Claim(const std::string& name, const std::map<std::string, std::string>& capacity,
           int64_t count = 1, const std::vector<std::string>& selectors = {}) {
  DraRequest r;
  r.capacity = capacity;
  r.count = count;
  r.selectors = selectors;
  Json c = ClaimJson("ns", name, {r});
  c["metadata"]["uid"] = "uid-" + name;
  return c;
}

// ---- CEL ----

CelDevice Device() {
  const Json d = dra::PoolSlices(NodeMode::kCoreMem, Gpus(1), {true, "550.54.15"})[0]["devices"][0];
  return CelDevice::FromSliceDevice(dra::kDriverName, d);
}

bool Eval(const std::string& expr) {
  auto p = CelProgram::Compile(expr);
  EXPECT_TRUE(p.ok()) << expr << ": " << p.error();
  if (!p.ok()) return false;
  auto m = p->Matches(Device());
  EXPECT_TRUE(m.ok()) << expr << ": " << m.error();
  return m.ok() && *m;
}

TEST(DraCelTest, SelectorsOnOurAttributes) {
  EXPECT_TRUE(Eval("device.driver == \"gpu.tessera.io\""));
  EXPECT_TRUE(Eval("device.attributes[\"gpu.tessera.io\"].type == 'gpu'"));
  EXPECT_TRUE(
      Eval("device.attributes[\"gpu.tessera.io\"].productName.startsWith(\"NVIDIA A100\")"));
  EXPECT_TRUE(
      Eval("device.attributes[\"gpu.tessera.io\"].productName.lowerAscii().contains(\"a100\")"));
  EXPECT_TRUE(
      Eval("device.attributes[\"gpu.tessera.io\"].index in [0, 2] && "
           "!(device.attributes[\"gpu.tessera.io\"].index > 3)"));
  EXPECT_TRUE(
      Eval("device.capacity[\"gpu.tessera.io\"].memory.compareTo(quantity(\"16Gi\")) >= 0"));
  EXPECT_TRUE(Eval("device.capacity[\"gpu.tessera.io\"].memory.isGreaterThan(quantity(\"8Gi\"))"));
  EXPECT_FALSE(Eval("device.capacity[\"gpu.tessera.io\"].cores.isLessThan(quantity(\"100\"))"));
  EXPECT_TRUE(Eval(
      "device.attributes[\"gpu.tessera.io\"].driverVersion.isGreaterThan(semver(\"535.0.0\"))"));
  EXPECT_TRUE(Eval("device.allowMultipleAllocations"));
  EXPECT_TRUE(
      Eval("has(device.attributes[\"gpu.tessera.io\"].uuid) && "
           "!has(device.attributes[\"gpu.tessera.io\"].profile)"));
  EXPECT_TRUE(Eval("device.attributes[\"gpu.tessera.io\"].mode == \"core_mem\" ? true : false"));
  // An unknown domain is an empty map; an unknown attribute an error, which a decided && hides.
  EXPECT_FALSE(Eval("has(device.attributes[\"other.example.com\"].type)"));
  EXPECT_FALSE(Eval("false && device.attributes[\"gpu.tessera.io\"].nothing == 1"));
  EXPECT_TRUE(Eval("device.attributes[\"gpu.tessera.io\"].nothing == 1 || true"));
  auto p = CelProgram::Compile("device.attributes[\"gpu.tessera.io\"].nothing == 1");
  ASSERT_TRUE(p.ok());
  auto m = p->Matches(Device());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error(), "no such key: nothing");
}

TEST(DraCelTest, WhatIsNotInTheSubsetIsRefusedAtCompileTime) {
  auto bad = CelProgram::Compile("device.attributes[\"gpu.tessera.io\"].type.matches(\"g.*\")");
  ASSERT_TRUE(bad.ok()) << "methods are checked when they run";
  EXPECT_THAT(bad->Matches(Device()).error(), HasSubstr("no method matches() on a string"));
  EXPECT_THAT(CelProgram::Compile("cel.bind(x, device, x.driver == 'a')").error(),
              HasSubstr("unknown name \"cel\""));
  EXPECT_THAT(CelProgram::Compile("device.driver == ").error(),
              HasSubstr("position 18: the expression ends too early"));
  EXPECT_THAT(CelProgram::Compile("device.driver = 'x'").error(), HasSubstr("unexpected '='"));
  EXPECT_THAT(CelProgram::Compile("exists(device)").error(),
              HasSubstr("function exists() is not in the CEL subset"));
  auto not_bool = CelProgram::Compile("device.driver");
  EXPECT_THAT(not_bool->Matches(Device()).error(), HasSubstr("gives a string, not a bool"));
}

// ---- consumable capacity (KEP-5075, CapacityRequestPolicy's documented rules) ----

DeviceCapacity Memory() {
  return dra::ParseCapacities(Json::parse(R"({"memory": {"value": "16Gi", "requestPolicy":
      {"default": "16Gi", "validRange": {"min": "256Mi", "max": "16Gi", "step": "256Mi"}}}})"),
                              "d")
      ->at("memory");
}

Amount Q(const std::string& text) { return *dra::ParseAmount(text, "q"); }

TEST(DraCapacityTest, ValidRangeRoundsUpToMinPlusSteps) {
  const DeviceCapacity mem = Memory();
  EXPECT_EQ(dra::ConsumedOf(Q("4Gi"), mem).milli, Q("4Gi").milli) << "on a step: as asked";
  EXPECT_EQ(dra::ConsumedOf(Q("4Gi"), mem).text, "4Gi");
  EXPECT_EQ(dra::ConsumedOf(Q("4100Mi"), mem).milli, Q("4352Mi").milli) << "up to the next step";
  EXPECT_EQ(dra::ConsumedOf(Q("4100Mi"), mem).text, "4352Mi");
  EXPECT_EQ(dra::ConsumedOf(Q("100Mi"), mem).milli, Q("256Mi").milli) << "below min: min";
  EXPECT_EQ(dra::ConsumedOf(std::nullopt, mem).milli, Q("16Gi").milli) << "not asked: the default";
  EXPECT_TRUE(dra::ViolatesPolicy(dra::ConsumedOf(Q("17Gi"), mem), mem.policy)) << "above max";
  EXPECT_FALSE(dra::ViolatesPolicy(dra::ConsumedOf(Q("16Gi"), mem), mem.policy));
  // Cores: 1-100 in steps of 1; a fraction rounds up in whole units.
  const DeviceCapacity cores =
      dra::ParseCapacities(Json::parse(R"({"cores": {"value": "100", "requestPolicy":
      {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}}})"),
                           "d")
          ->at("cores");
  EXPECT_EQ(dra::ConsumedOf(Q("30"), cores).milli, 30000);
  EXPECT_EQ(dra::ConsumedOf(Q("500m"), cores).milli, 1000) << "below min: min";
  EXPECT_EQ(dra::ConsumedOf(Q("30500m"), cores).milli, 31000);
}

TEST(DraCapacityTest, ValidValuesAndNoPolicy) {
  const DeviceCapacity values =
      dra::ParseCapacities(Json::parse(R"({"bw": {"value": "10", "requestPolicy":
      {"default": "2", "validValues": ["1", "2", "5", "10"]}}})"),
                           "d")
          ->at("bw");
  EXPECT_EQ(dra::ConsumedOf(Q("3"), values).milli, 5000) << "the first valid value at or above";
  EXPECT_EQ(dra::ConsumedOf(Q("11"), values).milli, 11000) << "above every value: as asked";
  EXPECT_TRUE(dra::ViolatesPolicy(dra::ConsumedOf(Q("11"), values), values.policy));
  EXPECT_FALSE(dra::ViolatesPolicy(dra::ConsumedOf(std::nullopt, values), values.policy));
  const DeviceCapacity plain =
      dra::ParseCapacities(Json::parse(R"({"x": {"value": "8"}})"), "d")->at("x");
  EXPECT_EQ(dra::ConsumedOf(Q("3"), plain).milli, 3000) << "no policy: as asked";
  EXPECT_EQ(dra::ConsumedOf(std::nullopt, plain).milli, 8000) << "no policy, not asked: all of it";
}

TEST(DraCapacityTest, SharesAddUpToTheValue) {
  const dra::Capacities caps = *dra::ParseCapacities(
      dra::PoolSlices(NodeMode::kCoreMem, Gpus(1), {})[0]["devices"][0]["capacity"], "gpu-0");
  const dra::Consumption ask = {{"memory", Q("4Gi")}, {"cores", Q("30")}};
  dra::Consumption in_use = {{"memory", Q("12Gi")}, {"cores", Q("70")}};
  EXPECT_TRUE(*dra::FitsCapacity(in_use, ask, caps, {}));
  in_use["cores"] = Q("71");
  EXPECT_FALSE(*dra::FitsCapacity(in_use, ask, caps, {})) << "101 % of the GPU's time";
  EXPECT_FALSE(*dra::FitsCapacity({}, ask, caps, {{"memory", Q("13Gi")}}))
      << "being allocated counts too";
  EXPECT_THAT(dra::FitsCapacity({}, {{"bandwidth", Q("1")}}, caps, {}).error(),
              HasSubstr("some requested capacity has not been defined"));
}

// ---- the stand-in allocator on our pools ----

class DraAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    allocator_.SetClasses({GpuClass()});
    allocator_.SetSlices({SliceFor("node-a", NodeMode::kCoreMem, Gpus(2)),
                          SliceFor("node-b", NodeMode::kExclusive, Gpus(2))});
  }
  // Allocates `claims` on `node` and records them as allocated; their allocations, or none.
  std::optional<std::vector<Json>> Allocate(const std::string& node,
                                            const std::vector<Json>& claims) {
    auto r = allocator_.Allocate({node, {}}, claims);
    EXPECT_TRUE(r.ok()) << r.error();
    if (!r.ok() || !*r) return std::nullopt;
    for (const Json& a : **r) allocator_.AddAllocation(a);
    return **r;
  }
  DraAllocator allocator_;
};

TEST_F(DraAllocatorTest, AShareIsWrittenAsUpstreamWritesIt) {
  auto a = Allocate("node-a", {Claim("c", {{"memory", "4100Mi"}, {"cores", "30"}})});
  ASSERT_TRUE(a);
  const Json& r = (*a)[0]["devices"]["results"][0];
  EXPECT_EQ(r["request"], "gpu");
  EXPECT_EQ(r["driver"], "gpu.tessera.io");
  EXPECT_EQ(r["pool"], "node-a");
  EXPECT_EQ(r["device"], "gpu-0");
  EXPECT_EQ(r["consumedCapacity"], Json::parse(R"({"memory": "4352Mi", "cores": "30"})"));
  EXPECT_EQ(r["shareID"].get<std::string>().size(), 36u);
  EXPECT_EQ((*a)[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
            "node-a");
}

TEST_F(DraAllocatorTest, SharesFillAGpuFirstFitThenTheNext) {
  for (int i = 0; i < 4; ++i) {
    auto a =
        Allocate("node-a", {Claim("c" + std::to_string(i), {{"memory", "4Gi"}, {"cores", "20"}})});
    ASSERT_TRUE(a);
    EXPECT_EQ((*a)[0]["devices"]["results"][0]["device"], "gpu-0") << i;
  }
  auto fifth = Allocate("node-a", {Claim("c4", {{"memory", "1Gi"}, {"cores", "10"}})});
  ASSERT_TRUE(fifth);
  EXPECT_EQ((*fifth)[0]["devices"]["results"][0]["device"], "gpu-1") << "gpu-0's memory is taken";
  // A claim that asks nothing takes the defaults: all of a GPU, so only an untouched one.
  auto whole = Allocate("node-a", {Claim("w", {})});
  EXPECT_FALSE(whole) << "no GPU of node-a is untouched";
  auto two = Allocate("node-b", {Claim("two", {}, 2)});
  ASSERT_TRUE(two);
  EXPECT_EQ((*two)[0]["devices"]["results"].size(), 2u);
  EXPECT_FALSE((*two)[0]["devices"]["results"][0].contains("shareID"))
      << "exclusive devices are taken whole";
  EXPECT_FALSE(Allocate("node-b", {Claim("more", {})})) << "both are taken";
}

TEST_F(DraAllocatorTest, AShareMayNotBeAskedOfAWholeDeviceOrBeyondThePolicy) {
  EXPECT_FALSE(Allocate("node-a", {Claim("big", {{"memory", "17Gi"}})})) << "above max";
  // Exclusive devices have no request policy: asking memory filters by value, and takes the device.
  auto a = Allocate("node-b", {Claim("m", {{"memory", "4Gi"}})});
  ASSERT_TRUE(a);
  EXPECT_FALSE((*a)[0]["devices"]["results"][0].contains("consumedCapacity"));
}

TEST_F(DraAllocatorTest, SharesOfOneClaimOnOneGpuUnlessDistinct) {
  // The devices of one request come one after the other in order (never the same twice)...
  DraRequest r;
  r.name = "gpus";
  r.count = 2;
  r.capacity = {{"memory", "2Gi"}, {"cores", "10"}};
  auto a = Allocate("node-a", {ClaimJson("ns", "count", {r})});
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)[0]["devices"]["results"][0]["device"], "gpu-0");
  EXPECT_EQ((*a)[0]["devices"]["results"][1]["device"], "gpu-1");
  // ...but two requests each start from the first device, so both may share one GPU...
  DraRequest x = r, y = r;
  x.name = "x";
  y.name = "y";
  x.count = y.count = 1;
  auto b = Allocate("node-a", {ClaimJson("ns", "same", {x, y})});
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0]["devices"]["results"][0]["device"], (*b)[0]["devices"]["results"][1]["device"]);
  // ...unless a constraint keeps their GPUs apart.
  Json distinct = ClaimJson("ns", "distinct", {x, y});
  distinct["spec"]["devices"]["constraints"] =
      Json::parse(R"([{"requests": ["x", "y"], "distinctAttribute": "gpu.tessera.io/uuid"}])");
  auto c = Allocate("node-a", {distinct});
  ASSERT_TRUE(c);
  EXPECT_NE((*c)[0]["devices"]["results"][0]["device"], (*c)[0]["devices"]["results"][1]["device"]);
}

TEST_F(DraAllocatorTest, SelectorsConfigAndModes) {
  EXPECT_FALSE(Allocate(
      "node-a", {Claim("h100", {{"memory", "1Gi"}}, 1,
                       {"device.attributes[\"gpu.tessera.io\"].productName.contains(\"H100\")"})}));
  auto idx = Allocate("node-a", {Claim("one", {{"memory", "1Gi"}}, 1,
                                       {"device.attributes[\"gpu.tessera.io\"].index == 1"})});
  ASSERT_TRUE(idx);
  EXPECT_EQ((*idx)[0]["devices"]["results"][0]["device"], "gpu-1");
  // A CEL error aborts the allocation with the message, as upstream.
  auto err = allocator_.Allocate(
      {"node-a", {}},
      {Claim("bad", {}, 1, {"device.attributes[\"gpu.tessera.io\"].nothing == 1"})});
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(err.error(), HasSubstr("CEL runtime error: no such key: nothing"));
  // The class's config first (FromClass), then the claim's; one naming every request loses the
  // list.
  Json klass = GpuClass();
  klass["spec"]["config"] = Json::parse(R"([{"opaque": {"driver": "gpu.tessera.io", "parameters":
      {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "weight": 2}}}])");
  allocator_.SetClasses({klass});
  Json c = Claim("cfg", {{"memory", "1Gi"}});
  c["spec"]["devices"]["config"] =
      Json::parse(R"([{"requests": ["gpu"], "opaque": {"driver": "gpu.tessera.io",
      "parameters": {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig", "highPriority": true}}}])");
  auto cfg = Allocate("node-a", {c});
  ASSERT_TRUE(cfg);
  const Json& config = (*cfg)[0]["devices"]["config"];
  ASSERT_EQ(config.size(), 2u);
  EXPECT_EQ(config[0]["source"], "FromClass");
  EXPECT_EQ(config[1]["source"], "FromClaim");
  EXPECT_FALSE(config[1].contains("requests"));
  // What the plugin reads from it: the claim's config over the class's.
  Json allocated = c;
  allocated["status"]["allocation"] = (*cfg)[0];
  auto plan = dra::PlanClaim(allocated, {"ns", "uid-cfg", "cfg"}, "node-a", NodeMode::kCoreMem,
                             dra::PoolDevices(NodeMode::kCoreMem, Gpus(2)), 16);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->weight, 2u);
  EXPECT_TRUE(plan->high_priority);
  // All: every matching device of the node; none missing.
  DraRequest all;
  all.all = true;
  auto every = Allocate("node-b", {ClaimJson("ns", "all", {all})});
  ASSERT_TRUE(every);
  EXPECT_EQ((*every)[0]["devices"]["results"].size(), 2u);
}

TEST_F(DraAllocatorTest, OnlyTheHighestGenerationOfACompletePoolCounts) {
  Json old_gen = SliceFor("node-c", NodeMode::kCoreMem, Gpus(2, 16), 1);
  Json new_gen = SliceFor("node-c", NodeMode::kCoreMem, Gpus(2, 40), 2);
  new_gen["metadata"]["name"] = "node-c-slice-2";
  allocator_.SetSlices({old_gen, new_gen});
  auto a = Allocate("node-c", {Claim("c", {{"memory", "30Gi"}})});
  ASSERT_TRUE(a) << "the 40 GiB devices of generation 2";
  Json incomplete = SliceFor("node-d", NodeMode::kCoreMem, Gpus(2));
  incomplete["spec"]["pool"]["resourceSliceCount"] = 2;
  allocator_.SetSlices({incomplete});
  EXPECT_FALSE(Allocate("node-d", {Claim("c", {{"memory", "1Gi"}})}))
      << "an incomplete pool gives nothing";
}

TEST_F(DraAllocatorTest, CountersKeepOverlappingPartitionsApart) {
  // Two partitions of one GPU that share memory slice 1.
  const Json slices = Json::parse(R"([
    {"metadata": {"name": "a-0"}, "spec": {"driver": "gpu.tessera.io", "nodeName": "node-m",
      "pool": {"name": "node-m", "generation": 1, "resourceSliceCount": 2},
      "sharedCounters": [{"name": "gpu-0-memory-slices", "counters": {
        "memory-slice-0": {"value": "1"}, "memory-slice-1": {"value": "1"}, "memory-slice-2": {"value": "1"}}}]}},
    {"metadata": {"name": "a-1"}, "spec": {"driver": "gpu.tessera.io", "nodeName": "node-m",
      "pool": {"name": "node-m", "generation": 1, "resourceSliceCount": 2},
      "devices": [
        {"name": "p01", "attributes": {"type": {"string": "mig"}}, "consumesCounters": [{"counterSet": "gpu-0-memory-slices",
          "counters": {"memory-slice-0": {"value": "1"}, "memory-slice-1": {"value": "1"}}}]},
        {"name": "p12", "attributes": {"type": {"string": "mig"}}, "consumesCounters": [{"counterSet": "gpu-0-memory-slices",
          "counters": {"memory-slice-1": {"value": "1"}, "memory-slice-2": {"value": "1"}}}]},
        {"name": "p2", "attributes": {"type": {"string": "mig"}}, "consumesCounters": [{"counterSet": "gpu-0-memory-slices",
          "counters": {"memory-slice-2": {"value": "1"}}}]}]}}])");
  allocator_.SetSlices({slices[0], slices[1]});
  Json mig = GpuClass();
  mig["metadata"]["name"] = "mig.gpu.tessera.io";
  mig["spec"]["selectors"][0]["cel"]["expression"] =
      "device.attributes[\"gpu.tessera.io\"].type == \"mig\"";
  allocator_.SetClasses({mig});
  DraRequest r;
  r.device_class = "mig.gpu.tessera.io";
  r.count = 2;
  auto two = Allocate("node-m", {ClaimJson("ns", "two", {r})});
  ASSERT_TRUE(two);
  EXPECT_EQ((*two)[0]["devices"]["results"][0]["device"], "p01");
  EXPECT_EQ((*two)[0]["devices"]["results"][1]["device"], "p2") << "p12 overlaps p01's slice 1";
  r.count = 1;
  EXPECT_FALSE(Allocate("node-m", {ClaimJson("ns", "third", {r})})) << "p12's slices are taken";
}

// The DeviceClasses and example ResourceClaimTemplates of deploy/kubernetes/dra, allocated on
// pools of our plugin: each template finds what it asks.
Json ToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    Json o = Json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = ToJson(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    Json a = Json::array();
    for (const auto& v : n) a.push_back(ToJson(v));
    return a;
  }
  if (!n.IsScalar()) return Json();
  const std::string s = n.Scalar();
  if (n.Tag() != "!") {  // a plain scalar: a number or a bool when it reads as one
    if (s == "true" || s == "false") return s == "true";
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0') return static_cast<int64_t>(v);
  }
  return s;
}

TEST(DraManifestsTest, TheExampleTemplatesAllocateOnOurPools) {
  std::vector<Json> classes, templates;
  for (const char* file : {"00-deviceclasses.yaml", "claim-templates.yaml"}) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(std::string(TESSERA_SOURCE_DIR) +
                                                       "/deploy/kubernetes/dra/" + file)) {
      Json j = ToJson(doc);
      if (j["kind"] == "DeviceClass") classes.push_back(j);
      if (j["kind"] == "ResourceClaimTemplate") templates.push_back(j);
    }
  }
  ASSERT_EQ(classes.size(), 2u);
  ASSERT_EQ(templates.size(), 5u);
  std::vector<NodeGpu> migs = {{0, "MIG-1", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", Bytes(10 * kGiB),
                                16, true, InventoryMig{"GPU-p", "H100-80GB", "1g.10gb", 0}},
                               {1, "MIG-2", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", Bytes(40 * kGiB),
                                16, true, InventoryMig{"GPU-p", "H100-80GB", "3g.40gb", 4}}};
  std::vector<Json> slices = {SliceFor("shared", NodeMode::kCoreMem, Gpus(2, 80))};
  const std::vector<Json> mig_content = dra::PoolSlices(NodeMode::kMig, migs, {});
  for (size_t i = 0; i < mig_content.size(); ++i) {
    Json spec = mig_content[i];
    spec["driver"] = dra::kDriverName;
    spec["nodeName"] = "mig";
    spec["pool"] = {{"name", "mig"}, {"generation", 1}, {"resourceSliceCount", mig_content.size()}};
    slices.push_back({{"metadata", {{"name", "mig-" + std::to_string(i)}}}, {"spec", spec}});
  }
  for (const Json& t : templates) {
    DraAllocator allocator;
    allocator.SetClasses(classes);
    allocator.SetSlices(slices);
    Json claim = {{"metadata", {{"namespace", "default"}, {"name", t["metadata"]["name"]}}},
                  {"spec", t["spec"]["spec"]}};
    const std::string node = t["metadata"]["name"] == "mig-1g" ? "mig" : "shared";
    auto a = allocator.Allocate({node, {}}, {claim});
    ASSERT_TRUE(a.ok()) << t["metadata"]["name"] << ": " << a.error();
    ASSERT_TRUE(*a) << t["metadata"]["name"] << " does not fit a fresh node";
    Json allocated = claim;
    allocated["metadata"]["uid"] = "u";
    allocated["status"]["allocation"] = (**a)[0];
    const NodeMode mode = node == "mig" ? NodeMode::kMig : NodeMode::kCoreMem;
    auto plan = dra::PlanClaim(allocated, {"default", "u", t["metadata"]["name"]}, node, mode,
                               dra::PoolDevices(mode, node == "mig" ? migs : Gpus(2, 80)), 16);
    ASSERT_TRUE(plan.ok()) << plan.error();
    const std::string name = t["metadata"]["name"];
    if (name == "gpu-4gi-30pct") {
      EXPECT_EQ(plan->gpus[0].memory, Bytes(4 * kGiB));
      EXPECT_EQ(plan->gpus[0].cores, 30);
    } else if (name == "whole-gpu") {
      EXPECT_EQ(plan->gpus[0].memory, Bytes(80 * kGiB));
      EXPECT_EQ(plan->gpus[0].cores, 100);
    } else if (name == "two-gpus") {
      ASSERT_EQ(plan->gpus.size(), 2u);
    } else if (name == "mig-1g") {
      EXPECT_EQ(plan->devices[0].device, "gpu-0-mig-0");
    } else if (name == "priority-8gi-50pct") {
      EXPECT_EQ(plan->weight, 4u);
      EXPECT_TRUE(plan->high_priority);
      EXPECT_EQ(plan->gpus[0].cores, 50);
    }
  }
}

}  // namespace
}  // namespace tessera::k8s
