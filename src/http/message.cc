// Parsing HTTP/1.1 requests and serializing responses. Pure functions on bytes: no sockets, no
// clocks, no global state; safe from any thread. Knows nothing of routes or of tesserad.
#include "http/message.h"

#include "core/text.h"

namespace tessera::http {
namespace {

constexpr std::string_view kCrlf = "\r\n";

// tchar of RFC 9110: the characters a token (method, header name) may hold.
bool IsTokenChar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return true;
  }
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view text) {
  if (text.empty()) {
    return false;
  }
  for (char c : text) {
    if (!IsTokenChar(c)) {
      return false;
    }
  }
  return true;
}

// A field value may hold visible characters, spaces, tabs and obs-text (bytes >= 0x80).
bool IsFieldValueChar(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return c == '\t' || (byte >= 0x20 && byte != 0x7f);
}

// Characters allowed in an origin-form target (path and query) before decoding: visible ASCII.
bool IsTargetChar(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return byte > 0x20 && byte < 0x7f;
}

std::string_view TrimOws(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  return text;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// True when the comma-separated list `value` holds `token` (ASCII case ignored).
bool ListHasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view item = TrimOws(value.substr(0, comma));
    if (EqualsIgnoreCase(item, token)) {
      return true;
    }
    if (comma == std::string_view::npos) {
      break;
    }
    value.remove_prefix(comma + 1);
  }
  return false;
}

ParseResult Fail(int status, std::string message) {
  ParseResult result;
  result.kind = ParseResult::Kind::kError;
  result.status = status;
  result.error = std::move(message);
  return result;
}

// Splits the query string into decoded pairs. Empty pieces ("a=1&&b=2") are skipped.
bool ParseQuery(std::string_view query, std::map<std::string, std::string>* out,
                std::string* error) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view piece = query.substr(0, amp);
    if (!piece.empty()) {
      const size_t eq = piece.find('=');
      const std::string_view raw_key = piece.substr(0, eq);
      const std::string_view raw_value =
          eq == std::string_view::npos ? std::string_view() : piece.substr(eq + 1);
      auto key = PercentDecode(raw_key, true);
      auto value = PercentDecode(raw_value, true);
      if (!key.has_value() || !value.has_value()) {
        *error = "query parameter " + QuoteValue(piece) +
                 " has a '%' not followed by two hex digits";
        return false;
      }
      (*out)[*key] = *value;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
  return true;
}

}  // namespace

void Headers::Add(std::string name, std::string value) {
  fields_.emplace_back(std::move(name), std::move(value));
}

std::optional<std::string_view> Headers::Get(std::string_view name) const {
  for (const auto& [field, value] : fields_) {
    if (EqualsIgnoreCase(field, name)) {
      return std::string_view(value);
    }
  }
  return std::nullopt;
}

std::vector<std::string_view> Headers::GetAll(std::string_view name) const {
  std::vector<std::string_view> out;
  for (const auto& [field, value] : fields_) {
    if (EqualsIgnoreCase(field, name)) {
      out.emplace_back(value);
    }
  }
  return out;
}

Response Response::Text(int status, std::string body) {
  Response response;
  response.status = status;
  response.body = std::move(body);
  if (response.body.empty() || response.body.back() != '\n') {
    response.body.push_back('\n');
  }
  return response;
}

std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) {
        return std::nullopt;
      }
      const int high = HexValue(text[i + 1]);
      const int low = HexValue(text[i + 2]);
      if (high < 0 || low < 0) {
        return std::nullopt;
      }
      out.push_back(static_cast<char>(high * 16 + low));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

