// The libcuda.so.1 shim's wrappers: every hooked entry point of cuda_hooks.def. Each wrapper
// forwards to the real driver through the trampoline table and, when the tenant is enforcing,
// charges device memory in the node's ledger: reserve (one CAS) before the driver call, record the
// pointer in a lock-free map after it, roll back if the driver fails; a call refused because the
// ledger refused its reservation adds 1 to the container's oom_refusals. Frees are always
// forwarded, tracked or not. cuGetProcAddress(_v2) calls the real function and maps the returned
// pointer to the wrapper of that exact variant (pointer identity, never a name guess).
//
// Fast path rules: no syscalls, locks, getenv, logging or allocation in a wrapper while enforcing,
// except the pool paths, which read pool attributes through the driver (documented).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "driver/cuda_api.h"
#include "gate/compute_gate.h"
#include "shim/handle_map.h"
#include "shim/real_library.h"
#include "shim/tenant.h"

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

// ---- The trampoline table
// ------------------------------------------------------------------------
namespace {
enum CudaSymbol : size_t {
#define TESSERA_SYMBOL(name, index) k_##name = index,
#include "cuda_symbols.inc"
#undef TESSERA_SYMBOL
  kCudaSymbolCount = TESSERA_cuda_SYMBOL_COUNT
};
const char* const kCudaNames[] = {
#define TESSERA_SYMBOL(name, index) #name,
#include "cuda_symbols.inc"
#undef TESSERA_SYMBOL
};
const char* const kCudaSearchPaths[] = {
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",   "/usr/lib/wsl/lib/libcuda.so.1",
    "/usr/local/cuda/compat/libcuda.so.1",    nullptr};

CUresult MissingCudaSymbol() { return CUDA_ERROR_NOT_SUPPORTED; }
}  // namespace

extern "C" {
// One entry per symbol plus a sentinel; read by the generated trampolines.
__attribute__((visibility("hidden"))) void* tessera_cuda_real[kCudaSymbolCount + 1];
__attribute__((visibility("hidden"))) void tessera_cuda_resolve();
}

namespace {

tessera::shim::RealLibrary g_real{"libcuda.so.1",
                                  "TESSERA_REAL_LIBCUDA",
                                  kCudaSearchPaths,
                                  kCudaNames,
                                  kCudaSymbolCount,
                                  tessera_cuda_real,
                                  reinterpret_cast<void*>(&MissingCudaSymbol),
                                  reinterpret_cast<const void*>(&tessera_cuda_resolve)};
std::string g_real_error;
std::atomic<bool> g_real_ok{false};

void BuildProcAddressMap();

}  // namespace

void tessera_cuda_resolve() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_real_ok.store(tessera::shim::ResolveAll(g_real, &g_real_error));
    BuildProcAddressMap();
  });
}

