// The cluster resource model that placement works on: GPU models, nodes, requests and where a
// request landed (an Assignment). These are plain values; the mutable state of a cluster (what is
// free where) lives in cluster.h.
//
// A node has CPU (milli-cores), host memory (MiB) and 0..kMaxGpusPerNode GPUs of one model. Every
// GPU has a compute capacity of 1000 milli and its model's memory. A node runs in one sharing mode:
// memory-only (tenants share a GPU by memory; compute is not divided), memory+compute (both are
// divided), whole GPUs (nothing is shared) or MIG (each GPU is cut into MIG instances, and a
// request takes one instance; placement/mig.h). A node not in MIG mode may give some GPUs a mode
// of their own (NodeSpec::gpu_modes, GpuMode): a request then goes only to GPUs whose mode takes
// its form, and a GPU that serves one request alone (MPS) is never one of several GPUs of a
// request.
//
// A request asks for CPU, host memory and `gpu_count` distinct GPUs, each with the same per-GPU
// share: `gpu_milli` of compute (1000 = a whole GPU, which only a completely free GPU can give;
// 0 = a memory-only share) and `gpu_mem_mib` of memory (kProportionalMemory = the same fraction of
// the GPU's memory as `gpu_milli` is of its compute, rounded down). `allowed` restricts the models.
// A MIG request (RequestForMigProfile) asks instead for one instance of a MIG profile.
//
// No Kubernetes types, no I/O here. Requests in the cgroup-style form of docs/contracts.md (gpu-mem
// GiB + gpu-core percent) are built with RequestFromShareForm.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "mig/planner.h"

namespace tessera::placement {

inline constexpr int kMilliPerGpu = 1000;
inline constexpr int kMaxGpusPerNode = 32;  // GPUs of one node are addressed by a 32-bit mask.
inline constexpr int kMaxModels = 64;       // Model sets are 64-bit masks.
inline constexpr int64_t kProportionalMemory = -1;

// How tenants share the GPUs of one node. Whole-GPU requests fit every mode; a fractional request
// fits only the mode of its form (compute share > 0: memory+compute; compute share 0: memory-only).
enum class NodeMode : uint8_t {
  kMemoryAndCompute,  // the trace's nodes: a GPU is divided by compute milli and memory
  kMemoryOnly,        // a GPU is divided by memory only; compute is shared, not reserved
  kWholeGpus,  // GPUs are not shared: only whole-GPU requests fit (docs/contracts.md `exclusive`)
  kMig,        // GPUs are cut into MIG instances: only MIG requests fit (docs/contracts.md `mig`)
};

std::string_view NodeModeName(NodeMode mode);

// A GPU's own mode (NodeSpec::gpu_modes): how it is shared (never kMig, which is a whole node's),
// whether it serves only requests of one GPU (an MPS GPU: a container's one GPU is its MPS
// server's), and a tag: the caller's name for the mode, 0..kMaxGpuModeTag, which a request's
// `gpu_modes` selects by (the extender's tags are its modes, `mps` apart from `core_mem`).
inline constexpr int kMaxGpuModeTag = 31;
inline constexpr uint32_t kAnyGpuMode = ~uint32_t{0};
struct GpuMode {
  NodeMode mode = NodeMode::kMemoryAndCompute;
  bool one_gpu_per_request = false;
  uint8_t tag = 0;
  bool operator==(const GpuMode&) const = default;
};

// A set of GPU models, as bits of ModelTable ids.
class ModelSet {
 public:
  static ModelSet Any() { return ModelSet(~uint64_t{0}); }
  static ModelSet None() { return ModelSet(0); }
  static ModelSet Of(int model) { return ModelSet(uint64_t{1} << model); }
  ModelSet With(int model) const { return ModelSet(bits_ | (uint64_t{1} << model)); }
  bool Contains(int model) const { return ((bits_ >> model) & 1) != 0; }
  bool IsAny() const { return bits_ == ~uint64_t{0}; }
  uint64_t bits() const { return bits_; }
  bool operator==(const ModelSet&) const = default;

 private:
  explicit ModelSet(uint64_t bits) : bits_(bits) {}
  uint64_t bits_;
};

struct GpuModel {
  std::string name;
  int64_t memory_mib = 0;
};

// Interns GPU model names. Ids are dense from 0 in order of first use; at most kMaxModels.
class ModelTable {
 public:
  // The id of `name`, adding it with `memory_mib` when new (memory_mib <= 0: the built-in size of
  // a known model, else 16 GiB). Fails when the table is full.
  Result<int> Intern(std::string_view name, int64_t memory_mib = 0);
  // The id of `name`, or -1.
  int Find(std::string_view name) const;
  const GpuModel& model(int id) const { return models_[static_cast<size_t>(id)]; }
  int size() const { return static_cast<int>(models_.size()); }

