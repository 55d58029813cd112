// Tests of the stranded-GPU definition (stranded.h): each rule on hand-built nodes, the demand's
// choice between waiting pods and the target workload, and the count over a cluster.
#include "placement/stranded.h"

#include <gtest/gtest.h>

#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/model.h"

namespace tessera::placement {
namespace {

// Node 0 "a": 2 x T4 (16 GiB), 8 cores, memory+compute. Node 1 "b": 2 x V100M32, 4 cores,
// memory-only. Node 2 "c": 2 x T4, 8 cores, memory+compute.
Cluster ThreeNodes() {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  const int v100 = *models.Intern("V100M32");
  std::vector<NodeSpec> nodes = {
      {"a", 8000, 65536, 2, t4, NodeMode::kMemoryAndCompute},
      {"b", 4000, 65536, 2, v100, NodeMode::kMemoryOnly},
      {"c", 8000, 65536, 2, t4, NodeMode::kMemoryAndCompute},
  };
  return *Cluster::Create(models, nodes);
}

Request Share(int milli, int count = 1, int64_t cpu = 1000) {
  Request r;
  r.cpu_milli = cpu;
  r.gpu_count = count;
  r.gpu_milli = milli;
  return r;
}

Request MemoryOnly(int64_t mib) {
  Request r = Share(0);
  r.gpu_mem_mib = mib;
  return r;
}

void Put(Cluster& c, const Request& r, int node, uint32_t gpus) {
  ASSERT_TRUE(c.Place(r, {node, gpus}).ok());
}

TEST(StrandedTest, FreeCapacityNoRequestCanTakeIsStranded) {
  Cluster c = ThreeNodes();
  Put(c, Share(800), 0, 0b01);  // a: GPU 0 has 20 % left, GPU 1 is free
  const std::vector<Request> thirty = {Share(300)};
  EXPECT_EQ(StrandedGpus(c, 0, thirty), 0b01u) << "20 % free that a 30 % share cannot use";
  const std::vector<Request> twenty = {Share(200)};
  EXPECT_EQ(StrandedGpus(c, 0, twenty), 0u) << "a 20 % share takes GPU 0, anything takes GPU 1";
  // Two whole GPUs on one node: a's free GPU is no use to them, c's two are.
  const std::vector<Request> pair = {Share(1000, 2)};
  EXPECT_EQ(StrandedGpus(c, 0, pair), 0b11u);
  EXPECT_EQ(StrandedGpus(c, 2, pair), 0u);
  // Any request that can take a GPU keeps it from being stranded.
  const std::vector<Request> both = {Share(1000, 2), Share(300)};
  EXPECT_EQ(StrandedGpus(c, 0, both), 0b01u);
}

TEST(StrandedTest, AFullGpuIsNeverStranded) {
  Cluster c = ThreeNodes();
  Put(c, Share(1000), 0, 0b01);
  Put(c, Share(600), 0, 0b10);
  Put(c, Share(400), 0, 0b10);
  const std::vector<Request> any = {Share(1000, 2)};
  EXPECT_FALSE(GpuHasFree(c, 0, 0));
  EXPECT_FALSE(GpuHasFree(c, 0, 1));
  EXPECT_EQ(StrandedGpus(c, 0, any), 0u);
}

TEST(StrandedTest, MemoryLeftWithoutComputeOrComputeWithoutMemoryIsStranded) {
  Cluster c = ThreeNodes();
  Request all_memory = Share(200);
  all_memory.gpu_mem_mib = 16 * 1024;  // 20 % of the time and all of the memory
  Put(c, all_memory, 0, 0b01);
  EXPECT_TRUE(GpuHasFree(c, 0, 0));
  const std::vector<Request> small = {Share(100)};
  EXPECT_EQ(StrandedGpus(c, 0, small), 0b01u) << "80 % of its time free, and no memory for it";
}

TEST(StrandedTest, ANodeWithoutCpuStrandsItsFreeGpus) {
  Cluster c = ThreeNodes();
  Request cpu;
  cpu.cpu_milli = 8000;
  Put(c, cpu, 2, 0);  // c's CPU is all taken; its GPUs are free
  const std::vector<Request> share = {Share(300)};
  EXPECT_EQ(StrandedGpus(c, 2, share), 0b11u);
  EXPECT_EQ(StrandedGpus(c, 0, share), 0u);
}

TEST(StrandedTest, ModelAndModeRulesCount) {
  Cluster c = ThreeNodes();
  Request t4_only = Share(300);
  t4_only.allowed = ModelSet::Of(0);
  const std::vector<Request> demand = {t4_only};
  EXPECT_EQ(StrandedGpus(c, 1, demand), 0b11u) << "b's V100s are free, but not for a T4-only pod";
  // Memory-only node: free means memory free; only memory-only shares use it.
  const std::vector<Request> mem = {MemoryOnly(8 * 1024)};
  EXPECT_EQ(StrandedGpus(c, 1, mem), 0u);
  Put(c, MemoryOnly(30 * 1024), 1, 0b01);  // 2 GiB of GPU 0 left
  EXPECT_EQ(StrandedGpus(c, 1, mem), 0b01u);
  EXPECT_EQ(StrandedGpus(c, 0, mem), 0b11u) << "a memory-only share never goes to node a";
}

TEST(StrandedTest, NoDemandStrandsNothing) {
  Cluster c = ThreeNodes();
  Put(c, Share(800), 0, 0b01);
  EXPECT_EQ(StrandedGpus(c, 0, {}), 0u);
  EXPECT_EQ(CountStranded(c, {}).gpus, 0);
}

TEST(StrandedTest, TheDemandIsTheWaitingPodsElseTheWorkloadShapes) {
  const TargetWorkload workload = TargetWorkload::FromRequests(
      std::vector<Request>{Share(300), Share(300), Share(1000, 2), Request{.cpu_milli = 500}});
  const std::vector<Request> waiting = {Share(700)};
  const std::vector<Request> now = StrandingDemand(waiting, workload);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].gpu_milli, 700);
  const std::vector<Request> typical = StrandingDemand({}, workload);
  ASSERT_EQ(typical.size(), 2u) << "the CPU-only shape is left out";
  for (const Request& r : typical) {
    EXPECT_TRUE((r.gpu_milli == 300 && r.gpu_count == 1) ||
                (r.gpu_milli == 1000 && r.gpu_count == 2));
  }
  EXPECT_TRUE(StrandingDemand({}, TargetWorkload()).empty());
}

TEST(StrandedTest, CountsOverTheCluster) {
  Cluster c = ThreeNodes();
  Put(c, Share(800), 0, 0b01);
  Put(c, Share(800), 2, 0b01);
  Put(c, Share(900), 2, 0b10);
  const std::vector<Request> demand = {Share(300)};
  // a: GPU 0 (200 free) stranded, GPU 1 free and usable; b: memory-only, no use to a compute
  // share: both stranded (2000 free); c: 200 and 100 free, both stranded.
  const StrandedCount n = CountStranded(c, demand);
  EXPECT_EQ(n.gpus, 5);
  EXPECT_EQ(n.free_milli, 200 + 2000 + 200 + 100);
}

}  // namespace
}  // namespace tessera::placement
