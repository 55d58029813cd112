// Tests of the replay with departures: a hand-made trace whose waits, timeline and means are
// computed by hand below (under both queue models), a trace where kube-scheduler's backoff lets
// a newer pod overtake an older one that first come first served would serve, the reservations
// for a waiting multi-GPU pod, the speed-up for a load, the errors, and one replay of the default
// openb trace per key policy.
#include "placement/replay.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "placement/policy.h"
#include "placement/simulator.h"
#include "placement/trace.h"

namespace tessera::placement {
namespace {

// One node with 2 GPUs and 64 cores; the pods of the hand-made trace.
Cluster OneNode() {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  return *Cluster::Create(models, {{"n0", 64000, 1 << 20, 2, t4, NodeMode::kMemoryAndCompute}});
}

PodList HandTrace(const Cluster& c) {
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "p0,1000,1024,1,1000,0,100\n"    // one GPU, 0..100
      "p1,1000,1024,2,1000,10,60\n"    // both GPUs for 50 s: waits for p0 to leave
      "p2,1000,1024,1,1000,20,50\n"    // the other GPU, at once
      "p3,1000,1024,1,500,30,40\n"     // half a GPU for 10 s: waits for p2
      "p4,1000,1024,1,1000,55,65\n"    // a GPU for 10 s: overtakes p1, which still cannot fit
      "p5,99000,1024,1,1000,56,60\n",  // more CPU than the node has: refused on arrival
      "hand.csv", c.models());
  EXPECT_TRUE(pods.ok()) << pods.error();
  return *pods;
}

// Every policy under both queue models.
std::vector<std::pair<QueueModel, std::string_view>> Combine(
    std::span<const std::string_view> policies) {
  std::vector<std::pair<QueueModel, std::string_view>> out;
  for (QueueModel q : {QueueModel::kKubeScheduler, QueueModel::kFcfs}) {
    for (std::string_view p : policies) out.emplace_back(q, p);
  }
  return out;
}

TEST(ReplayTest, HandComputedWaitsAndTimeline) {
  const Cluster c = OneNode();
  const PodList trace = HandTrace(c);
  const TargetWorkload w = TargetWorkload::FromRequests(trace.requests);
  ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  o.points = 12;           // from 0 (p0 asks half the GPUs at once) to the last arrival, 56 s
  o.reservations = false;  // below: what a reservation for p1 changes
  for (auto [queue, policy] : Combine(PolicyNames())) {
    SCOPED_TRACE(std::string(policy) + " " + std::string(QueueModelName(queue)));
    o.queue = queue;
    auto r = Replay(c, trace.requests, trace.times, w, policy, o);
    ASSERT_TRUE(r.ok()) << r.error();
    // By hand: p0 at 0; p1 arrives at 10 and needs both GPUs; p2 takes the second GPU at 20;
    // p3 arrives at 30 and finds none; p2 leaves at 50: p1 is tried first and still does not
    // fit, p3 does (waited 20 s); p4 arrives at 55 and finds only p3's GPU half used; p3 leaves
    // at 60: p1 still does not fit, p4 does (waited 5 s); p0 leaves at 100 and p1 gets both
    // GPUs (waited 90 s). p5 fits no node and is refused. Under kube-scheduler's queue the same:
    // at 50 and 60 p1 and the newer pod are both past their backoff, so both go to the active
    // queue, p1 first (its last failure is older), and only the newer one fits.
    EXPECT_EQ(r->pods, 6);
    EXPECT_EQ(r->placed, 5);
    EXPECT_EQ(r->unplaceable, 1);
    EXPECT_EQ(r->never_placed, 0);
    EXPECT_EQ(r->waited, 3);
    EXPECT_EQ(r->wait_s_max, 90);
    EXPECT_EQ(r->wait_s_p50, 5);  // of 0, 0, 5, 20, 90
    EXPECT_EQ(r->wait_s_p99, 90);
    EXPECT_DOUBLE_EQ(r->wait_s_mean, 23);
    EXPECT_EQ(r->last_arrival_s, 56);
    EXPECT_EQ(r->timeline_start_s, 0);
    EXPECT_EQ(r->peak_demand_gpus, 5);  // at 56 s: p0, p1, p4 and p5, were none to wait
    EXPECT_EQ(r->end_s, 100);
    EXPECT_EQ(r->peak_waiting_pods, 2);
    // Allocation over the window [0, 56]: 50 % on [0,20), 100 % on [20,50), 75 % on [50,56]. A
    // GPU pod waits from 10 on.
    EXPECT_DOUBLE_EQ(r->allocation_mean, (50 * 20 + 100 * 30 + 75 * 6) / 56.0);
    EXPECT_DOUBLE_EQ(r->allocation_while_waiting, (50 * 10 + 100 * 30 + 75 * 6) / 46.0);
    EXPECT_DOUBLE_EQ(r->waiting_time_share, 46.0 / 56);
    // The timeline: the state after the events at or before each instant 0, 5.09, ..., 56.
    ASSERT_EQ(r->allocation_ratio.size(), 12u);
    const double at = 56.0 / 11;  // instants i x at
    for (int i = 0; i < 12; ++i) {
      const double t = i * at;
      const double alloc = t < 20 ? 50 : t < 50 ? 100 : 75;
      const double pods_waiting = t < 10 ? 0 : t < 30 ? 1 : t < 50 ? 2 : t < 55 ? 1 : 2;
      const double gpus_waiting = t < 10 ? 0 : t < 30 ? 2 : t < 50 ? 2.5 : t < 55 ? 2 : 3;
      EXPECT_DOUBLE_EQ(r->allocation_ratio[static_cast<size_t>(i)], alloc) << "t=" << t;
      EXPECT_DOUBLE_EQ(r->waiting_pods[static_cast<size_t>(i)], pods_waiting) << "t=" << t;
      EXPECT_DOUBLE_EQ(r->waiting_gpus[static_cast<size_t>(i)], gpus_waiting) << "t=" << t;
    }
  }
}

TEST(ReplayTest, KubeSchedulerBackoffLetsANewerPodOvertake) {
  // Node g has 2 GPUs, node c none. a holds GPU 0 until 100, k GPU 1 from 5 to 62. b asks one
  // GPU from 10; x1..x4 ask only CPU at 57..60; s asks one GPU from 61.
  ModelTable models;
  const int t4 = *models.Intern("T4");
  const Cluster c =
      *Cluster::Create(models, {{"g", 64000, 1 << 20, 2, t4, NodeMode::kMemoryAndCompute},
                                {"c", 64000, 1 << 20, 0, -1, NodeMode::kMemoryAndCompute}});
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "a,1000,1024,1,1000,0,100\n"
      "k,1000,1024,1,1000,5,62\n"
      "b,1000,1024,1,1000,10,200\n"
      "x1,1000,1024,0,0,57,300\n"
      "x2,1000,1024,0,0,58,300\n"
      "x3,1000,1024,0,0,59,300\n"
      "x4,1000,1024,0,0,60,300\n"
      "s,1000,1024,1,1000,61,300\n",
      "overtake.csv", c.models());
  ASSERT_TRUE(pods.ok()) << pods.error();
  const TargetWorkload w = TargetWorkload::FromRequests(pods->requests);
  ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  // kube-scheduler: b fails at 10. Each of x1..x4's binds (the extender's commit on a node)
  // moves it, since the extender rejected it, and it fails again at 57, 58, 59 and 60 (popped
  // from the backoff queue early, the active queue being empty): five failures, a backoff of
  // 10 s from 60. s fails at 61: 1 s. At 62 k leaves; both still back off, and the backoff
  // queue serves the earlier expiry: s (62) before b (70). s gets GPU 1; b waits for a, at 100.
  auto kube = Replay(c, pods->requests, pods->times, w, "bestfit", o);
  ASSERT_TRUE(kube.ok()) << kube.error();
  EXPECT_EQ(kube->pod_waits[2], 90);  // b, the third to arrive
  EXPECT_EQ(kube->pod_waits[7], 1);   // s
  // First come first served: at 62 b is tried first and takes GPU 1; s waits for a.
  o.queue = QueueModel::kFcfs;
  auto fcfs = Replay(c, pods->requests, pods->times, w, "bestfit", o);
  ASSERT_TRUE(fcfs.ok()) << fcfs.error();
  EXPECT_EQ(fcfs->pod_waits[2], 52);
  EXPECT_EQ(fcfs->pod_waits[7], 39);
}

