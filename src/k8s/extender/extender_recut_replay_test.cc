// The replay with departures on mig nodes through tessera-extender's HTTP verbs, with the MIG
// re-cuts done as a cluster does them: the extender's re-cut loop (ExtenderApp::RecutOnce on the
// replay's clock) writes tessera.io/mig-recut on the Node, the node side (MigNodeStandin: the
// device plugin's and tesserad's part) answers in tessera.io/mig-recut-status and publishes the
// new instances, and the pod lands at a later attempt. Against `tessera sim --replay` on the same
// node file (`dynamic` with a first cut): a small synthetic trace, spaced so that each re-cut is
// done before the next pod arrives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "k8s/extender/extender_app.h"
#include "placement/replay.h"
#include "placement/trace.h"
#include "testing/standins/mig_node_standin.h"
#include "testing/standins/scheduler_replay.h"
#include "testing/standins/test_apiserver.h"

namespace tessera::extender {
namespace {

namespace pl = tessera::placement;

struct Replayed {
  pl::ReplayResult result;
  testing::MigNodeStandin::Counts nodes;
  int64_t written = 0;
};

Result<Replayed> ThroughExtender(const pl::Cluster& cluster, const pl::PodList& trace,
                                 std::shared_ptr<pl::TargetWorkload> workload,
                                 const pl::ReplayOptions& o, testing::MigNodeOptions node_options,
                                 double recut_interval_s) {
  auto run = testing::ReplayMigThroughExtender(cluster, trace.requests, trace.times, workload, o,
                                               node_options, recut_interval_s);
  if (!run.ok()) return run.status();
  return Replayed{run->result, run->nodes, run->recuts_written};
}

// Two mig nodes of two H100s, `mig` the column of each ("dynamic ..." or a fixed cut), and 40
// pods, one every 100 s, each running 150 to 600 s, drawn from a fixed generator.
struct Input {
  pl::Cluster cluster;
  pl::PodList trace;
  std::shared_ptr<pl::TargetWorkload> workload;
};
Input MakeInput(const std::string& mig0, const std::string& mig1) {
  auto nodes = pl::ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model,mode,mig\n"
      "m-0,64000,262144,2,H100-80GB,mig," +
          mig0 + "\n" + "m-1,64000,262144,2,H100-80GB,mig," + mig1 + "\n",
      "nodes.csv");
  EXPECT_TRUE(nodes.ok()) << nodes.error();
  pl::Cluster cluster = *pl::Cluster::Create(nodes->models, nodes->nodes);
  std::string csv =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,mig_profile,creation_time,deletion_time\n";
  const char* profiles[] = {"1g.10gb", "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"};
  uint64_t state = 20261128;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  for (int i = 0; i < 40; ++i) {
    const int created = 100 * i;
    char row[160];
    std::snprintf(row, sizeof(row), "p%d,2000,8192,1,0,%s,%d,%d\n", i, profiles[next(6)], created,
                  created + 150 + static_cast<int>(next(450)));
    csv += row;
  }
  auto trace = pl::ParsePodCsv(csv, "pods.csv", cluster.models());
  EXPECT_TRUE(trace.ok()) << trace.error();
  auto workload =
      std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(trace->requests));
  return {std::move(cluster), std::move(*trace), std::move(workload)};
}

pl::ReplayOptions Options() {
  pl::ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  return o;
}

// Fixed layouts (no node labelled for re-cuts): the MIG nodes, pods and instances through the
// verbs give the simulator's placements and waits pod by pod, as on the openb trace.
TEST(ExtenderRecutReplayTest, recut_FixedLayoutsSamePodByPod) {
  const Input in = MakeInput("7g.80gb=1", "3g.40gb=1 2g.20gb=1 1g.10gb=1");
  pl::ReplayOptions o = Options();
  auto sim = pl::Replay(in.cluster, in.trace.requests, in.trace.times, *in.workload, "tessera", o);
  ASSERT_TRUE(sim.ok()) << sim.error();
  EXPECT_GT(sim->waited, 5);  // the fixed cut makes pods wait
  o.skip_known_failures = false;
  auto ext = ThroughExtender(in.cluster, in.trace, in.workload, o, {}, 300);
  ASSERT_TRUE(ext.ok()) << ext.error();
  EXPECT_EQ(ext->written, 0);
  ASSERT_EQ(ext->result.pod_waits.size(), sim->pod_waits.size());
  for (size_t i = 0; i < sim->pod_waits.size(); ++i) {
    EXPECT_EQ(ext->result.pod_waits[i], sim->pod_waits[i]) << "pod " << i;
    EXPECT_EQ(ext->result.pod_placements[i], sim->pod_placements[i]) << "pod " << i;
  }
  EXPECT_EQ(ext->result.allocation_mean, sim->allocation_mean);
  EXPECT_EQ(ext->result.allocation_while_waiting, sim->allocation_while_waiting);
}

