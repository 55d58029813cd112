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
// MIG: a GPU configured with `mig=MODEL` (TESSERA_SIM_GPUS) is in MIG mode and can be cut into
// instances by the NVML calls (nvml_api.cc). Each instance is a device slot of its own in the
// same table (slots kMaxGpus and up, seven per GPU), with its own memory (its share of the GPU's),
// its own device clock and busy buckets, so everything that works per device works per instance
// and instances never share time. Creating one reserves its memory and compute slices on the GPU
// by one CAS on the GPU's `mig_slices` word, so two processes can never create overlapping
// instances.
//
// This header is the only definition of the layout. It must not grow pointers (each process maps
// the object at a different address) and every change bumps kSimStateVersion.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "mig/profiles.h"
#include "simgpu/device_models.h"

namespace tessera::sim {

inline constexpr uint32_t kSimStateMagic = 0x47534d54;  // "TMSG" little-endian
// 2: MIG instance slots, 64-bit context mask; 3: a slot's owner holds a record lock on it;
// 4: each device names its model (SimDevice::spec)
inline constexpr uint32_t kSimStateVersion = 4;
inline constexpr int kMaxGpus = 8;         // physical GPUs (TESSERA_SIM_GPUS entries)
inline constexpr int kMigSlotsPerGpu = 7;  // no MIG model has more than 7 instances
// Device slots: GPUs 0..kMaxGpus-1, then GPU g's MIG instances at MigSlot(g, 0..6).
inline constexpr int kMaxDevices = kMaxGpus + kMaxGpus * kMigSlotsPerGpu;
inline constexpr int MigSlot(int gpu, int k) { return kMaxGpus + gpu * kMigSlotsPerGpu + k; }
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

// A MIG instance slot's life: free, a GPU instance (memory and compute slices taken, no compute
// instance yet: CUDA cannot use it), ready (with its compute instance: a MIG device CUDA and NVML
// see, with a MIG- UUID), and the transitions in between, which one process holds at a time.
enum MigInstanceState : uint32_t {
  kMigFree = 0,
  kMigCreating = 1,
  kMigGpuInstance = 2,
  kMigReady = 3,
  kMigBusy = 4,  // a compute instance being created or destroyed, or the GPU instance destroyed
};

// `mig_slices` of a GPU: the memory slices its instances take (bits 0-7), their compute slices
// (bits 8-15) and whether one has the media extensions (bit 16).
inline constexpr uint64_t kMigComputeShift = 8;
inline constexpr uint64_t kMigMediaBit = 1ull << 16;

struct SimDevice {
  char name[64];
  char uuid[48];  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", or "MIG-..." for an instance
  uint64_t total_bytes;
  uint32_t sm_count;
  uint32_t mig_model;                   // 1 + index in mig::GpuModels(); 0: not MIG-capable
  std::atomic<uint64_t> used_bytes;     // reserved by CAS before any backing is mapped
  std::atomic<uint64_t> busy_until_ns;  // the device clock: end of the last booked kernel
  std::atomic<uint64_t> kernels;        // kernels executed (booked), all processes
  std::atomic<uint64_t> busy_ns_total;  // device time booked, all processes
  // MIG. A GPU: mig_state is its MIG mode (0 off, 1 on) and mig_slices what its instances take.
  // An instance slot: mig_state is a MigInstanceState; parent, profile and start say what it is
  // (written while kMigCreating, read only in kMigGpuInstance or kMigReady); generation counts
  // its lives, so a re-created instance gets a new UUID.
  std::atomic<uint64_t> mig_slices;
  std::atomic<uint32_t> mig_state;
  std::atomic<uint32_t> mig_generation;
  int32_t mig_parent;    // instance: the GPU's index; a GPU: -1
  uint32_t mig_profile;  // instance: index in its model's profiles
  uint32_t mig_start;    // instance: first memory slice
  uint32_t spec;         // index in GpuSpecs() (device_models.h): the model simulated
  BusyBucket busy[kDeviceBuckets];
};
static_assert(offsetof(SimDevice, total_bytes) == 112);
static_assert(offsetof(SimDevice, used_bytes) == 128);
static_assert(offsetof(SimDevice, mig_slices) == 160);
static_assert(sizeof(SimDevice) == 192 + 16 * kDeviceBuckets);

enum SlotState : uint32_t { kSlotFree = 0, kSlotClaiming = 1, kSlotLive = 2, kSlotReaping = 3 };

struct SimProcess {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<uint32_t> generation;  // bumped every time the slot is freed
  std::atomic<int32_t> pid;          // the owner's pid in its own PID namespace
  // 1: the owner holds a write record lock (fcntl F_SETLK) on the first byte of its slot in the
  // state file: it is alive exactly while the lock is held, and F_GETLK gives its pid as the
  // asking process's namespace sees it (containers have PID namespaces of their own).
  std::atomic<uint32_t> locked;
  std::atomic<uint64_t> start_ticks;   // /proc/<pid>/stat starttime, guards against pid reuse
  std::atomic<uint64_t> context_mask;  // bit d: the process has a context on device slot d
  std::atomic<uint64_t> used_bytes[kMaxDevices];
  std::atomic<uint64_t> busy_ns_total[kMaxDevices];
  BusyBucket busy[kMaxDevices][kProcessBuckets];
};
static_assert(offsetof(SimProcess, used_bytes) == 32);
static_assert(kMaxDevices <= 64, "context_mask has one bit per device slot");
static_assert(sizeof(SimProcess) == 32 + 16 * kMaxDevices + 16 * kMaxDevices * kProcessBuckets);

struct SimStateLayout {
  uint32_t magic;
  uint32_t version;
  uint64_t size;                // sizeof(SimStateLayout), checked on attach
  std::atomic<uint32_t> ready;  // 1 once the creator has filled the devices
  int32_t creator_pid;
  uint32_t device_count;  // physical GPUs; instance slots follow at kMaxGpus
  uint32_t reserved0;
  char config[256];  // the TESSERA_SIM_GPUS text the creator used
  SimDevice devices[kMaxDevices];
  SimProcess processes[kMaxProcesses];
};
static_assert(offsetof(SimStateLayout, config) == 32);
static_assert(offsetof(SimStateLayout, devices) == 288);

// One simulated device as configured by TESSERA_SIM_GPUS ("NAME:MEMORY[:SMS][:mig=MODEL]").
struct SimDeviceConfig {
  std::string name;
  uint64_t total_bytes = 0;
  uint32_t sm_count = 80;
  int mig_model = -1;  // index in mig::GpuModels(): MIG-capable, in MIG mode at start
  int spec = 0;        // index in GpuSpecs() (device_models.h): the model it simulates
};

// Parses TESSERA_SIM_GPUS. Empty or unset text means the default, one "SimGPU:16GiB:80". An
// entry's optional last field `mig=MODEL` (a model of `tessera mig profiles`, e.g.
// mig=H100-80GB) makes that GPU MIG-capable with MIG mode on; its instances get the model's
// profiles, with memory in proportion to their slices of this GPU's and the SMs NVIDIA lists for
// the profile (MigInstanceSms). The entry simulates the model GpuSpecFor finds for it; with no SM
// count given, a device whose name or MIG model names a model has that model's SMs, others 80.
Result<std::vector<SimDeviceConfig>> ParseSimGpus(const char* text);
// Validates TESSERA_SIM_STATE as a name and returns the shared-memory object name
// ("/tessera-sim-NAME"). Unset means "per user" (tessera-sim-uid<UID>).
Result<std::string> SimStateObjectName(const char* text);
// The file the simulated machine's state is in: /dev/shm/tessera-sim-NAME for a name, or the
// value itself when it is an absolute path (a state every mount namespace of the node reaches,
// as a real GPU's device files are: an MPS client's /dev/shm is its server's, not the host's).
Result<std::string> SimStatePath(const char* text);

// A process's view of the shared state.
class SimState {
 public:
  // Maps (creating if needed) the state named by the environment. Never throws.
  static Result<SimState*> Attach();

