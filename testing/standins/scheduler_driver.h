// SchedulerDriver: drives a tessera-extender's HTTP verbs the way kube-scheduler does for one pod
// (filter with the candidate nodes, prioritize the ones that passed, pick the highest score, bind),
// for tests and the whole-cluster test. Test tooling: it is not kube-scheduler (no queue, no
// backoff, no plugins of its own), only its calls to an extender.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/objects.h"

namespace httplib {
class Client;
}

namespace tessera::extender::testing {

struct ScheduleResult {
  bool bound = false;
  std::string node;                              // where it was bound
  std::map<std::string, std::string> failures;   // filter's reasons per node, when none fit
  std::string error;                             // a verb's HTTP or Error failure
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
  // A raw POST; returns the HTTP status (0: no answer) and sets *body.
  int Post(const std::string& path, const std::string& request, std::string* body);

 private:
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace tessera::extender::testing
