// Tests of the resource model and every fit rule: CPU, memory, model, compute share, memory share,
// mode, multi-GPU, whole GPUs; and of Place/Remove bookkeeping, the starts of GPU requests
// included.
#include "placement/cluster.h"

#include <gtest/gtest.h>

#include <cmath>

#include "placement/model.h"

namespace tessera::placement {
namespace {

struct Fixture {
  Cluster cluster;
  int t4 = 0, v100 = 0;
};

// Node 0: 2 x T4 (16 GiB), 16 cores, 64 GiB, memory+compute. Node 1: 4 x V100M32, 32 cores,
// 128 GiB, memory-only.
Cluster TwoNodes() {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  const int v100 = *models.Intern("V100M32");
  std::vector<NodeSpec> nodes = {
      {"a", 16000, 65536, 2, t4, NodeMode::kMemoryAndCompute},
      {"b", 32000, 131072, 4, v100, NodeMode::kMemoryOnly},
  };
  return *Cluster::Create(models, nodes);
}

Request Share(int milli, int count = 1, int64_t cpu = 1000, int64_t mem = 1024) {
  Request r;
  r.cpu_milli = cpu;
  r.memory_mib = mem;
  r.gpu_count = count;
  r.gpu_milli = milli;
  return r;
}

TEST(ModelTest, KnownModelsHaveTheirMemory) {
  ModelTable models;
  EXPECT_EQ(models.model(*models.Intern("T4")).memory_mib, 16 * 1024);
  EXPECT_EQ(models.model(*models.Intern("V100M32")).memory_mib, 32 * 1024);
  EXPECT_EQ(models.model(*models.Intern("Mystery", 12345)).memory_mib, 12345);
  EXPECT_EQ(*models.Intern("T4"), 0);  // interned once
  EXPECT_EQ(models.Find("nope"), -1);
}

TEST(ModelTest, ProportionalMemoryRoundsDownSoSharesThatSumTo1000Fit) {
  Request a = Share(810), b = Share(190);
  EXPECT_LE(a.MemoryOn(16384) + b.MemoryOn(16384), 16384);
  EXPECT_EQ(Share(1000).MemoryOn(16384), 16384);
  Request fixed = Share(500);
  fixed.gpu_mem_mib = 2048;
  EXPECT_EQ(fixed.MemoryOn(16384), 2048);
}

TEST(ModelTest, ShareFormBuildsRequestsAndRejectsBadValues) {
  auto r = RequestFromShareForm(2000, 4096, 1, 4, 30);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->gpu_milli, 300);
  EXPECT_EQ(r->gpu_mem_mib, 4096);
  auto mem_only = RequestFromShareForm(0, 0, 1, 8, 0);
  ASSERT_TRUE(mem_only.ok());
  EXPECT_TRUE(mem_only->memory_only());
  auto core_only = RequestFromShareForm(0, 0, 2, 0, 50);
  ASSERT_TRUE(core_only.ok());
  EXPECT_EQ(core_only->gpu_mem_mib, kProportionalMemory);
  EXPECT_TRUE(RequestFromShareForm(0, 0, 1, 0, 100)->whole_gpus());
  auto bad = RequestFromShareForm(0, 0, 1, 4, 33);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("gpu-core=33"), std::string::npos) << bad.error();
  EXPECT_FALSE(RequestFromShareForm(0, 0, 1, 0, 0).ok());  // neither memory nor compute
  EXPECT_FALSE(RequestFromShareForm(0, 0, 0, 4, 0).ok());  // a share of no GPU
  EXPECT_FALSE(RequestFromShareForm(0, 0, 1, -1, 10).ok());
}

TEST(FitTest, Cpu) {
  Cluster c = TwoNodes();
  EXPECT_EQ(c.Fits(0, Share(500, 1, 16000)), FitResult::kFits);
  EXPECT_EQ(c.Fits(0, Share(500, 1, 16001)), FitResult::kCpu);
  Request cpu_only;
  cpu_only.cpu_milli = 17000;
  EXPECT_EQ(c.Fits(0, cpu_only), FitResult::kCpu);
  cpu_only.cpu_milli = 16000;
  EXPECT_EQ(c.Fits(0, cpu_only), FitResult::kFits);
}

