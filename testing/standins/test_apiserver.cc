// TestApiServer: the stand-in kube-apiserver (see the header for what it is and is not).
#include "testing/standins/test_apiserver.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <functional>
#include <random>
#include <set>

#include "k8s/api_client.h"
#include "testing/standins/k8s_names.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;

std::string NewUid() { return NewUuid(); }

Json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", Json::object()},
          {"status", code < 300 ? "Success" : "Failure"},
          {"message", message},
          {"reason", reason},
          {"code", code}};
}

void Reply(httplib::Response& res, int code, const Json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void Fail(httplib::Response& res, int code, const std::string& reason, const std::string& message) {
  Reply(res, code, StatusBody(code, reason, message));
}

// The value at a dotted path ("spec.nodeName"), as text; "" when absent.
std::string FieldValue(const Json& obj, const std::string& dotted) {
  const Json* cur = &obj;
  size_t pos = 0;
  while (pos <= dotted.size()) {
    const size_t dot = dotted.find('.', pos);
    const std::string part =
        dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!cur->is_object() || !cur->contains(part)) return "";
    cur = &(*cur)[part];
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_null()) return "";
  return cur->dump();
}

struct Requirement {
  enum Op { kEq, kNe, kIn, kNotIn, kExists, kNotExists } op = kEq;
  std::string key;
  std::vector<std::string> values;
};

std::string Strip(const std::string& s) {
  const size_t a = s.find_first_not_of(' ');
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(' ') - a + 1);
}

// Splits on commas outside parentheses.
std::vector<std::string> SplitTerms(const std::string& text) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(Strip(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!Strip(cur).empty()) out.push_back(Strip(cur));
  return out;
}

