// GPU fragmentation, as defined by FGD (Weng et al., ATC'23), over a target workload.
//
// The target workload M is a set of typical request shapes with weights p_m: the distinct
// (CPU, GPU count, per-GPU share, allowed models, form) tuples of a request list, most frequent
// first, until they cover a given fraction (95 %) of the requests; CPU-only shapes included;
// weights are the frequencies normalised over the chosen shapes.
//
// The fragmentation of node n for one shape m, F_n(m), in GPU milli: when m fits n (m's GPU model
// and form are allowed there, n has enough free CPU, and at least m's GPU count of GPUs each have
// m's share free), the free share of the GPUs whose free share is below m's share; otherwise (and
// always for CPU-only shapes) all free share of n. F_n(M) = sum_m p_m F_n(m). Host memory is not
// part of the measure, as in the paper.
//
// FragEvaluator keeps per-node counters so that the fragmentation after a hypothetical placement
// costs O(shapes) rather than O(shapes x GPUs); NodeFragMilli is the direct definition (tests
// check one against the other). Nothing here places anything.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "placement/cluster.h"
#include "placement/mig.h"
#include "placement/model.h"

namespace tessera::placement {

struct TargetShape {
  int64_t cpu_milli = 0;
  int gpu_count = 0;
  int gpu_milli = 0;                          // per-GPU compute share; 0 for memory-only shapes
  int64_t gpu_mem_mib = kProportionalMemory;  // per GPU, for memory-only shapes
  ModelSet allowed = ModelSet::Any();
  double weight = 0;       // p_m
  int64_t memory_mib = 0;  // host memory; only sized_demands() set it
};

class TargetWorkload {
 public:
  TargetWorkload() = default;
  // Shapes as given; the demand by placement constraint (demands()) is derived from them.
  explicit TargetWorkload(std::vector<TargetShape> shapes, MigDemand mig = {});
  // The typical shapes of `requests` covering `coverage` (0..1] of them, weights normalised; the
  // demand by placement constraint counts every request. MIG requests are left out of both (they
  // only fit MIG nodes, whose GPUs have no share to fragment) and make up mig_demand().
  static TargetWorkload FromRequests(std::span<const Request> requests, double coverage = 0.95);

  const std::vector<TargetShape>& shapes() const { return shapes_; }
  // Where the GPU demand may go: one entry per (allowed models, whole GPUs or a compute share),
  // as a shape of one GPU (gpu_milli 1000 for whole GPUs, 1 for any compute share) whose weight
  // is its part of all the GPU milli asked. Memory-only shares ask no compute and are left out.
  // Constraints too rare to be among the typical shapes still count here.
  const std::vector<TargetShape>& demands() const { return demands_; }
  // The GPU demand by request size: one entry per (CPU, memory, GPUs, per-GPU share or whole,
  // allowed models), weight its part of all the GPU milli asked (as demands()). Tells which
  // demand fits only the larger nodes: an 8-GPU request of 120 cores goes to 128-core nodes only.
  const std::vector<TargetShape>& sized_demands() const { return sized_; }
  // How often each MIG profile is asked among the MIG requests (placement/mig.h).
  const MigDemand& mig_demand() const { return mig_; }

 private:
  std::vector<TargetShape> shapes_;
  std::vector<TargetShape> demands_;
  std::vector<TargetShape> sized_;
  MigDemand mig_;
};

// The free share (milli) one GPU of `node` must have for `shape`, or -1 when the shape can never
// use the node's GPUs (model not allowed, form does not match the mode, no GPUs, CPU-only shape).
int ShapeNeed(const Cluster& cluster, int node, const TargetShape& shape);

// Nodes of one GPU model and one mode form a class: a shape may use all of its nodes' GPUs or
// none. Index for per-class tables, 0..kNodeClasses-1; nodes without GPUs have no class (-1).
inline constexpr int kModeSlots = 4;  // room for every NodeMode
inline constexpr int kNodeClasses = kMaxModels * kModeSlots;
inline int NodeClass(const NodeSpec& spec) {
  return spec.gpu_count == 0 ? -1 : spec.model * kModeSlots + static_cast<int>(spec.mode);
}

// F_n(M) straight from the definition, in GPU milli.
double NodeFragMilli(const Cluster& cluster, int node, const TargetWorkload& workload);

// The free share GPU `gpu` of `node` would have after taking one GPU's worth of `request`
// (mirrors Cluster's accounting, without changing anything).
int32_t ShareAfter(const Cluster& cluster, int node, int gpu, const Request& request);

// Fast F_n(M) and F_n(M) after a hypothetical placement, cached per node version. Holds a
// reference to the cluster and the workload; both must outlive it.
class FragEvaluator {
 public:
  FragEvaluator(const Cluster& cluster, const TargetWorkload& workload);
  FragEvaluator(const FragEvaluator&) = delete;
  FragEvaluator& operator=(const FragEvaluator&) = delete;

  // F_n(M) now.
  double Frag(int node);
  // F_n(M) if `request` were placed on `node`'s GPUs in `gpus` (the caller has checked the fit).
  double FragAfter(int node, const Request& request, uint32_t gpus);
  // F_n(M) after `request` takes one GPU of free share `from` down to `to` (fractional, single
  // GPU requests: GPUs of equal free share give equal results, so callers evaluate each distinct
  // share once).
  double FragAfterOneGpu(int node, const Request& request, int32_t from, int32_t to);
  // Sum of F_n(M) over all nodes.
  double ClusterFragMilli();

  const TargetWorkload& workload() const { return workload_; }

 private:
  struct NodeCache {
    uint64_t version = ~uint64_t{0};
    double frag = 0;
  };
  void Refresh(int node);
  // Per node class (model x mode): the indices of the shapes that can use such a node, with
  // their needs, and the total weight of the shapes that cannot (they count all free share).
  struct ClassShapes {
    bool built = false;
    std::vector<int> shape;
    std::vector<int> need;
    double never_weight = 0;
  };
  const ClassShapes& ShapesFor(int node);

  const Cluster& cluster_;
  const TargetWorkload& workload_;
  std::vector<NodeCache> cache_;
  // Per node and shape (index into ClassShapes): GPUs with enough free share, and the free share
  // of the others. Laid out node-major, `stride_` entries per node.
  std::vector<int16_t> count_;
  std::vector<int32_t> low_;
  size_t stride_ = 0;
  std::vector<ClassShapes> classes_;
};

}  // namespace tessera::placement
