// NVML and the CUDA driver as tesserad uses them (nvml_node.h): resolved by name from the loaded
// libraries; the libraries and NVML's device handles are kept for the process's life.
#include "daemon/nvml_node.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "daemon/devices.h"
#include "driver/cuda_api.h"
#include "driver/library.h"
#include "driver/nvml_api.h"

// NVML stays loaded for the daemon's life and is never unloaded (not even at exit: its own
// globals must outlive every use). External linkage keeps the pointer, and so the object, alive.
tessera::DynamicLibrary* tesserad_nvml_library = nullptr;
tessera::DynamicLibrary* tesserad_cuda_library = nullptr;
// NVML's handle of each ledger device (a GPU, or a MIG device: see daemon/devices.h).
std::vector<nvmlDevice_t> tesserad_nvml_handles;

namespace tessera::daemon {

Result<std::vector<ledger::DeviceInfo>> DiscoverNvmlDevices(const std::string& nvml_path,
                                                            std::vector<std::string>* notes) {
  using Devices = std::vector<ledger::DeviceInfo>;
  auto lib = DynamicLibrary::Open(nvml_path);
  if (!lib.ok()) return lib.status();
  auto init = lib->Resolve<decltype(&nvmlInit_v2)>("nvmlInit_v2");
  if (!init.ok()) return init.status();
  if (nvmlReturn_t r = (*init)(); r != NVML_SUCCESS) {
    return Result<Devices>::Error("nvmlInit_v2 failed with " + std::to_string(r) + " (" +
                                  nvml_path + ")");
  }
  auto managed = DiscoverDevices(*lib, notes);
  if (!managed.ok()) return managed.status();
  Devices devices;
  for (const auto& m : *managed) {
    devices.push_back(m.info);
    tesserad_nvml_handles.push_back(m.handle);
  }
  tesserad_nvml_library = new DynamicLibrary(std::move(*lib));
  return devices;
}

uint64_t MeasureContextOverhead(const std::string& libcuda) {
  auto cuda = DynamicLibrary::Open(libcuda);
  if (!cuda.ok() || tesserad_nvml_library == nullptr) return 0;
  auto init = cuda->Resolve<decltype(&cuInit)>("cuInit");
  auto retain = cuda->Resolve<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  auto release =
      cuda->Resolve<decltype(&cuDevicePrimaryCtxRelease_v2)>("cuDevicePrimaryCtxRelease_v2");
  auto handle = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
      "nvmlDeviceGetHandleByIndex_v2");
  auto memory =
      tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetMemoryInfo)>("nvmlDeviceGetMemoryInfo");
  if (!init.ok() || !retain.ok() || !release.ok() || !handle.ok() || !memory.ok()) return 0;
  nvmlDevice_t dev = nullptr;
  nvmlMemory_t before{}, after{};
  CUcontext ctx = nullptr;
  if ((*init)(0) != CUDA_SUCCESS || (*handle)(0, &dev) != NVML_SUCCESS ||
      (*memory)(dev, &before) != NVML_SUCCESS || (*retain)(&ctx, 0) != CUDA_SUCCESS) {
    return 0;
  }
  const bool ok = (*memory)(dev, &after) == NVML_SUCCESS;
  (*release)(0);
  // Keep the driver loaded: unloading a CUDA driver in a running process is not supported.
  tesserad_cuda_library = new DynamicLibrary(std::move(*cuda));
  return ok && after.used > before.used ? after.used - before.used : 0;
}

