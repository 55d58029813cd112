// Tests of the policies: every policy places validly and refuses when nothing fits, and the rules
// that tell them apart hold on small hand-made clusters.
#include "placement/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "placement/policy_internal.h"
#include "placement/rng.h"

namespace tessera::placement {
namespace {

Request Pod(int milli, int count = 1, int64_t cpu = 1000) {
  Request r;
  r.cpu_milli = cpu;
  r.memory_mib = 1024;
  r.gpu_count = count;
  r.gpu_milli = milli;
  return r;
}

Cluster Nodes(std::vector<std::tuple<int64_t, int, std::string>> specs) {
  ModelTable models;
  std::vector<NodeSpec> nodes;
  for (const auto& [cpu, gpus, model] : specs) {
    nodes.push_back({std::string("n").append(std::to_string(nodes.size())), cpu, 1 << 20, gpus,
                     *models.Intern(model), NodeMode::kMemoryAndCompute});
  }
  return *Cluster::Create(models, nodes);
}

std::unique_ptr<Policy> Make(std::string_view name, const TargetWorkload* w, uint64_t seed = 1) {
  auto p = MakePolicy(name, PolicyOptions{seed, w});
  EXPECT_TRUE(p.ok()) << p.error();
  return std::move(p.value());
}

TargetWorkload TraceLike() {
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Pod(1000, 1, 11000));
  for (int i = 0; i < 3; ++i) requests.push_back(Pod(500, 1, 6000));
  requests.push_back(Pod(250, 1, 3000));
  requests.push_back(Pod(0, 0, 16000));
  return TargetWorkload::FromRequests(requests, 1.0);
}

TEST(PolicyTest, NamesAndErrors) {
  ASSERT_FALSE(PolicyNames().empty());
  EXPECT_EQ(PolicyNames()[0], kDefaultPolicy);
  auto unknown = MakePolicy("tetris", PolicyOptions{});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("\"tetris\""), std::string::npos);
  EXPECT_NE(unknown.error().find("fgd"), std::string::npos);
  EXPECT_FALSE(MakePolicy("fgd", PolicyOptions{}).ok());  // needs a target workload
}

TEST(PolicyTest, EveryPolicyPlacesValidlyUntilNothingFits) {
  const TargetWorkload w = TraceLike();
  const std::vector<Request> mix = {Pod(1000, 1, 11000), Pod(500, 1, 6000),   Pod(250, 1, 3000),
                                    Pod(0, 0, 16000),    Pod(1000, 2, 20000), Pod(320, 1, 4000)};
  for (std::string_view name : PolicyNames()) {
    SCOPED_TRACE(std::string(name));
    Cluster c = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}, {16000, 2, "P100"}});
    auto policy = Make(name, &w);
    EXPECT_EQ(policy->name(), name);
    int placed = 0, refused = 0;
    for (int i = 0; i < 200; ++i) {
      const Request& r = mix[static_cast<size_t>(i) % mix.size()];
      const auto a = policy->Select(c, r);
      bool fits_somewhere = false;
      for (int n = 0; n < c.node_count(); ++n) fits_somewhere |= c.Fits(n, r) == FitResult::kFits;
      ASSERT_EQ(a.has_value(), fits_somewhere) << "request " << i;
      if (!a) {
        ++refused;
        continue;
      }
      ASSERT_EQ(std::popcount(a->gpus), r.gpu_count);
      ASSERT_TRUE(c.Place(r, *a).ok());
      policy->OnPlaced(c, r, *a);
      ++placed;
    }
    EXPECT_GT(placed, 10);
    EXPECT_GT(refused, 0);
  }
}

// A node whose GPUs 0-3 are MPS (memory+compute, one GPU per request, tag 5) and 4-7 memory+compute
// (tag 0), beside a node whose GPUs 0-1 are whole-GPU (tag 3) and 2-3 memory-only (tag 1).
Cluster MixedNodes() {
  ModelTable models;
  const int a100 = *models.Intern("A100");
  NodeSpec mixed{"mixed", 96000, 1 << 20, 8, a100, NodeMode::kMemoryAndCompute};
  for (int g = 0; g < 8; ++g) {
    mixed.gpu_modes.push_back(g < 4 ? GpuMode{NodeMode::kMemoryAndCompute, true, 5}
                                    : GpuMode{NodeMode::kMemoryAndCompute, false, 0});
  }
  NodeSpec other{"other", 96000, 1 << 20, 4, a100, NodeMode::kWholeGpus};
  other.gpu_modes = {
      GpuMode{NodeMode::kWholeGpus, false, 3}, GpuMode{NodeMode::kWholeGpus, false, 3},
      GpuMode{NodeMode::kMemoryOnly, false, 1}, GpuMode{NodeMode::kMemoryOnly, false, 1}};
  auto c = Cluster::Create(models, {mixed, other});
  EXPECT_TRUE(c.ok()) << c.error();
  return *c;
}

TEST(PolicyTest, gpu_modes_EachRequestGoesOnlyToGpusOfAModeThatTakesIt) {
  const TargetWorkload w = TraceLike();
  Request mps = Pod(300, 1, 1000);
  mps.gpu_modes = uint32_t{1} << 5;
  Request core = Pod(300, 1, 1000);
  core.gpu_modes = uint32_t{1} << 0;
  const Request pair = Pod(300, 2, 1000);  // any mode; spans GPUs, so never MPS ones
  const Request whole2 = Pod(1000, 2, 1000);
  Request memory = Pod(0, 1, 1000);
  memory.gpu_mem_mib = 4096;
  const std::array<Request, 5> mix = {mps, core, pair, whole2, memory};
  for (std::string_view name : PolicyNames()) {
    SCOPED_TRACE(std::string(name));
    Cluster c = MixedNodes();
    auto policy = Make(name, &w);
    std::array<int, 5> placed{};
    for (int i = 0; i < 60; ++i) {
      const size_t k = static_cast<size_t>(i) % mix.size();
      const Request& r = mix[k];
      const auto a = policy->Select(c, r);
      bool fits_somewhere = false;
      for (int n = 0; n < c.node_count(); ++n) fits_somewhere |= c.Fits(n, r) == FitResult::kFits;
      ASSERT_EQ(a.has_value(), fits_somewhere) << "request " << i;
      if (!a) continue;
      const Status placed_ok = c.Place(r, *a);
      ASSERT_TRUE(placed_ok.ok()) << i << ": " << placed_ok.message() << " node " << a->node
                                  << " gpus " << a->gpus;
      policy->OnPlaced(c, r, *a);
      ++placed[k];
      const uint32_t g = a->gpus;
      if (k == 0) {
        EXPECT_TRUE(a->node == 0 && (g & 0xF0u) == 0) << i << " " << g;
      }
      if (k == 1) {
        EXPECT_TRUE(a->node == 0 && (g & 0x0Fu) == 0) << i << " " << g;
      }
      if (k == 2) {
        EXPECT_TRUE(a->node == 0 && (g & 0x0Fu) == 0) << i << " " << g;
      }
      if (k == 4) {
        EXPECT_TRUE(a->node == 1 && (g & 0x3u) == 0) << i << " " << g;
      }
      if (k == 3) {
        // Two whole GPUs of one mode: 4-7 on the mixed node, or 0-1 on the other (never 1 and 2).
        EXPECT_TRUE((a->node == 0 && (g & 0x0Fu) == 0) || (a->node == 1 && g == 0x3u))
            << i << " " << g;
      }
    }
    for (size_t k = 0; k < mix.size(); ++k) EXPECT_GT(placed[k], 0) << "request kind " << k;
  }
}

