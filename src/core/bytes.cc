// Size parsing and formatting for Bytes. Pure functions: no I/O, no locale, no global state.
#include "core/bytes.h"

#include <array>

#include "core/text.h"

namespace tessera {
namespace {

using Wide = unsigned __int128;

constexpr std::string_view kSizeExpected =
    "a size such as 512MiB, 2GiB, 1.5GiB or a whole number of GiB";
constexpr std::string_view kListExpected =
    "a size such as 512MiB, 2GiB, 1.5GiB or a whole number of GiB, or a comma list of them "
    "(one per device) such as 3GiB,4GiB";
constexpr int kBytesFractionDigits = 9;

struct Unit {
  std::string_view name;
  uint64_t bytes;
};

// Every spelling ParseBytes accepts, compared ignoring case. The decimal-looking ones are binary
// on purpose: cGPU and most GPU tooling mean GiB by "G".
constexpr std::array<Unit, 13> kUnits = {{
    {"B", 1},
    {"K", kBytesPerKiB},
    {"KB", kBytesPerKiB},
    {"KiB", kBytesPerKiB},
    {"M", kBytesPerMiB},
    {"MB", kBytesPerMiB},
    {"MiB", kBytesPerMiB},
    {"G", kBytesPerGiB},
    {"GB", kBytesPerGiB},
    {"GiB", kBytesPerGiB},
    {"T", kBytesPerTiB},
    {"TB", kBytesPerTiB},
    {"TiB", kBytesPerTiB},
}};

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string TooLarge() {
  return "too large; the largest size is " + std::to_string(Bytes::Max().count()) +
         " bytes (just under 16EiB)";
}

// Parses one size. On failure returns the reason alone (no input name, no "expected" tail).
Result<Bytes> ParseSize(std::string_view text) {
  const std::string_view s = TrimSpaces(text);
  if (s.empty()) {
    return Result<Bytes>::Error("empty value");
  }
  if (s.front() == '-') {
    return Result<Bytes>::Error("negative sizes are not allowed");
  }
  if (s.front() == '.') {
    return Result<Bytes>::Error("expected a digit before the decimal point");
  }
  if (!IsAsciiDigit(s.front())) {
    return Result<Bytes>::Error("not a size");
  }

  const DecimalPrefix number = SplitDecimalPrefix(s, kBytesFractionDigits);
  if (!number.error.empty()) {
    return Result<Bytes>::Error(number.error);
  }
  const std::string_view whole_digits = number.whole;
  const std::string_view fraction_digits = number.fraction;
  std::string_view unit_text = number.rest;  // s is trimmed, so this has no trailing space
  while (!unit_text.empty() && unit_text.front() == ' ') {
    unit_text.remove_prefix(1);
  }
  if (!unit_text.empty() && (unit_text.front() == '.' || IsAsciiDigit(unit_text.front()))) {
    return Result<Bytes>::Error("malformed number");
  }
  for (char c : unit_text) {
    if (!IsAlpha(c)) {
      return Result<Bytes>::Error("unexpected character " + QuoteValue(std::string_view(&c, 1)));
    }
  }

  uint64_t unit_bytes = 0;
  if (unit_text.empty()) {
    if (!fraction_digits.empty()) {
      return Result<Bytes>::Error(
          "a fraction needs a unit, e.g. 1.5GiB (a bare number is a whole number of GiB)");
    }
    unit_bytes = kBytesPerGiB;
  } else {
    for (const Unit& unit : kUnits) {
      if (EqualsIgnoreCase(unit_text, unit.name)) {
        unit_bytes = unit.bytes;
      }
    }
    if (unit_bytes == 0) {
      return Result<Bytes>::Error("unknown unit " + QuoteValue(unit_text) +
                                  "; units are B, KiB, MiB, GiB and TiB (K/KB, M/MB, G/GB and "
                                  "T/TB mean the same binary units)");
    }
    if (unit_bytes == 1 && !fraction_digits.empty()) {
      return Result<Bytes>::Error("a number of bytes must be whole");
    }
  }

  uint64_t whole = 0;
  if (ParseDigits(whole_digits, &whole) != DigitsError::kNone) {
    return Result<Bytes>::Error(TooLarge());  // the digits are digits, so only overflow is left
  }
  Wide total = static_cast<Wide>(whole) * unit_bytes;
  if (!fraction_digits.empty()) {
    uint64_t numerator = 0;
    (void)ParseDigits(fraction_digits, &numerator);  // at most 9 digits: cannot fail
    uint64_t denominator = 1;
    for (size_t d = 0; d < fraction_digits.size(); ++d) {
      denominator *= 10;
    }
    total += static_cast<Wide>(numerator) * unit_bytes / denominator;  // rounds down
  }
  if (total > static_cast<Wide>(Bytes::Max().count())) {
    return Result<Bytes>::Error(TooLarge());
  }
  return Bytes(static_cast<uint64_t>(total));
}

}  // namespace

Result<Bytes> ParseBytes(std::string_view text, std::string_view input_name) {
  Result<Bytes> size = ParseSize(text);
  if (!size.ok()) {
    return Result<Bytes>::Error(InputError(input_name, text, size.error(), kSizeExpected));
  }
  return size;
}

Result<std::vector<Bytes>> ParseBytesList(std::string_view text, std::string_view input_name) {
  using R = Result<std::vector<Bytes>>;
  if (TrimSpaces(text).empty()) {
    return R::Error(InputError(input_name, text, "empty value", kListExpected));
  }
  size_t items = 1;
  for (char c : text) {
    items += (c == ',') ? 1 : 0;
  }
  if (items > kMaxBytesListItems) {
    return R::Error(InputError(input_name, text,
                               std::to_string(items) + " items; at most " +
                                   std::to_string(kMaxBytesListItems) + " are allowed",
                               kListExpected));
  }
  std::vector<Bytes> sizes;
  sizes.reserve(items);
  std::string_view rest = text;
  for (size_t n = 1; n <= items; ++n) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = (comma == std::string_view::npos) ? std::string_view() : rest.substr(comma + 1);
    const std::string label = "item " + std::to_string(n);
    if (TrimSpaces(item).empty()) {
      return R::Error(InputError(input_name, text, label + " is empty", kListExpected));
    }
    Result<Bytes> size = ParseSize(item);
    if (!size.ok()) {
      const std::string reason =
          items == 1 ? size.error()
                     : label + " (" + QuoteValue(TrimSpaces(item)) + "): " + size.error();
      return R::Error(InputError(input_name, text, reason, kListExpected));
    }
    sizes.push_back(*size);
  }
  return sizes;
}

std::string FormatBytes(Bytes bytes) {
  static constexpr std::array<Unit, 4> kFormatUnits = {{
      {"TiB", kBytesPerTiB},
      {"GiB", kBytesPerGiB},
      {"MiB", kBytesPerMiB},
      {"KiB", kBytesPerKiB},
  }};
  const uint64_t count = bytes.count();
  for (const Unit& unit : kFormatUnits) {
    if (count < unit.bytes) {
      continue;
    }
    const Wide thousandths = static_cast<Wide>(count) * 1000;
    if (thousandths % unit.bytes != 0) {
      continue;
    }
    const uint64_t whole = count / unit.bytes;
    auto fraction =
        static_cast<uint64_t>(thousandths / unit.bytes - static_cast<Wide>(whole) * 1000);
    std::string out = std::to_string(whole);
    if (fraction != 0) {
      std::string digits = std::to_string(fraction);
      digits.insert(0, 3 - digits.size(), '0');
      while (digits.back() == '0') {
        digits.pop_back();
      }
      out += "." + digits;
    }
    out += unit.name;
    return out;
  }
  return std::to_string(count) + "B";
}

}  // namespace tessera
