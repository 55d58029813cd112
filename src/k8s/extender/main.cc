// tessera-extender: the kube-scheduler HTTP extender (DESIGN §8). A thin door: it reads flags
// (CLI11), loads the optional target workload, and runs an ExtenderApp until SIGTERM/SIGINT. No
// decisions and no Kubernetes JSON here.
//
//   tessera-extender [--listen HOST:PORT] [--apiserver URL | --kubeconfig PATH [--context NAME]]
//                    [--workload PODS.csv] [--reservation-ttl DURATION] [--relearn DURATION]
//                    [--filter-answer chosen|fitting] [--dra-steering [--dra-interval D]]
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/duration.h"
#include "core/host_port.h"
#include "k8s/extender/dra_steering.h"
#include "k8s/extender/extender_app.h"
#include "placement/frag.h"
#include "placement/trace.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

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
      "/prioritize, /bind and GET /healthz, /metrics, /inspect[/NODE]."};
  std::string listen = "0.0.0.0:8888";
  std::string apiserver, kubeconfig, context, workload_csv;
  std::string ttl_text = "30s", relearn_text = "60s", answer_text = "chosen", dra_interval_text = "1s";
  bool dra_steering = false;
  app.add_option("--listen", listen, "HOST:PORT to serve on (default 0.0.0.0:8888)");
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
  } else if (!kubeconfig.empty()) {
    auto c = k8s::KubeconfigConfig(kubeconfig, context);
    if (!c.ok()) return Fail(c.error());
    config.api = *c;
  } else {
    auto c = k8s::InClusterConfig();
    if (!c.ok()) return Fail(c.error() + " (outside a cluster, pass --kubeconfig or --apiserver)");
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

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

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
  std::printf("port=%d\napiserver=%s\n", extender.port(), config.api.server.c_str());
  std::fflush(stdout);
  bool announced = false;
  while (g_stop == 0) {
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