TEST(PolicyTest, FgdFillsTheGpuThatTheShareCompletes) {
  // Node 0 has a GPU with exactly 500 free; node 1 is idle. Placing a 500 share on node 0 turns
  // a fragment into a full GPU, so FGD goes there, and to that GPU.
  const TargetWorkload w({TargetShape{0, 1, 1000, kProportionalMemory, ModelSet::Any(), 1.0}});
  Cluster c = Nodes({{96000, 4, "G2"}, {96000, 4, "G2"}});
  ASSERT_TRUE(c.Place(Pod(500), {0, 0b0100}).ok());
  for (std::string_view name : {"fgd", "tessera"}) {
    auto a = Make(name, &w)->Select(c, Pod(500));
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->node, 0) << name;
    EXPECT_EQ(a->gpus, 0b0100u) << name;
  }
}

TEST(PolicyTest, EqualScoresGoToTheFirstNode) {
  const TargetWorkload w = TraceLike();
  for (std::string_view name : {"fgd", "tessera", "bestfit", "packing", "binpack"}) {
    Cluster c = Nodes({{96000, 8, "G2"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
    auto policy = Make(name, &w);
    auto a = policy->Select(c, Pod(1000, 1, 11000));
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->node, 0) << name;
    EXPECT_EQ(a->gpus, 1u) << name;  // whole GPUs: the lowest-numbered free one
  }
}

TEST(PolicyTest, TesseraKeepsCpuWhereGpusNeedIt) {
  // A CPU-only pod on a cluster of a CPU-lean 8-GPU node (listed first) and a CPU-rich 2-GPU node.
  // The workload asks ~11 cores per GPU, so 32 cores taken from the 8-GPU node would strand two
  // of its GPUs; tessera puts the pod on the CPU-rich node. FGD sees no difference (neither
  // placement changes which typical shapes fit) and takes the first node.
  std::vector<Request> requests(8, Pod(1000, 1, 11000));
  requests.push_back(Pod(0, 0, 32000));
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 1.0);
  Cluster c = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}});
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(0, 0, 32000))->node, 1);
  EXPECT_EQ(Make("fgd", &w)->Select(c, Pod(0, 0, 32000))->node, 0);
}

TEST(PolicyTest, ExpectedResidualFollowsItsDefinition) {
  // Shapes of 300 (weight .5) and 500 (weight .25); the rest of the weight is CPU-only.
  const TargetWorkload w({TargetShape{1000, 1, 300, kProportionalMemory, ModelSet::Any(), 0.5},
                          TargetShape{1000, 1, 500, kProportionalMemory, ModelSet::Any(), 0.25},
                          TargetShape{8000, 0, 0, kProportionalMemory, ModelSet::Any(), 0.25}});
  const std::vector<double> r = internal::ExpectedResidual(w, 2.0);
  ASSERT_EQ(r.size(), 1001u);
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(r[299], 299);  // nothing fits: all of it is left
  // 300: the 300 shape comes with probability 1 - e^-1 and leaves nothing.
  EXPECT_NEAR(r[300], std::exp(-1.0) * 300, 1e-9);
  // 500: either shape may come (1 - e^-1.5); the 300 one (2 in 3) leaves 200, which nothing fits.
  EXPECT_NEAR(r[500], std::exp(-1.5) * 500 + (1 - std::exp(-1.5)) * (2.0 / 3.0) * 200, 1e-9);
  // With arrivals certain, one 400 shape leaves f mod 400.
  const TargetWorkload one({TargetShape{1000, 1, 400, kProportionalMemory, ModelSet::Any(), 1}});
  const std::vector<double> certain = internal::ExpectedResidual(one, 1e9);
  EXPECT_NEAR(certain[1000], 200, 1e-9);
  EXPECT_NEAR(certain[800], 0, 1e-9);
  EXPECT_NEAR(certain[399], 399, 1e-9);
  // No arrivals at all: every free share stays.
  EXPECT_NEAR(internal::ExpectedResidual(one, 0)[700], 700, 1e-9);
}

TEST(PolicyTest, TesseraLeavesGapsThatFrequentSharesFill) {
  // 320-milli shares are frequent and fill a 350 gap almost exactly; 230 shares are rarer. A 230
  // share can go next to a 650 share (350 free, leaving 120 that no shape uses) or next to a 470
  // share (530 free, leaving 300, which a 230 or 320 share can still use). tessera keeps the 350
  // gap for a 320 share.
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(Pod(320, 1, 4000));
  for (int i = 0; i < 3; ++i) requests.push_back(Pod(650, 1, 4000));
  for (int i = 0; i < 3; ++i) requests.push_back(Pod(470, 1, 4000));
  for (int i = 0; i < 2; ++i) requests.push_back(Pod(230, 1, 4000));
  for (int i = 0; i < 6; ++i) requests.push_back(Pod(1000, 1, 4000));
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 1.0);
  Cluster c = Nodes({{64000, 1, "T4"}, {64000, 1, "T4"}});
  ASSERT_TRUE(c.Place(Pod(650, 1, 4000), {0, 1}).ok());
  ASSERT_TRUE(c.Place(Pod(470, 1, 4000), {1, 1}).ok());
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(230, 1, 4000))->node, 1);
  EXPECT_EQ(Make("fgd", &w)->Select(c, Pod(230, 1, 4000))->node, 0);
  // The 320 share itself still takes the 350 gap.
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(320, 1, 4000))->node, 0);
}

