// simgpu's NVML subset: devices, names, UUIDs, memory, utilisation (busy fraction of the last
// second of the shared device clock), running compute processes (host pid, bytes held) and
// per-process utilisation, all read from the shared SimState so every process sees one machine.
// NVML calls reap dead processes first, so a SIGKILLed tenant disappears from the lists at once.
#include "driver/nvml_api.h"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "simgpu/nvml_internal.h"
#include "simgpu/runtime.h"

struct nvmlDevice_st {
  int unused;  // a handle is its address; the slot is its offset in g_devices
};

namespace tessera::sim::nvml {

namespace {
nvmlDevice_st g_devices[kMaxDevices];
std::mutex g_nvml_mu;
int g_init_count = 0;
}  // namespace

bool Initialised() {
  std::lock_guard<std::mutex> lock(g_nvml_mu);
  return g_init_count > 0 && State() != nullptr;
}

nvmlDevice_t Handle(int slot) { return &g_devices[slot]; }

int Slot(nvmlDevice_t device) {
  if (device < &g_devices[0] || device >= &g_devices[kMaxDevices]) return -1;
  return static_cast<int>(device - &g_devices[0]);
}

int DeviceIndex(nvmlDevice_t device) {
  const int slot = Slot(device);
  if (slot < 0) return -1;
  if (slot < kMaxGpus) return slot < State()->device_count() ? slot : -1;
  return State()->MigDeviceReady(slot) ? slot : -1;
}

nvmlReturn_t CopyString(const char* text, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text, std::strlen(text) + 1);
  return NVML_SUCCESS;
}

unsigned int GpuInstanceId(int slot) {
  return static_cast<unsigned int>((slot - kMaxGpus) % kMigSlotsPerGpu + 1);
}

}  // namespace tessera::sim::nvml

namespace {

using tessera::sim::State;
using tessera::sim::nvml::CopyString;
using tessera::sim::nvml::DeviceIndex;
using tessera::sim::nvml::Initialised;

// Fills `infos` with the processes holding memory or a context on `d`. On a GPU in MIG mode: the
// processes on each of its instances, with the instance's GPU and compute instance IDs (a
// process on two instances is listed once per instance, as NVML does).
template <typename Info>
nvmlReturn_t RunningProcesses(int d, unsigned int* count, Info* infos) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  State()->ReapDead();
  std::vector<int> slots;
  if (d < tessera::sim::kMaxGpus && State()->MigEnabled(d)) {
    for (int k = 0; k < tessera::sim::kMigSlotsPerGpu; ++k) {
      if (State()->MigDeviceReady(tessera::sim::MigSlot(d, k))) {
        slots.push_back(tessera::sim::MigSlot(d, k));
      }
    }
  } else {
    slots.push_back(d);
  }
  unsigned int n = 0;
  const unsigned int capacity = infos == nullptr ? 0 : *count;
  for (int slot : slots) {
    for (int i = 0; i < tessera::sim::kMaxProcesses; ++i) {
      const tessera::sim::SimProcess& p = State()->layout()->processes[i];
      if (p.state.load() != tessera::sim::kSlotLive) continue;
      const uint64_t used = p.used_bytes[slot].load();
      if (used == 0 && (p.context_mask.load() & (1ull << slot)) == 0) continue;
      int32_t pid = 0;  // as the caller's PID namespace sees it
      if (!State()->SlotAlive(i, &pid)) continue;
      if (n < capacity) {
        Info info{};
        info.pid = static_cast<unsigned int>(pid);
        info.usedGpuMemory = used;
        if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
          const bool mig = slot >= tessera::sim::kMaxGpus;
          info.gpuInstanceId = mig ? tessera::sim::nvml::GpuInstanceId(slot) : 0xFFFFFFFFu;
          info.computeInstanceId = mig ? 0 : 0xFFFFFFFFu;
        }
        infos[n] = info;
      }
      ++n;
    }
  }
  const bool fits = n <= capacity;
  *count = n;
  return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

