// What simgpu's four driver files share: the opening of every entry point (DriverCall and
// InitStatus), device ordinals, and the helpers one concern offers the others (streams and kernel
// booking from driver_execution.cc, device ranges and pools from driver_memory.cc, the thread's
// contexts from driver_context.cc). Internal to libtessera-simgpu.so: nothing here is exported
// (exports.map), and this header declares no C ABI entry point; those live in driver_context.cc
// (init, devices, contexts, errors), driver_memory.cc (memory, pools, VMM, arrays, copies),
// driver_execution.cc (streams, events, launches) and driver_modules.cc (modules, graphs).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "simgpu/runtime.h"

// Hidden: calls between the driver files bind directly, and the compiler may inline and clone
// these helpers as it did when they were file-local.
#pragma GCC visibility push(hidden)

namespace tessera::sim::driver {

using Lock = std::unique_lock<std::mutex>;

inline uint64_t RoundUp(uint64_t n, uint64_t unit) { return (n + unit - 1) / unit * unit; }

// ---- The opening ------------------------------------------------------------------------------

// CUDA_ERROR_NOT_INITIALIZED until cuInit has run in this process. The entry points that touch
// nothing cuInit does not write once (the device list, the calling thread's own state) check it
// without the lock; every other entry point checks it through DriverCall.
inline CUresult InitStatus() {
  return Rt().initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// After InitStatus: the calling thread's current context, or a null context with the status
// CUDA_ERROR_INVALID_CONTEXT (none, or destroyed) or the context's sticky error (a faulting
// kernel fails every later call in it). Called with the runtime lock held.
struct CurrentContext {
  CUctx_st* ctx;
  CUresult status;
};
CurrentContext UsableCurrentCtx();

// The opening every locking entry point shares: takes the runtime lock, then Check() runs the
// driver's checks in its order: cuInit has run and, for kContext, the thread's current context is
// usable (UsableCurrentCtx). The entry point returns Check()'s error unless it is CUDA_SUCCESS;
// the lock is held until the entry point returns, and the waits release it through lock().
class DriverCall {
 public:
  enum Needs { kInit, kContext };

  DriverCall() : lock_(Rt().mu) {}
  DriverCall(const DriverCall&) = delete;
  DriverCall& operator=(const DriverCall&) = delete;

  CUresult Check(Needs needs) {
    if (CUresult init = InitStatus(); init != CUDA_SUCCESS) return init;
    if (needs == kInit) return CUDA_SUCCESS;
    const CurrentContext current = UsableCurrentCtx();
    ctx_ = current.ctx;
    return current.status;
  }
  // After Check(kContext) returned CUDA_SUCCESS: the current context, and the stream a handle
  // names in it (ResolveStream; nullptr is CUDA_ERROR_INVALID_HANDLE).
  CUctx_st* ctx() const { return ctx_; }
  CUstream_st* Stream(CUstream h, bool per_thread);
  Lock& lock() { return lock_; }

 private:
  Lock lock_;
  // Set by Check(kContext) only. The status is Check()'s return value rather than a member and
  // this is not initialised otherwise: the lock's address escapes on the unwinding path, so every
  // store to this object stays in the code, and these keep the opening as cheap as it was.
  CUctx_st* ctx_;
};

// ---- Devices and contexts (driver_context.cc) ---------------------------------------------------

// CUDA_VISIBLE_DEVICES, read at cuInit: every entry point takes and returns ordinals; contexts,
// pools and the shared state use device slots (a GPU's index, or a MIG instance's slot).
inline bool ValidDevice(int ordinal) {
  return State() != nullptr && ordinal >= 0 && ordinal < static_cast<int>(Rt().visible.size());
}
inline int Phys(int ordinal) { return Rt().visible[static_cast<size_t>(ordinal)]; }
// Replaces a valid ordinal by its device slot; false (CUDA_ERROR_INVALID_DEVICE) for any other.
inline bool ToPhysical(CUdevice* dev) {
  if (!ValidDevice(*dev)) return false;
  *dev = Phys(*dev);
  return true;
}

// The calling thread's current context (top of its stack), nullptr when it has none.
CUctx_st* CurrentCtx();
// The calling thread's per-thread default streams (CU_STREAM_PER_THREAD), by context.
std::unordered_map<CUctx_st*, CUstream_st*>& PerThreadStreams();

// ---- Streams and kernels (driver_execution.cc) --------------------------------------------------

CUstream_st* NewStream(CUctx_st* ctx, unsigned flags, bool legacy, bool per_thread);
// Resolves a stream handle; NULL means the legacy stream, or the per-thread one for _ptsz calls.
// nullptr for a handle that names no stream (CUDA_ERROR_INVALID_HANDLE).
CUstream_st* ResolveStream(Runtime& rt, CUctx_st* ctx, CUstream h, bool per_thread_default);
// When work submitted to `s` now may start: after the stream's own work, and across the legacy
// stream's implicit synchronisation with blocking streams.
uint64_t EarliestStart(CUstream_st* s);
// Records that work on `s` ends at `end`.
void NoteFinished(CUstream_st* s, uint64_t end);
// Latest time by which everything in `ctx` is done.
uint64_t ContextReady(CUctx_st* ctx);
// Sleeps until `t` with the lock released, then trims the pools and returns the context's state.
// With TESSERA_SIM_SYNC_DELAY set, it returns that much later: a host that runs the waiting thread
// late after every synchronisation (docs/contracts.md).
CUresult WaitUntil(Lock& lock, uint64_t t, CUctx_st* ctx);
// TESSERA_SIM_SYNC_DELAY in nanoseconds (0 when unset); read once, at the first cuInit.
uint64_t SyncDelayNs();
// Reads TESSERA_SIM_SYNC_DELAY; false (and a message on stderr naming it) when it is not valid.
bool ReadSyncDelay();
// Books kernel work on `s` (or records it into the stream's capture) and applies its effects.
// Releases the lock while the stream's queue is full, as a real launch blocks on a full queue.
CUresult SubmitKernel(Lock& lock, CUstream_st* s, const KernelWork& work);

inline CUstream_st* DriverCall::Stream(CUstream h, bool per_thread) {
  return ResolveStream(Rt(), ctx_, h, per_thread);
}

// The destroy call of a handle type the runtime keeps in `handles`: CUDA_ERROR_INVALID_HANDLE for
// a pointer that is not one of them; otherwise `release` gives back what it holds, and the handle
// is forgotten and deleted.
template <typename T, typename Release>
CUresult DestroyHandle(std::unordered_set<T*> Runtime::*handles, T* h, Release release) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  std::unordered_set<T*>& live = Rt().*handles;
  if (live.count(h) == 0) return CUDA_ERROR_INVALID_HANDLE;
  release(h);
  live.erase(h);
  delete h;
  return CUDA_SUCCESS;
}
template <typename T>
CUresult DestroyHandle(std::unordered_set<T*> Runtime::*handles, T* h) {
  return DestroyHandle(handles, h, [](T*) {});
}

// ---- Device memory (driver_memory.cc) -----------------------------------------------------------

// Finds the device allocation (or VMM mapping) holding [ptr, ptr+len). Returns its device or -1.
int FindDeviceRange(Runtime& rt, CUdeviceptr ptr, size_t len);
// Frees an allocation record (device memory goes back to the device, pool blocks to their pool).
void FreeAllocation(std::map<uintptr_t, Allocation>::iterator it);
// Gives pools back what they hold above their release threshold (the driver does this at
// synchronisation points).
void TrimPools(Runtime& rt);
// Creates every device slot's default pool once (cuInit).
void EnsureDevicePools(Runtime& rt);

}  // namespace tessera::sim::driver

#pragma GCC visibility pop
