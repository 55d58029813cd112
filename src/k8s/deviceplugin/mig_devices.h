// MigDeviceLister: what each MIG device of a `mig` node is (its GPU, that GPU's MIG model, its
// profile and first memory slice), as NVML lists it through src/mig's ListMigDevices. tesserad
// reports MIG devices as devices with a UUID and a size only; the profile (the resource a device
// is served as) and the place (the layout the extender places on) come from here. The NVML
// library is opened by path on first use and kept loaded, as tesserad does; nothing else of the
// plugin opens NVML. No Kubernetes calls, no policy.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/library.h"
#include "k8s/annotations.h"
#include "mig/apply.h"

namespace tessera::k8s {

class MigDeviceLister {
 public:
  // `nvml_path`: the NVML library (absolute), simgpu's on a simulated node.
  explicit MigDeviceLister(std::string nvml_path) : path_(std::move(nvml_path)) {}
  MigDeviceLister(const MigDeviceLister&) = delete;
  MigDeviceLister& operator=(const MigDeviceLister&) = delete;

  // Every MIG device of every GPU in MIG mode, by its MIG- UUID. A GPU whose product name names
  // no MIG model we know is left out with a line in `notes`; an NVML that cannot be opened or
  // listed is an error naming the library and the GPU.
  Result<std::map<std::string, InventoryMig>> List(std::vector<std::string>* notes);

 private:
  std::string path_;
  const DynamicLibrary* library_ = nullptr;  // loaded for the process's life (see List)
  std::optional<mig::MigNvml> nvml_;
};

}  // namespace tessera::k8s
