// simgpu's NVML MIG calls: MIG mode, GPU-instance profiles and placements, creating and destroying
// GPU and compute instances, and MIG device handles. The rules are src/mig's tables for the GPU's
// configured model (TESSERA_SIM_GPUS ... :mig=MODEL); the state lives in SimState (one instance
// per device slot, created by CAS, see sim_state.h), so every process sees the same instances.
//
// Simplifications, on purpose: one compute instance per GPU instance, spanning it (the compute
// instance profile whose slices equal the GPU instance's; others are NVML_ERROR_NOT_SUPPORTED);
// MIG mode changes at once (no pending mode, no reset); memory and SMs of a profile are the GPU's
// in proportion to its slices.
#include <algorithm>
#include <cstring>
#include <vector>

#include "mig/planner.h"
#include "simgpu/nvml_internal.h"
#include "simgpu/runtime.h"

struct nvmlGpuInstance_st {
  int unused;  // a handle is its address; the slot is its offset in g_gpu_instances
};
struct nvmlComputeInstance_st {
  int unused;
};

namespace {

using tessera::sim::kMaxDevices;
using tessera::sim::kMaxGpus;
using tessera::sim::kMigSlotsPerGpu;
using tessera::sim::MigSlot;
using tessera::sim::SimState;
using tessera::sim::State;
using Refusal = tessera::sim::SimState::MigRefusal;

nvmlGpuInstance_st g_gpu_instances[kMaxDevices];
nvmlComputeInstance_st g_compute_instances[kMaxDevices];

// A MIG-capable GPU's index, or -1.
int MigGpu(nvmlDevice_t device) {
  const int d = tessera::sim::nvml::DeviceIndex(device);
  return d >= 0 && d < kMaxGpus && State()->MigModel(d) != nullptr ? d : -1;
}

#define NVML_REQUIRE_MIG_GPU(device, gpu)                                            \
  if (!tessera::sim::nvml::Initialised()) return NVML_ERROR_UNINITIALIZED;           \
  const int gpu = MigGpu(device);                                                    \
  if (gpu < 0) {                                                                     \
    return tessera::sim::nvml::DeviceIndex(device) < 0 ? NVML_ERROR_INVALID_ARGUMENT \
                                                       : NVML_ERROR_NOT_SUPPORTED;   \
  }

// The slot of a GPU-instance (compute-instance) handle that names one that exists, as `slot`.
#define NVML_REQUIRE_GI(gi, slot)                                          \
  if (!tessera::sim::nvml::Initialised()) return NVML_ERROR_UNINITIALIZED; \
  const int slot = GiSlot(gi);                                             \
  if (slot < 0) return NVML_ERROR_INVALID_ARGUMENT
#define NVML_REQUIRE_CI(ci, slot)                                          \
  if (!tessera::sim::nvml::Initialised()) return NVML_ERROR_UNINITIALIZED; \
  const int slot = CiSlot(ci);                                             \
  if (slot < 0) return NVML_ERROR_INVALID_ARGUMENT

// The profile of `gpu`'s model with device profile ID `id`, or -1.
int ProfileById(int gpu, unsigned int id) {
  const tessera::mig::GpuModel* model = State()->MigModel(gpu);
  for (int i = 0; i < model->profile_count; ++i) {
    if (model->profiles[i].id == id) return i;
  }
  return -1;
}

const tessera::mig::MigProfile& ProfileOf(int slot) {
  const tessera::sim::SimDevice& d = State()->device(slot);
  return State()->MigModel(d.mig_parent)->profiles[d.mig_profile];
}

// The slot of a GPU-instance handle whose instance exists (with or without a compute instance).
int GiSlot(nvmlGpuInstance_t gi) {
  if (gi < &g_gpu_instances[0] || gi >= &g_gpu_instances[kMaxDevices]) return -1;
  const int slot = static_cast<int>(gi - &g_gpu_instances[0]);
  const uint32_t s = State()->device(slot).mig_state.load(std::memory_order_acquire);
  return slot >= kMaxGpus && (s == tessera::sim::kMigGpuInstance || s == tessera::sim::kMigReady)
             ? slot
             : -1;
}

int CiSlot(nvmlComputeInstance_t ci) {
  if (ci < &g_compute_instances[0] || ci >= &g_compute_instances[kMaxDevices]) return -1;
  const int slot = static_cast<int>(ci - &g_compute_instances[0]);
  return State()->MigDeviceReady(slot) ? slot : -1;
}

nvmlReturn_t ToNvml(Refusal r) {
  switch (r) {
    case Refusal::kNone:
      return NVML_SUCCESS;
    case Refusal::kNotMig:
      return NVML_ERROR_NOT_SUPPORTED;
    case Refusal::kBadPlacement:
      return NVML_ERROR_INVALID_ARGUMENT;
    case Refusal::kNoSpace:
      return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case Refusal::kInUse:
      return NVML_ERROR_IN_USE;
    case Refusal::kWrongState:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_ERROR_UNKNOWN;
}

// The GPU's instances as a planner layout (those being created or destroyed left out).
tessera::mig::Layout CurrentLayout(int gpu) {
  tessera::mig::Layout layout{State()->MigModel(gpu), {}};
  for (int k = 0; k < kMigSlotsPerGpu; ++k) {
    const int slot = MigSlot(gpu, k);
    const uint32_t s = State()->device(slot).mig_state.load(std::memory_order_acquire);
    if (s != tessera::sim::kMigGpuInstance && s != tessera::sim::kMigReady) continue;
    layout.instances.push_back(
        {&ProfileOf(slot), static_cast<int>(State()->device(slot).mig_start)});
  }
  return layout;
}

// The GPU's MIG devices (instances with their compute instance), by start slot.
std::vector<int> MigDevices(int gpu) {
  std::vector<int> out;
  for (int k = 0; k < kMigSlotsPerGpu; ++k) {
    if (State()->MigDeviceReady(MigSlot(gpu, k))) out.push_back(MigSlot(gpu, k));
  }
  std::sort(out.begin(), out.end(), [](int a, int b) {
    return State()->device(a).mig_start < State()->device(b).mig_start;
  });
  return out;
}

nvmlReturn_t CreateGi(nvmlDevice_t device, unsigned int profile_id, int start,
                      nvmlGpuInstance_t* gi) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (gi == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!State()->MigEnabled(gpu)) return NVML_ERROR_INVALID_STATE;
  const int profile = ProfileById(gpu, profile_id);
  if (profile < 0) return NVML_ERROR_INVALID_ARGUMENT;
  Refusal why = Refusal::kNone;
  const int slot = State()->CreateGpuInstance(gpu, profile, start, &why);
  if (slot < 0) return ToNvml(why);
  *gi = &g_gpu_instances[slot];
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                  unsigned int* pending) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *current = *pending = State()->MigEnabled(gpu) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t* activation) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (activation == nullptr || mode > NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_INVALID_ARGUMENT;
  const nvmlReturn_t r = ToNvml(State()->SetMigMode(gpu, mode == NVML_DEVICE_MIG_ENABLE));
  *activation = r;
  return r;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (info == nullptr || profile >= tessera::mig::kNvmlGiProfileCount) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const tessera::mig::GpuModel& model = *State()->MigModel(gpu);
  const tessera::sim::SimDevice& g = State()->device(gpu);
  for (const tessera::mig::MigProfile& p : model.Profiles()) {
    if (p.nvml_profile != profile) continue;
    *info = nvmlGpuInstanceProfileInfo_t{};
    info->id = p.id;
    info->sliceCount = static_cast<unsigned int>(p.compute_slices);
    info->instanceCount = static_cast<unsigned int>(p.published_max);
    info->multiprocessorCount = tessera::sim::MigInstanceSms(model, p, g.sm_count);
    info->copyEngineCount = static_cast<unsigned int>(p.compute_slices);
    info->decoderCount = p.media_extensions ? 1 : 0;
    info->jpegCount = p.media_extensions ? 1 : 0;
    info->ofaCount = p.media_extensions ? 1 : 0;
    info->memorySizeMB = g.total_bytes / static_cast<uint64_t>(model.memory_slices) *
                         static_cast<uint64_t>(p.memory_slices) / (1ull << 20);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                           unsigned int profile_id,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int profile = ProfileById(gpu, profile_id);
  if (profile < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::mig::MigProfile& p = State()->MigModel(gpu)->profiles[profile];
  std::vector<nvmlGpuInstancePlacement_t> all;
  for (int s = 0; s < tessera::mig::kMaxMemorySlices; ++s) {
    if ((p.start_mask >> s) & 1u) {
      all.push_back({static_cast<unsigned int>(s), static_cast<unsigned int>(p.memory_slices)});
    }
  }
  if (placements == nullptr) {
    *count = static_cast<unsigned int>(all.size());
    return NVML_SUCCESS;
  }
  if (*count < all.size()) {
    *count = static_cast<unsigned int>(all.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(all.begin(), all.end(), placements);
  *count = static_cast<unsigned int>(all.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile_id,
                                                       unsigned int* count) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int profile = ProfileById(gpu, profile_id);
  if (profile < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::mig::MigProfile& p = State()->MigModel(gpu)->profiles[profile];
  tessera::mig::Layout layout = CurrentLayout(gpu);
  unsigned int n = 0;
  for (int s = tessera::mig::FirstFreeStart(layout, p); s >= 0;
       s = tessera::mig::FirstFreeStart(layout, p)) {
    layout.instances.push_back({&p, s});
    ++n;
  }
  *count = State()->MigEnabled(gpu) ? n : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profile_id,
                                         nvmlGpuInstance_t* gi) {
  return CreateGi(device, profile_id, -1, gi);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  if (!tessera::sim::nvml::Initialised()) return NVML_ERROR_UNINITIALIZED;
  if (placement == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int gpu = MigGpu(device);
  if (gpu >= 0) {
    const int profile = ProfileById(gpu, profile_id);
    if (profile >= 0 &&
        placement->size !=
            static_cast<unsigned int>(State()->MigModel(gpu)->profiles[profile].memory_slices)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
  }
  if (placement->start >= static_cast<unsigned int>(tessera::mig::kMaxMemorySlices)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return CreateGi(device, profile_id, static_cast<int>(placement->start), gi);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
  NVML_REQUIRE_GI(gi, slot);
  return ToNvml(State()->DestroyGpuInstance(slot));
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id,
                                       nvmlGpuInstance_t* gis, unsigned int* count) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (gis == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int profile = ProfileById(gpu, profile_id);
  if (profile < 0) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned int n = 0;
  for (int k = 0; k < kMigSlotsPerGpu; ++k) {
    const int slot = MigSlot(gpu, k);
    if (GiSlot(&g_gpu_instances[slot]) < 0) continue;
    if (State()->device(slot).mig_profile != static_cast<uint32_t>(profile)) continue;
    gis[n++] = &g_gpu_instances[slot];
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gi) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (gi == nullptr || id < 1 || id > static_cast<unsigned int>(kMigSlotsPerGpu)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const int slot = MigSlot(gpu, static_cast<int>(id) - 1);
  if (GiSlot(&g_gpu_instances[slot]) < 0) return NVML_ERROR_NOT_FOUND;
  *gi = &g_gpu_instances[slot];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  NVML_REQUIRE_GI(gi, slot);
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::sim::SimDevice& d = State()->device(slot);
  const tessera::mig::MigProfile& p = ProfileOf(slot);
  info->device = tessera::sim::nvml::Handle(d.mig_parent);
  info->id = tessera::sim::nvml::GpuInstanceId(slot);
  info->profileId = p.id;
  info->placement = {d.mig_start, static_cast<unsigned int>(p.memory_slices)};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi,
                                                          unsigned int profile,
                                                          unsigned int eng_profile,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  NVML_REQUIRE_GI(gi, slot);
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::mig::MigProfile& p = ProfileOf(slot);
  if (eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
      static_cast<int>(profile) != tessera::mig::NvmlComputeInstanceProfileFor(p.compute_slices)) {
    return NVML_ERROR_NOT_SUPPORTED;  // only the compute instance spanning the GPU instance
  }
  *info = nvmlComputeInstanceProfileInfo_t{};
  info->id = profile;
  info->sliceCount = static_cast<unsigned int>(p.compute_slices);
  info->instanceCount = 1;
  info->multiprocessorCount = State()->device(slot).sm_count;
  info->sharedCopyEngineCount = static_cast<unsigned int>(p.compute_slices);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gi,
                                                                unsigned int profile_id,
                                                                unsigned int* count) {
  NVML_REQUIRE_GI(gi, slot);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const bool spanning = static_cast<int>(profile_id) ==
                        tessera::mig::NvmlComputeInstanceProfileFor(ProfileOf(slot).compute_slices);
  *count = spanning && !State()->MigDeviceReady(slot) ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile_id,
                                                  nvmlComputeInstance_t* ci) {
  NVML_REQUIRE_GI(gi, slot);
  if (ci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (static_cast<int>(profile_id) !=
      tessera::mig::NvmlComputeInstanceProfileFor(ProfileOf(slot).compute_slices)) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (const Refusal r = State()->CreateComputeInstance(slot); r != Refusal::kNone) {
    return ToNvml(r);
  }
  *ci = &g_compute_instances[slot];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  NVML_REQUIRE_CI(ci, slot);
  return ToNvml(State()->DestroyComputeInstance(slot));
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile_id,
                                                nvmlComputeInstance_t* cis, unsigned int* count) {
  NVML_REQUIRE_GI(gi, slot);
  if (cis == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  if (State()->MigDeviceReady(slot) &&
      static_cast<int>(profile_id) ==
          tessera::mig::NvmlComputeInstanceProfileFor(ProfileOf(slot).compute_slices)) {
    cis[0] = &g_compute_instances[slot];
    *count = 1;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci,
                                           nvmlComputeInstanceInfo_t* info) {
  NVML_REQUIRE_CI(ci, slot);
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::mig::MigProfile& p = ProfileOf(slot);
  info->device = tessera::sim::nvml::Handle(State()->device(slot).mig_parent);
  info->gpuInstance = &g_gpu_instances[slot];
  info->id = 0;
  info->profileId =
      static_cast<unsigned int>(tessera::mig::NvmlComputeInstanceProfileFor(p.compute_slices));
  info->placement = {0, static_cast<unsigned int>(p.compute_slices)};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig) {
  NVML_REQUIRE_DEVICE(device, d);
  if (is_mig == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *is_mig = d >= kMaxGpus ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  NVML_REQUIRE_DEVICE(device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d < kMaxGpus) return NVML_ERROR_NOT_SUPPORTED;
  *id = tessera::sim::nvml::GpuInstanceId(d);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  NVML_REQUIRE_DEVICE(device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d < kMaxGpus) return NVML_ERROR_NOT_SUPPORTED;
  *id = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  NVML_REQUIRE_DEVICE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const tessera::mig::GpuModel* model = d < kMaxGpus ? State()->MigModel(d) : nullptr;
  *count = model == nullptr ? 0 : static_cast<unsigned int>(model->compute_slices);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* mig_device) {
  NVML_REQUIRE_MIG_GPU(device, gpu);
  if (mig_device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::vector<int> devices = MigDevices(gpu);
  if (index >= devices.size()) return NVML_ERROR_NOT_FOUND;
  *mig_device = tessera::sim::nvml::Handle(devices[index]);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig_device,
                                                          nvmlDevice_t* device) {
  NVML_REQUIRE_DEVICE(mig_device, d);
  if (device == nullptr || d < kMaxGpus) return NVML_ERROR_INVALID_ARGUMENT;
  *device = tessera::sim::nvml::Handle(State()->device(d).mig_parent);
  return NVML_SUCCESS;
}

}  // extern "C"
