// The node's memory ledger as laid out in shared memory. Since layout version 8 (issue 17, least
// authority) it is three kinds of segment, each mapped by a tenant process only with the rights
// its role needs:
//
//  * The node view (LedgerLayout, in a memfd of the daemon's): the device table, every
//    container's limits and settings, every process's identity, and the arbiter's token words.
//    Written by tesserad alone. The daemon seals it (F_SEAL_FUTURE_WRITE) before any process gets
//    it, so no writable mapping of it can be made by anyone, root included, by any route (the
//    descriptor it was sent, /proc/self/fd, mprotect, /proc/self/mem); a process maps it
//    read-only. A restarted daemon makes a new one and each process maps that in place of the
//    old when it re-attaches.
//  * The node segment (also a LedgerLayout, named by tesserad's --ledger): the daemon-owned
//    fields of the view as the daemon last wrote them, kept in /dev/shm across daemon restarts so
//    that a restarted daemon rebuilds its book (accounting survives). No process is given it; its
//    gate words are unused (zero).
//  * One container segment per container (ContainerSegment, named "<ledger>.c<index>", kept
//    across daemon restarts): the counters its processes write (bytes reserved, GPU time
//    measured, waits) and, indexed by the global process slot, each process's own counters. A
//    tenant process maps only its own container's; other containers' counters are not in its
//    address space at all. A container slot taken by a new container gets a new file, so a
//    process that outlived its registration keeps a mapping of an orphaned file, never of the new
//    container's counters. Its processes could shrink the file; the daemon's mapping of it is
//    guarded (segment_guard.h).
//  * The exchange (Exchange, a memfd of the daemon's sealed against resizing, so that no process
//    can make another's mapping of it fault; a new daemon makes a new one): the two words every
//    tenant process writes because they concern the device rather than a container: the futex
//    word that wakes the arbiter, and when a high-priority launcher began to wait. Neither moves
//    anyone's share or accounting (docs/security.md says what a hostile writer can do). Where a
//    holder's charging starts and where revoked work ends, which gates of different containers
//    once handed each other here, the arbiter now publishes in the view (GateDevice), from what
//    each container published in its own segment.
//
// Rules that make HAMi-core's failures impossible here:
// - Slots have fixed indices and generation counters and are never compacted or moved; a process
//   keeps its slot index for its whole life and the daemon never reuses it while it is live.
// - Admission is reserve-by-CAS on the container's counter before the driver call, rolled back on
//   failure (ReserveIn, admission.h), so concurrent allocators can never overshoot.
// - Counters are 64-bit atomics (never torn) and every decrement saturates at zero.
// The compute gate's shared state (issue 4): per device, which containers may launch now (a bitset
// the shim tests with one atomic load) and a futex word bumped on every change (node view);
// per process, the GPU time it measured and whether it waits or has work in flight (its
// container's segment); the doorbell that wakes the arbiter (exchange).
// This header is the only definition of the layout; it has no pointers (every process maps it at
// a different address) and every change bumps kLedgerVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::ledger {

inline constexpr uint32_t kLedgerMagic = 0x4c525354;     // "TSRL": the node segment
inline constexpr uint32_t kContainerMagic = 0x43525354;  // "TSRC": a container segment
inline constexpr uint32_t kExchangeMagic = 0x58525354;   // "TSRX": the exchange segment
inline constexpr uint32_t kLedgerVersion = 9;            // 9: each process's ring of GPU intervals
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxContainers = 256;
inline constexpr int kMaxProcesses = 1024;
inline constexpr uint64_t kUnlimited = ~uint64_t{0};
inline constexpr size_t kPageSize = 4096;

enum SlotState : uint32_t { kFree = 0, kLive = 1 };
// ContainerSlot::flags. A container without it was declared by its first process's HELLO and is
// removed when its last process goes; a registered one (tessera run, tessera ctl) stays.
inline constexpr uint32_t kContainerRegistered = 1;
// Set by reconciliation under the `block` over-limit action while the container holds more than
// its limit (memory the shim did not see): every new reservation is refused until it is back under.
inline constexpr uint32_t kContainerBlocked = 2;

