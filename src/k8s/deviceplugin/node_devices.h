// What a node advertises to kubelet, by mode (docs/contracts.md): which extended resources, and the
// device IDs of each. Every GPU is cut into units of its resource: one device per whole GiB for
// gpu-mem, one per percent for gpu-core, max_inst per GPU for gpu-count (one per GPU on an
// exclusive node), named "<GPU UUID>-m<k>", "-c<k>", "-n<k>" (at most 63 characters, as kubelet
// requires). Kubelet only counts them (a pod asking gpu-mem: 2 takes any two); which GPUs a
// container gets is the extender's decision in tessera.io/assignment, never the IDs. An 8-GPU node
// of 141 GiB GPUs thus lists 1128 gpu-mem devices, about 60 KB per ListAndWatch message, where a
// MiB unit would be 1.2 M devices and overflow kubelet's 4 MiB gRPC limit (gpushare's failure).
// A `mig` node serves one resource per MIG profile present (tessera.io/mig-<profile>), one device
// per MIG device, its ID the MIG- UUID: there the ID is the instance, and the assignment must name
// the same profile. An `mps` node serves the shares of a core_mem node. A GPU with a mode of its
// own (NodeGpu::mode) is advertised as its mode says, beside the node's other GPUs: the resources
// served are those of every mode present. Pure functions; no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/result.h"
#include "k8s/annotations.h"

namespace tessera::k8s {

// --resource-names: which spellings the node serves.
enum class ResourceNames { kTessera, kAliyun, kBoth };
Result<ResourceNames> ParseResourceNames(std::string_view text);

struct NodeGpu {
  int index = 0;
  std::string uuid;
  std::string model;
  Bytes memory;
  uint32_t max_inst = 16;
  bool healthy = true;
  std::optional<InventoryMig> mig{};  // a MIG device (its GPU, model, profile and start)
  // The GPU's own mode (tessera.io/gpu.schedule.<index>, as the plugin applies it); nullopt: the
  // node's.
  std::optional<NodeMode> mode{};

  bool operator==(const NodeGpu&) const = default;
};

// The extended resources a node in `mode` with `gpus` serves (the names kubelet will call
// Allocate for): on a mig node one per MIG profile among `gpus`, in name order; `names` (ACK's
// spellings) applies to the share resources only. GPUs with their own mode add that mode's.
std::vector<std::string> ServedResources(NodeMode mode, ResourceNames names,
                                         const std::vector<NodeGpu>& gpus = {});
// True when the mode isolates through the shim and tesserad (core_mem, mem, mig, mps).
bool ModeIsolates(NodeMode mode);

struct Device {
  std::string id;
  bool healthy = true;
};
// The devices of `resource` on a node in `mode`, each GPU cut as its own mode says.
std::vector<Device> DevicesOf(const std::string& resource, NodeMode mode,
                              const std::vector<NodeGpu>& gpus);
// The GPU UUID a device ID names (a MIG device's ID is its UUID), or nullopt for an ID of no GPU
// of ours.
std::optional<std::string> GpuOfDevice(const std::string& device_id);

// The node's tessera.io/gpu-inventory (a mig node's leaves out MIG devices without a profile);
// a GPU whose own mode differs from `mode` carries it.
GpuInventory InventoryOf(NodeMode mode, const std::vector<NodeGpu>& gpus);

}  // namespace tessera::k8s