Result<std::vector<Requirement>> ParseSelector(const std::string& text, bool labels) {
  std::vector<Requirement> out;
  for (const std::string& term : SplitTerms(text)) {
    if (term.empty()) continue;
    Requirement r;
    size_t at;
    if ((at = term.find("!=")) != std::string::npos) {
      r.op = Requirement::kNe;
      r.key = Strip(term.substr(0, at));
      r.values = {Strip(term.substr(at + 2))};
    } else if ((at = term.find("==")) != std::string::npos) {
      r.key = Strip(term.substr(0, at));
      r.values = {Strip(term.substr(at + 2))};
    } else if ((at = term.find('=')) != std::string::npos) {
      r.key = Strip(term.substr(0, at));
      r.values = {Strip(term.substr(at + 1))};
    } else if (labels && (at = term.find(" notin ")) != std::string::npos) {
      r.op = Requirement::kNotIn;
      r.key = Strip(term.substr(0, at));
    } else if (labels && (at = term.find(" in ")) != std::string::npos) {
      r.op = Requirement::kIn;
      r.key = Strip(term.substr(0, at));
    } else if (labels && term[0] == '!') {
      r.op = Requirement::kNotExists;
      r.key = Strip(term.substr(1));
    } else if (labels) {
      r.op = Requirement::kExists;
      r.key = term;
    } else {
      return Result<std::vector<Requirement>>::Error("field selector \"" + text + "\": term \"" +
                                                     term + "\" is not key=value or key!=value");
    }
    if (r.op == Requirement::kIn || r.op == Requirement::kNotIn) {
      const size_t open = term.find('('), close = term.rfind(')');
      if (open == std::string::npos || close == std::string::npos || close < open) {
        return Result<std::vector<Requirement>>::Error("label selector \"" + text + "\": \"" +
                                                       term + "\" needs a (list)");
      }
      for (const std::string& v : SplitTerms(term.substr(open + 1, close - open - 1)))
        r.values.push_back(v);
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool Matches(const Json& obj, const std::vector<Requirement>& fields,
             const std::vector<Requirement>& labels) {
  for (const Requirement& r : fields) {
    const std::string v = FieldValue(obj, r.key);
    if ((r.op == Requirement::kEq) != (v == r.values[0])) return false;
  }
  const Json empty = Json::object();
  const Json& l = obj.contains("metadata") && obj["metadata"].contains("labels") &&
                          obj["metadata"]["labels"].is_object()
                      ? obj["metadata"]["labels"]
                      : empty;
  for (const Requirement& r : labels) {
    const bool has = l.contains(r.key);
    const std::string v = has && l[r.key].is_string() ? l[r.key].get<std::string>() : "";
    bool in = false;
    for (const std::string& x : r.values) in = in || (has && v == x);
    switch (r.op) {
      case Requirement::kEq:
        if (!in) return false;
        break;
      case Requirement::kNe:
        if (has && in) return false;
        break;
      case Requirement::kIn:
        if (!in) return false;
        break;
      case Requirement::kNotIn:
        if (in) return false;
        break;
      case Requirement::kExists:
        if (!has) return false;
        break;
      case Requirement::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

std::string ListKind(const std::string& kind) { return kind + "List"; }

// The media type of a Content-Type header, without parameters, lowercase.
std::string MediaType(const std::string& header) {
  std::string t = header.substr(0, header.find(';'));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

// What the API server's decoder answers a POST body that is not JSON it can read.
bool RefuseMediaType(const httplib::Request& req, httplib::Response& res) {
  const std::string type = MediaType(req.get_header_value("Content-Type"));
  if (type == "application/json") return false;
  Fail(res, 415, "UnsupportedMediaType",
       "the body of the request was in an unknown format - accepted media types include: "
       "application/json, application/yaml, application/vnd.kubernetes.protobuf (got \"" +
           type + "\")");
  return true;
}

// legacyValidateEvent (pkg/apis/core/validation/events.go), which is all a core/v1 Event create
// is checked against: its namespace a DNS subdomain that agrees with the involved object's (a
// cluster-scoped object's events go to "" or default); with eventTime set, the reporting fields
// and lengths too. "" when fine.
std::string EventProblem(const Json& e) {
  const Json& meta = e["metadata"];
  const std::string ns = meta.value("namespace", "");
  const Json involved = e.value("involvedObject", Json::object());
  const std::string object_ns = involved.is_object() ? involved.value("namespace", "") : "";
  auto str = [&](const char* key) {
    return e.contains(key) && e[key].is_string() ? e[key].get<std::string>() : "";
  };
  if (str("eventTime").empty()) {
    if (object_ns.empty() ? (!ns.empty() && ns != "default") : ns != object_ns) {
      return "involvedObject.namespace: Invalid value: \"" + object_ns +
             "\": does not match event.namespace";
    }
  } else {
    if (object_ns.empty() && ns != "default" && ns != "kube-system") {
      return "involvedObject.namespace: Invalid value: \"\": does not match event.namespace";
    }
    const std::string controller = str("reportingComponent");
    if (controller.empty()) return "reportingController: Required value";
    if (!IsQualifiedName(controller))
      return "reportingController: Invalid value: \"" + controller + "\"";
    const std::string instance = str("reportingInstance");
    if (instance.empty()) return "reportingInstance: Required value";
    if (instance.size() > 128)
      return "reportingInstance: Invalid value: \"\": can have at most 128 characters";
    if (str("action").empty()) return "action: Required value";
    if (str("action").size() > 128)
      return "action: Invalid value: \"\": can have at most 128 characters";
    if (str("reason").empty()) return "reason: Required value";
    if (str("reason").size() > 128)
      return "reason: Invalid value: \"\": can have at most 128 characters";
    if (str("message").size() > 1024)
      return "message: Invalid value: \"\": can have at most 1024 characters";
  }
  if (!IsDns1123Subdomain(ns)) {
    return "namespace: Invalid value: \"" + ns +
           "\": a lowercase RFC 1123 subdomain must consist "
           "of lower case alphanumeric characters, '-' or '.'";
  }
  return "";
}

constexpr size_t kTotalAnnotationSizeLimit = 256 * 1024;  // ValidateAnnotations

// ValidateObjectMeta's checks of the annotations: string values (a decode error, 400, otherwise),
// qualified-name keys and at most 256 KiB in all (422). "" when fine; else `code` and the message.
std::string AnnotationProblem(const Json& meta, int* code) {
  auto it = meta.find("annotations");
  if (it == meta.end() || it->is_null()) return "";
  if (!it->is_object()) {
    *code = 400;
    return "json: cannot unmarshal " + std::string(it->type_name()) +
           " into Go struct field ObjectMeta.metadata.annotations of type map[string]string";
  }
  size_t total = 0;
  for (auto a = it->begin(); a != it->end(); ++a) {
    if (!a->is_string()) {
      *code = 400;
      return "json: cannot unmarshal " + std::string(a->type_name()) +
             " into Go struct field ObjectMeta.metadata.annotations of type string";
    }
    std::string lower = a.key();
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!IsQualifiedName(lower)) {
      *code = 422;
      return "metadata.annotations: Invalid value: \"" + a.key() +
             "\": name part must consist of alphanumeric characters, '-', '_' or '.', and must "
             "start and end with an alphanumeric character";
    }
    total += a.key().size() + a->get_ref<const std::string&>().size();
  }
  if (total > kTotalAnnotationSizeLimit) {
    *code = 422;
    return "metadata.annotations: Too long: must have at most " +
           std::to_string(kTotalAnnotationSizeLimit) + " bytes";
  }
  return "";
}

std::string Plural(const std::string& kind) {
  if (IsResourceKind(kind)) {
    std::string lower;
    for (char c : kind) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower + (lower.back() == 's' ? "es" : "s");
  }
  return kind == "Node" ? "nodes" : kind == "Pod" ? "pods" : "events";
}

uint64_t ParseRv(const std::string& text) {
  if (text.empty()) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  return *end == '\0' ? v : 0;
}

}  // namespace

TestApiServer::TestApiServer() {
  for (const char* kind : {"Node", "Pod", "Event", "ResourceSlice", "DeviceClass", "ResourceClaim",
                           "ResourceClaimTemplate"}) {
    changed_[kind];
  }
}

TestApiServer::~TestApiServer() { Stop(); }

Status TestApiServer::Start(int port) {
  server_ = std::make_unique<httplib::Server>();
  // Watches hold a worker each for their whole life.
  server_->new_task_queue = [] { return new httplib::ThreadPool(96); };
  server_->set_tcp_nodelay(true);  // as the real API server (Go turns Nagle off on every socket)
  Route();
  if (port == 0) {
    port_ = server_->bind_to_any_port("127.0.0.1");
    if (port_ <= 0) return Status::Error("test API server: cannot bind 127.0.0.1");
  } else {
    if (!server_->bind_to_port("127.0.0.1", port)) {
      return Status::Error("test API server: cannot bind 127.0.0.1:" + std::to_string(port));
    }
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 500 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return Status::Ok();
}

void TestApiServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  WakeAll();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

std::map<std::string, Json>* TestApiServer::Objects(const std::string& kind) {
  if (IsResourceKind(kind)) return &resources_[kind];
  if (kind == "Node") return &nodes_;
  if (kind == "Pod") return &pods_;
  return &events_;
}

void TestApiServer::Record(const std::string& kind, const std::string& type, Json object,
                           Json previous) {
  history_.push_back(Change{rv_, kind, type, std::move(object), std::move(previous)});
  TrimHistory();
  changed_.at(kind).notify_all();
}

Json TestApiServer::Insert(const std::string& kind, const std::string& key, Json object) {
  ++rv_;
  Json& meta = object["metadata"];
  meta["uid"] = NewUid();
  meta["creationTimestamp"] = Rfc3339Now();
  meta["resourceVersion"] = std::to_string(rv_);
  (*Objects(kind))[key] = object;
  if (kind == "Event") event_order_.push_back(key);
  Record(kind, "ADDED", object, Json());
  return object;
}

void TestApiServer::Modify(const std::string& kind, const std::string& key, Json object) {
  auto* objects = Objects(kind);
  Json& stored = (*objects)[key];
  Json previous = std::move(stored);
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  if (IsResourceKind(kind) && object.value("spec", Json()) != previous.value("spec", Json())) {
    object["metadata"]["generation"] = previous["metadata"].value("generation", int64_t{1}) + 1;
  }
  stored = object;
  Record(kind, "MODIFIED", std::move(object), std::move(previous));
}

void TestApiServer::Remove(const std::string& kind, const std::string& key) {
  auto* objects = Objects(kind);
  auto it = objects->find(key);
  if (it == objects->end()) return;
  Json object = std::move(it->second);
  objects->erase(it);
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  Record(kind, "DELETED", std::move(object), Json());
}

Json TestApiServer::CreateNode(Json node) {
  std::lock_guard<std::mutex> lock(mu_);
  node["apiVersion"] = "v1";
  node["kind"] = "Node";
  return Insert("Node", node["metadata"]["name"].get<std::string>(), node);
}

Json TestApiServer::CreatePod(Json pod) {
  std::lock_guard<std::mutex> lock(mu_);
  pod["apiVersion"] = "v1";
  pod["kind"] = "Pod";
  if (!pod["metadata"].contains("namespace")) pod["metadata"]["namespace"] = "default";
  if (!pod.contains("status") || !pod["status"].contains("phase"))
    pod["status"]["phase"] = "Pending";
  const std::string key = pod["metadata"]["namespace"].get<std::string>() + "/" +
                          pod["metadata"]["name"].get<std::string>();
  return Insert("Pod", key, pod);
}

std::optional<Json> TestApiServer::GetNode(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

std::optional<Json> TestApiServer::GetPod(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(ns + "/" + name);
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> TestApiServer::Pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  for (const auto& [key, pod] : pods_) out.push_back(pod);
  return out;
}

bool TestApiServer::SetPodPhase(const std::string& ns, const std::string& name,
                                const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(ns + "/" + name);
  if (it == pods_.end()) return false;
  Json pod = it->second;
  pod["status"]["phase"] = phase;
  Modify("Pod", ns + "/" + name, pod);
  return true;
}

bool TestApiServer::SetNodeLabel(const std::string& name, const std::string& key,
                                 const std::optional<std::string>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return false;
  Json node = it->second;
  if (value) {
    node["metadata"]["labels"][key] = *value;
  } else if (node["metadata"].contains("labels")) {
    node["metadata"]["labels"].erase(key);
  }
  Modify("Node", name, node);
  return true;
}

bool TestApiServer::MarkPodDeleting(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(ns + "/" + name);
  if (it == pods_.end()) return false;
  Json pod = it->second;
  pod["metadata"]["deletionTimestamp"] = Rfc3339Now();
  Modify("Pod", ns + "/" + name, pod);
  return true;
}

bool TestApiServer::DeletePod(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pods_.count(ns + "/" + name) == 0) return false;
  Remove("Pod", ns + "/" + name);
  return true;
}

std::vector<Json> TestApiServer::Events(const std::string& ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  for (const std::string& key : event_order_) {
    auto it = events_.find(key);
    if (it == events_.end()) continue;
    if (ns.empty() || it->second["metadata"].value("namespace", "") == ns)
      out.push_back(it->second);
  }
  return out;
}

void TestApiServer::TrimHistory() {
  uint64_t oldest_live = UINT64_MAX;  // the oldest version a live watch has been sent up to
  for (const auto& [id, rv] : watch_positions_) oldest_live = std::min(oldest_live, rv);
  while (history_.size() > history_limit_ && history_.front().rv <= oldest_live) {
    compacted_ = history_.front().rv;
    history_.pop_front();
  }
}

void TestApiServer::WakeAll() {
  for (auto& [kind, cv] : changed_) cv.notify_all();
}

void TestApiServer::Compact() {
  std::lock_guard<std::mutex> lock(mu_);
  history_.clear();
  compacted_ = rv_;
  WakeAll();
}

uint64_t TestApiServer::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

int TestApiServer::conflicts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conflicts_;
}

void TestApiServer::RequireToken(std::string token) {
  std::lock_guard<std::mutex> lock(mu_);
  token_ = std::move(token);
}

int TestApiServer::unauthorized() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unauthorized_;
}

void TestApiServer::InjectFault(Fault fault) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fault.count > 0) faults_.push_back(std::move(fault));
}

int TestApiServer::faults_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_served_;
}

void TestApiServer::SetLatency(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  latency_ = delay;
}

void TestApiServer::DropWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  ++drop_epoch_;
  WakeAll();
}

