// tessera-extender: the kube-scheduler HTTP extender (docs/kubernetes.md). A thin door: it reads
// flags (CLI11), loads the optional target workload, and runs an ExtenderApp until SIGTERM/SIGINT.
// No decisions and no Kubernetes JSON here.
//
//   tessera-extender [--listen HOST:PORT] (--tls-cert-file PEM --tls-private-key-file PEM
//                    --client-ca-file PEM | --insecure-http) [--metrics-listen HOST:PORT]
//                    [--scheduler-name NAME]... [--max-request-bytes SIZE]
//                    [--apiserver URL | --kubeconfig PATH [--context NAME]]
//                    [--workload PODS.csv] [--reservation-ttl DURATION] [--relearn DURATION]
//                    [--filter-answer chosen|fitting] [--dra-steering [--dra-interval D]]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "core/duration.h"
#include "core/host_port.h"
#include "k8s/door.h"
#include "k8s/extender/dra_steering.h"
#include "k8s/extender/extender_app.h"
#include "placement/frag.h"
#include "placement/trace.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-extender: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  CLI::App app{
      "tessera-extender: places fractional-GPU pods for kube-scheduler (HTTP extender: filter, "
      "prioritize, bind) with Tessera's placement engine.\nServes POST <prefix>/filter, "
      "/prioritize, /bind and GET /healthz, /metrics, /inspect[/NODE] on --listen, over HTTPS "
      "to clients with a certificate of --client-ca-file (kube-scheduler's enableHTTPS and "
      "tlsConfig), and the GETs alone over HTTP on --metrics-listen."};
  std::string listen = "127.0.0.1:8888", metrics_listen;
  std::string cert_file, key_file, client_ca_file;
  bool insecure_http = false;
  std::vector<std::string> scheduler_names;
  std::string max_request_text = "4MiB";
  std::string apiserver, kubeconfig, context, workload_csv;
  std::string ttl_text = "30s", relearn_text = "60s", answer_text = "chosen", dra_interval_text = "1s";
  bool dra_steering = false;
  app.add_option("--listen", listen,
                 "HOST:PORT of the verbs (default 127.0.0.1:8888: kube-scheduler beside it in the "
                 "same pod)");
  app.add_option("--tls-cert-file", cert_file,
                 "PEM certificate (and chain) the verbs are served with over HTTPS");
  app.add_option("--tls-private-key-file", key_file, "PEM private key of --tls-cert-file");
  app.add_option("--client-ca-file", client_ca_file,
                 "PEM CA certificates; only a client with a certificate one of them signed (the "
                 "tlsConfig certFile of kube-scheduler's extender entry) may call the verbs");
  app.add_flag("--insecure-http", insecure_http,
               "serve the verbs over plain HTTP with no client authentication: anyone who "
               "reaches --listen can reserve GPUs and bind pods (tests and trials only)");
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT serving GET /healthz, /metrics and /inspect over plain HTTP, read-only "
                 "(for probes and Prometheus; default: none)");
  app.add_option("--scheduler-name", scheduler_names,
                 "spec.schedulerName of the pods this extender places; repeat for several "
                 "(default tessera-scheduler)");
  app.add_option("--max-request-bytes", max_request_text,
                 "largest request body, e.g. 4MiB (default); kube-scheduler's bodies stay far "
                 "below it with nodeCacheCapable, raise it for clusters of many nodes without it");
  app.add_option("--apiserver", apiserver,
                 "API server URL without credentials, e.g. http://127.0.0.1:8080 (default: the "
                 "in-cluster service account, or --kubeconfig)");
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig file to reach the API server");
  app.add_option("--context", context, "kubeconfig context (default: its current-context)");
  app.add_option("--workload", workload_csv,
                 "pod list (trace CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli,...) whose "
                 "shapes are the target workload of the tessera policy (default: learned from the "
                 "cluster's pods)");
  app.add_option("--reservation-ttl", ttl_text,
                 "how long a filter's reservation waits for its bind (default 30s)");
  app.add_option("--relearn", relearn_text,
                 "how often the learned target workload is refreshed (default 60s)");
  app.add_option(
         "--filter-answer", answer_text,
         "what a filter passes: chosen (the node Tessera chose: kube-scheduler binds there "
         "without prioritize) or fitting (every node that fits; prioritize scores Tessera's "
         "choice 10, for configurations that blend in kube-scheduler's own scores); "
         "default chosen")
      ->check(CLI::IsMember({"chosen", "fitting"}));
  app.add_flag("--dra-steering", dra_steering,
               "also place pods gated with gpu.tessera.io/steering: allocate their ResourceClaims "
               "of gpu.tessera.io with the placement engine, then remove the gate");
  app.add_option("--dra-interval", dra_interval_text,
                 "how often --dra-steering looks for gated pods (default 1s)");
  CLI11_PARSE(app, argc, argv);

  extender::AppConfig config;
  auto address = ParseHostPort(listen, "--listen");
  if (!address.ok()) return Fail(address.error());
  config.listen_host = address->host;
  config.listen_port = address->port;
  const int tls_flags = !cert_file.empty() + !key_file.empty() + !client_ca_file.empty();
  if (insecure_http && tls_flags > 0) {
    return Fail(
        "--insecure-http and --tls-cert-file/--tls-private-key-file/--client-ca-file: "
        "give one or the other");
  }
  if (!insecure_http && tls_flags < 3) {
    std::string missing;
    for (const auto& [flag, value] : {std::pair{"--tls-cert-file", &cert_file},
                                      {"--tls-private-key-file", &key_file},
                                      {"--client-ca-file", &client_ca_file}}) {
      if (value->empty()) missing += std::string(missing.empty() ? "" : ", ") + flag;
    }
    return Fail("--listen " + listen +
                ": the verbs are served over HTTPS to kube-scheduler's "
                "client certificate only; missing " +
                missing +
                " (docs/kubernetes.md: \"TLS between kube-scheduler and the extender\"), or "
                "--insecure-http to serve them to anyone who reaches the address");
  }
  if (!insecure_http) {
    config.tls = http::HttpServer::TlsOptions{cert_file, key_file, client_ca_file};
  }
  if (!metrics_listen.empty()) {
    auto m = ParseHostPort(metrics_listen, "--metrics-listen");
    if (!m.ok()) return Fail(m.error());
    config.metrics_host = m->host;
    config.metrics_port = m->port;
  }
  for (const std::string& name : scheduler_names) {
    if (name.empty()) return Fail("--scheduler-name \"\": expected a scheduler name");
  }
  if (!scheduler_names.empty()) config.scheduler_names = scheduler_names;
  auto max_request = ParseBytes(max_request_text, "--max-request-bytes");
  if (!max_request.ok()) return Fail(max_request.error());
  if (max_request->count() < (64u << 10) || max_request->count() > (1ull << 30)) {
    return Fail("--max-request-bytes " + max_request_text + ": expected 64KiB to 1GiB");
  }
  config.max_body_bytes = static_cast<size_t>(max_request->count());
  auto ttl = ParseDuration(ttl_text, "--reservation-ttl", std::chrono::seconds(1),
                           std::chrono::hours(1));
  if (!ttl.ok()) return Fail(ttl.error());
  config.state.reservation_ttl = std::chrono::duration_cast<std::chrono::milliseconds>(*ttl);
  auto relearn = ParseDuration(relearn_text, "--relearn", std::chrono::seconds(1),
                               std::chrono::hours(24));
  if (!relearn.ok()) return Fail(relearn.error());
  config.state.relearn_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*relearn);
  config.state.filter_answer =
      answer_text == "fitting" ? extender::FilterAnswer::kFitting : extender::FilterAnswer::kChosen;
  if (!apiserver.empty() && !kubeconfig.empty()) {
    return Fail("--apiserver and --kubeconfig: give one or the other");
  }
  if (!apiserver.empty()) {
    config.api.server = apiserver;
  } else {
    auto c = k8s::ClientConfigFor(kubeconfig, context, "tessera-extender");
    if (!c.ok()) {
      return Fail(c.error() + (kubeconfig.empty()
                                   ? " (outside a cluster, pass --kubeconfig or --apiserver)"
                                   : ""));
    }
    config.api = *c;
  }
  config.api.user_agent = "tessera-extender";
  if (!workload_csv.empty()) {
    auto pods = placement::LoadPodCsv(workload_csv, placement::ModelTable());
    if (!pods.ok()) return Fail("--workload: " + pods.error());
    config.state.workload = std::make_shared<placement::TargetWorkload>(
        placement::TargetWorkload::FromRequests(pods->requests));
  }

  auto dra_interval = ParseDuration(dra_interval_text, "--dra-interval",
                                    std::chrono::milliseconds(100), std::chrono::minutes(10));
  if (!dra_interval.ok()) return Fail(dra_interval.error());

  k8s::InstallStopSignals();

  if (insecure_http) {
    std::fprintf(stderr,
                 "tessera-extender: WARNING: --insecure-http: filter, prioritize and bind are "
                 "served over plain HTTP without authentication on %s; anyone who reaches it can "
                 "reserve GPUs and bind pods with this extender's credentials\n",
                 listen.c_str());
  }
  extender::ExtenderApp extender(config);
  if (Status s = extender.Start(); !s.ok()) return Fail(s.message());
  std::unique_ptr<k8s::ApiClient> dra_api;
  std::unique_ptr<extender::DraSteeringController> dra;
  if (dra_steering) {
    dra_api = std::make_unique<k8s::ApiClient>(config.api);
    extender::DraSteeringOptions o;
    o.interval = std::chrono::duration_cast<std::chrono::milliseconds>(*dra_interval);
    o.workload = config.state.workload;
    dra = std::make_unique<extender::DraSteeringController>(dra_api.get(), o);
    dra->Start();
  }
  // key=value lines, for people and for tests that start the program.
  std::printf("port=%d\nmetrics_port=%d\ntls=%s\napiserver=%s\n", extender.port(),
              extender.metrics_port(), config.tls ? "on" : "off", config.api.server.c_str());
  std::fflush(stdout);
  bool announced = false;
  while (!k8s::StopRequested()) {
    if (!announced && extender.WaitReady(std::chrono::milliseconds(200))) {
      std::printf("ready=1\n");
      std::fflush(stdout);
      announced = true;
    } else if (announced) {
      usleep(200000);
    }
  }
  if (dra) dra->Stop();
  extender.Stop();
  return 0;
}
