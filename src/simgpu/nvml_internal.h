// What simgpu's two NVML files share: the device handles (one per device slot of SimState: GPUs,
// then MIG devices), initialisation state and string copying. Internal to libtessera-simgpu.so;
// the C ABI entry points live in nvml_api.cc (devices, memory, processes) and nvml_mig.cc (MIG).
#pragma once

#include "driver/nvml_api.h"

namespace tessera::sim::nvml {

// True after nvmlInit and before the matching nvmlShutdown.
bool Initialised();
// The handle of device slot `slot`, and back (-1 for a pointer that is no handle of ours).
nvmlDevice_t Handle(int slot);
int Slot(nvmlDevice_t device);
// The device slot a handle names if it is usable now: a GPU of the machine, or a MIG device that
// exists (kMigReady). -1 otherwise.
int DeviceIndex(nvmlDevice_t device);
// Copies `text` into the caller's buffer of `length` bytes, NUL included.
nvmlReturn_t CopyString(const char* text, char* out, unsigned int length);
// The GPU instance ID NVML reports for instance slot `slot` (1 to 7 within its GPU).
unsigned int GpuInstanceId(int slot);

}  // namespace tessera::sim::nvml

#define NVML_REQUIRE_DEVICE(device, index)                                 \
  if (!tessera::sim::nvml::Initialised()) return NVML_ERROR_UNINITIALIZED; \
  const int index = tessera::sim::nvml::DeviceIndex(device);               \
  if (index < 0) return NVML_ERROR_INVALID_ARGUMENT