// Two G2 nodes of 8 GPUs and two T4 nodes of 2 GPUs (20 GPUs), T4 first in list order.
Cluster T4FirstThenG2() {
  return Nodes({{104000, 2, "T4"}, {104000, 2, "T4"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
}

TEST(PolicyTest, ClassPressureIsTheConstrainedDemandPerGpuOfAClass) {
  const Cluster c = Nodes({{104000, 2, "T4"},
                           {104000, 2, "T4"},
                           {96000, 8, "G2"},
                           {96000, 8, "G2"},
                           {64000, 2, "P100"}});
  const int t4 = c.models().Find("T4"), g2 = c.models().Find("G2");
  // Demand, as parts of all GPU milli: 10 % T4 only, 30 % T4 or G2, the rest anywhere.
  TargetShape t4_only{1000, 1, 1000, kProportionalMemory, ModelSet::Of(t4), 0.10};
  TargetShape either{1000, 1, 1000, kProportionalMemory, ModelSet::Of(t4).With(g2), 0.30};
  TargetShape any{1000, 1, 1000, kProportionalMemory, ModelSet::Any(), 0.60};
  const TargetWorkload w({t4_only, either, any});
  const auto classes = internal::ClusterClasses(c);
  ASSERT_EQ(classes.size(), 3u);
  EXPECT_EQ(classes[0].gpus, 4);  // T4, first in list order
  EXPECT_EQ(classes[1].gpus, 16);
  EXPECT_EQ(classes[2].gpus, 2);
  const std::vector<double> rho = internal::ClassPressure(c, classes, w);
  // At 22 GPUs of demand: T4 only asks 2.2 GPUs of T4's 4; "either" asks 6.6, spread 4:16 (1.32
  // on T4, 5.28 on G2); "any" loads no class.
  EXPECT_NEAR(rho[0], (2.2 + 1.32) / 4, 1e-9);
  EXPECT_NEAR(rho[1], 5.28 / 16, 1e-9);
  EXPECT_EQ(rho[2], 0);
  // Demand that may use every class loads none: on T4 and G2 alone, "either" is unconstrained.
  const Cluster two = T4FirstThenG2();
  const auto two_classes = internal::ClusterClasses(two);
  EXPECT_NEAR(internal::ClassPressure(two, two_classes, w)[0], 2.0 / 4, 1e-9);
  EXPECT_EQ(internal::ClassPressure(two, two_classes, w)[1], 0);
  // More T4-only demand than T4 has: all of it is needed.
  t4_only.weight = 0.5;
  EXPECT_EQ(internal::ClassPressure(c, classes, TargetWorkload({t4_only, any}))[0], 1.0);
  // Nothing constrained: no pressure anywhere.
  for (double p : internal::ClassPressure(c, classes, TargetWorkload({any}))) EXPECT_EQ(p, 0);
}

TEST(PolicyTest, ClassShapeWeightsCountAShapeWhereItMayGoByItsArrivalsPerGpu) {
  const Cluster c = T4FirstThenG2();
  const int t4 = c.models().Find("T4");
  TargetShape t4_only{1000, 1, 500, kProportionalMemory, ModelSet::Of(t4), 0.2};
  TargetShape any{1000, 1, 1000, kProportionalMemory, ModelSet::Any(), 0.6};
  TargetShape cpu{8000, 0, 0, kProportionalMemory, ModelSet::Any(), 0.2};
  const TargetWorkload w({t4_only, any, cpu});
  const auto classes = internal::ClusterClasses(c);
  // On T4 (4 of 20 GPUs) the T4-only shape arrives 5 times as often per GPU: 0.2 x 5 = 1.0,
  // against 0.6 and 0.2, normalised over 1.8.
  const auto on_t4 = internal::ClassShapeWeights(c, classes, classes[0].node_class, w);
  EXPECT_NEAR(on_t4[0], 1.0 / 1.8, 1e-9);
  EXPECT_NEAR(on_t4[1], 0.6 / 1.8, 1e-9);
  EXPECT_NEAR(on_t4[2], 0.2 / 1.8, 1e-9);
  // On G2 it does not count at all.
  const auto on_g2 = internal::ClassShapeWeights(c, classes, classes[1].node_class, w);
  EXPECT_EQ(on_g2[0], 0);
  EXPECT_NEAR(on_g2[1], 0.6 / 0.8, 1e-9);
  EXPECT_NEAR(on_g2[2], 0.2 / 0.8, 1e-9);
}

// Six whole-GPU requests of 8 cores that may go anywhere, then four of 1-4 cores that may run only
// on T4 (40 % of the GPU demand), too varied to be typical shapes.
std::vector<Request> AnyThenT4Only(const Cluster& c) {
  std::vector<Request> requests(6, Pod(1000, 1, 8000));
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Pod(1000, 1, 1000 * (i + 1)));
    requests.back().allowed = ModelSet::Of(c.models().Find("T4"));
  }
  return requests;
}

TEST(PolicyTest, TesseraLeavesScarceModelsToRequestsThatNeedThem) {
  // 40 % of the GPU demand may run only on T4, which has 4 of the 20 GPUs. Those requests are
  // too varied to be typical shapes, so fragmentation (and FGD) does not see them; only the
  // demand by constraint does. A whole-GPU request that may go anywhere is placed on G2 although
  // the T4 nodes come first; without the constrained demand it takes the first node, as first
  // fit does. A T4-only request itself still goes to T4.
  const Cluster c = T4FirstThenG2();
  const Request any = Pod(1000, 1, 8000);
  std::vector<Request> requests = AnyThenT4Only(c);
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 0.6);
  ASSERT_EQ(w.shapes().size(), 1u);  // only the unconstrained shape is typical
  const TargetWorkload free_to_go = TargetWorkload::FromRequests(std::vector<Request>(6, any));
  EXPECT_EQ(c.models().model(c.spec(Make("tessera", &w)->Select(c, any)->node).model).name, "G2");
  EXPECT_EQ(Make("tessera", &free_to_go)->Select(c, any)->node, 0);
  EXPECT_EQ(Make("fgd", &w)->Select(c, any)->node, 0);
  EXPECT_EQ(Make("tessera", &w)->Select(c, requests.back())->node, 0);
  // A request limited to T4 pays nothing, nor one on a cluster of T4 nodes alone.
  const Cluster t4s = Nodes({{104000, 2, "T4"}, {104000, 2, "T4"}});
  EXPECT_EQ(Make("tessera", &w)->Select(t4s, any)->node, 0);
}

