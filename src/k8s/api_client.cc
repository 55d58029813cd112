// ApiClient over cpp-httplib (OpenSSL for https), kubeconfig loading over yaml-cpp, Reflector.
#include "k8s/api_client.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

namespace tessera::k8s {
namespace {

Result<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Result<std::string>::Error(what + " " + path + ": cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<std::string> Base64Decode(const std::string& text, const std::string& what) {
  std::string clean;
  for (char c : text) {
    if (c != '\n' && c != '\r' && c != ' ') clean += c;
  }
  if (clean.size() % 4 != 0) return Result<std::string>::Error(what + ": not base64");
  std::string out(clean.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(clean.data()),
                                static_cast<int>(clean.size()));
  if (n < 0) return Result<std::string>::Error(what + ": not base64");
  size_t padding = 0;
  if (!clean.empty() && clean.back() == '=') ++padding;
  if (clean.size() > 1 && clean[clean.size() - 2] == '=') ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

ApiErrorKind KindOf(int status) {
  switch (status) {
    case 404:
      return ApiErrorKind::kNotFound;
    case 409:
      return ApiErrorKind::kConflict;
    case 410:
      return ApiErrorKind::kGone;
    case 401:
    case 403:
      return ApiErrorKind::kForbidden;
    case 400:
    case 422:
      return ApiErrorKind::kInvalid;
    default:
      return ApiErrorKind::kOther;
  }
}

// "METHOD PATH: STATUS REASON: message" from a Status object body when there is one.
ApiError ErrorFrom(const std::string& method, const std::string& path, int status,
                   const std::string& body) {
  ApiError e;
  e.kind = KindOf(status);
  e.http_status = status;
  std::string detail = body.substr(0, 300);
  Json parsed = Json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.value("kind", "") == "Status") {
    detail = parsed.value("reason", "") + ": " + parsed.value("message", "");
  }
  e.message = method + " " + path + ": " + std::to_string(status) + " " + detail;
  return e;
}

std::string PodPath(const std::string& ns, const std::string& name) {
  return "/api/v1/namespaces/" + ns + "/pods/" + name;
}

Json AnnotationPatch(const ApiClient::AnnotationChanges& changes, const std::string& rv) {
  Json annotations = Json::object();
  for (const auto& [key, value] : changes) {
    annotations[key] = value ? Json(*value) : Json(nullptr);
  }
  Json patch = {{"metadata", {{"annotations", annotations}}}};
  // A merge patch that carries metadata.resourceVersion is applied only to that version.
  if (!rv.empty()) patch["metadata"]["resourceVersion"] = rv;
  return patch;
}

}  // namespace

std::string NewUuid() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t a = rng(), b = rng();
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffull));
  return buf;
}

std::string Rfc3339Now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string UrlEncode(const std::string& value) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string WithQuery(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& query) {
  std::string out = path;
  char sep = path.find('?') == std::string::npos ? '?' : '&';
  for (const auto& [key, value] : query) {
    if (value.empty()) continue;
    out += sep + key + "=" + UrlEncode(value);
    sep = '&';
  }
  return out;
}

Result<ClientConfig> InClusterConfig(const std::string& account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return Result<ClientConfig>::Error(
        "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; "
        "pass --kubeconfig FILE");
  }
  ClientConfig c;
  const std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  auto ca = ReadFile(account_dir + "/ca.crt", "the service account's CA");
  if (!ca.ok()) return ca.status();
  c.ca_pem = *ca;
  c.token_file = account_dir + "/token";
  auto token = ReadFile(c.token_file, "the service account's token");
  if (!token.ok()) return token.status();
  return c;
}

