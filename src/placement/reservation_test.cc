// Tests of the reservations for waiting multi-GPU pods: who holds one (also a single GPU asking
// the CPU of several, or one that few GPUs serve), which node (the closest to fitting, oldest pod
// first, one node each, fewer than kHeldGpus GPUs asked by the holders, only once a pod has waited
// hold_after_s), who may still use a held node, that a placement on a node no one holds leaves the
// plan as it was, and FitsWhenEmpty's rules.
#include "placement/reservation.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace tessera::placement {
namespace {

Request Gpus(int count, int milli = kMilliPerGpu, int64_t cpu = 1000) {
  Request r;
  r.cpu_milli = cpu;
  r.memory_mib = 1024;
  r.gpu_count = count;
  r.gpu_milli = milli;
  return r;
}

Request CpuOnly(int64_t cpu) {
  Request r;
  r.cpu_milli = cpu;
  r.memory_mib = 1024;
  return r;
}

// Four 8-GPU nodes with 64 cores and a 2-GPU node.
Cluster Nodes() {
  ModelTable models;
  const int g2 = *models.Intern("G2");
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back({"n" + std::to_string(i), 64000, 1 << 20, 8, g2, NodeMode::kMemoryAndCompute});
  }
  specs.push_back({"small", 64000, 1 << 20, 2, g2, NodeMode::kMemoryAndCompute});
  return *Cluster::Create(models, specs);
}

// Puts whole GPUs (one pod each) on `node`.
void Fill(Cluster& c, int node, int gpus) {
  int placed = 0;
  for (int g = 0; g < c.spec(node).gpu_count && placed < gpus; ++g) {
    if (!c.GpuFits(node, g, Gpus(1))) continue;
    ASSERT_TRUE(c.Place(Gpus(1), Assignment{node, uint32_t{1} << g}).ok());
    ++placed;
  }
}

TEST(ReservationsTest, PodsAskingSeveralGpusOrTheCpuOfSeveralHoldOne) {
  Cluster c = Nodes();  // 8 cores per GPU on the 8-GPU nodes, 32 on the 2-GPU node
  Reservations r;
  EXPECT_TRUE(r.Holds(c, Gpus(2)));
  EXPECT_TRUE(r.Holds(c, Gpus(8)));
  EXPECT_FALSE(r.Holds(c, Gpus(1)));
  EXPECT_FALSE(r.Holds(c, Gpus(1, 500)));
  EXPECT_FALSE(r.Holds(c, CpuOnly(1000)));
  // One GPU with the CPU of two of every node's GPUs: 64 cores (2 x 32 on the 2-GPU node).
  EXPECT_TRUE(r.Holds(c, Gpus(1, kMilliPerGpu, 64000)));
  EXPECT_TRUE(r.Holds(c, Gpus(1, 500, 64000)));
  // 16 cores are two GPUs' worth on the 8-GPU nodes, not on the 2-GPU node it also fits.
  EXPECT_FALSE(r.Holds(c, Gpus(1, kMilliPerGpu, 16000)));
  EXPECT_FALSE(r.Holds(c, Gpus(1, kMilliPerGpu, 63000)));
  // A pod that fits no node holds nothing; nor does a MIG request.
  EXPECT_FALSE(r.Holds(c, Gpus(1, kMilliPerGpu, 65000)));
  Request mig = Gpus(1, kMilliPerGpu, 64000);
  mig.mig_profile = 0;
  EXPECT_FALSE(r.Holds(c, mig));
}

TEST(ReservationsTest, ASinglePodWithTheCpuOfSeveralGpusHoldsWhereItsModelIs) {
  ModelTable models;
  const int a = *models.Intern("A");
  const int b = *models.Intern("B");
  std::vector<NodeSpec> specs = {
      {"a0", 64000, 1 << 20, 8, a, NodeMode::kMemoryAndCompute},
      {"a1", 64000, 1 << 20, 8, a, NodeMode::kMemoryAndCompute},
      {"b0", 32000, 1 << 20, 1, b, NodeMode::kMemoryAndCompute},
  };
  Cluster c = *Cluster::Create(models, specs);
  Reservations r;
  Request any = Gpus(1, kMilliPerGpu, 16000);
  EXPECT_FALSE(r.Holds(c, any));  // a whole 1-GPU node of B serves it
  Request only_a = any;
  only_a.allowed = ModelSet::Of(a);
  EXPECT_TRUE(r.Holds(c, only_a));
  // It holds the node closest to fitting it: a1, 9 cores short, against a0's 16.
  Fill(c, 0, 1);
  Fill(c, 1, 1);
  ASSERT_TRUE(c.Place(CpuOnly(56000), Assignment{1, 0}).ok());
  ASSERT_TRUE(c.Place(CpuOnly(63000), Assignment{0, 0}).ok());
  EXPECT_TRUE(r.Plan(c, std::vector<WaitingPod>{{7, only_a}}));
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].node, 1);
}

