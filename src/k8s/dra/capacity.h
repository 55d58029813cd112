// Consumable capacity (resource.k8s.io/v1, KEP-5075): what a request consumes of a device that
// allows multiple allocations, by upstream's documented rules (DeviceCapacity,
// CapacityRequestPolicy and CapacityRequirements in k8s.io/api resource/v1, as the structured
// allocator applies them):
//  - a capacity the request does not ask for consumes its policy's default, or, without a policy,
//    all of the capacity's value;
//  - without a policy a request consumes what it asks;
//  - validRange: below min gives min; with a step, min + n x step, the first at or above the
//    request (in whole units, as Quantity.Value() rounds); without a step, the request itself;
//    above max (after rounding) the request violates the policy;
//  - validValues: the first valid value at or above the request; above every value, a violation;
//  - a consumed amount equal to the default never violates; otherwise it must lie in the range
//    (and on its steps) or be one of the valid values;
//  - a request naming a capacity the device lacks makes the device ineligible;
//  - the consumed amounts of all allocations of a device, this one added, must not exceed each
//    capacity's value.
// Quantities are exact milli-units (int64). Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"

namespace tessera::k8s::dra {

// A quantity in milli-units and the text it came from (what the allocator copies back).
struct Amount {
  int64_t milli = 0;
  std::string text;
  bool operator==(const Amount& o) const { return milli == o.milli; }
};

struct CapacityPolicy {
  std::optional<Amount> default_value;
  std::vector<Amount> valid_values;
  struct Range {
    Amount min;
    std::optional<Amount> max, step;
  };
  std::optional<Range> valid_range;
};

struct DeviceCapacity {
  Amount value;
  std::optional<CapacityPolicy> policy;
};

using Capacities = std::map<std::string, DeviceCapacity>;  // by capacity name
using Consumption = std::map<std::string, Amount>;         // by capacity name

// Reads a quantity ("4Gi"); the error names `what`.
Result<Amount> ParseAmount(const Json& quantity, const std::string& what);
// A device's "capacity" map of a slice; the error names the device.
Result<Capacities> ParseCapacities(const Json& capacity, const std::string& device);
// A request's "capacity": {"requests": {...}} (absent: nothing asked).
Result<Consumption> ParseCapacityRequests(const Json& exactly_or_subrequest,
                                          const std::string& what);

// What `requested` (nullopt: not asked) consumes of `capacity` (calculateConsumedCapacity).
Amount ConsumedOf(const std::optional<Amount>& requested, const DeviceCapacity& capacity);
// Whether `consumed` violates `policy` (violatesPolicy).
bool ViolatesPolicy(const Amount& consumed, const std::optional<CapacityPolicy>& policy);
// What the request consumes of every capacity of the device (GetConsumedCapacityFromRequest).
Consumption ConsumedCapacity(const Consumption& requests, const Capacities& capacities);
// Whether the request fits beside what the device's allocations consume already (`in_use`) and
// what is being allocated now (`allocating`): CmpRequestOverCapacity. An error when the request
// names a capacity the device lacks.
Result<bool> FitsCapacity(const Consumption& in_use, const Consumption& requests,
                          const Capacities& capacities, const Consumption& allocating);

// The text upstream writes for an amount it computed (Quantity in BinarySI form).
std::string AmountText(int64_t milli);

}  // namespace tessera::k8s::dra
