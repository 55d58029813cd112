// DeviceSelector: which GPUs a tenant may see, as written in TESSERA_VISIBLE_DEVICES or
// ALIYUN_COM_GPU_VISIBLE_DEVICES, and how that maps onto a node's devices.
//
// Syntax: "all", or a comma list whose items are device indices ("0", 0 to 63), ascending
// ranges ("1-3", both ends included) and NVIDIA UUIDs ("GPU-" or "MIG-" followed by 8-4-4-4-12
// hex digits), mixed freely. Spaces around items are ignored. A device may be named only once,
// no item may be empty, and "all" stands alone. Order is kept: the first device listed is the
// tenant's device 0.
//
// Parsing knows nothing of the node; ResolveDeviceSelector checks the selection against the
// node's device list. No I/O.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tessera {

inline constexpr int kMaxDeviceIndex = 63;

// One selected device: by index or by UUID.
struct DeviceRef {
  int index = -1;    // 0..kMaxDeviceIndex when the device is named by index, else -1
  std::string uuid;  // as written, when named by UUID; empty otherwise

  bool by_index() const { return index >= 0; }
  bool operator==(const DeviceRef&) const = default;
};

struct DeviceSelector {
  bool all = false;                // "all": every device of the node, in index order
  std::vector<DeviceRef> devices;  // in the order given, ranges expanded; empty when `all`

  static DeviceSelector All() { return DeviceSelector{.all = true, .devices = {}}; }

  // Canonical text that parses back to an equal selector: "all" or e.g. "0,1,2,GPU-...".
  std::string ToString() const;
  bool operator==(const DeviceSelector&) const = default;
};

// Parses the syntax above. Errors name the input, the value and the offending item, e.g.
//   TESSERA_VISIBLE_DEVICES="3-1": item 1 ("3-1") is a reversed range; write 1-3; expected ...
Result<DeviceSelector> ParseDeviceSelector(std::string_view text, std::string_view input_name);

// Maps `selector` onto a node whose device i has UUID `device_uuids[i]`, giving physical
// indices in the tenant's order. UUIDs compare ignoring ASCII case. Fails when an index or UUID
// does not exist on the node, or when two items name the same device (e.g. "0" and device 0's
// UUID); the message names the item and how many devices the node has.
Result<std::vector<int>> ResolveDeviceSelector(const DeviceSelector& selector,
                                               const std::vector<std::string>& device_uuids,
                                               std::string_view input_name);

}  // namespace tessera