namespace {

using tessera::shim::Charge;
using tessera::shim::HandleMap;
using tessera::shim::Mode;
using tessera::shim::Tenant;

template <size_t Index, typename Fn>
Fn Real() {
  void* p = __atomic_load_n(&tessera_cuda_real[Index], __ATOMIC_ACQUIRE);
  if (__builtin_expect(p == nullptr, 0)) {
    tessera_cuda_resolve();
    p = tessera_cuda_real[Index];
  }
  return reinterpret_cast<Fn>(p);
}
#define REAL(name) (Real<k_##name, decltype(&::name)>())

constexpr uint64_t kGranularity = 2ull << 20;  // what the driver rounds device allocations to
uint64_t RoundUp(uint64_t n) { return (n + kGranularity - 1) / kGranularity * kGranularity; }

HandleMap g_pointers;                        // CUdeviceptr -> charge (plain, pitch, managed)
HandleMap g_handles;                         // CUmemGenericAllocationHandle -> charge (VMM)
HandleMap g_arrays;                          // CUarray / CUmipmappedArray -> charge
std::atomic<uint32_t> g_context_charged{0};  // bit d: this process paid a context on device d

bool Enforcing() {
  auto& t = Tenant();
  if (__builtin_expect(t.mode.load(std::memory_order_acquire) != Mode::kEnforcing, 0)) {
    return false;
  }
  return tessera::shim::EnsureRegistered();
}

// The ledger index of the calling thread's current context's device, or -1.
int CurrentDevice() {
  CUdevice dev = -1;
  if (REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) return -1;
  return tessera::shim::LedgerDevice(dev);
}

bool Reserve(int device, uint64_t bytes) {
  auto& t = Tenant();
  if (device < 0 || device >= t.ledger->device_count()) return true;  // not ours to account
  return t.ledger->Reserve(t.process, device, bytes);
}

// The answer to an allocation call whose reservation the ledger refused (the container's limit, or
// a blocked container): counts the call once in the container's oom_refusals, which tesserad
// exports, and returns CUDA_ERROR_OUT_OF_MEMORY. Call it once per refused call, after any retry.
CUresult RefusedAtLimit() {
  auto& t = Tenant();
  t.ledger->counters().oom_refusals.fetch_add(1, std::memory_order_relaxed);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void Unreserve(int device, uint64_t bytes) {
  auto& t = Tenant();
  if (device < 0 || device >= t.ledger->device_count()) return;
  t.ledger->Release(t.process, device, bytes);
}

// Brings every pool's charge to what it reserves now (pools give memory back at synchronisation
// points on their own). Returns true if any charge went down.
bool ResyncPools();

// Reserve, call, record; roll back on failure. At the cap, pools that shrank since they were last
// looked at are resynchronised and the reservation retried once.
template <typename Call>
CUresult Charged(HandleMap& map, int device, uint64_t bytes, uint64_t* key, Call call) {
  if (!Reserve(device, bytes) && !(ResyncPools() && Reserve(device, bytes))) {
    return RefusedAtLimit();
  }
  const CUresult r = call();
  if (r != CUDA_SUCCESS) {
    Unreserve(device, bytes);
    return r;
  }
  if (!map.Insert(*key, Charge{static_cast<uint32_t>(device), bytes})) {
    Unreserve(device, bytes);  // cannot track it: do not charge what we could never release
  }
  return r;
}

void Uncharge(HandleMap& map, uint64_t key) {
  Charge c;
  if (map.Erase(key, &c)) Unreserve(static_cast<int>(c.device), c.bytes);
}

// ---- Stream-ordered pools: charge what each pool reserves ---------------------------------------
struct PoolCharge {
  int device = -1;
  uint64_t charged = 0;
};
std::mutex g_pool_mu;
std::unordered_map<CUmemoryPool, PoolCharge> g_pools;

uint64_t PoolReserved(CUmemoryPool pool) {
  cuuint64_t v = 0;
  if (REAL(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS) {
    return 0;
  }
  return v;
}

// Brings the pool's charge to what it reserves now. Returns false if growing it was refused.
bool SyncPool(CUmemoryPool pool, int device) {
  const uint64_t reserved = PoolReserved(pool);
  PoolCharge& pc = g_pools[pool];
  pc.device = device;
  if (reserved > pc.charged) {
    if (!Reserve(device, reserved - pc.charged)) return false;
  } else if (reserved < pc.charged) {
    Unreserve(device, pc.charged - reserved);
  }
  pc.charged = reserved;
  return true;
}

bool ResyncPools() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  bool shrank = false;
  for (auto& [pool, charge] : g_pools) {
    const uint64_t before = charge.charged;
    SyncPool(pool, charge.device);
    shrank = shrank || charge.charged < before;
  }
  return shrank;
}

CUmemoryPool PoolOf(CUmemoryPool pool) {
  if (pool != nullptr) return pool;
  CUdevice ordinal = -1;
  CUmemoryPool current = nullptr;
  if (REAL(cuCtxGetDevice)(&ordinal) == CUDA_SUCCESS) REAL(cuDeviceGetMemPool)(&current, ordinal);
  return current;
}

template <typename Alloc>
CUresult PoolAlloc(CUmemoryPool explicit_pool, size_t size, Alloc alloc) {
  const int device = CurrentDevice();
  if (device < 0) return alloc();
  std::lock_guard<std::mutex> lock(g_pool_mu);
  CUmemoryPool pool = PoolOf(explicit_pool);
  if (pool == nullptr) return alloc();
  // Admission: the pool may grow by up to the rounded request.
  const uint64_t headroom = RoundUp(size);
  if (!Reserve(device, headroom)) {
    // At the cap: give cached blocks back to the device and try once more.
    cuuint64_t used = 0;
    REAL(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
    REAL(cuMemPoolTrimTo)(pool, used);
    SyncPool(pool, device);
    if (!Reserve(device, headroom)) return RefusedAtLimit();
  }
  const CUresult r = alloc();
  Unreserve(device, headroom);
  if (!SyncPool(pool, device)) {
    // The pool grew past the cap (it reserves more than it hands out): undo the allocation.
    return RefusedAtLimit();
  }
  return r;
}

// ---- cuGetProcAddress: real pointer -> wrapper of the same variant
// ---------------------------------
std::unordered_map<void*, void*>* g_wrapper_of = nullptr;

}  // namespace

// ================================ Exported wrappers
// ================================================
namespace {
// Starts the compute gate on this process's (new) registration, with the real driver's entry
// points: the gate's own event calls must never pass through these wrappers.
void StartComputeGate() {
  tessera::gate::GateDriver d;
  d.event_create = REAL(cuEventCreate);
  d.event_destroy = REAL(cuEventDestroy_v2);
  d.event_record = REAL(cuEventRecord);
  d.event_query = REAL(cuEventQuery);
  d.event_synchronize = REAL(cuEventSynchronize);
  d.event_elapsed = REAL(cuEventElapsedTime);
  d.ctx_get_current = REAL(cuCtxGetCurrent);
  d.ctx_set_current = REAL(cuCtxSetCurrent);
  d.ctx_get_device = REAL(cuCtxGetDevice);
  d.exchange_capture_mode = REAL(cuThreadExchangeStreamCaptureMode);
  d.stream_is_capturing = REAL(cuStreamIsCapturing);
  d.stream_is_capturing_ptsz = REAL(cuStreamIsCapturing_ptsz);
  auto& t = Tenant();
  tessera::gate::GateLedger segments;
  segments.node = t.ledger->layout();
  segments.own = &t.ledger->segment();
  segments.exchange = &t.ledger->exchange();
  tessera::gate::StartGate(d, segments, t.container, t.process, t.physical, t.visible_count);
}
}  // namespace

TESSERA_EXPORT CUresult cuInit(unsigned int flags) {
  tessera_cuda_resolve();
  if (!g_real_ok.load()) {
    std::fprintf(stderr, "tessera: %s\n", g_real_error.c_str());
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  Tenant().on_registered = StartComputeGate;
  if (CUresult r = tessera::shim::InitialiseTenant(); r != CUDA_SUCCESS) return r;
  static std::once_flag atfork;
  std::call_once(atfork, [] {
    pthread_atfork(nullptr, nullptr, [] {
      g_context_charged.store(0);  // a child pays its own
      tessera::gate::ResetGateAfterFork();
    });
  });
  return REAL(cuInit)(flags);
}

TESSERA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (!Enforcing() || dptr == nullptr || bytesize == 0) return REAL(cuMemAlloc_v2)(dptr, bytesize);
  uint64_t key = 0;
  return Charged(g_pointers, CurrentDevice(), RoundUp(bytesize), &key, [&] {
    const CUresult r = REAL(cuMemAlloc_v2)(dptr, bytesize);
    key = *dptr;
    return r;
  });
}

TESSERA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                           size_t height, unsigned int element) {
  if (!Enforcing() || dptr == nullptr || pitch == nullptr) {
    return REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, element);
  }
  // The pitch is only known afterwards: reserve the width rounded to the largest pitch alignment
  // (512), then settle to pitch x height.
  const uint64_t estimate = RoundUp(((width + 511) / 512 * 512) * static_cast<uint64_t>(height));
  const int device = CurrentDevice();
  if (!Reserve(device, estimate)) return RefusedAtLimit();
  const CUresult r = REAL(cuMemAllocPitch_v2)(dptr, pitch, width, height, element);
  if (r != CUDA_SUCCESS) {
    Unreserve(device, estimate);
    return r;
  }
  const uint64_t actual = RoundUp(static_cast<uint64_t>(*pitch) * height);
  if (actual > estimate && !Reserve(device, actual - estimate)) {
    REAL(cuMemFree_v2)(*dptr);
    Unreserve(device, estimate);
    return RefusedAtLimit();
  }
  if (actual < estimate) Unreserve(device, estimate - actual);
  if (!g_pointers.Insert(*dptr, Charge{static_cast<uint32_t>(device), actual})) {
    Unreserve(device, actual);
  }
  return r;
}

