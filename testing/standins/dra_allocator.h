// DraAllocator: a STAND-IN for kube-scheduler's structured-parameters allocator
// (k8s.io/dynamic-resource-allocation structured, the "incubating" implementation that runs with
// DRAConsumableCapacity and DRAPartitionableDevices on), for tests and the benchmark only. What it
// does is what upstream's Allocate(node, claims) does, as far as the objects Tessera publishes and
// its users write use it:
//  - pools: the slices of the node (spec.nodeName, spec.allNodes, or a spec.nodeSelector whose
//    one term matches the node's name or labels with In/NotIn/Exists/DoesNotExist); per pool
//    (driver, pool name) only the highest generation counts; a pool with fewer slices of that
//    generation than its resourceSliceCount is incomplete and gives no device; pools in order of
//    driver then name, slices by name, devices in slice order (first fit);
//  - claims one after the other, their requests in order, each device of a request after the
//    previous one's place; a device is tried against the class's selectors then the request's
//    (CEL: k8s/dra/cel.h's subset), then the consumable capacity (k8s/dra/capacity.h: the
//    request's rounded consumption beside what allocated claims consume), then availability (a
//    device not allowing multiple allocations is taken whole; a shared one gets a share ID and
//    its consumed capacity), counters (partitionable devices, against what allocated devices
//    consume), and the claim's constraints (matchAttribute, distinctAttribute); a dead end
//    takes back the last choice and tries the next (backtracking), so the first full solution
//    in that order wins;
//  - allocationMode All (every matching device of complete pools, none allowed to be missing),
//    ExactCount with count; firstAvailable subrequests in order;
//  - results as upstream writes them: request ("req" or "req/sub"), driver, pool, device,
//    shareID and consumedCapacity for shared devices, the configuration of each class used
//    (source FromClass) then the claim's (FromClaim), a config naming every request losing its
//    request list, and a node selector naming the node.
// It does not do admin access, device taints, binding conditions or scoring (upstream has none).
// A DeviceFilter narrows the devices a request may take (Tessera's steering names the devices it
// chose); upstream has no such thing, so the filter is the caller's, never a rule of the stand-in.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/dra/capacity.h"
#include "k8s/dra/cel.h"
#include "k8s/objects.h"

namespace tessera::k8s {

class DraAllocator {
 public:
  struct DeviceId {
    std::string driver, pool, device;
    auto operator<=>(const DeviceId&) const = default;
    std::string Text() const { return driver + "/" + pool + "/" + device; }
  };
  struct NodeInfo {
    std::string name;
    std::map<std::string, std::string> labels;
  };
  // (claim index, request name as in results, device): may the request take the device?
  using DeviceFilter =
      std::function<bool(size_t claim, const std::string& request, const DeviceId& device)>;

  DraAllocator();
  ~DraAllocator();

  // The cluster's ResourceSlices and DeviceClasses (replaced whole).
  void SetSlices(const std::vector<Json>& slices);
  void SetClasses(const std::vector<Json>& classes);
  // What allocated claims hold (a claim's status.allocation, added once and removed once).
  void AddAllocation(const Json& allocation);
  void RemoveAllocation(const Json& allocation);

  // The allocation of each of `claims` (ResourceClaim JSON) on `node`, in order; nullopt when they
  // do not fit there; an error for a claim or class the allocator cannot read (as upstream, which
  // then fails the pod's scheduling with it).
  Result<std::optional<std::vector<Json>>> Allocate(const NodeInfo& node,
                                                    const std::vector<Json>& claims,
                                                    const DeviceFilter& filter = nullptr);

  // How many devices were tried (the benchmark's measure of the search).
  uint64_t tries() const { return tries_; }

  struct Device;
  struct Pool;

 private:
  struct Search;
  std::vector<const Pool*> PoolsFor(const NodeInfo& node);

  std::vector<std::unique_ptr<Pool>> pools_;
  std::map<std::string, std::vector<size_t>> pools_by_node_;  // node name -> pools (node-local)
  std::vector<size_t> shared_pools_;                          // pools not of one node
  std::map<std::string, Json> classes_;
  // Allocated state: devices held whole, and what shared devices' allocations consume.
  std::map<DeviceId, int> whole_;
  std::map<DeviceId, dra::Consumption> consumed_;
  std::map<DeviceId, int> shares_;
  dra::CelCache cel_;
  std::map<std::pair<const Device*, std::string>, Result<bool>> matches_;  // (device, expression)
  uint64_t tries_ = 0;
};

}  // namespace tessera::k8s