void TestApiServer::SetWatchTimeout(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  watch_timeout_ = timeout;
}

void TestApiServer::SetBookmarkInterval(std::chrono::milliseconds interval) {
  std::lock_guard<std::mutex> lock(mu_);
  bookmark_interval_ = interval;
}

void TestApiServer::SetHistoryLimit(size_t changes) {
  std::lock_guard<std::mutex> lock(mu_);
  history_limit_ = std::max<size_t>(changes, 1);
  TrimHistory();
  WakeAll();
}

int TestApiServer::Requests(const std::string& method, const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [m, p] : served_) {
    if ((method.empty() || m == method) && p.find(path) != std::string::npos) ++n;
  }
  return n;
}

bool TestApiServer::Intercept(const httplib::Request& req, httplib::Response& res) {
  // Authentication, then the faults tests asked for, then the latency: in the route's handler,
  // once the body is read (an answer before it would leave the body on a kept-alive connection).
  std::optional<Fault> fault;
  std::chrono::milliseconds latency{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    served_.emplace_back(req.method, req.path);
    if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
      ++unauthorized_;
      Fail(res, 401, "Unauthorized", "Unauthorized");
      return true;
    }
    for (auto it = faults_.begin(); it != faults_.end(); ++it) {
      if ((!it->method.empty() && it->method != req.method) ||
          req.path.find(it->path) == std::string::npos) {
        continue;
      }
      fault = *it;
      ++faults_served_;
      if (--it->count <= 0) faults_.erase(it);
      break;
    }
    latency = latency_;
  }
  if (latency.count() > 0) std::this_thread::sleep_for(latency);
  if (!fault) return false;
  if (fault->delay.count() > 0) std::this_thread::sleep_for(fault->delay);
  if (fault->status == 0) {
    // The headers go out, then the connection closes with no body: a dropped connection.
    res.set_chunked_content_provider("application/json",
                                     [](size_t, httplib::DataSink&) { return false; });
    return true;
  }
  const int code = fault->status;
  const std::string reason = code == 429   ? "TooManyRequests"
                             : code == 503 ? "ServiceUnavailable"
                             : code == 504 ? "Timeout"
                                           : "InternalError";
  if (code == 429 || code == 503) res.set_header("Retry-After", "1");
  Fail(res, code, reason,
       "the stand-in API server was told to fail " + req.method + " " + req.path);
  return true;
}

