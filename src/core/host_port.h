// HostPort: a listening address written "HOST:PORT" (tesserad's --http and the config key `http`).
//
// HOST is an IPv4 literal ("127.0.0.1", "0.0.0.0"), a bracketed IPv6 literal ("[::1]") or
// "localhost" (read as 127.0.0.1). Other host names are refused: a daemon binds to an address, and
// a name would need a resolver at start-up. PORT is 0 to 65535; 0 asks the kernel for a free port.
// An empty host (":9400") is refused so that listening on every interface is always spelled out
// ("0.0.0.0:9400"). Pure function; no I/O (inet_pton only).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera {

struct HostPort {
  std::string host;  // the address literal, without brackets: "127.0.0.1", "::1"
  bool ipv6 = false;
  uint16_t port = 0;
};

// Errors look like: --http="127.0.0.1": missing ":PORT"; expected HOST:PORT such as 127.0.0.1:9400
Result<HostPort> ParseHostPort(std::string_view text, std::string_view input_name);

// "127.0.0.1:9400" or "[::1]:9400": the form ParseHostPort reads back.
std::string FormatHostPort(const HostPort& address);

}  // namespace tessera
