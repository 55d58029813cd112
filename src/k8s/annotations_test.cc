// Tests of the annotation parsers and writers: round trips, and one error per bad input that names
// the key, the value and what is allowed.
#include "k8s/annotations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

constexpr char kUuid0[] = "GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5";
constexpr char kUuid1[] = "GPU-00000000-0000-4000-8000-000000000001";

TEST(Inventory, RoundTrips) {
  GpuInventory inv;
  inv.mode = NodeMode::kMem;
  inv.gpus = {{0, kUuid0, "SimGPU", Bytes(17179869184), true},
              {1, kUuid1, "NVIDIA H200", Bytes(151397597184), false}};
  const std::string text = WriteGpuInventory(inv);
  auto back = ParseGpuInventory(text);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, inv);
  EXPECT_EQ(back->Find(kUuid1)->model, "NVIDIA H200");
  EXPECT_EQ(back->Find("GPU-nope"), nullptr);
}

// A GPU whose mode differs from the node's carries it; other values are refused by name.
TEST(Inventory, gpu_modes_AGpusOwnModeRoundTripsAndIsChecked) {
  GpuInventory inv;
  inv.mode = NodeMode::kCoreMem;
  inv.gpus = {{0, kUuid0, "SimGPU", Bytes(17179869184), true, std::nullopt, NodeMode::kMps},
              {1, kUuid1, "SimGPU", Bytes(17179869184), true}};
  const std::string text = WriteGpuInventory(inv);
  EXPECT_THAT(text, HasSubstr(R"("mode":"mps")"));
  auto back = ParseGpuInventory(text);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, inv);
  auto with = [](const std::string& node, const std::string& own) {
    return ParseGpuInventory(
        R"({"version":1,"mode":")" + node + R"(","gpus":[{"index":0,"uuid":")" + kUuid0 +
        R"(","model":"m","memory_bytes":1,"healthy":true,"mode":)" + own + "}]}");
  };
  EXPECT_TRUE(with("core_mem", R"("exclusive")").ok());
  auto r = with("core_mem", R"("turbo")");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("tessera.io/gpu-inventory: gpus[0].mode=\"turbo\": unknown GPU "
                                   "sharing mode"));
  r = with("core_mem", R"("mig")");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("gpus[0].mode=\"mig\" on a core_mem node; expected a GPU's own "
                                   "mode only off mig nodes, and never mig"));
  r = with("mig", R"("mps")");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("gpus[0].mode=\"mps\" on a mig node"));
  r = with("core_mem", "7");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error(), HasSubstr("gpus[0].mode"));
}

// A mig node lists its MIG devices with the GPU, model, profile and start of each; the parser
// checks each against the MIG tables and the devices of one GPU against each other.
constexpr char kMig0[] = "MIG-11111111-2222-4333-8444-555555555555";
constexpr char kMig1[] = "MIG-11111111-2222-4333-8444-555555555556";

