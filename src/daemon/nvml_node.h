// NVML and the CUDA driver as tesserad uses them: discovering the node's devices, measuring what a
// context costs, and the device's own per-process memory and busy time for the reconciler. The
// libraries, once loaded, stay loaded for the process's life (never unloaded, not even at exit).
// Loads only the libraries it is given; never the shims.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "daemon/reconciler.h"
#include "ledger/memory_ledger.h"

namespace tessera::daemon {

// Loads NVML from `nvml_path`, initialises it and returns the devices the ledger manages (a GPU,
// or a MIG device: daemon/devices.h); what discovery noticed goes to `notes`, one line each.
Result<std::vector<ledger::DeviceInfo>> DiscoverNvmlDevices(const std::string& nvml_path,
                                                            std::vector<std::string>* notes);

// What a context costs on device 0: NVML's used memory around a primary-context retain through
// the driver at `libcuda`. 0 when it cannot be measured (or NVML is not loaded).
uint64_t MeasureContextOverhead(const std::string& libcuda);

// NVML's per-process busy time since the previous call, per device (see the .cc), and its
// compute-process list, for the Reconciler. Errors per call when NVML is not loaded.
BusyLister NvmlBusyLister();
ProcessLister NvmlProcessLister();

}  // namespace tessera::daemon
