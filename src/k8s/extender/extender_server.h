// ExtenderServer: tessera-extender's HTTP door (cpp-httplib). kube-scheduler POSTs to
// <prefix>/filter, <prefix>/prioritize, <prefix>/preempt and <prefix>/bind (any prefix; the last
// path segment names the verb); operators GET /healthz (200 once the first list of Nodes and Pods
// is in, else 503), /metrics (Prometheus text) and /inspect[/NODE] (JSON: each node's GPUs and who
// holds what).
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
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
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

class ExtenderServer {
 public:
  // `binder` may be null: every bind then fails with a clear error (a read-only extender).
  ExtenderServer(ClusterState& state, Binder* binder);
  ~ExtenderServer();
  ExtenderServer(const ExtenderServer&) = delete;
  ExtenderServer& operator=(const ExtenderServer&) = delete;

  // Binds `host`:`port` (0: an ephemeral port); the port actually bound is port().
  Status Listen(const std::string& host, int port);
  int port() const;
  // Serves until Stop(); call from its own thread.
  void Serve();
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
  struct Http;

  ClusterState& state_;
  Binder* binder_;
  ExtenderMetrics metrics_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<Http> http_;
};

}  // namespace tessera::extender