TEST(FitTest, Memory) {
  Cluster c = TwoNodes();
  EXPECT_EQ(c.Fits(0, Share(500, 1, 1000, 65536)), FitResult::kFits);
  EXPECT_EQ(c.Fits(0, Share(500, 1, 1000, 65537)), FitResult::kMemory);
}

TEST(FitTest, Model) {
  Cluster c = TwoNodes();
  Request r = Share(1000);
  r.allowed = ModelSet::Of(c.models().Find("V100M32"));
  EXPECT_EQ(c.Fits(0, r), FitResult::kModel);
  EXPECT_EQ(c.Fits(1, r), FitResult::kFits);
  r.allowed = ModelSet::None();
  EXPECT_EQ(c.Fits(1, r), FitResult::kModel);
}

TEST(FitTest, ModeIsNeverMixed) {
  Cluster c = TwoNodes();
  Request compute = Share(300);
  EXPECT_EQ(c.Fits(0, compute), FitResult::kFits);
  EXPECT_EQ(c.Fits(1, compute), FitResult::kMode);
  Request memory_only = Share(0);
  memory_only.gpu_mem_mib = 8192;
  EXPECT_EQ(c.Fits(0, memory_only), FitResult::kMode);
  EXPECT_EQ(c.Fits(1, memory_only), FitResult::kFits);
  // Whole GPUs fit both modes.
  EXPECT_EQ(c.Fits(0, Share(1000)), FitResult::kFits);
  EXPECT_EQ(c.Fits(1, Share(1000)), FitResult::kFits);
}

TEST(FitTest, ComputeShare) {
  Cluster c = TwoNodes();
  ASSERT_TRUE(c.Place(Share(700), {0, 0b01}).ok());
  ASSERT_TRUE(c.Place(Share(700), {0, 0b10}).ok());
  EXPECT_EQ(c.Fits(0, Share(300)), FitResult::kFits);
  EXPECT_EQ(c.Fits(0, Share(310)), FitResult::kGpuCompute);
  EXPECT_TRUE(c.GpuFits(0, 0, Share(300)));
  EXPECT_FALSE(c.GpuFits(0, 0, Share(310)));
}

TEST(FitTest, MemoryShare) {
  Cluster c = TwoNodes();
  Request big_mem = Share(100);
  big_mem.gpu_mem_mib = 12 * 1024;  // a small compute share with most of a 16 GiB T4's memory
  ASSERT_TRUE(c.Place(big_mem, {0, 0b01}).ok());
  ASSERT_TRUE(c.Place(big_mem, {0, 0b10}).ok());
  Request r = Share(100);
  r.gpu_mem_mib = 5 * 1024;
  EXPECT_EQ(c.Fits(0, r), FitResult::kGpuMemory);
  r.gpu_mem_mib = 4 * 1024;
  EXPECT_EQ(c.Fits(0, r), FitResult::kFits);
  // The free share follows the scarcer of compute and memory: 4 GiB of 16 is 250 milli.
  EXPECT_EQ(c.gpu_share_free(0)[0], 250);
  // On a memory-only node, compute is not divided and memory is the share.
  Request mem_only = Share(0);
  mem_only.gpu_mem_mib = 24 * 1024;
  ASSERT_TRUE(c.Place(mem_only, {1, 0b0001}).ok());
  EXPECT_EQ(c.gpu_milli_free(1)[0], 1000);
  EXPECT_EQ(c.gpu_share_free(1)[0], 250);
  mem_only.gpu_mem_mib = 9 * 1024;
  EXPECT_FALSE(c.GpuFits(1, 0, mem_only));
  EXPECT_TRUE(c.GpuFits(1, 1, mem_only));
}

