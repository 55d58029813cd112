// Parsing and formatting of "HOST:PORT" listening addresses. Pure functions; no sockets opened.
#include "core/host_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/text.h"

namespace tessera {
namespace {

constexpr std::string_view kHostPortExpected =
    "HOST:PORT with an IPv4 address, [IPv6] address or localhost and a port from 0 to 65535, "
    "such as 127.0.0.1:9400";

}  // namespace

Result<HostPort> ParseHostPort(std::string_view text, std::string_view input_name) {
  auto fail = [&](std::string_view reason) {
    return Result<HostPort>::Error(InputError(input_name, text, reason, kHostPortExpected));
  };
  const std::string_view s = TrimSpaces(text);
  if (s.empty()) {
    return fail("empty value");
  }
  HostPort out;
  std::string_view host;
  std::string_view port;
  if (s.front() == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) {
      return fail("missing ']' after the IPv6 address");
    }
    host = s.substr(1, close - 1);
    const std::string_view rest = s.substr(close + 1);
    if (rest.empty() || rest.front() != ':') {
      return fail("missing \":PORT\" after the IPv6 address");
    }
    port = rest.substr(1);
    out.ipv6 = true;
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) {
      return fail("missing \":PORT\"");
    }
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return fail("an IPv6 address needs brackets, as in [::1]:9400");
    }
  }
  if (host.empty()) {
    return fail("empty host; write 0.0.0.0 to listen on every interface");
  }
  const std::string host_string(host);
  if (out.ipv6) {
    in6_addr address6{};
    if (inet_pton(AF_INET6, host_string.c_str(), &address6) != 1) {
      return fail("not an IPv6 address inside the brackets");
    }
    out.host = host_string;
  } else if (EqualsIgnoreCase(host, "localhost")) {
    out.host = "127.0.0.1";
  } else {
    in_addr address4{};
    if (inet_pton(AF_INET, host_string.c_str(), &address4) != 1) {
      return fail("host is not an IPv4 address or localhost (host names are not resolved)");
    }
    out.host = host_string;
  }
  uint64_t number = 0;
  switch (ParseDigits(port, &number)) {
    case DigitsError::kNone:
      break;
    case DigitsError::kEmpty:
      return fail("empty port");
    case DigitsError::kNotDigits:
      return fail("port is not a number");
    case DigitsError::kOverflow:
      return fail("port is out of range");
  }
  if (number > 65535) {
    return fail("port " + std::to_string(number) + " is out of range");
  }
  out.port = static_cast<uint16_t>(number);
  return out;
}

std::string FormatHostPort(const HostPort& address) {
  if (address.ipv6) {
    return "[" + address.host + "]:" + std::to_string(address.port);
  }
  return address.host + ":" + std::to_string(address.port);
}

}  // namespace tessera
