// ComputeGate: the process side of compute isolation (issue 4). Before every kernel or graph
// launch the shim asks the gate; the launch proceeds at once when the process's container holds
// its device's token (an atomic load and a branch), and otherwise waits on a futex in shared
// memory until the daemon's arbiter grants it (the time waited is added to the container's
// ContainerCounters::token_wait_ns, for the metrics). A high-priority container whose lane the
// arbiter published as open (GateDevice::lane_open) does not wait: the arbiter publishes its bit
// set with the lane, and the first launch after a quiet spell rings the arbiter, which revokes the
// best-effort holders at its next step. The gate writes only its own container's segment and the
// exchange (ledger_layout.h), never another container's bits. The gate also measures the GPU time
// the process uses and bounds how much work it keeps queued:
//
//  * Tracks. Every stream the process launches on gets a Track: the explicit stream, the
//    context's legacy default stream, or a thread's per-thread default stream. A launch bumps the
//    track's counter; every `mark_every` launches the launching thread records an event after its
//    launch (a mark), so marks on per-thread streams are recorded by their own thread.
//  * Measurement. A sampler thread (one per process) queries marks without blocking; a completed
//    mark closes a busy interval [first launch after the previous mark, mark's device time] and
//    the part beyond the container's `charged_until_ns` (and, for the holder, before the
//    arbiter's `charge_from_ns`) is added to the process's `gpu_ns`, which
//    the arbiter reads. Device times come from cuEventElapsedTime chained from a calibration event,
//    so they are CLOCK_MONOTONIC instants on simgpu and on a real GPU alike. Launches left without
//    a mark when a stream goes quiet are closed by the sampler (on the stream itself, or on the
//    context's legacy stream, which orders after every blocking stream including per-thread ones).
//  * Bounded in flight. `mark_every` adapts so a mark covers about half the device's in-flight
//    bound, and a launch waits (on the oldest mark's event, never the whole device) while more
//    marks than the bound allows are outstanding. So a revoked token takes effect within about
//    the bound, and a high-priority tenant is admitted within about one best-effort kernel. Where
//    little work is queued behind that mark (the short bound beside a high-priority tenant, long
//    kernels) the wait yields in a loop for its last stretch instead of sleeping through it, and
//    a high-priority launcher does so for the first ms of a token wait: on a virtual machine a
//    sleeping vCPU is resumed late often enough to idle the GPU.
//  * Drain. When the token is revoked, the sampler closes the device's tracks, publishes when their
//    marks should complete (`idle_at_ns`; the arbiter lets the next holder in just before then and
//    publishes it as the device's `drain_end_ns`), waits for them and clears the process's busy
//    bit, so its last GPU time is reported at once. The next holder's work queues behind it; the
//    arbiter's `charge_from_ns` for the new holder (and the container's own `charged_until_ns`)
//    keep anyone from being charged for time the device spent on someone else's work. A
//    high-priority process whose launchers have gone quiet publishes the end of its queue the same
//    way, so its lane ends before its last kernel does.
//  * Policy 5 (native) turns the gate off: launches are neither gated nor measured.
//  * Faults. A waiting launch re-checks the arbiter's heartbeat; after `loss_timeout_ns` without
//    one it continues ungated with one warning, and gating resumes when the heartbeat returns.
//
// What this file must not do: no allocation, locks, system calls or logging on the fast path
// (BeforeLaunch with the token held and a cached track, AfterLaunch below the mark). Driver calls
// go through GateDriver (the real driver's entry points), never through the shim's wrappers.
#pragma once

#include <atomic>
#include <cstdint>

#include "driver/cuda_api.h"
#include "ledger/ledger_layout.h"

namespace tessera::gate {

// The real driver's entry points the gate needs.
struct GateDriver {
  CUresult (*event_create)(CUevent*, unsigned int) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_query)(CUevent) = nullptr;
  CUresult (*event_synchronize)(CUevent) = nullptr;
  CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  // Optional (nullptr or failing is fine): lets the sampler query events while the application
  // captures a graph in global capture mode.
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*) = nullptr;
};

struct Track;

// The ledger segments as this process maps them (ledger_layout.h).
struct GateLedger {
  const ledger::LedgerLayout* node = nullptr;  // read-only
  ledger::ContainerSegment* own = nullptr;     // its container's
  ledger::Exchange* exchange = nullptr;
};

// Starts gating for this process (idempotent; after fork, call again in the child). `physical`
// maps the process's device ordinals to ledger device indices.
void StartGate(const GateDriver& driver, const GateLedger& ledger, uint32_t container,
               uint32_t process, const int* physical, int visible_count);
// Forgets every track (a forked child: the parent's streams and events are not its own).
void ResetGateAfterFork();

// Before a launch on `stream` (`per_thread`: the _ptsz entry point, where a null stream is the
// calling thread's per-thread default stream). Waits for the token when the container does not
// hold it. Returns the track to pass to AfterLaunch, or nullptr when the launch is not gated.
Track* BeforeLaunch(CUstream stream, bool per_thread);
// After the launch was submitted (whatever it returned).
void AfterLaunch(Track* track, CUresult launched);

// The calling thread is about to wait for the device (a synchronize call): marks the current
// context's streams it launched on since their last mark (slow path; skipped when the sampler is
// in its tick, which closes them itself).
void BeforeSynchronize();

// The application destroys a stream or a context: drop their tracks first (slow path).
void ForgetStream(CUstream stream);
void ForgetContext(CUcontext ctx);
// The calling thread's current context changed (cuCtxSetCurrent, push, pop, create, destroy).
void CurrentContextChanged();

// A stream capture is about to begin (called before the driver's call; CaptureEnds undoes it if
// the call fails) and one has ended. While any capture runs in the process, launches are neither
// gated nor measured (a captured launch runs nothing; its graph's launches are gated when they
// run) and no mark is recorded: on a real driver an event recorded into a capturing stream, or a
// wait on one while a capture runs in global mode, invalidates the application's capture.
void CaptureBegins();
void CaptureEnds();

}  // namespace tessera::gate