ParseResult ParseRequest(std::string_view buffer, const ParseLimits& limits) {
  // Skip empty lines before the request line (RFC 9112 section 2.2 allows a client to send them).
  size_t start = 0;
  while (start < buffer.size() && (buffer[start] == '\r' || buffer[start] == '\n')) {
    if (buffer[start] == '\r' && start + 1 < buffer.size() && buffer[start + 1] != '\n') {
      return Fail(400, "bare CR in the request");
    }
    ++start;
    if (start > limits.max_head_bytes) {
      return Fail(400, "too many empty lines before the request line");
    }
  }
  const std::string_view data = buffer.substr(start);

  // Find the end of the head, refusing bare LF line endings on the way.
  size_t head_end = std::string_view::npos;  // index of the "\r\n\r\n"
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r')) {
      return Fail(400, "line ended by a bare LF; HTTP lines end with CRLF");
    }
    if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] != '\n') {
      return Fail(400, "bare CR in the request head");
    }
    if (i + 1 > limits.max_head_bytes) {
      return Fail(431, "request head is larger than " + std::to_string(limits.max_head_bytes) +
                           " bytes");
    }
    if (i >= 3 && data.substr(i - 3, 4) == "\r\n\r\n") {
      head_end = i - 3;
      break;
    }
  }
  if (head_end == std::string_view::npos) {
    return ParseResult{};  // kNeedMore
  }
  const std::string_view head = data.substr(0, head_end);
  const size_t body_start = start + head_end + 4;

  ParseResult result;
  Request& request = result.request;

  // Request line.
  const size_t line_end = head.find(kCrlf);
  const std::string_view request_line = head.substr(0, line_end);
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 =
      sp1 == std::string_view::npos ? std::string_view::npos : request_line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      request_line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(400, "request line " + QuoteValue(request_line) +
                         " is not METHOD SP TARGET SP HTTP-VERSION");
  }
  const std::string_view method = request_line.substr(0, sp1);
  const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = request_line.substr(sp2 + 1);
  if (!IsToken(method)) {
    return Fail(400, "method " + QuoteValue(method) + " is not a token");
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9') {
    return Fail(400, "version " + QuoteValue(version) + " is not HTTP/x.y");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Fail(505, "HTTP version " + QuoteValue(version) +
                         " is not supported; use HTTP/1.1 or HTTP/1.0");
  }
  if (target.empty() || target.front() != '/') {
    return Fail(400, "request target " + QuoteValue(target) +
                         " is not a path starting with '/' (origin-form)");
  }
  for (char c : target) {
    if (!IsTargetChar(c)) {
      return Fail(400, "request target " + QuoteValue(target) + " holds a control or non-ASCII byte");
    }
  }
  if (target.find('#') != std::string_view::npos) {
    return Fail(400, "request target " + QuoteValue(target) + " holds a fragment ('#')");
  }
  request.method = std::string(method);
  request.target = std::string(target);
  request.version = std::string(version);
  const size_t question = target.find('?');
  auto path = PercentDecode(target.substr(0, question), false);
  if (!path.has_value()) {
    return Fail(400, "path " + QuoteValue(target.substr(0, question)) +
                         " has a '%' not followed by two hex digits");
  }
  if (path->find('\0') != std::string::npos) {
    return Fail(400, "path " + QuoteValue(target.substr(0, question)) + " encodes a NUL byte");
  }
  request.path = std::move(*path);
  if (question != std::string_view::npos) {
    std::string error;
    if (!ParseQuery(target.substr(question + 1), &request.query, &error)) {
      return Fail(400, error);
    }
  }

  // Header fields.
  std::string_view rest =
      line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
  while (!rest.empty()) {
    const size_t end = rest.find(kCrlf);
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
    if (line.front() == ' ' || line.front() == '\t') {
      return Fail(400, "header line " + QuoteValue(line) +
                           " starts with whitespace (line folding is not supported)");
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return Fail(400, "header line " + QuoteValue(line) + " has no ':'");
    }
    const std::string_view name = line.substr(0, colon);
    if (!IsToken(name)) {
      return Fail(400, "header name " + QuoteValue(name) +
                           " is not a token (no spaces before the ':')");
    }
    const std::string_view value = TrimOws(line.substr(colon + 1));
    for (char c : value) {
      if (!IsFieldValueChar(c)) {
        return Fail(400, "header " + std::string(name) + " holds a control character");
      }
    }
    if (request.headers.size() >= limits.max_header_count) {
      return Fail(431, "more than " + std::to_string(limits.max_header_count) + " header fields");
    }
    request.headers.Add(std::string(name), std::string(value));
  }

  if (request.version == "HTTP/1.1") {
    const auto hosts = request.headers.GetAll("Host");
    if (hosts.size() != 1) {
      return Fail(400, hosts.empty() ? "HTTP/1.1 request without a Host header"
                                     : "more than one Host header");
    }
  }
  const std::optional<std::string_view> connection = request.headers.Get("Connection");
  if (request.version == "HTTP/1.1") {
    request.keep_alive = !(connection.has_value() && ListHasToken(*connection, "close"));
  } else {
    request.keep_alive = connection.has_value() && ListHasToken(*connection, "keep-alive");
  }

  // Body framing.
  if (const auto coding = request.headers.Get("Transfer-Encoding"); coding.has_value()) {
    if (ListHasToken(*coding, "chunked")) {
      return Fail(411, "chunked request bodies are not supported; send the body with "
                       "Content-Length");
    }
    return Fail(501, "Transfer-Encoding " + QuoteValue(*coding) +
                         " is not supported; send the body with Content-Length");
  }
  uint64_t length = 0;
  const auto lengths = request.headers.GetAll("Content-Length");
  for (size_t i = 0; i < lengths.size(); ++i) {
    uint64_t value = 0;
    if (ParseDigits(lengths[i], &value) != DigitsError::kNone) {
      return Fail(400, "Content-Length " + QuoteValue(lengths[i]) + " is not a number of bytes");
    }
    if (i > 0 && value != length) {
      return Fail(400, "Content-Length headers disagree");
    }
    length = value;
  }
  if (length > limits.max_body_bytes) {
    return Fail(413, "body of " + std::to_string(length) + " bytes is larger than the limit of " +
                         std::to_string(limits.max_body_bytes) + " bytes");
  }
  if (buffer.size() - body_start < length) {
    return ParseResult{};  // kNeedMore
  }
  request.body = std::string(buffer.substr(body_start, length));
  result.kind = ParseResult::Kind::kComplete;
  result.consumed = body_start + length;
  return result;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