TEST(Inventory, MigDevicesRoundTripAndAreCheckedAgainstTheTables) {
  GpuInventory inv;
  inv.mode = NodeMode::kMig;
  inv.gpus = {{0, kMig0, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", Bytes(42949672960), true,
               InventoryMig{kUuid0, "H100-80GB", "3g.40gb", 0}},
              {1, kMig1, "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", Bytes(10737418240), true,
               InventoryMig{kUuid0, "H100-80GB", "1g.10gb+me", 4}}};
  auto back = ParseGpuInventory(WriteGpuInventory(inv));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, inv);
  auto with = [&](const std::string& mig, const std::string& mode = "mig",
                  const std::string& uuid = kMig0) {
    return ParseGpuInventory(R"({"version":1,"mode":")" + mode +
                             R"(","gpus":[{"index":0,"uuid":")" + uuid +
                             R"(","model":"m","memory_bytes":5,"healthy":true)" +
                             (mig.empty() ? "" : R"(,"mig":)" + mig) + "}]}");
  };
  const std::string ok = R"({"gpu":")" + std::string(kUuid0) +
                         R"(","model":"H100-80GB","profile":"3g.40gb","start":4})";
  EXPECT_TRUE(with(ok).ok()) << with(ok).error();
  struct Case {
    std::string inventory;
    const char* message;
  };
  auto text = [](const Result<GpuInventory>& r) { return r.ok() ? std::string("ok") : r.error(); };
  const Case cases[] = {
      {text(with(ok, "core_mem")),
       "gpus[0].mig on a node in mode core_mem; expected MIG devices only on mig nodes"},
      {text(with(ok, "mig", kUuid1)),
       "gpus[0].uuid=\"GPU-00000000-0000-4000-8000-000000000001\": a MIG device's UUID; expected "
       "MIG-..."},
      {text(with("")),
       "gpus[0].mig is missing for MIG device MIG-11111111-2222-4333-8444-555555555555 on a mig "
       "node"},
      {text(with(R"({"gpu":"MIG-1","model":"H100-80GB","profile":"3g.40gb","start":0})")),
       "gpus[0].mig.gpu=\"MIG-1\": expected a GPU UUID"},
      {text(with(R"({"gpu":"GPU-1","model":"V100","profile":"3g.40gb","start":0})")),
       "gpus[0].mig.model=\"V100\": not a MIG-capable GPU model we know; expected one of A30"},
      {text(with(R"({"gpu":"GPU-1","model":"H100-80GB","profile":"3g.20gb","start":0})")),
       "gpus[0].mig.profile=\"3g.20gb\": not a MIG profile of the H100-80GB; expected one of the "
       "H100-80GB profiles"},
      {text(with(R"({"gpu":"GPU-1","model":"H100-80GB","profile":"3g.40gb","start":2})")),
       "gpus[0].mig.start=2: a 3g.40gb instance starts at {0,4}"},
      {text(with(R"({"gpu":"GPU-1","model":"H100-80GB","profile":"3g.40gb","start":9})")),
       "gpus[0].mig.start=9: expected a memory slice from 0 to 7"},
  };
  for (const Case& c : cases) EXPECT_THAT(c.inventory, HasSubstr(c.message));
  // Two 3g.40gb at slice 0 of one GPU overlap.
  GpuInventory overlap = inv;
  overlap.gpus[1].mig = InventoryMig{kUuid0, "H100-80GB", "3g.40gb", 0};
  auto refused = ParseGpuInventory(WriteGpuInventory(overlap));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("the MIG devices of GPU " + std::string(kUuid0) +
                                         " do not form a MIG layout"));
}

TEST(Inventory, ReadsTheDocumentedExampleAndIgnoresUnknownKeys) {
  auto inv = ParseGpuInventory(
      R"({"version": 1, "mode": "core_mem", "future": {"x": 1},
          "gpus": [{"index": 0, "uuid": "GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5",
                    "model": "SimGPU", "memory_bytes": 17179869184, "healthy": true, "numa": 0}]})");
  ASSERT_TRUE(inv.ok()) << inv.error();
  EXPECT_EQ(inv->mode, NodeMode::kCoreMem);
  ASSERT_EQ(inv->gpus.size(), 1u);
  EXPECT_EQ(inv->gpus[0].memory, Bytes(17179869184));
}

