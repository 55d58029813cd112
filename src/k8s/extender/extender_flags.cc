// tessera-extender's flags and their checks (extender_flags.h).
#include "k8s/extender/extender_flags.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <utility>

#include "core/bytes.h"
#include "core/duration.h"
#include "core/host_port.h"
#include "k8s/door.h"
#include "placement/frag.h"
#include "placement/trace.h"

namespace tessera::extender {
namespace {

Result<ExtenderSetup> Fail(const std::string& message) {
  return Result<ExtenderSetup>::Error(message);
}

}  // namespace

const char* const kExtenderDescription =
    "tessera-extender: places fractional-GPU pods for kube-scheduler (HTTP extender: filter, "
    "prioritize, bind) with Tessera's placement engine.\nServes POST <prefix>/filter, "
    "/prioritize, /bind and GET /healthz, /metrics, /inspect[/NODE] on --listen, over HTTPS "
    "to clients with a certificate of --client-ca-file (kube-scheduler's enableHTTPS and "
    "tlsConfig), and the GETs alone over HTTP on --metrics-listen.";

void AddExtenderFlags(CLI::App& app, ExtenderFlags* flags) {
  app.add_option("--listen", flags->listen,
                 "HOST:PORT of the verbs (default 127.0.0.1:8888: kube-scheduler beside it in the "
                 "same pod)");
  app.add_option("--tls-cert-file", flags->cert_file,
                 "PEM certificate (and chain) the verbs are served with over HTTPS");
  app.add_option("--tls-private-key-file", flags->key_file, "PEM private key of --tls-cert-file");
  app.add_option("--client-ca-file", flags->client_ca_file,
                 "PEM CA certificates; only a client with a certificate one of them signed (the "
                 "tlsConfig certFile of kube-scheduler's extender entry) may call the verbs");
  app.add_flag("--insecure-http", flags->insecure_http,
               "serve the verbs over plain HTTP with no client authentication: anyone who "
               "reaches --listen can reserve GPUs and bind pods (tests and trials only)");
  app.add_option("--metrics-listen", flags->metrics_listen,
                 "HOST:PORT serving GET /healthz, /metrics and /inspect over plain HTTP, read-only "
                 "(for probes and Prometheus; default: none)");
  app.add_option("--scheduler-name", flags->scheduler_names,
                 "spec.schedulerName of the pods this extender places; repeat for several "
                 "(default tessera-scheduler)");
  app.add_option("--max-request-bytes", flags->max_request_text,
                 "largest request body, e.g. 4MiB (default); kube-scheduler's bodies stay far "
                 "below it with nodeCacheCapable, raise it for clusters of many nodes without it");
  app.add_option("--apiserver", flags->apiserver,
                 "API server URL without credentials, e.g. http://127.0.0.1:8080 (default: the "
                 "in-cluster service account, or --kubeconfig)");
  app.add_option("--kubeconfig", flags->kubeconfig, "kubeconfig file to reach the API server");
  app.add_option("--context", flags->context, "kubeconfig context (default: its current-context)");
  app.add_option("--workload", flags->workload_csv,
                 "pod list (trace CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli,...) whose "
                 "shapes are the target workload of the tessera policy (default: learned from the "
                 "cluster's pods)");
  app.add_option("--reservation-ttl", flags->ttl_text,
                 "how long a filter's reservation waits for its bind (default 30s)");
  app.add_option("--relearn", flags->relearn_text,
                 "how often the learned target workload is refreshed (default 60s)");
  app.add_option("--mig-recut-interval", flags->recut_interval_text,
                 "the least time between two re-cuts of one MIG GPU of a node labelled "
                 "tessera.io/mig.recut=true (default 5m)");
  app.add_option(
         "--filter-answer", flags->answer_text,
         "what a filter passes: chosen (the node Tessera chose: kube-scheduler binds there "
         "without prioritize) or fitting (every node that fits; prioritize scores Tessera's "
         "choice 10, for configurations that blend in kube-scheduler's own scores); "
         "default chosen")
      ->check(CLI::IsMember({"chosen", "fitting"}));
  app.add_flag("--dra-steering", flags->dra_steering,
               "also place pods gated with gpu.tessera.io/steering: allocate their ResourceClaims "
               "of gpu.tessera.io with the placement engine, then remove the gate");
  app.add_option("--dra-interval", flags->dra_interval_text,
                 "how often --dra-steering looks for gated pods (default 1s)");
}

Result<ExtenderSetup> ExtenderSetupFrom(const ExtenderFlags& f) {
  ExtenderSetup setup;
  AppConfig& config = setup.config;
  auto address = ParseHostPort(f.listen, "--listen");
  if (!address.ok()) return Fail(address.error());
  config.listen_host = address->host;
  config.listen_port = address->port;
  const int tls_flags = !f.cert_file.empty() + !f.key_file.empty() + !f.client_ca_file.empty();
  if (f.insecure_http && tls_flags > 0) {
    return Fail(
        "--insecure-http and --tls-cert-file/--tls-private-key-file/--client-ca-file: "
        "give one or the other");
  }
  if (!f.insecure_http && tls_flags < 3) {
    std::string missing;
    for (const auto& [flag, value] : {std::pair{"--tls-cert-file", &f.cert_file},
                                      {"--tls-private-key-file", &f.key_file},
                                      {"--client-ca-file", &f.client_ca_file}}) {
      if (value->empty()) missing += std::string(missing.empty() ? "" : ", ") + flag;
    }
    return Fail("--listen " + f.listen +
                ": the verbs are served over HTTPS to kube-scheduler's "
                "client certificate only; missing " +
                missing +
                " (docs/kubernetes.md: \"TLS between kube-scheduler and the extender\"), or "
                "--insecure-http to serve them to anyone who reaches the address");
  }
  if (!f.insecure_http) {
    config.tls = http::HttpServer::TlsOptions{f.cert_file, f.key_file, f.client_ca_file};
  }
  if (!f.metrics_listen.empty()) {
    auto m = ParseHostPort(f.metrics_listen, "--metrics-listen");
    if (!m.ok()) return Fail(m.error());
    config.metrics_host = m->host;
    config.metrics_port = m->port;
  }
  for (const std::string& name : f.scheduler_names) {
    if (name.empty()) return Fail("--scheduler-name \"\": expected a scheduler name");
  }
  if (!f.scheduler_names.empty()) config.scheduler_names = f.scheduler_names;
  auto max_request = ParseBytes(f.max_request_text, "--max-request-bytes");
  if (!max_request.ok()) return Fail(max_request.error());
  if (max_request->count() < (64u << 10) || max_request->count() > (1ull << 30)) {
    return Fail("--max-request-bytes " + f.max_request_text + ": expected 64KiB to 1GiB");
  }
  config.max_body_bytes = static_cast<size_t>(max_request->count());
  auto ttl = ParseDuration(f.ttl_text, "--reservation-ttl", std::chrono::seconds(1),
                           std::chrono::hours(1));
  if (!ttl.ok()) return Fail(ttl.error());
  config.state.reservation_ttl = std::chrono::duration_cast<std::chrono::milliseconds>(*ttl);
  auto relearn =
      ParseDuration(f.relearn_text, "--relearn", std::chrono::seconds(1), std::chrono::hours(24));
  if (!relearn.ok()) return Fail(relearn.error());
  config.state.relearn_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*relearn);
  auto recut = ParseDuration(f.recut_interval_text, "--mig-recut-interval", std::chrono::seconds(1),
                             std::chrono::hours(24 * 7));
  if (!recut.ok()) return Fail(recut.error());
  config.state.mig_recut_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*recut);
  config.state.filter_answer =
      f.answer_text == "fitting" ? FilterAnswer::kFitting : FilterAnswer::kChosen;
  if (!f.apiserver.empty() && !f.kubeconfig.empty()) {
    return Fail("--apiserver and --kubeconfig: give one or the other");
  }
  if (!f.apiserver.empty()) {
    config.api.server = f.apiserver;
  } else {
    auto c = k8s::ClientConfigFor(f.kubeconfig, f.context, "tessera-extender");
    if (!c.ok()) {
      return Fail(c.error() + (f.kubeconfig.empty()
                                   ? " (outside a cluster, pass --kubeconfig or --apiserver)"
                                   : ""));
    }
    config.api = *c;
  }
  config.api.user_agent = "tessera-extender";
  if (!f.workload_csv.empty()) {
    auto pods = placement::LoadPodCsv(f.workload_csv, placement::ModelTable());
    if (!pods.ok()) return Fail("--workload: " + pods.error());
    config.state.workload = std::make_shared<placement::TargetWorkload>(
        placement::TargetWorkload::FromRequests(pods->requests));
  }

  auto dra_interval = ParseDuration(f.dra_interval_text, "--dra-interval",
                                    std::chrono::milliseconds(100), std::chrono::minutes(10));
  if (!dra_interval.ok()) return Fail(dra_interval.error());
  setup.dra_steering = f.dra_steering;
  setup.dra_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*dra_interval);
  return setup;
}

}  // namespace tessera::extender
