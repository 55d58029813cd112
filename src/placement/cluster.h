// A Cluster is the mutable state placement works on: for every node, the CPU and host memory still
// free and, for every GPU, the compute milli and memory still free. It owns the fit rules (which
// request may go where) and applies and removes assignments; policies only read it.
//
// Fit rules, all of which must hold for a request on a node:
//   CPU and host memory fit what is free; the node's GPU model is allowed; the request's shape
//   fits the node's (placement/fit.h: its form matches the node's mode, the node has its GPU
//   count, its GPUs are as large as the memory it asks on each); at least `gpu_count` distinct
//   GPUs each have the per-GPU compute share and memory free, and for whole-GPU requests those
//   GPUs are entirely free.
//   On a node whose GPUs have modes of their own (NodeSpec::gpu_modes) only the GPUs whose mode
//   takes the request count (placement/fit.h GpuModeTakes), for the shape rule as for the shares,
//   and a request of several GPUs takes them all of one mode (Cluster::SpanGroup); elsewhere the
//   node's mode tag must be one the request accepts.
//   A MIG request fits only a MIG node, whose model has its profile, with a free instance of that
//   profile on some GPU (or a GPU it may cut again: all its instances free, on a node with
//   mig_relayout). A MIG GPU's free compute and memory are what its taken instances leave (an
//   instance takes its slices' share of both); its free share for fractional requests is 0.
//
// Time: the caller may keep a clock on the cluster (set_now, seconds on any clock of its own) and
// place each request with its start on that clock; the cluster keeps, per node, the earliest start
// among the requests holding its GPUs, so a policy can tell nodes of long-running pods from nodes
// of young ones. A caller that keeps no time places everything at 0 with the clock at 0.
//
// Not thread-safe; one writer. Holds no policy and no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "placement/mig.h"
#include "placement/model.h"

namespace tessera::placement {

// Why a request does not fit a node (kFits when it does). The first failed rule, in this order.
enum class FitResult : uint8_t {
  kFits,
  kCpu,          // not enough free CPU
  kMemory,       // not enough free host memory
  kModel,        // the node's GPU model is not allowed (or the node has no GPUs)
  kMode,         // the share's form does not match the node's mode
  kGpuCount,     // the node has fewer GPUs than requested, free or not
  kGpuSize,      // the node's GPUs have less memory than the request asks on each
  kGpuCompute,   // too few GPUs with the compute share free (entirely free, for whole GPUs)
  kGpuMemory,    // too few GPUs with the memory free
  kMigProfile,   // the node's GPU model has no MIG profile of the request's name
  kMigInstance,  // no free instance of the request's MIG profile (and no GPU to cut again)
};

std::string_view FitResultName(FitResult result);

class Cluster {
 public:
  Cluster(ModelTable models, std::vector<NodeSpec> nodes);
  // Checks node specs (GPU counts, models, non-negative resources) before building.
  static Result<Cluster> Create(ModelTable models, std::vector<NodeSpec> nodes);

  int node_count() const { return static_cast<int>(specs_.size()); }
  const NodeSpec& spec(int node) const { return specs_[static_cast<size_t>(node)]; }
  const ModelTable& models() const { return models_; }
  int64_t gpu_memory_mib(int node) const { return gpu_mem_cap_[static_cast<size_t>(node)]; }

  int64_t cpu_free(int node) const { return cpu_free_[static_cast<size_t>(node)]; }
  int64_t memory_free(int node) const { return mem_free_[static_cast<size_t>(node)]; }
  // Per-GPU compute milli free, memory MiB free.
  std::span<const int32_t> gpu_milli_free(int node) const {
    return {gpu_milli_free_.data() + offset(node), static_cast<size_t>(spec(node).gpu_count)};
  }
  std::span<const int64_t> gpu_memory_free(int node) const {
    return {gpu_mem_free_.data() + offset(node), static_cast<size_t>(spec(node).gpu_count)};
  }
  // Per-GPU free share in milli: what a fractional request of this node's mode could still use.
  // Memory+compute: the smaller of the compute milli and the memory fraction free (they are equal
  // when every tenant's memory is proportional). Memory-only: the memory fraction free.
  std::span<const int32_t> gpu_share_free(int node) const {
    return {gpu_share_free_.data() + offset(node), static_cast<size_t>(spec(node).gpu_count)};
  }
  // GPUs with nothing on them.
  int whole_gpus_free(int node) const { return whole_free_[static_cast<size_t>(node)]; }
  // Sum of gpu_share_free over the node's GPUs.
  int64_t share_free_total(int node) const { return share_total_[static_cast<size_t>(node)]; }
  // Bumped on every change of the node, so policies can cache per-node values.
  uint64_t version(int node) const { return version_[static_cast<size_t>(node)]; }
  // Node changes since the cluster was built, counted over all nodes (each bumps one version),
  // and the node of change number `change` (1..changes()) while it is one of the last
  // kChangeLog; -1 for an older one or none. A reader that keeps a per-node value up to date
  // revisits the nodes changed since it last looked, or all of them when it fell further behind.
  static constexpr uint64_t kChangeLog = 64;
  uint64_t changes() const { return changes_; }
  int changed_node(uint64_t change) const {
    if (change == 0 || change > changes_ || changes_ - change >= kChangeLog) return -1;
    return change_log_[change % kChangeLog];
  }
  // Unique per Cluster object and per copy; a cache keyed by (id, node, version) stays exact.
  uint64_t id() const { return id_.value; }

  // Capacity and use over the whole cluster, in GPU milli.
  int64_t gpu_milli_capacity() const { return gpu_capacity_milli_; }
  int64_t gpu_milli_allocated() const { return gpu_allocated_milli_; }
  int total_gpus() const { return static_cast<int>(gpu_milli_free_.size()); }

