// Tests of the fragmentation measure on hand-computed cases, the typical-shape selection, and the
// incremental evaluator against the direct definition.
#include "placement/frag.h"

#include <gtest/gtest.h>

#include <bit>

#include "placement/rng.h"

namespace tessera::placement {
namespace {

TargetShape Shape(int64_t cpu, int count, int milli, double weight) {
  TargetShape s;
  s.cpu_milli = cpu;
  s.gpu_count = count;
  s.gpu_milli = milli;
  s.weight = weight;
  return s;
}

Request Share(int milli, int count = 1, int64_t cpu = 0) {
  Request r;
  r.cpu_milli = cpu;
  r.gpu_count = count;
  r.gpu_milli = milli;
  return r;
}

// One node, 4 x T4, 10 cores, with GPU free shares {1000, 600, 300, 0}.
Cluster HandCase() {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  Cluster c = *Cluster::Create(models, {{"n", 10000, 1 << 20, 4, t4, NodeMode::kMemoryAndCompute}});
  EXPECT_TRUE(c.Place(Share(400), {0, 0b0010}).ok());
  EXPECT_TRUE(c.Place(Share(700), {0, 0b0100}).ok());
  EXPECT_TRUE(c.Place(Share(1000), {0, 0b1000}).ok());
  return c;
}

TEST(FragTest, HandComputedNode) {
  Cluster c = HandCase();
  ASSERT_EQ(c.share_free_total(0), 1900);
  // 500-milli shape fits (two GPUs have >= 500): its fragment is the 300 + 0 below 500.
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({Shape(0, 1, 500, 1.0)})), 300);
  // 2 whole GPUs do not fit (one free GPU): all 1900 free milli are fragment.
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({Shape(0, 2, 1000, 1.0)})), 1900);
  // 1 whole GPU fits: the 600 and 300 are fragment.
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({Shape(0, 1, 1000, 1.0)})), 900);
  // CPU-only shapes see every free GPU milli as fragment.
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({Shape(4000, 0, 0, 1.0)})), 1900);
  // A shape that lacks CPU cannot use the node at all.
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({Shape(20000, 1, 100, 1.0)})), 1900);
  // The weighted sum: 0.4*300 + 0.2*1900*3.
  const TargetWorkload mix({Shape(0, 1, 500, 0.4), Shape(0, 2, 1000, 0.2), Shape(4000, 0, 0, 0.2),
                            Shape(20000, 1, 100, 0.2)});
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, mix), 120 + 1140);
}

TEST(FragTest, ShapesOfAnotherModelOrModeSeeEverythingAsFragment) {
  Cluster c = HandCase();
  TargetShape other = Shape(0, 1, 500, 1.0);
  other.allowed = ModelSet::Of(5);
  EXPECT_EQ(ShapeNeed(c, 0, other), -1);
  EXPECT_DOUBLE_EQ(NodeFragMilli(c, 0, TargetWorkload({other})), 1900);
  TargetShape memory_only = Shape(0, 1, 0, 1.0);
  memory_only.gpu_mem_mib = 4096;
  EXPECT_EQ(ShapeNeed(c, 0, memory_only), -1);  // the node is memory+compute
}

TEST(FragTest, EmptyNodeHasNoFragmentForShapesThatFit) {
  ModelTable models;
  const int g2 = *models.Intern("G2");
  Cluster c = *Cluster::Create(models, {{"n", 96000, 1 << 20, 8, g2, NodeMode::kMemoryAndCompute}});
  EXPECT_DOUBLE_EQ(
      NodeFragMilli(c, 0, TargetWorkload({Shape(3000, 1, 810, 0.7), Shape(12000, 8, 1000, 0.3)})),
      0);
  // ... and after one 810 share, the 190 left is fragment for the 810 shape, and the 8-GPU shape
  // no longer fits anywhere on the node.
  ASSERT_TRUE(c.Place(Share(810), {0, 1}).ok());
  EXPECT_NEAR(
      NodeFragMilli(c, 0, TargetWorkload({Shape(3000, 1, 810, 0.7), Shape(12000, 8, 1000, 0.3)})),
      0.7 * 190 + 0.3 * 7190, 1e-9);
}

