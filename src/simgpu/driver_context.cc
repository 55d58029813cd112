// simgpu's CUDA driver entry points for initialisation, versions, errors, devices and contexts
// (the C ABI), and the process-wide state under every driver file: the Runtime and the attachment
// to SimState (made on cuInit, replaced in a forked child), each thread's context stack, and the
// check that a thread's current context is usable. It must not hold memory, stream or module
// logic (driver_memory.cc, driver_execution.cc, driver_modules.cc) nor NVML (nvml_api.cc). Every
// entry point opens with DriverCall or InitStatus (driver_internal.h), validates its arguments in
// the driver's order and returns a CUresult; none throws, none sleeps holding the runtime lock.
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "simgpu/driver_internal.h"

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
    if (!driver::ReadSyncDelay()) return CUDA_ERROR_INVALID_VALUE;
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

namespace driver {

CUctx_st* CurrentCtx() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

std::unordered_map<CUctx_st*, CUstream_st*>& PerThreadStreams() { return t_per_thread_stream; }

CurrentContext UsableCurrentCtx() {
  CUctx_st* ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return {nullptr, CUDA_ERROR_INVALID_CONTEXT};
  if (ctx->sticky != CUDA_SUCCESS) return {nullptr, ctx->sticky};
  return {ctx, CUDA_SUCCESS};
}

}  // namespace driver
}  // namespace tessera::sim

using tessera::sim::Rt;
using tessera::sim::Runtime;
using tessera::sim::State;
using tessera::sim::driver::ContextReady;
using tessera::sim::driver::CurrentCtx;
using tessera::sim::driver::DriverCall;
using tessera::sim::driver::EnsureDevicePools;
using tessera::sim::driver::FreeAllocation;
using tessera::sim::driver::InitStatus;
using tessera::sim::driver::Lock;
using tessera::sim::driver::NewStream;
using tessera::sim::driver::Phys;
using tessera::sim::driver::ToPhysical;
using tessera::sim::driver::ValidDevice;
using tessera::sim::driver::WaitUntil;

namespace {

void MarkContextOnDevice(int device) {
  if (auto* p = State()->process()) p->context_mask.fetch_or(1ull << device);
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

// The ordinal CUDA_VISIBLE_DEVICES gives device slot `physical`, -1 when it is not visible.
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

CUresult CtxCreate(CUcontext* out, unsigned flags, CUdevice dev) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags > 0x1f) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = NewContext(Rt(), dev, flags, false);
  tessera::sim::t_ctx_stack.push_back(ctx);
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult CtxDestroy(CUcontext ctx) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
    SIM_ERR(CUDA_ERROR_CAPTURED_EVENT)
    SIM_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
    SIM_ERR(CUDA_ERROR_TIMEOUT)
    SIM_ERR(CUDA_ERROR_UNKNOWN)
#undef SIM_ERR
  }
  return nullptr;
}

}  // namespace

// ---- The C ABI ----------------------------------------------------------------------------------
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
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(Rt().visible.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", State()->device(dev).name);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
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
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (bus_id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus_id, static_cast<size_t>(len), "00000000:%02X:00.0", BusOf(dev));
  return CUDA_SUCCESS;
}

// ---- Contexts ---------------------------------------------------------------------------------
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* ctx = Rt().primary[dev];
  *flags = ctx != nullptr ? ctx->flags : 0;
  *active = ctx != nullptr && ctx->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (!ToPhysical(&dev)) return CUDA_ERROR_INVALID_DEVICE;
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
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
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = CurrentCtx();
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  tessera::sim::t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  auto& stack = tessera::sim::t_ctx_stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = Ordinal(ctx->device);
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice* device) { return cuCtxGetDevice_v2(device, nullptr); }

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) ctx = CurrentCtx();
  if (ctx == nullptr || Rt().contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
  return WaitUntil(call.lock(), ContextReady(ctx), ctx);
}
CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(nullptr); }

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (CUresult r = InitStatus(); r != CUDA_SUCCESS) return r;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

}  // extern "C"
