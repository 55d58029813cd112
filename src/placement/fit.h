// The shape rule: whether a request of a given shape can ever fit a node of a given shape, empty or
// not. It is the one rule every door applies before anything that depends on what runs where:
// Cluster::Fits (so `tessera sim` and the extender's filter) and the device plugin's Allocate
// (src/k8s/fit.h turns Kubernetes requests and nodes into these shapes and words the verdict).
//
// A request never fits a node, whatever is freed there, when (the first that holds, in this order)
//   kMode        its form does not match the node's mode: a fractional compute share needs
//                memory+compute, a memory-only share memory-only, a MIG request a MIG node; whole
//                GPUs fit every mode but MIG; or it spans more GPUs than the node gives one
//                request (an MPS node gives each container one GPU, that GPU's MPS server);
//   kGpuCount    the node has fewer GPUs than it asks;
//   kGpuSize     it asks more memory on each GPU than the node's GPUs have; a memory ask with
//                whole GPUs counts too (the GPU must have at least that much);
//   kMigProfile  the node's MIG model has no profile of the request's name.
// Only what these do not cover depends on the node's state (CPU, memory, free shares, free MIG
// instances): those failures may be cured by preemption, these never.
//
// Pure functions of plain values, inline (every filter runs them per node); no I/O, no Kubernetes.
#pragma once

#include <cstdint>

#include "placement/cluster.h"
#include "placement/mig.h"
#include "placement/model.h"

namespace tessera::placement {

// What of a node decides whether a request's shape can fit it.
struct NodeShape {
  NodeMode mode = NodeMode::kMemoryAndCompute;
  int gpu_count = 0;
  int64_t gpu_memory_mib = 0;                  // of each GPU (one model per node)
  const mig::GpuModel* mig_model = nullptr;    // kMig: the MIG model its GPUs are cut from
  int max_gpus_per_request = kMaxGpusPerNode;  // GPUs one request may span (1 on an MPS node)
};

// The node shape of node spec `spec`, whose GPUs have `gpu_memory_mib` each.
inline NodeShape ShapeOf(const NodeSpec& spec, int64_t gpu_memory_mib,
                         const mig::GpuModel* mig_model) {
  return NodeShape{spec.mode, spec.gpu_count, gpu_memory_mib, mig_model, spec.max_gpus_per_request};
}

// kFits, or the first of kMode, kGpuCount, kGpuSize, kMigProfile that holds. A CPU-only request
// (gpu_count 0) fits every shape. Inline: Cluster::Fits runs it for every node a filter checks.
inline FitResult ShapeFits(const Request& r, const NodeShape& node) {
  if (r.gpu_count == 0) return FitResult::kFits;
  if (r.mig() != (node.mode == NodeMode::kMig)) return FitResult::kMode;
  if (r.mig()) {
    if (node.mig_model == nullptr) return FitResult::kMode;
    if (MigProfileOn(*node.mig_model, r.mig_profile) == nullptr) return FitResult::kMigProfile;
    return node.gpu_count >= 1 ? FitResult::kFits : FitResult::kGpuCount;
  }
  if (!r.whole_gpus() && (node.mode == NodeMode::kWholeGpus ||
                          r.memory_only() != (node.mode == NodeMode::kMemoryOnly))) {
    return FitResult::kMode;
  }
  if (r.gpu_count > node.max_gpus_per_request) return FitResult::kMode;
  if (node.gpu_count < r.gpu_count) return FitResult::kGpuCount;
  if (r.gpu_mem_mib > node.gpu_memory_mib) return FitResult::kGpuSize;
  return FitResult::kFits;
}

// Whether a GPU in `gpu` mode can ever take one GPU's worth of `r` (a GPU request): MIG never; its
// tag among those `r` accepts; not as one of several GPUs when it serves one request alone; whole
// GPUs any mode, a compute share memory+compute, a memory share memory-only.
inline bool GpuModeTakes(const GpuMode& gpu, const Request& r) {
  if (r.mig() || gpu.mode == NodeMode::kMig || !r.AcceptsModeTag(gpu.tag)) return false;
  if (r.gpu_count > 1 && gpu.one_gpu_per_request) return false;
  if (r.whole_gpus()) return true;
  return gpu.mode == (r.memory_only() ? NodeMode::kMemoryOnly : NodeMode::kMemoryAndCompute);
}

// Whether `fit` is a failure of the shape rule (so nothing freed on the node would cure it).
inline bool IsShapeFailure(FitResult fit) {
  return fit == FitResult::kMode || fit == FitResult::kGpuCount || fit == FitResult::kGpuSize ||
         fit == FitResult::kMigProfile;
}

}  // namespace tessera::placement
