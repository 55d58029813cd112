// HTTP/1.1 messages for tesserad's small HTTP server: Request, Response, Headers, and ParseRequest,
// the pure function that turns received bytes into a Request.
//
// ParseRequest is the only code that reads bytes a client sent; it is fuzzed (fuzz/
// http_request_fuzz.cc). It does no I/O and holds no state: the server hands it everything it has
// buffered for a connection and it answers "a complete request, N bytes long", "need more bytes",
// or "refuse with status S and this message". Nothing here knows about routes or tesserad.
//
// What is accepted (RFC 9112 grammar, kept strict where leniency would hide mistakes):
// - request line `METHOD SP origin-form SP HTTP/1.1` (or HTTP/1.0), lines ended by CRLF; a few empty
//   lines before it are skipped. Other HTTP versions get 505; absolute-form targets 400.
// - header fields `name: value`; names are tokens, compared ignoring ASCII case; no whitespace
//   before the colon and no line folding (both 400). HTTP/1.1 requests need a Host header (400).
// - the head (request line + headers) is at most ParseLimits::max_head_bytes (431 beyond) and at
//   most max_header_count fields (431 beyond).
// - a body only with Content-Length, at most ParseLimits::max_body_bytes (413 beyond, decided as
//   soon as the header arrives). Transfer-Encoding: chunked gets 411 (send Content-Length), any
//   other transfer coding 501.
// - the path is percent-decoded (a bad %XX or an encoded NUL is 400); the query string is split
//   into key/value pairs, percent-decoded with '+' read as a space; a repeated key keeps its last
//   value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::http {

// Header fields in the order received. Lookups ignore ASCII case; names keep their spelling.
class Headers {
 public:
  void Add(std::string name, std::string value);
  // The value of the first field named `name`, or nullopt.
  std::optional<std::string_view> Get(std::string_view name) const;
  // Every value of fields named `name`, in order.
  std::vector<std::string_view> GetAll(std::string_view name) const;
  bool Has(std::string_view name) const { return Get(name).has_value(); }
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

struct Request {
  std::string method;   // as sent, case-sensitive: "GET", "PUT"
  std::string target;   // the raw request-target: "/v1/ctl/0/policy?x=1"
  std::string path;     // percent-decoded path without the query: "/v1/ctl/0/policy"
  std::map<std::string, std::string> query;  // decoded query parameters
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  Headers headers;
  std::string body;
  bool keep_alive = true;  // the client allows another request on this connection
  std::string peer;        // "127.0.0.1:54321"; filled in by the server, empty from ParseRequest
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra header fields. Content-Length, Connection and Content-Type are the server's and may
  // not appear here; a name or value with CR, LF or NUL makes the server answer 500 instead.
  std::vector<std::pair<std::string, std::string>> headers;

  // A response with this status and a text body ending in a newline.
  static Response Text(int status, std::string body);
};

struct ParseLimits {
  size_t max_head_bytes = 8 * 1024;     // request line + header fields + the blank line
  size_t max_header_count = 100;
  size_t max_body_bytes = 1024 * 1024;  // Content-Length above this: 413
};

struct ParseResult {
  enum class Kind {
    kComplete,  // `request` holds a request that took the first `consumed` bytes
    kNeedMore,  // the bytes so far are a valid beginning; read more and call again
    kError,     // refuse with `status` (4xx/5xx) and `error`; then close the connection
  };
  Kind kind = Kind::kNeedMore;
  Request request;
  size_t consumed = 0;
  int status = 0;
  std::string error;  // one line, e.g. "Content-Length \"12x\" is not a number"
};

// Parses the first request in `buffer`. Never reads past `buffer`; never throws.
ParseResult ParseRequest(std::string_view buffer, const ParseLimits& limits = {});

// The reason phrase of a status code ("Not Found"), or "Unknown" for codes it does not know.
std::string_view ReasonPhrase(int status);

// The bytes of `response` as an HTTP/1.1 response. `keep_alive` picks the Connection header;
// `head_only` leaves the body out (a HEAD request) but keeps its Content-Length. Returns false and
// leaves `out` alone when a header of `response` is not allowed (see Response::headers).
bool SerializeResponse(const Response& response, bool keep_alive, bool head_only,
                       std::string* out, std::string* error);

// Percent-decodes `text`; with `plus_is_space`, '+' becomes ' ' (query strings). nullopt when a
// '%' is not followed by two hex digits.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);

}  // namespace tessera::http