TEST(Inventory, ErrorsNameKeyValueAndWhatIsAllowed) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"{", "tessera.io/gpu-inventory: \"{\" is not valid JSON"},
      {"[1]", "is not a JSON object"},
      {R"({"mode":"mem","gpus":[]})", "version is missing; expected 1"},
      {R"({"version":2,"mode":"mem","gpus":[]})", "version=2: expected 1"},
      {R"({"version":1,"mode":"fast","gpus":[]})",
       "mode=\"fast\": unknown GPU sharing mode; expected core_mem, mem, share, exclusive, mig or "
       "mps"},
      {R"({"version":1,"mode":"mem"})", "gpus is missing"},
      {R"({"version":1,"mode":"mem","gpus":[{"index":0,"uuid":"gpu0","model":"m","memory_bytes":1,"healthy":true}]})",
       "gpus[0].uuid=\"gpu0\": expected a GPU UUID"},
      {R"({"version":1,"mode":"mem","gpus":[{"index":0,"uuid":"GPU-1","model":"m","memory_bytes":0,"healthy":true}]})",
       "gpus[0].memory_bytes=0: expected the GPU's memory in bytes (> 0)"},
      {R"({"version":1,"mode":"mem","gpus":[{"index":0,"uuid":"GPU-1","model":"m","memory_bytes":"16Gi","healthy":true}]})",
       "gpus[0].memory_bytes=\"16Gi\""},
      {R"({"version":1,"mode":"mem","gpus":[{"index":0,"uuid":"GPU-1","model":"m","memory_bytes":5,"healthy":"yes"}]})",
       "gpus[0].healthy=\"yes\": expected true or false"},
      {R"({"version":1,"mode":"mem","gpus":[{"index":0,"uuid":"GPU-1","model":"m","memory_bytes":5,"healthy":true},{"index":1,"uuid":"GPU-1","model":"m","memory_bytes":5,"healthy":true}]})",
       "gpus[1].uuid=\"GPU-1\": listed twice"},
  };
  for (const Case& c : cases) {
    auto r = ParseGpuInventory(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_THAT(r.error(), HasSubstr(c.message)) << c.json;
    EXPECT_THAT(r.error(), HasSubstr("tessera.io/gpu-inventory")) << c.json;
  }
}

TEST(Assignment, RoundTripsAndFindsContainers) {
  Assignment a;
  a.node = "gpu-node-3";
  a.seq = 42;
  a.containers = {{"init", {{kUuid0, Bytes(1u << 30), *Percent::FromInt(100)}}},
                  {"app",
                   {{kUuid0, Bytes(2147483648), *Percent::FromInt(30)},
                    {kUuid1, Bytes(2147483648), *Percent::FromInt(30)}}}};
  auto back = ParseAssignment(WriteAssignment(a));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, a);
  ASSERT_NE(back->Find("app"), nullptr);
  EXPECT_EQ(back->Find("app")->gpus[1].uuid, kUuid1);
  EXPECT_EQ(back->Find("sidecar"), nullptr);
}

TEST(Assignment, ReadsTheDocumentedExample) {
  auto a = ParseAssignment(R"({"version": 1, "node": "gpu-node-3", "seq": 42,
     "containers": [{"name": "app", "gpus": [{"uuid": "GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5",
                     "mem_bytes": 2147483648, "core_percent": 30}]}]})");
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_EQ(a->node, "gpu-node-3");
  EXPECT_EQ(a->seq, 42u);
  EXPECT_EQ(a->containers[0].gpus[0].mem, Bytes(2147483648));
  EXPECT_EQ(a->containers[0].gpus[0].core.value(), 30);
}

TEST(Assignment, ErrorsNameKeyValueAndWhatIsAllowed) {
  const std::string head = R"({"version":1,"node":"n","seq":1,"containers":)";
  struct Case {
    std::string json;
    const char* message;
  };
  auto with = [&](const std::string& containers) { return head + containers + "}"; };
  const Case cases[] = {
      {"not json", "tessera.io/assignment: \"not json\" is not valid JSON"},
      {R"({"version":1,"seq":1,"containers":[]})", "tessera.io/assignment: node is missing"},
      {R"({"version":1,"node":"n","seq":-1,"containers":[]})", "seq=-1: expected"},
      {with("{}"), "containers={}: expected an array"},
      {with(R"([{"gpus":[]}])"), "containers[0].name is missing"},
      {with(R"([{"name":"a","gpus":[]}])"), "containers[0].gpus=[]: expected at least one GPU"},
      {with(R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1,"core_percent":0}]}])"),
       "containers[0].gpus[0].core_percent=0: expected a whole percentage from 1 to 100"},
      {with(R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1,"core_percent":150}]}])"),
       "core_percent=150"},
      {with(R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":0,"core_percent":10}]}])"),
       "containers[0].gpus[0].mem_bytes=0: expected the memory cap in bytes (> 0)"},
      {with(R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1.5,"core_percent":10}]}])"),
       "mem_bytes=1.5"},
      {with(R"([{"name":"a","gpus":[{"uuid":"nvidia0","mem_bytes":1,"core_percent":10}]}])"),
       "containers[0].gpus[0].uuid=\"nvidia0\": expected a GPU UUID"},
      {with(
           R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1,"core_percent":10},{"uuid":"GPU-1","mem_bytes":1,"core_percent":10}]}])"),
       "gpus[1].uuid=\"GPU-1\": listed twice"},
      {with(
           R"([{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1,"core_percent":10}]},{"name":"a","gpus":[{"uuid":"GPU-1","mem_bytes":1,"core_percent":10}]}])"),
       "containers[1].name=\"a\": listed twice"},
  };
  for (const Case& c : cases) {
    auto r = ParseAssignment(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_THAT(r.error(), HasSubstr(c.message)) << c.json;
  }
}

