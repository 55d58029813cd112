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
  std::vector<GpuResource> dims;
  std::vector<std::string> out;
  switch (mode) {
    case NodeMode::kCoreMem:
    case NodeMode::kMem:
    case NodeMode::kShare:
    case NodeMode::kMps:
    case NodeMode::kExclusive:
      // All three everywhere: every shape the fit rule lets onto the node (on an exclusive node a
      // whole GPU asked as gpu-core 100, or with a gpu-mem floor) must reach Allocate.
      dims = {GpuResource::kMem, GpuResource::kCore, GpuResource::kCount};
      break;
    case NodeMode::kMig:
      for (const NodeGpu& g : gpus) {
        if (g.mig) out.push_back(MigResourceName(g.mig->profile));
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
  }
  for (GpuResource d : dims) {
    if (names != ResourceNames::kAliyun) out.emplace_back(GpuResourceName(d, false));
    if (names != ResourceNames::kTessera) out.emplace_back(GpuResourceName(d, true));
  }
  return out;
}

std::vector<Device> DevicesOf(const std::string& resource, NodeMode mode,
                              const std::vector<NodeGpu>& gpus) {
  std::vector<Device> out;
  if (mode == NodeMode::kMig) {
    for (const NodeGpu& g : gpus) {
      if (g.mig && MigResourceName(g.mig->profile) == resource) out.push_back({g.uuid, g.healthy});
    }
    return out;
  }
  auto dim = GpuResourceOf(resource);
  if (!dim) return out;
  for (const NodeGpu& g : gpus) {
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
        units = mode == NodeMode::kExclusive ? 1 : std::max<uint32_t>(g.max_inst, 1);
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
                        mode == NodeMode::kMig ? g.mig : std::nullopt});
  }
  return inv;
}

}  // namespace tessera::k8s
