// The one rule for whether a container's GPU request can fit a node, in Kubernetes terms. The rule
// itself is src/placement's shape rule (placement/fit.h); here are the translations every door
// uses, so that none has its own: a container's request (pod_demand.h GpuRequest, read by
// GpuRequestOf) and a whole pod's (PodDemand) as placement requests, and a node's mode and GPUs
// as a placement node shape; and the refusal, worded with the resource names the container wrote.
//
// The extender's filter, the device plugin's Allocate and `tessera sim` (placement::Cluster::Fits)
// give the same verdict for the same shapes; k8s_fit_rule_test checks that over every shape.
// Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/result.h"
#include "k8s/annotations.h"
#include "k8s/pod_demand.h"
#include "placement/fit.h"
#include "placement/model.h"

namespace tessera::k8s {

// How placement sees a node of `mode`: core_mem, share and mps divide compute and memory, mem
// memory only, exclusive gives whole GPUs, mig MIG instances.
placement::NodeMode PlacementModeOf(NodeMode mode);
// The most GPUs one container may span on a node of `mode`: 1 on mps (its GPU's MPS server).
int MaxGpusPerRequest(NodeMode mode);
// The placement mode tag of `mode` (placement::GpuMode::tag, a bit of Request::gpu_modes, which
// PlacementRequestsOf sets from tessera.io/gpu-mode), and a GPU's whole placement mode.
int ModeTag(NodeMode mode);
placement::GpuMode PlacementGpuModeOf(NodeMode mode);

// A node in `mode` with `gpu_count` GPUs of `gpu_memory` each (MiB, rounded down); on a mig node
// `gpu_count` counts its GPUs in MIG mode and `mig_model` is their MIG model.
placement::NodeShape NodeShapeOf(NodeMode mode, int gpu_count, Bytes gpu_memory,
                                 const mig::GpuModel* mig_model = nullptr);

// What one container asks, per GPU, as placement places it: gpu-mem split evenly over its GPUs
// (MiB, rounded down); gpu-core the compute share of each, and with no gpu-mem the same fraction
// of the GPU's memory; gpu-mem without gpu-core a memory-only share; gpu-count alone, or gpu-core
// 100, whole GPUs, a gpu-mem ask beside them being the least memory each GPU must have; a MIG
// profile one instance. `cpu_milli`, `memory_mib` and `allowed` are given as for any request.
Result<placement::Request> PlacementRequestOf(
    const GpuRequest& request, int64_t cpu_milli = 0, int64_t memory_mib = 0,
    placement::ModelSet allowed = placement::ModelSet::Any());

// A pod's requests as placement places them, in ask order (one CPU-only request when it asks for
// no GPU), and the index of the one that carries the pod's CPU and memory: its first app
// container's ask, or the first ask when only init containers ask.
struct PodPlacement {
  std::vector<placement::Request> requests;
  std::vector<std::string> names;  // container per request ("" for the CPU-only one)
  std::vector<GpuRequest> asked;   // each container's request (none: the CPU-only one)
  size_t primary = 0;
};
// Fails, naming the container, when one of its requests cannot be translated.
Result<PodPlacement> PlacementRequestsOf(const PodDemand& demand, placement::ModelSet allowed);

// The shape rule for one container's request on a node of shape `node` (kFits, or a shape failure:
// placement/fit.h). A request that cannot be translated does not fit: kMode.
placement::FitResult ShapeFitOf(const GpuRequest& request, const placement::NodeShape& node);

// Why `request` never fits a node in `mode` of shape `node`, `fit` being ShapeFitOf's failure:
// what it asks, in the names it wrote them (tessera.io/ or aliyun.com/), against what the node has.
// E.g. "it asks tessera.io/gpu-mem=20 over 1 GPU (20GiB on each), more than the node's GPUs have
// (16GiB each)".
std::string ShapeRefusal(placement::FitResult fit, const GpuRequest& request, NodeMode mode,
                         const placement::NodeShape& node);

// The memory cap a container gets on each of its whole GPUs (gpu-count alone, or gpu-core 100):
// on core_mem, mps and share nodes what it asked there (a gpu-mem ask, split over its GPUs), else
// the whole GPU; on mem and exclusive nodes always the whole GPU (a mem node reads a part below
// the GPU's size as a memory-only share; an exclusive node gives GPUs whole).
Bytes WholeGpuCap(const GpuRequest& request, NodeMode mode, Bytes gpu_memory);

}  // namespace tessera::k8s
