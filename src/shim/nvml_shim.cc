// The libnvidia-ml.so.1 shim: inside a container, NVML reports the container's view, so that
// nvidia-smi and monitoring agents show what the tenant owns. Memory info: total = the container's
// limit (capped at the physical total), used = what the container holds, free = the rest (never
// more than the device really has free). Running compute processes: only the container's own
// processes, each with the memory the ledger charged it. An unlimited container, a disabled shim
// or an unreachable daemon (with TESSERA_FAIL_OPEN=1) see the real values. Every other NVML entry
// point is a generated trampoline to the real library.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "driver/nvml_api.h"
#include "shim/real_library.h"
#include "shim/tenant.h"

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
enum NvmlSymbol : size_t {
#define TESSERA_SYMBOL(name, index) k_##name = index,
#include "nvml_symbols.inc"
#undef TESSERA_SYMBOL
  kNvmlSymbolCount = TESSERA_nvml_SYMBOL_COUNT
};
const char* const kNvmlNames[] = {
#define TESSERA_SYMBOL(name, index) #name,
#include "nvml_symbols.inc"
#undef TESSERA_SYMBOL
};
const char* const kNvmlSearchPaths[] = {
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/usr/lib/wsl/lib/libnvidia-ml.so.1", nullptr};
nvmlReturn_t MissingNvmlSymbol() { return NVML_ERROR_FUNCTION_NOT_FOUND; }
}  // namespace

extern "C" {
__attribute__((visibility("hidden"))) void* tessera_nvml_real[kNvmlSymbolCount + 1];
__attribute__((visibility("hidden"))) void tessera_nvml_resolve();
}

