// The node's memory ledger as laid out in shared memory: one segment per node daemon, created by
// tesserad and mapped by every captured process (the daemon hands each one the descriptor over
// its Unix socket). It holds, per container and per device, the limit and the bytes in use, and per
// process the bytes it holds, so the daemon can take them back the moment the process dies.
//
// Rules that make HAMi-core's failures impossible here:
// - Slots have fixed indices and generation counters and are never compacted or moved; a process
//   keeps its slot index for its whole life and the daemon never reuses it while it is live.
// - Admission is reserve-by-CAS on the container's counter before the driver call, rolled back on
//   failure (MemoryLedger::Reserve), so concurrent allocators can never overshoot.
// - Counters are 64-bit atomics (never torn) and every decrement saturates at zero.
// The same segment carries the compute gate's shared state (issue 4): per device, which containers
// may launch now (a bitset the shim tests with one atomic load) and a futex word bumped on every
// change; per process, the GPU time it measured and whether it waits or has work in flight; a
// futex word the processes bump to wake the daemon's arbiter, and the arbiter's heartbeat.
// This header is the only definition of the layout; it has no pointers (every process maps it at
// a different address) and every change bumps kLedgerVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::ledger {

inline constexpr uint32_t kLedgerMagic = 0x4c525354;  // "TSRL"
inline constexpr uint32_t kLedgerVersion = 7;
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxContainers = 256;
inline constexpr int kMaxProcesses = 1024;
inline constexpr uint64_t kUnlimited = ~uint64_t{0};

enum SlotState : uint32_t { kFree = 0, kLive = 1 };
// ContainerSlot::flags. A container without it was declared by its first process's HELLO and is
// removed when its last process goes; a registered one (tessera run, tessera ctl) stays.
inline constexpr uint32_t kContainerRegistered = 1;
// Set by reconciliation under the `block` over-limit action while the container holds more than
// its limit (memory the shim did not see): every new reservation is refused until it is back under.
inline constexpr uint32_t kContainerBlocked = 2;

struct LedgerDevice {
  char uuid[48];  // "GPU-..." as NVML reports it
  char name[64];
  uint64_t total_bytes;  // physical memory
};
static_assert(sizeof(LedgerDevice) == 120);

struct ContainerSlot {
  std::atomic<uint32_t> state;               // SlotState; written by the daemon only
  std::atomic<uint32_t> generation;          // bumped when the slot is freed
  char id[72];                               // [A-Za-z0-9_.-]{1,64}, NUL-terminated
  std::atomic<uint64_t> limit[kMaxDevices];  // bytes; kUnlimited when not limited
  std::atomic<uint64_t> used[kMaxDevices];   // bytes reserved by the container's processes
  std::atomic<uint32_t> core_percent;        // 1-100; 100 when not limited (issue 4)
  std::atomic<uint32_t> weight;
  std::atomic<uint32_t> high_priority;
  std::atomic<uint32_t> process_count;
  // Compute gate: the device instant (CLOCK_MONOTONIC ns) up to which the container's GPU time is
  // charged; its processes charge only what lies beyond it, so overlapping work of two processes
  // (or two streams) of one container is never counted twice.
  std::atomic<uint64_t> charged_until_ns[kMaxDevices];
  std::atomic<uint32_t> flags;  // kContainerRegistered, kContainerBlocked
  uint32_t reserved0;
  // Reconciliation (daemon-written): bytes the device reports for the container's processes beyond
  // what they reserved through the shim (contexts, modules, allocations that bypassed it).
  std::atomic<uint64_t> unseen[kMaxDevices];
  // Monitoring counters, cumulative since the slot was taken (UpsertContainer zeroes them):
  // allocation calls the shim refused because Reserve did (one per refused call, not per retry),
  // and the nanoseconds its processes' launches waited at the gate for the compute token
  // (ComputeGate's AwaitToken adds each wait). Both are written by the shim on its slow paths.
  // token_wait_ns took the place of v4's last reserved word: same offset and size, and a reader
  // that ignores it loses nothing, so the layout version stays 4.
  std::atomic<uint64_t> oom_refusals;
  std::atomic<uint64_t> token_wait_ns;
};
static_assert(offsetof(ContainerSlot, id) == 8);
static_assert(offsetof(ContainerSlot, limit) == 80);
static_assert(offsetof(ContainerSlot, used) == 80 + 8 * kMaxDevices);
static_assert(offsetof(ContainerSlot, charged_until_ns) == 80 + 16 * kMaxDevices + 16);
static_assert(offsetof(ContainerSlot, unseen) == 80 + 24 * kMaxDevices + 24);
static_assert(offsetof(ContainerSlot, token_wait_ns) == 80 + 32 * kMaxDevices + 32);
static_assert(sizeof(ContainerSlot) == 80 + 32 * kMaxDevices + 40);

