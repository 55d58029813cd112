// The resources and device lists a node advertises.
#include "k8s/deviceplugin/node_devices.h"

#include <algorithm>

namespace tessera::k8s {

Result<ResourceNames> ParseResourceNames(std::string_view text) {
  if (text == "tessera") return ResourceNames::kTessera;
  if (text == "aliyun") return ResourceNames::kAliyun;
  if (text == "both") return ResourceNames::kBoth;
  return Result<ResourceNames>::Error("--resource-names=\"" + std::string(text) +
                                      "\": expected tessera, aliyun or both");
}

bool ModeIsolates(NodeMode mode) {
  return mode != NodeMode::kShare && mode != NodeMode::kExclusive;
}

std::vector<std::string> ServedResources(NodeMode mode, ResourceNames names,
                                         const std::vector<NodeGpu>& gpus) {
  bool shares = gpus.empty() ? mode != NodeMode::kMig : false;
  std::vector<std::string> out;
  for (const NodeGpu& g : gpus) shares = shares || g.mode.value_or(mode) != NodeMode::kMig;
  if (shares) {
    // All three everywhere: every shape the fit rule lets onto the node (on an exclusive node a
    // whole GPU asked as gpu-core 100, or with a gpu-mem floor) must reach Allocate.
    for (GpuResource d : {GpuResource::kMem, GpuResource::kCore, GpuResource::kCount}) {
      if (names != ResourceNames::kAliyun) out.emplace_back(GpuResourceName(d, false));
      if (names != ResourceNames::kTessera) out.emplace_back(GpuResourceName(d, true));
    }
  }
  std::vector<std::string> profiles;
  for (const NodeGpu& g : gpus) {
    if (g.mig && g.mode.value_or(mode) == NodeMode::kMig)
      profiles.push_back(MigResourceName(g.mig->profile));
  }
  std::sort(profiles.begin(), profiles.end());
  profiles.erase(std::unique(profiles.begin(), profiles.end()), profiles.end());
  out.insert(out.end(), profiles.begin(), profiles.end());
  return out;
}

std::vector<Device> DevicesOf(const std::string& resource, NodeMode mode,
                              const std::vector<NodeGpu>& gpus) {
  std::vector<Device> out;
  const auto dim = GpuResourceOf(resource);
  for (const NodeGpu& g : gpus) {
    const NodeMode own = g.mode.value_or(mode);
    if (own == NodeMode::kMig) {
      if (g.mig && MigResourceName(g.mig->profile) == resource) out.push_back({g.uuid, g.healthy});
      continue;
    }
    if (!dim) continue;
    uint64_t units = 0;
    char tag = 'm';
    switch (*dim) {
      case GpuResource::kMem:
        units = g.memory.count() / kBytesPerGiB;
        tag = 'm';
        break;
      case GpuResource::kCore:
        units = 100;
        tag = 'c';
        break;
      case GpuResource::kCount:
        units = own == NodeMode::kExclusive ? 1 : std::max<uint32_t>(g.max_inst, 1);
        tag = 'n';
        break;
    }
    for (uint64_t k = 0; k < units; ++k) {
      out.push_back({g.uuid + "-" + tag + std::to_string(k), g.healthy});
    }
  }
  return out;
}

std::optional<std::string> GpuOfDevice(const std::string& id) {
  if (id.rfind("MIG-", 0) == 0) return id;  // a MIG device: its UUID
  const size_t dash = id.rfind('-');
  if (dash == std::string::npos || dash + 2 > id.size()) return std::nullopt;
  const char tag = id[dash + 1];
  if (tag != 'm' && tag != 'c' && tag != 'n') return std::nullopt;
  for (size_t i = dash + 2; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return std::nullopt;
  }
  if (dash + 2 == id.size()) return std::nullopt;
  return id.substr(0, dash);
}

GpuInventory InventoryOf(NodeMode mode, const std::vector<NodeGpu>& gpus) {
  GpuInventory inv;
  inv.mode = mode;
  for (const NodeGpu& g : gpus) {
    // A MIG device whose profile NVML did not give takes no pod; the inventory says what does.
    if (mode == NodeMode::kMig && !g.mig && g.uuid.rfind("MIG-", 0) == 0) continue;
    // MIG parts only on a mig node (a node just relabelled may still carry them).
    inv.gpus.push_back({g.index, g.uuid, g.model, g.memory, g.healthy,
                        mode == NodeMode::kMig ? g.mig : std::nullopt,
                        g.mode && *g.mode != mode ? g.mode : std::nullopt});
  }
  return inv;
}

}  // namespace tessera::k8s
