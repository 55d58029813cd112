// SchedulerDriver: a STAND-IN for kube-scheduler's HTTP extender client (pkg/scheduler/extender.go
// and its callers in schedule_one.go and framework/preemption), for tests. It drives a
// tessera-extender's verbs the way kube-scheduler does for one pod: filter with the candidate
// nodes, prioritize the ones that passed (skipped when one is left), pick the highest score, bind;
// and preempt with the victims its own preemption chose. What it copies: a POST with
// Content-Type application/json; an answer other than 200 is an error that names only the verb,
// the URL and the code (the body is never read); a 200 answer's Error (filter, bind) is the error;
// a prioritize error gives no scores (kube-scheduler ignores it); a preempt answer naming a node
// with no victim is an error. It is not kube-scheduler: no queue, backoff or plugins of its own.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"

namespace httplib {
class Client;
}

namespace tessera::extender::testing {

struct ScheduleResult {
  bool bound = false;
  std::string node;                             // where it was bound
  std::map<std::string, std::string> failures;  // filter's reasons per node, when none fit
  std::string error;                            // a verb's HTTP or Error failure
};

// An extender entry's `enableHTTPS: true` with its `tlsConfig` (KubeSchedulerConfiguration v1):
// kube-scheduler checks the extender's certificate against caFile (when given) and presents
// certFile/keyFile as its client certificate.
struct SchedulerTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

class SchedulerDriver {
 public:
  explicit SchedulerDriver(int port);
  // Over HTTPS, as kube-scheduler with `tls` (to https://127.0.0.1:PORT).
  SchedulerDriver(int port, const SchedulerTls& tls);
  ~SchedulerDriver();

  // One scheduling attempt of `pod` (a v1.Pod as the API server returned it) over `nodes`.
  ScheduleResult Schedule(const k8s::Json& pod, const std::vector<std::string>& nodes);
  // kube-scheduler's preempt call with nodeCacheCapable: `victims` (node -> pod UIDs) in
  // NodeNameToMetaVictims; the nodes and victims the extender keeps, or its error.
  Result<std::map<std::string, std::vector<std::string>>> Preempt(
      const k8s::Json& pod, const std::map<std::string, std::vector<std::string>>& victims);
  // A raw POST; returns the HTTP status (0: no answer) and sets *body.
  int Post(const std::string& path, const std::string& request, std::string* body);

 private:
  std::unique_ptr<httplib::Client> http_;
  std::string url_;         // http(s)://127.0.0.1:PORT
  std::string last_error_;  // the client's error when a POST got no answer
};

}  // namespace tessera::extender::testing
