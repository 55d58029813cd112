// ExtenderReplayScheduler: the replay with departures (placement/replay.h) placing its pods through
// a tessera-extender's HTTP verbs, as kube-scheduler with the extender would: each pod is created
// on the (stand-in) API server when it arrives; each attempt is kube-scheduler's calls to the
// extender (SchedulerDriver: filter, prioritize when several nodes pass, bind); a failed first
// attempt writes the pod's PodScheduled=False/Unschedulable condition, as kube-scheduler does
// (the extender plans its drained nodes from those); a departure deletes the pod. The replay's
// queue model stays the scheduling queue; this is only kube-scheduler's side of the verbs.
//
// Before each decision the extender must have seen what the API server shows (the replay's
// picture), as kube-scheduler's own cache would have: the scheduler waits, after writes that
// change it, until the extender's state agrees (pod count, GPUs allocated, pods waiting). Test and
// benchmark tooling: it is not kube-scheduler.
//
// The extender's clock (MigReplay::clock, its StateOptions::clock) is the replay's: moved to each
// instant the replay stops at, in seconds from 0, so the pods' starts it places with (the policy's
// age preference) are the trace's, as the simulator's are. Without one the extender keeps the
// host's clock, and its choices can differ from the simulator's where ages decide.
//
// On mig nodes (MigReplay): the node side of MIG re-cuts is a MigNodeStandin
// (mig_node_standin.h), and the extender's re-cut loop runs on the replay's clock: the extender
// is started without a loop of its own (AppConfig::recut_poll 0) and with `clock` as its state's
// clock (so --mig-recut-interval is measured in trace seconds), and its one pass of the loop
// (ExtenderApp::RecutOnce) is run at every instant k x recut_poll_s while pods wait, after the
// nodes' reconciles of that instant. Every Node write of the exchange (the request, the answer,
// the inventory) is a Node annotation update to kube-scheduler's queue, and the extender has seen
// each before the next attempt or pass.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "k8s/extender/extender_app.h"
#include "placement/replay.h"
#include "testing/standins/mig_node_standin.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"

namespace httplib {
class Client;
}

namespace tessera::extender::testing {

// The v1.Node the device plugin would publish for a placement node (name, CPU, memory, GPUs of
// the model's memory in mode core_mem), and the v1.Pod a trace request is written as (one
// container asking tessera.io/gpu-count and, for a share, tessera.io/gpu-core; for a MIG request,
// tessera.io/mig-<profile>: 1).
k8s::Json NodeFor(const placement::NodeSpec& spec, const placement::ModelTable& models);
k8s::Json PodFor(const std::string& name, const placement::Request& request);

// A replay on mig nodes, and the extender's clock, which is moved on every replay, mig nodes or
// not (see the file comment).
struct MigReplay {
  MigNodeStandin* nodes = nullptr;  // holds every mig node of the cluster (AddNode)
  ManualClock* clock = nullptr;     // the extender's StateOptions::clock; seconds from 0
  double recut_poll_s = 1;          // the extender's re-cut loop period
};

class ExtenderReplayScheduler final : public placement::ReplayScheduler {
 public:
  // `api` serves the nodes of `cluster` already (NodeFor, same names), `app` runs the extender
  // against it and listens on `port`.
  ExtenderReplayScheduler(k8s::TestApiServer& api, ExtenderApp& app, int port,
                          const placement::Cluster& cluster, MigReplay mig = {});
  ~ExtenderReplayScheduler() override;

  std::string_view name() const override { return "tessera-extender"; }
  bool ReservesForWaiting() const override { return true; }
  Status Arrive(int pod, const placement::Request& request, double at) override;
  Result<std::optional<placement::Assignment>> Attempt(
      const placement::Cluster& cluster, int pod, const placement::Request& request,
      const placement::Reservations* reservations) override;
  Status MarkWaiting(int pod, const placement::Request& request) override;
  void Placed(const placement::Cluster& cluster, int pod, const placement::Request& request,
              const placement::Assignment& a) override;
  Status Leave(const placement::Cluster& cluster, int pod, const placement::Request& request,
               const placement::Assignment& a) override;

  double NextEvent(double now) const override;
  Result<bool> Advance(double now) override;

  // HTTP rounds of the verbs (filter, prioritize, bind), for the benchmark.
  int64_t rounds() const { return rounds_; }
  // The re-cut loop's passes run and the requests they wrote (or could not write).
  int64_t recut_passes() const { return recut_passes_; }
  int64_t recuts_written() const { return recuts_written_; }
  int64_t recuts_not_written() const { return recuts_not_written_; }

 private:
  static std::string PodName(int pod);
  // Waits until the extender's state shows `pods` pods, `waiting` waiting and `allocated` GPU
  // milli allocated (5 s at most).
  Status AwaitExtender(size_t pods, size_t waiting, int64_t allocated);
  // The assignment of a MIG device `uuid` on the replay's `cluster`.
  Result<placement::Assignment> MigAssignment(const placement::Cluster& cluster,
                                              const std::string& uuid) const;

  k8s::TestApiServer& api_;
  ExtenderApp& app_;
  SchedulerDriver driver_;
  std::unique_ptr<httplib::Client> http_;  // to the API server, for status writes
  std::vector<std::string> node_names_;
  std::map<std::string, int> node_index_;
  std::map<std::string, int> gpu_index_;  // GPU UUID -> index on its node
  std::map<int, k8s::Json> pending_;      // pod -> the object as created
  size_t live_pods_ = 0;
  size_t waiting_ = 0;
  std::vector<char> is_waiting_;
  int64_t rounds_ = 0;
  MigReplay mig_;
  bool recut_nodes_ = false;  // some node may be cut again
  int64_t allocated_ = 0;     // GPU milli the replay's cluster has allocated
  double last_pass_ = -1;
  int64_t recut_passes_ = 0, recuts_written_ = 0, recuts_not_written_ = 0;
};

// A whole replay on mig nodes through a fresh extender and API server (the nodes created by a
// MigNodeStandin with `node_options`; the extender's --mig-recut-interval `recut_interval_s`, its
// re-cut loop every `recut_poll_s`, both on the replay's clock), every attempt through the verbs.
struct MigExtenderRun {
  placement::ReplayResult result;
  MigNodeStandin::Counts nodes;
  int64_t recuts_written = 0;
  int64_t recuts_not_written = 0;
  int64_t rounds = 0;
};
Result<MigExtenderRun> ReplayMigThroughExtender(
    const placement::Cluster& cluster, std::span<const placement::Request> pods,
    std::span<const placement::PodTimes> times,
    std::shared_ptr<const placement::TargetWorkload> workload, placement::ReplayOptions options,
    MigNodeOptions node_options, double recut_interval_s, double recut_poll_s = 1);

}  // namespace tessera::extender::testing
