// nvml_tenant: a test program linked against the NVML shim (as nvidia-smi links libnvidia-ml.so.1),
// with TESSERA_REAL_NVML pointing at simgpu. Prints what NVML reports for device 0 as key=value
// lines: memory total/used/free and the running compute processes. Test tooling only.
#include <cstdio>

#include "driver/nvml_api.h"

int main() {
  const nvmlReturn_t init = nvmlInit_v2();
  if (init != NVML_SUCCESS) {
    std::printf("init_error=%d\n", static_cast<int>(init));
    return 3;
  }
  nvmlDevice_t dev = nullptr;
  if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) return 1;
  nvmlMemory_t mem{};
  if (nvmlDeviceGetMemoryInfo(dev, &mem) != NVML_SUCCESS) return 1;
  std::printf("total=%llu\nused=%llu\nfree=%llu\n", mem.total, mem.used, mem.free);
  nvmlMemory_v2_t mem2{};
  mem2.version = nvmlMemory_v2;
  if (nvmlDeviceGetMemoryInfo_v2(dev, &mem2) != NVML_SUCCESS) return 1;
  std::printf("v2_total=%llu\n", mem2.total);
  nvmlProcessInfo_t procs[64];
  unsigned int n = 64;
  if (nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs) != NVML_SUCCESS) return 1;
  std::printf("processes=%u\n", n);
  for (unsigned int i = 0; i < n; ++i) {
    std::printf("pid_%u=%u\nmem_%u=%llu\n", i, procs[i].pid, i, procs[i].usedGpuMemory);
  }
  nvmlShutdown();
  return 0;
}
