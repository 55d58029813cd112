// Arbiter policy names and parsing. Pure functions; no I/O.
#include "core/arbiter_policy.h"

#include <array>

#include "core/text.h"

namespace tessera {
namespace {

constexpr std::array<std::string_view, kArbiterPolicyCount> kNames = {
    "fair", "preemptive", "weighted-preemptive", "fixed-percentage", "weak", "native"};

constexpr std::string_view kPolicyExpected =
    "0 fair, 1 preemptive, 2 weighted-preemptive, 3 fixed-percentage, 4 weak or 5 native "
    "(the number or the name)";

}  // namespace

std::string_view ArbiterPolicyName(ArbiterPolicy policy) {
  const auto index = static_cast<size_t>(policy);
  return index < kNames.size() ? kNames[index] : std::string_view("unknown");
}

std::optional<ArbiterPolicy> ArbiterPolicyFromNumber(int64_t number) {
  if (number < 0 || number >= kArbiterPolicyCount) {
    return std::nullopt;
  }
  return static_cast<ArbiterPolicy>(number);
}

Result<ArbiterPolicy> ParseArbiterPolicy(std::string_view text, std::string_view input_name) {
  const std::string_view s = TrimSpaces(text);
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (s.size() == 1 && s[0] == static_cast<char>('0' + i)) {
      return static_cast<ArbiterPolicy>(i);
    }
    if (EqualsIgnoreCase(s, kNames[i])) {
      return static_cast<ArbiterPolicy>(i);
    }
  }
  return Result<ArbiterPolicy>::Error(
      InputError(input_name, text, s.empty() ? "empty value" : "unknown policy", kPolicyExpected));
}

}  // namespace tessera
