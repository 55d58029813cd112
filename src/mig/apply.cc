// ApplyMigLayout and ListMigDevices over NVML (see apply.h). Every refusal names the GPU, what was
// found and what to do; nothing here changes the MIG mode.
#include "mig/apply.h"

#include <algorithm>
#include <set>

namespace tessera::mig {
namespace {

std::string Code(nvmlReturn_t r) { return "NVML error " + std::to_string(static_cast<int>(r)); }

std::string GpuLabel(unsigned int gpu, const std::string& name) {
  return "GPU " + std::to_string(gpu) + " (" + name + ")";
}

template <typename Fn>
Status ResolveInto(const DynamicLibrary& lib, const char* symbol, Fn* out) {
  auto fn = lib.Resolve<Fn>(symbol);
  if (!fn.ok()) return fn.status();
  *out = *fn;
  return Status::Ok();
}

// The MIG devices of `dev`, with their GPU instance IDs and handles.
struct Found {
  nvmlDevice_t handle;
  unsigned int gpu_instance;
};

Result<std::vector<Found>> MigHandles(const MigNvml& nvml, nvmlDevice_t dev,
                                      const std::string& label) {
  std::vector<Found> out;
  unsigned int max = 0;
  if (nvmlReturn_t r = nvml.max_mig_devices(dev, &max); r != NVML_SUCCESS) {
    return Result<std::vector<Found>>::Error(label +
                                             ": nvmlDeviceGetMaxMigDeviceCount: " + Code(r));
  }
  for (unsigned int i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    const nvmlReturn_t r = nvml.mig_device_by_index(dev, i, &mig);
    if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_INVALID_ARGUMENT) continue;
    if (r != NVML_SUCCESS) {
      return Result<std::vector<Found>>::Error(label + ": nvmlDeviceGetMigDeviceHandleByIndex(" +
                                               std::to_string(i) + "): " + Code(r));
    }
    unsigned int gi = 0;
    if (nvmlReturn_t g = nvml.gpu_instance_id(mig, &gi); g != NVML_SUCCESS) {
      return Result<std::vector<Found>>::Error(label + ": nvmlDeviceGetGpuInstanceId: " + Code(g));
    }
    out.push_back({mig, gi});
  }
  return out;
}

// The pids of compute processes on `dev`.
Result<std::set<unsigned int>> Pids(const MigNvml& nvml, nvmlDevice_t dev,
                                    const std::string& label) {
  std::vector<nvmlProcessInfo_t> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int n = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t r = nvml.processes(dev, &n, infos.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(n + 16);
      continue;
    }
    if (r != NVML_SUCCESS) {
      return Result<std::set<unsigned int>>::Error(
          label + ": nvmlDeviceGetComputeRunningProcesses_v3: " + Code(r));
    }
    std::set<unsigned int> pids;
    for (unsigned int i = 0; i < n; ++i) pids.insert(infos[i].pid);
    return pids;
  }
  return Result<std::set<unsigned int>>::Error(label + ": the process list kept growing");
}

}  // namespace

