// simgpu's CUDA driver API entry points (the C ABI), over the process-local Runtime and the shared
// SimState. Each entry point validates its arguments the way the driver does, takes the runtime
// lock, and returns a CUresult; none throws. Sleeps (synchronisation) happen with the lock
// released. The export list and cuGetProcAddress live in proc_address.cc; NVML in nvml_api.cc.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "simgpu/runtime.h"

using tessera::sim::Allocation;
using tessera::sim::AllocKind;
using tessera::sim::kAllocGranularity;
using tessera::sim::KernelKind;
using tessera::sim::KernelWork;
using tessera::sim::MonotonicNs;
using tessera::sim::Rt;
using tessera::sim::Runtime;
using tessera::sim::SleepUntilNs;
using tessera::sim::State;

namespace tessera::sim {
namespace {

Runtime* g_runtime = nullptr;
SimState* g_state = nullptr;
std::once_flag g_atfork_once;
thread_local std::vector<CUctx_st*> t_ctx_stack;
thread_local std::unordered_map<CUctx_st*, CUstream_st*> t_per_thread_stream;

void AfterForkInChild() {
  // The child starts with no contexts and must call cuInit again; it gets its own slot then. The
  // parent's runtime (and a mutex another thread may have held) is abandoned, not destroyed.
  g_runtime = new Runtime();
  t_ctx_stack.clear();
  t_per_thread_stream.clear();
  if (g_state != nullptr) g_state->ForgetSlotAfterFork();
}

}  // namespace

Runtime& Rt() {
  if (g_runtime == nullptr) g_runtime = new Runtime();  // first use is under cuInit's once-guard
  return *g_runtime;
}

SimState* State() { return g_state; }

CUresult EnsureAttached() {
  static std::mutex attach_mu;
  std::lock_guard<std::mutex> lock(attach_mu);
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, AfterForkInChild); });
  if (g_state == nullptr) {
    auto attached = SimState::Attach();
    if (!attached.ok()) {
      std::fprintf(stderr, "simgpu: %s\n", attached.error().c_str());
      return attached.error().find("TESSERA_SIM_") != std::string::npos
                 ? CUDA_ERROR_INVALID_VALUE
                 : CUDA_ERROR_OPERATING_SYSTEM;
    }
    g_state = *attached;
  }
  if (g_state->ClaimSlot() < 0) {
    std::fprintf(stderr, "simgpu: all %d process slots of the simulated machine are in use\n",
                 kMaxProcesses);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

}  // namespace tessera::sim

namespace {

using Lock = std::unique_lock<std::mutex>;

uint64_t RoundUp(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

CUctx_st* CurrentCtx() {
  return tessera::sim::t_ctx_stack.empty() ? nullptr : tessera::sim::t_ctx_stack.back();
}

void MarkContextOnDevice(int device) {
  if (auto* p = State()->process()) p->context_mask.fetch_or(1ull << device);
}

CUstream_st* NewStream(CUctx_st* ctx, unsigned flags, bool legacy, bool per_thread) {
  auto* s = new CUstream_st();
  s->ctx = ctx;
  s->flags = flags;
  s->legacy = legacy;
  s->per_thread = per_thread;
  return s;
}

CUctx_st* NewContext(Runtime& rt, int device, unsigned flags, bool primary) {
  auto* ctx = new CUctx_st();
  ctx->device = device;
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->legacy = NewStream(ctx, 0, /*legacy=*/true, /*per_thread=*/false);
  rt.contexts.insert(ctx);
  MarkContextOnDevice(device);
  return ctx;
}

// Checks initialisation and returns the current context (nullptr with *err set otherwise).
CUctx_st* RequireCtx(CUresult* err) {
  if (!Rt().initialized) {
    *err = CUDA_ERROR_NOT_INITIALIZED;
    return nullptr;
  }
  CUctx_st* ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) {
    *err = CUDA_ERROR_INVALID_CONTEXT;
    return nullptr;
  }
  if (ctx->sticky != CUDA_SUCCESS) {
    *err = ctx->sticky;
    return nullptr;
  }
  *err = CUDA_SUCCESS;
  return ctx;
}

#define SIM_REQUIRE_INIT()                                    \
  do {                                                        \
    if (!Rt().initialized) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

#define SIM_REQUIRE_CTX(ctx)              \
  CUresult ctx##_err = CUDA_SUCCESS;      \
  CUctx_st* ctx = RequireCtx(&ctx##_err); \
  if (ctx == nullptr) return ctx##_err

// CUDA_VISIBLE_DEVICES, read at cuInit: ordinal -> physical device. Every entry point takes and
// returns ordinals; contexts, pools and the shared state use physical indices.
bool ValidDevice(int ordinal) {
  return State() != nullptr && ordinal >= 0 && ordinal < static_cast<int>(Rt().visible.size());
}
int Phys(int ordinal) { return Rt().visible[static_cast<size_t>(ordinal)]; }
int Ordinal(int physical) {
  const auto& v = Rt().visible;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == physical) return static_cast<int>(i);
  }
  return -1;
}

// The MIG device CUDA enumerates for MIG-mode GPU `gpu` when it is named without an instance (by
// index or GPU- UUID, or with CUDA_VISIBLE_DEVICES unset): the one at the lowest start slot.
int FirstMigDevice(int gpu) {
  int best = -1;
  for (int k = 0; k < tessera::sim::kMigSlotsPerGpu; ++k) {
    const int slot = tessera::sim::MigSlot(gpu, k);
    if (!State()->MigDeviceReady(slot)) continue;
    if (best < 0 || State()->device(slot).mig_start < State()->device(best).mig_start) best = slot;
  }
  return best;
}

// Parses CUDA_VISIBLE_DEVICES as the driver does: indices or UUIDs (or a unique UUID prefix),
// comma separated; enumeration stops at the first entry that names no device or repeats one.
// MIG: a GPU in MIG mode is never a CUDA device itself; a MIG- UUID names one of its MIG devices,
// and a process enumerates at most one MIG device (CUDA 11/12's rule): later MIG entries are
// skipped. The result holds device slots (a GPU's index, or a MIG instance's slot).
std::vector<int> VisibleDevices() {
  const int n = State()->device_count();
  std::vector<int> out;
  bool mig_taken = false;
  // Adds device slot `d` (or for a MIG-mode GPU its first MIG device); false ends enumeration.
  auto add = [&](int d) {
    if (d >= 0 && d < n && State()->MigEnabled(d)) d = FirstMigDevice(d);
    if (d < 0 || std::find(out.begin(), out.end(), d) != out.end()) return false;
    if (d >= tessera::sim::kMaxGpus) {
      if (mig_taken) return true;
      mig_taken = true;
    }
    out.push_back(d);
    return true;
  };
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    for (int d = 0; d < n; ++d) {
      if (State()->MigEnabled(d) && (mig_taken || FirstMigDevice(d) < 0)) continue;
      add(d);
    }
    return out;
  }
  const std::string text(env);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int found = -1;
    if (!item.empty() && std::all_of(item.begin(), item.end(), ::isdigit) && item.size() < 4) {
      const int idx = std::atoi(item.c_str());
      if (idx < n) found = idx;
    } else if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      const bool mig = item[0] == 'M';
      for (int d = mig ? tessera::sim::kMaxGpus : 0; d < (mig ? tessera::sim::kMaxDevices : n);
           ++d) {
        if (mig && !State()->MigDeviceReady(d)) continue;
        if (std::strncmp(State()->device(d).uuid, item.c_str(), item.size()) == 0) {
          if (found >= 0) {
            found = -1;  // ambiguous prefix
            break;
          }
          found = d;
        }
      }
    }
    if (!add(found)) break;
    if (comma == text.size()) break;
  }
  return out;
}