TEST(ReplayTest, AReservationDrainsANodeForTheWaitingMultiGpuPod) {
  // The hand trace with reservations (tessera keeps them): p1, asking both GPUs, fails at 10 and
  // holds the one node; no other GPU pod may go there until p1 is placed, at 100 when p0
  // leaves. p1 runs until 150. Then (first come first served) p2 takes a GPU until 180 and p3
  // half of the other until 160; p4, a whole GPU, waits for p3 to leave. Without the
  // reservation p1 waits as long (it only fits once p0 leaves) and the others far less.
  const Cluster c = OneNode();
  const PodList trace = HandTrace(c);
  const TargetWorkload w = TargetWorkload::FromRequests(trace.requests);
  ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  o.queue = QueueModel::kFcfs;
  o.hold_after_s = 0;  // holds from the first failure
  auto r = Replay(c, trace.requests, trace.times, w, "tessera", o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->reservations);
  EXPECT_EQ(r->reservations_made, 1);
  EXPECT_EQ(r->pod_waits, (std::vector<double>{0, 90, 130, 120, 105, -1}));
  o.reservations = false;
  auto free = Replay(c, trace.requests, trace.times, w, "tessera", o);
  ASSERT_TRUE(free.ok()) << free.error();
  EXPECT_FALSE(free->reservations);
  EXPECT_EQ(free->pod_waits, (std::vector<double>{0, 90, 0, 20, 5, -1}));
  // Holding only after 30 s of waiting: p1 fails at 10 and holds from the first attempt after 40
  // (p2's departure at 50), so p2 takes the free GPU at 20 as without reservations; p3 and p4
  // then wait for p1, and take the two GPUs when it leaves at 150.
  o.reservations = true;
  o.hold_after_s = 30;
  auto later = Replay(c, trace.requests, trace.times, w, "tessera", o);
  ASSERT_TRUE(later.ok()) << later.error();
  EXPECT_EQ(later->reservations_made, 1);
  EXPECT_EQ(later->pod_waits, (std::vector<double>{0, 90, 0, 120, 95, -1}));
  o.hold_after_s = -1;
  EXPECT_FALSE(Replay(c, trace.requests, trace.times, w, "tessera", o).ok());
  o.hold_after_s = 0;
  // A policy that keeps none is not given any.
  auto fgd = Replay(c, trace.requests, trace.times, w, "fgd", o);
  ASSERT_TRUE(fgd.ok());
  EXPECT_FALSE(fgd->reservations);
  EXPECT_EQ(fgd->pod_waits, free->pod_waits);
}

