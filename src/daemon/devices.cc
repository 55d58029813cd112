// DiscoverDevices: NVML's GPUs, MIG devices in place of a MIG-mode GPU (devices.h).
#include "daemon/devices.h"

namespace tessera::daemon {
namespace {

// Fills `out` from an NVML handle; false when NVML cannot describe it.
template <typename UuidFn, typename NameFn, typename MemoryFn>
bool Describe(nvmlDevice_t dev, UuidFn uuid, NameFn name, MemoryFn memory, ManagedDevice* out) {
  char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {}, nm[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  nvmlMemory_t mem{};
  if (uuid(dev, u, sizeof(u)) != NVML_SUCCESS || name(dev, nm, sizeof(nm)) != NVML_SUCCESS ||
      memory(dev, &mem) != NVML_SUCCESS) {
    return false;
  }
  *out = {{u, nm, mem.total}, dev};
  return true;
}

}  // namespace

Result<std::vector<ManagedDevice>> DiscoverDevices(const DynamicLibrary& lib,
                                                   std::vector<std::string>* notes) {
  using Out = Result<std::vector<ManagedDevice>>;
  auto count = lib.Resolve<decltype(&nvmlDeviceGetCount_v2)>("nvmlDeviceGetCount_v2");
  auto handle =
      lib.Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>("nvmlDeviceGetHandleByIndex_v2");
  auto uuid = lib.Resolve<decltype(&nvmlDeviceGetUUID)>("nvmlDeviceGetUUID");
  auto name = lib.Resolve<decltype(&nvmlDeviceGetName)>("nvmlDeviceGetName");
  auto memory = lib.Resolve<decltype(&nvmlDeviceGetMemoryInfo)>("nvmlDeviceGetMemoryInfo");
  for (const Status* s :
       {&count.status(), &handle.status(), &uuid.status(), &name.status(), &memory.status()}) {
    if (!s->ok()) return *s;
  }
  // MIG is optional: an NVML without these calls has no MIG devices to show.
  auto mig_mode = lib.Resolve<decltype(&nvmlDeviceGetMigMode)>("nvmlDeviceGetMigMode");
  auto max_mig =
      lib.Resolve<decltype(&nvmlDeviceGetMaxMigDeviceCount)>("nvmlDeviceGetMaxMigDeviceCount");
  auto mig_by_index = lib.Resolve<decltype(&nvmlDeviceGetMigDeviceHandleByIndex)>(
      "nvmlDeviceGetMigDeviceHandleByIndex");
  const bool mig_api = mig_mode.ok() && max_mig.ok() && mig_by_index.ok();

  unsigned int n = 0;
  if ((*count)(&n) != NVML_SUCCESS) return Out::Error("nvmlDeviceGetCount failed");
  std::vector<ManagedDevice> all;
  for (unsigned int i = 0; i < n; ++i) {
    ManagedDevice gpu;
    nvmlDevice_t dev = nullptr;
    if ((*handle)(i, &dev) != NVML_SUCCESS || !Describe(dev, *uuid, *name, *memory, &gpu)) {
      return Out::Error("NVML could not describe device " + std::to_string(i));
    }
    unsigned int current = 0, pending = 0;
    if (!mig_api || (*mig_mode)(dev, &current, &pending) != NVML_SUCCESS ||
        current != NVML_DEVICE_MIG_ENABLE) {
      all.push_back(gpu);
      continue;
    }
    unsigned int max = 0;
    (*max_mig)(dev, &max);
    std::string listed;
    size_t found = 0;
    for (unsigned int k = 0; k < max; ++k) {
      nvmlDevice_t mig = nullptr;
      if ((*mig_by_index)(dev, k, &mig) != NVML_SUCCESS) continue;
      ManagedDevice d;
      if (!Describe(mig, *uuid, *name, *memory, &d)) {
        return Out::Error("NVML could not describe MIG device " + std::to_string(k) + " of GPU " +
                          std::to_string(i));
      }
      listed += (listed.empty() ? "" : ", ") + d.info.name + " " + d.info.uuid;
      all.push_back(d);
      ++found;
    }
    notes->push_back("GPU " + std::to_string(i) + " (" + gpu.info.name + ", " + gpu.info.uuid +
                     ") is in MIG mode: " +
                     (found == 0
                          ? std::string("it has no MIG devices, so nothing to manage "
                                        "there (create some with tessera mig apply)")
                          : "its " + std::to_string(found) + " MIG device" +
                                (found == 1 ? "" : "s") + " are managed as devices: " + listed));
  }
  if (all.size() > static_cast<size_t>(ledger::kMaxDevices)) {
    for (size_t d = ledger::kMaxDevices; d < all.size(); ++d) {
      notes->push_back("device " + all[d].info.uuid + " (" + all[d].info.name +
                       ") is not managed: the ledger holds " + std::to_string(ledger::kMaxDevices) +
                       " devices; processes cannot register on it (a TESSERA_VISIBLE_DEVICES "
                       "naming it is refused)");
    }
    all.resize(ledger::kMaxDevices);
  }
  return all;
}

}  // namespace tessera::daemon
