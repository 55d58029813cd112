// Text helpers for the src/core parsers. Pure functions; no locale, no I/O.
#include "core/text.h"

#include <limits>

namespace tessera {
namespace {

constexpr size_t kMaxQuotedBytes = 96;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

char LowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && IsSpace(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (LowerAscii(a[i]) != LowerAscii(b[i])) {
      return false;
    }
  }
  return true;
}

bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && EqualsIgnoreCase(text.substr(0, prefix.size()), prefix);
}

std::string QuoteValue(std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  const bool cut = value.size() > kMaxQuotedBytes;
  if (cut) {
    value = value.substr(0, kMaxQuotedBytes);
  }
  std::string out;
  out.reserve(value.size() + 8);
  out.push_back('"');
  for (char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (byte < 0x20 || byte >= 0x7f) {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  if (cut) {
    out += "...";
  }
  out.push_back('"');
  return out;
}

std::string InputError(std::string_view input_name, std::string_view value, std::string_view reason,
                       std::string_view expected) {
  std::string out(input_name);
  out.push_back('=');
  out += QuoteValue(value);
  out += ": ";
  out += reason;
  if (!expected.empty()) {
    out += "; expected ";
    out += expected;
  }
  return out;
}

DigitsError ParseDigits(std::string_view text, uint64_t* value) {
  if (text.empty()) {
    return DigitsError::kEmpty;
  }
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t result = 0;
  bool overflow = false;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return DigitsError::kNotDigits;
    }
    const auto digit = static_cast<uint64_t>(c - '0');
    if (result > (kMax - digit) / 10) {
      overflow = true;  // keep scanning: junk beats overflow
    }
    if (!overflow) {
      result = result * 10 + digit;
    }
  }
  if (overflow) {
    return DigitsError::kOverflow;
  }
  *value = result;
  return DigitsError::kNone;
}

DecimalPrefix SplitDecimalPrefix(std::string_view text, size_t max_fraction_digits) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  DecimalPrefix out;
  size_t i = 0;
  while (i < text.size() && digit(text[i])) {
    ++i;
  }
  out.whole = text.substr(0, i);
  if (i < text.size() && text[i] == '.') {
    const size_t start = ++i;
    while (i < text.size() && digit(text[i])) {
      ++i;
    }
    out.fraction = text.substr(start, i - start);
    if (out.fraction.empty()) {
      out.error = "expected a digit after the decimal point";
    } else if (out.fraction.size() > max_fraction_digits) {
      out.error =
          "more than " + std::to_string(max_fraction_digits) + " digits after the decimal point";
    }
  }
  out.rest = text.substr(i);
  return out;
}

std::string Join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace tessera
