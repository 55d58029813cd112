// The devices tesserad manages, as NVML shows them: each GPU, except that a GPU in MIG mode is
// replaced by its MIG devices (a GPU instance with its compute instance, UUID "MIG-..."), each a
// device of its own with its own memory cap and arbiter. A MIG GPU without MIG devices brings
// none. The ledger holds ledger::kMaxDevices devices; beyond that, devices are left out in NVML
// order with one note each (nothing can register on them: TESSERA_VISIBLE_DEVICES naming one is
// refused), never silently.
//
// Reads NVML only (through the library it is given); no policy, no ledger writes.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "driver/library.h"
#include "driver/nvml_api.h"
#include "ledger/memory_ledger.h"

namespace tessera::daemon {

struct ManagedDevice {
  ledger::DeviceInfo info;
  nvmlDevice_t handle = nullptr;  // NVML's handle: the GPU's, or the MIG device's
};

// Lists the devices of an initialised NVML. `notes` gets one line per GPU in MIG mode and per
// device left out.
Result<std::vector<ManagedDevice>> DiscoverDevices(const DynamicLibrary& nvml,
                                                   std::vector<std::string>* notes);

}  // namespace tessera::daemon