// The PCI bus a device slot answers with: a MIG device's is its GPU's.
int BusOf(int slot) {
  const int parent = State()->device(slot).mig_parent;
  return 0x10 + (slot >= tessera::sim::kMaxGpus && parent >= 0 ? parent : slot);
}

// Resolves a stream handle; NULL means the legacy stream, or the per-thread one for _ptsz calls.
CUstream_st* ResolveStream(Runtime& rt, CUctx_st* ctx, CUstream h, bool per_thread_default) {
  if (h == nullptr) {
    h = per_thread_default ? TESSERA_CU_STREAM_PER_THREAD : TESSERA_CU_STREAM_LEGACY;
  }
  if (h == TESSERA_CU_STREAM_LEGACY) return ctx->legacy;
  if (h == TESSERA_CU_STREAM_PER_THREAD) {
    auto it = tessera::sim::t_per_thread_stream.find(ctx);
    if (it != tessera::sim::t_per_thread_stream.end()) return it->second;
    CUstream_st* s = NewStream(ctx, 0, false, /*per_thread=*/true);
    ctx->streams.insert(s);
    tessera::sim::t_per_thread_stream[ctx] = s;
    return s;
  }
  return rt.streams.count(h) != 0 ? h : nullptr;
}

// When work submitted to `s` now may start: after the stream's own work, and across the legacy
// stream's implicit synchronisation with blocking streams.
uint64_t EarliestStart(CUstream_st* s) {
  uint64_t t = std::max(MonotonicNs(), s->ready_ns);
  if (s->legacy) {
    t = std::max(t, s->ctx->blocking_ready_ns);
  } else if ((s->flags & CU_STREAM_NON_BLOCKING) == 0) {
    t = std::max(t, s->ctx->legacy->ready_ns);
  }
  return t;
}

void NoteFinished(CUstream_st* s, uint64_t end) {
  s->ready_ns = std::max(s->ready_ns, end);
  if (s->legacy || (s->flags & CU_STREAM_NON_BLOCKING) == 0) {
    s->ctx->blocking_ready_ns = std::max(s->ctx->blocking_ready_ns, end);
  }
}

// Latest time by which everything in `ctx` is done.
uint64_t ContextReady(CUctx_st* ctx) {
  uint64_t t = std::max(ctx->legacy->ready_ns, ctx->blocking_ready_ns);
  for (CUstream_st* s : ctx->streams) t = std::max(t, s->ready_ns);
  return t;
}

// Finds the device allocation (or VMM mapping) holding [ptr, ptr+len). Returns its device or -1.
int FindDeviceRange(Runtime& rt, CUdeviceptr ptr, size_t len) {
  auto it = rt.allocations.upper_bound(static_cast<uintptr_t>(ptr));
  if (it != rt.allocations.begin()) {
    --it;
    if (ptr >= it->first && len <= it->second.size && ptr - it->first <= it->second.size - len) {
      return it->second.device;
    }
  }
  auto mt = rt.mappings.upper_bound(static_cast<uintptr_t>(ptr));
  if (mt != rt.mappings.begin()) {
    --mt;
    // A range may span adjacent mappings (expandable segments map many handles back to back).
    uintptr_t covered = mt->first + mt->second.size;
    if (ptr >= mt->first && ptr < covered) {
      int device = rt.vmm.count(mt->second.handle) ? rt.vmm[mt->second.handle].device : 0;
      auto next = std::next(mt);
      while (covered < ptr + len && next != rt.mappings.end() && next->first == covered) {
        covered += next->second.size;
        ++next;
      }
      if (ptr + len <= covered) return device;
    }
  }
  return -1;
}

