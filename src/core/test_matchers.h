// Test-only helpers for src/core: checking that a parser rejected an input with a message that
// follows Tessera's error form (one line, `NAME="value": reason; expected ...`). Never linked
// into production code.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"
#include "core/text.h"

namespace tessera {

// Success when `result` failed with a one-line message that starts with `name="value"` (the value
// quoted as QuoteValue quotes it) and contains every fragment.
template <typename T>
::testing::AssertionResult IsRejected(const Result<T>& result, std::string_view name,
                                      std::string_view value,
                                      std::initializer_list<std::string_view> fragments = {}) {
  if (result.ok()) {
    return ::testing::AssertionFailure() << "was accepted";
  }
  const std::string& message = result.error();
  const std::string head = std::string(name) + "=" + QuoteValue(value) + ": ";
  if (message.rfind(head, 0) != 0) {
    return ::testing::AssertionFailure()
           << "message \"" << message << "\" does not start with " << head;
  }
  if (message.find('\n') != std::string::npos) {
    return ::testing::AssertionFailure() << "message is not one line: " << message;
  }
  for (std::string_view fragment : fragments) {
    if (message.find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << message << "\" lacks \"" << fragment << "\"";
    }
  }
  return ::testing::AssertionSuccess() << message;
}

// Readable gtest output for the value types.
inline void PrintTo(const Bytes& bytes, std::ostream* os) {
  *os << bytes.count() << " bytes (" << FormatBytes(bytes) << ")";
}
inline void PrintTo(const Percent& percent, std::ostream* os) { *os << percent.value() << "%"; }

}  // namespace tessera