TEST(FragTest, TypicalShapesCoverTheRequestedFractionByFrequency) {
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(Share(500));
  for (int i = 0; i < 3; ++i) requests.push_back(Share(1000, 2, 8000));
  requests.push_back(Share(0, 0, 4000));
  const TargetWorkload w = TargetWorkload::FromRequests(requests, 0.9);
  ASSERT_EQ(w.shapes().size(), 2u);
  EXPECT_EQ(w.shapes()[0].gpu_milli, 500);
  EXPECT_DOUBLE_EQ(w.shapes()[0].weight, 6.0 / 9.0);
  EXPECT_EQ(w.shapes()[1].gpu_count, 2);
  EXPECT_EQ(w.shapes()[1].cpu_milli, 8000);
  EXPECT_DOUBLE_EQ(w.shapes()[1].weight, 3.0 / 9.0);
  EXPECT_EQ(TargetWorkload::FromRequests(requests, 1.0).shapes().size(), 3u);
}

TEST(FragTest, EvaluatorAgreesWithTheDefinition) {
  ModelTable models;
  const int a = *models.Intern("G2");
  const int b = *models.Intern("T4");
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < 12; ++i) {
    nodes.push_back({std::string("n").append(std::to_string(i)), 32000 + 8000 * (i % 3), 1 << 20,
                     i % 2 ? 8 : 2, i % 2 ? a : b, NodeMode::kMemoryAndCompute});
  }
  Cluster c = *Cluster::Create(models, nodes);
  std::vector<Request> kinds = {Share(810, 1, 3000), Share(470, 1, 8000),   Share(1000, 1, 11000),
                                Share(320, 1, 4000), Share(1000, 2, 16000), Share(0, 0, 12000),
                                Share(230, 1, 2000)};
  kinds[1].allowed = ModelSet::Of(a);
  const TargetWorkload w = TargetWorkload::FromRequests(kinds, 1.0);
  FragEvaluator eval(c, w);
  Rng rng(7);
  int checked = 0;
  for (int step = 0; step < 400; ++step) {
    const Request& r = kinds[rng.Below(kinds.size())];
    const int n = static_cast<int>(rng.Below(static_cast<uint64_t>(c.node_count())));
    if (c.Fits(n, r) != FitResult::kFits) continue;
    uint32_t gpus = 0;
    const uint32_t fitting = c.FittingGpus(n, r);
    for (int g = 0; g < 32 && std::popcount(gpus) < r.gpu_count; ++g) {
      if ((fitting >> g) & 1) gpus |= 1u << g;
    }
    const double predicted = eval.FragAfter(n, r, gpus);
    double predicted_one = predicted;
    if (r.gpu_count == 1 && !r.whole_gpus()) {
      const int g = std::countr_zero(gpus);
      predicted_one = eval.FragAfterOneGpu(n, r, c.gpu_share_free(n)[static_cast<size_t>(g)],
                                           ShareAfter(c, n, g, r));
    }
    ASSERT_TRUE(c.Place(r, {n, gpus}).ok());
    const double actual = NodeFragMilli(c, n, w);
    ASSERT_NEAR(predicted, actual, 1e-6) << "step " << step;
    ASSERT_NEAR(predicted_one, actual, 1e-6) << "step " << step;
    ASSERT_NEAR(eval.Frag(n), actual, 1e-6) << "step " << step;
    ++checked;
  }
  EXPECT_GT(checked, 50);
  double sum = 0;
  for (int n = 0; n < c.node_count(); ++n) sum += NodeFragMilli(c, n, w);
  EXPECT_NEAR(eval.ClusterFragMilli(), sum, 1e-6);
}

}  // namespace
}  // namespace tessera::placement
