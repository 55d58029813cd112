// MigDeviceLister: a node's MIG devices through NVML (see the header).
#include "k8s/deviceplugin/mig_devices.h"

#include <memory>
#include <vector>

namespace tessera::k8s {

Result<std::map<std::string, InventoryMig>> MigDeviceLister::List(std::vector<std::string>* notes) {
  using Out = Result<std::map<std::string, InventoryMig>>;
  if (!nvml_) {
    auto lib = DynamicLibrary::Open(path_);
    if (!lib.ok()) return Out::Error("opening NVML (--nvml): " + lib.error());
    // NVML stays loaded until the process exits (library.h): what nvmlInit set up lives in the
    // library's own globals, and closing it under them would leave that memory unreachable.
    static auto* kept = new std::vector<std::unique_ptr<DynamicLibrary>>();
    kept->push_back(std::make_unique<DynamicLibrary>(std::move(*lib)));
    library_ = kept->back().get();
    auto nvml = mig::MigNvml::Load(*library_);
    if (!nvml.ok()) return Out::Error("NVML at " + path_ + ": " + nvml.error());
    nvml_ = *nvml;
  }
  unsigned int count = 0;
  if (nvmlReturn_t r = nvml_->count(&count); r != NVML_SUCCESS) {
    return Out::Error("NVML at " + path_ + ": nvmlDeviceGetCount failed with " + std::to_string(r));
  }
  std::map<std::string, InventoryMig> out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {}, uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvml_->handle_by_index(i, &dev) != NVML_SUCCESS ||
        nvml_->name(dev, name, sizeof(name)) != NVML_SUCCESS ||
        nvml_->uuid(dev, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      return Out::Error("NVML at " + path_ + " cannot describe GPU " + std::to_string(i));
    }
    unsigned int current = 0, pending = 0;
    if (nvml_->get_mig_mode(dev, &current, &pending) != NVML_SUCCESS ||
        current != NVML_DEVICE_MIG_ENABLE) {
      continue;
    }
    const mig::GpuModel* model = mig::GpuModelFromProductName(name);
    if (model == nullptr) {
      notes->push_back("GPU " + std::to_string(i) + " (" + name + ", " + uuid +
                       ") is in MIG mode but no MIG model we know by its name (" +
                       mig::ModelNames() + "); its MIG devices are not served");
      continue;
    }
    auto devices = mig::ListMigDevices(*nvml_, i, model);
    if (!devices.ok()) return devices.status();
    for (const mig::MigDevice& d : *devices) {
      if (!mig::FindProfile(*model, d.profile, "").ok()) {
        notes->push_back("MIG device " + d.uuid + " of GPU " + std::to_string(i) + " has NVML's " +
                         d.profile + ", no " + std::string(model->name) +
                         " profile we know; it is not served");
        continue;
      }
      out[d.uuid] = InventoryMig{uuid, std::string(model->name), d.profile, d.start};
    }
  }
  return out;
}

}  // namespace tessera::k8s
