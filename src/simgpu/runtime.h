// simgpu's process-local runtime: the objects behind the driver API's opaque handles (contexts,
// streams, events, modules, pools, graphs, VMM handles, arrays) and the map of device memory this
// process holds. One mutex guards it; the shared, cross-process part lives in SimState.
//
// Timing model: every piece of device work is *booked* on the shared device clock when it is
// submitted (SimState::BookKernel), in submission order across all processes, and its side effects
// (fill writes bytes, fault poisons the context) happen at submission. Synchronisation sleeps in
// wall-clock time until the booked end. Copies and memsets take no simulated device time.
// This file must not contain C ABI entry points; those live in driver_*.cc and nvml_*.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "driver/cuda_api.h"
#include "simgpu/sim_state.h"

namespace tessera::sim {

inline constexpr uint64_t kAllocGranularity = 2ull << 20;  // every device allocation: 2 MiB units
inline constexpr uint64_t kPitchAlignment = 512;
inline constexpr size_t kStreamQueueDepth =
    1024;  // pending kernels per stream before launch blocks
inline constexpr int kDriverVersion = 13000;

enum class KernelKind { kSpin, kNoop, kFill, kFault };

// One captured or submitted piece of kernel work with its decoded arguments.
struct KernelWork {
  KernelKind kind = KernelKind::kNoop;
  uint64_t spin_ns = 0;
  CUdeviceptr fill_ptr = 0;
  size_t fill_bytes = 0;
  uint32_t fill_value = 0;
};

}  // namespace tessera::sim

// The structs behind the opaque handle types of cuda_api.h.
struct CUctx_st {
  int device = 0;
  unsigned int flags = 0;
  bool primary = false;
  int primary_refs = 0;            // primary contexts: retain count; active while > 0
  CUresult sticky = CUDA_SUCCESS;  // a fault kernel makes the context fail every later call
  CUstream_st* legacy = nullptr;   // the legacy default stream (NULL / CU_STREAM_LEGACY)
  uint64_t blocking_ready_ns = 0;  // latest end of work on any blocking stream of this context
  std::unordered_set<CUstream_st*> streams;  // created and per-thread streams
};

struct CUstream_st {
  CUctx_st* ctx = nullptr;
  unsigned int flags = 0;
  bool legacy = false;
  bool per_thread = false;
  uint64_t ready_ns = 0;  // when everything submitted so far has finished
  uint64_t ends[tessera::sim::kStreamQueueDepth] = {};  // ring of pending kernel end times
  size_t ring_head = 0;
  size_t ring_count = 0;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph_st* capture_graph = nullptr;
  bool capture_owns_graph = true;  // false: cuStreamBeginCaptureToGraph's graph, the caller's
};

struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned int flags = 0;
  bool recorded = false;
  uint64_t time_ns = 0;
  // Recorded into this stream while it captured: the event is part of that capture, and waiting
  // on it or asking about it fails and invalidates the capture, as on a real driver.
  CUstream_st* captured_in = nullptr;
};

struct CUfunc_st {
  tessera::sim::KernelKind kind;
};

struct CUmod_st {
  CUfunc_st spin{tessera::sim::KernelKind::kSpin};
  CUfunc_st noop{tessera::sim::KernelKind::kNoop};
  CUfunc_st fill{tessera::sim::KernelKind::kFill};
  CUfunc_st fault{tessera::sim::KernelKind::kFault};
};

struct CUgraph_st {
  std::vector<tessera::sim::KernelWork> nodes;
};

struct CUgraphExec_st {
  std::vector<tessera::sim::KernelWork> nodes;
};

struct CUmemPoolHandle_st {
  int device = 0;
  bool is_default = false;
  uint64_t release_threshold = 0;
  uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::multimap<uint64_t, uintptr_t> free_blocks;  // size -> base, blocks not handed out
  std::unordered_map<uintptr_t, uint64_t> blocks;  // base -> size, every reserved block
};

struct CUarray_st {
  int device = 0;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  uint64_t charged = 0;
};

struct CUmipmappedArray_st {
  int device = 0;
  uint64_t charged = 0;
};

namespace tessera::sim {

enum class AllocKind { kDevice, kPitch, kManaged, kPool };

struct Allocation {
  uint64_t size = 0;     // usable bytes (what the caller asked for, or pitch * height)
  uint64_t charged = 0;  // bytes reserved on the device (rounded to kAllocGranularity)
  int device = 0;
  AllocKind kind = AllocKind::kDevice;
  CUctx_st* ctx = nullptr;
  CUmemPoolHandle_st* pool = nullptr;  // kPool: the pool the block returns to
};

struct VmmHandle {
  int device = 0;
  uint64_t size = 0;
  int memfd = -1;
  int mappings = 0;
  bool released = false;
};

struct VmmMapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

struct Runtime {
  std::mutex mu;
  bool initialized = false;
  std::vector<int> visible;        // CUDA_VISIBLE_DEVICES: ordinal -> physical device
  std::vector<CUctx_st*> primary;  // per device, created on first retain
  std::unordered_set<CUctx_st*> contexts;
  std::unordered_set<CUstream_st*> streams;
  std::unordered_set<CUevent_st*> events;
  std::unordered_set<CUmod_st*> modules;
  std::unordered_set<CUgraph_st*> graphs;
  std::unordered_set<CUgraphExec_st*> execs;
  std::unordered_set<CUmemPoolHandle_st*> pools;
  std::vector<CUmemPoolHandle_st*> default_pool, current_pool;  // per device
  std::unordered_set<CUarray_st*> arrays;
  std::unordered_set<CUmipmappedArray_st*> mipmapped;
  std::map<uintptr_t, Allocation> allocations;  // base -> allocation, for range lookups
  std::unordered_map<void*, size_t> host;       // pinned host allocations
  std::unordered_map<CUmemGenericAllocationHandle, VmmHandle> vmm;
  CUmemGenericAllocationHandle next_vmm = 1;
  std::map<uintptr_t, uint64_t> reservations;  // VA ranges from cuMemAddressReserve
  std::map<uintptr_t, VmmMapping> mappings;    // cuMemMap'ed ranges
  // Host mappings of freed allocations kept for reuse, by size: a real cuMemAlloc costs
  // microseconds, not an mmap+munmap pair, and later benchmarks measure the shim against it.
  std::unordered_map<uint64_t, std::vector<void*>> backing_cache;
  uint64_t backing_cached_bytes = 0;
};

inline constexpr uint64_t kBackingCacheMaxBlock = 64ull << 20;
inline constexpr uint64_t kBackingCacheMaxBytes = 256ull << 20;

// The process's runtime and shared state (both created on cuInit or nvmlInit, replaced after fork).
Runtime& Rt();
SimState* State();
// Attaches to the shared state and claims a slot; prints the reason to stderr on failure.
CUresult EnsureAttached();

}  // namespace tessera::sim
