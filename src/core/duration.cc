// Duration parsing and formatting. Pure functions: no I/O, no locale, no global state.
#include "core/duration.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/text.h"

namespace tessera {
namespace {

using Wide = unsigned __int128;

struct DurationUnit {
  std::string_view name;
  uint64_t nanos;
};

// Longest spellings first so that "ms" is not read as "m" followed by junk.
constexpr std::array<DurationUnit, 7> kDurationUnits = {{
    {"ns", 1},
    {"us", 1000},
    {"\xc2\xb5s", 1000},  // µs
    {"ms", 1000 * 1000},
    {"s", 1000 * 1000 * 1000},
    {"m", uint64_t{60} * 1000 * 1000 * 1000},
    {"h", uint64_t{3600} * 1000 * 1000 * 1000},
}};

constexpr int kDurationFractionDigits = 9;

}  // namespace

Result<std::chrono::nanoseconds> ParseDuration(std::string_view text, std::string_view input_name,
                                               std::chrono::nanoseconds min,
                                               std::chrono::nanoseconds max) {
  // The example is 2ms, or the nearest allowed value when 2ms is out of range.
  const std::chrono::nanoseconds example =
      std::clamp<std::chrono::nanoseconds>(std::chrono::milliseconds(2), min, std::max(min, max));
  const std::string expected =
      "a duration from " + FormatDuration(min) + " to " + FormatDuration(max) +
      " with a unit (ns, us, ms, s, m, h), such as " + FormatDuration(example);
  auto fail = [&](std::string_view reason) {
    return Result<std::chrono::nanoseconds>::Error(InputError(input_name, text, reason, expected));
  };
  const std::string_view s = TrimSpaces(text);
  if (s.empty()) {
    return fail("empty value");
  }
  if (s.front() == '-') {
    return fail("negative durations are not allowed");
  }
  if (!IsAsciiDigit(s.front())) {
    return fail("not a duration");
  }
  const DecimalPrefix number = SplitDecimalPrefix(s, kDurationFractionDigits);
  if (!number.error.empty()) {
    return fail(number.error);
  }
  const std::string_view whole_digits = number.whole;
  const std::string_view fraction_digits = number.fraction;
  const std::string_view unit_text = number.rest;
  if (unit_text.empty()) {
    return fail("missing unit");
  }
  const DurationUnit* unit = nullptr;
  for (const DurationUnit& candidate : kDurationUnits) {
    if (unit_text == candidate.name) {
      unit = &candidate;
    }
  }
  if (unit == nullptr) {
    return fail("unknown unit " + QuoteValue(unit_text));
  }
  uint64_t whole = 0;
  if (ParseDigits(whole_digits, &whole) != DigitsError::kNone) {
    return fail("too large");
  }
  Wide total = static_cast<Wide>(whole) * unit->nanos;
  if (!fraction_digits.empty()) {
    uint64_t fraction = 0;
    (void)ParseDigits(fraction_digits, &fraction);  // at most 9 digits: cannot overflow
    Wide scale = 1;
    for (size_t d = 0; d < fraction_digits.size(); ++d) {
      scale *= 10;
    }
    const Wide numerator = static_cast<Wide>(fraction) * unit->nanos;
    if (numerator % scale != 0) {
      return fail("not a whole number of nanoseconds");
    }
    total += numerator / scale;
  }
  if (total > static_cast<Wide>(INT64_MAX)) {
    return fail("too large");
  }
  const std::chrono::nanoseconds value(static_cast<int64_t>(total));
  if (value < min || value > max) {
    return fail(FormatDuration(value) + " is out of range");
  }
  return value;
}

std::string FormatDuration(std::chrono::nanoseconds duration) {
  int64_t n = duration.count();
  if (n == 0) {
    return "0s";
  }
  std::string sign;
  if (n < 0) {
    sign = "-";
    n = -n;
  }
  // Largest unit first (whole multiples only: 90s stays 90s); the alias µs is never written.
  static constexpr std::array<DurationUnit, 6> kFormatUnits = {{
      {"h", uint64_t{3600} * 1000 * 1000 * 1000},
      {"m", uint64_t{60} * 1000 * 1000 * 1000},
      {"s", 1000 * 1000 * 1000},
      {"ms", 1000 * 1000},
      {"us", 1000},
      {"ns", 1},
  }};
  for (const DurationUnit& unit : kFormatUnits) {
    if (static_cast<uint64_t>(n) % unit.nanos == 0) {
      return sign + std::to_string(static_cast<uint64_t>(n) / unit.nanos) + std::string(unit.name);
    }
  }
  return sign + std::to_string(n) + "ns";
}

}  // namespace tessera
