// libFuzzer target for the one Kubernetes quantity parser (src/k8s/quantity.cc), which reads every
// pod's, node's and claim's quantities: hostile text must be refused with a message naming it, and
// what is accepted must convert consistently.
//
// Besides "no crash, no sanitizer report" it checks: a refusal starts with the input's name and
// the value; milli-units are never fewer than units nor more than 1000 times them (both round up);
// zero is zero at every scale; a whole value is its units, 1000 times them in milli-units, and
// reads back to itself from both canonical forms the API server writes (FormatBinaryQuantity,
// FormatDecimalQuantity).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "k8s/quantity.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "quantity: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera::k8s::Quantity;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto q = Quantity::Parse(text, "q");
  if (!q.ok()) {
    Check(q.error().rfind("q=\"", 0) == 0, "a refusal does not name the input");
    return 0;
  }
  Check(q->text() == text, "the parsed text is not the input");
  auto units = q->Scaled(0, "q");
  auto milli = q->Scaled(3, "q");
  if (units.ok()) {
    Check(*units >= 0, "negative units");
    Check((*units == 0) == q->is_zero(), "units are zero for a non-zero value, or the reverse");
  }
  if (milli.ok()) {
    Check(*milli >= 0, "negative milli-units");
    Check((*milli == 0) == q->is_zero(),
          "milli-units are zero for a non-zero value, or the reverse");
    Check(units.ok(), "milli-units fit where units do not");
  }
  if (units.ok() && milli.ok()) {
    Check(*milli >= *units, "fewer milli-units than units");
    Check(*units > INT64_MAX / 1000 || *milli <= *units * 1000, "more than 1000 milli per unit");
  }
  auto whole = q->Whole("q");
  if (!whole.ok()) {
    Check(whole.error().rfind("q=\"", 0) == 0, "a refused whole value does not name the input");
    return 0;
  }
  Check(units.ok() && *whole == *units, "a whole value is not its units");
  if (*whole <= INT64_MAX / 1000) {
    Check(milli.ok() && *milli == *whole * 1000,
          "a whole value's milli-units are not 1000 times it");
  }
  for (const std::string& canonical :
       {tessera::k8s::FormatBinaryQuantity(*whole), tessera::k8s::FormatDecimalQuantity(*whole)}) {
    auto back = Quantity::Parse(canonical, "canonical");
    Check(back.ok(), "a canonical form does not parse");
    auto value = back->Whole("canonical");
    Check(value.ok() && *value == *whole, "a canonical form does not read back to its value");
  }
  return 0;
}
