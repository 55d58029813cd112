// Tests of the shape rule (placement/fit.h): what never fits a node whatever is freed there, and
// that Cluster::Fits applies it before anything that depends on the node's state.
#include "placement/fit.h"

#include <gtest/gtest.h>

#include "placement/mig.h"

namespace tessera::placement {
namespace {

Request Share(int gpus, int milli, int64_t mem_mib = kProportionalMemory) {
  Request r;
  r.gpu_count = gpus;
  r.gpu_milli = milli;
  r.gpu_mem_mib = mem_mib;
  return r;
}

NodeShape Node(NodeMode mode, int gpus = 2, int64_t mib = 16384) {
  NodeShape s;
  s.mode = mode;
  s.gpu_count = gpus;
  s.gpu_memory_mib = mib;
  return s;
}

TEST(ShapeFitsTest, FormsMatchModes) {
  EXPECT_EQ(ShapeFits(Share(1, 300), Node(NodeMode::kMemoryAndCompute)), FitResult::kFits);
  EXPECT_EQ(ShapeFits(Share(1, 300), Node(NodeMode::kMemoryOnly)), FitResult::kMode);
  EXPECT_EQ(ShapeFits(Share(1, 0, 4096), Node(NodeMode::kMemoryOnly)), FitResult::kFits);
  EXPECT_EQ(ShapeFits(Share(1, 0, 4096), Node(NodeMode::kMemoryAndCompute)), FitResult::kMode);
  EXPECT_EQ(ShapeFits(Share(1, 300), Node(NodeMode::kWholeGpus)), FitResult::kMode);
  for (NodeMode m : {NodeMode::kMemoryAndCompute, NodeMode::kMemoryOnly, NodeMode::kWholeGpus}) {
    EXPECT_EQ(ShapeFits(Share(2, 1000), Node(m)), FitResult::kFits) << NodeModeName(m);
  }
  EXPECT_EQ(ShapeFits(Share(1, 1000), Node(NodeMode::kMig)), FitResult::kMode);
  EXPECT_EQ(ShapeFits(Request{}, Node(NodeMode::kMig, 0)), FitResult::kFits) << "CPU only";
}

TEST(ShapeFitsTest, CountSizeAndGpusPerRequest) {
  EXPECT_EQ(ShapeFits(Share(3, 1000), Node(NodeMode::kWholeGpus)), FitResult::kGpuCount);
  // A memory ask is a floor for whole GPUs too: 20 GiB never fits a 16 GiB GPU.
  EXPECT_EQ(ShapeFits(Share(1, 1000, 20480), Node(NodeMode::kMemoryAndCompute)),
            FitResult::kGpuSize);
  EXPECT_EQ(ShapeFits(Share(1, 1000, 16384), Node(NodeMode::kMemoryAndCompute)), FitResult::kFits);
  EXPECT_EQ(ShapeFits(Share(1, 500, 16385), Node(NodeMode::kMemoryAndCompute)),
            FitResult::kGpuSize);
  EXPECT_EQ(ShapeFits(Share(1, 0, 20480), Node(NodeMode::kMemoryOnly)), FitResult::kGpuSize);
  NodeShape mps = Node(NodeMode::kMemoryAndCompute);
  mps.max_gpus_per_request = 1;
  EXPECT_EQ(ShapeFits(Share(1, 300), mps), FitResult::kFits);
  EXPECT_EQ(ShapeFits(Share(2, 300), mps), FitResult::kMode);
  EXPECT_TRUE(IsShapeFailure(FitResult::kGpuSize));
  EXPECT_FALSE(IsShapeFailure(FitResult::kGpuMemory)) << "freed memory cures it";
}

TEST(ShapeFitsTest, MigProfilesOfTheNodesModel) {
  NodeShape mig = Node(NodeMode::kMig, 1, 81920);
  mig.mig_model = *mig::FindGpuModel("H100-80GB");
  auto three = RequestForMigProfile(0, 0, "3g.40gb");
  auto a30 = RequestForMigProfile(0, 0, "1g.6gb");
  ASSERT_TRUE(three.ok() && a30.ok());
  EXPECT_EQ(ShapeFits(*three, mig), FitResult::kFits);
  EXPECT_EQ(ShapeFits(*a30, mig), FitResult::kMigProfile);
  EXPECT_EQ(ShapeFits(*three, Node(NodeMode::kMemoryAndCompute)), FitResult::kMode);
}

TEST(ShapeFitsTest, ClusterFitsAppliesTheRuleFirst) {
  ModelTable models;
  const int t4 = *models.Intern("T4", 16384);
  NodeSpec a{"a", 1000, 1024, 2, t4};
  NodeSpec b = a;
  b.name = "b";
  b.max_gpus_per_request = 1;
  Cluster c(models, {a, b});
  Request big = Share(1, 1000, 20480);
  big.cpu_milli = 10;
  EXPECT_EQ(c.Fits(0, big), FitResult::kGpuSize);
  EXPECT_EQ(c.Fits(1, Share(2, 300)), FitResult::kMode);
  EXPECT_EQ(c.Fits(0, Share(2, 300)), FitResult::kFits);
}

}  // namespace
}  // namespace tessera::placement