TEST(ReservationsTest, ASinglePodThatFewGpusServeHoldsOne) {
  // 20 nodes of 8 A GPUs (160) and one node of 2 B GPUs: B is 2 / 162 of the GPUs, at most
  // kFewGpusPart; A's nodes are not.
  ModelTable models;
  const int a = *models.Intern("A");
  const int b = *models.Intern("B");
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 20; ++i) {
    specs.push_back({"a" + std::to_string(i), 64000, 1 << 20, 8, a, NodeMode::kMemoryAndCompute});
  }
  specs.push_back({"b0", 16000, 1 << 20, 2, b, NodeMode::kMemoryAndCompute});
  Cluster c = *Cluster::Create(models, specs);
  Reservations r;
  Request only_b = Gpus(1);
  only_b.allowed = ModelSet::Of(b);
  EXPECT_TRUE(r.Holds(c, only_b));
  Request share_b = Gpus(1, 500);
  share_b.allowed = ModelSet::Of(b);
  EXPECT_TRUE(r.Holds(c, share_b));
  Request only_a = Gpus(1);
  only_a.allowed = ModelSet::Of(a);
  EXPECT_FALSE(r.Holds(c, only_a));
  EXPECT_FALSE(r.Holds(c, Gpus(1)));
  // 12 cores fit every node, and are under two GPUs' worth (8 cores per GPU on A's nodes); 24
  // cores fit only A's nodes, three GPUs' worth there: the CPU rule, not the few-GPUs one.
  EXPECT_FALSE(r.Holds(c, Gpus(1, kMilliPerGpu, 12000)));
  EXPECT_TRUE(r.Holds(c, Gpus(1, kMilliPerGpu, 24000)));
  // It holds the B node; no other GPU pod may go there meanwhile.
  Fill(c, 20, 2);
  EXPECT_TRUE(r.Plan(c, std::vector<WaitingPod>{{3, only_b}}));
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].node, 20);
  EXPECT_FALSE(r.Allows(c, 20, 4, Gpus(1)));
  EXPECT_TRUE(r.Allows(c, 20, 3, only_b));
}

TEST(ReservationsTest, EachHolderOldestFirstGetsTheNodeClosestToFittingIt) {
  Cluster c = Nodes();
  Fill(c, 0, 6);  // 2 free GPUs
  Fill(c, 1, 5);  // 3 free
  Fill(c, 2, 7);  // 1 free
  Fill(c, 3, 8);  // none
  Reservations r;
  // The oldest 4-GPU pod gets node 1 (1 GPU missing), the next node 0 (2); the 1-GPU pod holds
  // nothing, and the third 4-GPU pod nothing either: the two ask 8 GPUs already.
  const std::vector<WaitingPod> waiting = {
      {10, Gpus(4)}, {11, Gpus(1)}, {12, Gpus(4)}, {13, Gpus(4)}};
  EXPECT_TRUE(r.Plan(c, waiting));
  ASSERT_EQ(r.held().size(), 2u);
  EXPECT_EQ(r.held()[0].key, 10u);
  EXPECT_EQ(r.held()[0].node, 1);
  EXPECT_EQ(r.held()[1].key, 12u);
  EXPECT_EQ(r.held()[1].node, 0);
  EXPECT_EQ(r.On(2), nullptr);
  // The same plan again changes nothing.
  const uint64_t generation = r.generation();
  EXPECT_FALSE(r.Plan(c, waiting));
  EXPECT_EQ(r.generation(), generation);
  // Once the oldest is placed elsewhere, the third holds the next closest node.
  EXPECT_TRUE(r.Plan(c, std::vector<WaitingPod>{{12, Gpus(4)}, {13, Gpus(4)}}));
  ASSERT_EQ(r.held().size(), 2u);
  EXPECT_EQ(r.held()[0].node, 1);
  EXPECT_EQ(r.held()[1].key, 13u);
  EXPECT_EQ(r.held()[1].node, 0);
  EXPECT_GT(r.generation(), generation);
}