Result<ClientConfig> KubeconfigConfig(const std::string& path, const std::string& context_name) {
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Result<ClientConfig>::Error("kubeconfig " + path + ": " + e.what());
  }
  const std::string dir =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  auto resolve = [&](const std::string& p) { return p.empty() || p[0] == '/' ? p : dir + "/" + p; };
  auto fail = [&](const std::string& why) {
    return Result<ClientConfig>::Error("kubeconfig " + path + ": " + why);
  };
  try {
    std::string want = context_name;
    if (want.empty()) want = doc["current-context"] ? doc["current-context"].as<std::string>() : "";
    if (want.empty()) return fail("current-context is not set; pass a context");
    // The entry of `list` whose name is `name`, as its `field`; nullopt when there is none.
    auto entry = [&](const char* list, const std::string& name,
                     const char* field) -> std::optional<YAML::Node> {
      if (!doc[list] || !doc[list].IsSequence()) return std::nullopt;
      for (const YAML::Node& e : doc[list]) {
        if (e["name"] && e["name"].as<std::string>() == name && e[field] && e[field].IsMap()) {
          return e[field];
        }
      }
      return std::nullopt;
    };
    const std::optional<YAML::Node> context = entry("contexts", want, "context");
    if (!context) return fail("contexts: no context named \"" + want + "\"");
    const std::string cluster_name =
        (*context)["cluster"] ? (*context)["cluster"].as<std::string>() : "";
    const std::string user_name = (*context)["user"] ? (*context)["user"].as<std::string>() : "";
    const std::optional<YAML::Node> found_cluster = entry("clusters", cluster_name, "cluster");
    if (!found_cluster) return fail("clusters: no cluster named \"" + cluster_name + "\"");
    const YAML::Node cluster = *found_cluster;
    const std::optional<YAML::Node> found_user = entry("users", user_name, "user");
    const YAML::Node user = found_user ? *found_user : YAML::Node();
    ClientConfig c;
    if (!cluster["server"]) return fail("clusters." + cluster_name + ".server is missing");
    c.server = cluster["server"].as<std::string>();
    if (cluster["insecure-skip-tls-verify"]) {
      c.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>();
    }
    if (cluster["certificate-authority-data"]) {
      auto pem = Base64Decode(cluster["certificate-authority-data"].as<std::string>(),
                              "clusters." + cluster_name + ".certificate-authority-data");
      if (!pem.ok()) return fail(pem.error());
      c.ca_pem = *pem;
    } else if (cluster["certificate-authority"]) {
      auto pem = ReadFile(resolve(cluster["certificate-authority"].as<std::string>()),
                          "certificate-authority");
      if (!pem.ok()) return fail(pem.error());
      c.ca_pem = *pem;
    }
    if (found_user) {
      if (user["exec"] || user["auth-provider"]) {
        return fail("users." + user_name +
                    ": exec and auth-provider credentials are not supported; use a token or client "
                    "certificates");
      }
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) c.token_file = resolve(user["tokenFile"].as<std::string>());
      auto pem = [&](const char* data_key, const char* file_key, std::string* out) -> Status {
        if (user[data_key]) {
          auto v =
              Base64Decode(user[data_key].as<std::string>(), "users." + user_name + "." + data_key);
          if (!v.ok()) return v.status();
          *out = *v;
        } else if (user[file_key]) {
          auto v = ReadFile(resolve(user[file_key].as<std::string>()), file_key);
          if (!v.ok()) return v.status();
          *out = *v;
        }
        return Status::Ok();
      };
      if (Status s = pem("client-certificate-data", "client-certificate", &c.client_cert_pem);
          !s.ok()) {
        return fail(s.message());
      }
      if (Status s = pem("client-key-data", "client-key", &c.client_key_pem); !s.ok()) {
        return fail(s.message());
      }
    }
    return c;
  } catch (const YAML::Exception& e) {
    return fail(e.what());
  }
}

struct ApiClient::Connection {
  std::unique_ptr<httplib::ClientImpl> http;
  std::string token;  // the bearer token its headers carry
};