TESSERA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  // Managed memory is charged in full to the current device: a tenant cannot exceed its cap by
  // oversubscribing through unified memory (documented in docs/architecture.md).
  if (!Enforcing() || dptr == nullptr || bytesize == 0) {
    return REAL(cuMemAllocManaged)(dptr, bytesize, flags);
  }
  uint64_t key = 0;
  return Charged(g_pointers, CurrentDevice(), RoundUp(bytesize), &key, [&] {
    const CUresult r = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    key = *dptr;
    return r;
  });
}

TESSERA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  // Always forwarded, even for pointers the shim never saw; uncharged only if the driver agreed.
  const CUresult r = REAL(cuMemFree_v2)(dptr);
  if (r == CUDA_SUCCESS && Tenant().mode.load() == Mode::kEnforcing) {
    Uncharge(g_pointers, dptr);
  }
  return r;
}

TESSERA_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  const CUresult r = REAL(cuMemGetInfo_v2)(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || !Enforcing() || free_bytes == nullptr || total_bytes == nullptr) {
    return r;
  }
  ResyncPools();
  const int device = CurrentDevice();
  auto& t = Tenant();
  if (device < 0 || device >= t.ledger->device_count()) return r;
  const uint64_t limit = t.ledger->Limit(device);
  if (limit == tessera::ledger::kUnlimited) return r;
  const uint64_t used = t.ledger->Used(device);
  const uint64_t headroom = used >= limit ? 0 : limit - used;
  *total_bytes = std::min<uint64_t>(limit, *total_bytes);
  *free_bytes = std::min<uint64_t>({headroom, *free_bytes, *total_bytes});
  return r;
}