// ---- The node segment (tesserad writes; tenants read) -----------------------------------------

struct LedgerDevice {
  char uuid[48];  // "GPU-..." as NVML reports it
  char name[64];
  uint64_t total_bytes;  // physical memory
};
static_assert(sizeof(LedgerDevice) == 120);

struct ContainerSlot {
  std::atomic<uint32_t> state;               // SlotState
  std::atomic<uint32_t> generation;          // bumped when the slot is freed
  char id[72];                               // [A-Za-z0-9_.-]{1,64}, NUL-terminated
  std::atomic<uint64_t> limit[kMaxDevices];  // bytes; kUnlimited when not limited
  std::atomic<uint32_t> core_percent;        // 1-100; 100 when not limited (issue 4)
  std::atomic<uint32_t> weight;
  std::atomic<uint32_t> high_priority;
  std::atomic<uint32_t> process_count;
  std::atomic<uint32_t> flags;  // kContainerRegistered, kContainerBlocked
  uint32_t reserved0;
  // Reconciliation: bytes the device reports for the container's processes beyond what they
  // reserved through the shim (contexts, modules, allocations that bypassed it).
  std::atomic<uint64_t> unseen[kMaxDevices];
};
static_assert(offsetof(ContainerSlot, id) == 8);
static_assert(offsetof(ContainerSlot, limit) == 80);
static_assert(offsetof(ContainerSlot, unseen) == 80 + 8 * kMaxDevices + 24);
static_assert(sizeof(ContainerSlot) == 80 + 16 * kMaxDevices + 24);

struct ProcessSlot {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<uint32_t> generation;  // bumped when the slot is freed
  std::atomic<int32_t> host_pid;     // from SO_PEERCRED
  std::atomic<uint32_t> container;   // index of the ContainerSlot it belongs to
  std::atomic<int32_t> local_pid;    // its pid in its own pid namespace (tools inside)
  uint32_t reserved0;
};
static_assert(sizeof(ProcessSlot) == 24);

inline constexpr int kMaskWords = kMaxContainers / 64;

// One device's token, as the arbiter publishes it.
struct GateDevice {
  std::atomic<uint32_t> grant_seq;            // futex word: bumped after every change below
  std::atomic<uint32_t> gated;                // 0: no compute control (policy 5, or no arbiter)
  std::atomic<uint64_t> may_run[kMaskWords];  // bit c: container c may launch now
  std::atomic<int32_t> holder;                // the exclusive holder, or -1 (for tools)
  std::atomic<uint32_t> policy;               // the device's policy (for tools)
  std::atomic<uint64_t> inflight_bound_ns;    // how much work a process may keep queued
  // Bit c: high-priority container c's lane is open: it may launch at once (its may_run bit is
  // published set alongside, so its launches pass the usual one-load check), and its first launch
  // after a quiet spell rings the arbiter, which then revokes the best-effort holders. Nobody
  // writes another container's bit: until the arbiter's step the lane's work and the holder's
  // queue on the device side by side, the lane's first kernel behind the holder's bounded queue.
  std::atomic<uint64_t> lane_open[kMaskWords];
  // The device instant from which the holder pays (CLOCK_MONOTONIC ns), published with each
  // grant: the revoked holders' queued work was expected to end then (their idle_at_ns, taken no
  // later than a grant's length, quota_max, after the grant: a long launch can still run that
  // long). The holder's work queued behind theirs is charged only from here: nobody pays for
  // another's time. Written only by the arbiter, from what each container published in its own
  // segment, so a container moves another's charging by a grant's length at most, and pays for
  // the part of that wait its own measured work did not fill.
  std::atomic<uint64_t> charge_from_ns;
  // When the revoked holders' queued work is expected to end (the latest idle_at_ns among them
  // at the arbiter's last step; 0: none drains): work the holders that replaced them launch
  // queues behind it, which their gates count on when they estimate their own queue.
  std::atomic<uint64_t> drain_end_ns;
};
static_assert(offsetof(GateDevice, may_run) == 8);
static_assert(offsetof(GateDevice, lane_open) == 8 + 8 * kMaskWords + 16);
static_assert(offsetof(GateDevice, charge_from_ns) == 8 + 16 * kMaskWords + 16);
static_assert(sizeof(GateDevice) == 8 + 16 * kMaskWords + 32);

