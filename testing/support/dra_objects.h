// resource.k8s.io/v1 and Pod JSON for the DRA tests and benchmark (tests only): claims as users
// write them, allocations as kube-scheduler writes them into a claim's status, and pods that use
// claims. Builders only: no I/O, no decisions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "k8s/objects.h"

namespace tessera::k8s::testing {

// One request of a claim: `count` devices of class `device_class`, with capacity requests
// ("memory" -> "4Gi", "cores" -> "30") and CEL selectors.
struct DraRequest {
  std::string name = "gpu";
  std::string device_class = "gpu.tessera.io";
  int64_t count = 1;
  std::map<std::string, std::string> capacity;
  std::vector<std::string> selectors;
  bool all = false;  // allocationMode: All
};

// A ResourceClaim's spec.devices: its requests and, when given, opaque parameters of driver
// gpu.tessera.io for all its requests.
Json ClaimSpec(const std::vector<DraRequest>& requests,
               const std::optional<Json>& parameters = std::nullopt);
Json ClaimJson(const std::string& ns, const std::string& name,
               const std::vector<DraRequest>& requests,
               const std::optional<Json>& parameters = std::nullopt);

// One result of an allocation, as kube-scheduler writes it.
struct DraResult {
  std::string request = "gpu";
  std::string pool;
  std::string device;
  std::map<std::string, std::string> consumed;  // consumedCapacity; empty: none (whole device)
  bool share = true;                            // a shareID (devices allocated more than once)
};

// status of a claim allocated on `node` with `results` (and `config` copied as the allocator
// copies it), reserved for the pod `pod_name`/`pod_uid` when given.
Json AllocatedStatus(const std::string& node, const std::vector<DraResult>& results,
                     const Json& config = Json::array(), const std::string& pod_name = "",
                     const std::string& pod_uid = "");

// A pod whose containers use claims: `claims` maps the pod's claim entry name to the
// ResourceClaim's name; each container names the entries (and optionally "entry/request") it uses.
struct DraContainer {
  std::string name;
  std::vector<std::string> claims;
};
Json PodWithClaims(const std::string& ns, const std::string& name,
                   const std::map<std::string, std::string>& claims,
                   const std::vector<DraContainer>& containers);

// A new UUID-shaped string (a share ID).
std::string NewShareId();

}  // namespace tessera::k8s::testing