Result<MigNvml> MigNvml::Load(const DynamicLibrary& lib) {
  MigNvml n{};
  for (Status s : {
           ResolveInto(lib, "nvmlInit_v2", &n.init),
           ResolveInto(lib, "nvmlDeviceGetCount_v2", &n.count),
           ResolveInto(lib, "nvmlDeviceGetHandleByIndex_v2", &n.handle_by_index),
           ResolveInto(lib, "nvmlDeviceGetName", &n.name),
           ResolveInto(lib, "nvmlDeviceGetUUID", &n.uuid),
           ResolveInto(lib, "nvmlDeviceGetMemoryInfo", &n.memory),
           ResolveInto(lib, "nvmlDeviceGetMigMode", &n.get_mig_mode),
           ResolveInto(lib, "nvmlDeviceGetGpuInstanceProfileInfo", &n.profile_info),
           ResolveInto(lib, "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                       &n.possible_placements),
           ResolveInto(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", &n.create_gpu_instance),
           ResolveInto(lib, "nvmlGpuInstanceDestroy", &n.destroy_gpu_instance),
           ResolveInto(lib, "nvmlDeviceGetGpuInstances", &n.gpu_instances),
           ResolveInto(lib, "nvmlGpuInstanceGetInfo", &n.gpu_instance_info),
           ResolveInto(lib, "nvmlGpuInstanceCreateComputeInstance", &n.create_compute_instance),
           ResolveInto(lib, "nvmlComputeInstanceDestroy", &n.destroy_compute_instance),
           ResolveInto(lib, "nvmlGpuInstanceGetComputeInstances", &n.compute_instances),
           ResolveInto(lib, "nvmlDeviceGetMaxMigDeviceCount", &n.max_mig_devices),
           ResolveInto(lib, "nvmlDeviceGetMigDeviceHandleByIndex", &n.mig_device_by_index),
           ResolveInto(lib, "nvmlDeviceGetGpuInstanceId", &n.gpu_instance_id),
           ResolveInto(lib, "nvmlDeviceGetComputeRunningProcesses_v3", &n.processes),
       }) {
    if (!s.ok()) return s;
  }
  if (nvmlReturn_t r = n.init(); r != NVML_SUCCESS) {
    return Result<MigNvml>::Error("nvmlInit_v2 failed with " + Code(r) + " (" + lib.path() + ")");
  }
  return n;
}

Result<std::vector<MigDevice>> ListMigDevices(const MigNvml& nvml, unsigned int gpu,
                                              const GpuModel* model) {
  using Out = Result<std::vector<MigDevice>>;
  nvmlDevice_t dev = nullptr;
  unsigned int count = 0;
  nvml.count(&count);
  if (nvmlReturn_t r = nvml.handle_by_index(gpu, &dev); r != NVML_SUCCESS) {
    return Out::Error("GPU " + std::to_string(gpu) + ": no such GPU; this node has " +
                      std::to_string(count) + " (" + Code(r) + ")");
  }
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  nvml.name(dev, name, sizeof(name));
  const std::string label = GpuLabel(gpu, name);
  unsigned int current = 0, pending = 0;
  if (nvml.get_mig_mode(dev, &current, &pending) != NVML_SUCCESS ||
      current != NVML_DEVICE_MIG_ENABLE) {
    return std::vector<MigDevice>{};
  }
  auto found = MigHandles(nvml, dev, label);
  if (!found.ok()) return found.status();
  // GPU instance ID -> (profile, start), from the GPU instances of every profile.
  std::vector<MigDevice> out;
  for (const Found& f : *found) {
    MigDevice d;
    d.gpu_instance = f.gpu_instance;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {}, mig_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    nvmlMemory_t mem{};
    nvml.uuid(f.handle, uuid, sizeof(uuid));
    nvml.name(f.handle, mig_name, sizeof(mig_name));
    nvml.memory(f.handle, &mem);
    d.uuid = uuid;
    d.name = mig_name;
    d.memory_bytes = mem.total;
    out.push_back(d);
  }
  // Profiles and placements from the GPU instances (profile IDs 0 to 63 cover every device).
  for (unsigned int id = 0; id < 64; ++id) {
    nvmlGpuInstance_t gis[8] = {};
    unsigned int n = 0;
    if (nvml.gpu_instances(dev, id, gis, &n) != NVML_SUCCESS) continue;
    for (unsigned int i = 0; i < n && i < 8; ++i) {
      nvmlGpuInstanceInfo_t info{};
      if (nvml.gpu_instance_info(gis[i], &info) != NVML_SUCCESS) continue;
      for (MigDevice& d : out) {
        if (d.gpu_instance != info.id) continue;
        d.start = static_cast<int>(info.placement.start);
        d.profile = "profile " + std::to_string(info.profileId);
        if (model != nullptr) {
          for (const MigProfile& p : model->Profiles()) {
            if (p.id == info.profileId) d.profile = std::string(p.name);
          }
        }
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const MigDevice& a, const MigDevice& b) { return a.start < b.start; });
  return out;
}

Result<std::vector<MigDevice>> ApplyMigLayout(const MigNvml& nvml, unsigned int gpu,
                                              const GpuModel* model, const ProfileCounts& counts) {
  using Out = Result<std::vector<MigDevice>>;
  unsigned int count = 0;
  nvml.count(&count);
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = nvml.handle_by_index(gpu, &dev); r != NVML_SUCCESS) {
    return Out::Error("--index=\"" + std::to_string(gpu) + "\": no such GPU; this node has " +
                      std::to_string(count) + " (" + Code(r) + ")");
  }
  char name_buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  nvml.name(dev, name_buf, sizeof(name_buf));
  const std::string name = name_buf;
  const std::string label = GpuLabel(gpu, name);
  if (model == nullptr) model = GpuModelFromProductName(name);
  if (model == nullptr) {
    return Out::Error(label + " is no MIG-capable model we know by its name; name it with --gpu " +
                      "MODEL, one of " + ModelNames());
  }
  unsigned int current = 0, pending = 0;
  if (nvmlReturn_t r = nvml.get_mig_mode(dev, &current, &pending); r != NVML_SUCCESS) {
    return Out::Error(label + " does not support MIG (nvmlDeviceGetMigMode: " + Code(r) + ")");
  }
  if (current != NVML_DEVICE_MIG_ENABLE) {
    return Out::Error(label + ": MIG mode is off. Turn it on with `nvidia-smi -i " +
                      std::to_string(gpu) +
                      " -mig 1` while nothing runs on the GPU (Ampere GPUs also need a reset); "
                      "tessera does not change the MIG mode");
  }
  auto layout = Place(*model, counts);
  if (!layout.ok()) return layout.status();

  // The tables against the driver: every planned profile's ID, slices and start slots.
  for (int i = 0; i < model->profile_count; ++i) {
    if (counts[i] == 0) continue;
    const MigProfile& p = model->profiles[i];
    nvmlGpuInstanceProfileInfo_t info{};
    if (nvmlReturn_t r = nvml.profile_info(dev, p.nvml_profile, &info); r != NVML_SUCCESS) {
      return Out::Error(label + ": NVML knows no profile " + std::string(p.name) +
                        " (NVML_GPU_INSTANCE_PROFILE constant " + std::to_string(p.nvml_profile) +
                        ": " + Code(r) + "); is it really a " + std::string(model->name) + "?");
    }
    if (info.id != p.id || info.sliceCount != static_cast<unsigned int>(p.compute_slices)) {
      return Out::Error(label + ": NVML describes " + std::string(p.name) + " as profile ID " +
                        std::to_string(info.id) + " with " + std::to_string(info.sliceCount) +
                        " compute slices; the " + std::string(model->name) + " table says ID " +
                        std::to_string(p.id) + " with " + std::to_string(p.compute_slices) +
                        "; refusing to guess (pass the right --gpu MODEL)");
    }
    nvmlGpuInstancePlacement_t placements[8] = {};
    unsigned int n = 8;
    if (nvmlReturn_t r = nvml.possible_placements(dev, p.id, placements, &n); r != NVML_SUCCESS) {
      return Out::Error(label + ": nvmlDeviceGetGpuInstancePossiblePlacements_v2(" +
                        std::string(p.name) + "): " + Code(r));
    }
    for (const PlacedInstance& planned : layout->instances) {
      if (planned.profile != &p) continue;
      bool allowed = false;
      for (unsigned int k = 0; k < n; ++k) {
        allowed = allowed || (placements[k].start == static_cast<unsigned int>(planned.start) &&
                              placements[k].size == static_cast<unsigned int>(p.memory_slices));
      }
      if (!allowed) {
        return Out::Error(label + ": NVML does not offer " + std::string(p.name) + " at slice " +
                          std::to_string(planned.start) + "; the table and the driver disagree");
      }
    }
  }

  // Nothing may run on the GPU or its instances.
  auto found = MigHandles(nvml, dev, label);
  if (!found.ok()) return found.status();
  auto pids = Pids(nvml, dev, label);
  if (!pids.ok()) return pids.status();
  for (const Found& f : *found) {
    auto more = Pids(nvml, f.handle, label);
    if (!more.ok()) return more.status();
    pids->insert(more->begin(), more->end());
  }
  if (!pids->empty()) {
    std::string list;
    for (unsigned int pid : *pids) list += (list.empty() ? "" : ", ") + std::to_string(pid);
    return Out::Error(label + ": " + std::to_string(pids->size()) + " process" +
                      (pids->size() == 1 ? "" : "es") + " run on the GPU (pid " + list +
                      "); stop them before changing its MIG layout");
  }

  // Destroy what is there: compute instances first, then GPU instances.
  for (const MigProfile& p : model->Profiles()) {
    nvmlGpuInstance_t gis[8] = {};
    unsigned int n = 0;
    if (nvmlReturn_t r = nvml.gpu_instances(dev, p.id, gis, &n); r != NVML_SUCCESS) {
      return Out::Error(label + ": nvmlDeviceGetGpuInstances(" + std::string(p.name) +
                        "): " + Code(r));
    }
    for (unsigned int i = 0; i < n && i < 8; ++i) {
      for (unsigned int ci_profile = 0; ci_profile < 8; ++ci_profile) {
        nvmlComputeInstance_t cis[8] = {};
        unsigned int m = 0;
        if (nvml.compute_instances(gis[i], ci_profile, cis, &m) != NVML_SUCCESS) continue;
        for (unsigned int j = 0; j < m && j < 8; ++j) {
          if (nvmlReturn_t r = nvml.destroy_compute_instance(cis[j]); r != NVML_SUCCESS) {
            return Out::Error(label + ": destroying a compute instance of a " +
                              std::string(p.name) + " instance failed: " + Code(r));
          }
        }
      }
      if (nvmlReturn_t r = nvml.destroy_gpu_instance(gis[i]); r != NVML_SUCCESS) {
        return Out::Error(label + ": destroying a " + std::string(p.name) +
                          " GPU instance failed: " + Code(r));
      }
    }
  }

  // Create the plan, largest first (the order NVIDIA's tools use), each at its placement.
  std::vector<PlacedInstance> order = layout->instances;
  std::stable_sort(order.begin(), order.end(),
                   [](const PlacedInstance& a, const PlacedInstance& b) {
                     return a.profile->memory_slices > b.profile->memory_slices;
                   });
  std::string created;
  for (const PlacedInstance& i : order) {
    const MigProfile& p = *i.profile;
    const std::string what = std::string(p.name) + "@" + std::to_string(i.start);
    const std::string so_far = created.empty() ? "nothing" : created;
    nvmlGpuInstancePlacement_t placement{static_cast<unsigned int>(i.start),
                                         static_cast<unsigned int>(p.memory_slices)};
    nvmlGpuInstance_t gi = nullptr;
    if (nvmlReturn_t r = nvml.create_gpu_instance(dev, p.id, &placement, &gi); r != NVML_SUCCESS) {
      return Out::Error(label + ": creating GPU instance " + what + " failed: " + Code(r) +
                        "; created before it: " + so_far);
    }
    nvmlComputeInstance_t ci = nullptr;
    const int ci_profile = NvmlComputeInstanceProfileFor(p.compute_slices);
    if (nvmlReturn_t r =
            nvml.create_compute_instance(gi, static_cast<unsigned int>(ci_profile), &ci);
        r != NVML_SUCCESS) {
      return Out::Error(label + ": creating the compute instance of " + what +
                        " failed: " + Code(r) + "; created before it: " + so_far);
    }
    created += (created.empty() ? "" : " ") + what;
  }
  return ListMigDevices(nvml, gpu, model);
}

}  // namespace tessera::mig
