// DraSteering: Tessera's placement for pods whose ResourceClaims ask gpu.tessera.io devices, so
// that DRA clusters get the fragmentation-aware choice of node and GPU that `tessera sim` and the
// extender make. kube-scheduler's own DRA allocator takes the first devices that fit on whichever
// node its scores (CPU and memory only; DRA has no scoring) prefer; steering decides instead with
// the same src/placement engine and policy, then writes each claim's allocation exactly as the
// allocator would (allocation.h: results, share IDs, consumed capacity rounded by the devices'
// request policies, configuration, the node selector). A claim allocated before its pod is
// scheduled is one kube-scheduler honours: it only places the pod on the allocation's node.
//
// The picture: one placement node per Node given (its allocatable CPU and memory), with the GPUs
// of its pool of gpu.tessera.io (the devices of the highest generation, in slice and device
// order; model and memory from the devices, mode from the `mode` attribute: core_mem, share and
// mps divide memory and time, mem memory only, exclusive whole GPUs); what pods hold of CPU and
// memory (AddPod), and what allocated claims hold of each device (AddAllocation: consumedCapacity,
// or all of a device allocated whole). mig nodes' instances are not steered.
//
// A pod's request: each request of its claims as a placement request per GPU: no capacity asked,
// memory alone, or all of a GPU's time (cores 100), is whole GPUs (the cores policy's default is
// all of them); a share is its cores (x10 milli) and its
// memory rounded up by the policy (256 MiB steps); the pod's CPU and memory go with the first,
// the others go on the chosen node one after another, as the extender places a pod's
// containers. A device must also pass the DeviceClass's and the request's CEL selectors (cel.h).
// After the policy chooses, the chosen devices are checked against the DRA rules (capacity.h);
// a node whose choice fails them is dropped and the policy chooses again.
// What steering does not decide (another driver's devices, firstAvailable, allocationMode All,
// a share that asks cores but no memory, MIG) is refused with the reason, so the caller leaves
// the pod to kube-scheduler.
//
// Not thread-safe; one writer. No I/O.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "k8s/dra/capacity.h"
#include "k8s/dra/cel.h"
#include "k8s/objects.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/policy.h"

namespace tessera::k8s::dra {

struct SteeringNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

struct SteeringDecision {
  std::string node;
  std::vector<Json> allocations;  // one AllocationResult per claim, in order
};

class DraSteering {
 public:
  // `policy` is a placement policy name (placement::PolicyNames); the fragmentation-aware ones
  // need `workload` (RequestsOf the cluster's claims gives its requests).
  static Result<std::unique_ptr<DraSteering>> Create(
      std::vector<SteeringNode> nodes, const std::vector<Json>& slices,
      const std::vector<Json>& classes, std::string_view policy,
      std::shared_ptr<const placement::TargetWorkload> workload);
  ~DraSteering();

  // What the cluster holds. A pod's CPU and memory on `node`; an allocation's devices of ours
  // (others' are ignored). Errors name what does not fit the picture (it changes nothing then).
  Status AddPod(const std::string& node, int64_t cpu_milli, int64_t memory_mib);
  Status RemovePod(const std::string& node, int64_t cpu_milli, int64_t memory_mib);
  Status AddAllocation(const Json& allocation);
  Status RemoveAllocation(const Json& allocation);

  // The placement requests of a pod (its CPU and memory, and its claims), as Steer sees them; an
  // error when steering does not decide these claims.
  Result<std::vector<placement::Request>> RequestsOf(int64_t cpu_milli, int64_t memory_mib,
                                                     const std::vector<Json>& claims) const;

  // Where the pod goes and each claim's allocation, applied to the picture (as AddPod and
  // AddAllocation would); nullopt when no node takes it. The caller undoes a decision it cannot
  // write with RemovePod and RemoveAllocation.
  Result<std::optional<SteeringDecision>> Steer(int64_t cpu_milli, int64_t memory_mib,
                                                const std::vector<Json>& claims);

  const placement::Cluster& cluster() const { return *cluster_; }
  // Policy choices that failed the DRA check and were made again (should stay rare).
  int rechosen() const { return rechosen_; }

  struct Gpu;
  struct Node;

 private:
  DraSteering() = default;
  struct Ask;
  Result<std::vector<Ask>> AsksOf(const std::vector<Json>& claims) const;
  bool DeviceMatches(const Ask& ask, const Gpu& gpu);
  // The GPUs `preferred` (the policy's choice) of `node` for `ask`, when each passes the DRA
  // rules (selectors, capacity beside what the node's allocations consume).
  std::optional<std::vector<int>> GpusFor(int node, const Ask& ask, uint32_t preferred);
  Status Apply(const Json& allocation, bool add);
  Status Pod(const std::string& node, int64_t cpu_milli, int64_t memory_mib, bool add);

  std::vector<Node> nodes_;
  std::map<std::string, int> node_index_;  // by node (and pool) name
  std::map<std::string, Json> classes_;
  std::unique_ptr<placement::Cluster> cluster_;
  std::unique_ptr<placement::Policy> policy_;
  std::shared_ptr<const placement::TargetWorkload> workload_;
  CelCache cel_;
  std::map<std::pair<const Gpu*, std::string>, bool> matches_;
  int rechosen_ = 0;
};

}  // namespace tessera::k8s::dra