TESSERA_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice ordinal) {
  const CUresult r = REAL(cuDeviceTotalMem_v2)(bytes, ordinal);
  if (r != CUDA_SUCCESS || bytes == nullptr || !Enforcing()) return r;
  auto& t = Tenant();
  const int dev = tessera::shim::LedgerDevice(ordinal);
  if (dev < 0) return r;
  const uint64_t limit = t.ledger->Limit(dev);
  if (limit != tessera::ledger::kUnlimited) *bytes = std::min<uint64_t>(limit, *bytes);
  return r;
}

// ---- Contexts: the driver's own memory per context, charged once per device and process --------
namespace {

// Charges the context overhead the daemon measured (or was configured with) the first time this
// process creates a context on `ordinal`; it stays charged until the process exits.
CUresult ChargeContext(int ordinal) {
  if (!Enforcing()) return CUDA_SUCCESS;
  const int d = tessera::shim::LedgerDevice(ordinal);
  const uint64_t bytes = Tenant().context_bytes;
  if (d < 0 || bytes == 0) return CUDA_SUCCESS;
  const uint32_t bit = 1u << d;
  if ((g_context_charged.fetch_or(bit) & bit) != 0) return CUDA_SUCCESS;
  if (!Reserve(d, bytes)) {
    g_context_charged.fetch_and(~bit);
    return RefusedAtLimit();
  }
  return CUDA_SUCCESS;
}
}  // namespace

