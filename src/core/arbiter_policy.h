// ArbiterPolicy: how a GPU's time is shared among its containers (docs/contracts.md, the
// cGPU `<gpu>/policy` values 0 to 5), with the names used in the CLI, logs and JSON.
//
// Only the vocabulary lives here; the policies themselves are the daemon's arbiter. No I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/result.h"

namespace tessera {

enum class ArbiterPolicy : uint8_t {
  kFair = 0,                // fixed slices of 1/max_inst; idle slots stay idle
  kPreemptive = 1,          // equal shares among active containers
  kWeightedPreemptive = 2,  // shares by weight; a container's slices are reserved while it exists
  kFixedPercentage = 3,     // weight/max_inst, capped and reserved
  kWeak = 4,                // like kPreemptive, but tenants may overlap
  kNative = 5,              // memory isolation only
};

inline constexpr int kArbiterPolicyCount = 6;

// "fair", "preemptive", "weighted-preemptive", "fixed-percentage", "weak" or "native".
std::string_view ArbiterPolicyName(ArbiterPolicy policy);

// The policy numbered `number` (0 to 5), or nullopt.
std::optional<ArbiterPolicy> ArbiterPolicyFromNumber(int64_t number);

// Parses a policy from its number ("0".."5") or its name (ASCII case ignored, surrounding
// whitespace ignored). Errors list every number and name.
Result<ArbiterPolicy> ParseArbiterPolicy(std::string_view text, std::string_view input_name);

}  // namespace tessera