// Books kernel work on `s` (or records it into the stream's capture) and applies its effects.
// Releases the lock while the stream's queue is full, as a real launch blocks on a full queue.
CUresult SubmitKernel(Lock& lock, CUstream_st* s, const KernelWork& work) {
  Runtime& rt = Rt();
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    s->capture_graph->nodes.push_back(work);
    return CUDA_SUCCESS;
  }
  CUctx_st* ctx = s->ctx;
  if (work.kind == KernelKind::kFill &&
      FindDeviceRange(rt, work.fill_ptr, work.fill_bytes) != ctx->device) {
    ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;  // the kernel would have faulted on the device
    return CUDA_SUCCESS;                       // launches are asynchronous: the error is sticky
  }
  while (s->ring_count == tessera::sim::kStreamQueueDepth) {
    const uint64_t oldest = s->ends[s->ring_head];
    if (oldest > MonotonicNs()) {
      lock.unlock();
      SleepUntilNs(oldest);
      lock.lock();
      if (rt.contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    s->ring_head = (s->ring_head + 1) % tessera::sim::kStreamQueueDepth;
    --s->ring_count;
  }
  const uint64_t duration = work.kind == KernelKind::kSpin ? work.spin_ns
                            : work.kind == KernelKind::kFill
                                ? work.fill_bytes / 1000  // 1 TB/s of device bandwidth
                                : 0;
  const uint64_t end = State()->BookKernel(ctx->device, EarliestStart(s), duration, nullptr);
  NoteFinished(s, end);
  if (duration != 0) {
    // Retire kernels that have already finished, then remember this one's end.
    const uint64_t now = MonotonicNs();
    while (s->ring_count > 0 && s->ends[s->ring_head] <= now) {
      s->ring_head = (s->ring_head + 1) % tessera::sim::kStreamQueueDepth;
      --s->ring_count;
    }
    s->ends[(s->ring_head + s->ring_count) % tessera::sim::kStreamQueueDepth] = end;
    ++s->ring_count;
  }
  if (work.kind == KernelKind::kFill) {
    std::memset(reinterpret_cast<void*>(work.fill_ptr), static_cast<int>(work.fill_value & 0xff),
                work.fill_bytes);
  } else if (work.kind == KernelKind::kFault) {
    ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  return CUDA_SUCCESS;
}

// Reads kernel arguments from kernelParams or from a CU_LAUNCH_PARAM_BUFFER_POINTER buffer.
CUresult DecodeKernel(CUfunction f, void** params, void** extra, KernelWork* work) {
  work->kind = f->kind;
  const char* buffer = nullptr;
  size_t buffer_size = 0;
  if (params == nullptr && extra != nullptr) {
    for (int i = 0; extra[i] != nullptr; i += 2) {  // CU_LAUNCH_PARAM_END is ((void*)0)
      if (extra[i] == reinterpret_cast<void*>(1)) buffer = static_cast<const char*>(extra[i + 1]);
      if (extra[i] == reinterpret_cast<void*>(2)) {
        buffer_size = *static_cast<const size_t*>(extra[i + 1]);
      }
    }
  }
  auto arg = [&](int index, size_t offset, size_t size, void* out) -> bool {
    if (params != nullptr) {
      if (params[index] == nullptr) return false;
      std::memcpy(out, params[index], size);
      return true;
    }
    if (buffer == nullptr || offset + size > buffer_size) return false;
    std::memcpy(out, buffer + offset, size);
    return true;
  };
  switch (f->kind) {
    case KernelKind::kSpin:
      if (!arg(0, 0, sizeof(uint64_t), &work->spin_ns)) return CUDA_ERROR_INVALID_VALUE;
      if (work->spin_ns > 3'600'000'000'000ull) return CUDA_ERROR_INVALID_VALUE;  // > 1 hour
      return CUDA_SUCCESS;
    case KernelKind::kFill:
      if (!arg(0, 0, sizeof(CUdeviceptr), &work->fill_ptr) ||
          !arg(1, 8, sizeof(size_t), &work->fill_bytes) ||
          !arg(2, 16, sizeof(uint32_t), &work->fill_value)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    case KernelKind::kNoop:
    case KernelKind::kFault:
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult Launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, CUstream h, void** params, void** extra, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      static_cast<uint64_t>(bx) * by * bz > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
  KernelWork work;
  if (CUresult r = DecodeKernel(f, params, extra, &work); r != CUDA_SUCCESS) return r;
  return SubmitKernel(lock, s, work);
}

// Gives pools back what they hold above their release threshold (the driver does this at
// synchronisation points).
void TrimPools(Runtime& rt);

CUresult WaitUntil(Lock& lock, uint64_t t, CUctx_st* ctx) {
  lock.unlock();
  if (t > MonotonicNs()) SleepUntilNs(t);
  lock.lock();
  TrimPools(Rt());
  if (Rt().contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return ctx->sticky;
}

// ---- Memory helpers
// ------------------------------------------------------------------------------
void* MapBacking(uint64_t bytes) {
  auto& cache = Rt().backing_cache;
  auto it = cache.find(bytes);
  if (it != cache.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    Rt().backing_cached_bytes -= bytes;
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

CUresult AllocDevice(CUctx_st* ctx, uint64_t size, uint64_t usable, AllocKind kind,
                     CUdeviceptr* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (1ull << 50)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t charged = RoundUp(size, kAllocGranularity);
  if (!State()->Reserve(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = MapBacking(charged);
  if (p == nullptr) {
    State()->Unreserve(ctx->device, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation a;
  a.size = usable;
  a.charged = charged;
  a.device = ctx->device;
  a.kind = kind;
  a.ctx = ctx;
  Rt().allocations[reinterpret_cast<uintptr_t>(p)] = a;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

void ReleaseBlock(int device, uintptr_t base, uint64_t size) {
  Runtime& rt = Rt();
  State()->Unreserve(device, size);  // the device gets its memory back whatever happens to the VA
  if (size <= tessera::sim::kBackingCacheMaxBlock &&
      rt.backing_cached_bytes + size <= tessera::sim::kBackingCacheMaxBytes) {
    rt.backing_cache[size].push_back(reinterpret_cast<void*>(base));
    rt.backing_cached_bytes += size;
    return;
  }
  munmap(reinterpret_cast<void*>(base), size);
}

void TrimPool(CUmemPoolHandle_st* pool, uint64_t keep) {
  // Release the largest free blocks first until the pool reserves no more than `keep`.
  while (pool->reserved > keep && !pool->free_blocks.empty()) {
    auto it = std::prev(pool->free_blocks.end());
    const uint64_t size = it->first;
    const uintptr_t base = it->second;
    pool->free_blocks.erase(it);
    pool->blocks.erase(base);
    pool->reserved -= size;
    ReleaseBlock(pool->device, base, size);
  }
}

void TrimPools(Runtime& rt) {
  for (CUmemPoolHandle_st* pool : rt.pools) TrimPool(pool, pool->release_threshold);
}

CUresult PoolAlloc(CUctx_st* ctx, CUmemPoolHandle_st* pool, uint64_t size, CUdeviceptr* out) {
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > (1ull << 50)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t need = RoundUp(size, kAllocGranularity);
  uintptr_t base = 0;
  uint64_t block = 0;
  auto it = pool->free_blocks.lower_bound(need);
  if (it != pool->free_blocks.end() && it->first <= 2 * need) {
    block = it->first;
    base = it->second;
    pool->free_blocks.erase(it);
  } else {
    if (!State()->Reserve(pool->device, need)) {
      TrimPool(pool, 0);  // give back cached blocks and try once more, as the driver does
      if (!State()->Reserve(pool->device, need)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void* p = MapBacking(need);
    if (p == nullptr) {
      State()->Unreserve(pool->device, need);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    base = reinterpret_cast<uintptr_t>(p);
    block = need;
    pool->blocks[base] = block;
    pool->reserved += block;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  }
  pool->used += block;
  pool->used_high = std::max(pool->used_high, pool->used);
  Allocation a;
  a.size = size;
  a.charged = block;
  a.device = pool->device;
  a.kind = AllocKind::kPool;
  a.ctx = ctx;
  a.pool = pool;
  Rt().allocations[base] = a;
  *out = static_cast<CUdeviceptr>(base);
  return CUDA_SUCCESS;
}

// Frees an allocation record (device memory goes back to the device, pool blocks to their pool).
void FreeAllocation(std::map<uintptr_t, Allocation>::iterator it) {
  Runtime& rt = Rt();
  const uintptr_t base = it->first;
  const Allocation a = it->second;
  rt.allocations.erase(it);
  if (a.kind == AllocKind::kPool && rt.pools.count(a.pool) != 0) {
    a.pool->used -= std::min(a.pool->used, a.charged);
    a.pool->free_blocks.emplace(a.charged, base);
    return;
  }
  ReleaseBlock(a.device, base, a.charged);
}

CUresult FreeDevice(CUdeviceptr dptr, bool pool_only) {
  Runtime& rt = Rt();
  if (dptr == 0) return CUDA_SUCCESS;
  auto it = rt.allocations.find(static_cast<uintptr_t>(dptr));
  if (it == rt.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (pool_only && it->second.kind != AllocKind::kPool && it->second.kind != AllocKind::kDevice) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FreeAllocation(it);
  return CUDA_SUCCESS;
}

CUmemPoolHandle_st* NewPool(Runtime& rt, int device, bool is_default) {
  auto* pool = new CUmemPoolHandle_st();
  pool->device = device;
  pool->is_default = is_default;
  rt.pools.insert(pool);
  return pool;
}

void EnsureDevicePools(Runtime& rt) {
  const int n = tessera::sim::kMaxDevices;  // GPUs and MIG device slots
  if (static_cast<int>(rt.default_pool.size()) == n) return;
  rt.default_pool.resize(n, nullptr);
  rt.current_pool.resize(n, nullptr);
  for (int d = 0; d < n; ++d) {
    if (rt.default_pool[d] == nullptr) rt.default_pool[d] = NewPool(rt, d, true);
    if (rt.current_pool[d] == nullptr) rt.current_pool[d] = rt.default_pool[d];
  }
}

// Destroys a context's streams and frees every allocation it made (the driver does the same).
void TeardownContext(Runtime& rt, CUctx_st* ctx) {
  for (auto it = rt.allocations.begin(); it != rt.allocations.end();) {
    auto next = std::next(it);
    if (it->second.ctx == ctx) FreeAllocation(it);
    it = next;
  }
  for (CUstream_st* s : ctx->streams) {
    rt.streams.erase(s);
    delete s;
  }
  ctx->streams.clear();
  for (auto it = tessera::sim::t_per_thread_stream.begin();
       it != tessera::sim::t_per_thread_stream.end();) {
    it = it->first == ctx ? tessera::sim::t_per_thread_stream.erase(it) : std::next(it);
  }
  auto& stack = tessera::sim::t_ctx_stack;
  stack.erase(std::remove(stack.begin(), stack.end(), ctx), stack.end());
}

uint64_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  uint64_t element = 0;
  switch (d.Format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      element = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      element = 2;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      element = 4;
      break;
    default:
      return 0;
  }
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return 0;
  if (d.Width == 0 || d.Width > (1u << 17) || d.Height > (1u << 16) || d.Depth > (1u << 14)) {
    return 0;
  }
  return static_cast<uint64_t>(d.Width) * std::max<uint64_t>(d.Height, 1) *
         std::max<uint64_t>(d.Depth, 1) * d.NumChannels * element;
}

CUresult CreateArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t bytes = ArrayBytes(desc);
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t charged = RoundUp(bytes, kAllocGranularity);
  if (!State()->Reserve(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* a = new CUarray_st();
  a->device = ctx->device;
  a->desc = desc;
  a->charged = charged;
  Rt().arrays.insert(a);
  *out = a;
  return CUDA_SUCCESS;
}

// Copies between host and device memory after the stream's earlier work, validating device
// ranges. Copies take no simulated device time (see runtime.h).
enum class Dir { kHtoD, kDtoH, kDtoD, kAny };

CUresult Copy(void* dst, const void* src, size_t n, Dir dir, CUstream h, bool async,
              bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Runtime& rt = Rt();
  const auto dptr = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  if ((dir == Dir::kHtoD || dir == Dir::kDtoD) && FindDeviceRange(rt, dptr(dst), n) < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((dir == Dir::kDtoH || dir == Dir::kDtoD) && FindDeviceRange(rt, dptr(src), n) < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* s = ResolveStream(rt, ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!async) {
    if (CUresult r = WaitUntil(lock, EarliestStart(s), ctx); r != CUDA_SUCCESS) return r;
  }
  std::memmove(dst, src, n);
  NoteFinished(s, EarliestStart(s));
  return CUDA_SUCCESS;
}

CUresult Memset(CUdeviceptr dst, uint32_t value, size_t element, size_t count, CUstream h,
                bool async, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (count == 0) return CUDA_SUCCESS;
  if (count > (1ull << 50) / element) return CUDA_ERROR_INVALID_VALUE;
  if (FindDeviceRange(Rt(), dst, count * element) < 0) return CUDA_ERROR_INVALID_VALUE;
  if (element == 4 && dst % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!async) {
    if (CUresult r = WaitUntil(lock, EarliestStart(s), ctx); r != CUDA_SUCCESS) return r;
  }
  auto* p = reinterpret_cast<unsigned char*>(dst);
  if (element == 1) {
    std::memset(p, static_cast<int>(value & 0xff), count);
  } else {
    for (size_t i = 0; i < count; ++i) std::memcpy(p + 4 * i, &value, 4);
  }
  return CUDA_SUCCESS;
}

CUresult StreamSync(CUstream h, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t t = s->legacy ? ContextReady(ctx) : std::max(s->ready_ns, EarliestStart(s));
  return WaitUntil(lock, t, s->ctx);
}

CUresult StreamQuery(CUstream h, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return s->ready_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult StreamWaitEvent(CUstream h, CUevent e, unsigned flags, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->recorded) s->ready_ns = std::max(s->ready_ns, e->time_ns);
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent e, CUstream h, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  e->ctx = s->ctx;
  e->recorded = true;
  e->time_ns = s->legacy ? std::max(MonotonicNs(), ContextReady(s->ctx)) : EarliestStart(s);
  return CUDA_SUCCESS;
}

CUresult BeginCapture(CUstream h, CUstreamCaptureMode mode, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->capture_graph = new CUgraph_st();
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream h, CUgraph* out, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  Rt().graphs.insert(s->capture_graph);
  *out = s->capture_graph;
  s->capture_graph = nullptr;
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult IsCapturing(CUstream h, CUstreamCaptureStatus* status, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *status = s->capture;
  return CUDA_SUCCESS;
}

CUresult GraphLaunch(CUgraphExec exec, CUstream h, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (Rt().execs.count(exec) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<KernelWork> nodes = exec->nodes;  // the lock may drop between nodes
  for (const KernelWork& w : nodes) {
    if (CUresult r = SubmitKernel(lock, s, w); r != CUDA_SUCCESS) return r;
    if (Rt().contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  return CUDA_SUCCESS;
}

CUresult GraphInstantiate(CUgraphExec* out, CUgraph g) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().graphs.count(g) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* exec = new CUgraphExec_st();
  exec->nodes = g->nodes;
  Rt().execs.insert(exec);
  *out = exec;
  return CUDA_SUCCESS;
}

CUresult CtxCreate(CUcontext* out, unsigned flags, CUdevice dev) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  if (flags > 0x1f) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = NewContext(Rt(), dev, flags, false);
  tessera::sim::t_ctx_stack.push_back(ctx);
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult CtxDestroy(CUcontext ctx) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  Runtime& rt = Rt();
  if (ctx == nullptr || rt.contexts.count(ctx) == 0 || ctx->primary) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  TeardownContext(rt, ctx);
  rt.contexts.erase(ctx);
  delete ctx->legacy;
  delete ctx;
  return CUDA_SUCCESS;
}

CUresult PrimaryRelease(CUdevice dev, bool reset) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  Runtime& rt = Rt();
  if (static_cast<int>(rt.primary.size()) <= dev || rt.primary[dev] == nullptr) {
    return reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  CUctx_st* ctx = rt.primary[dev];
  if (!reset) {
    if (ctx->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--ctx->primary_refs > 0) return CUDA_SUCCESS;
  }
  // Last release or reset: the context's resources go away and its error state is cleared.
  TeardownContext(rt, ctx);
  ctx->primary_refs = reset ? ctx->primary_refs : 0;
  ctx->sticky = CUDA_SUCCESS;
  ctx->legacy->ready_ns = 0;
  ctx->blocking_ready_ns = 0;
  return CUDA_SUCCESS;
}

CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State()->ReapDead();
  const tessera::sim::SimDevice& d = State()->device(ctx->device);
  const uint64_t used = d.used_bytes.load();
  *total_bytes = d.total_bytes;
  *free_bytes = used >= d.total_bytes ? 0 : d.total_bytes - used;
  return CUDA_SUCCESS;
}

const char* ErrorName(CUresult e) {
  switch (e) {
#define SIM_ERR(x) \
  case x:          \
    return #x;
    SIM_ERR(CUDA_SUCCESS)
    SIM_ERR(CUDA_ERROR_INVALID_VALUE)
    SIM_ERR(CUDA_ERROR_OUT_OF_MEMORY)
    SIM_ERR(CUDA_ERROR_NOT_INITIALIZED)
    SIM_ERR(CUDA_ERROR_DEINITIALIZED)
    SIM_ERR(CUDA_ERROR_STUB_LIBRARY)
    SIM_ERR(CUDA_ERROR_NO_DEVICE)
    SIM_ERR(CUDA_ERROR_INVALID_DEVICE)
    SIM_ERR(CUDA_ERROR_INVALID_IMAGE)
    SIM_ERR(CUDA_ERROR_INVALID_CONTEXT)
    SIM_ERR(CUDA_ERROR_ALREADY_MAPPED)
    SIM_ERR(CUDA_ERROR_NOT_MAPPED)
    SIM_ERR(CUDA_ERROR_FILE_NOT_FOUND)
    SIM_ERR(CUDA_ERROR_OPERATING_SYSTEM)
    SIM_ERR(CUDA_ERROR_INVALID_HANDLE)
    SIM_ERR(CUDA_ERROR_ILLEGAL_STATE)
    SIM_ERR(CUDA_ERROR_NOT_FOUND)
    SIM_ERR(CUDA_ERROR_NOT_READY)
    SIM_ERR(CUDA_ERROR_ILLEGAL_ADDRESS)
    SIM_ERR(CUDA_ERROR_LAUNCH_FAILED)
    SIM_ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE)
    SIM_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    SIM_ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    SIM_ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    SIM_ERR(CUDA_ERROR_NOT_PERMITTED)
    SIM_ERR(CUDA_ERROR_NOT_SUPPORTED)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    SIM_ERR(CUDA_ERROR_TIMEOUT)
    SIM_ERR(CUDA_ERROR_UNKNOWN)
#undef SIM_ERR
  }
  return nullptr;
}

}  // namespace

// ================================== The C ABI
// =====================================================
extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = tessera::sim::EnsureAttached(); r != CUDA_SUCCESS) return r;
  Lock lock(Rt().mu);
  Rt().initialized = true;
  Rt().visible = VisibleDevices();
  Rt().primary.resize(tessera::sim::kMaxDevices, nullptr);
  EnsureDevicePools(Rt());
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = tessera::sim::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = ErrorName(error);
  return *str == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *str = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "invalid argument";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "out of memory";
      break;
    case CUDA_ERROR_NOT_INITIALIZED:
      *str = "initialization error";
      break;
    case CUDA_ERROR_INVALID_CONTEXT:
      *str = "invalid device context";
      break;
    case CUDA_ERROR_INVALID_HANDLE:
      *str = "invalid resource handle";
      break;
    case CUDA_ERROR_NOT_READY:
      *str = "device not ready";
      break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *str = "an illegal memory access was encountered";
      break;
    default:
      *str = ErrorName(error);
      break;
  }
  return *str == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// ---- Devices ----------------------------------------------------------------------------------
CUresult cuDeviceGetCount(int* count) {
  SIM_REQUIRE_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(Rt().visible.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  SIM_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIM_REQUIRE_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  std::snprintf(name, static_cast<size_t>(len), "%s", State()->device(dev).name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIM_REQUIRE_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  const char* text = State()->device(dev).uuid + 4;  // skip "GPU-" (or "MIG-")
  int n = 0;
  for (const char* p = text; *p != '\0' && n < 16; ++p) {
    if (*p == '-') continue;
    char hex[3] = {p[0], p[1], '\0'};
    uuid->bytes[n++] = static_cast<char>(std::strtoul(hex, nullptr, 16));
    ++p;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIM_REQUIRE_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  *bytes = State()->device(dev).total_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = cuDeviceTotalMem_v2(&total, dev); r != CUDA_SUCCESS) return r;
  *bytes = static_cast<unsigned int>(std::min<size_t>(total, 0xffffffffu));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  SIM_REQUIRE_INIT();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // The model's answer for every attribute of CUDA 13.0's enum (device_models.cc); anything else
  // is CUDA_ERROR_INVALID_VALUE, as the driver answers it.
  int value = 0;
  if (!tessera::sim::DeviceAttribute(State()->Facts(Phys(dev)), static_cast<int>(attrib), &value)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pi = value;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  SIM_REQUIRE_INIT();
  if (bus_id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  std::snprintf(bus_id, static_cast<size_t>(len), "00000000:%02X:00.0", BusOf(dev));
  return CUDA_SUCCESS;
}

// ---- Contexts ---------------------------------------------------------------------------------
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  Runtime& rt = Rt();
  if (rt.primary[dev] == nullptr) rt.primary[dev] = NewContext(rt, dev, 0, true);
  ++rt.primary[dev]->primary_refs;
  MarkContextOnDevice(dev);
  *pctx = rt.primary[dev];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return PrimaryRelease(dev, false); }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return PrimaryRelease(dev, false); }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return PrimaryRelease(dev, true); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return PrimaryRelease(dev, true); }

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  CUctx_st* ctx = Rt().primary[dev];
  *flags = ctx != nullptr ? ctx->flags : 0;
  *active = ctx != nullptr && ctx->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  if (flags > 0x1f) return CUDA_ERROR_INVALID_VALUE;
  Runtime& rt = Rt();
  if (rt.primary[dev] == nullptr) rt.primary[dev] = NewContext(rt, dev, flags, true);
  rt.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreate(pctx, flags, dev);
}
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreate(pctx, flags, dev);
}
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int num_params,
                        unsigned int flags, CUdevice dev) {
  if (num_params < 0 || (num_params > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CtxCreate(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                        CUdevice dev) {
  return CtxCreate(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) { return CtxDestroy(ctx); }
CUresult cuCtxDestroy(CUcontext ctx) { return CtxDestroy(ctx); }

CUresult cuCtxSetCurrent(CUcontext ctx) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  auto& stack = tessera::sim::t_ctx_stack;
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  SIM_REQUIRE_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = CurrentCtx();
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  tessera::sim::t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  SIM_REQUIRE_INIT();
  auto& stack = tessera::sim::t_ctx_stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = Ordinal(ctx->device);
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice* device) { return cuCtxGetDevice_v2(device, nullptr); }

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (ctx == nullptr) ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
  return WaitUntil(lock, ContextReady(ctx), ctx);
}
CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(nullptr); }

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIM_REQUIRE_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

// ---- Memory -----------------------------------------------------------------------------------
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  return MemGetInfo(free_bytes, total_bytes);
}

CUresult cuMemGetInfo(unsigned int* free_bytes, unsigned int* total_bytes) {
  size_t f = 0, t = 0;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = MemGetInfo(&f, &t); r != CUDA_SUCCESS) return r;
  *free_bytes = static_cast<unsigned int>(std::min<size_t>(f, 0xffffffffu));
  *total_bytes = static_cast<unsigned int>(std::min<size_t>(t, 0xffffffffu));
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  return AllocDevice(ctx, bytesize, bytesize, AllocKind::kDevice, dptr);
}

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  // The pre-3.2 entry point returns a 32-bit pointer; simgpu's addresses never fit in one.
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  return FreeDevice(dptr, false);
}

CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  return FreeDevice(dptr, false);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element_size) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (pitch == nullptr || width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (width > (1ull << 40) || height > (1ull << 40)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t p = RoundUp(width, tessera::sim::kPitchAlignment);
  if (height > (1ull << 50) / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = AllocDevice(ctx, p * height, p * height, AllocKind::kPitch, dptr);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return AllocDevice(ctx, bytesize, bytesize, AllocKind::kManaged, dptr);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  auto it = Rt().allocations.upper_bound(static_cast<uintptr_t>(dptr));
  if (it == Rt().allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.size) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = it->first;
  if (psize != nullptr) *psize = it->second.size;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (pp == nullptr || bytesize == 0 || flags > 0x7) return CUDA_ERROR_INVALID_VALUE;
  void* p = MapBacking(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Rt().host[p] = bytesize;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

CUresult cuMemFreeHost(void* p) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  auto it = Rt().host.find(p);
  if (it == Rt().host.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second);
  Rt().host.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  SIM_REQUIRE_INIT();
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
  SIM_REQUIRE_INIT();
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;  // host memory is already "pinned" in the simulation
}

CUresult cuMemHostUnregister(void* p) {
  SIM_REQUIRE_INIT();
  return p == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// ---- Copies and sets --------------------------------------------------------------------------
#define SIM_PTR(x) reinterpret_cast<void*>(x)
#define SIM_CPTR(x) reinterpret_cast<const void*>(x)

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kAny, nullptr, false, false);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kAny, nullptr, false, true);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kAny, s, true, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kAny, s, true, true);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(SIM_PTR(dst), src, n, Dir::kHtoD, nullptr, false, false);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return Copy(SIM_PTR(dst), src, n, Dir::kHtoD, nullptr, false, true);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return Copy(dst, SIM_CPTR(src), n, Dir::kDtoH, nullptr, false, false);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return Copy(dst, SIM_CPTR(src), n, Dir::kDtoH, nullptr, false, true);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, nullptr, false, false);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, nullptr, false, true);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), src, n, Dir::kHtoD, s, true, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), src, n, Dir::kHtoD, s, true, true);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(dst, SIM_CPTR(src), n, Dir::kDtoH, s, true, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(dst, SIM_CPTR(src), n, Dir::kDtoH, s, true, true);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, s, true, false);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return Copy(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, s, true, true);
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n) {
  return Memset(dst, uc, 1, n, nullptr, false, false);
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char uc, size_t n) {
  return Memset(dst, uc, 1, n, nullptr, false, true);
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int ui, size_t n) {
  return Memset(dst, ui, 4, n, nullptr, false, false);
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int ui, size_t n) {
  return Memset(dst, ui, 4, n, nullptr, false, true);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s) {
  return Memset(dst, uc, 1, n, s, true, false);
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s) {
  return Memset(dst, uc, 1, n, s, true, true);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s) {
  return Memset(dst, ui, 4, n, s, true, false);
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s) {
  return Memset(dst, ui, 4, n, s, true, true);
}

// ---- Stream-ordered allocation and pools
// ----------------------------------------------------------
static CUresult AllocAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream h,
                           bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (ResolveStream(Rt(), ctx, h, per_thread) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (pool == nullptr) {
    pool = Rt().current_pool[ctx->device];
  } else if (Rt().pools.count(pool) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return PoolAlloc(ctx, pool, size, dptr);
}

static CUresult FreeAsync(CUdeviceptr dptr, CUstream h, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (ResolveStream(Rt(), ctx, h, per_thread) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return FreeDevice(dptr, true);
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, nullptr, s, false);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, nullptr, s, true);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, pool, s, false);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                      CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, pool, s, true);
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return FreeAsync(dptr, s, false); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return FreeAsync(dptr, s, true); }

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (pool == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!ValidDevice(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = NewPool(Rt(), Phys(props->location.id), false);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  Runtime& rt = Rt();
  if (rt.pools.count(pool) == 0 || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Outstanding allocations keep their memory until freed; the cached blocks go now.
  for (auto it = rt.allocations.begin(); it != rt.allocations.end(); ++it) {
    if (it->second.pool == pool) {
      it->second.kind = AllocKind::kDevice;
      it->second.pool = nullptr;
      pool->blocks.erase(it->first);
    }
  }
  TrimPool(pool, 0);
  for (auto& [base, size] : pool->blocks) ReleaseBlock(pool->device, base, size);
  for (auto& current : rt.current_pool) {
    if (current == pool) current = rt.default_pool[pool->device];
  }
  rt.pools.erase(pool);
  delete pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().pools.count(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
  TrimPool(pool, keep);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().pools.count(pool) == 0 || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      pool->reserved_high = pool->reserved;  // only resetting (to 0) is allowed; it resets
      return *static_cast<cuuint64_t*>(value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      pool->used_high = pool->used;
      return *static_cast<cuuint64_t*>(value) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().pools.count(pool) == 0 || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = pool->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = pool->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *out = pool->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = pool->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *out = pool->used_high;
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  *pool = Rt().default_pool[dev];
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  *pool = Rt().current_pool[dev];
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  if (Rt().pools.count(pool) == 0 || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
  Rt().current_pool[dev] = pool;
  return CUDA_SUCCESS;
}

// ---- Virtual memory management ----------------------------------------------------------------
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  SIM_REQUIRE_INIT();
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kAllocGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 ||
      size % kAllocGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = prop->location.id;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = Phys(dev);
  if (!State()->Reserve(dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    State()->Unreserve(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Runtime& rt = Rt();
  const CUmemGenericAllocationHandle h = rt.next_vmm++;
  tessera::sim::VmmHandle v;
  v.device = dev;
  v.size = size;
  v.memfd = fd;
  rt.vmm[h] = v;
  *handle = h;
  return CUDA_SUCCESS;
}

static void MaybeFreeVmm(Runtime& rt, CUmemGenericAllocationHandle h) {
  auto it = rt.vmm.find(h);
  if (it == rt.vmm.end() || !it->second.released || it->second.mappings > 0) return;
  close(it->second.memfd);
  State()->Unreserve(it->second.device, it->second.size);
  rt.vmm.erase(it);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  auto it = Rt().vmm.find(handle);
  if (it == Rt().vmm.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;  // the memory stays until its last mapping goes, as in the driver
  MaybeFreeVmm(Rt(), handle);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (ptr == nullptr || size == 0 || size % kAllocGranularity != 0 ||
      (alignment & (alignment - 1)) != 0 || size > (1ull << 46)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t align = std::max<uint64_t>(alignment, kAllocGranularity);
  void* raw = mmap(reinterpret_cast<void*>(addr), size + align, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t base = RoundUp(reinterpret_cast<uintptr_t>(raw), align);
  // Trim the alignment slack on both sides so the reservation is exactly [base, base + size).
  if (base > reinterpret_cast<uintptr_t>(raw)) munmap(raw, base - reinterpret_cast<uintptr_t>(raw));
  const uintptr_t tail = base + size;
  const uintptr_t raw_end = reinterpret_cast<uintptr_t>(raw) + size + align;
  if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
  Rt().reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  auto it = Rt().reservations.find(static_cast<uintptr_t>(ptr));
  if (it == Rt().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  Rt().reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  Runtime& rt = Rt();
  auto h = rt.vmm.find(handle);
  if (h == rt.vmm.end() || h->second.released || flags != 0 || size == 0 ||
      offset + size > h->second.size || offset % kAllocGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto r = rt.reservations.upper_bound(static_cast<uintptr_t>(ptr));
  if (r == rt.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr < r->first || ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto m = rt.mappings.lower_bound(static_cast<uintptr_t>(ptr));
  if ((m != rt.mappings.end() && m->first < ptr + size) ||
      (m != rt.mappings.begin() && std::prev(m)->first + std::prev(m)->second.size > ptr)) {
    return CUDA_ERROR_ALREADY_MAPPED;
  }
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 h->second.memfd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  rt.mappings[static_cast<uintptr_t>(ptr)] = {size, handle};
  ++h->second.mappings;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  Runtime& rt = Rt();
  auto m = rt.mappings.find(static_cast<uintptr_t>(ptr));
  if (m == rt.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  // Unmap every mapping inside [ptr, ptr + size), back to inaccessible reserved space.
  const uintptr_t end = ptr + size;
  while (m != rt.mappings.end() && m->first < end) {
    const uintptr_t base = m->first;
    const tessera::sim::VmmMapping mapping = m->second;
    mmap(reinterpret_cast<void*>(base), mapping.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    m = rt.mappings.erase(m);
    auto h = rt.vmm.find(mapping.handle);
    if (h != rt.vmm.end()) {
      --h->second.mappings;
      MaybeFreeVmm(rt, mapping.handle);
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!ValidDevice(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
      prot = PROT_READ;
  }
  // Every byte of the range must be mapped.
  Runtime& rt = Rt();
  auto m = rt.mappings.find(static_cast<uintptr_t>(ptr));
  uintptr_t covered = ptr;
  while (m != rt.mappings.end() && m->first == covered && covered < ptr + size) {
    covered += m->second.size;
    ++m;
  }
  if (covered < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// ---- Arrays -----------------------------------------------------------------------------------
CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = d->Width;
  desc.Height = d->Height;
  desc.Format = d->Format;
  desc.NumChannels = d->NumChannels;
  return CreateArray(out, desc);
}

CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(out, *d);
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray a) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().arrays.count(a) == 0) return CUDA_ERROR_INVALID_HANDLE;
  out->Width = a->desc.Width;
  out->Height = a->desc.Height;
  out->Format = a->desc.Format;
  out->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray a) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().arrays.count(a) == 0) return CUDA_ERROR_INVALID_HANDLE;
  State()->Unreserve(a->device, a->charged);
  Rt().arrays.erase(a);
  delete a;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                unsigned int levels) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr || d == nullptr || levels == 0 || levels > 32) return CUDA_ERROR_INVALID_VALUE;
  uint64_t total = 0;
  CUDA_ARRAY3D_DESCRIPTOR level = *d;
  for (unsigned i = 0; i < levels; ++i) {
    const uint64_t bytes = ArrayBytes(level);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    total += bytes;
    level.Width = std::max<size_t>(1, level.Width / 2);
    level.Height = level.Height == 0 ? 0 : std::max<size_t>(1, level.Height / 2);
    level.Depth = level.Depth == 0 ? 0 : std::max<size_t>(1, level.Depth / 2);
  }
  const uint64_t charged = RoundUp(total, kAllocGranularity);
  if (!State()->Reserve(ctx->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* m = new CUmipmappedArray_st();
  m->device = ctx->device;
  m->charged = charged;
  Rt().mipmapped.insert(m);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().mipmapped.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  State()->Unreserve(m->device, m->charged);
  Rt().mipmapped.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

// ---- Modules and launches ---------------------------------------------------------------------
static CUresult LoadModule(CUmodule* out, const void* image) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new CUmod_st();
  Rt().modules.insert(m);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule* out, const char* fname) { return LoadModule(out, fname); }
CUresult cuModuleLoadData(CUmodule* out, const void* image) { return LoadModule(out, image); }
CUresult cuModuleLoadDataEx(CUmodule* out, const void* image, unsigned int, int*, void**) {
  return LoadModule(out, image);
}

CUresult cuModuleUnload(CUmodule m) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Rt().modules.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strcmp(name, "spin") == 0)
    *out = &m->spin;
  else if (std::strcmp(name, "noop") == 0)
    *out = &m->noop;
  else if (std::strcmp(name, "fill") == 0)
    *out = &m->fill;
  else if (std::strcmp(name, "fault") == 0)
    *out = &m->fault;
  else
    return CUDA_ERROR_NOT_FOUND;
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                        void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, s, params, extra, false);
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                             void** extra) {
  return Launch(f, gx, gy, gz, bx, by, bz, s, params, extra, true);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                c->hStream, params, extra, false);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                c->hStream, params, extra, true);
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                   unsigned by, unsigned bz, unsigned smem, CUstream s,
                                   void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, s, params, nullptr, false);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                        CUstream s, void** params) {
  return Launch(f, gx, gy, gz, bx, by, bz, s, params, nullptr, true);
}

// ---- Streams ----------------------------------------------------------------------------------
CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr || flags > CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = NewStream(ctx, flags, false, false);
  ctx->streams.insert(s);
  Rt().streams.insert(s);
  *out = s;
  return CUDA_SUCCESS;
}

CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  return cuStreamCreate(out, flags);  // priorities are accepted and not modelled
}

CUresult cuStreamDestroy_v2(CUstream s) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().streams.count(s) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Rt().streams.erase(s);
  s->ctx->streams.erase(s);
  delete s->capture_graph;
  delete s;
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }

CUresult cuStreamSynchronize(CUstream s) { return StreamSync(s, false); }
CUresult cuStreamSynchronize_ptsz(CUstream s) { return StreamSync(s, true); }
CUresult cuStreamQuery(CUstream s) { return StreamQuery(s, false); }
CUresult cuStreamQuery_ptsz(CUstream s) { return StreamQuery(s, true); }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, false);
}
CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) {
  return StreamWaitEvent(s, e, flags, true);
}

static CUresult StreamGetCtx(CUstream h, CUcontext* out, bool per_thread) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = ResolveStream(Rt(), ctx, h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = s->ctx;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx(CUstream s, CUcontext* out) { return StreamGetCtx(s, out, false); }
CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext* out) { return StreamGetCtx(s, out, true); }

CUresult cuStreamBeginCapture(CUstream s) {
  return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture(s, mode, false);
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture(s, mode, true);
}
// The thread's capture interaction mode: kept and exchanged; simgpu enforces no capture rules.
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  static thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph* g) { return EndCapture(s, g, false); }
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return EndCapture(s, g, true); }
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) {
  return IsCapturing(s, st, false);
}
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* st) {
  return IsCapturing(s, st, true);
}