nvmlReturn_t ClockOf(int d, nvmlClockType_t type, unsigned int* clock) {
  if (clock == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::sim::GpuSpec& g = State()->Spec(d);
  switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
      *clock = static_cast<unsigned int>(g.max_clock_mhz);
      return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
      *clock = static_cast<unsigned int>(g.memory_clock_mhz);
      return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
      return NVML_ERROR_NOT_SUPPORTED;  // the table holds no video clocks
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}
}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  using tessera::sim::nvml::g_init_count;
  using tessera::sim::nvml::g_nvml_mu;
  if (flags & ~(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (tessera::sim::EnsureAttached() != CUDA_SUCCESS) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::lock_guard<std::mutex> lock(g_nvml_mu);
  ++g_init_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  using tessera::sim::nvml::g_init_count;
  using tessera::sim::nvml::g_nvml_mu;
  std::lock_guard<std::mutex> lock(g_nvml_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --g_init_count;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!Initialised()) return NVML_ERROR_UNINITIALIZED;
  return CopyString("580.00.sim", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  if (!Initialised()) return NVML_ERROR_UNINITIALIZED;
  return CopyString("13.580.00.sim", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = tessera::sim::kDriverVersion;
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!Initialised()) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned int>(State()->device_count());
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!Initialised()) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned int>(State()->device_count())) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = tessera::sim::nvml::Handle(static_cast<int>(index));
  return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  if (!Initialised()) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (int d = 0; d < tessera::sim::kMaxDevices; ++d) {
    if (d >= State()->device_count() && !State()->MigDeviceReady(d)) continue;
    if (std::strcmp(State()->device(d).uuid, uuid) == 0) {
      *device = tessera::sim::nvml::Handle(d);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  NVML_REQUIRE_DEVICE(device, d);
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d >= tessera::sim::kMaxGpus) return NVML_ERROR_NOT_SUPPORTED;  // a MIG device has no index
  *index = static_cast<unsigned int>(d);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  NVML_REQUIRE_DEVICE(device, d);
  if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *minor = static_cast<unsigned int>(d);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  NVML_REQUIRE_DEVICE(device, d);
  return CopyString(State()->device(d).name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  NVML_REQUIRE_DEVICE(device, d);
  return CopyString(State()->device(d).uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  NVML_REQUIRE_DEVICE(device, d);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::sim::DeviceFacts f = State()->Facts(d);  // a MIG device answers its GPU's
  std::memset(pci, 0, sizeof(*pci));
  pci->bus = static_cast<unsigned int>(f.pci_bus);
  // device << 16 | vendor 0x10de (NVIDIA); NVIDIA's own boards carry subsystem vendor 0x10de too.
  pci->pciDeviceId = (static_cast<unsigned int>(f.spec->pci_device_id) << 16) | 0x10deu;
  pci->pciSubSystemId = pci->pciDeviceId;
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0",
                static_cast<unsigned>(f.pci_bus) & 0xffu);
  std::snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0",
                static_cast<unsigned>(f.pci_bus) & 0xffu);
  return NVML_SUCCESS;
}

// ---- Static properties: the simulated model's published values (device_models.cc) ----------
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  NVML_REQUIRE_DEVICE(device, d);
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::sim::ArchSpec& a = *State()->Spec(d).arch;
  *major = a.cc_major;
  *minor = a.cc_minor;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  NVML_REQUIRE_DEVICE(device, d);
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = State()->Spec(d).arch->nvml_arch;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  NVML_REQUIRE_DEVICE(device, d);
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *type = static_cast<nvmlBrandType_t>(tessera::sim::kNvmlBrandNvidia);  // data-center boards
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length) {
  NVML_REQUIRE_DEVICE(device, d);
  char text[14];
  tessera::sim::SerialFromUuid(State()->device(State()->Facts(d).gpu_index).uuid, text);
  return CopyString(text, serial, length);
}

