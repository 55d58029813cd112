// Device list parsing and resolution. Pure functions; no I/O.
#include "core/device_selector.h"

#include <bitset>

#include "core/text.h"

namespace tessera {
namespace {

constexpr std::string_view kSelectorExpected =
    "all, or a comma list of device indices 0-63, ranges such as 1-3 and UUIDs such as "
    "GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
constexpr size_t kMaxItems = kMaxDeviceIndex + 1;

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "GPU-" or "MIG-" then 8-4-4-4-12 hex digits.
bool IsDeviceUuid(std::string_view text) {
  static constexpr size_t kGroups[] = {8, 4, 4, 4, 12};
  if (text.substr(0, 4) != "GPU-" && text.substr(0, 4) != "MIG-") {
    return false;
  }
  std::string_view rest = text.substr(4);
  for (size_t g = 0; g < 5; ++g) {
    if (rest.size() < kGroups[g]) {
      return false;
    }
    for (size_t i = 0; i < kGroups[g]; ++i) {
      if (!IsHex(rest[i])) {
        return false;
      }
    }
    rest.remove_prefix(kGroups[g]);
    if (g < 4) {
      if (rest.empty() || rest.front() != '-') {
        return false;
      }
      rest.remove_prefix(1);
    }
  }
  return rest.empty();
}

// Parses one index; on failure returns the reason.
Result<int> ParseIndex(std::string_view text) {
  uint64_t value = 0;
  switch (ParseDigits(text, &value)) {
    case DigitsError::kNone:
      break;
    case DigitsError::kEmpty:
    case DigitsError::kNotDigits:
      return Result<int>::Error("is not a device index, range or UUID");
    case DigitsError::kOverflow:
      value = UINT64_MAX;
      break;
  }
  if (value > static_cast<uint64_t>(kMaxDeviceIndex)) {
    return Result<int>::Error("is above the largest device index, " +
                              std::to_string(kMaxDeviceIndex));
  }
  return static_cast<int>(value);
}

// "this node has 3 devices (indices 0-2)", for resolution errors.
std::string DescribeNode(size_t count) {
  if (count == 0) {
    return "this node has no devices";
  }
  if (count == 1) {
    return "this node has 1 device (index 0)";
  }
  std::string out = "this node has ";
  out += std::to_string(count);
  out += " devices (indices 0-";
  out += std::to_string(count - 1);
  out += ")";
  return out;
}

}  // namespace

std::string DeviceSelector::ToString() const {
  if (all) {
    return "all";
  }
  std::string out;
  for (const DeviceRef& device : devices) {
    if (!out.empty()) {
      out.push_back(',');
    }
    out += device.by_index() ? std::to_string(device.index) : device.uuid;
  }
  return out;
}

Result<DeviceSelector> ParseDeviceSelector(std::string_view text, std::string_view input_name) {
  auto fail = [&](const std::string& reason) {
    return Result<DeviceSelector>::Error(InputError(input_name, text, reason, kSelectorExpected));
  };
  const std::string_view trimmed = TrimSpaces(text);
  if (trimmed.empty()) {
    return fail("empty value");
  }
  if (EqualsIgnoreCase(trimmed, "all")) {
    return DeviceSelector::All();
  }

  size_t items = 1;
  for (char c : trimmed) {
    items += (c == ',') ? 1 : 0;
  }
  if (items > kMaxItems) {
    return fail(std::to_string(items) + " items; at most " + std::to_string(kMaxItems) +
                " are allowed");
  }

  DeviceSelector selector;
  std::bitset<kMaxItems> seen;
  std::string_view rest = trimmed;
  for (size_t n = 1; n <= items; ++n) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimSpaces(rest.substr(0, comma));
    rest = (comma == std::string_view::npos) ? std::string_view() : rest.substr(comma + 1);
    const std::string label = "item " + std::to_string(n);
    if (item.empty()) {
      return fail(label + " is empty");
    }
    const std::string what = label + " (" + QuoteValue(item) + ")";

    if (EqualsIgnoreCase(item, "all")) {
      return fail(what + ": \"all\" cannot be combined");
    }
    if (StartsWithIgnoreCase(item, "GPU-") || StartsWithIgnoreCase(item, "MIG-")) {
      if (!IsDeviceUuid(item)) {
        return fail(what + " is not a device UUID (GPU- or MIG- then 8-4-4-4-12 hex digits)");
      }
      for (const DeviceRef& earlier : selector.devices) {
        if (!earlier.by_index() && EqualsIgnoreCase(earlier.uuid, item)) {
          return fail(what + " names a device already listed");
        }
      }
      selector.devices.push_back(DeviceRef{.index = -1, .uuid = std::string(item)});
      continue;
    }
    if (item.front() == '-') {
      return fail(what + ": negative indices are not allowed");
    }

    int low = 0;
    int high = 0;
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      Result<int> index = ParseIndex(item);
      if (!index.ok()) {
        return fail(what + " " + index.error());
      }
      low = high = *index;
    } else {
      Result<int> first = ParseIndex(TrimSpaces(item.substr(0, dash)));
      Result<int> last = ParseIndex(TrimSpaces(item.substr(dash + 1)));
      if (!first.ok()) {
        return fail(what + " " + first.error());
      }
      if (!last.ok()) {
        return fail(what + " " + last.error());
      }
      low = *first;
      high = *last;
      if (low > high) {
        return fail(what + " is a reversed range; write " + std::to_string(high) + "-" +
                    std::to_string(low));
      }
    }
    for (int index = low; index <= high; ++index) {
      if (seen.test(static_cast<size_t>(index))) {
        return fail(what + " names device " + std::to_string(index) + " a second time");
      }
      seen.set(static_cast<size_t>(index));
      selector.devices.push_back(DeviceRef{.index = index, .uuid = {}});
    }
  }
  return selector;
}

Result<std::vector<int>> ResolveDeviceSelector(const DeviceSelector& selector,
                                               const std::vector<std::string>& device_uuids,
                                               std::string_view input_name) {
  const size_t count = device_uuids.size();
  const std::string node = DescribeNode(count);
  std::vector<int> physical;
  if (selector.all) {
    for (size_t i = 0; i < count; ++i) {
      physical.push_back(static_cast<int>(i));
    }
    return physical;
  }
  const std::string text = selector.ToString();
  auto fail = [&](const std::string& reason) {
    return Result<std::vector<int>>::Error(InputError(input_name, text, reason, {}));
  };
  std::vector<const DeviceRef*> chosen_by(count, nullptr);
  for (const DeviceRef& device : selector.devices) {
    const std::string name = device.by_index() ? std::to_string(device.index) : device.uuid;
    size_t found = count;
    if (device.by_index()) {
      if (static_cast<size_t>(device.index) >= count) {
        std::string reason = "device " + name + " does not exist; ";
        reason += node;
        return fail(reason);
      }
      found = static_cast<size_t>(device.index);
    } else {
      for (size_t i = 0; i < count && found == count; ++i) {
        if (EqualsIgnoreCase(device_uuids[i], device.uuid)) {
          found = i;
        }
      }
      if (found == count) {
        std::string reason = "no device has UUID " + name + "; ";
        reason += node;
        return fail(reason);
      }
    }
    if (chosen_by[found] != nullptr) {
      const DeviceRef& earlier = *chosen_by[found];
      return fail("device " + std::to_string(found) + " is selected twice (as " +
                  (earlier.by_index() ? std::to_string(earlier.index) : earlier.uuid) + " and as " +
                  name + ")");
    }
    chosen_by[found] = &device;
    physical.push_back(static_cast<int>(found));
  }
  return physical;
}

}  // namespace tessera