struct GateHeader {
  std::atomic<uint32_t> reserved0;
  std::atomic<uint32_t> arbiter_pid;
  std::atomic<uint64_t> beat_ns;          // the arbiter's last tick (CLOCK_MONOTONIC); 0: none
  std::atomic<uint64_t> loss_timeout_ns;  // a process waiting longer without a beat goes ungated
  GateDevice devices[kMaxDevices];
};
static_assert(offsetof(GateHeader, devices) == 24);

struct LedgerLayout {
  uint32_t magic;
  uint32_t version;
  uint64_t size;  // sizeof(LedgerLayout)
  std::atomic<uint32_t> device_count;
  std::atomic<uint32_t> daemon_pid;    // the daemon that last opened the ledger
  std::atomic<uint64_t> daemon_epoch;  // bumped every time a daemon starts on this ledger
  LedgerDevice devices[kMaxDevices];
  ContainerSlot containers[kMaxContainers];
  ProcessSlot processes[kMaxProcesses];
  GateHeader gate;
};
static_assert(offsetof(LedgerLayout, devices) == 32);
static_assert(offsetof(LedgerLayout, containers) == 32 + sizeof(LedgerDevice) * kMaxDevices);
static_assert(offsetof(LedgerLayout, gate) ==
              offsetof(LedgerLayout, processes) + sizeof(ProcessSlot) * kMaxProcesses);

// ---- A container segment (its processes write; tesserad reads, and resets a reused slot) ------

struct ContainerCounters {
  std::atomic<uint64_t> used[kMaxDevices];  // bytes reserved by the container's processes
  // Compute gate: the device instant (CLOCK_MONOTONIC ns) up to which the container's GPU time is
  // charged; its processes charge only what lies beyond it, so overlapping work of two processes
  // (or two streams) of one container is never counted twice.
  std::atomic<uint64_t> charged_until_ns[kMaxDevices];
  // Monitoring counters, cumulative since the container took the slot: allocation calls the shim
  // refused because Reserve did (one per refused call, not per retry), and the nanoseconds its
  // processes' launches waited at the gate for the compute token. Written on the shim's slow paths.
  std::atomic<uint64_t> oom_refusals;
  std::atomic<uint64_t> token_wait_ns;
};
static_assert(offsetof(ContainerCounters, charged_until_ns) == 8 * kMaxDevices);
static_assert(sizeof(ContainerCounters) == 16 * kMaxDevices + 16);

// One busy interval a process's gate measured on a device: [start_ns, end_ns) on CLOCK_MONOTONIC,
// from its first launch (or its container's previous charge) to the completion its event gave.
// The arbiter rebuilds from these who held the device when (arbiter/device_timeline.h), so each
// container is charged the time its kernels occupied rather than the time they waited behind
// another's. Written as a seqlock: `seq` is 0 while the entry is written, then its index + 1.
struct GpuInterval {
  std::atomic<uint64_t> start_ns;
  std::atomic<uint64_t> end_ns;
  std::atomic<uint64_t> total_ns;  // the process's gpu_ns[device] once this interval was added
  std::atomic<uint32_t> device;
  std::atomic<uint32_t> seq;
};
static_assert(sizeof(GpuInterval) == 32);
inline constexpr int kIntervalRing = 128;  // a power of two

