// Text helpers shared by the parsers in src/core: trimming, ASCII case folding, whole-number
// digits, and the one-line "NAME=\"value\": reason; expected ..." error form every parser uses.
//
// Pure functions on string_views. No locale, no I/O, no global state; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

// `text` without leading and trailing ASCII whitespace (space, \t, \n, \r, \v, \f).
std::string_view TrimSpaces(std::string_view text);

// True when `a` and `b` are equal ignoring ASCII case.
bool EqualsIgnoreCase(std::string_view a, std::string_view b);

// True when `text` starts with `prefix`, ignoring ASCII case.
bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix);

// `value` in double quotes with `"`, `\` and non-printable bytes escaped (\", \\, \xNN), cut to
// its first 96 bytes followed by "..." when longer, so that a message quoting it stays one short
// printable line whatever the value holds.
std::string QuoteValue(std::string_view value);

// The error form used across Tessera: `NAME="value": reason; expected what`.
// `expected` may be empty, in which case the "; expected ..." tail is left out.
std::string InputError(std::string_view input_name, std::string_view value, std::string_view reason,
                       std::string_view expected);

// How a run of decimal digits failed to become a number.
enum class DigitsError {
  kNone,       // parsed
  kEmpty,      // no characters at all
  kNotDigits,  // a character other than 0-9
  kOverflow,   // more than fits in uint64_t
};

// Parses `text` (no trimming, no sign) as a decimal uint64_t. Leading zeros are fine.
DigitsError ParseDigits(std::string_view text, uint64_t* value);

}  // namespace tessera
