// ExtenderServer: tessera-extender's HTTP door (src/http's HttpServer). kube-scheduler POSTs to
// <prefix>/filter, <prefix>/prioritize, <prefix>/preempt and <prefix>/bind (any prefix; the last
// path segment names the verb); operators GET /healthz (200 once the first list of Nodes and Pods
// is in, else 503), /metrics (Prometheus text), /inspect[/NODE] (JSON: each node's GPUs and who
// holds what) and / or /ui (the cluster page, over /inspect).
//
// Who may drive it: the verbs are served on one address (ListenOptions::host/port), over HTTPS
// with client certificates when ListenOptions::tls is set (kube-scheduler's enableHTTPS and
// tlsConfig: only a client whose certificate the configured CA signed gets past the handshake);
// an optional second address serves only the read-only GETs, over plain HTTP, for probes and
// Prometheus. The HTTP server bounds a request's size (413), its time, and the connections, so
// that no client can delay kube-scheduler's calls (src/http/server.h).
//
// What the verbs act on: filter, prioritize and bind act only on a pod that exists with the UID
// asked about, is not bound, has not ended and is not being deleted, and names one of
// DoorOptions::scheduler_names; the watch cache decides, and a pod it has not seen (its watch can
// lag kube-scheduler's) is read from the API server once. Any other pod reserves nothing and binds
// nothing: filter and bind answer HTTP 200 with the reason in Error (the field kube-scheduler
// reads), prioritize scores every node 0.
//
// Every verb answers HTTP 200, errors included: kube-scheduler's extender client
// (pkg/scheduler/extender.go, send) reads no body of any other status and logs only the code. So
// an error goes where it reads one: filter and bind put it in Error (ExtenderFilterResult,
// ExtenderBindingResult), which fails the pod's scheduling cycle with that message in its
// FailedScheduling event. prioritize and preempt have no such field: prioritize answers an empty
// list (no score from the extender, as kube-scheduler does with any prioritize error) and preempt
// an empty NodeNameToMetaVictims (no node where preempting helps: nothing is evicted); their
// message goes to the extender's log and metrics. A malformed request changes nothing; every other
// request keeps being served. Until ready, the verbs answer with that error (deciding on an empty
// picture could give a GPU twice).
//
// The decisions are ClusterState's; the writes of a bind are the Binder's (the API server), so
// this file holds no policy and no Kubernetes client.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "http/server.h"
#include "k8s/api_client.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/extender/extender_metrics.h"
#include "k8s/extender/wire.h"

namespace tessera::extender {

// Writes a bind's decision to the API server. Implementations retry what is safe to retry.
class Binder {
 public:
  struct Outcome {
    bool ok = false;
    std::string kind;   // on failure: conflict, api-error, pod-gone, ... (a metrics label)
    std::string error;  // on failure: what happened, naming the pod, node and object
  };
  virtual ~Binder() = default;
  // Writes `plan` (assignment and phase annotations, the node's seq) and creates the Binding.
  // On failure, undoes what it wrote where it can. May update `plan` (a retried seq).
  virtual Outcome Commit(const BindingArgs& args, BindPlan& plan) = 0;
};

// Reads one pod from the API server.
using PodLookup =
    std::function<k8s::ApiResult<k8s::Json>(const std::string& ns, const std::string& name)>;

// What the verbs act on (see above).
struct DoorOptions {
  std::vector<std::string> scheduler_names = {"tessera-scheduler"};
  PodLookup lookup;  // null: a pod the watch has not shown is refused
};

// Where and how the door listens.
struct ListenOptions {
  std::string host = "127.0.0.1";
  int port = 8888;                                  // 0: an ephemeral port
  std::optional<http::HttpServer::TlsOptions> tls;  // nullopt: plain HTTP, anyone may call
  // The read-only address (GET /healthz, /metrics, /inspect, the page), plain HTTP; port < 0:
  // none.
  std::string metrics_host = "0.0.0.0";
  int metrics_port = -1;
  size_t max_body_bytes = 4 << 20;  // kube-scheduler's NodeNames for 5000 nodes and a large pod
  size_t max_connections = 128;
  std::function<void(std::string_view)> log;  // the HTTP server's notes (refused clients)
};

class ExtenderServer {
 public:
  // `binder` may be null: every bind then fails with a clear error (a read-only extender).
  ExtenderServer(ClusterState& state, Binder* binder, DoorOptions options = {});
  ~ExtenderServer();
  ExtenderServer(const ExtenderServer&) = delete;
  ExtenderServer& operator=(const ExtenderServer&) = delete;

  // Binds the address(es); port() and metrics_port() are then the ports actually bound.
  Status Listen(const ListenOptions& options);
  int port() const;
  int metrics_port() const;  // -1: none
  bool tls() const;
  // Starts serving (threads of the HTTP servers); Stop() ends it.
  Status Serve();
  void Stop();

  void SetReady(bool ready) { ready_ = ready; }
  bool ready() const { return ready_; }

  // The verbs, body in and body out, with the HTTP status; what the HTTP routes call.
  std::string Filter(std::string_view body, int* status);
  std::string Prioritize(std::string_view body, int* status);
  std::string Preempt(std::string_view body, int* status);
  std::string Bind(std::string_view body, int* status);

  ExtenderMetrics& metrics() { return metrics_; }

 private:
  // Empty when a verb may act on pod ns/name with `uid` (see above), else why not; *kind is the
  // reason's metrics label.
  std::string Admit(const std::string& ns, const std::string& name, const std::string& uid,
                    std::string* kind);
  http::Response Route(const http::Request& request, bool verbs);

  ClusterState& state_;
  Binder* binder_;
  DoorOptions options_;
  ExtenderMetrics metrics_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<http::HttpServer> verbs_;
  std::unique_ptr<http::HttpServer> read_only_;
};

}  // namespace tessera::extender
