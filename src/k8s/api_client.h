// ApiClient: Tessera's client of the Kubernetes API server (the only code that speaks its HTTP).
// Over cpp-httplib: `https://` with a CA bundle and a bearer token (an in-cluster service account)
// or client certificates (a kubeconfig, as far as cpp-httplib and OpenSSL allow: no exec or
// auth-provider plugins), and `http://` for the test API server. It gets and lists Pods and Nodes
// with field and label selectors, watches them from a resourceVersion (with bookmarks), patches
// annotations with a resourceVersion precondition (a 409 Conflict is its own error kind, as is the
// 410 Gone of a watch that fell too far behind), binds pods and creates Events. It keeps no cache
// and holds no policy; Reflector (below) is the list-then-watch loop the doors build caches with.
//
// Thread-safety: every method may be called from any thread; each request uses its own
// connection, and Stop() aborts the watches in progress.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"

namespace tessera::k8s {

// How to reach and authenticate to the API server.
struct ClientConfig {
  std::string server;  // "https://10.96.0.1:443", "http://127.0.0.1:8080"
  std::string ca_pem;  // CA bundle (PEM) to verify the server; empty: the system's
  bool insecure_skip_tls_verify = false;
  std::string token;       // bearer token
  std::string token_file;  // read again every minute (service-account tokens rotate)
  std::string client_cert_pem, client_key_pem;  // client certificate and key (PEM)
  std::chrono::seconds timeout{10};             // connect and read timeout of plain requests
  std::string user_agent = "tessera";
};

// The pod's service account: KUBERNETES_SERVICE_HOST/PORT and the files under `account_dir`
// (token, ca.crt). Errors say which is missing.
Result<ClientConfig> InClusterConfig(
    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");
// A kubeconfig file's `context` (its current-context when empty): server, certificate-authority
// (-data), insecure-skip-tls-verify, token, tokenFile, client-certificate(-data),
// client-key(-data). Errors name the file and the key.
Result<ClientConfig> KubeconfigConfig(const std::string& path, const std::string& context = "");

enum class ApiErrorKind {
  kTransport,  // no answer: connection refused, TLS failure, timeout
  kNotFound,   // 404
  kConflict,   // 409: a resourceVersion precondition failed, or the object exists / is bound
  kGone,       // 410: the watch's resourceVersion is too old; list again
  kForbidden,  // 401, 403
  kInvalid,    // 400, 422
  kOther,
};
struct ApiError {
  ApiErrorKind kind = ApiErrorKind::kOther;
  int http_status = 0;  // 0 for kTransport
  std::string message;  // "GET /api/v1/...: 404 NotFound: pods \"x\" not found"
};

// A value or an ApiError.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : error_(std::move(error)) {}  // NOLINT: implicit by design
  bool ok() const { return value_.has_value(); }
  ApiErrorKind kind() const { return error_.kind; }
  const ApiError& error() const { return error_; }
  Status status() const { return ok() ? Status::Ok() : Status::Error(error_.message); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  ApiError error_;
};

struct ListOptions {
  std::string field_selector;    // "spec.nodeName=gpu-1,status.phase!=Succeeded"
  std::string label_selector;    // "app=web"
  std::string resource_version;  // list: "" (latest); watch: where to start
  int timeout_seconds = 0;       // watch: the server ends the stream after this long (0: default)
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  Json object;
};

// A v1 Event about an object, shown by `kubectl describe`.
struct EventSpec {
  std::string kind = "Pod";  // of the object: Pod or Node
  std::string ns;            // the object's namespace ("" for a Node: the event goes to default)
  std::string name;
  std::string uid;
  std::string reason;  // CamelCase, e.g. TesseraAllocateFailed
  std::string message;
  bool warning = true;
  std::string component;  // e.g. tessera-device-plugin
  std::string host;       // the node
};

class ApiClient {
 public:
  explicit ApiClient(ClientConfig config);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  const ClientConfig& config() const { return config_; }

  // Any GET of a JSON object, e.g. "/api/v1/namespaces/default/pods/web".
  ApiResult<Json> Get(const std::string& path);
  ApiResult<Json> GetPod(const std::string& ns, const std::string& name);
  // `ns` empty: every namespace. The list's items, and its resourceVersion in metadata.
  ApiResult<Json> ListPods(const std::string& ns, const ListOptions& options = {});
  ApiResult<Json> GetNode(const std::string& name);
  ApiResult<Json> ListNodes(const ListOptions& options = {});

  // Sets (a value) or removes (nullopt) annotations with a JSON merge patch. With a non-empty
  // `resource_version`, only if the object still has it: kConflict otherwise.
  using AnnotationChanges = std::map<std::string, std::optional<std::string>>;
  ApiResult<Json> PatchPodAnnotations(const std::string& ns, const std::string& name,
                                      const AnnotationChanges& changes,
                                      const std::string& resource_version = "");
  ApiResult<Json> PatchNodeAnnotations(const std::string& name, const AnnotationChanges& changes,
                                       const std::string& resource_version = "");
  // Raw patches of an object path: RFC 7386 merge patch, RFC 6902 JSON patch.
  ApiResult<Json> MergePatch(const std::string& path, const Json& patch);
  ApiResult<Json> JsonPatch(const std::string& path, const Json& operations);
  // POST .../pods/NAME/binding to `node`; kConflict when the pod is bound already.
  ApiResult<Json> BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                          const std::string& node);
  ApiResult<Json> CreateEvent(const EventSpec& event);
  // POST of a new object to a collection path (tests and tools create Pods and Nodes this way).
  ApiResult<Json> Create(const std::string& collection_path, const Json& object);
  ApiResult<Json> Delete(const std::string& path);
  // DELETE with DeleteOptions preconditions: only the object with this UID and (when not empty)
  // resourceVersion goes; kConflict when it changed meanwhile.
  ApiResult<Json> Delete(const std::string& path, const std::string& uid,
                         const std::string& resource_version);
  // PUT of a whole object (its metadata.resourceVersion is the precondition: kConflict when the
  // object changed meanwhile).
  ApiResult<Json> Update(const std::string& path, const Json& object);

  // Watches `collection_path` ("/api/v1/pods", "/api/v1/nodes") from options.resource_version
  // with bookmarks, calling `on_event` for each event until it returns false, the server ends the
  // stream (ok), Stop() is called (ok) or an error: kGone when the resourceVersion is too old
  // (whether the server said so with HTTP 410 or with an ERROR event).
  Status Watch(const std::string& collection_path, const ListOptions& options,
               const std::function<bool(const WatchEvent&)>& on_event,
               ApiErrorKind* error_kind = nullptr);
  // Ends every Watch in progress and makes later ones return at once.
  void Stop();

 private:
  struct Connection;
  std::unique_ptr<Connection> Connect(std::chrono::seconds read_timeout, bool keep_alive) const;
  ApiResult<Json> Send(const std::string& method, const std::string& path, const Json* body,
                       const std::string& content_type);
  std::string Token() const;

  ClientConfig config_;
  std::string host_;
  int port_ = 0;
  bool https_ = false;
  mutable std::mutex mu_;
  mutable std::string token_cache_;
  mutable std::chrono::steady_clock::time_point token_read_{};
  std::atomic<bool> stopped_{false};
  std::vector<Connection*> watches_;  // under mu_
  // Kept-alive connections for requests (watches hold their own): a request takes one, or opens
  // one, and puts it back after a complete answer. Bounded by kIdleConnections.
  static constexpr size_t kIdleConnections = 8;
  std::vector<std::unique_ptr<Connection>> idle_;  // under mu_
};

// The path of a collection with a query: "/api/v1/pods?fieldSelector=...&watch=true".
std::string WithQuery(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& query);
// Percent-encodes a query value.
std::string UrlEncode(const std::string& value);
// The current time as the API server writes timestamps ("2026-11-25T12:00:00Z").
std::string Rfc3339Now();
// A random UUID (version 4), as the API server makes UIDs and kube-scheduler share IDs.
std::string NewUuid();

// List-then-watch of one collection into callbacks, relisting when the watch falls too far behind
// (410 Gone) and re-watching after errors (with a 1 s pause). on_replace gets every item of a
// (re)list; on_event every later change. Both run on the reflector's thread.
class Reflector {
 public:
  struct Handlers {
    std::function<void(const std::vector<Json>& items)> on_replace;
    std::function<void(const WatchEvent& event)> on_event;
  };
  Reflector(ApiClient* client, std::string collection_path, ListOptions options, Handlers handlers);
  ~Reflector();
  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  void Start();
  void Stop();
  // True once the first list has been handed to on_replace.
  bool WaitSynced(std::chrono::milliseconds timeout);
  // Lists again now (the watch keeps going from the new list's version).
  void Relist();
  int relists() const { return relists_.load(); }

 private:
  void Run();

  ApiClient* client_;
  std::string path_;
  ListOptions options_;
  Handlers handlers_;
  std::mutex client_mu_;
  std::shared_ptr<ApiClient> watch_client_;  // under client_mu_; its own, so Stop() ends only this
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> relist_{false};
  std::atomic<int> relists_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool synced_ = false;
};

// The list-then-watch of one Node: `on_node` gets the node as listed and at every change (not its
// deletion). Not started.
std::unique_ptr<Reflector> NodeReflector(ApiClient* client, const std::string& node,
                                         std::function<void(const Json& node)> on_node);

}  // namespace tessera::k8s
