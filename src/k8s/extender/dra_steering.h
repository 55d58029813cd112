// DraSteeringController: tessera-extender's door for Dynamic Resource Allocation
// (`--dra-steering`). kube-scheduler allocates a pod's ResourceClaims itself, by first fit, unless
// a claim is already allocated when the pod is scheduled: then it only places the pod on the
// allocation's node. So a pod that wants Tessera's placement is created with the scheduling gate
// `gpu.tessera.io/steering` (kube-scheduler leaves a gated pod alone), and this controller, every
// `interval` or sooner when woken:
//  1. reads the cluster: Nodes, Pods, ResourceSlices, DeviceClasses and ResourceClaims;
//  2. builds the steering picture (src/k8s/dra/steering.h) from them: the nodes' allocatable CPU
//     and memory, what bound pods ask (as kube-scheduler counts it), every allocated claim;
//  3. for each gated pod, oldest first, whose claims all exist (a template's claim is made by the
//     resourceclaim controller): steering chooses the node and the devices, and each claim gets
//     status.allocation and status.reservedFor the pod in one update on the claim's
//     resourceVersion (a conflict leaves the pod for the next round); then the gate is removed
//     and kube-scheduler places the pod on that node. A pod none of whose claims steering decides
//     (another driver, firstAvailable, ...) is ungated at once for kube-scheduler to allocate; one
//     that fits no node stays gated, with an Event saying why, until a round finds room; one with
//     a claim already allocated is ungated as it is.
// It holds no state between rounds: every round reads the cluster again, so a restart, a second
// replica's round or kube-scheduler's own allocations are all seen as they are (two replicas
// writing the same claim meet in the claim's resourceVersion). No HTTP of its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/result.h"
#include "k8s/api_client.h"
#include "placement/frag.h"

namespace tessera::extender {

inline constexpr char kSteeringGate[] = "gpu.tessera.io/steering";

struct DraSteeringOptions {
  std::string policy = "tessera";  // a placement policy name
  std::chrono::milliseconds interval{1000};
  // The tessera policy's target workload; null: the shapes of the claims of the cluster's pods.
  std::shared_ptr<const placement::TargetWorkload> workload;
};

struct SteeringRound {
  int steered = 0;    // pods whose claims were allocated and which were ungated
  int handed_on = 0;  // pods ungated for kube-scheduler to allocate
  int waiting = 0;    // gated pods that fit no node, or whose claims do not exist yet
  int conflicts = 0;  // writes that met a newer object (tried again next round)
};

class DraSteeringController {
 public:
  DraSteeringController(k8s::ApiClient* api, DraSteeringOptions options);
  ~DraSteeringController();
  DraSteeringController(const DraSteeringController&) = delete;
  DraSteeringController& operator=(const DraSteeringController&) = delete;

  void Start();
  void Stop();
  // One round now (the tests drive it; Start runs it every interval).
  Result<SteeringRound> RunOnce();

 private:
  void Loop();
  void Event(const k8s::Json& pod, const std::string& reason, const std::string& message);

  k8s::ApiClient* api_;
  DraSteeringOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> told_;  // pod uid -> the last reason it was given
};

}  // namespace tessera::extender
