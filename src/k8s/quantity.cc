// Parsing Kubernetes resource quantities and converting them exactly. Pure functions; no I/O.
#include "k8s/quantity.h"

#include <array>
#include <limits>
#include <string>
#include <utility>

#include "core/text.h"

namespace tessera::k8s {

namespace {

constexpr std::string_view kGrammar =
    "a Kubernetes quantity such as 500m, 2, 1.5, 4Gi or 1e3 (digits with at most one '.', then "
    "Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent e<N>)";
constexpr int kMaxDigits = 19;  // every 19-digit number fits in a uint64_t

struct Suffix {
  std::string_view text;
  int exp10;
  int exp2;
};

constexpr std::array<Suffix, 15> kSuffixes = {{
    {"Ki", 0, 10},
    {"Mi", 0, 20},
    {"Gi", 0, 30},
    {"Ti", 0, 40},
    {"Pi", 0, 50},
    {"Ei", 0, 60},
    {"n", -9, 0},
    {"u", -6, 0},
    {"m", -3, 0},
    {"", 0, 0},
    {"k", 3, 0},
    {"M", 6, 0},
    {"G", 9, 0},
    {"T", 12, 0},
    {"P", 15, 0},
}};

std::string RangeError(std::string_view input_name, std::string_view text) {
  return InputError(input_name, text, "does not fit in a 64-bit count of the unit", "");
}

}  // namespace

Result<Quantity> Quantity::Parse(std::string_view text, std::string_view input_name) {
  auto fail = [&](std::string_view reason) {
    return Result<Quantity>::Error(InputError(input_name, text, reason, kGrammar));
  };
  std::string_view rest = text;
  if (rest.empty()) return fail("is empty");
  if (rest.front() == '-') return fail("is negative");
  if (rest.front() == '+') rest.remove_prefix(1);
  uint64_t digits = 0;
  int significant = 0;
  int exp10 = 0;
  bool any_digit = false;
  bool seen_point = false;
  bool inexact = false;  // a non-zero digit past the precision was dropped
  while (!rest.empty() && ((rest.front() >= '0' && rest.front() <= '9') || rest.front() == '.')) {
    const char ch = rest.front();
    rest.remove_prefix(1);
    if (ch == '.') {
      if (seen_point) return fail("has more than one '.'");
      seen_point = true;
      continue;
    }
    any_digit = true;
    if (digits == 0 && ch == '0') {  // leading zeros carry no precision
      if (seen_point) --exp10;
      continue;
    }
    if (significant == kMaxDigits) {
      if (!seen_point) ++exp10;       // a whole digit past the precision: keep its magnitude
      if (ch != '0') inexact = true;  // rounded up below, as Kubernetes rounds a value up
      continue;
    }
    digits = digits * 10 + static_cast<uint64_t>(ch - '0');
    ++significant;
    if (seen_point) --exp10;
  }
  if (!any_digit) return fail("does not start with a number");
  if (inexact) {
    // Up to the next value of the kept precision; 10^19 - 1 + 1 keeps 19 digits as 10^18 x 10.
    if (digits == 9999999999999999999ULL) {
      digits = 1000000000000000000ULL;
      ++exp10;
    } else {
      ++digits;
    }
  }
  auto made = [&](int e10, int e2) {
    Quantity q(digits, e10, e2, text);
    q.inexact_ = inexact;
    return q;
  };
  for (const Suffix& s : kSuffixes) {
    if (rest == s.text) return made(exp10 + s.exp10, s.exp2);
  }
  if (rest == "E") return made(exp10 + 18, 0);  // exa
  if (rest.size() > 1 && (rest.front() == 'e' || rest.front() == 'E')) {
    std::string_view e = rest.substr(1);
    bool negative = false;
    if (e.front() == '+' || e.front() == '-') {
      negative = e.front() == '-';
      e.remove_prefix(1);
    }
    uint64_t n = 0;
    if (ParseDigits(e, &n) != DigitsError::kNone || n > 400) {
      return fail("has an exponent that is not a whole number from -400 to 400");
    }
    return made(exp10 + (negative ? -static_cast<int>(n) : static_cast<int>(n)), 0);
  }
  return fail("has an unknown suffix \"" + std::string(rest) + "\"");
}

Result<int64_t> Quantity::Scaled(int scale, std::string_view input_name) const {
  constexpr unsigned __int128 kMax = std::numeric_limits<int64_t>::max();
  if (digits_ == 0) return int64_t{0};
  unsigned __int128 v = digits_;
  int e = exp10_ + scale;
  // Exact in 128 bits: digits < 2^64 and at most 2^60 from the suffix; each multiplication by 10
  // is checked against the int64 bound before the next. Division rounds up.
  v <<= exp2_;
  for (; e > 0; --e) {
    v *= 10;
    if (v > kMax) return Result<int64_t>::Error(RangeError(input_name, text_));
  }
  for (; e < 0; ++e) {
    if (v == 1) break;  // anything above zero rounds up to 1
    v = (v + 9) / 10;
  }
  if (v > kMax) return Result<int64_t>::Error(RangeError(input_name, text_));
  return static_cast<int64_t>(v);
}

Result<int64_t> Quantity::Whole(std::string_view input_name) const {
  auto up = Scaled(0, input_name);
  if (!up.ok()) return up;
  if (inexact_) {
    return Result<int64_t>::Error(
        InputError(input_name, text_, "has a fraction", "a whole number"));
  }
  // Whole when rounding up changed nothing: value x 10^k is still a multiple of 10^k.
  if (exp10_ < 0) {
    unsigned __int128 v = static_cast<unsigned __int128>(digits_) << exp2_;
    for (int e = exp10_; e < 0; ++e) {
      if (v % 10 != 0) {
        return Result<int64_t>::Error(
            InputError(input_name, text_, "has a fraction", "a whole number"));
      }
      v /= 10;
    }
  }
  return up;
}

namespace {

std::string FormatWithSuffixes(int64_t value, int64_t base, std::array<std::string_view, 6> names) {
  if (value == 0) return "0";
  const bool negative = value < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  int suffix = -1;
  // Go leaves binary values within (-1024, 1024) plain; the loop does the same for both bases.
  while (suffix + 1 < static_cast<int>(names.size()) &&
         magnitude % static_cast<uint64_t>(base) == 0) {
    magnitude /= static_cast<uint64_t>(base);
    ++suffix;
  }
  return (negative ? "-" : "") + std::to_string(magnitude) +
         (suffix < 0 ? std::string() : std::string(names[static_cast<size_t>(suffix)]));
}

}  // namespace

Result<int64_t> ParseWholeQuantity(std::string_view text, std::string_view input_name) {
  auto q = Quantity::Parse(text, input_name);
  if (!q.ok()) return q.status();
  return q->Whole(input_name);
}

std::string FormatBinaryQuantity(int64_t value) {
  return FormatWithSuffixes(value, 1024, {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"});
}

std::string FormatDecimalQuantity(int64_t value) {
  return FormatWithSuffixes(value, 1000, {"k", "M", "G", "T", "P", "E"});
}

}  // namespace tessera::k8s