ApiClient::ApiClient(ClientConfig config) : config_(std::move(config)) {
  std::string rest = config_.server;
  if (rest.rfind("https://", 0) == 0) {
    https_ = true;
    rest = rest.substr(8);
  } else if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
  port_ = https_ ? 443 : 80;
  const size_t close = rest.find(']');
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
    port_ = std::atoi(rest.substr(colon + 1).c_str());
    rest = rest.substr(0, colon);
  }
  if (!rest.empty() && rest.front() == '[') rest = rest.substr(1, rest.size() - 2);
  host_ = rest;
}

ApiClient::~ApiClient() { Stop(); }

std::string ApiClient::Token() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.token_file.empty()) return config_.token;
  const auto now = std::chrono::steady_clock::now();
  if (token_cache_.empty() || now - token_read_ > std::chrono::minutes(1)) {
    auto t = ReadFile(config_.token_file, "token file");
    if (t.ok()) token_cache_ = Trim(*t);
    token_read_ = now;
  }
  return token_cache_;
}

std::unique_ptr<ApiClient::Connection> ApiClient::Connect(std::chrono::seconds read_timeout,
                                                          bool keep_alive) const {
  auto c = std::make_unique<Connection>();
  if (https_) {
    X509* cert = nullptr;
    EVP_PKEY* key = nullptr;
    if (!config_.client_cert_pem.empty() && !config_.client_key_pem.empty()) {
      BIO* cb = BIO_new_mem_buf(config_.client_cert_pem.data(),
                                static_cast<int>(config_.client_cert_pem.size()));
      cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
      BIO_free(cb);
      BIO* kb = BIO_new_mem_buf(config_.client_key_pem.data(),
                                static_cast<int>(config_.client_key_pem.size()));
      key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
      BIO_free(kb);
    }
    auto ssl = cert != nullptr && key != nullptr
                   ? std::make_unique<httplib::SSLClient>(host_, port_, cert, key)
                   : std::make_unique<httplib::SSLClient>(host_, port_);
    if (cert != nullptr) X509_free(cert);
    if (key != nullptr) EVP_PKEY_free(key);
    if (!config_.ca_pem.empty()) {
      X509_STORE* store = X509_STORE_new();
      BIO* bio = BIO_new_mem_buf(config_.ca_pem.data(), static_cast<int>(config_.ca_pem.size()));
      while (X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, ca);
        X509_free(ca);
      }
      BIO_free(bio);
      ssl->set_ca_cert_store(store);  // the client's SSL context owns it now
    }
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    c->http = std::move(ssl);
  } else {
    c->http = std::make_unique<httplib::ClientImpl>(host_, port_);
  }
  c->http->set_connection_timeout(config_.timeout);
  c->http->set_read_timeout(read_timeout);
  c->http->set_write_timeout(config_.timeout);
  c->http->set_keep_alive(keep_alive);
  // A request goes out as headers, then body: with Nagle on, a kept-alive connection holds the
  // body until the server's delayed ACK (40 ms). Go's clients and servers turn it off too.
  c->http->set_tcp_nodelay(true);
  httplib::Headers headers = {{"Accept", "application/json"}, {"User-Agent", config_.user_agent}};
  c->token = Token();
  if (!c->token.empty()) headers.emplace("Authorization", "Bearer " + c->token);
  c->http->set_default_headers(headers);
  return c;
}

