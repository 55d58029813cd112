// Quantity: a Kubernetes resource quantity as it appears in a pod's requests and limits or a node's
// allocatable ("500m", "2", "1.5", "4Gi", "128974848", "129e6", "1E3").
//
// The one parser of Kubernetes quantities in Tessera: every reader of a pod's, a node's or a
// claim's quantities goes through it.
//
// Grammar (k8s.io/apimachinery resource.Quantity): an optional sign, decimal digits with at most
// one '.', then one suffix: binary (Ki Mi Gi Ti Pi Ei), decimal (n u m k M G T P E, or none) or a
// decimal exponent (e or E and a signed whole number: "1e3", "12E-1"; a bare "E" is exa). The value
// is kept exactly as digits x 10^e x 2^b, so bytes and milli-cores come out exact; like Kubernetes,
// conversions round up (a "0.5m" CPU request is 1 milli-core) and so does a value written with more
// than 19 significant digits (Kubernetes keeps nano precision; no caller asks finer than milli).
// Refused where Kubernetes would parse: a negative value (no resource may be negative) and a
// number with no digit ("+", "."), which the API server never writes back (it stores "0").
//
// Pure values; no JSON, no I/O. Errors name the input (e.g. `limits cpu`), the value and the
// grammar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera::k8s {

class Quantity {
 public:
  // Parses `text`; `input_name` names it in errors. Negative quantities are refused (no resource
  // request may be negative).
  static Result<Quantity> Parse(std::string_view text, std::string_view input_name);

  // The value x 10^scale, rounded up: scale 0 gives whole units (bytes), 3 milli-units (CPU).
  // Fails, naming `input_name` and the value, when that does not fit in an int64_t.
  Result<int64_t> Scaled(int scale, std::string_view input_name) const;
  // The value as a whole number; fails when it has a fraction (dropped digits past the precision
  // count as one) or does not fit in an int64_t.
  Result<int64_t> Whole(std::string_view input_name) const;

  bool is_zero() const { return digits_ == 0; }
  // The text it was parsed from.
  const std::string& text() const { return text_; }

 private:
  Quantity(uint64_t digits, int exp10, int exp2, std::string_view text)
      : digits_(digits), exp10_(exp10), exp2_(exp2), text_(text) {}

  uint64_t digits_ = 0;  // significant digits, at most 19
  int exp10_ = 0;        // value = digits_ x 10^exp10_ x 2^exp2_
  int exp2_ = 0;
  bool inexact_ = false;  // rounded up from more significant digits than kept
  std::string text_;      // the input as given, for error messages
};

// A quantity of an extended resource (tessera.io/gpu-mem, a MIG profile, ...), which Kubernetes
// requires to be a whole number: "2", "1k", "2Ki", "3000m", "2.0"; "1500m" and "-1" are refused,
// naming `input_name` and the value.
Result<int64_t> ParseWholeQuantity(std::string_view text, std::string_view input_name);

// A whole number of units as the API server writes a quantity back (resource.Quantity's canonical
// form): binary, the largest of Ki Mi Gi Ti Pi Ei that divides it exactly (17179869184 -> "16Gi",
// 1023 and 17179869185 stay plain), for bytes; decimal, the largest of k M G T P E that divides
// it (100 -> "100", 2000 -> "2k"), for counts.
std::string FormatBinaryQuantity(int64_t value);
std::string FormatDecimalQuantity(int64_t value);

}  // namespace tessera::k8s