TEST(ReservationsTest, HoldersAskFewerThanEightGpusTogetherAndTheOldestAlwaysHolds) {
  Cluster c = Nodes();
  for (int n = 0; n < 4; ++n) Fill(c, n, 6);
  Reservations r;
  // 8-GPU pods: the oldest alone.
  r.Plan(c, std::vector<WaitingPod>{{1, Gpus(8)}, {2, Gpus(8)}, {3, Gpus(8)}});
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].key, 1u);
  // 3-GPU pods: three (3 + 3 < 8, then 9).
  r.Plan(c, std::vector<WaitingPod>{{4, Gpus(3)}, {5, Gpus(3)}, {6, Gpus(3)}, {7, Gpus(3)}});
  ASSERT_EQ(r.held().size(), 3u);
  EXPECT_EQ(r.held()[2].key, 6u);
  // A pod that fits no node even empty holds nothing and counts for nothing.
  r.Plan(c, std::vector<WaitingPod>{{8, Gpus(16)}, {9, Gpus(8)}});
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].key, 9u);
}

TEST(ReservationsTest, APodHoldsOnlyOnceItHasWaitedHoldAfterOnTheClusterClock) {
  Cluster c = Nodes();
  for (int n = 0; n < 4; ++n) Fill(c, n, 6);
  Reservations r(600);
  const std::vector<WaitingPod> waiting{{1, Gpus(3), 1000}, {2, Gpus(3), 1300}};
  // At 1 500 s neither has waited 600 s: no holder, and the plan may change at 1 600 s.
  c.set_now(1500);
  r.Plan(c, waiting);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.next_change_s(), 1600);
  // At 1 600 s the first holds; the second from 1 900 s.
  c.set_now(1600);
  EXPECT_TRUE(r.Plan(c, waiting));
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].key, 1u);
  EXPECT_EQ(r.next_change_s(), 1900);
  c.set_now(1900);
  EXPECT_TRUE(r.Plan(c, waiting));
  EXPECT_EQ(r.held().size(), 2u);
  EXPECT_EQ(r.next_change_s(), std::numeric_limits<double>::infinity());
  // A cluster that keeps no clock (now 0): every waiting pod holds at once.
  c.set_now(0);
  Reservations timeless(600);
  timeless.Plan(c, waiting);
  EXPECT_EQ(timeless.held().size(), 2u);
  EXPECT_EQ(Reservations().hold_after_s(), Reservations::kHoldAfterS);
}

TEST(ReservationsTest, ShortCpuCountsOnlyAfterTheGpusAndAsAPartOfTheNode) {
  Cluster c = Nodes();
  Fill(c, 0, 4);
  Fill(c, 1, 4);
  Fill(c, 2, 8);
  Fill(c, 3, 8);
  // Node 0 has its GPUs' half free but no CPU to spare; node 1 the same GPUs and CPU.
  ASSERT_TRUE(c.Place(CpuOnly(60000), Assignment{0, 0}).ok());
  Reservations r;
  r.Plan(c, std::vector<WaitingPod>{{1, Gpus(8, kMilliPerGpu, 32000)}});
  ASSERT_EQ(r.held().size(), 1u);
  EXPECT_EQ(r.held()[0].node, 1);
}