struct ProcessSlot {
  std::atomic<uint32_t> state;       // SlotState; written by the daemon only
  std::atomic<uint32_t> generation;  // bumped when the slot is freed
  std::atomic<int32_t> host_pid;     // from SO_PEERCRED
  std::atomic<uint32_t> container;   // index of the ContainerSlot it belongs to
  std::atomic<int32_t> local_pid;    // its pid in its own pid namespace (tools inside)
  uint32_t reserved0;
  std::atomic<uint64_t> used[kMaxDevices];  // bytes this process holds (its share of `used`)
  // ---- Compute gate (written by the process, read by the arbiter) ----
  std::atomic<uint64_t> gpu_ns[kMaxDevices];         // GPU time measured so far (cumulative)
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
};
static_assert(offsetof(ProcessSlot, local_pid) == 16);
static_assert(offsetof(ProcessSlot, used) == 24);
static_assert(offsetof(ProcessSlot, gpu_ns) == 24 + 8 * kMaxDevices);
static_assert(offsetof(ProcessSlot, waiting) == 24 + 24 * kMaxDevices);
static_assert(offsetof(ProcessSlot, idle_at_ns) == 24 + 28 * kMaxDevices + 16);
static_assert(sizeof(ProcessSlot) == 24 + 36 * kMaxDevices + 16);

inline constexpr int kMaskWords = kMaxContainers / 64;

// One device's token, as the arbiter publishes it.
struct GateDevice {
  std::atomic<uint32_t> grant_seq;            // futex word: bumped after every change below
  std::atomic<uint32_t> gated;                // 0: no compute control (policy 5, or no arbiter)
  std::atomic<uint64_t> may_run[kMaskWords];  // bit c: container c may launch now
  std::atomic<int32_t> holder;                // the exclusive holder, or -1 (for tools)
  std::atomic<uint32_t> policy;               // the device's policy (for tools)
  std::atomic<uint64_t> inflight_bound_ns;    // how much work a process may keep queued
  // The device instant up to which some container has been charged: the next holder's work, queued
  // behind the previous holder's, is charged only from there (nobody pays for another's time).
  std::atomic<uint64_t> charged_until_ns;
  // When the work of holders whose token was revoked is expected to have run: work launched by
  // the holder that replaced them queues behind it (raised by each draining process).
  std::atomic<uint64_t> drain_end_ns;
  // When a high-priority launcher began waiting for the token (0: none waits): a best-effort
  // holder about to queue a long kernel ahead of time holds it back for the revocation that is
  // coming (a stale stamp, a millisecond old, is ignored).
  std::atomic<uint64_t> priority_wait_ns;
  // Bit c: high-priority container c may take the token itself, without waiting for the arbiter:
  // its lane is under its cap and no other container's lane holds the token. Its launcher then
  // clears the other containers' may_run bits (sets its own), bumps grant_seq and wakes the
  // arbiter, which takes the lane over at its next step (or hands the token back). Written by the
  // arbiter before may_run, so a launcher that finds its bit gone reads a current lane_open.
  std::atomic<uint64_t> lane_open[kMaskWords];
};
static_assert(offsetof(GateDevice, may_run) == 8);
static_assert(offsetof(GateDevice, drain_end_ns) == 8 + 8 * kMaskWords + 24);
static_assert(offsetof(GateDevice, priority_wait_ns) == 8 + 8 * kMaskWords + 32);
static_assert(offsetof(GateDevice, lane_open) == 8 + 8 * kMaskWords + 40);
static_assert(sizeof(GateDevice) == 8 + 16 * kMaskWords + 40);

struct GateHeader {
  std::atomic<uint32_t> demand_seq;  // futex word: processes bump it to wake the arbiter
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

}  // namespace tessera::ledger
