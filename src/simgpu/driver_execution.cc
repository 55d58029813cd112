// simgpu's CUDA driver entry points for streams, events, launches and stream capture (the C ABI),
// and the timing model under them: streams' ready times, the legacy stream's implicit
// synchronisation, kernel booking on the shared device clock (SimState::BookKernel) with a bounded
// queue per stream, and waits (which trim the pools, through driver_memory.cc). It must not
// allocate or free device memory itself nor manage contexts, modules or graphs (driver_memory.cc,
// driver_context.cc, driver_modules.cc). Every entry point opens with DriverCall
// (driver_internal.h), validates its arguments in the driver's order and returns a CUresult; none
// throws, and the lock is released before any sleep.
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/duration.h"
#include "simgpu/driver_internal.h"

using tessera::sim::KernelKind;
using tessera::sim::KernelWork;
using tessera::sim::MonotonicNs;
using tessera::sim::Rt;
using tessera::sim::Runtime;
using tessera::sim::driver::ContextReady;
using tessera::sim::driver::DestroyHandle;
using tessera::sim::driver::DriverCall;
using tessera::sim::driver::EarliestStart;
using tessera::sim::driver::NewStream;
using tessera::sim::driver::SubmitKernel;
using tessera::sim::driver::WaitUntil;

namespace tessera::sim::driver {

CUstream_st* NewStream(CUctx_st* ctx, unsigned flags, bool legacy, bool per_thread) {
  auto* s = new CUstream_st();
  s->ctx = ctx;
  s->flags = flags;
  s->legacy = legacy;
  s->per_thread = per_thread;
  return s;
}

// Resolves a stream handle; NULL means the legacy stream, or the per-thread one for _ptsz calls.
CUstream_st* ResolveStream(Runtime& rt, CUctx_st* ctx, CUstream h, bool per_thread_default) {
  if (h == nullptr) {
    h = per_thread_default ? TESSERA_CU_STREAM_PER_THREAD : TESSERA_CU_STREAM_LEGACY;
  }
  if (h == TESSERA_CU_STREAM_LEGACY) return ctx->legacy;
  if (h == TESSERA_CU_STREAM_PER_THREAD) {
    auto& per_thread = PerThreadStreams();
    auto it = per_thread.find(ctx);
    if (it != per_thread.end()) return it->second;
    CUstream_st* s = NewStream(ctx, 0, false, /*per_thread=*/true);
    ctx->streams.insert(s);
    per_thread[ctx] = s;
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

// Books kernel work on `s` (or records it into the stream's capture) and applies its effects.
// Releases the lock while the stream's queue is full, as a real launch blocks on a full queue.
CUresult SubmitKernel(Lock& lock, CUstream_st* s, const KernelWork& work) {
  Runtime& rt = Rt();
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    s->capture_graph->nodes.push_back(work);
    return CUDA_SUCCESS;
  }
  if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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

namespace {
std::atomic<uint64_t> g_sync_delay_ns{0};
}  // namespace

uint64_t SyncDelayNs() { return g_sync_delay_ns.load(std::memory_order_relaxed); }

bool ReadSyncDelay() {
  const char* text = std::getenv("TESSERA_SIM_SYNC_DELAY");
  if (text == nullptr || *text == '\0') return true;
  auto delay =
      ParseDuration(text, "TESSERA_SIM_SYNC_DELAY", Nanos::zero(), std::chrono::seconds(1));
  if (!delay.ok()) {
    std::fprintf(stderr, "simgpu: %s\n", delay.error().c_str());
    return false;
  }
  g_sync_delay_ns.store(static_cast<uint64_t>(delay->count()), std::memory_order_relaxed);
  return true;
}

// A driver's synchronisation spins by default (CU_CTX_SCHED_AUTO) and returns within microseconds
// of the work's end; a sleeping thread wakes up to its timer slack late (50 µs unless set), so the
// wait sleeps with 1 µs of slack, the caller's own slack restored after.
namespace {
void SleepAsSynchronisationUntil(uint64_t t) {
  constexpr unsigned long kSlackNs = 1000;
  const int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  const bool lower = slack > static_cast<int>(kSlackNs);
  if (lower) prctl(PR_SET_TIMERSLACK, kSlackNs, 0, 0, 0);
  SleepUntilNs(t);
  if (lower) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0, 0, 0);
}
}  // namespace

CUresult WaitUntil(Lock& lock, uint64_t t, CUctx_st* ctx) {
  lock.unlock();
  if (const uint64_t delay = SyncDelayNs(); delay > 0) t = std::max(t, MonotonicNs()) + delay;
  if (t > MonotonicNs()) SleepAsSynchronisationUntil(t);
  lock.lock();
  TrimPools(Rt());
  if (Rt().contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return ctx->sticky;
}

}  // namespace tessera::sim::driver

namespace {

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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      static_cast<uint64_t>(bx) * by * bz > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
  KernelWork work;
  if (CUresult r = DecodeKernel(f, params, extra, &work); r != CUDA_SUCCESS) return r;
  return SubmitKernel(call.lock(), s, work);
}

CUresult StreamSync(CUstream h, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t t = s->legacy ? ContextReady(ctx) : std::max(s->ready_ns, EarliestStart(s));
  return WaitUntil(call.lock(), t, s->ctx);
}

CUresult StreamQuery(CUstream h, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return s->ready_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult StreamWaitEvent(CUstream h, CUevent e, unsigned flags, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->recorded) s->ready_ns = std::max(s->ready_ns, e->time_ns);
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent e, CUstream h, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  e->ctx = s->ctx;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    e->captured_in = s;  // part of the capture: no time of its own
    e->recorded = false;
    return CUDA_SUCCESS;
  }
  e->captured_in = nullptr;
  e->recorded = true;
  e->time_ns = s->legacy ? std::max(MonotonicNs(), ContextReady(s->ctx)) : EarliestStart(s);
  return CUDA_SUCCESS;
}

// An event recorded into a capture is part of it: waiting on it or asking about it fails and
// invalidates that capture if it still runs (a real driver refuses and ends the capture so too).
CUresult CapturedEventUse(CUevent e) {
  CUstream_st* s = e->captured_in;
  if (s == nullptr) return CUDA_SUCCESS;
  if (Rt().streams.count(s) != 0 && s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  }
  return CUDA_ERROR_CAPTURED_EVENT;
}

CUresult BeginCapture(CUstream h, CUstreamCaptureMode mode, bool per_thread,
                      CUgraph into = nullptr) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (into != nullptr && Rt().graphs.count(into) == 0) return CUDA_ERROR_INVALID_HANDLE;
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->capture_graph = into != nullptr ? into : new CUgraph_st();
  s->capture_owns_graph = into == nullptr;
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream h, CUgraph* out, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  if (s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    if (s->capture_owns_graph) delete s->capture_graph;
    s->capture_graph = nullptr;
    s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  Rt().graphs.insert(s->capture_graph);
  *out = s->capture_graph;
  s->capture_graph = nullptr;
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult IsCapturing(CUstream h, CUstreamCaptureStatus* status, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *status = s->capture;
  return CUDA_SUCCESS;
}

}  // namespace

// ---- The C ABI ----------------------------------------------------------------------------------
extern "C" {

// ---- Launches ---------------------------------------------------------------------------------
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
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
  return DestroyHandle(&Runtime::streams, s, [](CUstream_st* stream) {
    stream->ctx->streams.erase(stream);
    if (stream->capture_owns_graph) delete stream->capture_graph;
  });
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s = call.Stream(h, per_thread);
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
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode* deps,
                                     const void* /*edge data*/, size_t n,
                                     CUstreamCaptureMode mode) {
  if (graph == nullptr || (n != 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return BeginCapture(s, mode, false, graph);
}
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph, const CUgraphNode* deps,
                                          const void* /*edge data*/, size_t n,
                                          CUstreamCaptureMode mode) {
  if (graph == nullptr || (n != 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return BeginCapture(s, mode, true, graph);
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (out == nullptr || flags > 0x7) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new CUevent_st();
  e->ctx = ctx;
  e->flags = flags;
  Rt().events.insert(e);
  *out = e;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) { return DestroyHandle(&Runtime::events, e); }
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
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = CapturedEventUse(e); r != CUDA_SUCCESS) return r;
  if (e->recorded && e->ctx != nullptr && e->ctx->sticky != CUDA_SUCCESS) return e->ctx->sticky;
  return !e->recorded || e->time_ns <= MonotonicNs() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (Rt().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = CapturedEventUse(e); r != CUDA_SUCCESS) return r;
  if (!e->recorded) return CUDA_SUCCESS;
  return WaitUntil(call.lock(), e->time_ns, e->ctx);
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().events.count(start) == 0 || Rt().events.count(end) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (CUresult r = CapturedEventUse(start); r != CUDA_SUCCESS) return r;
  if (CUresult r = CapturedEventUse(end); r != CUDA_SUCCESS) return r;
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

}  // extern "C"