// The device's own per-process busy time for the reconciler's GPU-time check: NVML's process
// utilisation since the newest sample of the previous call (per GPU). A process's samples' mean
// SM utilisation times the interval between the two calls is the GPU time the device saw it use.
// The first call per GPU only sets the mark (no interval yet).
BusyLister NvmlBusyLister() {
  using List = std::vector<DeviceProcess>;
  if (tesserad_nvml_library == nullptr) {
    return [](int) { return Result<List>::Error("NVML is not loaded"); };
  }
  auto util = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetProcessUtilization)>(
      "nvmlDeviceGetProcessUtilization");
  auto handle = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
      "nvmlDeviceGetHandleByIndex_v2");
  if (!util.ok() || !handle.ok()) {
    return [](int) { return Result<List>::Error("NVML has no nvmlDeviceGetProcessUtilization"); };
  }
  auto marks = std::make_shared<std::map<int, unsigned long long>>();  // per GPU, newest sample
  // Per GPU, when the previous call was made (by this process's clock).
  auto called = std::make_shared<std::map<int, std::chrono::steady_clock::time_point>>();
  return [util = *util, handle = *handle, marks, called](int device) -> Result<List> {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = handle(static_cast<unsigned int>(device), &dev); r != NVML_SUCCESS) {
      return Result<List>::Error("nvmlDeviceGetHandleByIndex_v2 failed with " + std::to_string(r));
    }
    const unsigned long long since = (*marks)[device];
    const auto now = std::chrono::steady_clock::now();
    const bool first_call = called->count(device) == 0;
    const double elapsed_ns =
        first_call ? 0.0
                   : std::chrono::duration<double, std::nano>(now - (*called)[device]).count();
    (*called)[device] = now;
    std::vector<nvmlProcessUtilizationSample_t> samples(64);
    unsigned int count = 0;
    nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      count = static_cast<unsigned int>(samples.size());
      r = util(dev, samples.data(), &count, since);
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) samples.resize(static_cast<size_t>(count) + 16);
    }
    if (r == NVML_ERROR_NOT_FOUND)
      count = 0;  // no sample since the mark: nobody ran
    else if (r != NVML_SUCCESS) {
      return Result<List>::Error("nvmlDeviceGetProcessUtilization failed with " +
                                 std::to_string(r));
    }
    unsigned long long newest = since;
    std::map<int32_t, std::pair<double, int>> mean;  // pid -> (sum of smUtil, samples)
    for (unsigned int i = 0; i < count; ++i) {
      newest = std::max(newest, samples[i].timeStamp);
      auto& [sum, n] = mean[static_cast<int32_t>(samples[i].pid)];
      sum += std::min(samples[i].smUtil, 100u);
      ++n;
    }
    (*marks)[device] = newest;
    List out;
    // The first call only sets the mark. Samples since the mark were taken since the previous
    // call, so they cover at most the time since then: also when the mark is old (no process ran
    // in between) or unset (none had run yet, so the previous calls found nothing).
    if (first_call || newest <= since) return out;
    const double interval_ns =
        since == 0 ? elapsed_ns
                   : std::min(static_cast<double>(newest - since) * 1000.0, elapsed_ns);
    for (const auto& [pid, sum_n] : mean) {
      const double percent = sum_n.first / sum_n.second;
      out.push_back({pid, static_cast<uint64_t>(percent / 100.0 * interval_ns)});
    }
    return out;
  };
}

// The device's own per-process memory view for the reconciler: NVML's compute-process list
// (_v3, else _v2), growing the buffer while processes come and go.
ProcessLister NvmlProcessLister() {
  using List = std::vector<DeviceProcess>;
  if (tesserad_nvml_library == nullptr) {
    return [](int) { return Result<List>::Error("NVML is not loaded"); };
  }
  using ListFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
  auto v3 = tesserad_nvml_library->Resolve<ListFn>("nvmlDeviceGetComputeRunningProcesses_v3");
  auto v2 = tesserad_nvml_library->Resolve<ListFn>("nvmlDeviceGetComputeRunningProcesses_v2");
  ListFn list = v3.ok() ? *v3 : v2.ok() ? *v2 : nullptr;
  if (list == nullptr) {
    return [](int) {
      return Result<List>::Error("NVML has no nvmlDeviceGetComputeRunningProcesses_v3/_v2");
    };
  }
  return [list](int device) -> Result<List> {
    if (device < 0 || static_cast<size_t>(device) >= tesserad_nvml_handles.size()) {
      return Result<List>::Error("no NVML handle for device " + std::to_string(device));
    }
    nvmlDevice_t dev = tesserad_nvml_handles[static_cast<size_t>(device)];
    std::vector<nvmlProcessInfo_t> infos(64);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned int count = static_cast<unsigned int>(infos.size());
      const nvmlReturn_t r = list(dev, &count, infos.data());
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        infos.resize(static_cast<size_t>(count) + 16);
        continue;
      }
      if (r != NVML_SUCCESS) {
        return Result<List>::Error("nvmlDeviceGetComputeRunningProcesses failed with " +
                                   std::to_string(r));
      }
      List out;
      for (unsigned int i = 0; i < count; ++i) {
        // Not available (a container without the right to see other processes): unknown, skip.
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
          continue;
        }
        out.push_back({static_cast<int32_t>(infos[i].pid), infos[i].usedGpuMemory});
      }
      return out;
    }
    return Result<List>::Error("the process list kept growing");
  };
}

}  // namespace tessera::daemon