ApiResult<Json> ApiClient::Send(const std::string& method, const std::string& path,
                                const Json* body, const std::string& content_type) {
  const std::string text = body != nullptr ? body->dump() : std::string();
  // A kept-alive connection saves a TCP (and TLS) handshake per request: on new connections the
  // bind's three writes took 10 ms at p99. One whose token has rotated is dropped. A kept one the
  // server closed meanwhile fails its request; that request is sent once more on a new one (every
  // write here is conditioned or answers a repeat with a conflict the callers already handle).
  std::unique_ptr<Connection> c;
  {
    const std::string token = Token();
    std::lock_guard<std::mutex> lock(mu_);
    while (!idle_.empty() && c == nullptr) {
      c = std::move(idle_.back());
      idle_.pop_back();
      if (c->token != token) c.reset();
    }
  }
  bool reused = c != nullptr;
  httplib::Result r{nullptr, httplib::Error::Unknown};
  for (;;) {
    if (c == nullptr) c = Connect(config_.timeout, true);
    if (method == "GET") {
      r = c->http->Get(path.c_str());
    } else if (method == "POST") {
      r = c->http->Post(path.c_str(), text, content_type.c_str());
    } else if (method == "PATCH") {
      r = c->http->Patch(path.c_str(), text, content_type.c_str());
    } else if (method == "PUT") {
      r = c->http->Put(path.c_str(), text, content_type.c_str());
    } else if (text.empty()) {
      r = c->http->Delete(path.c_str());
    } else {
      r = c->http->Delete(path.c_str(), text, content_type.c_str());
    }
    if (r || !reused) break;
    c.reset();
    reused = false;
  }
  if (!r) {
    return ApiError{ApiErrorKind::kTransport, 0,
                    method + " " + config_.server + path + ": " + httplib::to_string(r.error())};
  }
  if (c->http->is_socket_open() && r->get_header_value("Connection") != "close") {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kIdleConnections) idle_.push_back(std::move(c));
  }
  if (r->status < 200 || r->status > 299) return ErrorFrom(method, path, r->status, r->body);
  Json parsed = Json::parse(r->body, nullptr, false);
  if (parsed.is_discarded()) {
    return ApiError{ApiErrorKind::kOther, r->status,
                    method + " " + path + ": the answer is not JSON: " + r->body.substr(0, 200)};
  }
  return parsed;
}

ApiResult<Json> ApiClient::Get(const std::string& path) { return Send("GET", path, nullptr, ""); }

ApiResult<Json> ApiClient::GetPod(const std::string& ns, const std::string& name) {
  return Get(PodPath(ns, name));
}

ApiResult<Json> ApiClient::ListPods(const std::string& ns, const ListOptions& o) {
  const std::string base = ns.empty() ? "/api/v1/pods" : "/api/v1/namespaces/" + ns + "/pods";
  return Get(WithQuery(base, {{"fieldSelector", o.field_selector},
                              {"labelSelector", o.label_selector},
                              {"resourceVersion", o.resource_version}}));
}

ApiResult<Json> ApiClient::GetNode(const std::string& name) { return Get("/api/v1/nodes/" + name); }

ApiResult<Json> ApiClient::ListNodes(const ListOptions& o) {
  return Get(WithQuery("/api/v1/nodes", {{"fieldSelector", o.field_selector},
                                         {"labelSelector", o.label_selector},
                                         {"resourceVersion", o.resource_version}}));
}

ApiResult<Json> ApiClient::MergePatch(const std::string& path, const Json& patch) {
  return Send("PATCH", path, &patch, "application/merge-patch+json");
}

ApiResult<Json> ApiClient::JsonPatch(const std::string& path, const Json& operations) {
  return Send("PATCH", path, &operations, "application/json-patch+json");
}

ApiResult<Json> ApiClient::PatchPodAnnotations(const std::string& ns, const std::string& name,
                                               const AnnotationChanges& changes,
                                               const std::string& resource_version) {
  return MergePatch(PodPath(ns, name), AnnotationPatch(changes, resource_version));
}

ApiResult<Json> ApiClient::PatchNodeAnnotations(const std::string& name,
                                                const AnnotationChanges& changes,
                                                const std::string& resource_version) {
  return MergePatch("/api/v1/nodes/" + name, AnnotationPatch(changes, resource_version));
}

ApiResult<Json> ApiClient::BindPod(const std::string& ns, const std::string& name,
                                   const std::string& uid, const std::string& node) {
  Json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!uid.empty()) binding["metadata"]["uid"] = uid;
  return Send("POST", PodPath(ns, name) + "/binding", &binding, "application/json");
}

