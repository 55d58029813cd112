// Text helpers shared by the parsers in src/core: trimming, ASCII case folding, whole-number
// digits, and the one-line "NAME=\"value\": reason; expected ..." error form every parser uses.
//
// Pure functions on string_views. No locale, no I/O, no global state; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// A decimal number at the start of `text` ("12", "1.5"): its whole digits, its fraction digits
// (after one '.') and the rest. `error` is empty on success, else the reason: a '.' not followed
// by a digit, or more than `max_fraction_digits` of them. The caller checks the first character.
struct DecimalPrefix {
  std::string_view whole;
  std::string_view fraction;
  std::string_view rest;
  std::string error;
};
DecimalPrefix SplitDecimalPrefix(std::string_view text, size_t max_fraction_digits);

// `items` with `separator` between them.
std::string Join(const std::vector<std::string>& items, std::string_view separator = ",");

// '0'-'9' only, whatever the locale.
inline bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

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
