// Whole-number parsing with range checks. Pure function; no I/O.
#include "core/number.h"

#include <string>

#include "core/text.h"

namespace tessera {

Result<uint64_t> ParseUnsigned(std::string_view text, std::string_view input_name, uint64_t min,
                               uint64_t max, std::string_view expected) {
  std::string default_expected;
  if (expected.empty()) {
    default_expected = "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
    expected = default_expected;
  }
  auto fail = [&](std::string_view reason) {
    return Result<uint64_t>::Error(InputError(input_name, text, reason, expected));
  };
  const std::string_view s = TrimSpaces(text);
  uint64_t value = 0;
  switch (ParseDigits(s, &value)) {
    case DigitsError::kNone:
      break;
    case DigitsError::kEmpty:
      return fail("empty value");
    case DigitsError::kOverflow:
      return fail("too large");
    case DigitsError::kNotDigits:
      if (s.front() == '-') {
        return fail("negative numbers are not allowed");
      }
      if (s.find_first_of(".eE") != std::string_view::npos && s.front() >= '0' &&
          s.front() <= '9') {
        return fail("not a whole number");
      }
      return fail("not a number");
  }
  if (value < min || value > max) {
    return fail(std::to_string(value) + " is out of range");
  }
  return value;
}

}  // namespace tessera
