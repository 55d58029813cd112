// PodDemand: what a pod asks of a node, as the extender places it: its CPU and memory requests
// (as kube-scheduler counts them: the larger of the app containers' and native sidecars' sum and
// any init container beside the sidecars started before it, plus spec.overhead) and, per container
// that asks for a Tessera resource, the share it wants on each of its GPUs (docs/contracts.md:
// gpu-mem is the container's memory split evenly over its gpu-count GPUs; gpu-core the share on
// each; gpu-count alone, or gpu-core 100, whole GPUs), or the MIG instance it asks
// (tessera.io/mig-<profile>: one instance, on a mig node).
//
// Built from the shared pod view (k8s/objects.h) and the users' annotations (k8s/annotations.h).
// Reading never fails as a whole: a pod whose Tessera ask or annotation is invalid carries
// `demand_error` (the filter verb's reason on every node), one whose CPU or memory cannot be read
// `requests_error`; both still occupy a node once bound. No placement, no HTTP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k8s/objects.h"

namespace tessera::extender {

// One container's Tessera ask, per GPU.
struct ContainerAsk {
  std::string name;
  bool init = false;
  int gpu_count = 0;     // distinct GPUs
  int core_percent = 0;  // GPU-time share on each GPU, 1..100 (100: whole GPUs); 0 = none asked
  int64_t mem_mib = 0;   // GPU memory on each GPU; 0 = none asked (proportional to the share)
  std::string mig_profile;  // one MIG instance of this profile ("3g.40gb"); "" for a share
  k8s::GpuRequest gpu;      // the request these were read from (k8s/fit.h translates it)
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
  std::string demand_error;                 // why the Tessera ask cannot be placed
  std::string requests_error;               // why CPU or memory could not be read (then 0)

  bool wants_gpu() const { return !asks.empty(); }
};

// `pod` is the object `view` was read from (for spec.overhead, which the view does not carry).
PodDemand ReadPodDemand(const k8s::PodView& view, const k8s::Json& pod);

}  // namespace tessera::extender