TESSERA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = ChargeContext(dev); r != CUDA_SUCCESS) return r;
  return REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
}
TESSERA_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (CUresult r = ChargeContext(dev); r != CUDA_SUCCESS) return r;
  tessera::gate::CurrentContextChanged();  // the new context becomes current
  return REAL(cuCtxCreate_v2)(pctx, flags, dev);
}
TESSERA_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n,
                                       unsigned int flags, CUdevice dev) {
  if (CUresult r = ChargeContext(dev); r != CUDA_SUCCESS) return r;
  tessera::gate::CurrentContextChanged();  // the new context becomes current
  return REAL(cuCtxCreate_v3)(pctx, params, n, flags, dev);
}
TESSERA_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                       unsigned int flags, CUdevice dev) {
  if (CUresult r = ChargeContext(dev); r != CUDA_SUCCESS) return r;
  tessera::gate::CurrentContextChanged();  // the new context becomes current
  return REAL(cuCtxCreate_v4)(pctx, params, flags, dev);
}

// ---- Stream-ordered allocation ------------------------------------------------------------------
#define TESSERA_POOL_ALLOC(name, ...)                                               \
  if (!Enforcing() || dptr == nullptr || size == 0) return REAL(name)(__VA_ARGS__); \
  return PoolAlloc(pool_arg, size, [&] { return REAL(name)(__VA_ARGS__); })

TESSERA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  CUmemoryPool pool_arg = nullptr;
  TESSERA_POOL_ALLOC(cuMemAllocAsync, dptr, size, s);
}
TESSERA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) {
  CUmemoryPool pool_arg = nullptr;
  TESSERA_POOL_ALLOC(cuMemAllocAsync_ptsz, dptr, size, s);
}
TESSERA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                                CUstream s) {
  CUmemoryPool pool_arg = pool;
  TESSERA_POOL_ALLOC(cuMemAllocFromPoolAsync, dptr, size, pool, s);
}
TESSERA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size,
                                                     CUmemoryPool pool, CUstream s) {
  CUmemoryPool pool_arg = pool;
  TESSERA_POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, dptr, size, pool, s);
}

TESSERA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  // The block goes back to its pool, which keeps it reserved: the charge follows the pool's
  // reservation, resynchronised at the next pool operation or trim.
  return REAL(cuMemFreeAsync)(dptr, s);
}
TESSERA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return REAL(cuMemFreeAsync_ptsz)(dptr, s);
}

TESSERA_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  const CUresult r = REAL(cuMemPoolTrimTo)(pool, keep);
  if (r == CUDA_SUCCESS && Enforcing()) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    auto it = g_pools.find(pool);
    if (it != g_pools.end()) SyncPool(pool, it->second.device);
  }
  return r;
}

TESSERA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (Tenant().mode.load() != Mode::kEnforcing) return REAL(cuMemPoolDestroy)(pool);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  cuuint64_t in_use = 0;
  REAL(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &in_use);
  const CUresult r = REAL(cuMemPoolDestroy)(pool);
  auto it = g_pools.find(pool);
  if (r == CUDA_SUCCESS && it != g_pools.end()) {
    // The pool's cached blocks go back now. Blocks still allocated from it outlive the pool in
    // the driver; they stay charged (conservatively, until the process exits) since their frees
    // no longer pass through a pool we can read.
    const uint64_t keep = std::min<uint64_t>(in_use, it->second.charged);
    Unreserve(it->second.device, it->second.charged - keep);
    g_pools.erase(it);
  }
  return r;
}

// ---- Virtual memory management ------------------------------------------------------------------
TESSERA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
  // The device comes from the allocation's properties, never from the current context.
  if (!Enforcing() || handle == nullptr || prop == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return REAL(cuMemCreate)(handle, size, prop, flags);
  }
  uint64_t key = 0;
  return Charged(g_handles, tessera::shim::LedgerDevice(prop->location.id), RoundUp(size), &key,
                 [&] {
                   const CUresult r = REAL(cuMemCreate)(handle, size, prop, flags);
                   key = *handle;
                   return r;
                 });
}