void TestApiServer::Route() {
  httplib::Server& server = *server_;
  // Every route goes through Intercept first.
  auto guard = [this](httplib::Server::Handler h) {
    return [this, h](const httplib::Request& req, httplib::Response& res) {
      if (!Intercept(req, res)) h(req, res);
    };
  };
  struct Routes {
    httplib::Server& server;
    std::function<httplib::Server::Handler(httplib::Server::Handler)> guard;
    void Get(const std::string& p, httplib::Server::Handler h) {
      server.Get(p, guard(std::move(h)));
    }
    void Post(const std::string& p, httplib::Server::Handler h) {
      server.Post(p, guard(std::move(h)));
    }
    void Patch(const std::string& p, httplib::Server::Handler h) {
      server.Patch(p, guard(std::move(h)));
    }
    void Delete(const std::string& p, httplib::Server::Handler h) {
      server.Delete(p, guard(std::move(h)));
    }
  } s{server, guard};

  // A collection's GET: a list, or a watch with ?watch=true; namespaced ones take the namespace
  // from the path's first group.
  auto collection_get = [this](const std::string& kind, bool namespaced) {
    return CollectionGet(kind, namespaced);
  };
  s.Get("/api/v1/nodes", collection_get("Node", false));
  s.Get("/api/v1/pods", collection_get("Pod", false));
  s.Get("/api/v1/events", collection_get("Event", false));
  s.Get(R"(/api/v1/namespaces/([^/]+)/pods)", collection_get("Pod", true));
  s.Get(R"(/api/v1/namespaces/([^/]+)/events)", collection_get("Event", true));
  s.Post("/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCreate({"Node", ""}, req, res);
  });
  s.Post(R"(/api/v1/namespaces/([^/]+)/pods)",
         [this](const httplib::Request& req, httplib::Response& res) {
           HandleCreate({"Pod", req.matches[1]}, req, res);
         });
  s.Post(R"(/api/v1/namespaces/([^/]+)/events)",
         [this](const httplib::Request& req, httplib::Response& res) {
           HandleCreate({"Event", req.matches[1]}, req, res);
         });
  s.Get(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGet("Node", req.matches[1], res);
  });
  s.Patch(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    HandlePatch("Node", req.matches[1], req, res, false);
  });
  s.Delete(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    HandleDelete("Node", req.matches[1], res);
  });
  const char* pod = R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))";
  s.Get(pod, [this](const httplib::Request& req, httplib::Response& res) {
    HandleGet("Pod", std::string(req.matches[1]) + "/" + std::string(req.matches[2]), res);
  });
  s.Patch(pod, [this](const httplib::Request& req, httplib::Response& res) {
    HandlePatch("Pod", std::string(req.matches[1]) + "/" + std::string(req.matches[2]), req, res,
                false);
  });
  s.Delete(pod, [this](const httplib::Request& req, httplib::Response& res) {
    HandleDelete("Pod", std::string(req.matches[1]) + "/" + std::string(req.matches[2]), res);
  });
  s.Patch(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/status)",
          [this](const httplib::Request& req, httplib::Response& res) {
            HandlePatch("Pod", std::string(req.matches[1]) + "/" + std::string(req.matches[2]), req,
                        res, true);
          });
  s.Post(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding)",
         [this](const httplib::Request& req, httplib::Response& res) {
           HandleBinding(req.matches[1], req.matches[2], req, res);
         });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) {
      Fail(res, res.status, res.status == 404 ? "NotFound" : "BadRequest",
           "the stand-in API server has no route for " + req.method + " " + req.path);
    }
  });
  RouteResource();
}

