// The simulated machine's shared state: the one layout every process of a simulation maps.
//
// Processes that set the same TESSERA_SIM_STATE share one POSIX shared-memory object holding the
// devices (capacity, memory in use, the device clock) and a fixed table of process slots (who is
// attached, what each holds on each device, how busy each kept each device). Everything in here
// is lock-free: counters are atomics, capacity is reserved by compare-and-swap, and the device
// clock is advanced by CAS, so a process that dies at any instruction can never wedge the others;
// what it held is taken back by the reaper (SimState::ReapDead). Slots have fixed indices and
// generation counters and are never compacted.
//
// This header is the only definition of the layout. It must not grow pointers (each process maps
// the object at a different address) and every change bumps kSimStateVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace tessera::sim {

inline constexpr uint32_t kSimStateMagic = 0x47534d54;  // "TMSG" little-endian
inline constexpr uint32_t kSimStateVersion = 1;
inline constexpr int kMaxDevices = 8;
inline constexpr int kMaxProcesses = 128;

// Busy-time accounting: a ring of fixed-width buckets, each tagged with the absolute bucket number
// (its epoch) it currently holds, so stale buckets are recognised and reset without a clock thread.
inline constexpr int kDeviceBuckets = 256;
inline constexpr uint64_t kDeviceBucketNs = 20'000'000;  // 20 ms: 5.12 s of history and future
inline constexpr int kProcessBuckets = 64;
inline constexpr uint64_t kProcessBucketNs = 50'000'000;  // 50 ms: 3.2 s

struct BusyBucket {
  std::atomic<uint64_t> epoch;
  std::atomic<uint64_t> busy_ns;
};
static_assert(sizeof(BusyBucket) == 16);

struct SimDevice {
  char name[64];
  char uuid[48];  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  uint64_t total_bytes;
  uint32_t sm_count;
  uint32_t reserved0;
  std::atomic<uint64_t> used_bytes;     // reserved by CAS before any backing is mapped
  std::atomic<uint64_t> busy_until_ns;  // the device clock: end of the last booked kernel
  std::atomic<uint64_t> kernels;        // kernels executed (booked), all processes
  std::atomic<uint64_t> busy_ns_total;  // device time booked, all processes
  BusyBucket busy[kDeviceBuckets];
};
static_assert(offsetof(SimDevice, total_bytes) == 112);
static_assert(offsetof(SimDevice, used_bytes) == 128);
static_assert(sizeof(SimDevice) == 160 + 16 * kDeviceBuckets);

enum SlotState : uint32_t { kSlotFree = 0, kSlotClaiming = 1, kSlotLive = 2, kSlotReaping = 3 };

struct SimProcess {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<uint32_t> generation;  // bumped every time the slot is freed
  std::atomic<int32_t> pid;          // host pid of the owner
  uint32_t reserved0;
  std::atomic<uint64_t> start_ticks;   // /proc/<pid>/stat starttime, guards against pid reuse
  std::atomic<uint32_t> context_mask;  // bit d: the process has a context on device d
  uint32_t reserved1;
  std::atomic<uint64_t> used_bytes[kMaxDevices];
  std::atomic<uint64_t> busy_ns_total[kMaxDevices];
  BusyBucket busy[kMaxDevices][kProcessBuckets];
};
static_assert(offsetof(SimProcess, used_bytes) == 32);
static_assert(sizeof(SimProcess) == 32 + 16 * kMaxDevices + 16 * kMaxDevices * kProcessBuckets);

struct SimStateLayout {
  uint32_t magic;
  uint32_t version;
  uint64_t size;                // sizeof(SimStateLayout), checked on attach
  std::atomic<uint32_t> ready;  // 1 once the creator has filled the devices
  int32_t creator_pid;
  uint32_t device_count;
  uint32_t reserved0;
  char config[256];  // the TESSERA_SIM_GPUS text the creator used
  SimDevice devices[kMaxDevices];
  SimProcess processes[kMaxProcesses];
};
static_assert(offsetof(SimStateLayout, config) == 32);
static_assert(offsetof(SimStateLayout, devices) == 288);

// One simulated device as configured by TESSERA_SIM_GPUS ("NAME:MEMORY[:SMS]").
struct SimDeviceConfig {
  std::string name;
  uint64_t total_bytes = 0;
  uint32_t sm_count = 80;
};

// Parses TESSERA_SIM_GPUS. Empty or unset text means the default, one "SimGPU:16GiB:80".
Result<std::vector<SimDeviceConfig>> ParseSimGpus(const char* text);
// Validates TESSERA_SIM_STATE and returns the shared-memory object name ("/tessera-sim-NAME").
// Unset means "per user" (tessera-sim-uid<UID>).
Result<std::string> SimStateObjectName(const char* text);

// A process's view of the shared state.
class SimState {
 public:
  // Maps (creating if needed) the state named by the environment. Never throws.
  static Result<SimState*> Attach();

  SimStateLayout* layout() const { return layout_; }
  int device_count() const { return static_cast<int>(layout_->device_count); }
  SimDevice& device(int d) const { return layout_->devices[d]; }

  // Claims a process slot for this process (idempotent; re-claims after fork). Returns the slot
  // index or -1 when every slot is taken by a live process.
  int ClaimSlot();
  int slot() const { return slot_; }
  SimProcess* process() const { return slot_ < 0 ? nullptr : &layout_->processes[slot_]; }
  // Forgets the slot without freeing it (used in a forked child: the parent still owns it).
  void ForgetSlotAfterFork() { slot_ = -1; }
  // Frees this process's slot, returning what it still holds (orderly shutdown).
  void ReleaseSlot();

  // Reserves `bytes` of device `d` for this process: CAS on the device counter, then the
  // process's own counter. Reaps dead processes once and retries before reporting false.
  bool Reserve(int d, uint64_t bytes);
  void Unreserve(int d, uint64_t bytes);

  // Books `duration_ns` of device time on device `d` starting no earlier than `earliest_ns`,
  // after everything already booked (submission order across processes). Returns the end.
  uint64_t BookKernel(int d, uint64_t earliest_ns, uint64_t duration_ns, uint64_t* start_ns);

  // Takes back everything held by slots whose process has died. Returns how many were reaped.
  int ReapDead();

  // Busy fraction (0..1) of device `d` over the last `window_ns`; per process when slot >= 0.
  double DeviceBusyFraction(int d, uint64_t window_ns) const;
  double ProcessBusyFraction(int slot, int d, uint64_t window_ns) const;

 private:
  explicit SimState(SimStateLayout* layout) : layout_(layout) {}
  void ReapSlot(int index);

  SimStateLayout* layout_;
  int slot_ = -1;
};

// CLOCK_MONOTONIC in nanoseconds: the device clock's time base, shared by every process.
uint64_t MonotonicNs();
// Sleeps until MonotonicNs() >= deadline_ns.
void SleepUntilNs(uint64_t deadline_ns);
// True when `pid` is alive, not a zombie, and (if start_ticks != 0) started at `start_ticks`.
bool ProcessAlive(int32_t pid, uint64_t start_ticks);
// The starttime field of /proc/<pid>/stat, or 0 when it cannot be read.
uint64_t ProcessStartTicks(int32_t pid);

}  // namespace tessera::sim
