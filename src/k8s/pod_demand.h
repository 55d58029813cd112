// What a pod asks of Tessera, read from its view (k8s/objects.h) in one place, for every door: the
// extender's filter and its DRA steering read PodDemand, the device plugin's Allocate reads one
// container's GpuRequest. Quantities go through k8s/quantity.h, annotations through
// k8s/annotations.h; k8s/fit.h turns the result into placement requests. (The device plugin also
// counts the devices kubelet asks of it per resource, with the same quantity parser.)
//
// GpuRequest: one container's ask of Tessera's resources, from its limits. PodDemand: what a pod
// asks of a node as the extender places it: its CPU and memory requests (as kube-scheduler counts
// them: the larger of the app containers' and native sidecars' sum and any init container beside
// the sidecars started before it, plus spec.overhead) and, per container that asks for a Tessera
// resource, the share it wants on each of its GPUs (docs/contracts.md: gpu-mem is the container's
// memory split evenly over its gpu-count GPUs; gpu-core the share on each; gpu-count alone, or
// gpu-core 100, whole GPUs), or the MIG instance it asks (tessera.io/mig-<profile>: one instance,
// on a mig node).
//
// Reading a PodDemand never fails as a whole: a pod whose Tessera ask or annotation is invalid
// carries `demand_error` (the filter verb's reason on every node), one whose CPU or memory cannot
// be read `requests_error`; both still occupy a node once bound. Pure functions: no placement, no
// HTTP, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/objects.h"

namespace tessera::k8s {

// What one container asks of Tessera's resources (docs/contracts.md), from its limits (extended
// resources cannot be overcommitted, so a request must equal its limit when both are written).
struct GpuRequest {
  uint64_t mem_gib = 0;  // tessera.io/gpu-mem (or aliyun.com/gpu-mem), GiB
  uint32_t core = 0;     // tessera.io/gpu-core (aliyun.com/gpu-core.percentage), 1-100
  uint32_t count = 0;    // tessera.io/gpu-count (aliyun.com/gpu-count), GPUs
  bool ack = false;      // written with ACK's names
  // tessera.io/mig-<profile>: 1, as the MIG tables spell the profile ("1g.10gb+me"); then no
  // other of these is asked.
  std::string mig_profile;

  bool mig() const { return !mig_profile.empty(); }
  bool any() const { return mem_gib != 0 || core != 0 || count != 0 || mig(); }
  // The amount asked of `resource` (0 when not asked).
  uint64_t Of(GpuResource resource) const;
  // Distinct GPUs the container spans: count, or 1 when only mem/core is asked.
  uint32_t Gpus() const { return count != 0 ? count : (any() ? 1 : 0); }
  bool operator==(const GpuRequest&) const = default;
};
// Errors name the pod's container and resource: mixing both spellings, a quantity that is not a
// whole number, core outside 1-100 (a multiple of 5 with the ACK name), a request that differs
// from its limit; a MIG resource of no known profile, asked more than once (a CUDA process sees
// one MIG device), beside another MIG profile or beside a share.
Result<GpuRequest> GpuRequestOf(const ContainerView& container);

// One container's Tessera ask, per GPU.
struct ContainerAsk {
  std::string name;
  bool init = false;
  int gpu_count = 0;        // distinct GPUs
  int core_percent = 0;     // GPU-time share on each GPU, 1..100 (100: whole GPUs); 0 = none asked
  int64_t mem_mib = 0;      // GPU memory on each GPU; 0 = none asked (proportional to the share)
  std::string mig_profile;  // one MIG instance of this profile ("3g.40gb"); "" for a share
  GpuRequest gpu;           // the request these were read from (k8s/fit.h translates it)
  // Whole GPUs: gpu-count alone, or a core share of 100.
  bool whole() const {
    return mig_profile.empty() && (core_percent >= 100 || (core_percent == 0 && mem_mib == 0));
  }
};

struct PodDemand {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<ContainerAsk> asks;           // init containers first, in spec order
  std::vector<std::string> allowed_models;  // tessera.io/gpu-model; empty: any
  std::vector<NodeMode> allowed_modes;      // tessera.io/gpu-mode; empty: any
  std::string demand_error;                 // why the Tessera ask cannot be placed
  std::string requests_error;               // why CPU or memory could not be read (then 0)

  bool wants_gpu() const { return !asks.empty(); }
};

// `pod` is the object `view` was read from (for spec.overhead, which the view does not carry).
PodDemand ReadPodDemand(const PodView& view, const Json& pod);

}  // namespace tessera::k8s