TESSERA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const CUresult r = REAL(cuMemRelease)(handle);
  if (r == CUDA_SUCCESS && Tenant().mode.load() == Mode::kEnforcing) Uncharge(g_handles, handle);
  return r;
}

// ---- Arrays
// --------------------------------------------------------------------------------------
namespace {
uint64_t ElementBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; packed/compressed formats are estimated at 4 bytes too
  }
}
uint64_t ArrayBytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels) {
  return static_cast<uint64_t>(w) * std::max<size_t>(h, 1) * std::max<size_t>(d, 1) *
         std::max(channels, 1u) * ElementBytes(f);
}
}  // namespace

TESSERA_EXPORT CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (!Enforcing() || out == nullptr || d == nullptr) return REAL(cuArrayCreate_v2)(out, d);
  uint64_t key = 0;
  return Charged(g_arrays, CurrentDevice(),
                 RoundUp(ArrayBytes(d->Width, d->Height, 1, d->Format, d->NumChannels)), &key, [&] {
                   const CUresult r = REAL(cuArrayCreate_v2)(out, d);
                   key = reinterpret_cast<uint64_t>(*out);
                   return r;
                 });
}

TESSERA_EXPORT CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (!Enforcing() || out == nullptr || d == nullptr) return REAL(cuArray3DCreate_v2)(out, d);
  uint64_t key = 0;
  return Charged(g_arrays, CurrentDevice(),
                 RoundUp(ArrayBytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels)),
                 &key, [&] {
                   const CUresult r = REAL(cuArray3DCreate_v2)(out, d);
                   key = reinterpret_cast<uint64_t>(*out);
                   return r;
                 });
}

TESSERA_EXPORT CUresult cuArrayDestroy(CUarray a) {
  const CUresult r = REAL(cuArrayDestroy)(a);
  if (r == CUDA_SUCCESS && Tenant().mode.load() == Mode::kEnforcing) {
    Uncharge(g_arrays, reinterpret_cast<uint64_t>(a));
  }
  return r;
}

TESSERA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* out,
                                               const CUDA_ARRAY3D_DESCRIPTOR* d,
                                               unsigned int levels) {
  if (!Enforcing() || out == nullptr || d == nullptr || levels == 0) {
    return REAL(cuMipmappedArrayCreate)(out, d, levels);
  }
  uint64_t bytes = 0;
  size_t w = d->Width, h = d->Height, z = d->Depth;
  for (unsigned i = 0; i < levels && i < 32; ++i) {
    bytes += ArrayBytes(w, h, z, d->Format, d->NumChannels);
    w = std::max<size_t>(1, w / 2);
    h = h == 0 ? 0 : std::max<size_t>(1, h / 2);
    z = z == 0 ? 0 : std::max<size_t>(1, z / 2);
  }
  uint64_t key = 0;
  return Charged(g_arrays, CurrentDevice(), RoundUp(bytes), &key, [&] {
    const CUresult r = REAL(cuMipmappedArrayCreate)(out, d, levels);
    key = reinterpret_cast<uint64_t>(*out);
    return r;
  });
}

TESSERA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
  const CUresult r = REAL(cuMipmappedArrayDestroy)(m);
  if (r == CUDA_SUCCESS && Tenant().mode.load() == Mode::kEnforcing) {
    Uncharge(g_arrays, reinterpret_cast<uint64_t>(m));
  }
  return r;
}

// ---- Launches: the compute gate
// -------------------------------------------------------------------- Every launch entry point
// waits for its container's GPU token first (an atomic load while it is held) and tells the gate
// afterwards, which measures the GPU time and bounds the work in flight.
namespace {
template <typename Call>
CUresult Gated(CUstream stream, bool per_thread, Call call) {
  if (!Enforcing()) return call();
  tessera::gate::Track* track = tessera::gate::BeforeLaunch(stream, per_thread);
  const CUresult r = call();
  tessera::gate::AfterLaunch(track, r);
  return r;
}
}  // namespace