  // A MIG node's GPUs (empty for other nodes) and its GPUs' MIG model (nullptr for other nodes).
  std::span<const MigGpu> mig_gpus(int node) const { return mig_[static_cast<size_t>(node)]; }
  const mig::GpuModel* mig_model(int node) const {
    const auto& g = mig_[static_cast<size_t>(node)];
    return g.empty() ? nullptr : g.front().layout.model;
  }
  // Whether GPU `gpu` of `node` may be cut again now (its node allows it, all instances free).
  bool MigRelayoutable(int node, int gpu) const;
  // One instance of `profile` on `node`'s GPUs: its memory (MiB) and compute share (milli).
  int64_t MigInstanceMemoryMib(int node, const mig::MigProfile& profile) const;
  int32_t MigInstanceMilli(int node, const mig::MigProfile& profile) const;
  // The start slot of the instance GPU `gpu` of `node` gives MIG `request` as the GPU is (its
  // free instance of the profile with the lowest start), or -1.
  int MigInstanceFor(int node, int gpu, const Request& request) const;

  // The fit rules for the node as a whole (CPU, memory, model, mode, GPU count and shares).
  FitResult Fits(int node, const Request& request) const;
  // Whether GPU `gpu` of `node` can take one GPU's worth of `request`.
  bool GpuFits(int node, int gpu, const Request& request) const;
  // Bit i set when GPU i can take one GPU's worth of `request`.
  uint32_t FittingGpus(int node, const Request& request) const;

  // Applies `a` after checking it: node fits, exactly gpu_count distinct GPUs that each fit. For a
  // MIG request, `a` names the instance (mig_start) and, when the GPU is cut again first, its new
  // layout (mig_layout, which must hold a free instance of the profile at mig_start); a new layout
  // stays when the request is removed, as a cut GPU does. A request with GPUs started at
  // `started_s` (the clock's seconds).
  Status Place(const Request& request, const Assignment& a, double started_s = 0);
  // Takes back what Place gave. The caller must pass the same request, assignment and start.
  Status Remove(const Request& request, const Assignment& a, double started_s = 0);

  // The caller's clock, in seconds: the instant decisions are made at (0 until set).
  void set_now(double seconds) { now_s_ = seconds; }
  double now() const { return now_s_; }
  // The earliest start among the requests holding GPUs of `node`; +infinity when none does.
  double oldest_gpu_start(int node) const { return oldest_start_[static_cast<size_t>(node)]; }

 private:
  size_t offset(int node) const { return static_cast<size_t>(offset_[static_cast<size_t>(node)]); }
  void RefreshGpu(int node, int gpu);
  FitResult MigFits(int node, const Request& request) const;
  // Fits past the model check, on a node with GPU modes of its own.
  FitResult MixedFits(int node, const Request& request) const;
  // Whether GPU `gpu`'s free compute and memory take one GPU's worth of `request` (not its mode).
  bool GpuStateFits(int node, int gpu, const Request& request) const;
  // A node with GPU modes of its own, a request of several GPUs: the GPUs of the one mode it would
  // span (the mode whose lowest GPU comes first among those with enough that fit now), or 0.
  uint32_t SpanGroup(int node, const Request& request) const;
  bool MigGpuFits(int node, int gpu, const Request& request) const;
  Status PlaceRequest(const Request& request, const Assignment& a);
  Status RemoveRequest(const Request& request, const Assignment& a);
  Status PlaceMig(const Request& request, const Assignment& a);
  Status RemoveMig(const Request& request, const Assignment& a);
  // Sets GPU `gpu`'s free compute and memory from its taken instances.
  void RefreshMigGpu(int node, int gpu);
  // Records a change of `node`: its version and the change log.
  void Changed(size_t node) {
    ++version_[node];
    ++changes_;
    change_log_[changes_ % kChangeLog] = static_cast<int32_t>(node);
  }

  // A fresh id for every constructed, copied or moved-into Cluster.
  struct InstanceId {
    InstanceId() : value(Next()) {}
    InstanceId(const InstanceId&) : value(Next()) {}
    InstanceId& operator=(const InstanceId&) {
      value = Next();
      return *this;
    }
    static uint64_t Next();
    uint64_t value;
  };

  InstanceId id_;
  ModelTable models_;
  std::vector<NodeSpec> specs_;
  std::vector<int32_t> offset_;       // first GPU of each node in the flat arrays
  std::vector<int64_t> gpu_mem_cap_;  // per node: memory of one GPU
  std::vector<int64_t> cpu_free_;
  std::vector<int64_t> mem_free_;
  std::vector<int32_t> whole_free_;
  std::vector<int64_t> share_total_;
  std::vector<uint64_t> version_;
  uint64_t changes_ = 0;
  std::array<int32_t, kChangeLog> change_log_{};  // by change number modulo kChangeLog
  std::vector<int32_t> gpu_milli_free_;           // flat, per GPU
  std::vector<int64_t> gpu_mem_free_;             // flat, per GPU
  std::vector<int32_t> gpu_share_free_;           // flat, per GPU
  std::vector<std::vector<MigGpu>> mig_;  // per node: its GPUs in MIG mode (kMig nodes only)
  int64_t gpu_capacity_milli_ = 0;
  int64_t gpu_allocated_milli_ = 0;
  double now_s_ = 0;
  std::vector<std::vector<double>> starts_;  // per node: the start of each request with GPUs
  std::vector<double> oldest_start_;         // per node: the least of starts_, or +infinity
};

}  // namespace tessera::placement