TEST(FitTest, MultiGpuNeedsDistinctGpusWithEqualShares) {
  Cluster c = TwoNodes();
  EXPECT_EQ(c.Fits(0, Share(1000, 3)), FitResult::kGpuCount);
  EXPECT_EQ(c.Fits(0, Share(1000, 2)), FitResult::kFits);
  ASSERT_TRUE(c.Place(Share(600), {0, 0b01}).ok());
  EXPECT_EQ(c.Fits(0, Share(400, 2)), FitResult::kFits);
  EXPECT_EQ(c.Fits(0, Share(500, 2)), FitResult::kGpuCompute);
  // Two shares on one GPU are not two GPUs.
  EXPECT_FALSE(c.Place(Share(400, 2), {0, 0b01}).ok());
  ASSERT_TRUE(c.Place(Share(400, 2), {0, 0b11}).ok());
  EXPECT_EQ(c.gpu_milli_free(0)[0], 0);
  EXPECT_EQ(c.gpu_milli_free(0)[1], 600);
}

TEST(FitTest, WholeGpusTakeOnlyFreeGpus) {
  Cluster c = TwoNodes();
  ASSERT_TRUE(c.Place(Share(10), {0, 0b01}).ok());
  EXPECT_EQ(c.whole_gpus_free(0), 1);
  EXPECT_EQ(c.Fits(0, Share(1000, 2)), FitResult::kGpuCompute);
  EXPECT_EQ(c.Fits(0, Share(1000, 1)), FitResult::kFits);
  EXPECT_FALSE(c.GpuFits(0, 0, Share(1000)));  // 990 milli free is not a free GPU
  EXPECT_FALSE(c.Place(Share(1000), {0, 0b01}).ok());
  // A memory-only tenant also makes a GPU not free.
  Request mem_only = Share(0);
  mem_only.gpu_mem_mib = 1024;
  ASSERT_TRUE(c.Place(mem_only, {1, 0b0010}).ok());
  EXPECT_EQ(c.whole_gpus_free(1), 3);
  EXPECT_FALSE(c.GpuFits(1, 1, Share(1000)));
}

TEST(FitTest, gpu_modes_AMixedNodeFitsByEachGpusMode) {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  NodeSpec s{"m", 64000, 262144, 4, t4, NodeMode::kMemoryAndCompute};
  // GPUs 0-1 MPS (tag 5), 2 memory+compute (tag 0), 3 whole-GPU (tag 3).
  s.gpu_modes = {
      GpuMode{NodeMode::kMemoryAndCompute, true, 5}, GpuMode{NodeMode::kMemoryAndCompute, true, 5},
      GpuMode{NodeMode::kMemoryAndCompute, false, 0}, GpuMode{NodeMode::kWholeGpus, false, 3}};
  Cluster c = *Cluster::Create(models, {s});
  EXPECT_EQ(c.Fits(0, Share(300)), FitResult::kFits);
  EXPECT_EQ(c.FittingGpus(0, Share(300)), 0x7u) << "not the whole-GPU GPU";
  EXPECT_EQ(c.Fits(0, Share(300, 2)), FitResult::kGpuCount) << "MPS GPUs serve one GPU requests";
  Request memory = Share(0);
  memory.gpu_mem_mib = 1024;
  EXPECT_EQ(c.Fits(0, memory), FitResult::kMode) << "no memory-only GPU";
  Request only_mps = Share(300);
  only_mps.gpu_modes = uint32_t{1} << 5;
  EXPECT_EQ(c.FittingGpus(0, only_mps), 0x3u);
  Request only_whole = Share(300);
  only_whole.gpu_modes = uint32_t{1} << 3;
  EXPECT_EQ(c.Fits(0, only_whole), FitResult::kMode);
  // Whole GPUs: one fits any of the four; two only of one mode: GPUs 2 and 3 differ, 0-1 are MPS.
  EXPECT_EQ(c.FittingGpus(0, Share(1000)), 0xFu);
  EXPECT_EQ(c.Fits(0, Share(1000, 2)), FitResult::kGpuCount);
  EXPECT_FALSE(c.Place(Share(1000, 2), Assignment{0, 0xCu}).ok());
  // The memory-only share of a GPU counts its own mode: take half of GPU 2's compute.
  ASSERT_TRUE(c.Place(Share(500), Assignment{0, 0x4u}).ok());
  EXPECT_EQ(c.gpu_share_free(0)[2], 500);
  EXPECT_EQ(c.FittingGpus(0, Share(600)), 0x3u);

  // Create checks the modes: one per GPU, never MIG.
  NodeSpec short_list = s;
  short_list.gpu_modes.pop_back();
  auto bad = Cluster::Create(models, {short_list});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("3 GPU modes for 4 GPUs"), std::string::npos) << bad.error();
  NodeSpec mig_gpu = s;
  mig_gpu.gpu_modes[1].mode = NodeMode::kMig;
  bad = Cluster::Create(models, {mig_gpu});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("GPU 1 in mode mig"), std::string::npos) << bad.error();
}

