// Writing a claim's status.allocation (resource.k8s.io/v1 AllocationResult) as kube-scheduler's
// allocator writes it, once the devices are chosen: a result per device (request, driver, pool,
// device, and for a device allocated more than once its shareID and consumedCapacity), then the
// configuration: each DeviceClass's config once (source FromClass) for the requests of that
// class, then the claim's (source FromClaim) that apply to a request allocated, and a config
// naming every request of the claim loses its list ("all"); and a node selector naming the node
// when the devices are the node's own. Pure functions but the share IDs' randomness; no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "k8s/dra/capacity.h"
#include "k8s/objects.h"

namespace tessera::k8s::dra {

struct ChosenDevice {
  std::string request;  // "req" or "req/subrequest"
  std::string driver, pool, device;
  std::optional<std::string> share_id;  // a device allocated more than once
  Consumption consumed;                 // with a share ID
};

// One request of the claim as allocated: its (sub)request name and its DeviceClass.
struct AllocatedRequest {
  std::string name;
  const Json* device_class = nullptr;
};

// The AllocationResult of `claim` (a ResourceClaim) with `chosen` for `requests`; `node` names the
// node of node-local devices ("": none).
Json AllocationJson(const Json& claim, const std::vector<AllocatedRequest>& requests,
                    const std::vector<ChosenDevice>& chosen, const std::string& node);

// A new share ID: a random UUID, as upstream's allocator makes them.
std::string NewShareId();

}  // namespace tessera::k8s::dra
