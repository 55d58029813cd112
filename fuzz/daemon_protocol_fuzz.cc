// libFuzzer target for tesserad's wire protocol parser: every request line a process sends is
// untrusted input. Invariants: no crash; a parsed message formats back to a line that parses to
// the same message; every rejection says "protocol:".
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "protocol/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  auto parsed = tessera::protocol::ParseMessage(line);
  if (!parsed.ok()) {
    if (parsed.error().find("protocol:") == std::string::npos) std::abort();
    return 0;
  }
  auto again = tessera::protocol::ParseMessage(tessera::protocol::FormatMessage(*parsed));
  if (!again.ok() || again->verb != parsed->verb || again->fields != parsed->fields) std::abort();
  return 0;
}