TEST(ReplayTest, ResamplesUntilTheBusiestInstantAsksTheLoad) {
  // One pod of one GPU created at 0 and running 10 s, and one of 2 GPUs created at 100 s and
  // running 5 s. Sped up 100 times, they arrive at 0 and 1 s and the first still runs when the
  // second comes. The draws of seed 7 (SampleWorkload's) are taken until the GPUs asked at once
  // reach the load: 3 GPUs are there once both pods have been drawn (1 + 2) or the big one twice.
  const Cluster c = OneNode();
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "a,1000,1024,1,1000,0,10\n"
      "b,1000,1024,2,1000,100,105\n",
      "two.csv", c.models());
  ASSERT_TRUE(pods.ok());
  auto drawn = SampleForLoad(pods->requests, pods->times, 7, 100, 2000, 1.5);
  ASSERT_TRUE(drawn.ok()) << drawn.error();
  // The same first draws as the FGD protocol's sampler.
  const auto protocol = *SampleWorkload(pods->requests, 1 << 20, 1.0, 7);
  ASSERT_LE(drawn->size(), protocol.size());
  EXPECT_TRUE(std::equal(drawn->begin(), drawn->end(), protocol.begin()));
  // The fewest: every pod drawn counts, the last one completes 3 GPUs at once and one fewer does
  // not. At speed-up 100 every `a` overlaps every `b`, so the GPUs at once are the total.
  int64_t gpus = 0, before_last = 0;
  for (size_t i = 0; i < drawn->size(); ++i) {
    if (i + 1 == drawn->size()) before_last = gpus;
    gpus += pods->requests[static_cast<size_t>((*drawn)[i])].gpu_count;
  }
  EXPECT_GE(gpus, 3);
  EXPECT_LT(before_last, 3);
  // Not sped up, a and b never overlap: the most at once is what one pod kind adds up to, so
  // 3 GPUs need two b or three a.
  auto slow = SampleForLoad(pods->requests, pods->times, 7, 1, 2000, 1.5);
  ASSERT_TRUE(slow.ok());
  int a = 0, b = 0;
  for (int i : *slow) (i == 0 ? a : b) += 1;
  EXPECT_TRUE(a >= 3 || b >= 2);
  EXPECT_TRUE((*slow)[slow->size() - 1] == 0 ? a == 3 : b == 2);
  // Pods that ask no GPU can never load the cluster.
  auto cpu = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
      "a,1000,1024,0,0,0,10\n",
      "cpu.csv", c.models());
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(SampleForLoad(cpu->requests, cpu->times, 7, 100, 2000, 1.0).ok());
}

