// The replay with departures through tessera-extender's HTTP verbs (kube-scheduler's side stood in
// by testing/standins/scheduler_replay.h, the API server by the stand-in) places every pod where
// `tessera sim --replay` does and makes it wait as long: the same policy code, the same queue
// model, the same nodes drained for waiting multi-GPU pods, planned by the extender from the pods'
// PodScheduled conditions, and the same ages of the pods on each node (the extender on the
// replay's clock). A small trace that fills the cluster, so pods wait, multi-GPU pods hold nodes,
// and pods leave.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/clock.h"
#include "k8s/extender/extender_app.h"
#include "placement/replay.h"
#include "placement/trace.h"
#include "testing/standins/scheduler_replay.h"
#include "testing/standins/test_apiserver.h"

namespace tessera::extender {
namespace {

namespace pl = tessera::placement;

// Four 8-GPU nodes and four 2-GPU nodes.
pl::Cluster SmallCluster() {
  pl::ModelTable models;
  const int g2 = *models.Intern("G2");
  const int t4 = *models.Intern("T4");
  std::vector<pl::NodeSpec> specs;
  for (int i = 0; i < 8; ++i) {
    const bool big = i < 4;
    specs.push_back({"node-" + std::to_string(i), big ? 96000 : 32000, big ? 393216 : 131072,
                     big ? 8 : 2, big ? g2 : t4, pl::NodeMode::kMemoryAndCompute});
  }
  return *pl::Cluster::Create(models, specs);
}

// 90 pods over 900 s, each running 60-400 s: shares, whole GPUs, 2-, 4- and 8-GPU pods and
// CPU-only pods, drawn from a fixed generator, enough to keep the cluster full for a while.
pl::PodList SmallTrace(const pl::Cluster& c) {
  std::string csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n";
  uint64_t state = 20260101;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  for (int i = 0; i < 90; ++i) {
    const int kind = static_cast<int>(next(10));
    int gpus = 1, milli = 1000;
    int64_t cpu = 4000 + 2000 * static_cast<int64_t>(next(4));
    if (kind < 3) milli = 200 + 100 * static_cast<int>(next(6));  // a share
    if (kind == 6) gpus = 2;
    if (kind == 7) gpus = 4;
    if (kind == 8) gpus = 8, cpu = 48000;
    if (kind == 9) gpus = 0, milli = 0, cpu = 16000;  // CPU only
    const int created = static_cast<int>(i * 10 + next(10));
    const int runs = 60 + static_cast<int>(next(340));
    char row[160];
    std::snprintf(row, sizeof(row), "p%d,%lld,4096,%d,%d,%d,%d\n", i, static_cast<long long>(cpu),
                  gpus, milli, created, created + runs);
    csv += row;
  }
  auto pods = pl::ParsePodCsv(csv, "small.csv", c.models());
  EXPECT_TRUE(pods.ok()) << pods.error();
  return *pods;
}

TEST(ExtenderReplayTest, SamePlacementsAndWaitsAsTheSimulator) {
  const pl::Cluster cluster = SmallCluster();
  const pl::PodList trace = SmallTrace(cluster);
  auto workload =
      std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(trace.requests));
  pl::ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  o.hold_after_s = 30;  // the trace's pods run minutes: a hold after half a minute's wait
  auto sim = pl::Replay(cluster, trace.requests, trace.times, *workload, "tessera", o);
  ASSERT_TRUE(sim.ok()) << sim.error();
  // The trace does what it is for: pods wait, and multi-GPU pods hold nodes.
  EXPECT_GT(sim->waited, 10);
  EXPECT_GT(sim->reservations_made, 0);
  EXPECT_EQ(sim->never_placed, 0);

  k8s::TestApiServer api;
  ASSERT_TRUE(api.Start(0).ok());
  for (int n = 0; n < cluster.node_count(); ++n) {
    api.CreateNode(testing::NodeFor(cluster.spec(n), cluster.models()));
  }
  // The extender on the replay's clock, so the starts it places pods with are the trace's.
  ManualClock clock;
  AppConfig config;
  config.api.server = api.url();
  config.listen_host = "127.0.0.1";
  config.listen_port = 0;
  config.quiet = true;
  config.state.workload = workload;
  config.state.clock = &clock;
  config.state.hold_after = std::chrono::seconds(30);
  ExtenderApp app(config);
  ASSERT_TRUE(app.Start().ok());
  ASSERT_TRUE(app.WaitReady(std::chrono::seconds(30)));
  testing::ExtenderReplayScheduler scheduler(api, app, app.port(), cluster, {nullptr, &clock});
  o.skip_known_failures = false;  // every attempt through the verbs
  auto ext = pl::ReplayWith(cluster, trace.requests, trace.times, scheduler, o);
  app.Stop();
  api.Stop();
  ASSERT_TRUE(ext.ok()) << ext.error();
  EXPECT_EQ(ext->decisions, ext->attempts);
  EXPECT_EQ(ext->reservations_made, sim->reservations_made);
  ASSERT_EQ(ext->pod_waits.size(), sim->pod_waits.size());
  for (size_t i = 0; i < sim->pod_waits.size(); ++i) {
    EXPECT_EQ(ext->pod_waits[i], sim->pod_waits[i]) << "pod " << i << " of the run";
    EXPECT_EQ(ext->pod_placements[i], sim->pod_placements[i]) << "pod " << i << " of the run";
  }
  EXPECT_EQ(ext->allocation_while_waiting, sim->allocation_while_waiting);
  EXPECT_EQ(ext->wait_s_max, sim->wait_s_max);
}

}  // namespace
}  // namespace tessera::extender