#define TESSERA_LAUNCH_PARAMS                                                       \
  CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
      unsigned int by, unsigned int bz, unsigned int shared, CUstream s
TESSERA_EXPORT CUresult cuLaunchKernel(TESSERA_LAUNCH_PARAMS, void** params, void** extra) {
  return Gated(s, false, [&] {
    return REAL(cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
  });
}
TESSERA_EXPORT CUresult cuLaunchKernel_ptsz(TESSERA_LAUNCH_PARAMS, void** params, void** extra) {
  return Gated(s, true, [&] {
    return REAL(cuLaunchKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
  });
}
TESSERA_EXPORT CUresult cuLaunchCooperativeKernel(TESSERA_LAUNCH_PARAMS, void** params) {
  return Gated(s, false, [&] {
    return REAL(cuLaunchCooperativeKernel)(f, gx, gy, gz, bx, by, bz, shared, s, params);
  });
}
TESSERA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(TESSERA_LAUNCH_PARAMS, void** params) {
  return Gated(s, true, [&] {
    return REAL(cuLaunchCooperativeKernel_ptsz)(f, gx, gy, gz, bx, by, bz, shared, s, params);
  });
}
#undef TESSERA_LAUNCH_PARAMS
TESSERA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                         void** extra) {
  return Gated(config != nullptr ? config->hStream : nullptr, false,
               [&] { return REAL(cuLaunchKernelEx)(config, f, params, extra); });
}
TESSERA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                              void** params, void** extra) {
  return Gated(config != nullptr ? config->hStream : nullptr, true,
               [&] { return REAL(cuLaunchKernelEx_ptsz)(config, f, params, extra); });
}
TESSERA_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  return Gated(s, false, [&] { return REAL(cuGraphLaunch)(exec, s); });
}
TESSERA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return Gated(s, true, [&] { return REAL(cuGraphLaunch_ptsz)(exec, s); });
}

// Stream capture: launches into a capturing stream pass ungated and the gate records no marks into
// it (see gate::CaptureBegins); the graph's launches are gated when they run. A capture has ended
// when the stream no longer captures after cuStreamEndCapture, whatever it returned.
namespace {
template <typename Call>
CUresult BeginCapture(Call call) {
  tessera::gate::CaptureBegins();
  const CUresult r = call();
  if (r != CUDA_SUCCESS) tessera::gate::CaptureEnds();
  return r;
}
template <typename IsCapturing, typename Call>
CUresult EndCapture(CUstream s, IsCapturing is_capturing, Call call) {
  CUstreamCaptureStatus before = CU_STREAM_CAPTURE_STATUS_NONE;
  const bool was =
      is_capturing(s, &before) == CUDA_SUCCESS && before != CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = call();
  CUstreamCaptureStatus after = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (was && is_capturing(s, &after) == CUDA_SUCCESS && after == CU_STREAM_CAPTURE_STATUS_NONE) {
    tessera::gate::CaptureEnds();
  }
  return r;
}
}  // namespace
TESSERA_EXPORT CUresult cuStreamBeginCapture(CUstream s) {
  return BeginCapture([&] { return REAL(cuStreamBeginCapture)(s); });
}
TESSERA_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return BeginCapture([&] { return REAL(cuStreamBeginCapture_ptsz)(s); });
}
TESSERA_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture([&] { return REAL(cuStreamBeginCapture_v2)(s, mode); });
}
TESSERA_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture([&] { return REAL(cuStreamBeginCapture_v2_ptsz)(s, mode); });
}
TESSERA_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph,
                                                    const CUgraphNode* deps, const void* data,
                                                    size_t n, CUstreamCaptureMode mode) {
  return BeginCapture(
      [&] { return REAL(cuStreamBeginCaptureToGraph)(s, graph, deps, data, n, mode); });
}
TESSERA_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph,
                                                         const CUgraphNode* deps, const void* data,
                                                         size_t n, CUstreamCaptureMode mode) {
  return BeginCapture(
      [&] { return REAL(cuStreamBeginCaptureToGraph_ptsz)(s, graph, deps, data, n, mode); });
}
TESSERA_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  return EndCapture(s, REAL(cuStreamIsCapturing),
                    [&] { return REAL(cuStreamEndCapture)(s, graph); });
}
TESSERA_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  return EndCapture(s, REAL(cuStreamIsCapturing_ptsz),
                    [&] { return REAL(cuStreamEndCapture_ptsz)(s, graph); });
}

