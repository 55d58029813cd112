// TestApiServer: a STAND-IN for kube-apiserver, for tests only. No Kubernetes control plane can
// be installed on the machines that run Tessera's suite, so this is our own small server of the
// parts of the API that the device plugin and the extender use, on the real paths and with the
// real JSON shapes and answers, as kube-apiserver gives them (k8s.io/apiserver's handlers and
// kubernetes/kubernetes pkg/registry/core/pod, pkg/apis/core/validation):
//   /api/v1/nodes[/NAME]                                  GET (list, watch), POST, PATCH, DELETE
//   /api/v1/pods                                          GET (list, watch; every namespace)
//   /api/v1/namespaces/NS/pods[/NAME]                     GET, POST, PATCH, DELETE
//   /api/v1/namespaces/NS/pods/NAME/status                PATCH (tests set status.phase)
//   /api/v1/namespaces/NS/pods/NAME/binding               POST (sets spec.nodeName)
//   /api/v1/[namespaces/NS/]events                        GET, POST
// Every object carries metadata.uid, creationTimestamp and a resourceVersion from one counter;
// lists carry the counter's value. `?watch=true` streams chunked JSON lines
// {"type":"ADDED|MODIFIED|DELETED|BOOKMARK","object":...} from a resourceVersion (from the
// current state when it is empty or "0"), with BOOKMARKs when asked (allowWatchBookmarks) while
// the stream is quiet, and an ERROR event carrying a 410 Expired Status ("too old resource
// version") when that version is no longer in the watch window (Compact(), SetHistoryLimit()).
// A watch ends at its timeoutSeconds or the server's own timeout (SetWatchTimeout), as
// kube-apiserver's do; the client must watch again from its last version. Field selectors (any
// dotted path, = == !=, comma for AND) and label selectors (= == != in notin, existence) filter
// lists and watches; an object entering or leaving a watch's selection is ADDED or DELETED.
// What it checks as the real server does:
//   - authentication: with RequireToken, a request without "Authorization: Bearer <token>" gets
//     401 Unauthorized;
//   - content types: POST bodies must be application/json (415 otherwise); PATCH takes
//     merge-patch, strategic-merge-patch (treated as a merge patch, which it is for maps such as
//     annotations) and json-patch;
//   - bodies: a Binding's name must be the pod's, its target a Node by name, the pod unbound and
//     not being deleted (409), its uid and resourceVersion preconditions met (409); an Event's
//     namespace must agree with its involved object's (422); a patch may not change an object's
//     name, namespace or uid or a pod's spec (422), annotations must be strings (400) and at most
//     256 KiB in all, keys qualified names (422); a patch carrying metadata.resourceVersion that is
//     not the object's current one fails with 409 Conflict; missing objects give 404 with a Status.
// It can be told to misbehave, for tests of its clients: answer some requests with an error code
// (5xx, 429) or drop their connection, answer slowly (SetLatency), end every open watch abruptly
// (DropWatches).
// Dynamic Resource Allocation's kinds of resource.k8s.io/v1 are served as the real server serves
// them (test_apiserver_resource.cc): ResourceSlice and DeviceClass (cluster-scoped),
// ResourceClaim (with its status subresource) and ResourceClaimTemplate (namespaced), at
// /apis/resource.k8s.io/v1/..., with GET, list and watch, POST, PUT (an update carrying a stale
// metadata.resourceVersion fails with 409), PATCH, DELETE (with DeleteOptions preconditions on
// uid and resourceVersion) and, for ResourceSlices, DELETE of the collection by field selector
// (what kubelet does to a driver gone for 30 s). metadata.generation starts at 1 and goes up when
// the spec changes. Field selectors on ResourceSlices are limited to upstream's: spec.nodeName,
// spec.driver, spec.pool.name and metadata.name. A ResourceSlice is validated as upstream's
// ValidateResourceSlice does (ValidateResourceSlice below: names, pool, node selection,
// devices, attributes, capacities and request policies, counters, immutable fields); a claim's
// spec cannot change and its status.allocation, once set, only be removed; a claim created with
// a status loses it.
// What it does not do: admission, defaulting beyond status.phase=Pending, graceful deletion (DELETE
// removes at once; MarkPodDeleting sets deletionTimestamp for a test), other resource kinds,
// protobuf, TLS. It is honest about being a stand-in and must never ship in a product.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"