TEST(PolicyTest, TesseraLeavesTheCpuOfScarceModelsToRequestsThatNeedThem) {
  // As above: 40 % of the GPU demand may run only on T4. A CPU-only pod would go to the first
  // node (a T4 node: its CPU strands no GPU there either); it goes to G2, leaving T4's CPU to the
  // T4-only pods. Without the constrained demand, and on T4 nodes alone, it takes the first node.
  const Cluster c = T4FirstThenG2();
  const Request any = Pod(1000, 1, 8000);
  std::vector<Request> requests = AnyThenT4Only(c);
  const Request cpu_only = Pod(0, 0, 8000);
  requests.push_back(cpu_only);
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 0.6);
  const auto classes = internal::ClusterClasses(c);
  const std::vector<double> sigma = internal::ClassConstraintPressure(c, classes, w);
  EXPECT_GT(sigma[0], 0);  // T4
  EXPECT_EQ(sigma[1], 0);  // G2
  EXPECT_EQ(c.models().model(c.spec(Make("tessera", &w)->Select(c, cpu_only)->node).model).name,
            "G2");
  std::vector<Request> unconstrained(6, any);
  unconstrained.push_back(cpu_only);
  const TargetWorkload free_to_go = TargetWorkload::FromRequests(unconstrained);
  EXPECT_EQ(Make("tessera", &free_to_go)->Select(c, cpu_only)->node, 0);
  const Cluster t4s = Nodes({{104000, 2, "T4"}, {104000, 2, "T4"}});
  EXPECT_EQ(Make("tessera", &w)->Select(t4s, cpu_only)->node, 0);
}