// Streams and contexts the gate tracks must be forgotten before the driver destroys them, and a
// thread's cached track is re-resolved after its current context changes.
// The application is about to wait for the device: the launches it made since the gate's last
// mark are closed there, so the host time it spends waiting and then preparing its next launch is
// never inside one of its measured intervals (the GPU idles then, unless another's work runs).
TESSERA_EXPORT CUresult cuCtxSynchronize() {
  if (Enforcing()) tessera::gate::BeforeSynchronize();
  return REAL(cuCtxSynchronize)();
}
TESSERA_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (Enforcing()) tessera::gate::BeforeSynchronize();
  return REAL(cuCtxSynchronize_v2)(ctx);
}
TESSERA_EXPORT CUresult cuStreamSynchronize(CUstream s) {
  if (Enforcing()) tessera::gate::BeforeSynchronize();
  return REAL(cuStreamSynchronize)(s);
}
TESSERA_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s) {
  if (Enforcing()) tessera::gate::BeforeSynchronize();
  return REAL(cuStreamSynchronize_ptsz)(s);
}
TESSERA_EXPORT CUresult cuEventSynchronize(CUevent e) {
  if (Enforcing()) tessera::gate::BeforeSynchronize();
  return REAL(cuEventSynchronize)(e);
}

TESSERA_EXPORT CUresult cuStreamDestroy(CUstream s) {
  tessera::gate::ForgetStream(s);
  return REAL(cuStreamDestroy)(s);
}
TESSERA_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  tessera::gate::ForgetStream(s);
  return REAL(cuStreamDestroy_v2)(s);
}
TESSERA_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
  tessera::gate::ForgetContext(ctx);
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxDestroy)(ctx);
}
TESSERA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  tessera::gate::ForgetContext(ctx);
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxDestroy_v2)(ctx);
}
TESSERA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxSetCurrent)(ctx);
}
TESSERA_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxPushCurrent)(ctx);
}
TESSERA_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxPushCurrent_v2)(ctx);
}
TESSERA_EXPORT CUresult cuCtxPopCurrent(CUcontext* ctx) {
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxPopCurrent)(ctx);
}
TESSERA_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  tessera::gate::CurrentContextChanged();
  return REAL(cuCtxPopCurrent_v2)(ctx);
}

// ---- Entry-point lookup
// --------------------------------------------------------------------------
namespace {

void BuildProcAddressMap() {
  // For every hooked symbol, the real driver's function of that exact name maps to our wrapper
  // of that exact name. Resolution by pointer identity respects cudaVersion and the per-thread
  // flag: whatever variant the driver picks, we substitute the wrapper of that same variant.
  auto* map = new std::unordered_map<void*, void*>();
#define TESSERA_HOOK(name)                                                  \
  if (tessera_cuda_real[k_##name] != g_real.missing) {                      \
    (*map)[tessera_cuda_real[k_##name]] = reinterpret_cast<void*>(&::name); \
  }
#include "shim/cuda_hooks.def"
#undef TESSERA_HOOK
  g_wrapper_of = map;
}

void* WrapperFor(void* real) {
  if (real == nullptr || g_wrapper_of == nullptr) return real;
  auto it = g_wrapper_of->find(real);
  return it == g_wrapper_of->end() ? real : it->second;
}

}  // namespace

TESSERA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* status) {
  const CUresult r = REAL(cuGetProcAddress_v2)(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = WrapperFor(*pfn);
  return r;
}

TESSERA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags) {
  const CUresult r = REAL(cuGetProcAddress)(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = WrapperFor(*pfn);
  return r;
}
