// Whole-number parsing for settings such as weights, priorities and percentages.
//
// Accepts decimal digits only, surrounded by optional whitespace: no sign, no fraction, no
// exponent, no hex. Pure function; no I/O, no locale.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/result.h"

namespace tessera {

// Parses `text` as a whole number in [min, max]. `expected` completes "expected ..." in error
// messages; when empty it reads "a whole number from <min> to <max>". Errors look like
//   TESSERA_WEIGHT="0": 0 is out of range; expected a whole number from 1 to 1024
Result<uint64_t> ParseUnsigned(std::string_view text, std::string_view input_name, uint64_t min,
                               uint64_t max, std::string_view expected = {});

}  // namespace tessera