struct ProcessCounters {
  std::atomic<uint64_t> used[kMaxDevices];  // bytes this process holds (its share of `used`)
  // ---- Compute gate (written by the process, read by the arbiter) ----
  std::atomic<uint64_t> gpu_ns[kMaxDevices];  // GPU time measured so far (cumulative; intervals)
  std::atomic<uint64_t> quota_hint_ns[kMaxDevices];  // the quota its kernel bursts call for
  std::atomic<uint32_t> waiting[kMaxDevices];        // its threads blocked at the gate
  std::atomic<uint32_t> busy_mask;                   // bit d: work launched and not finished
  std::atomic<uint32_t> reserved1;
  std::atomic<uint64_t> beat_ns;  // its sampler's last tick; a stopped process stops beating
  // When the work it has queued on device d is expected to have run (CLOCK_MONOTONIC), published
  // only while it launches no more: its token revoked (draining), or, for a high-priority process,
  // its launcher quiet. 0: it may launch more, or the end cannot be estimated. The arbiter hands
  // the token on this much ahead of the end, so the next holder's first launch meets a busy GPU.
  std::atomic<uint64_t> idle_at_ns[kMaxDevices];
  // The intervals behind gpu_ns, newest at interval_head - 1 (entry i at intervals[i %
  // kIntervalRing]); interval_head is stored after the entry it counts. The arbiter reads what
  // came since its last look; what the ring lapped meanwhile it charges from total_ns.
  std::atomic<uint64_t> interval_head;
  GpuInterval intervals[kIntervalRing];
};
static_assert(offsetof(ProcessCounters, gpu_ns) == 8 * kMaxDevices);
static_assert(offsetof(ProcessCounters, waiting) == 24 * kMaxDevices);
static_assert(offsetof(ProcessCounters, idle_at_ns) == 28 * kMaxDevices + 16);
static_assert(offsetof(ProcessCounters, interval_head) == 36 * kMaxDevices + 16);
static_assert(offsetof(ProcessCounters, intervals) == 36 * kMaxDevices + 24);
static_assert(sizeof(ProcessCounters) == 36 * kMaxDevices + 24 + 32 * kIntervalRing);

// Process p's counters live at processes[p] of its container's segment (the rest of the array is
// never touched, so the file stays sparse: a page or two per live process).
struct alignas(kPageSize) ContainerSegment {
  uint32_t magic;    // kContainerMagic
  uint32_t version;  // kLedgerVersion
  uint64_t size;     // sizeof(ContainerSegment)
  uint32_t index;    // the container slot it belongs to
  uint32_t reserved0;
  uint64_t reserved1;
  ContainerCounters counters;
  ProcessCounters processes[kMaxProcesses];
};
static_assert(offsetof(ContainerSegment, counters) == 32);
static_assert(sizeof(ContainerSegment) % kPageSize == 0);

// ---- The exchange segment (every tenant process writes) ----------------------------------------

struct ExchangeDevice {
  // When a high-priority launcher began waiting for the token (0: none waits): a best-effort
  // holder about to queue a long kernel ahead of time holds it back for the revocation that is
  // coming (a stale stamp, a millisecond old, or one in the future, is ignored). Any process can
  // write it; the most a forged one does is keep a holder from queueing one kernel ahead.
  std::atomic<uint64_t> priority_wait_ns;
  uint64_t reserved0[3];
};
static_assert(sizeof(ExchangeDevice) == 32);

struct Exchange {
  uint32_t magic;                    // kExchangeMagic
  uint32_t version;                  // kLedgerVersion
  uint64_t size;                     // sizeof(Exchange)
  std::atomic<uint32_t> demand_seq;  // futex word: processes bump it to wake the arbiter
  uint32_t reserved0;
  uint64_t reserved1;
  ExchangeDevice devices[kMaxDevices];
};
static_assert(offsetof(Exchange, devices) == 32);

}  // namespace tessera::ledger