TEST(PlaceTest, ChangeLogNamesTheLastChangedNodes) {
  Cluster c = TwoNodes();
  EXPECT_EQ(c.changes(), 0u);
  EXPECT_EQ(c.changed_node(0), -1);
  EXPECT_EQ(c.changed_node(1), -1);
  const Request r = Share(1000, 1, 1000, 1024);  // a whole GPU: fits either node's mode
  ASSERT_TRUE(c.Place(r, {1, 0b1}).ok());
  ASSERT_TRUE(c.Place(r, {0, 0b1}).ok());
  EXPECT_EQ(c.changes(), 2u);
  EXPECT_EQ(c.changed_node(1), 1);
  EXPECT_EQ(c.changed_node(2), 0);
  EXPECT_EQ(c.changed_node(3), -1);  // not yet made
  // A refused placement or removal changes nothing and logs nothing.
  EXPECT_FALSE(c.Remove(Share(250, 2, 1000, 1024), {1, 0b11}).ok());
  EXPECT_EQ(c.changes(), 2u);
  // Only the last kChangeLog changes are kept.
  for (uint64_t i = 0; i < Cluster::kChangeLog; ++i) {
    ASSERT_TRUE(c.Remove(r, {1, 0b1}).ok());
    ASSERT_TRUE(c.Place(r, {1, 0b1}).ok());
  }
  const uint64_t last = c.changes();
  EXPECT_EQ(last, 2 + 2 * Cluster::kChangeLog);
  EXPECT_EQ(c.changed_node(last), 1);
  EXPECT_EQ(c.changed_node(last - Cluster::kChangeLog + 1), 1);
  EXPECT_EQ(c.changed_node(last - Cluster::kChangeLog), -1);
  EXPECT_EQ(c.changed_node(2), -1);
  // A copy has the same log (and another id).
  const Cluster copy = c;
  EXPECT_EQ(copy.changes(), last);
  EXPECT_EQ(copy.changed_node(last), 1);
  EXPECT_NE(copy.id(), c.id());
}

TEST(PlaceTest, PlaceAndRemoveKeepTheBooks) {
  Cluster c = TwoNodes();
  const uint64_t v = c.version(0);
  Request r = Share(250, 2, 4000, 8192);
  ASSERT_TRUE(c.Place(r, {0, 0b11}).ok());
  EXPECT_EQ(c.cpu_free(0), 12000);
  EXPECT_EQ(c.memory_free(0), 65536 - 8192);
  EXPECT_EQ(c.gpu_milli_allocated(), 500);
  EXPECT_EQ(c.share_free_total(0), 1500);
  EXPECT_EQ(c.gpu_memory_free(0)[1], 16384 - 4096);
  EXPECT_GT(c.version(0), v);
  ASSERT_TRUE(c.Remove(r, {0, 0b11}).ok());
  EXPECT_EQ(c.cpu_free(0), 16000);
  EXPECT_EQ(c.gpu_milli_allocated(), 0);
  EXPECT_EQ(c.whole_gpus_free(0), 2);
  EXPECT_EQ(c.share_free_total(0), 2000);
  // Taking back what was never placed is refused and changes nothing.
  EXPECT_FALSE(c.Remove(r, {0, 0b11}).ok());
  EXPECT_EQ(c.cpu_free(0), 16000);
}

