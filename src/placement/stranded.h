// Stranded GPUs: the one definition that the extender's /inspect (and so its cluster page) and
// `tessera demo` count by. Nothing here places anything or knows Kubernetes.
//
// A GPU is stranded, with respect to a demand (a list of requests), when it has capacity free
// and no request of the demand could use it now:
//   - free: at least a thousandth of its compute or of its memory not taken (memory alone on
//     memory-only nodes, whose compute is not divided; a MIG GPU's free compute and memory are
//     its instances not taken). Less is rounding: proportional memory is rounded down;
//   - could use: the request fits the GPU's node as a whole (Cluster::Fits: CPU, host memory,
//     model, mode, GPU count, enough GPUs with the share free) and this GPU is one it could take
//     (Cluster::GpuFits).
// Per GPU this is FGD's fragment (placement/frag.h) taken over every request at once: a GPU is
// stranded when its free capacity is fragment for each of them. A GPU with nothing free is never
// stranded, nor one that some request could take, however little of it that request would use.
//
// The demand (StrandingDemand): the requests of the pods waiting for a place, when any wait (what
// capacity is wanted for now: the cluster page's "free, but no waiting pod can use it");
// otherwise one request per GPU shape of the target workload (what typically comes). With
// neither, nothing is stranded: there is nothing to judge free capacity by.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/model.h"

namespace tessera::placement {

// Whether GPU `gpu` of `node` has capacity free (see above).
bool GpuHasFree(const Cluster& cluster, int node, int gpu);

// Bit g set when GPU g of `node` is stranded with respect to `demand`.
uint32_t StrandedGpus(const Cluster& cluster, int node, std::span<const Request> demand);

struct StrandedCount {
  int gpus = 0;            // stranded GPUs
  int64_t free_milli = 0;  // their free compute, in GPU milli (memory-only nodes: free memory)
};
StrandedCount CountStranded(const Cluster& cluster, std::span<const Request> demand);

// The demand to judge by: `waiting` when it is not empty, else a request per shape of `workload`
// that asks for a GPU (the shape's CPU, GPU count, share, memory and models; no host memory).
std::vector<Request> StrandingDemand(std::span<const Request> waiting,
                                     const TargetWorkload& workload);

}  // namespace tessera::placement
