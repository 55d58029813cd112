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
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/extender/extender_app.h"
#include "placement/replay.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"

namespace httplib {
class Client;
}

namespace tessera::extender::testing {

// The v1.Node the device plugin would publish for a placement node (name, CPU, memory, GPUs of
// the model's memory in mode core_mem), and the v1.Pod a trace request is written as (one
// container asking tessera.io/gpu-count and, for a share, tessera.io/gpu-core).
k8s::Json NodeFor(const placement::NodeSpec& spec, const placement::ModelTable& models);
k8s::Json PodFor(const std::string& name, const placement::Request& request);

class ExtenderReplayScheduler final : public placement::ReplayScheduler {
 public:
  // `api` serves the nodes of `cluster` already (NodeFor, same names), `app` runs the extender
  // against it and listens on `port`.
  ExtenderReplayScheduler(k8s::TestApiServer& api, ExtenderApp& app, int port,
                          const placement::Cluster& cluster);
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

  // HTTP rounds of the verbs (filter, prioritize, bind), for the benchmark.
  int64_t rounds() const { return rounds_; }

 private:
  static std::string PodName(int pod);
  // Waits until the extender's state shows `pods` pods, `waiting` waiting and `allocated` GPU
  // milli allocated (5 s at most).
  Status AwaitExtender(size_t pods, size_t waiting, int64_t allocated);

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
};

}  // namespace tessera::extender::testing