bool SerializeResponse(const Response& response, bool keep_alive, bool head_only,
                       std::string* out, std::string* error) {
  if (response.status < 100 || response.status > 599) {
    *error = "status " + std::to_string(response.status) + " is not from 100 to 599";
    return false;
  }
  auto bad_text = [](std::string_view text) {
    return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
  };
  if (bad_text(response.content_type)) {
    *error = "content type " + QuoteValue(response.content_type) + " holds CR, LF or NUL";
    return false;
  }
  for (const auto& [name, value] : response.headers) {
    if (!IsToken(name)) {
      *error = "header name " + QuoteValue(name) + " is not a token";
      return false;
    }
    if (EqualsIgnoreCase(name, "Content-Length") || EqualsIgnoreCase(name, "Connection") ||
        EqualsIgnoreCase(name, "Content-Type") || EqualsIgnoreCase(name, "Transfer-Encoding")) {
      *error = "header " + name + " is set by the server, not by a handler";
      return false;
    }
    if (bad_text(value)) {
      *error = "header " + name + " holds CR, LF or NUL";
      return false;
    }
  }
  std::string text = "HTTP/1.1 " + std::to_string(response.status) + " " +
                     std::string(ReasonPhrase(response.status)) + "\r\n";
  if (!response.content_type.empty()) {
    text += "Content-Type: " + response.content_type + "\r\n";
  }
  text += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  text += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : response.headers) {
    text += name + ": " + value + "\r\n";
  }
  text += "\r\n";
  if (!head_only) {
    text += response.body;
  }
  *out = std::move(text);
  return true;
}

}  // namespace tessera::http