ApiResult<Json> ApiClient::CreateEvent(const EventSpec& e) {
  const std::string ns = e.ns.empty() ? "default" : e.ns;
  const std::string now = Rfc3339Now();
  Json involved = {{"apiVersion", "v1"}, {"kind", e.kind}, {"name", e.name}};
  if (!e.ns.empty()) involved["namespace"] = e.ns;
  if (!e.uid.empty()) involved["uid"] = e.uid;
  Json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", e.name + "."}, {"namespace", ns}}},
                {"involvedObject", involved},
                {"reason", e.reason},
                {"message", e.message},
                {"type", e.warning ? "Warning" : "Normal"},
                {"source", {{"component", e.component}, {"host", e.host}}},
                {"reportingComponent", e.component},
                {"reportingInstance", e.host},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  return Send("POST", "/api/v1/namespaces/" + ns + "/events", &event, "application/json");
}

ApiResult<Json> ApiClient::Create(const std::string& collection_path, const Json& object) {
  return Send("POST", collection_path, &object, "application/json");
}

ApiResult<Json> ApiClient::Delete(const std::string& path) {
  return Send("DELETE", path, nullptr, "");
}

ApiResult<Json> ApiClient::Delete(const std::string& path, const std::string& uid,
                                  const std::string& resource_version) {
  Json preconditions = Json::object();
  if (!uid.empty()) preconditions["uid"] = uid;
  if (!resource_version.empty()) preconditions["resourceVersion"] = resource_version;
  const Json options = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"preconditions", preconditions}};
  return Send("DELETE", path, &options, "application/json");
}

ApiResult<Json> ApiClient::Update(const std::string& path, const Json& object) {
  return Send("PUT", path, &object, "application/json");
}

Status ApiClient::Watch(const std::string& collection_path, const ListOptions& o,
                        const std::function<bool(const WatchEvent&)>& on_event,
                        ApiErrorKind* error_kind) {
  if (error_kind != nullptr) *error_kind = ApiErrorKind::kOther;
  const std::string path = WithQuery(
      collection_path, {{"watch", "true"},
                        {"allowWatchBookmarks", "true"},
                        {"fieldSelector", o.field_selector},
                        {"labelSelector", o.label_selector},
                        {"resourceVersion", o.resource_version},
                        {"timeoutSeconds", o.timeout_seconds > 0 ? std::to_string(o.timeout_seconds)
                                                                 : std::string()}});
  // Reads may pause as long as the stream is quiet; the server's timeoutSeconds ends it.
  const int quiet = o.timeout_seconds > 0 ? o.timeout_seconds + 30 : 330;
  auto c = Connect(std::chrono::seconds(quiet), false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_.load()) return Status::Ok();
    watches_.push_back(c.get());
  }
  std::string buffer;
  Status failure = Status::Ok();
  bool keep = true;
  int status = 0;
  std::string error_body;
  auto r = c->http->Get(
      path.c_str(),
      [&](const httplib::Response& response) {
        status = response.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status != 200) {
          error_body.append(data, n);
          return true;
        }
        buffer.append(data, n);
        size_t nl;
        while ((nl = buffer.find('\n')) != std::string::npos) {
          const std::string line = buffer.substr(0, nl);
          buffer.erase(0, nl + 1);
          if (line.empty()) continue;
          Json event = Json::parse(line, nullptr, false);
          if (!event.is_object() || !event.contains("type") || !event["type"].is_string()) {
            failure = Status::Error("watch " + collection_path +
                                    ": an event that is not JSON: " + line.substr(0, 200));
            return false;
          }
          WatchEvent e{event["type"].get<std::string>(), event.value("object", Json::object())};
          if (e.type == "ERROR") {
            const int code = e.object.value("code", 0);
            if (error_kind != nullptr) *error_kind = KindOf(code);
            failure =
                Status::Error("watch " + collection_path + ": " + std::to_string(code) + " " +
                              e.object.value("reason", "") + ": " + e.object.value("message", ""));
            return false;
          }
          if (!on_event(e)) {
            keep = false;
            return false;
          }
        }
        return true;
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(watches_, c.get());
  }
  if (!failure.ok() || !keep || stopped_.load()) return failure;
  if (status != 0 && status != 200) {
    ApiError e = ErrorFrom("GET", path, status, error_body);
    if (error_kind != nullptr) *error_kind = e.kind;
    return Status::Error(e.message);
  }
  if (!r && r.error() != httplib::Error::Canceled) {
    if (error_kind != nullptr) *error_kind = ApiErrorKind::kTransport;
    return Status::Error("watch " + config_.server + path + ": " + httplib::to_string(r.error()));
  }
  return Status::Ok();
}