// ---- Events -----------------------------------------------------------------------------------
CUresult cuEventCreate(CUevent* out, unsigned int flags) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_CTX(ctx);
  if (out == nullptr || flags > 0x7) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUevent_st();
  e->ctx = ctx;
  e->flags = flags;
  Rt().events.insert(e);
  *out = e;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Rt().events.erase(e);
  delete e;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

CUresult cuEventRecord(CUevent e, CUstream s) { return EventRecord(e, s, false); }
CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return EventRecord(e, s, true); }
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  return EventRecord(e, s, false);
}
CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags) {
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  return EventRecord(e, s, true);
}

CUresult cuEventQuery(CUevent e) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (e->recorded && e->ctx != nullptr && e->ctx->sticky != CUDA_SUCCESS) return e->ctx->sticky;
  return !e->recorded || e->time_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->recorded) return CUDA_SUCCESS;
  return WaitUntil(lock, e->time_ns, e->ctx);
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().events.count(start) == 0 || Rt().events.count(end) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t now = MonotonicNs();
  if (start->time_ns > now || end->time_ns > now) return CUDA_ERROR_NOT_READY;
  const double delta = static_cast<double>(end->time_ns) - static_cast<double>(start->time_ns);
  *ms = static_cast<float>(delta / 1e6);
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime(ms, start, end);
}

// ---- Graphs -----------------------------------------------------------------------------------
CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode*, char*, size_t) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode*, char*, size_t) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return GraphLaunch(exec, s, false); }
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return GraphLaunch(exec, s, true); }

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().execs.count(exec) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Rt().execs.erase(exec);
  delete exec;
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g) {
  Lock lock(Rt().mu);
  SIM_REQUIRE_INIT();
  if (Rt().graphs.count(g) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Rt().graphs.erase(g);
  delete g;
  return CUDA_SUCCESS;
}

}  // extern "C"