namespace {

using tessera::shim::Mode;
using tessera::shim::Tenant;

tessera::shim::RealLibrary g_real{"libnvidia-ml.so.1",
                                  "TESSERA_REAL_NVML",
                                  kNvmlSearchPaths,
                                  kNvmlNames,
                                  kNvmlSymbolCount,
                                  tessera_nvml_real,
                                  reinterpret_cast<void*>(&MissingNvmlSymbol),
                                  reinterpret_cast<const void*>(&tessera_nvml_resolve)};
std::string g_real_error;
std::atomic<bool> g_real_ok{false};

template <size_t Index, typename Fn>
Fn Real() {
  void* p = __atomic_load_n(&tessera_nvml_real[Index], __ATOMIC_ACQUIRE);
  if (__builtin_expect(p == nullptr, 0)) {
    tessera_nvml_resolve();
    p = tessera_nvml_real[Index];
  }
  return reinterpret_cast<Fn>(p);
}
#define REAL(name) (Real<k_##name, decltype(&::name)>())

// Registers as an observer of the container on the first NVML initialisation.
nvmlReturn_t Observe(nvmlReturn_t real_status) {
  if (real_status != NVML_SUCCESS) return real_status;
  const CUresult r = tessera::shim::InitialiseTenant(/*observer=*/true);
  if (r == CUDA_ERROR_INVALID_VALUE) return NVML_ERROR_INVALID_ARGUMENT;
  if (r != CUDA_SUCCESS) return NVML_ERROR_UNINITIALIZED;  // fail closed, as the CUDA shim does
  return NVML_SUCCESS;
}

// The ledger index of `device`, found by UUID (a ledger device is a GPU or a MIG device, so NVML's
// index does not name it), or -1 when we do not account it: the device is not in the ledger, or a
// GPU in MIG mode (its MIG devices are the ledger's).
int LedgerIndex(nvmlDevice_t device) {
  auto& t = Tenant();
  if (t.mode.load() != Mode::kEnforcing) return -1;
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (REAL(nvmlDeviceGetUUID)(device, uuid, sizeof(uuid)) != NVML_SUCCESS) return -1;
  const auto* layout = t.ledger->layout();
  for (int d = 0; d < t.ledger->device_count(); ++d) {
    if (std::strncmp(layout->devices[d].uuid, uuid, sizeof(layout->devices[d].uuid)) == 0) {
      return d;
    }
  }
  return -1;
}

template <typename Info, typename Fn>
nvmlReturn_t ContainerProcesses(nvmlDevice_t device, unsigned int* count, Info* infos, Fn real) {
  const int d = LedgerIndex(device);
  if (d < 0 || count == nullptr) return real(device, count, infos);
  auto& t = Tenant();
  const auto* layout = t.ledger->layout();
  unsigned int n = 0;
  const unsigned int capacity = infos == nullptr ? 0 : *count;
  for (int p = 0; p < tessera::ledger::kMaxProcesses; ++p) {
    const auto& slot = layout->processes[p];
    if (slot.state.load() != tessera::ledger::kLive || slot.container.load() != t.container) {
      continue;
    }
    if (n < capacity) {
      Info info{};
      // The pid as the container sees it: nvidia-smi inside shows the tenant's own processes.
      info.pid = static_cast<unsigned int>(slot.local_pid.load());
      info.usedGpuMemory = t.ledger->process(static_cast<uint32_t>(p)).used[d].load();
      infos[n] = info;
    }
    ++n;
  }
  const bool fits = n <= capacity;
  *count = n;
  return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

}  // namespace

void tessera_nvml_resolve() {
  static std::once_flag once;
  std::call_once(once, [] { g_real_ok.store(tessera::shim::ResolveAll(g_real, &g_real_error)); });
}

TESSERA_EXPORT nvmlReturn_t nvmlInit_v2(void) {
  tessera_nvml_resolve();
  if (!g_real_ok.load()) {
    std::fprintf(stderr, "tessera: %s\n", g_real_error.c_str());
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  return Observe(REAL(nvmlInit_v2)());
}

TESSERA_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

TESSERA_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  tessera_nvml_resolve();
  if (!g_real_ok.load()) {
    std::fprintf(stderr, "tessera: %s\n", g_real_error.c_str());
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  return Observe(REAL(nvmlInitWithFlags)(flags));
}

namespace {
// Rewrites NVML's (total, used, free) into the container's view of ledger device `d`. Returns
// false (leaving the real values) for an unlimited container.
bool ContainerView(int d, unsigned long long* total, unsigned long long* used,
                   unsigned long long* free) {
  auto& t = Tenant();
  const uint64_t limit = t.ledger->Limit(d);
  if (limit == tessera::ledger::kUnlimited) return false;
  const uint64_t capped = std::min<uint64_t>(limit, *total);
  const uint64_t in_use = std::min<uint64_t>(t.ledger->Used(d), capped);
  *free = std::min<uint64_t>(capped - in_use, *free);
  *total = capped;
  *used = in_use;
  return true;
}
}  // namespace

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo)(device, memory);
  const int d = LedgerIndex(device);
  if (r == NVML_SUCCESS && memory != nullptr && d >= 0) {
    ContainerView(d, &memory->total, &memory->used, &memory->free);
  }
  return r;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                       nvmlMemory_v2_t* memory) {
  const nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo_v2)(device, memory);
  const int d = LedgerIndex(device);
  if (r == NVML_SUCCESS && memory != nullptr && d >= 0 &&
      ContainerView(d, &memory->total, &memory->used, &memory->free)) {
    memory->reserved = 0;  // the container's view has no driver reserve of its own
  }
  return r;
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                 unsigned int* count,
                                                                 nvmlProcessInfo_v1_t* infos) {
  return ContainerProcesses(device, count, infos, REAL(nvmlDeviceGetComputeRunningProcesses));
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nvmlProcessInfo_v2_t* infos) {
  return ContainerProcesses(device, count, infos, REAL(nvmlDeviceGetComputeRunningProcesses_v2));
}

TESSERA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                    unsigned int* count,
                                                                    nvmlProcessInfo_t* infos) {
  return ContainerProcesses(device, count, infos, REAL(nvmlDeviceGetComputeRunningProcesses_v3));
}