void ApiClient::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_.store(true);
  for (Connection* c : watches_) c->http->stop();
}

Reflector::Reflector(ApiClient* client, std::string collection_path, ListOptions options,
                     Handlers handlers)
    : client_(client),
      path_(std::move(collection_path)),
      options_(std::move(options)),
      handlers_(std::move(handlers)) {}

Reflector::~Reflector() { Stop(); }

void Reflector::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Reflector::Stop() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(client_mu_);
    if (watch_client_) watch_client_->Stop();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Reflector::WaitSynced(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return synced_; });
}

void Reflector::Relist() {
  relist_.store(true);
  // The watch in progress ends; Run() lists before watching again.
  std::lock_guard<std::mutex> lock(client_mu_);
  if (watch_client_) watch_client_->Stop();
}

void Reflector::Run() {
  std::string version;
  bool need_list = true;
  while (!stop_.load()) {
    if (need_list || relist_.exchange(false)) {
      auto list = client_->Get(WithQuery(path_, {{"fieldSelector", options_.field_selector},
                                                 {"labelSelector", options_.label_selector}}));
      if (!list.ok()) {
        std::fprintf(stderr, "tessera: list %s: %s\n", path_.c_str(), list.error().message.c_str());
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_.load(); });
        continue;
      }
      std::vector<Json> items;
      for (const Json& item : list->value("items", Json::array())) items.push_back(item);
      version = (*list)["metadata"].value("resourceVersion", "");
      handlers_.on_replace(items);
      relists_.fetch_add(1);
      need_list = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        synced_ = true;
      }
      cv_.notify_all();
    }
    // A fresh client per watch: Relist() and Stop() stop the one in use.
    std::shared_ptr<ApiClient> watcher = std::make_shared<ApiClient>(client_->config());
    {
      std::lock_guard<std::mutex> lock(client_mu_);
      watch_client_ = watcher;
    }
    if (relist_.load() || stop_.load()) continue;
    ListOptions o = options_;
    o.resource_version = version;
    if (o.timeout_seconds == 0) o.timeout_seconds = 300;
    ApiErrorKind kind = ApiErrorKind::kOther;
    Status s = watcher->Watch(
        path_, o,
        [&](const WatchEvent& e) {
          if (stop_.load()) return false;
          const std::string rv = e.object["metadata"].value("resourceVersion", "");
          if (!rv.empty()) version = rv;
          if (e.type != "BOOKMARK") handlers_.on_event(e);
          return !relist_.load();
        },
        &kind);
    if (stop_.load()) break;
    if (!s.ok()) {
      if (kind == ApiErrorKind::kGone) {
        need_list = true;  // too far behind: list again
        continue;
      }
      std::fprintf(stderr, "tessera: %s\n", s.message().c_str());
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_.load(); });
    }
  }
}

std::unique_ptr<Reflector> NodeReflector(ApiClient* client, const std::string& node,
                                         std::function<void(const Json& node)> on_node) {
  ListOptions o;
  o.field_selector = "metadata.name=" + node;
  return std::make_unique<Reflector>(
      client, "/api/v1/nodes", o,
      Reflector::Handlers{[on_node](const std::vector<Json>& items) {
                            if (!items.empty()) on_node(items[0]);
                          },
                          [on_node](const WatchEvent& e) {
                            if (e.type != "DELETED" && e.type != "BOOKMARK") on_node(e.object);
                          }});
}

}  // namespace tessera::k8s
