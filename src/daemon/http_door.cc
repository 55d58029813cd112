// tesserad's HTTP routes over the control tree, and the doors' JSON (nlohmann-json). Translations
// only: what a path or a value means is the tree's business.
#include "daemon/http_door.h"

#include <nlohmann/json.hpp>

#include "metrics/exposition.h"
#include "pages/pages.h"

namespace tessera::daemon {
namespace {

constexpr std::string_view kCtlPrefix = "/v1/ctl";
constexpr std::string_view kJson = "application/json";

http::Response Json(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.content_type = std::string(kJson);
  r.body = std::move(body) + "\n";
  return r;
}

http::Response ServeCtl(const http::Request& request, std::string_view path,
                        const ctl::ControlTree& tree, bool allow_write) {
  if (request.method == "GET" || request.method == "HEAD") {
    auto entry = tree.Stat(path);
    if (!entry.ok()) return http::Response::Text(404, entry.error());
    if (entry->is_directory) {
      auto entries = tree.List(path);
      if (!entries.ok()) return http::Response::Text(404, entries.error());
      return Json(200, EntriesJson(*entries));
    }
    auto text = tree.Read(path);
    if (!text.ok()) return http::Response::Text(404, text.error());
    http::Response r;
    r.body = *text;
    return r;
  }
  if (request.method == "PUT") {
    if (!allow_write) {
      return http::Response::Text(
          403, "writes over HTTP are off; start tesserad with --http-allow-write to allow them");
    }
    auto force = request.query.find("force");
    ctl::WriteOptions write;
    write.force = force != request.query.end() && force->second == "1";
    write.writer_may_write = true;  // whoever can reach the address: see --http-allow-write
    if (Status s = tree.Write(path, request.body, write); !s.ok()) {
      return http::Response::Text(400, s.message());
    }
    http::Response r;
    r.status = 204;
    return r;
  }
  http::Response r = http::Response::Text(
      405, request.method + " is not served on " + request.path + "; expected GET or PUT");
  r.headers.push_back({"Allow", "GET, HEAD, PUT"});
  return r;
}

}  // namespace

std::string EntriesJson(const std::vector<ctl::Entry>& entries) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ctl::Entry& e : entries) {
    list.push_back({{"name", e.name}, {"dir", e.is_directory}, {"writable", e.writable}});
  }
  return nlohmann::ordered_json{{"entries", std::move(list)}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ValueJson(std::string_view text) {
  // A control-tree file's text is whatever was written; bytes that are not UTF-8 become U+FFFD
  // rather than an exception.
  return nlohmann::ordered_json{{"value", text}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

http::Response HandleHttp(const http::Request& request, const HttpDoor& door) {
  const std::string& path = request.path;
  if (path == kCtlPrefix || path.rfind(std::string(kCtlPrefix) + "/", 0) == 0) {
    return ServeCtl(request, std::string_view(path).substr(kCtlPrefix.size()), *door.tree,
                    door.allow_write);
  }
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (path == "/v1/state" || path == "/metrics" || path == "/" || path == "/ui") {
    if (!get) {
      http::Response r = http::Response::Text(
          405, request.method + " is not served on " + path + "; expected GET");
      r.headers.push_back({"Allow", "GET, HEAD"});
      return r;
    }
    if (path == "/v1/state") return Json(200, door.state());
    if (path == "/" || path == "/ui") {
      http::Response page;
      page.content_type = std::string(pages::kContentType);
      page.body = std::string(pages::NodePage());
      return page;
    }
    http::Response r;
    r.content_type = std::string(metrics::kContentType);
    r.body = door.metrics();
    return r;
  }
  return http::Response::Text(
      404,
      "no route " + path + "; expected /v1/ctl/PATH, /v1/state, /metrics or / (the node page)");
}

}  // namespace tessera::daemon
