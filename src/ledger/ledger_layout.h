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
// This header is the only definition of the layout; it has no pointers (every process maps it at
// a different address) and every change bumps kLedgerVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::ledger {

inline constexpr uint32_t kLedgerMagic = 0x4c525354;  // "TSRL"
inline constexpr uint32_t kLedgerVersion = 2;
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxContainers = 256;
inline constexpr int kMaxProcesses = 1024;
inline constexpr uint64_t kUnlimited = ~uint64_t{0};

enum SlotState : uint32_t { kFree = 0, kLive = 1 };

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
};
static_assert(offsetof(ContainerSlot, id) == 8);
static_assert(offsetof(ContainerSlot, limit) == 80);
static_assert(offsetof(ContainerSlot, used) == 80 + 8 * kMaxDevices);
static_assert(sizeof(ContainerSlot) == 80 + 16 * kMaxDevices + 16);

struct ProcessSlot {
  std::atomic<uint32_t> state;              // SlotState; written by the daemon only
  std::atomic<uint32_t> generation;         // bumped when the slot is freed
  std::atomic<int32_t> host_pid;            // from SO_PEERCRED
  std::atomic<uint32_t> container;          // index of the ContainerSlot it belongs to
  std::atomic<int32_t> local_pid;           // its pid in its own pid namespace (tools inside)
  uint32_t reserved0;
  std::atomic<uint64_t> used[kMaxDevices];  // bytes this process holds (its share of `used`)
};
static_assert(offsetof(ProcessSlot, local_pid) == 16);
static_assert(offsetof(ProcessSlot, used) == 24);
static_assert(sizeof(ProcessSlot) == 24 + 8 * kMaxDevices);

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
};
static_assert(offsetof(LedgerLayout, devices) == 32);
static_assert(offsetof(LedgerLayout, containers) == 32 + sizeof(LedgerDevice) * kMaxDevices);

}  // namespace tessera::ledger
