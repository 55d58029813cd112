// simgpu's CUDA driver entry points for device, pitched, managed and host memory, stream-ordered
// allocation and pools, virtual memory management, arrays, copies and sets (the C ABI). Every
// device allocation is charged to the device in the shared state (SimState::Reserve) in
// kAllocGranularity units and backed by host memory; freed backing is cached for reuse. It must
// not book kernel work or manage streams and contexts (driver_execution.cc, driver_context.cc).
// Every entry point opens with DriverCall or InitStatus (driver_internal.h), validates its
// arguments in the driver's order and returns a CUresult; none throws.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "simgpu/driver_internal.h"

using tessera::sim::Allocation;
using tessera::sim::AllocKind;
using tessera::sim::kAllocGranularity;
using tessera::sim::Rt;
using tessera::sim::Runtime;
using tessera::sim::State;
using tessera::sim::driver::DestroyHandle;
using tessera::sim::driver::DriverCall;
using tessera::sim::driver::EarliestStart;
using tessera::sim::driver::FindDeviceRange;
using tessera::sim::driver::FreeAllocation;
using tessera::sim::driver::InitStatus;
using tessera::sim::driver::NoteFinished;
using tessera::sim::driver::RoundUp;
using tessera::sim::driver::ToPhysical;
using tessera::sim::driver::ValidDevice;
using tessera::sim::driver::WaitUntil;

namespace {

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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
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
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!async) {
    if (CUresult r = WaitUntil(call.lock(), EarliestStart(s), ctx); r != CUDA_SUCCESS) return r;
  }
  std::memmove(dst, src, n);
  NoteFinished(s, EarliestStart(s));
  return CUDA_SUCCESS;
}

CUresult Memset(CUdeviceptr dst, uint32_t value, size_t element, size_t count, CUstream h,
                bool async, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (count == 0) return CUDA_SUCCESS;
  if (count > (1ull << 50) / element) return CUDA_ERROR_INVALID_VALUE;
  if (FindDeviceRange(Rt(), dst, count * element) < 0) return CUDA_ERROR_INVALID_VALUE;
  if (element == 4 && dst % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!async) {
    if (CUresult r = WaitUntil(call.lock(), EarliestStart(s), ctx); r != CUDA_SUCCESS) return r;
  }
  auto* p = reinterpret_cast<unsigned char*>(dst);
  if (element == 1) {
    std::memset(p, static_cast<int>(value & 0xff), count);
  } else {
    for (size_t i = 0; i < count; ++i) std::memcpy(p + 4 * i, &value, 4);
  }
  return CUDA_SUCCESS;
}

CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State()->ReapDead();
  const tessera::sim::SimDevice& d = State()->device(ctx->device);
  const uint64_t used = d.used_bytes.load();
  *total_bytes = d.total_bytes;
  *free_bytes = used >= d.total_bytes ? 0 : d.total_bytes - used;
  return CUDA_SUCCESS;
}

}  // namespace

namespace tessera::sim::driver {

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

void TrimPools(Runtime& rt) {
  for (CUmemPoolHandle_st* pool : rt.pools) TrimPool(pool, pool->release_threshold);
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

}  // namespace tessera::sim::driver

// ---- The C ABI ----------------------------------------------------------------------------------
extern "C" {

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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  return AllocDevice(ctx, bytesize, bytesize, AllocKind::kDevice, dptr);
}

CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  // The pre-3.2 entry point returns a 32-bit pointer; simgpu's addresses never fit in one.
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  return FreeDevice(dptr, false);
}

CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  return FreeDevice(dptr, false);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int element_size) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return AllocDevice(ctx, bytesize, bytesize, AllocKind::kManaged, dptr);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  auto it = Rt().allocations.upper_bound(static_cast<uintptr_t>(dptr));
  if (it == Rt().allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.size) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = it->first;
  if (psize != nullptr) *psize = it->second.size;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (pp == nullptr || bytesize == 0 || flags > 0x7) return CUDA_ERROR_INVALID_VALUE;
  void* p = MapBacking(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Rt().host[p] = bytesize;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

CUresult cuMemFreeHost(void* p) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  auto it = Rt().host.find(p);
  if (it == Rt().host.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second);
  Rt().host.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;  // host memory is already "pinned" in the simulation
}

CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (call.Stream(h, per_thread) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (pool == nullptr) {
    pool = Rt().current_pool[ctx->device];
  } else if (Rt().pools.count(pool) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return PoolAlloc(ctx, pool, size, dptr);
}

static CUresult FreeAsync(CUdeviceptr dptr, CUstream h, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (call.Stream(h, per_thread) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (pool == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdevice dev = props->location.id;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = NewPool(Rt(), dev, false);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (Rt().pools.count(pool) == 0) return CUDA_ERROR_INVALID_VALUE;
  TrimPool(pool, keep);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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

// A device's default or current pool (`which`), for the two getters.
static CUresult DevicePool(CUmemoryPool* pool, CUdevice dev,
                           std::vector<CUmemPoolHandle_st*> Runtime::*which) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = (Rt().*which)[dev];
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  return DevicePool(pool, dev, &Runtime::default_pool);
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return DevicePool(pool, dev, &Runtime::current_pool);
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (Rt().pools.count(pool) == 0 || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
  Rt().current_pool[dev] = pool;
  return CUDA_SUCCESS;
}

// ---- Virtual memory management ----------------------------------------------------------------
CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 ||
      size % kAllocGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = prop->location.id;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  auto it = Rt().vmm.find(handle);
  if (it == Rt().vmm.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;  // the memory stays until its last mapping goes, as in the driver
  MaybeFreeVmm(Rt(), handle);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  auto it = Rt().reservations.find(static_cast<uintptr_t>(ptr));
  if (it == Rt().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  Rt().reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().arrays.count(a) == 0) return CUDA_ERROR_INVALID_HANDLE;
  out->Width = a->desc.Width;
  out->Height = a->desc.Height;
  out->Format = a->desc.Format;
  out->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray a) {
  return DestroyHandle(&Runtime::arrays, a, [](CUarray_st* array) {
    State()->Unreserve(array->device, array->charged);
  });
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                unsigned int levels) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
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
  return DestroyHandle(&Runtime::mipmapped, m, [](CUmipmappedArray_st* mipmapped) {
    State()->Unreserve(mipmapped->device, mipmapped->charged);
  });
}

}  // extern "C"