namespace httplib {
class Server;
class Request;
struct Response;
}  // namespace httplib

namespace tessera::k8s {

class TestApiServer {
 public:
  TestApiServer();
  ~TestApiServer();
  TestApiServer(const TestApiServer&) = delete;
  TestApiServer& operator=(const TestApiServer&) = delete;

  // Listens on 127.0.0.1:`port` (0: any free port) and serves on a thread pool.
  Status Start(int port = 0);
  // Ends every watch stream and stops serving.
  void Stop();
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Direct access for tests (the same store the HTTP side serves; every change is watched).
  Json CreateNode(Json node);
  Json CreatePod(Json pod);  // metadata.namespace defaults to "default"
  std::optional<Json> GetNode(const std::string& name) const;
  std::optional<Json> GetPod(const std::string& ns, const std::string& name) const;
  std::vector<Json> Pods() const;
  // status.phase of a pod (Pending, Running, Succeeded, Failed); false when there is no such pod.
  bool SetPodPhase(const std::string& ns, const std::string& name, const std::string& phase);
  bool SetNodeLabel(const std::string& name, const std::string& key,
                    const std::optional<std::string>& value);
  bool MarkPodDeleting(const std::string& ns, const std::string& name);
  bool DeletePod(const std::string& ns, const std::string& name);
  // Events, in the order they were created ("" namespace: all).
  std::vector<Json> Events(const std::string& ns = "") const;
  // resource.k8s.io/v1 objects: `kind` is ResourceSlice, DeviceClass, ResourceClaim or
  // ResourceClaimTemplate; `ns` is "" for the cluster-scoped ones. Create validates as the HTTP
  // side does and fails with the message a 422 would carry.
  Result<Json> CreateResource(const std::string& kind, Json object);
  std::optional<Json> GetResource(const std::string& kind, const std::string& ns,
                                  const std::string& name) const;
  std::vector<Json> ListResources(const std::string& kind) const;
  bool DeleteResource(const std::string& kind, const std::string& ns, const std::string& name);
  // Sets a claim's status (a kube-scheduler stand-in allocating it); false when there is none.
  bool SetClaimStatus(const std::string& ns, const std::string& name, const Json& status);

  // Forgets the change history: watches from an older resourceVersion get 410 Gone.
  void Compact();
  uint64_t resource_version() const;
  // How many PATCH requests failed with 409 so far.
  int conflicts() const;

  // Every request must carry "Authorization: Bearer `token`" ("" : none needed, the default).
  void RequireToken(std::string token);
  int unauthorized() const;  // requests refused with 401 so far
  // A fault for the next `count` requests whose method is `method` ("" any) and whose path
  // contains `path` ("" any): after `delay`, answer `status` with a Status object (503
  // ServiceUnavailable, 500 InternalError, 429 TooManyRequests with Retry-After: 1), or, with
  // status 0, drop the connection before the answer is complete.
  struct Fault {
    std::string method;
    std::string path;
    int count = 1;
    int status = 503;
    std::chrono::milliseconds delay{0};
  };
  void InjectFault(Fault fault);
  int faults_served() const;
  // Every answer waits `delay` first (a slow server).
  void SetLatency(std::chrono::milliseconds delay);
  // Ends every watch open now abruptly: the connection drops without the stream's end.
  void DropWatches();
  // Watches end (cleanly) after `timeout` whatever their timeoutSeconds, as the server's own
  // request timeout ends them; 0: only timeoutSeconds (default 1800 s).
  void SetWatchTimeout(std::chrono::milliseconds timeout);
  // A quiet watch that asked for bookmarks gets one this often (default 1 s).
  void SetBookmarkInterval(std::chrono::milliseconds interval);
  // The watch window keeps the last `changes` changes; a watch from an older version gets 410.
  void SetHistoryLimit(size_t changes);
  // Requests served so far whose method is `method` ("" any) and path contains `path`.
  int Requests(const std::string& method, const std::string& path) const;

 private:
  struct Change {
    uint64_t rv;
    std::string kind;  // Node, Pod, Event
    std::string type;  // ADDED, MODIFIED, DELETED
    Json object;
    Json previous;  // before a MODIFIED, for selector transitions
  };
  struct Collection {
    std::string kind;  // Node, Pod, Event
    std::string ns;    // "" for every namespace (or a cluster-scoped kind)
  };