  SimStateLayout* layout() const { return layout_; }
  // Physical GPUs; MIG instances are device slots beyond them (MigSlot).
  int device_count() const { return static_cast<int>(layout_->device_count); }
  SimDevice& device(int d) const { return layout_->devices[d]; }

  // What device slot `d` (a GPU or a MIG device) is, for the attribute and NVML answers: its
  // model (a MIG device's is its GPU's), SMs, memory, PCI bus and share of the GPU.
  DeviceFacts Facts(int d) const;
  // The model device slot `d` simulates.
  const GpuSpec& Spec(int d) const { return *Facts(d).spec; }

  // ---- MIG ----
  // True when device slot `d` is a MIG instance slot in state kMigReady (a usable MIG device).
  bool MigDeviceReady(int d) const;
  // The GPU's MIG model, or nullptr when it is not MIG-capable.
  const mig::GpuModel* MigModel(int gpu) const;
  bool MigEnabled(int gpu) const;
  // Creates a GPU instance of profile `profile` (index in the model's profiles) at memory slice
  // `start` (-1: the lowest that fits). Returns its slot, or -1 with *why set: kNoSpace when it
  // does not fit next to the instances there, kBadPlacement when the start is not one of the
  // profile's start slots.
  enum class MigRefusal { kNone, kNotMig, kBadPlacement, kNoSpace, kInUse, kWrongState };
  int CreateGpuInstance(int gpu, int profile, int start, MigRefusal* why);
  // Destroys a GPU instance without a compute instance (kInUse when it has one).
  MigRefusal DestroyGpuInstance(int slot);
  // Creates / destroys the compute instance spanning the whole GPU instance; destroying refuses
  // with kInUse while a live process holds memory or a context on it.
  MigRefusal CreateComputeInstance(int slot);
  MigRefusal DestroyComputeInstance(int slot);
  // Live processes holding memory or a context on device slot `d`.
  int ProcessesOn(int d) const;
  // Turns MIG mode on or off (kInUse while instances exist or processes use the GPU).
  MigRefusal SetMigMode(int gpu, bool on);

