// Applying a MIG layout to a GPU through NVML, and reading back the MIG devices a GPU has.
//
// ApplyMigLayout is what `tessera mig apply` does, in NVIDIA's order: check that the GPU is a
// model we know with MIG mode on, that the plan fits (planner.h) and agrees with what NVML itself
// says about each profile (device profile ID, slices, possible placements), and that no process
// runs on the GPU or any of its instances; then destroy the compute instances and GPU instances
// there, and create each planned GPU instance at its placement with one compute instance spanning
// it. It never changes the MIG mode (that needs an idle GPU and, on Ampere, a reset: the
// operator's call) and never runs while processes use the GPU.
//
// The NVML library is given by path (simgpu's in tests, the real one on a GPU machine) and called
// through the table below; no NVIDIA header, no Kubernetes, no JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/library.h"
#include "driver/nvml_api.h"
#include "mig/planner.h"

namespace tessera::mig {

// The NVML entry points used here, resolved from one library.
struct MigNvml {
  decltype(&nvmlInit_v2) init;
  decltype(&nvmlDeviceGetCount_v2) count;
  decltype(&nvmlDeviceGetHandleByIndex_v2) handle_by_index;
  decltype(&nvmlDeviceGetName) name;
  decltype(&nvmlDeviceGetUUID) uuid;
  decltype(&nvmlDeviceGetMemoryInfo) memory;
  decltype(&nvmlDeviceGetMigMode) get_mig_mode;
  decltype(&nvmlDeviceGetGpuInstanceProfileInfo) profile_info;
  decltype(&nvmlDeviceGetGpuInstancePossiblePlacements_v2) possible_placements;
  decltype(&nvmlDeviceCreateGpuInstanceWithPlacement) create_gpu_instance;
  decltype(&nvmlGpuInstanceDestroy) destroy_gpu_instance;
  decltype(&nvmlDeviceGetGpuInstances) gpu_instances;
  decltype(&nvmlGpuInstanceGetInfo) gpu_instance_info;
  decltype(&nvmlGpuInstanceCreateComputeInstance) create_compute_instance;
  decltype(&nvmlComputeInstanceDestroy) destroy_compute_instance;
  decltype(&nvmlGpuInstanceGetComputeInstances) compute_instances;
  decltype(&nvmlDeviceGetMaxMigDeviceCount) max_mig_devices;
  decltype(&nvmlDeviceGetMigDeviceHandleByIndex) mig_device_by_index;
  decltype(&nvmlDeviceGetGpuInstanceId) gpu_instance_id;
  decltype(&nvmlDeviceGetComputeRunningProcesses_v3) processes;

  // Resolves every entry point (an error names the first missing one) and calls nvmlInit_v2.
  static Result<MigNvml> Load(const DynamicLibrary& library);
};

// One MIG device (a GPU instance with its compute instance) of a GPU.
struct MigDevice {
  std::string uuid;  // "MIG-..."
  std::string name;  // as NVML names it
  std::string profile;
  int start = 0;  // first memory slice
  unsigned int gpu_instance = 0;
  uint64_t memory_bytes = 0;
};

// The MIG devices of GPU `gpu` (index), by start slot; empty when MIG mode is off. Profile names
// come from `model` when given (matched by device profile ID), else NVML's IDs are printed.
Result<std::vector<MigDevice>> ListMigDevices(const MigNvml& nvml, unsigned int gpu,
                                              const GpuModel* model);

// Creates `counts` on GPU `gpu` as described in the file comment. `model` may be null: it is then
// read from NVML's product name. Returns the MIG devices created, by start slot.
Result<std::vector<MigDevice>> ApplyMigLayout(const MigNvml& nvml, unsigned int gpu,
                                              const GpuModel* model, const ProfileCounts& counts);

}  // namespace tessera::mig