 private:
  std::vector<GpuModel> models_;
};

// Memory of the GPU models in the openb trace and a few current ones, in MiB (0 when unknown).
int64_t KnownModelMemoryMib(std::string_view name);

struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;
  int model = -1;  // ModelTable id; -1 when gpu_count == 0
  NodeMode mode = NodeMode::kMemoryAndCompute;
  // kMig only: each GPU's layout as the node starts (one per GPU, all of one mig::GpuModel), and
  // whether the engine may cut a GPU again while all its instances are free (placement/mig.h).
  std::vector<mig::Layout> mig_gpus{};
  bool mig_relayout = false;
  // The most GPUs one request may span here (an MPS node gives a container one GPU, its MPS
  // server's; trace mode `mps`).
  int max_gpus_per_request = kMaxGpusPerNode;
  // The node's mode's tag (GpuMode::tag) for a request's `gpu_modes`.
  uint8_t mode_tag = 0;
  // Each GPU's mode, when they are not all the node's (never on a kMig node); empty: every GPU is
  // in `mode` (tag `mode_tag`, one request alone when max_gpus_per_request is 1).
  std::vector<GpuMode> gpu_modes{};

  bool mixed() const { return !gpu_modes.empty(); }
  // GPU `gpu`'s sharing mode.
  NodeMode ModeOf(int gpu) const {
    return gpu_modes.empty() ? mode : gpu_modes[static_cast<size_t>(gpu)].mode;
  }
};

struct Request {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;
  int gpu_milli = 0;  // per GPU; 1000 = whole GPUs; 0 with gpu_mem_mib > 0 = memory-only share
  int64_t gpu_mem_mib = kProportionalMemory;  // per GPU
  ModelSet allowed = ModelSet::Any();
  // A MIG request: the MigProfileId of the one instance it asks (gpu_count 1, gpu_milli an
  // estimate of its compute share for demand totals, gpu_mem_mib 0); -1 for every other request.
  int mig_profile = -1;
  // The GPU modes it may use, a bit per GpuMode::tag (kAnyGpuMode: any whose mode takes its form).
  uint32_t gpu_modes = kAnyGpuMode;

  bool AcceptsModeTag(int tag) const { return ((gpu_modes >> tag) & 1) != 0; }
  bool cpu_only() const { return gpu_count == 0; }
  bool mig() const { return mig_profile >= 0; }
  bool whole_gpus() const { return gpu_count > 0 && gpu_milli >= kMilliPerGpu && !mig(); }
  bool memory_only() const { return gpu_count > 0 && gpu_milli == 0 && !mig(); }
  // GPU compute asked for in total, in milli (what the allocation ratio counts).
  int64_t total_gpu_milli() const { return int64_t{gpu_count} * gpu_milli; }
  // Memory this request takes on each of its GPUs, for a GPU with `gpu_memory_mib`.
  int64_t MemoryOn(int64_t gpu_memory_mib) const;
};

// Checks a request's own consistency (ranges, a GPU count with no share, ...). `what` names the
// request in the message.
Status ValidateRequest(const Request& request, std::string_view what);

// Our own request form (docs/contracts.md): `gpu_mem_mib` MiB of GPU memory and `gpu_core_percent`
// % of one GPU's compute (0 = memory-only, 100 = whole GPUs) on each of `gpu_count` GPUs; no memory
// with a compute share means the same fraction of the GPU's memory. CPU and host memory are given
// as for any request. The extender's requests and the trace's (RequestFromShareForm) are built
// here.
Result<Request> RequestFromShares(int64_t cpu_milli, int64_t memory_mib, int gpu_count,
                                  int64_t gpu_mem_mib, int gpu_core_percent,
                                  ModelSet allowed = ModelSet::Any());

// The trace's share form: `gpu_mem_gib` GiB per GPU and a core percent in multiples of 5 (as ACK
// requires); otherwise RequestFromShares.
Result<Request> RequestFromShareForm(int64_t cpu_milli, int64_t memory_mib, int gpu_count,
                                     int64_t gpu_mem_gib, int gpu_core_percent,
                                     ModelSet allowed = ModelSet::Any());

// One instance of MIG profile `profile` (a MigProfileId; the error lists the names when it is
// none), with CPU, host memory and allowed models as for any request.
Result<Request> RequestForMigProfile(int64_t cpu_milli, int64_t memory_mib,
                                     std::string_view profile, ModelSet allowed = ModelSet::Any());

// Where a request landed: a node and the set of its GPUs (bit i = GPU i). A MIG request's names
// one GPU and the instance: its start slot and, when the GPU is cut again first, the index of the
// new layout in MigLayoutsOf (-1: the GPU keeps its layout).
struct Assignment {
  int node = -1;
  uint32_t gpus = 0;
  int mig_start = -1;
  int mig_layout = -1;
  bool operator==(const Assignment&) const = default;
};

}  // namespace tessera::placement