std::function<void(const httplib::Request&, httplib::Response&)> TestApiServer::CollectionGet(
    const std::string& kind, bool namespaced) {
  return [this, kind, namespaced](const httplib::Request& req, httplib::Response& res) {
    const Collection c{kind, namespaced ? std::string(req.matches[1]) : std::string()};
    if (req.get_param_value("watch") == "true" || req.get_param_value("watch") == "1") {
      HandleWatch(c, req, res);
    } else {
      HandleList(c, req, res);
    }
  };
}

void TestApiServer::HandleList(const Collection& c, const httplib::Request& req,
                               httplib::Response& res) {
  auto fields = ParseSelector(req.get_param_value("fieldSelector"), false);
  auto labels = ParseSelector(req.get_param_value("labelSelector"), true);
  if (!fields.ok() || !labels.ok()) {
    return Fail(res, 400, "BadRequest", fields.ok() ? labels.error() : fields.error());
  }
  if (c.kind == "ResourceSlice") {
    // Upstream's field selectors for ResourceSlices; any other field is refused.
    for (const Requirement& r : *fields) {
      static const std::set<std::string> kFields = {"spec.nodeName", "spec.driver",
                                                    "spec.pool.name", "metadata.name"};
      if (kFields.count(r.key) == 0) {
        return Fail(res, 400, "BadRequest", "field label not supported: " + r.key);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  Json items = Json::array();
  for (const auto& [key, obj] : *Objects(c.kind)) {
    if (!c.ns.empty() && obj["metadata"].value("namespace", "") != c.ns) continue;
    if (Matches(obj, *fields, *labels)) items.push_back(obj);
  }
  Reply(res, 200,
        {{"kind", ListKind(c.kind)},
         {"apiVersion", ApiVersionOf(c.kind)},
         {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
         {"items", items}});
}

void TestApiServer::HandleWatch(const Collection& c, const httplib::Request& req,
                                httplib::Response& res) {
  auto fields = ParseSelector(req.get_param_value("fieldSelector"), false);
  auto labels = ParseSelector(req.get_param_value("labelSelector"), true);
  if (!fields.ok() || !labels.ok()) {
    return Fail(res, 400, "BadRequest", fields.ok() ? labels.error() : fields.error());
  }
  struct State {
    Collection c;
    std::vector<Requirement> fields, labels;
    uint64_t last = 0;
    bool from_now = false;
    bool started = false;
    bool bookmarks = false;
    uint64_t drop_epoch = 0;
    uint64_t id = 0;
    std::chrono::steady_clock::time_point deadline, quiet_since;
  };
  // Registered as a watcher at the server's current version: the window keeps what it has not
  // been sent yet (the cacher pushes every change to its live watchers), and the registration goes
  // with the stream.
  uint64_t id = 0;
  {
    const std::string from = req.get_param_value("resourceVersion");
    std::lock_guard<std::mutex> lock(mu_);
    id = ++next_watch_;
    watch_positions_[id] = from.empty() || from == "0" ? rv_ : ParseRv(from);
  }
  auto st = std::shared_ptr<State>(new State, [this, id](State* state) {
    std::lock_guard<std::mutex> lock(mu_);
    watch_positions_.erase(id);
    TrimHistory();  // what only this watch still needed goes now
    delete state;
  });
  st->id = id;
  st->c = c;
  st->fields = *fields;
  st->labels = *labels;
  const std::string rv = req.get_param_value("resourceVersion");
  st->from_now = rv.empty() || rv == "0";
  st->last = ParseRv(rv);
  st->bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  const int timeout = std::atoi(req.get_param_value("timeoutSeconds").c_str());
  std::chrono::milliseconds life = std::chrono::seconds(timeout > 0 ? timeout : 1800);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (watch_timeout_.count() > 0) life = std::min(life, watch_timeout_);
    st->drop_epoch = drop_epoch_;
  }
  st->deadline = std::chrono::steady_clock::now() + life;
  st->quiet_since = std::chrono::steady_clock::now();
  res.set_chunked_content_provider("application/json", [this, st](size_t, httplib::DataSink& sink) {
    std::vector<std::string> lines;
    bool done = false;
    bool drop = false;
    auto line = [](const std::string& type, const Json& obj) {
      return Json{{"type", type}, {"object", obj}}.dump() + "\n";
    };
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto in_scope = [&](const Json& obj) {
        return (st->c.ns.empty() || obj["metadata"].value("namespace", "") == st->c.ns) &&
               Matches(obj, st->fields, st->labels);
      };
      if (!st->started) {
        st->started = true;
        if (st->from_now) {
          for (const auto& [key, obj] : *Objects(st->c.kind)) {
            if (in_scope(obj)) lines.push_back(line("ADDED", obj));
          }
          st->last = rv_;
        }
      }
      auto collect = [&] {
        if (st->last < compacted_) {
          lines.push_back(
              line("ERROR", StatusBody(410, "Expired",
                                       "too old resource version: " + std::to_string(st->last) +
                                           " (" + std::to_string(compacted_) + ")")));
          done = true;
          return;
        }
        // The history is in resourceVersion order: start after the last change sent.
        auto first = std::upper_bound(history_.begin(), history_.end(), st->last,
                                      [](uint64_t rv, const Change& ch) { return rv < ch.rv; });
        for (auto it = first; it != history_.end(); ++it) {
          const Change& ch = *it;
          if (ch.kind != st->c.kind) continue;
          const bool now_in = in_scope(ch.object);
          if (ch.type == "MODIFIED") {
            const bool was_in = in_scope(ch.previous);
            if (now_in && was_in) lines.push_back(line("MODIFIED", ch.object));
            if (now_in && !was_in) lines.push_back(line("ADDED", ch.object));
            if (!now_in && was_in) lines.push_back(line("DELETED", ch.object));
          } else if (now_in) {
            lines.push_back(line(ch.type, ch.object));
          }
        }
        st->last = rv_;
      };
      if (lines.empty()) collect();
      if (lines.empty() && !done && !stopping_) {
        changed_.at(st->c.kind).wait_for(lock, 200ms);
        collect();
      }
      const auto now = std::chrono::steady_clock::now();
      if (stopping_ || now >= st->deadline) done = true;
      drop = drop_epoch_ != st->drop_epoch;
      watch_positions_[st->id] = st->last;
      // A bookmark when the stream has been quiet a while, and one as a watch ends at its timeout
      // (as the watch cache does), so the next watch starts at the newest version.
      const bool ending = done && !stopping_ && lines.empty();
      if (lines.empty() && st->bookmarks && !drop &&
          (ending || (!done && now - st->quiet_since > bookmark_interval_))) {
        lines.push_back(
            line("BOOKMARK", {{"kind", st->c.kind},
                              {"apiVersion", ApiVersionOf(st->c.kind)},
                              {"metadata", {{"resourceVersion", std::to_string(rv_)}}}}));
      }
      if (!lines.empty()) st->quiet_since = now;
    }
    if (drop) return false;  // the connection goes without the stream's end
    for (const std::string& l : lines) {
      if (!sink.write(l.data(), l.size())) return false;
    }
    if (done) sink.done();
    return true;
  });
}

void TestApiServer::HandleCreate(const Collection& c, const httplib::Request& req,
                                 httplib::Response& res) {
  if (RefuseMediaType(req, res)) return;
  Json obj = Json::parse(req.body, nullptr, false);
  if (!obj.is_object()) return Fail(res, 400, "BadRequest", "the body is not a JSON object");
  if (obj.contains("kind") && obj["kind"] != c.kind) {
    return Fail(res, 400, "BadRequest",
                "the body is a " + obj["kind"].dump() + ", not a " + c.kind + " (" +
                    Plural(c.kind) + " takes " + c.kind + " objects)");
  }
  Json& meta = obj["metadata"];
  if (!meta.is_object()) return Fail(res, 400, "BadRequest", "metadata is missing");
  int code = 0;
  if (std::string why = AnnotationProblem(meta, &code); !why.empty()) {
    return Fail(res, code, code == 400 ? "BadRequest" : "Invalid", why);
  }
  if (!c.ns.empty()) {
    const std::string ns = meta.value("namespace", c.ns);
    if (ns != c.ns) {
      return Fail(res, 400, "BadRequest",
                  "the namespace of the provided object (" + ns +
                      ") does not match the namespace sent on the request (" + c.ns + ")");
    }
    meta["namespace"] = c.ns;
  }
  std::string name = meta.value("name", "");
  if (name.empty()) {
    const std::string prefix = meta.value("generateName", "");
    if (prefix.empty()) {
      return Fail(res, 422, "Invalid", "metadata.name or metadata.generateName is required");
    }
    name = prefix + NewUid().substr(0, 5);
    meta["name"] = name;
  }
  obj["apiVersion"] = ApiVersionOf(c.kind);
  obj["kind"] = c.kind;
  if (c.kind == "Event") {
    if (std::string why = EventProblem(obj); !why.empty()) {
      return Fail(res, 422, "Invalid", "Event \"" + name + "\" is invalid: " + why);
    }
  }
  if (IsResourceKind(c.kind)) {
    meta["generation"] = 1;
    if (c.kind == "ResourceClaim") obj.erase("status");  // status is the scheduler's to write
    if (c.kind == "ResourceSlice") {
      if (Status s = ValidateResourceSlice(obj); !s.ok()) {
        return Fail(res, 422, "Invalid",
                    "ResourceSlice.resource.k8s.io \"" + name + "\" is invalid: " + s.message());
      }
    }
  }
  if (c.kind == "Pod" && (!obj.contains("status") || !obj["status"].contains("phase"))) {
    obj["status"]["phase"] = "Pending";
  }
  const std::string key = c.ns.empty() ? name : c.ns + "/" + name;
  std::lock_guard<std::mutex> lock(mu_);
  if (Objects(c.kind)->count(key) != 0) {
    return Fail(res, 409, "AlreadyExists", Plural(c.kind) + " \"" + name + "\" already exists");
  }
  Reply(res, 201, Insert(c.kind, key, obj));
}

Json* TestApiServer::FindOr404(const std::string& kind, const std::string& key,
                               httplib::Response& res) {
  auto* objects = Objects(kind);
  auto it = objects->find(key);
  if (it != objects->end()) return &it->second;
  Fail(res, 404, "NotFound", Plural(kind) + " \"" + key.substr(key.find('/') + 1) + "\" not found");
  return nullptr;
}

void TestApiServer::HandleGet(const std::string& kind, const std::string& key,
                              httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Json* obj = FindOr404(kind, key, res)) Reply(res, 200, *obj);
}

void TestApiServer::HandlePatch(const std::string& kind, const std::string& key,
                                const httplib::Request& req, httplib::Response& res,
                                bool status_only) {
  const std::string type = req.get_header_value("Content-Type");
  Json patch = Json::parse(req.body, nullptr, false);
  if (patch.is_discarded()) return Fail(res, 400, "BadRequest", "the patch is not JSON");
  const bool json_patch = type.find("json-patch") != std::string::npos;
  const bool merge = type.find("merge-patch") != std::string::npos;
  if (!json_patch && !merge) {
    return Fail(res, 415, "UnsupportedMediaType",
                "the stand-in takes application/merge-patch+json, "
                "application/strategic-merge-patch+json or application/json-patch+json, not " +
                    type);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const Json* found = FindOr404(kind, key, res);
  if (found == nullptr) return;
  const Json& current = *found;
  const std::string current_rv = current["metadata"].value("resourceVersion", "");
  Json updated = current;
  auto conflict = [&](const std::string& asked) {
    ++conflicts_;
    Fail(res, 409, "Conflict",
         "Operation cannot be fulfilled on " + Plural(kind) + " \"" +
             key.substr(key.find('/') + 1) +
             "\": the object has been modified; please apply your changes to the latest version "
             "and try again (asked for resourceVersion " +
             asked + ", current " + current_rv + ")");
  };
  if (json_patch) {
    if (!patch.is_array())
      return Fail(res, 400, "BadRequest", "a JSON patch is an array of operations");
    try {
      updated = current.patch(patch);
    } catch (const Json::exception& e) {
      return Fail(res, 422, "Invalid", std::string("the JSON patch does not apply: ") + e.what());
    }
    const std::string asked = updated["metadata"].value("resourceVersion", "");
    if (asked != current_rv) return conflict(asked);
  } else {
    if (!patch.is_object()) {
      return Fail(res, 400, "BadRequest",
                  "json: cannot unmarshal " + std::string(patch.type_name()) +
                      " into Go value of type map[string]interface {}");
    }
    if (patch.contains("metadata") && patch["metadata"].is_object() &&
        patch["metadata"].contains("resourceVersion")) {
      const Json& asked = patch["metadata"]["resourceVersion"];
      const std::string text = asked.is_string() ? asked.get<std::string>() : asked.dump();
      if (text != current_rv) return conflict(text);
    }
    updated.merge_patch(patch);
  }
  // What the registry's update validation refuses.
  if (!updated.is_object() || !updated["metadata"].is_object()) {
    return Fail(res, 422, "Invalid", "the patch leaves no metadata");
  }
  for (const char* k : {"name", "namespace"}) {
    if (updated["metadata"].value(k, "") != current["metadata"].value(k, "")) {
      return Fail(res, 400, "BadRequest",
                  std::string("the ") + k + " of the object (" + updated["metadata"].value(k, "") +
                      ") does not match the " + k + " on the URL (" +
                      current["metadata"].value(k, "") + ")");
    }
  }
  if (updated["metadata"].value("uid", "") != current["metadata"].value("uid", "")) {
    return Fail(res, 422, "Invalid",
                "metadata.uid: Invalid value: " + updated["metadata"]["uid"].dump() +
                    ": field is immutable");
  }
  int code = 0;
  if (std::string why = AnnotationProblem(updated["metadata"], &code); !why.empty()) {
    return Fail(res, code, code == 400 ? "BadRequest" : "Invalid", why);
  }
  static const Json kNoSpec;
  const auto updated_spec = updated.find("spec");
  const auto current_spec = current.find("spec");
  const Json& new_spec = updated_spec != updated.end() ? *updated_spec : kNoSpec;
  const Json& old_spec = current_spec != current.end() ? *current_spec : kNoSpec;
  if (kind == "Pod" && !status_only && new_spec != old_spec) {
    // spec.schedulingGates may lose gates (only that) while the pod is not bound, as upstream's
    // pod update validation allows; any other change of the spec is refused.
    auto gates = [](const Json& spec) {
      std::vector<std::string> names;
      if (spec.is_object() && spec.contains("schedulingGates") &&
          spec["schedulingGates"].is_array()) {
        for (const Json& g : spec["schedulingGates"]) {
          names.push_back(g.is_object() ? g.value("name", "") : "");
        }
      }
      return names;
    };
    Json new_rest = new_spec.is_object() ? new_spec : Json::object();
    Json old_rest = old_spec.is_object() ? old_spec : Json::object();
    new_rest.erase("schedulingGates");
    old_rest.erase("schedulingGates");
    const std::vector<std::string> new_gates = gates(new_spec), old_gates = gates(old_spec);
    if (new_rest == old_rest && new_gates != old_gates) {
      for (const std::string& g : new_gates) {
        if (std::find(old_gates.begin(), old_gates.end(), g) == old_gates.end()) {
          return Fail(res, 422, "Invalid",
                      "Pod \"" + key.substr(key.find('/') + 1) +
                          "\" is invalid: spec.schedulingGates: Forbidden: only deletion is "
                          "allowed, but found new scheduling gate '" +
                          g + "'");
        }
      }
      if (!old_spec.value("nodeName", "").empty()) {
        return Fail(res, 422, "Invalid",
                    "Pod \"" + key.substr(key.find('/') + 1) +
                        "\" is invalid: spec.schedulingGates: Forbidden: a bound pod has no gates "
                        "to change");
      }
    }
  }
  if (kind == "Pod" && !status_only && new_spec != old_spec &&
      !(new_spec.is_object() && old_spec.is_object() && [&] {
        Json a = new_spec, b = old_spec;
        a.erase("schedulingGates");
        b.erase("schedulingGates");
        return a == b;
      }())) {
    return Fail(res, 422, "Invalid",
                "Pod \"" + key.substr(key.find('/') + 1) +
                    "\" is invalid: spec: Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing "
                    "tolerations) or `spec.terminationGracePeriodSeconds`");
  }
  Json result;
  if (status_only) {
    result = current;
    result["status"] = updated.value("status", Json::object());
  } else {
    result = std::move(updated);
    if (current.contains("status")) result["status"] = current["status"];
    // Identity is not the client's to change.
    for (const char* k : {"name", "namespace", "uid", "creationTimestamp"}) {
      if (current["metadata"].contains(k)) result["metadata"][k] = current["metadata"][k];
    }
  }
  if (IsResourceKind(kind)) {
    if (Status s = ValidateResourceChange(kind, result, current); !s.ok()) {
      return Fail(res, 422, "Invalid", s.message());
    }
  }
  Modify(kind, key, std::move(result));
  Reply(res, 200, (*Objects(kind))[key]);
}

void TestApiServer::HandleDelete(const std::string& kind, const std::string& key,
                                 httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu_);
  const Json* found = FindOr404(kind, key, res);
  if (found == nullptr) return;
  Json last = *found;
  Remove(kind, key);
  Reply(res, 200, last);
}

void TestApiServer::HandleBinding(const std::string& ns, const std::string& name,
                                  const httplib::Request& req, httplib::Response& res) {
  // BindingREST.Create and ValidatePodBinding (pkg/registry/core/pod/storage/storage.go).
  if (RefuseMediaType(req, res)) return;
  Json binding = Json::parse(req.body, nullptr, false);
  if (!binding.is_object()) return Fail(res, 400, "BadRequest", "the body is not a JSON object");
  if (binding.value("kind", "Binding") != "Binding" || binding.value("apiVersion", "v1") != "v1") {
    return Fail(res, 400, "BadRequest",
                "the body is a " + binding.value("apiVersion", "") + " " +
                    binding.value("kind", "") + ", not a v1 Binding");
  }
  const Json meta = binding.value("metadata", Json::object());
  if (!meta.is_object() || meta.value("name", "") != name) {
    return Fail(res, 400, "BadRequest", "name in URL does not match name in Binding object");
  }
  if (meta.contains("namespace") && meta.value("namespace", "") != ns) {
    return Fail(res, 400, "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request");
  }
  const Json target = binding.value("target", Json::object());
  if (!target.is_object() || target.value("name", "").empty()) {
    return Fail(res, 422, "Invalid",
                "Binding \"" + name + "\" is invalid: target.name: Required value");
  }
  if (!target.value("kind", "").empty() && target.value("kind", "") != "Node") {
    return Fail(res, 422, "Invalid",
                "Binding \"" + name + "\" is invalid: target.kind: Invalid value: \"" +
                    target.value("kind", "") + "\": must be empty or 'Node'");
  }
  const std::string node = target["name"].get<std::string>();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(ns + "/" + name);
  if (it == pods_.end()) return Fail(res, 404, "NotFound", "pods \"" + name + "\" not found");
  Json pod = it->second;
  auto conflict = [&](const std::string& why) {
    Fail(res, 409, "Conflict",
         "Operation cannot be fulfilled on pods/binding \"" + name + "\": " + why);
  };
  const std::string uid = meta.value("uid", "");
  if (!uid.empty() && uid != pod["metadata"].value("uid", "")) {
    return conflict("the UID in the precondition (" + uid + ") does not match the UID in record (" +
                    pod["metadata"].value("uid", "") +
                    "). The object might have been deleted and then recreated");
  }
  const std::string rv = meta.value("resourceVersion", "");
  if (!rv.empty() && rv != pod["metadata"].value("resourceVersion", "")) {
    ++conflicts_;
    return conflict(
        "the object has been modified; please apply your changes to the latest version and try "
        "again");
  }
  if (pod["metadata"].contains("deletionTimestamp") &&
      !pod["metadata"]["deletionTimestamp"].is_null()) {
    return conflict("pod " + name + " is being deleted, cannot be assigned to a host");
  }
  const std::string bound = pod.contains("spec") ? pod["spec"].value("nodeName", "") : "";
  if (!bound.empty())
    return conflict("pod " + name + " is already assigned to node \"" + bound + "\"");
  pod["spec"]["nodeName"] = node;
  Modify("Pod", ns + "/" + name, std::move(pod));
  Reply(res, 201, StatusBody(201, "", ""));
}

}  // namespace tessera::k8s