  // Claims a process slot for this process (idempotent; re-claims after fork). Returns the slot
  // index or -1 when every slot is taken by a live process.
  int ClaimSlot();
  int slot() const { return slot_; }
  SimProcess* process() const { return slot_ < 0 ? nullptr : &layout_->processes[slot_]; }
  // Forgets the slot without freeing it (used in a forked child: the parent still owns it).
  void ForgetSlotAfterFork() { slot_ = -1; }

  // Reserves `bytes` of device `d` for this process: CAS on the device counter, then the
  // process's own counter. Reaps dead processes once and retries before reporting false.
  bool Reserve(int d, uint64_t bytes);
  void Unreserve(int d, uint64_t bytes);

  // Books `duration_ns` of device time on device `d` starting no earlier than `earliest_ns`,
  // after everything already booked (submission order across processes). Returns the end.
  uint64_t BookKernel(int d, uint64_t earliest_ns, uint64_t duration_ns, uint64_t* start_ns);

  // Takes back everything held by slots whose process has died. Returns how many were reaped.
  int ReapDead();
  // Whether slot `index`'s owner is alive; if so and `pid_here` is set, its pid as this process's
  // PID namespace sees it (0 when this namespace cannot see it: another container's process).
  bool SlotAlive(int index, int32_t* pid_here) const;

  // Busy fraction (0..1) of device `d` over the last `window_ns`; per process when slot >= 0.
  double DeviceBusyFraction(int d, uint64_t window_ns) const;
  double ProcessBusyFraction(int slot, int d, uint64_t window_ns) const;

 private:
  SimState(SimStateLayout* layout, std::string object_name, int fd)
      : layout_(layout), object_name_(std::move(object_name)), fd_(fd) {}
  void ReapSlot(int index);
  // The byte of the state file a slot's owner locks, and taking (F_WRLCK) or dropping (F_UNLCK)
  // this process's lock on it.
  static off_t SlotLockByte(int index);
  bool SetSlotLock(int index, short type) const;

  SimStateLayout* layout_;
  std::string object_name_;  // the shared-memory object's name (MIG UUIDs are derived from it)
  // The state file, open for the process's life (closing any descriptor of the file would drop
  // the process's record locks on it, so simgpu never opens it twice).
  int fd_ = -1;
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
