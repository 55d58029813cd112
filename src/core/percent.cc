// Percentage parsing. Pure function; no I/O.
#include "core/percent.h"

#include <algorithm>
#include <string>

#include "core/number.h"

namespace tessera {

Result<Percent> ParsePercent(std::string_view text, std::string_view input_name, int min, int max) {
  min = std::clamp(min, 0, 100);
  max = std::clamp(max, min, 100);
  const std::string expected =
      "a whole percentage from " + std::to_string(min) + " to " + std::to_string(max);
  Result<uint64_t> value = ParseUnsigned(text, input_name, static_cast<uint64_t>(min),
                                         static_cast<uint64_t>(max), expected);
  if (!value.ok()) {
    return value.status();
  }
  return *Percent::FromInt(static_cast<int64_t>(*value));
}

}  // namespace tessera
