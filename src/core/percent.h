// Percent: a whole percentage from 0 to 100, e.g. a tenant's share of GPU time.
//
// A Percent always holds a value in [0, 100]; the only ways to make one are the checked
// FromInt, Full() and ParsePercent. No I/O.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/result.h"

namespace tessera {

class Percent {
 public:
  constexpr Percent() = default;  // 0%

  // The percentage `value`, or nullopt outside [0, 100].
  static constexpr std::optional<Percent> FromInt(int64_t value) {
    if (value < 0 || value > 100) {
      return std::nullopt;
    }
    return Percent(static_cast<int>(value));
  }
  static constexpr Percent Full() { return Percent(100); }

  constexpr int value() const { return value_; }
  constexpr double fraction() const { return value_ / 100.0; }  // 0.0 to 1.0

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
  constexpr auto operator<=>(const Percent&) const = default;

 private:
  constexpr explicit Percent(int value) : value_(value) {}
  int value_ = 0;
};

// Parses a whole percentage in [min, max] (both clamped to [0, 100]); digits only, no '%' sign
// and no fraction. Errors name the input and the allowed range, e.g.
//   TESSERA_CORE_LIMIT="0": 0 is out of range; expected a whole percentage from 1 to 100
Result<Percent> ParsePercent(std::string_view text, std::string_view input_name, int min = 0,
                             int max = 100);

}  // namespace tessera
