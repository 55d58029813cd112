// What a ResourceClaim (resource.k8s.io/v1) allocated on this node asks of its GPUs, read from its
// status.allocation and checked against the node's pool before anything on the node changes:
// which of our devices it got (driver gpu.tessera.io, this node's pool, a published device), for
// which request, with which share ID, how much memory and GPU time it consumed (a device allocated
// whole: all of it), and the opaque configuration of our own kind that applies to it:
//
//   {"apiVersion": "gpu.tessera.io/v1alpha1", "kind": "GpuConfig",
//    "weight": 4,             # scheduling weight, 1..the GPUs' max_inst (default 1)
//    "highPriority": true}    # the high-priority lane (default false)
//
// A claim is one tesserad container: its processes share its caps, whichever of its requests a
// container of the pod uses. So a claim's GPUs must share one GPU-time share, configurations that
// apply to different requests must agree, and shares of one GPU add up. Every refusal names the
// claim, the field (its path in the claim) and the value. Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"
#include "k8s/dra/slices.h"
#include "k8s/objects.h"

namespace tessera::k8s::dra {

inline constexpr char kConfigApiVersion[] = "gpu.tessera.io/v1alpha1";
inline constexpr char kConfigKind[] = "GpuConfig";

// kubelet's name for a claim.
struct ClaimRef {
  std::string ns, uid, name;
  std::string Describe() const { return "ResourceClaim " + ns + "/" + name + " (uid " + uid + ")"; }
};

// One allocation result of ours: kubelet's Device for it.
struct ClaimDevice {
  std::string request;  // "req" or "req/subrequest"
  std::string pool, device;
  std::optional<std::string> share_id;
  std::string uuid;  // the GPU (MIG device) it is
};

// What the claim gets on one GPU (its results on that GPU added up).
struct ClaimGpu {
  std::string uuid;
  int index = 0;  // tesserad's device index
  Bytes memory;
  int cores = 100;
  bool whole = false;  // a device allocated whole (exclusive, mig, or no consumed capacity)

  bool operator==(const ClaimGpu&) const = default;
};

struct GpuConfig {
  std::optional<uint32_t> weight;
  std::optional<bool> high_priority;
};

struct ClaimPlan {
  ClaimRef ref;
  std::vector<ClaimDevice> devices;  // in the allocation's order
  std::vector<ClaimGpu> gpus;        // in order of first use
  uint32_t weight = 1;
  bool high_priority = false;
};

// Reads opaque parameters of our kind; `where` names them in errors.
Result<GpuConfig> ParseGpuConfig(const Json& parameters, const std::string& where);

// The plan for `claim` (the object the API server holds) as kubelet asked for `ref`, on the node
// whose pool is `pool` with `devices` published in `mode`; `max_weight` is the smallest max_inst
// of the node's GPUs (tesserad refuses weights above it).
Result<ClaimPlan> PlanClaim(const Json& claim, const ClaimRef& ref, const std::string& pool,
                            NodeMode mode, const std::vector<PublishedDevice>& devices,
                            uint32_t max_weight);

}  // namespace tessera::k8s::dra
