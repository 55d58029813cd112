// tesserad's HTTP routes (--http), and the JSON the control tree's doors answer with. A pure
// function from a request to a response over the control tree and two providers, so that it is
// fuzzed as it runs (fuzz/http_routes_fuzz.cc) without a registry, a ledger or a socket. Holds no
// policy: the tree decides everything about paths and values.
//
//   GET /v1/ctl/PATH   a file's text (text/plain), or a folder's listing as
//                      {"entries":[{"name":"0","dir":true,"writable":false},..]}
//   PUT /v1/ctl/PATH   the body is the value; ?force=1 allows memsize below usage. 204, or 400
//                      with the reason; 403 unless the door allows writes (--http-allow-write)
//   GET /v1/state      the STATUS JSON (`tessera smi --json`)
//   GET /metrics       Prometheus text
//   (HEAD as GET; another method 405 with Allow; another path 404 naming the routes)
// Requests arrive on the HTTP server's connection threads, several at once: the tree's
// NodeControl and both providers must be thread-safe (tesserad's are: the registry's lock).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ctl/control_tree.h"
#include "http/server.h"

namespace tessera::daemon {

struct HttpDoor {
  const ctl::ControlTree* tree = nullptr;
  std::function<std::string()> state;    // the body of GET /v1/state
  std::function<std::string()> metrics;  // the body of GET /metrics
  bool allow_write = false;              // PUT /v1/ctl/ is served (else 403)
};

// Serves one request (routes above).
http::Response HandleHttp(const http::Request& request, const HttpDoor& door);

// {"entries":[...]} for a folder's listing (HTTP and the CTL verb).
std::string EntriesJson(const std::vector<ctl::Entry>& entries);
// {"value":"..."} for a file's text (the CTL verb). Bytes that are not UTF-8 become U+FFFD.
std::string ValueJson(std::string_view text);

}  // namespace tessera::daemon