TEST(ReservationsTest, AHeldNodeTakesNoOtherGpuPodAndCpuOnlyPodsBesideTheHoldersNeeds) {
  Cluster c = Nodes();
  for (int n = 0; n < 4; ++n) Fill(c, n, 8 - n);  // node 3 is closest: 3 GPUs free
  Reservations r;
  r.Plan(c, std::vector<WaitingPod>{{7, Gpus(8, kMilliPerGpu, 40000)}});
  ASSERT_EQ(r.held()[0].node, 3);
  EXPECT_TRUE(r.Allows(c, 3, 7, Gpus(8, kMilliPerGpu, 40000)));  // the holder itself
  EXPECT_FALSE(r.Allows(c, 3, 8, Gpus(1)));                      // any other GPU pod
  EXPECT_FALSE(r.Allows(c, 3, 8, Gpus(1, 100)));
  // Node 3 has 59 cores free: 19 leave the holder's 40.
  EXPECT_TRUE(r.Allows(c, 3, 8, CpuOnly(19000)));
  EXPECT_FALSE(r.Allows(c, 3, 8, CpuOnly(19001)));
  EXPECT_TRUE(r.Allows(c, 2, 8, Gpus(1)));  // nodes no one holds: anyone
  std::vector<int> out;
  r.AllowedNodes(c, 8, Gpus(1), &out);
  EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 4}));
  const std::vector<int> candidates = {4, 3, 1};
  r.Allowed(c, 8, Gpus(1), candidates, &out);
  EXPECT_EQ(out, (std::vector<int>{4, 1}));
}

TEST(ReservationsTest, PlacingOnANodeNoOneHoldsLeavesThePlanAsItWas) {
  // The rule the replay relies on to plan again only after departures and changes of the
  // waiting pods: checked over random placements on the nodes no one holds.
  Cluster c = Nodes();
  Fill(c, 0, 5);
  Fill(c, 1, 6);
  Fill(c, 2, 2);
  const std::vector<WaitingPod> waiting = {{1, Gpus(8)}, {2, Gpus(4)}, {3, Gpus(2)}};
  Reservations r;
  r.Plan(c, waiting);
  std::vector<std::pair<uint64_t, int>> before;
  for (const auto& h : r.held()) before.emplace_back(h.key, h.node);
  uint64_t state = 12345;
  for (int step = 0; step < 200; ++step) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int node = static_cast<int>((state >> 33) % static_cast<uint64_t>(c.node_count()));
    if (r.On(node) != nullptr) continue;
    const Request one = Gpus(1, 100 * static_cast<int>(1 + (state >> 40) % 10));
    const uint32_t fits = c.FittingGpus(node, one);
    if (fits == 0 || c.Fits(node, one) != FitResult::kFits) continue;
    ASSERT_TRUE(c.Place(one, Assignment{node, fits & (0 - fits)}).ok());
    Reservations again;
    again.Plan(c, waiting);
    std::vector<std::pair<uint64_t, int>> after;
    for (const auto& h : again.held()) after.emplace_back(h.key, h.node);
    ASSERT_EQ(after, before) << "after a placement on node " << node;
  }
}

TEST(ReservationsTest, FitsWhenEmptyChecksShapeModelAndMode) {
  ModelTable models;
  const int g2 = *models.Intern("G2");
  const int t4 = *models.Intern("T4");
  const Cluster c =
      *Cluster::Create(models, {{"a", 64000, 1 << 20, 8, g2, NodeMode::kMemoryAndCompute},
                                {"b", 16000, 1 << 20, 8, g2, NodeMode::kMemoryOnly},
                                {"c", 64000, 1 << 20, 2, t4, NodeMode::kWholeGpus}});
  EXPECT_TRUE(Reservations::FitsWhenEmpty(c, 0, Gpus(8)));
  EXPECT_FALSE(Reservations::FitsWhenEmpty(c, 2, Gpus(8)));                       // 2 GPUs
  EXPECT_FALSE(Reservations::FitsWhenEmpty(c, 1, Gpus(8, kMilliPerGpu, 32000)));  // 16 cores
  EXPECT_TRUE(Reservations::FitsWhenEmpty(c, 2, Gpus(2)));                        // whole: any mode
  EXPECT_FALSE(Reservations::FitsWhenEmpty(c, 1, Gpus(2, 500)));  // a compute share: not there
  EXPECT_FALSE(Reservations::FitsWhenEmpty(c, 2, Gpus(2, 500)));
  Request only_t4 = Gpus(2);
  only_t4.allowed = ModelSet::Of(t4);
  EXPECT_FALSE(Reservations::FitsWhenEmpty(c, 0, only_t4));
  EXPECT_TRUE(Reservations::FitsWhenEmpty(c, 2, only_t4));
}

}  // namespace
}  // namespace tessera::placement