TEST(PolicyTest, ClassPressureCountsDemandThatOnlyLargerNodesFit) {
  // An 8-GPU request of 120 cores may use any model but fits only the 128-core G3 node: its
  // demand presses on G3's GPUs as a constraint would. A request that fits the 96-core nodes too
  // (88 cores) is unconstrained: it loads nothing.
  const Cluster c = Nodes({{128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  const int g2 = c.models().Find("G2");
  const auto classes = internal::ClusterClasses(c);
  ASSERT_EQ(classes.size(), 2u);
  TargetShape small{4000, 1, 1000, kProportionalMemory, ModelSet::Any(), 0.7};
  // Weights are per request: the 8-GPU requests ask 0.3 of the GPU milli (0.0375 x 8 against
  // 0.7 x 1).
  TargetShape big{120000, 8, 1000, kProportionalMemory, ModelSet::Any(), 0.0375};
  TargetShape fits_g2{88000, 8, 1000, kProportionalMemory, ModelSet::Any(), 0.0375};
  // 24 GPUs of demand: the big request asks 7.2 GPUs, all on G3's 8.
  const std::vector<double> rho = internal::ClassPressure(c, classes, TargetWorkload({small, big}));
  EXPECT_NEAR(rho[0], 7.2 / 8, 1e-9);
  EXPECT_EQ(rho[1], 0);
  // Demand limited by its size alone is not constrained demand.
  for (double p : internal::ClassConstraintPressure(c, classes, TargetWorkload({small, big}))) {
    EXPECT_EQ(p, 0);
  }
  for (double p : internal::ClassPressure(c, classes, TargetWorkload({small, fits_g2}))) {
    EXPECT_EQ(p, 0);
  }
  // Host memory counts too: 1.5 TiB fits no node here (they have 1 TiB), so that size loads no
  // class.
  TargetShape huge = big;
  huge.cpu_milli = 8000;
  huge.memory_mib = int64_t{3} << 19;
  for (double p : internal::ClassPressure(c, classes, TargetWorkload({small, huge}))) {
    EXPECT_EQ(p, 0);
  }
  // A size that more than half the GPUs fit loads nothing: with a small P100 node added, the
  // 88-core request fits 24 of 26 GPUs.
  const Cluster with_small =
      Nodes({{128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}, {16000, 2, "P100"}});
  const auto small_classes = internal::ClusterClasses(with_small);
  for (double p :
       internal::ClassPressure(with_small, small_classes, TargetWorkload({small, fits_g2}))) {
    EXPECT_EQ(p, 0);
  }
  // Limited to G2 by constraint, the request counts once, by its constraint (it fits no G2 node,
  // so it may not be placed at all, but it does not press on G3).
  TargetShape big_g2 = big;
  big_g2.allowed = ModelSet::Of(g2);
  const std::vector<double> constrained =
      internal::ClassPressure(c, classes, TargetWorkload({small, big_g2}));
  EXPECT_EQ(constrained[0], 0);
  EXPECT_NEAR(constrained[1], 7.2 / 16, 1e-9);
}

TEST(PolicyTest, TesseraLeavesLargeNodesToRequestsOnlyTheyFit) {
  // A quarter of the GPU demand is 8-GPU requests of 120 cores, which only the 128-core node
  // takes; the rest are single GPUs of 4 cores. With a 2-GPU request already on the large node,
  // the drain preference (the node left with the least free) would put a single GPU there too;
  // the pressure of the large requests sends it to a 96-core node. From the requests: the sized
  // demand comes from FromRequests, which sees every request, not only the typical shapes.
  Cluster c = Nodes({{128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  const Request one = Pod(1000, 1, 4000);
  Request big = Pod(1000, 8, 120000);
  std::vector<Request> requests(24, one);
  requests.push_back(big);
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 0.9);
  ASSERT_EQ(w.shapes().size(), 1u);  // the large requests are too rare to be a typical shape
  ASSERT_TRUE(c.Place(Pod(1000, 2, 8000), Assignment{0, 0b11}).ok());
  EXPECT_EQ(c.models().model(c.spec(Make("tessera", &w)->Select(c, one)->node).model).name, "G2");
  // The same single GPUs alone: the large node, partly used already, is the fullest.
  const TargetWorkload small_only = TargetWorkload::FromRequests(std::vector<Request>(24, one));
  EXPECT_EQ(Make("tessera", &small_only)->Select(c, one)->node, 0);
  // The large request itself goes where it fits.
  Cluster empty = Nodes({{128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  EXPECT_EQ(Make("tessera", &w)->Select(empty, big)->node, 0);
}

TEST(PolicyTest, ClassWholeNodePressureCountsOnlyMultiGpuSizes) {
  // The 120-core 8-GPU request fits only the 128-core G3 node and needs it whole; a 120-core
  // single GPU fits only G3 as well, but needs no whole node: it presses on G3 (ClassPressure),
  // not on its whole nodes.
  const Cluster c = Nodes({{128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  const auto classes = internal::ClusterClasses(c);
  TargetShape small{4000, 1, 1000, kProportionalMemory, ModelSet::Any(), 0.7};
  TargetShape big{120000, 8, 1000, kProportionalMemory, ModelSet::Any(), 0.0375};
  TargetShape big_single{120000, 1, 1000, kProportionalMemory, ModelSet::Any(), 0.3};
  const std::vector<double> whole =
      internal::ClassWholeNodePressure(c, classes, TargetWorkload({small, big}));
  EXPECT_NEAR(whole[0], 7.2 / 8, 1e-9);
  EXPECT_EQ(whole[1], 0);
  for (double p :
       internal::ClassWholeNodePressure(c, classes, TargetWorkload({small, big_single}))) {
    EXPECT_EQ(p, 0);
  }
  EXPECT_NEAR(internal::ClassPressure(c, classes, TargetWorkload({small, big_single}))[0], 7.2 / 8,
              1e-9);
}

// Two G3 nodes (128 cores) and two G2 nodes (96 cores). Some single GPUs may use only G2, as
// much of G2's GPUs as the 120-core 8-GPU requests need of G3's: the pressure on both classes is
// 0.4, so the protection does not tell them apart. FGD's measure does: the G2-only shape cannot
// use G3, so G3's free share counts as fragment for it, and consuming it lowers the measure. Two
// G3 nodes are empty, more than the one kept empty for the 8-GPU requests (the scarce-empty-node
// charge stays out of it).
struct G3AndG2 {
  Cluster cluster =
      Nodes({{128000, 8, "G3"}, {128000, 8, "G3"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  TargetWorkload workload;
  G3AndG2() {
    const Request one = Pod(1000, 1, 4000);
    Request g2_only = one;
    g2_only.allowed = ModelSet::Of(cluster.models().Find("G2"));
    std::vector<Request> requests(24, one);
    requests.insert(requests.end(), 8, g2_only);
    requests.push_back(Pod(1000, 8, 120000));
    workload = TargetWorkload::FromRequests(requests, 0.9);
  }
  std::string ModelOf(int node) const {
    return cluster.models().model(cluster.spec(node).model).name;
  }
};

TEST(PolicyTest, TesseraKeepsNodesThatOnlyTheLargestRequestsFitWhole) {
  G3AndG2 f;
  const auto classes = internal::ClusterClasses(f.cluster);
  const std::vector<double> rho = internal::ClassPressure(f.cluster, classes, f.workload);
  ASSERT_NEAR(rho[0], 0.4, 1e-9);
  ASSERT_NEAR(rho[1], 0.4, 1e-9);
  // A single GPU that may go anywhere would spoil the empty G3 node for the 120-core requests:
  // the opening charge sends it to G2 (without it, FGD's measure sends it to G3).
  const Request one = Pod(1000, 1, 4000);
  const auto placed = Make("tessera", &f.workload)->Select(f.cluster, one);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(f.ModelOf(placed->node), "G2");
  // An 88-core 8-GPU request fits both and takes a node whole, wherever it goes: judged without
  // FGD's measure (which would favour G3), the drain preference sends it to the G2 node it fills.
  const auto whole = Make("tessera", &f.workload)->Select(f.cluster, Pod(1000, 8, 88000));
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(f.ModelOf(whole->node), "G2");
  // A request that may use only G3 pays nothing for opening it.
  Request g3_only = one;
  g3_only.allowed = ModelSet::Of(f.cluster.models().Find("G3"));
  EXPECT_EQ(Make("tessera", &f.workload)->Select(f.cluster, g3_only)->node, 0);
}

TEST(PolicyTest, TesseraKeepsTheLastEmptyNodesOfAKindForMultiGpuRequests) {
  // Single GPUs of 4 cores and, for a quarter of the GPU demand, 8-GPU requests of 88 cores,
  // which every node fits when empty: one of them runs at once per 32 GPUs, and half of that
  // (rounded up) is kept empty. Nodes 0-2 have 2 GPUs and 16 cores left.
  auto make = [](int nodes) {
    std::vector<std::tuple<int64_t, int, std::string>> specs(nodes, {96000, 8, "G2"});
    Cluster c = Nodes(specs);
    for (int n = 0; n < 3; ++n) EXPECT_TRUE(c.Place(Pod(1000, 6, 80000), {n, 0b111111}).ok());
    return c;
  };
  std::vector<Request> requests(24, Pod(1000, 1, 4000));
  requests.push_back(Pod(1000, 8, 88000));
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 0.9);
  // A single GPU of 14 cores on a used node leaves its last GPU 2 cores: stranded, so the score
  // prefers an empty node. With one empty node left (the kept one) it goes to a used node.
  const Request heavy = Pod(1000, 1, 14000);
  const Cluster one_empty = make(4);
  EXPECT_LT(Make("tessera", &w)->Select(one_empty, heavy)->node, 3);
  // With two empty nodes (one more than kept) it takes an empty one.
  const Cluster two_empty = make(5);
  EXPECT_EQ(Make("tessera", &w)->Select(two_empty, heavy)->node, 3);
  // The empty nodes are counted over the whole cluster, also when the extender asks among some
  // candidates only.
  const std::vector<int> candidates = {0, 3};
  EXPECT_EQ(Make("tessera", &w)->SelectAmong(two_empty, heavy, candidates, nullptr)->node, 3);
  // A request that takes the whole node pays nothing.
  EXPECT_EQ(Make("tessera", &w)->Select(one_empty, Pod(1000, 8, 88000))->node, 3);
  // One policy follows the cluster as it changes: the count is kept up to date.
  Cluster changing = make(5);
  const auto p = Make("tessera", &w);
  EXPECT_EQ(p->Select(changing, heavy)->node, 3);
  const Request whole = Pod(1000, 8, 88000);
  ASSERT_TRUE(changing.Place(whole, {4, 0xff}).ok());  // one empty node left: the kept one
  EXPECT_LT(p->Select(changing, heavy)->node, 3);
  ASSERT_TRUE(changing.Remove(whole, {4, 0xff}).ok());
  EXPECT_EQ(p->Select(changing, heavy)->node, 3);
}

TEST(PolicyTest, EmptyNodeCountFollowsEveryChange) {
  // Nodes of three kinds (and uncounted ones); random placements and removals, read back after
  // batches of 0 to 3 x Cluster::kChangeLog changes, against a count over every node.
  std::vector<std::tuple<int64_t, int, std::string>> specs;
  std::vector<int> kind_of;
  for (int n = 0; n < 40; ++n) {
    const int k = n % 4;
    specs.emplace_back(k == 0 ? 32000 : 64000, k == 3 ? 1 : 2 + 2 * (k % 2), "G1");
    kind_of.push_back(k == 3 ? -1 : k);
  }
  Cluster c = Nodes(specs);
  internal::EmptyNodeCount count;
  count.Reset(kind_of, 3);
  auto check = [&](const Cluster& cluster) {
    count.Update(cluster);
    std::array<int, 3> want{};
    for (int n = 0; n < cluster.node_count(); ++n) {
      if (kind_of[static_cast<size_t>(n)] >= 0 && internal::EmptyNodeCount::Empty(cluster, n)) {
        ++want[static_cast<size_t>(kind_of[static_cast<size_t>(n)])];
      }
    }
    for (int k = 0; k < 3; ++k) EXPECT_EQ(count.empty(k), want[static_cast<size_t>(k)]) << k;
  };
  check(c);
  EXPECT_EQ(count.empty(0), 10);
  Rng rng(7);
  std::vector<std::pair<Request, Assignment>> placed;
  for (int round = 0; round < 60; ++round) {
    const uint64_t batch = rng.Below(3 * Cluster::kChangeLog + 1);
    for (uint64_t i = 0; i < batch; ++i) {
      if (!placed.empty() && rng.Below(2) == 0) {
        const size_t j = rng.Below(placed.size());
        ASSERT_TRUE(c.Remove(placed[j].first, placed[j].second).ok());
        placed.erase(placed.begin() + static_cast<std::ptrdiff_t>(j));
        continue;
      }
      const Request r = Pod(rng.Below(2) == 0 ? 1000 : 500, 1, 1000);
      const int n = static_cast<int>(rng.Below(40));
      const uint32_t gpus = c.FittingGpus(n, r);
      if (c.Fits(n, r) != FitResult::kFits || gpus == 0) continue;
      const Assignment a{n, gpus & (~gpus + 1)};
      ASSERT_TRUE(c.Place(r, a).ok());
      placed.emplace_back(r, a);
    }
    check(c);
    if (round == 30) {  // another cluster object: counted afresh
      const Cluster copy = c;
      check(copy);
      check(c);
    }
  }
}

// Eight P100 and eight G2 nodes of the same shape. P100-only demand is small against its GPUs,
// G2-only demand larger: on an empty cluster a pod that may go anywhere takes a P100 node.
struct SmallAndLargeClass {
  static Cluster MakeNodes() {
    std::vector<std::tuple<int64_t, int, std::string>> specs(8, {32000, 2, "P100"});
    specs.insert(specs.end(), 8, {32000, 2, "G2"});
    return Nodes(specs);
  }
  SmallAndLargeClass() {
    p100_only.allowed = ModelSet::Of(c.models().Find("P100"));
    Request g2_only = Pod(1000, 1, 4000);
    g2_only.allowed = ModelSet::Of(c.models().Find("G2"));
    std::vector<Request> requests(4, g2_only);
    requests.push_back(p100_only);
    requests.insert(requests.end(), 12, any);
    w = TargetWorkload::FromRequests(requests);
  }
  Cluster c = MakeNodes();
  Request p100_only = Pod(1000, 1, 4000);
  const Request any = Pod(1000, 1, 4000);
  TargetWorkload w;
};

TEST(PolicyTest, TesseraChargesAClassByWhatItHasFreeNow) {
  // With seven P100 nodes full of P100-only pods, P100's pressure against what it has free (0.12
  // x 16 / 2) is above G2's (0.47): the pod leaves the last P100 node to the pods that need it.
  // Only where a clock is kept, as in the replay and the extender.
  SmallAndLargeClass k;
  Cluster& c = k.c;
  const Request& p100_only = k.p100_only;
  const Request& any = k.any;
  auto policy = Make("tessera", &k.w);
  c.set_now(1);  // a clock is kept (pods come and go): the charge follows the fill
  EXPECT_EQ(policy->Select(c, any)->node, 0);
  for (int n = 0; n < 7; ++n) {
    for (uint32_t g = 0; g < 2; ++g) ASSERT_TRUE(c.Place(p100_only, {n, 1u << g}, 1).ok());
  }
  EXPECT_EQ(c.models().model(c.spec(policy->Select(c, any)->node).model).name, "G2");
  EXPECT_EQ(policy->Select(c, p100_only)->node, 7);  // which may still go there
  // Without a clock (the FGD protocol) the charge is rho_k's: the last P100 node.
  c.set_now(0);
  EXPECT_EQ(policy->Select(c, any)->node, 7);
}

TEST(PolicyTest, TesseraCountsWhatAClassHasFreeAsFarAsItsCpuServes) {
  // As above, with the seven P100 nodes' GPUs free but their CPU taken by CPU-only pods: their
  // GPUs serve no pod, so P100 has as little free as if they were full, and a pod that may go
  // anywhere leaves the last P100 node to the pods that need it.
  SmallAndLargeClass k;
  Cluster& c = k.c;
  const Request& any = k.any;
  const TargetWorkload& w = k.w;
  auto policy = Make("tessera", &w);
  c.set_now(1);
  EXPECT_EQ(policy->Select(c, any)->node, 0);
  for (int n = 0; n < 7; ++n) ASSERT_TRUE(c.Place(Pod(0, 0, 32000), {n, 0}, 1).ok());
  EXPECT_EQ(c.models().model(c.spec(policy->Select(c, any)->node).model).name, "G2");
  EXPECT_EQ(policy->Select(c, k.p100_only)->node, 7);
  // A fresh policy counts the same from the cluster as it is.
  EXPECT_EQ(c.models().model(c.spec(Make("tessera", &w)->Select(c, any)->node).model).name, "G2");
}

TEST(PolicyTest, TesseraJoinsLongRunningPodsAndLeavesYoungOnesToEmpty) {
  // Two nodes in the same state, one GPU used on each: equal steps. The pod on node 1 has run an
  // hour, the one on node 0 a minute: a new pod joins node 1, and node 0 may empty.
  const TargetWorkload w = TraceLike();
  Cluster c = Nodes({{96000, 8, "G2"}, {96000, 8, "G2"}});
  ASSERT_TRUE(c.Place(Pod(1000), {0, 0b1}, 3540).ok());
  ASSERT_TRUE(c.Place(Pod(1000), {1, 0b1}, 0).ok());
  c.set_now(3600);
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(1000))->node, 1);
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(500))->node, 1);
  // Without a clock (a caller that keeps no time) every node is as young: the first in list
  // order, as the FGD protocol's placements go.
  Cluster timeless = Nodes({{96000, 8, "G2"}, {96000, 8, "G2"}});
  ASSERT_TRUE(timeless.Place(Pod(1000), {0, 0b1}).ok());
  ASSERT_TRUE(timeless.Place(Pod(1000), {1, 0b1}).ok());
  EXPECT_EQ(Make("tessera", &w)->Select(timeless, Pod(1000))->node, 0);
  // Age decides only equal steps: a node where the pod fits better wins however young its pods.
  ASSERT_TRUE(c.Place(Pod(500), {0, 0b10}, 3590).ok());
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(500))->node, 0);
}

TEST(PolicyTest, TesseraWorksOutAgesAtEachDecisionsInstant) {
  // Node 0's pod has run since 0; node 1, fuller, holds two pods started at 3 000 s. An hour in,
  // node 0's older pod outweighs node 1's better drain; a hundred hours in, both have run about
  // as long and the drain decides. Nothing changed on either node in between: an age kept with a
  // node's cached score would choose node 0 again.
  const TargetWorkload w = TraceLike();
  Cluster c = Nodes({{96000, 8, "G2"}, {96000, 8, "G2"}});
  ASSERT_TRUE(c.Place(Pod(1000), {0, 0b1}, 0).ok());
  ASSERT_TRUE(c.Place(Pod(1000), {1, 0b1}, 3000).ok());
  ASSERT_TRUE(c.Place(Pod(1000), {1, 0b10}, 3000).ok());
  auto policy = Make("tessera", &w);
  c.set_now(3600);
  EXPECT_EQ(policy->Select(c, Pod(1000))->node, 0);
  c.set_now(360000);
  EXPECT_EQ(policy->Select(c, Pod(1000))->node, 1);
}

TEST(PolicyTest, TesseraMemoChangesNoDecision) {
  // tessera remembers scores of node states (NodeStateMemo); the unmemoised policy scores every
  // node afresh. On random clusters with many identical nodes, random requests (some limited to
  // a model) and departures, every decision must be the same.
  Rng rng(2024);
  int decisions = 0, placements = 0;
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::tuple<int64_t, int, std::string>> kinds = {
        {96000, 8, "G2"}, {104000, 2, "T4"}, {64000, 2, "P100"}, {32000, 4, "V100M16"}};
    std::vector<std::tuple<int64_t, int, std::string>> specs;
    const int nodes = 10 + static_cast<int>(rng.Below(50));
    for (int i = 0; i < nodes; ++i) specs.push_back(kinds[rng.Below(kinds.size())]);
    Cluster c = Nodes(specs);
    std::vector<Request> pool;
    for (int i = 0; i < 12; ++i) {
      const int count = rng.Below(6) == 0 ? 1 + static_cast<int>(rng.Below(4)) : 1;
      const int milli =
          count > 1 || rng.Below(2) == 0 ? 1000 : 50 * (1 + static_cast<int>(rng.Below(19)));
      Request r = Pod(milli, rng.Below(10) == 0 ? 0 : count,
                      1000 * (1 + static_cast<int64_t>(rng.Below(24))));
      if (r.gpu_count == 0) r.gpu_milli = 0;
      if (r.gpu_count > 0 && rng.Below(3) == 0) {
        r.allowed =
            ModelSet::Of(static_cast<int>(rng.Below(static_cast<uint64_t>(c.models().size()))));
      }
      pool.push_back(r);
    }
    const TargetWorkload w = TargetWorkload::FromRequests(pool);
    auto memo = Make("tessera", &w);
    auto reference = internal::MakeTesseraUnmemoised(PolicyOptions{1, &w});
    std::vector<std::tuple<Request, Assignment, double>> running;
    for (int step = 0; step < 300; ++step) {
      c.set_now(60.0 * step);  // the age preference is scored outside the memo
      if (!running.empty() && rng.Below(4) == 0) {
        const size_t k = rng.Below(running.size());
        const auto& [gone, where, started] = running[k];
        ASSERT_TRUE(c.Remove(gone, where, started).ok());
        memo->OnRemoved(c, gone, where);
        reference->OnRemoved(c, gone, where);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      const Request& r = pool[rng.Below(pool.size())];
      const auto a = memo->Select(c, r);
      const auto b = reference->Select(c, r);
      ASSERT_EQ(a.has_value(), b.has_value()) << "trial " << trial << " step " << step;
      ++decisions;
      if (!a) continue;
      ASSERT_EQ(*a, *b) << "trial " << trial << " step " << step;
      ASSERT_TRUE(c.Place(r, *a, c.now()).ok());
      memo->OnPlaced(c, r, *a);
      reference->OnPlaced(c, r, *a);
      running.emplace_back(r, *a, c.now());
      ++placements;
    }
  }
  EXPECT_GT(placements, 3000);
  EXPECT_GT(decisions, placements);  // some requests found no room
}

TEST(PolicyTest, PackingPrefersSharedGpusAndBinpackAndSpreadDisagree) {
  const TargetWorkload w = TraceLike();
  Cluster c = Nodes({{96000, 4, "G2"}, {96000, 4, "G2"}});
  ASSERT_TRUE(c.Place(Pod(300), {1, 0b0010}).ok());
  auto packed = Make("packing", &w)->Select(c, Pod(400));
  ASSERT_TRUE(packed.has_value());
  EXPECT_EQ(packed->node, 1);
  EXPECT_EQ(packed->gpus, 0b0010u);
  EXPECT_EQ(Make("binpack", &w)->Select(c, Pod(400))->node, 1);
  EXPECT_EQ(Make("spread", &w)->Select(c, Pod(400))->node, 0);
  EXPECT_EQ(Make("bestfit", &w)->Select(c, Pod(400))->node, 1);
}

TEST(PolicyTest, PackingTiersFollowThePublishedSimulator) {
  const TargetWorkload w = TraceLike();
  // Nodes: 0 idle 8 GPUs, 1 idle 2 GPUs, 2 lightly used 8 GPUs, 3 heavily used 8 GPUs.
  Cluster c = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
  ASSERT_TRUE(c.Place(Pod(1000), {2, 0b1}).ok());
  ASSERT_TRUE(c.Place(Pod(1000, 4), {3, 0b1111}).ok());
  ASSERT_TRUE(c.Place(Pod(1000, 2), {3, 0b110000}).ok());
  auto packing = Make("packing", &w);
  // Tier 2 (a used node's free GPUs) does not rank by fullness: the first used node wins.
  EXPECT_EQ(packing->Select(c, Pod(1000))->node, 2);
  EXPECT_EQ(packing->Select(c, Pod(300))->node, 2);
  // Tier 1: a GPU already shared beats every free GPU, and a fuller one (by 100-milli steps)
  // beats an emptier one.
  ASSERT_TRUE(c.Place(Pod(500), {3, 0b1000000}).ok());  // node 3 GPU 6: 500 free
  ASSERT_TRUE(c.Place(Pod(200), {2, 0b10}).ok());       // node 2 GPU 1: 800 free
  auto shared = packing->Select(c, Pod(300));
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->node, 3);
  EXPECT_EQ(shared->gpus, 0b1000000u);
  // Tier 3 only when no used node fits: the idle node with fewer GPUs first.
  Cluster idle = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}});
  EXPECT_EQ(packing->Select(idle, Pod(1000))->node, 1);
  EXPECT_EQ(packing->Select(idle, Pod(250))->node, 1);
  // A CPU-only request scores the same everywhere: the first node it fits.
  EXPECT_EQ(packing->Select(c, Pod(0, 0, 8000))->node, 0);
}

TEST(PolicyTest, ClusteringGroupsEqualShares) {
  const TargetWorkload w = TraceLike();
  Cluster c = Nodes({{96000, 4, "G2"}, {96000, 4, "G2"}, {96000, 4, "G2"}});
  auto policy = Make("clustering", &w);
  ASSERT_TRUE(c.Place(Pod(250), {0, 1}).ok());
  policy->OnPlaced(c, Pod(250), {0, 1});
  ASSERT_TRUE(c.Place(Pod(400), {2, 1}).ok());
  policy->OnPlaced(c, Pod(400), {2, 1});
  EXPECT_EQ(policy->Select(c, Pod(400))->node, 2);  // same share as what runs there
  EXPECT_EQ(policy->Select(c, Pod(600))->node, 1);  // no such node: an idle one
}

TEST(PolicyTest, RandomIsReproducibleFromItsSeed) {
  const TargetWorkload w = TraceLike();
  std::vector<int> first, second, other;
  for (auto* out : {&first, &second, &other}) {
    Cluster c = Nodes({{96000, 8, "G2"}, {96000, 8, "G2"}, {96000, 8, "G2"}, {96000, 8, "G2"}});
    auto policy = Make("random", &w, out == &other ? 2 : 1);
    for (int i = 0; i < 20; ++i) {
      auto a = policy->Select(c, Pod(250));
      ASSERT_TRUE(a.has_value());
      ASSERT_TRUE(c.Place(Pod(250), *a).ok());
      out->push_back(a->node * 100 + std::countr_zero(a->gpus));
    }
  }
  EXPECT_EQ(first, second);
  EXPECT_NE(first, other);
}

TEST(PolicyTest, ModelConstraintsAreHonoured) {
  const TargetWorkload w = TraceLike();
  Cluster c = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}});
  Request t4_only = Pod(1000, 1, 1000);
  t4_only.allowed = ModelSet::Of(c.models().Find("T4"));
  for (std::string_view name : PolicyNames()) {
    auto a = Make(name, &w)->Select(c, t4_only);
    ASSERT_TRUE(a.has_value()) << name;
    EXPECT_EQ(a->node, 1) << name;
  }
}

