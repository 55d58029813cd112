// What a node publishes to DRA (resource.k8s.io/v1 ResourceSlices of driver gpu.tessera.io): the
// devices of its pool, by mode, with their attributes, capacities and request policies, as the
// `spec.devices` and `spec.sharedCounters` of each slice. One pool per node, named after the
// node; docs/kubernetes.md ("DRA") lists every attribute and policy and why.
//
//   core_mem, mps, share  a device per GPU ("gpu-<index>") with allowMultipleAllocations: claims
//                         consume capacity `memory` (bytes, in steps of kMemoryStep from
//                         kMemoryStep up to the GPU's memory, rounded down to a step) and `cores`
//                         (percent of the GPU's time, 1-100); a claim that asks for neither gets
//                         the whole GPU (both policies default to their maximum)
//   mem                   the same with `memory` only: the node does not divide GPU time, so a
//                         claim asking `cores` finds no device here
//   exclusive             a device per GPU, allocated whole (no request policies)
//   mig                   a device per MIG instance ("gpu-<p>-mig-<start>", p the GPU's place
//                         among the node's MIG GPUs), allocated whole; with shared counters (the
//                         default), each consumes its memory slices from a counter set per GPU,
//                         which sits in a slice of its own as the API requires (so the pool has
//                         two slices)
//
// Pure functions over JSON: no I/O, no API calls.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/deviceplugin/node_devices.h"
#include "k8s/objects.h"

namespace tessera::k8s::dra {

inline constexpr char kDriverName[] = "gpu.tessera.io";
inline constexpr char kResourceApiVersion[] = "resource.k8s.io/v1";
inline constexpr char kResourceApiPrefix[] = "/apis/resource.k8s.io/v1";
// Memory is consumed in steps of 256 MiB, starting at 256 MiB: a CUDA context alone needs more
// than that on current GPUs, a step wastes at most 0.3 % of an 80 GB GPU, and the ledger's 2 MiB
// pages divide it, so the cap a claim gets is exactly what the scheduler booked.
inline constexpr int64_t kMemoryStep = int64_t{256} << 20;
// Capacity and attribute names (in the driver's domain).
inline constexpr char kCapacityMemory[] = "memory";
inline constexpr char kCapacityCores[] = "cores";

// One device of the node's pool.
struct PublishedDevice {
  std::string name;        // a DNS label, unique in the pool
  NodeGpu gpu;             // tesserad's device (a MIG device carries gpu.mig)
  bool shared = false;     // allowMultipleAllocations: claims consume capacity
  bool has_cores = false;  // publishes capacity `cores`
  // The memory a claim can consume: the GPU's memory rounded down to kMemoryStep (shared), or
  // all of it (whole devices).
  int64_t memory_max = 0;

  bool operator==(const PublishedDevice&) const = default;
};

struct PoolOptions {
  // mig nodes: publish each instance's memory slices as counters it consumes (partitionable
  // devices, feature gate DRAPartitionableDevices); false publishes plain devices, which any
  // cluster with DRA allocates.
  bool mig_counters = true;
  // NVIDIA's driver version when known ("550.54.15"; published as a semver attribute).
  std::string driver_version;
};

// The devices a node in `mode` publishes, in order. A GPU smaller than two memory steps is left
// out of a shared pool; so is a MIG device without its MIG facts.
std::vector<PublishedDevice> PoolDevices(NodeMode mode, const std::vector<NodeGpu>& gpus);

// The contents of the pool's slices, in order: each an object with "devices" or
// "sharedCounters" (the rest of a slice's spec, pool and node, is the publisher's). None when the
// node has no device to publish.
std::vector<Json> PoolSlices(NodeMode mode, const std::vector<NodeGpu>& gpus,
                             const PoolOptions& options);

// A pool as a consumer must read it (ResourceSlice's contract): of a pool's slices, only those of
// its highest generation count, and the pool is whole when there are resourceSliceCount of them.
struct CurrentPool {
  std::string driver, name;
  std::vector<const Json*> slices;  // of the highest generation, by name
  bool complete = false;
};
// Every pool of `slices`, by driver then name; the pointers point into `slices`.
std::vector<CurrentPool> CurrentPools(const std::vector<Json>& slices);

// `version` as semver 2.0.0 ("535.104.05" -> "535.104.5", "470.82" -> "470.82.0"), or "" when it
// cannot be one.
std::string SemverOf(const std::string& version);

// Rewrites every quantity of a slice spec ("devices" capacities and request policies, counters)
// in the API server's canonical form, so two specs compare equal when their values are.
void CanonicalizeQuantities(Json* spec);

}  // namespace tessera::k8s::dra