// Dynamic layouts (both nodes labelled; the extender's and the node's --mig-recut-interval 1 s,
// their loops 1 s, a cut's new devices listed at the next reconcile). Where the two differ, and
// why, bounded here:
//   - a re-cut is not instant: a pod that needs one waits for the extender's next pass (the
//     request), the node's next reconcile (the answer, the old devices gone), the one after (the
//     new devices) and its backoff: 4 s at most here, where the simulator's waits 0;
//   - the extender asks for a re-cut only when no node has a free instance of the profile; the
//     simulator cuts an idle GPU again whenever that strands fewer slices than the free instance
//     would (pod 0 below: a free 2g.20gb on m-1, the simulator cuts m-0's idle 7g.80gb), so
//     later pods find other GPUs and placements differ;
//   - so the allocation differs only by the time pods spent waiting for a cut.
TEST(ExtenderRecutReplayTest, recut_DynamicLayoutsSameButTheCutsLatency) {
  const Input in = MakeInput("dynamic 7g.80gb=1", "dynamic 3g.40gb=1 2g.20gb=1 1g.10gb=1");
  pl::ReplayOptions o = Options();
  auto sim = pl::Replay(in.cluster, in.trace.requests, in.trace.times, *in.workload, "tessera", o);
  ASSERT_TRUE(sim.ok()) << sim.error();
  EXPECT_EQ(sim->waited, 0);
  EXPECT_NE(sim->pod_placements[0].mig_layout, -1) << "the simulator cuts for pod 0";
  o.skip_known_failures = false;
  testing::MigNodeOptions node_options;
  node_options.recut_interval_s = 1;
  auto ext = ThroughExtender(in.cluster, in.trace, in.workload, o, node_options, 1);
  ASSERT_TRUE(ext.ok()) << ext.error();
  const pl::ReplayResult& e = ext->result;
  const testing::MigNodeStandin::Counts& c = ext->nodes;
  // Every request answered; cuts made; never one asked under a pod.
  EXPECT_GT(c.applied, 2);
  EXPECT_EQ(c.applied + c.refused_interval + c.refused_pod + c.refused_later_device +
                c.refused_other + c.failed,
            ext->written);
  EXPECT_EQ(c.refused_pod, 0);
  EXPECT_EQ(c.failed, 0);
  EXPECT_EQ(e.placed, sim->placed);
  EXPECT_EQ(e.never_placed, 0);
  EXPECT_EQ(sim->pod_placements[0].node, 0);
  EXPECT_EQ(e.pod_placements[0].node, 1) << "the extender takes m-1's free 2g.20gb";
  EXPECT_EQ(e.pod_placements[0].mig_layout, -1);
  double late = 0;  // GPU-seconds of the extender's extra waits, at most one GPU each
  int waited = 0;
  for (size_t i = 0; i < sim->pod_waits.size(); ++i) {
    EXPECT_LE(e.pod_waits[i], sim->pod_waits[i] + 4) << "pod " << i;
    late += std::max(0.0, e.pod_waits[i] - sim->pod_waits[i]);
    waited += e.pod_waits[i] > 0 ? 1 : 0;
  }
  EXPECT_GT(waited, 0) << "no pod waited for a cut";
  const double window = e.last_arrival_s - e.timeline_start_s;
  EXPECT_LE(std::abs(e.allocation_mean - sim->allocation_mean),
            100 * late / (window * in.cluster.total_gpus()) + 1e-9);
}

}  // namespace
}  // namespace tessera::extender