// simgpu's device clock never throttles: it runs at the boost clock.
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int* clock) {
  NVML_REQUIRE_DEVICE(device, d);
  return ClockOf(d, type, clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int* clock) {
  NVML_REQUIRE_DEVICE(device, d);
  return ClockOf(d, type, clock);
}

nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int* width) {
  NVML_REQUIRE_DEVICE(device, d);
  if (width == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *width = static_cast<unsigned int>(State()->Spec(d).bus_width_bits);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int* limit) {
  NVML_REQUIRE_DEVICE(device, d);
  if (limit == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *limit = static_cast<unsigned int>(State()->Spec(d).power_limit_w) * 1000u;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit) {
  return nvmlDeviceGetPowerManagementDefaultLimit(device, limit);  // never changed
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit) {
  return nvmlDeviceGetPowerManagementDefaultLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* cores) {
  NVML_REQUIRE_DEVICE(device, d);
  if (cores == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::sim::DeviceFacts f = State()->Facts(d);
  *cores = f.sms * static_cast<unsigned int>(f.spec->arch->fp32_cores_per_sm);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int* multi) {
  NVML_REQUIRE_DEVICE(device, d);
  if (multi == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *multi = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  NVML_REQUIRE_DEVICE(device, d);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  State()->ReapDead();
  const tessera::sim::SimDevice& dev = State()->device(d);
  uint64_t used = dev.used_bytes.load();
  if (d < tessera::sim::kMaxGpus && State()->MigModel(d) != nullptr) {
    // A MIG GPU's memory is its instances' (a GPU in MIG mode runs nothing itself).
    for (int k = 0; k < tessera::sim::kMigSlotsPerGpu; ++k) {
      used += State()->device(tessera::sim::MigSlot(d, k)).used_bytes.load();
    }
  }
  used = std::min<uint64_t>(used, dev.total_bytes);
  memory->total = dev.total_bytes;
  memory->used = used;
  memory->free = dev.total_bytes - used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  NVML_REQUIRE_DEVICE(device, d);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  nvmlMemory_t v1{};
  if (nvmlReturn_t r = nvmlDeviceGetMemoryInfo(device, &v1); r != NVML_SUCCESS) return r;
  memory->total = v1.total;
  memory->reserved = 0;
  memory->free = v1.free;
  memory->used = v1.used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* util) {
  NVML_REQUIRE_DEVICE(device, d);
  if (util == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d < tessera::sim::kMaxGpus && State()->MigEnabled(d)) return NVML_ERROR_NOT_SUPPORTED;
  util->gpu = static_cast<unsigned int>(State()->DeviceBusyFraction(d, 1'000'000'000) * 100 + 0.5);
  util->memory = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                  nvmlProcessInfo_v1_t* infos) {
  NVML_REQUIRE_DEVICE(device, d);
  return RunningProcesses(d, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_v2_t* infos) {
  NVML_REQUIRE_DEVICE(device, d);
  return RunningProcesses(d, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  NVML_REQUIRE_DEVICE(device, d);
  return RunningProcesses(d, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                      nvmlProcessInfo_t* infos) {
  NVML_REQUIRE_DEVICE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;  // simgpu runs no graphics work
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t* samples,
                                             unsigned int* count, unsigned long long last_seen_us) {
  NVML_REQUIRE_DEVICE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  State()->ReapDead();
  const uint64_t now_ns = tessera::sim::MonotonicNs();
  const uint64_t since_ns = last_seen_us * 1000;
  const uint64_t window = since_ns != 0 && since_ns < now_ns
                              ? std::min<uint64_t>(now_ns - since_ns, 1'000'000'000)
                              : 1'000'000'000;
  unsigned int n = 0;
  const unsigned int capacity = samples == nullptr ? 0 : *count;
  for (int i = 0; i < tessera::sim::kMaxProcesses; ++i) {
    const tessera::sim::SimProcess& p = State()->layout()->processes[i];
    if (p.state.load() != tessera::sim::kSlotLive) continue;
    if ((p.context_mask.load() & (1ull << d)) == 0 && p.used_bytes[d].load() == 0) continue;
    int32_t pid = 0;  // as the caller's PID namespace sees it
    if (!State()->SlotAlive(i, &pid)) continue;
    if (n < capacity) {
      nvmlProcessUtilizationSample_t s{};
      s.pid = static_cast<unsigned int>(pid);
      s.timeStamp = now_ns / 1000;
      s.smUtil = static_cast<unsigned int>(State()->ProcessBusyFraction(i, d, window) * 100 + 0.5);
      samples[n] = s;
    }
    ++n;
  }
  if (samples == nullptr) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  const bool fits = n <= capacity;
  *count = n;
  return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

}  // extern "C"