TEST(PlaceTest, TheOldestStartOfANodesGpuRequestsFollowsPlacesAndRemoves) {
  Cluster c = TwoNodes();
  const double none = c.oldest_gpu_start(0);
  EXPECT_TRUE(std::isinf(none));
  EXPECT_EQ(c.now(), 0);
  c.set_now(500);
  EXPECT_EQ(c.now(), 500);
  ASSERT_TRUE(c.Place(Share(250), {0, 0b01}, 300).ok());
  ASSERT_TRUE(c.Place(Share(250), {0, 0b01}, 100).ok());
  ASSERT_TRUE(c.Place(Share(250), {0, 0b10}, 200).ok());
  Request cpu_only;
  cpu_only.cpu_milli = 1000;
  ASSERT_TRUE(c.Place(cpu_only, {0, 0}, 50).ok());  // no GPU: not counted
  EXPECT_EQ(c.oldest_gpu_start(0), 100);
  EXPECT_TRUE(std::isinf(c.oldest_gpu_start(1)));
  // A removal names the start it was placed with; one that names another changes nothing.
  Status wrong = c.Remove(Share(250), {0, 0b01}, 150);
  EXPECT_NE(wrong.message().find("started at 150"), std::string::npos) << wrong.message();
  EXPECT_EQ(c.share_free_total(0), 1250);
  ASSERT_TRUE(c.Remove(Share(250), {0, 0b01}, 100).ok());
  EXPECT_EQ(c.oldest_gpu_start(0), 200);
  ASSERT_TRUE(c.Remove(Share(250), {0, 0b10}, 200).ok());
  ASSERT_TRUE(c.Remove(cpu_only, {0, 0}, 50).ok());
  EXPECT_EQ(c.oldest_gpu_start(0), 300);
  ASSERT_TRUE(c.Remove(Share(250), {0, 0b01}, 300).ok());
  EXPECT_TRUE(std::isinf(c.oldest_gpu_start(0)));
  EXPECT_FALSE(c.Place(Share(250), {0, 0b01}, std::nan("")).ok());
  EXPECT_EQ(c.share_free_total(0), 2000);
}

TEST(PlaceTest, InvalidAssignmentsAreRefusedWithReasons) {
  Cluster c = TwoNodes();
  Status s = c.Place(Share(500), {7, 1});
  EXPECT_NE(s.message().find("no such node"), std::string::npos);
  s = c.Place(Share(500), {0, 0b11});  // two GPUs for a one-GPU request
  EXPECT_NE(s.message().find("needs 1"), std::string::npos) << s.message();
  s = c.Place(Share(500), {0, 0b100});  // GPU 2 of a two-GPU node
  EXPECT_FALSE(s.ok());
  s = c.Place(Share(500, 1, 99000), {0, 0b1});
  EXPECT_NE(s.message().find("CPU"), std::string::npos) << s.message();
}

TEST(PlaceTest, CopiesGetANewIdentity) {
  Cluster c = TwoNodes();
  Cluster copy = c;
  EXPECT_NE(c.id(), copy.id());
  Cluster moved = std::move(copy);
  EXPECT_NE(moved.id(), c.id());
}

TEST(PlaceTest, CreateRejectsBadNodes) {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  EXPECT_FALSE(Cluster::Create(models, {{"x", 1, 1, 33, t4, NodeMode::kMemoryAndCompute}}).ok());
  EXPECT_FALSE(Cluster::Create(models, {{"x", 1, 1, 2, 5, NodeMode::kMemoryAndCompute}}).ok());
  EXPECT_FALSE(Cluster::Create(models, {{"x", -1, 1, 2, t4, NodeMode::kMemoryAndCompute}}).ok());
}

}  // namespace
}  // namespace tessera::placement
