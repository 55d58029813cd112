// Bytes: an amount of memory as a type, and the size syntax users write ("2GiB", "1.5GiB").
//
// Bytes arithmetic never wraps: there is no operator+ or operator-, only Saturating* (clamp at 0
// and at Bytes::Max()) and Checked* (nullopt instead of a wrapped value). This is how the counter
// underflows that plague other GPU-sharing layers are made impossible by construction.
//
// Size syntax accepted by ParseBytes (surrounding whitespace ignored, units case-insensitive):
//   <number>[' '...]<unit>  where <number> is digits with at most 9 digits after one '.', and
//   <unit> is B, KiB, MiB, GiB or TiB. K/KB, M/MB, G/GB and T/TB are accepted as the same binary
//   units (as Alibaba cGPU does: "2G" and "2GB" mean 2GiB, never 2*10^9 bytes).
//   A bare whole number is a number of GiB (cGPU's ALIYUN_COM_GPU_MEM_CONTAINER form); "0" is 0.
//   A fraction needs a unit ("1.5" is rejected) and is rounded down to a whole byte
//   ("0.3KiB" is 307 bytes); a fraction of a byte ("1.5B") is rejected.
// This header does no I/O and allocates only in the functions that return strings.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tessera {

inline constexpr uint64_t kBytesPerKiB = uint64_t{1} << 10;
inline constexpr uint64_t kBytesPerMiB = uint64_t{1} << 20;
inline constexpr uint64_t kBytesPerGiB = uint64_t{1} << 30;
inline constexpr uint64_t kBytesPerTiB = uint64_t{1} << 40;

// A count of bytes. A plain value type: cheap to copy, totally ordered.
class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(uint64_t count) : count_(count) {}

  static constexpr Bytes Zero() { return Bytes(0); }
  static constexpr Bytes Max() { return Bytes(std::numeric_limits<uint64_t>::max()); }

  constexpr uint64_t count() const { return count_; }
  constexpr bool is_zero() const { return count_ == 0; }

  // a + b, or Max() when the sum does not fit.
  static constexpr Bytes SaturatingAdd(Bytes a, Bytes b) {
    return Bytes(a.count_ > Max().count_ - b.count_ ? Max().count_ : a.count_ + b.count_);
  }
  // a - b, or Zero() when b > a.
  static constexpr Bytes SaturatingSub(Bytes a, Bytes b) {
    return Bytes(b.count_ > a.count_ ? 0 : a.count_ - b.count_);
  }
  // a * factor, or Max() when the product does not fit.
  static constexpr Bytes SaturatingMul(Bytes a, uint64_t factor) {
    if (factor != 0 && a.count_ > Max().count_ / factor) {
      return Max();
    }
    return Bytes(a.count_ * factor);
  }
  // a + b, or nullopt when the sum does not fit.
  static constexpr std::optional<Bytes> CheckedAdd(Bytes a, Bytes b) {
    if (a.count_ > Max().count_ - b.count_) {
      return std::nullopt;
    }
    return Bytes(a.count_ + b.count_);
  }
  // a - b, or nullopt when b > a.
  static constexpr std::optional<Bytes> CheckedSub(Bytes a, Bytes b) {
    if (b.count_ > a.count_) {
      return std::nullopt;
    }
    return Bytes(a.count_ - b.count_);
  }

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
  constexpr auto operator<=>(const Bytes&) const = default;

 private:
  uint64_t count_ = 0;
};

// n KiB/MiB/GiB/TiB; saturate at Bytes::Max() rather than wrap.
constexpr Bytes KiB(uint64_t n) { return Bytes::SaturatingMul(Bytes(kBytesPerKiB), n); }
constexpr Bytes MiB(uint64_t n) { return Bytes::SaturatingMul(Bytes(kBytesPerMiB), n); }
constexpr Bytes GiB(uint64_t n) { return Bytes::SaturatingMul(Bytes(kBytesPerGiB), n); }
constexpr Bytes TiB(uint64_t n) { return Bytes::SaturatingMul(Bytes(kBytesPerTiB), n); }

// The most items ParseBytesList accepts (one per device; a node has at most 16 GPUs).
inline constexpr size_t kMaxBytesListItems = 16;

// Parses one size (syntax above). `input_name` names where the text came from (an environment
// variable, a flag, a control-tree path) and starts every error message, e.g.
//   TESSERA_MEM_LIMIT="-1GiB": negative sizes are not allowed; expected a size such as ...
Result<Bytes> ParseBytes(std::string_view text, std::string_view input_name);

// Parses a comma list of sizes, "3GiB,4GiB" (spaces around items ignored), 1 to
// kMaxBytesListItems items, none empty. Errors name the item ("item 2 (\"x\"): ...").
Result<std::vector<Bytes>> ParseBytesList(std::string_view text, std::string_view input_name);

// Human form that ParseBytes reads back to exactly the same value: the largest of TiB, GiB, MiB,
// KiB that shows the value exactly with at most 3 decimals ("2GiB", "1.5GiB", "1.125GiB",
// "512MiB", "1KiB"), otherwise a byte count ("100B", "1073741825B").
std::string FormatBytes(Bytes bytes);

}  // namespace tessera