// A GPU's own mode: tessera.io/gpu.schedule.<index>; hostile keys and values refuse the whole set
// by name.
TEST(Labels, gpu_modes_PerIndexLabelsAndWhatTheyRefuse) {
  auto none = GpuModesFromLabels(
      {{"tessera.io/gpu.schedule", "mps"}, {"tessera.io/gpu.placement", "spread"}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto mixed = GpuModesFromLabels({{"tessera.io/gpu.schedule", "core_mem"},
                                   {"tessera.io/gpu.schedule.0", "mps"},
                                   {"tessera.io/gpu.schedule.3", "mps"},
                                   {"tessera.io/gpu.schedule.10", "exclusive"},
                                   {"tessera.io/gpu.schedule.255", "share"},
                                   {"tessera.io/gpu.schedule.7", "mem"}});
  ASSERT_TRUE(mixed.ok()) << mixed.error();
  EXPECT_EQ(*mixed, (std::map<int, NodeMode>{{0, NodeMode::kMps},
                                             {3, NodeMode::kMps},
                                             {7, NodeMode::kMem},
                                             {10, NodeMode::kExclusive},
                                             {255, NodeMode::kShare}}));
  const std::string index_rule =
      "is no GPU index; expected tessera.io/gpu.schedule.<index>, the index a decimal 0-255 "
      "without leading zeros";
  struct Case {
    std::string key, value, message;
  };
  const std::vector<Case> cases = {
      {"tessera.io/gpu.schedule.01", "mps",
       "node label tessera.io/gpu.schedule.01=\"mps\": \"01\" " + index_rule},
      {"tessera.io/gpu.schedule.256", "mps", "\"256\" " + index_rule},
      {"tessera.io/gpu.schedule.-1", "mps", "\"-1\" " + index_rule},
      {"tessera.io/gpu.schedule.x", "mps", "\"x\" " + index_rule},
      {"tessera.io/gpu.schedule.1.2", "mps", "\"1.2\" " + index_rule},
      {"tessera.io/gpu.schedule.99999999999999999999", "mps", index_rule},
      {"tessera.io/gpu.schedule.", "mps",
       "node label tessera.io/gpu.schedule.=\"mps\": \"\" " + index_rule},
      {"tessera.io/gpu.schedule.2", "turbo",
       "node label tessera.io/gpu.schedule.2=\"turbo\": unknown GPU sharing mode; expected "
       "core_mem, mem, share, exclusive, mig or mps"},
      {"tessera.io/gpu.schedule.2", "MPS", "unknown GPU sharing mode"},
      {"tessera.io/gpu.schedule.2", "",
       "node label tessera.io/gpu.schedule.2=\"\": unknown GPU sharing mode"},
      {"tessera.io/gpu.schedule.2", "mig",
       "node label tessera.io/gpu.schedule.2=\"mig\": mig is a whole node's mode (label "
       "tessera.io/gpu.schedule); a GPU's own mode is core_mem, mem, share, exclusive or mps"},
  };
  for (const Case& c : cases) {
    auto r = GpuModesFromLabels({{"tessera.io/gpu.schedule.0", "mps"}, {c.key, c.value}});
    ASSERT_FALSE(r.ok()) << c.key << "=" << c.value;
    EXPECT_THAT(r.error(), HasSubstr(c.message)) << c.key << "=" << c.value;
  }
}

TEST(Labels, ModeAndPlacementFromLabelsWithAckFallback) {
  EXPECT_EQ(*NodeModeFromLabels({}), NodeMode::kCoreMem);
  EXPECT_EQ(*NodeModeFromLabels({{"ack.node.gpu.schedule", "share"}}), NodeMode::kShare);
  EXPECT_EQ(*NodeModeFromLabels(
                {{"ack.node.gpu.schedule", "share"}, {"tessera.io/gpu.schedule", "exclusive"}}),
            NodeMode::kExclusive);
  // The plugins' --default-mode applies only where neither label is set.
  EXPECT_EQ(*NodeModeFromLabels({}, NodeMode::kMps), NodeMode::kMps);
  EXPECT_EQ(*NodeModeFromLabels({{"tessera.io/gpu.schedule", "core_mem"}}, NodeMode::kMps),
            NodeMode::kCoreMem);
  EXPECT_EQ(*NodeModeFromLabels({{"ack.node.gpu.schedule", "share"}}, NodeMode::kMig),
            NodeMode::kShare);
  for (NodeMode m : {NodeMode::kCoreMem, NodeMode::kMem, NodeMode::kShare, NodeMode::kExclusive,
                     NodeMode::kMig, NodeMode::kMps}) {
    EXPECT_EQ(*ParseNodeMode(NodeModeName(m), "x"), m);
  }
  auto bad = NodeModeFromLabels({{"tessera.io/gpu.schedule", "cgpu"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "node label tessera.io/gpu.schedule=\"cgpu\": unknown GPU sharing mode; expected "
            "core_mem, mem, share, exclusive, mig or mps");
  EXPECT_EQ(*PlacementPolicyFromLabels({}), PlacementPolicy::kTessera);
  EXPECT_EQ(*PlacementPolicyFromLabels({{"ack.node.gpu.placement", "binpack"}}),
            PlacementPolicy::kBinpack);
  auto badp = PlacementPolicyFromLabels({{"tessera.io/gpu.placement", "fgd"}});
  ASSERT_FALSE(badp.ok());
  EXPECT_THAT(badp.error(), HasSubstr("tessera.io/gpu.placement=\"fgd\": unknown placement policy; "
                                      "expected tessera, binpack or spread"));
}

TEST(Resources, BothSpellingsMapToOneDimension) {
  EXPECT_EQ(*GpuResourceOf("tessera.io/gpu-mem"), GpuResource::kMem);
  EXPECT_EQ(*GpuResourceOf("aliyun.com/gpu-mem"), GpuResource::kMem);
  EXPECT_EQ(*GpuResourceOf("aliyun.com/gpu-core.percentage"), GpuResource::kCore);
  EXPECT_EQ(*GpuResourceOf("tessera.io/gpu-count"), GpuResource::kCount);
  EXPECT_FALSE(GpuResourceOf("nvidia.com/gpu").has_value());
  EXPECT_TRUE(IsAckResourceName("aliyun.com/gpu-count"));
  EXPECT_EQ(GpuResourceName(GpuResource::kCore, true), "aliyun.com/gpu-core.percentage");
}

TEST(Resources, MigResourceNamesSpellPlusAsDot) {
  EXPECT_EQ(MigResourceName("3g.40gb"), "tessera.io/mig-3g.40gb");
  EXPECT_EQ(MigResourceName("1g.10gb+me"), "tessera.io/mig-1g.10gb.me");
  EXPECT_TRUE(IsMigResourceName("tessera.io/mig-3g.40gb"));
  EXPECT_FALSE(IsMigResourceName("tessera.io/gpu-mem"));
  EXPECT_EQ(*MigProfileOfResource("tessera.io/mig-1g.10gb.me", "r"), "1g.10gb+me");
  EXPECT_EQ(*MigProfileOfResource("tessera.io/mig-7g.141gb", "r"), "7g.141gb");
  EXPECT_THAT(MigProfileOfResource("tessera.io/mig-9g.1gb", "r").error(),
              HasSubstr("r=\"tessera.io/mig-9g.1gb\": not a MIG profile of any GPU model we know"));
  EXPECT_FALSE(GpuResourceOf("tessera.io/mig-3g.40gb").has_value());
}

TEST(Phase, ParsesBothAndRefusesOthers) {
  EXPECT_EQ(*ParsePhase("assumed"), Phase::kAssumed);
  EXPECT_EQ(*ParsePhase(PhaseName(Phase::kAllocated)), Phase::kAllocated);
  auto bad = ParsePhase("bound");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "tessera.io/phase=\"bound\": unknown phase; expected assumed or allocated");
}

TEST(UserAnnotations, ParsesAndRefuses) {
  auto u = ParseUserAnnotations({{"tessera.io/gpu-model", "NVIDIA A100|NVIDIA H200"},
                                 {"tessera.io/high-priority", "true"},
                                 {"tessera.io/weight", "3"},
                                 {"other", "x"}},
                                16);
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->gpu_models, (std::vector<std::string>{"NVIDIA A100", "NVIDIA H200"}));
  EXPECT_EQ(u->high_priority, true);
  EXPECT_EQ(u->weight, 3u);
  EXPECT_EQ(*ParseUserAnnotations({}), UserAnnotations{});

  auto bad_prio = ParseUserAnnotations({{"tessera.io/high-priority", "yes"}});
  ASSERT_FALSE(bad_prio.ok());
  EXPECT_EQ(bad_prio.error(), "tessera.io/high-priority=\"yes\": expected true or false");
  auto bad_weight = ParseUserAnnotations({{"tessera.io/weight", "17"}}, 16);
  ASSERT_FALSE(bad_weight.ok());
  EXPECT_THAT(bad_weight.error(), HasSubstr("tessera.io/weight=\"17\""));
  EXPECT_THAT(bad_weight.error(), HasSubstr("from 1 to 16"));
  auto bad_model = ParseUserAnnotations({{"tessera.io/gpu-model", "A100||H200"}});
  ASSERT_FALSE(bad_model.ok());
  EXPECT_THAT(bad_model.error(),
              HasSubstr("tessera.io/gpu-model=\"A100||H200\": an empty model name"));
}

TEST(UserAnnotations, gpu_modes_ThePodsGpuModeAnnotation) {
  auto u = ParseUserAnnotations({{"tessera.io/gpu-mode", "mps|core_mem|mps"}});
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->gpu_modes, (std::vector<NodeMode>{NodeMode::kMps, NodeMode::kCoreMem}));
  for (const char* bad : {"turbo", "mps|", "|mps", "mps||core_mem", "MPS", ""}) {
    auto refused = ParseUserAnnotations({{"tessera.io/gpu-mode", bad}});
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_THAT(refused.error(), HasSubstr("tessera.io/gpu-mode=\"" + std::string(bad) + "\""));
    EXPECT_THAT(refused.error(), HasSubstr("core_mem, mem, share, exclusive, mig"));
  }
}

// A number no double holds makes the JSON reader throw out_of_range, not parse_error: every
// annotation a user may write on a pod or a node is refused by name, never thrown out of the reader
// (it took the extender and the device plugin down).
TEST(Annotations, ANumberOutOfRangeIsRefusedByNameInEveryJsonAnnotation) {
  const std::string value = R"({"version":1,"id":-2e1222222222222})";
  auto assignment = ParseAssignment(value);
  ASSERT_FALSE(assignment.ok());
  EXPECT_THAT(assignment.error(), HasSubstr("tessera.io/assignment: "));
  EXPECT_THAT(assignment.error(), HasSubstr("is not valid JSON"));
  auto inventory = ParseGpuInventory(value);
  ASSERT_FALSE(inventory.ok());
  EXPECT_THAT(inventory.error(), HasSubstr("tessera.io/gpu-inventory: "));
  auto request = ParseMigRecutRequest(value);
  ASSERT_FALSE(request.ok());
  EXPECT_THAT(request.error(), HasSubstr("tessera.io/mig-recut: "));
  auto status = ParseMigRecutStatus(value);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error(), HasSubstr("tessera.io/mig-recut-status: "));
}

