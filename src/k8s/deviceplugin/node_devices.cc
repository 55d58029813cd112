// The resources and device lists a node advertises.
#include "k8s/deviceplugin/node_devices.h"

namespace tessera::k8s {

Result<ResourceNames> ParseResourceNames(std::string_view text) {
  if (text == "tessera") return ResourceNames::kTessera;
  if (text == "aliyun") return ResourceNames::kAliyun;
  if (text == "both") return ResourceNames::kBoth;
  return Result<ResourceNames>::Error("--resource-names=\"" + std::string(text) +
                                      "\": expected tessera, aliyun or both");
}

bool ModeIsolates(NodeMode mode) { return mode == NodeMode::kCoreMem || mode == NodeMode::kMem; }

std::vector<std::string> ServedResources(NodeMode mode, ResourceNames names) {
  std::vector<GpuResource> dims;
  switch (mode) {
    case NodeMode::kCoreMem:
    case NodeMode::kMem:
    case NodeMode::kShare:
      dims = {GpuResource::kMem, GpuResource::kCore, GpuResource::kCount};
      break;
    case NodeMode::kExclusive:
      dims = {GpuResource::kCount};
      break;
    case NodeMode::kMig:
    case NodeMode::kMps:
      break;
  }
  std::vector<std::string> out;
  for (GpuResource d : dims) {
    if (names != ResourceNames::kAliyun) out.emplace_back(GpuResourceName(d, false));
    if (names != ResourceNames::kTessera) out.emplace_back(GpuResourceName(d, true));
  }
  return out;
}

std::vector<Device> DevicesOf(const std::string& resource, NodeMode mode,
                              const std::vector<NodeGpu>& gpus) {
  std::vector<Device> out;
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
  for (const NodeGpu& g : gpus) inv.gpus.push_back({g.index, g.uuid, g.model, g.memory, g.healthy});
  return inv;
}

}  // namespace tessera::k8s