  void Route();
  // Authentication, injected faults and latency before a route's handler; true when answered.
  bool Intercept(const httplib::Request& req, httplib::Response& res);
  void HandleList(const Collection& c, const httplib::Request& req, httplib::Response& res);
  void HandleWatch(const Collection& c, const httplib::Request& req, httplib::Response& res);
  void HandleCreate(const Collection& c, const httplib::Request& req, httplib::Response& res);
  void HandleGet(const std::string& kind, const std::string& key, httplib::Response& res);
  void HandlePatch(const std::string& kind, const std::string& key, const httplib::Request& req,
                   httplib::Response& res, bool status_only);
  void HandleDelete(const std::string& kind, const std::string& key, httplib::Response& res);
  void HandleBinding(const std::string& ns, const std::string& name, const httplib::Request& req,
                     httplib::Response& res);
  // A collection's GET: a list, or a watch with ?watch=true; a namespaced one takes the namespace
  // from the path's first group.
  std::function<void(const httplib::Request&, httplib::Response&)> CollectionGet(
      const std::string& kind, bool namespaced);
  // resource.k8s.io/v1 (test_apiserver_resource.cc).
  void RouteResource();
  void HandleUpdate(const std::string& kind, const std::string& key, const httplib::Request& req,
                    httplib::Response& res, bool status_only);
  void HandleDeleteWithOptions(const std::string& kind, const std::string& key,
                               const httplib::Request& req, httplib::Response& res);
  void HandleDeleteCollection(const Collection& c, const httplib::Request& req,
                              httplib::Response& res);

  // Under mu_:
  std::map<std::string, Json>* Objects(const std::string& kind);
  // The object, or nullptr after answering 404 with a Status naming it.
  Json* FindOr404(const std::string& kind, const std::string& key, httplib::Response& res);
  Json Insert(const std::string& kind, const std::string& key, Json object);
  void Modify(const std::string& kind, const std::string& key, Json object);
  void Remove(const std::string& kind, const std::string& key);
  // Takes the objects (the history keeps them): callers move what they no longer need.
  void Record(const std::string& kind, const std::string& type, Json object, Json previous);

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  // Watchers of one kind wait on its own condition: a pod's change wakes no node watcher.
  std::map<std::string, std::condition_variable> changed_;  // by kind, made up front
  void WakeAll();
  // Drops the oldest changes beyond history_limit_ that every live watch has been sent.
  void TrimHistory();
  bool stopping_ = false;
  uint64_t rv_ = 1;
  uint64_t compacted_ = 0;                             // history holds changes after this version
  std::map<std::string, Json> nodes_, pods_, events_;  // key: name, ns/name
  std::map<std::string, std::map<std::string, Json>> resources_;  // resource.k8s.io, by kind
  std::vector<std::string> event_order_;
  std::deque<Change> history_;
  int conflicts_ = 0;
  std::string token_;
  int unauthorized_ = 0;
  std::vector<Fault> faults_;
  int faults_served_ = 0;
  std::chrono::milliseconds latency_{0};
  uint64_t drop_epoch_ = 0;  // bumped by DropWatches
  std::chrono::milliseconds watch_timeout_{0};
  std::chrono::milliseconds bookmark_interval_{1000};
  size_t history_limit_ = 100000;
  uint64_t next_watch_ = 0;
  std::map<uint64_t, uint64_t> watch_positions_;  // live watch -> the version it was sent up to
  std::vector<std::pair<std::string, std::string>> served_;  // method, path
};

// Whether `kind` is one of the resource.k8s.io/v1 kinds served, and its apiVersion.
bool IsResourceKind(const std::string& kind);
std::string ApiVersionOf(const std::string& kind);

// The checks of upstream's ValidateResourceSlice (and, with `old`, ValidateResourceSliceUpdate)
// on a slice's JSON, as the API server applies them; the error lists every violation as
// "field: reason".
Status ValidateResourceSlice(const Json& slice, const Json* old = nullptr);
// What may change in an update of a resource.k8s.io object (the slice checks above; a claim's or
// template's spec not at all; a claim's status.allocation only from none or to none, and
// status.reservedFor only with an allocation). The error names the kind and object.
Status ValidateResourceChange(const std::string& kind, const Json& updated, const Json& current);

}  // namespace tessera::k8s