TEST(MigRecut, recut_RequestAndStatusRoundTripAndHostileValuesAreRefusedByName) {
  const MigRecutRequest req{7, kUuid0, "1g.10gb=7", "team/small"};
  auto back = ParseMigRecutRequest(WriteMigRecutRequest(req));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, req);
  const MigRecutRequest two{1, kUuid1, "3g.40gb=1 1g.10gb=4", ""};
  back = ParseMigRecutRequest(WriteMigRecutRequest(two));
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, two);
  const std::string head = std::string(R"({"version":1,"id":3,"gpu":")") + kUuid0 + "\",";
  for (const auto& [value, expected] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "tessera.io/mig-recut: \"not json\" is not valid JSON"},
           {R"({"version":2})", "tessera.io/mig-recut: version=2: expected 1"},
           {R"({"version":1,"id":0,"gpu":"x","layout":"1g.10gb=1"})",
            "tessera.io/mig-recut: id=0: expected the request's number, 1 to 2^53"},
           {R"({"version":1,"id":-1})", "tessera.io/mig-recut: id=-1: expected"},
           {R"({"version":1,"id":1,"gpu":"MIG-1234","layout":"1g.10gb=1"})",
            "tessera.io/mig-recut: gpu=\"MIG-1234\": expected a GPU UUID"},
           {R"({"version":1,"id":1,"gpu":"GPU-../../x","layout":"1g.10gb=1"})",
            "gpu=\"GPU-../../x\": expected a GPU UUID"},
           {head + R"("layout":"1g.10gb"})",
            "tessera.io/mig-recut: layout=\"1g.10gb\": \"1g.10gb\" has no count; expected "
            "space-separated <profile>=<count> (count 1-7; profiles: "},
           {head + R"("layout":"9g.99gb=1"})", "\"9g.99gb\" is no MIG profile"},
           {head + R"("layout":"1g.10gb=8"})", "\"1g.10gb=8\" has count \"8\""},
           {head + R"("layout":"1g.10gb=0"})", "has count \"0\""},
           {head + R"("layout":"1g.10gb=1 1g.10gb=2"})", "\"1g.10gb\" is named twice"},
           {head + R"("layout":"   "})", "no instances"},
           {head + R"("layout":7})", "layout=7: expected profile counts"},
           {head + R"("layout":"1g.10gb=1","pod":5})", "pod=5: expected the waiting pod's"},
           {std::string(5000, ' '), "value of 5000 bytes; expected at most 4096"}}) {
    auto r = ParseMigRecutRequest(value);
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_THAT(r.error(), HasSubstr(expected)) << value;
  }

  const MigRecutStatus st{7, MigRecutState::kRefused, kUuid0, "GPU-x runs pod team/a"};
  auto sback = ParseMigRecutStatus(WriteMigRecutStatus(st));
  ASSERT_TRUE(sback.ok()) << sback.error();
  EXPECT_EQ(*sback, st);
  for (const auto& [value, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"version":1,"id":1,"state":"done"})",
            "tessera.io/mig-recut-status: state=\"done\": expected applied, refused or failed"},
           {R"({"version":1,"id":1,"state":"applied","gpu":"../x"})",
            "tessera.io/mig-recut-status: gpu=\"../x\": expected a GPU UUID"},
           {R"({"version":1,"state":"applied"})", "tessera.io/mig-recut-status: id is missing"},
           {R"({"version":1,"id":1,"state":"applied","reason":[]})",
            "reason=[]: expected a string"}}) {
    auto r = ParseMigRecutStatus(value);
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_THAT(r.error(), HasSubstr(expected)) << value;
  }
}

}  // namespace
}  // namespace tessera::k8s