TEST(ReplayTest, RejectsWhatItCannotReplay) {
  const Cluster c = OneNode();
  const PodList trace = HandTrace(c);
  const TargetWorkload w = TargetWorkload::FromRequests(trace.requests);
  ReplayOptions o;
  o.load = 0;
  EXPECT_FALSE(Replay(c, trace.requests, trace.times, w, "fgd", o).ok());
  o = ReplayOptions{};
  o.points = 1;
  EXPECT_FALSE(Replay(c, trace.requests, trace.times, w, "fgd", o).ok());
  auto untimed = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n",
                             "five.csv", c.models());
  ASSERT_TRUE(untimed.ok());
  auto r = Replay(c, untimed->requests, untimed->times, w, "fgd", ReplayOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("creation_time"), std::string::npos) << r.error();
}

TEST(ReplayTest, DefaultTraceWithDepartures) {
  auto nodes = LoadNodeCsv(std::string(TESSERA_OPENB_DIR) + "/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.error();
  auto pods =
      LoadPodCsv(std::string(TESSERA_OPENB_DIR) + "/openb_pod_list_default.csv", nodes->models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  const Cluster c = *Cluster::Create(nodes->models, nodes->nodes);
  const TargetWorkload w = TargetWorkload::FromRequests(pods->requests);
  for (std::string_view policy : {"tessera", "fgd"}) {
    SCOPED_TRACE(std::string(policy));
    auto r = Replay(c, pods->requests, pods->times, w, policy, ReplayOptions{});
    ASSERT_TRUE(r.ok()) << r.error();
    // Every pod of the trace leaves, so every pod that fits the empty cluster is placed.
    EXPECT_EQ(r->placed + r->unplaceable, r->pods);
    EXPECT_EQ(r->never_placed, 0);
    EXPECT_GT(r->pods, 50000);  // the list asks ~86 GPUs at once at its own pace
    EXPECT_NEAR(r->peak_demand_gpus, 1.2 * 6212, 8);  // the fewest pods that reach the load
    EXPECT_GT(r->waited, 0);  // demand passes the GPUs at the busiest instant, so pods wait
    EXPECT_GT(r->allocation_ratio.back(), 90);  // ... and the cluster is full then
    EXPECT_GE(r->wait_s_p99, r->wait_s_p50);
    EXPECT_GE(r->wait_s_max, r->wait_s_p99);
    for (double a : r->allocation_ratio) EXPECT_LE(a, 100.0);
  }
}

}  // namespace
}  // namespace tessera::placement
