// libFuzzer target for ParseRequest, the only code that reads bytes an HTTP client sent to
// tesserad. Invariants: no crash; a complete request consumed between 1 and all the bytes, holds
// a body within the limit and a path without NUL, and parses the same from exactly its own bytes;
// an error has a 4xx/5xx status and a one-line message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tessera::http::ParseLimits limits;
  limits.max_body_bytes = 4096;  // small, so the fuzzer reaches the 413 path
  const tessera::http::ParseResult result = tessera::http::ParseRequest(bytes, limits);
  using Kind = tessera::http::ParseResult::Kind;
  switch (result.kind) {
    case Kind::kNeedMore:
      break;
    case Kind::kError:
      if (result.status < 400 || result.status > 599 || result.error.empty() ||
          result.error.find('\n') != std::string::npos) {
        std::abort();
      }
      break;
    case Kind::kComplete: {
      if (result.consumed == 0 || result.consumed > size ||
          result.request.body.size() > limits.max_body_bytes ||
          result.request.path.find('\0') != std::string::npos || result.request.path.empty() ||
          result.request.path.front() != '/') {
        std::abort();
      }
      const tessera::http::ParseResult again =
          tessera::http::ParseRequest(bytes.substr(0, result.consumed), limits);
      if (again.kind != Kind::kComplete || again.consumed != result.consumed ||
          again.request.path != result.request.path || again.request.body != result.request.body ||
          again.request.query != result.request.query) {
        std::abort();
      }
      break;
    }
  }
  return 0;
}