TEST(PolicyTest, SelectAmongIsSelectOverTheCandidates) {
  // Every deterministic policy, on a cluster part-filled by its own choices: SelectAmong over all
  // nodes is Select; over the nodes without Select's choice it is Select on a copy where that node
  // can take nothing; GpusOn of the chosen node gives Select's GPUs; the reported scores are the
  // fitting candidates' and the chosen node's is the best of them.
  const TargetWorkload w = TraceLike();
  const std::vector<Request> mix = {Pod(1000, 1, 11000), Pod(500, 1, 6000),   Pod(250, 1, 3000),
                                    Pod(0, 0, 16000),    Pod(1000, 2, 20000), Pod(320, 1, 4000)};
  for (std::string_view name : PolicyNames()) {
    if (name == "random") continue;
    SCOPED_TRACE(std::string(name));
    Cluster c = Nodes({{96000, 8, "G2"}, {104000, 2, "T4"}, {96000, 8, "G2"}, {64000, 4, "T4"}});
    auto policy = Make(name, &w);
    std::vector<int> all(static_cast<size_t>(c.node_count()));
    for (int n = 0; n < c.node_count(); ++n) all[static_cast<size_t>(n)] = n;
    for (int i = 0; i < 40; ++i) {
      const Request& r = mix[static_cast<size_t>(i) % mix.size()];
      const auto chosen = policy->Select(c, r);
      std::vector<NodeScore> scores;
      const auto among = policy->SelectAmong(c, r, all, &scores);
      ASSERT_EQ(chosen.has_value(), among.has_value()) << "request " << i;
      if (!chosen) break;
      EXPECT_EQ(*among, *chosen) << "request " << i;
      EXPECT_EQ(policy->GpusOn(c, chosen->node, r), chosen->gpus) << "request " << i;
      size_t fitting = 0;
      for (int n = 0; n < c.node_count(); ++n) fitting += c.Fits(n, r) == FitResult::kFits;
      ASSERT_EQ(scores.size(), fitting);
      for (const NodeScore& s : scores) {
        EXPECT_EQ(c.Fits(s.node, r), FitResult::kFits);
        if (s.node == chosen->node) continue;
        const NodeScore& best =
            *std::find_if(scores.begin(), scores.end(),
                          [&](const NodeScore& x) { return x.node == chosen->node; });
        EXPECT_TRUE(s.primary < best.primary ||
                    (s.primary == best.primary && s.secondary <= best.secondary));
      }
      std::vector<int> rest;
      for (int n : all) {
        if (n != chosen->node) rest.push_back(n);
      }
      Cluster without = c;
      ASSERT_TRUE(without.Place(Pod(0, 0, without.cpu_free(chosen->node)), {chosen->node, 0}).ok());
      const auto among_rest = policy->SelectAmong(c, r, rest, nullptr);
      EXPECT_EQ(among_rest, policy->Select(without, r)) << "request " << i;
      ASSERT_TRUE(c.Place(r, *chosen).ok());
      policy->OnPlaced(c, r, *chosen);
    }
  }
}

TEST(PolicyTest, WholeGpuNodesTakeOnlyWholeGpus) {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  Cluster c = *Cluster::Create(models, {{"x", 64000, 1 << 20, 2, t4, NodeMode::kWholeGpus}});
  EXPECT_EQ(c.Fits(0, Pod(500)), FitResult::kMode);
  Request mem_only = Pod(0);
  mem_only.gpu_mem_mib = 1024;
  EXPECT_EQ(c.Fits(0, mem_only), FitResult::kMode);
  EXPECT_EQ(c.Fits(0, Pod(1000, 2)), FitResult::kFits);
  const TargetWorkload w = TraceLike();
  EXPECT_FALSE(Make("tessera", &w)->Select(c, Pod(500)).has_value());
  EXPECT_EQ(Make("tessera", &w)->Select(c, Pod(1000))->gpus, 1u);
}

}  // namespace
}  // namespace tessera::placement
