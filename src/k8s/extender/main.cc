// tessera-extender: the kube-scheduler HTTP extender (docs/kubernetes.md). A thin door: its flags
// become one checked setup (extender_flags.h); it runs an ExtenderApp (and DRA steering with
// --dra-steering) until SIGTERM/SIGINT. No decisions and no Kubernetes JSON here.
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

#include "k8s/door.h"
#include "k8s/extender/dra_steering.h"
#include "k8s/extender/extender_app.h"
#include "k8s/extender/extender_flags.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-extender: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera;
  CLI::App app{extender::kExtenderDescription};
  extender::ExtenderFlags flags;
  extender::AddExtenderFlags(app, &flags);
  CLI11_PARSE(app, argc, argv);
  auto setup = extender::ExtenderSetupFrom(flags);
  if (!setup.ok()) return Fail(setup.error());
  const extender::AppConfig& config = setup->config;

  k8s::InstallStopSignals();

  if (flags.insecure_http) {
    std::fprintf(stderr,
                 "tessera-extender: WARNING: --insecure-http: filter, prioritize and bind are "
                 "served over plain HTTP without authentication on %s; anyone who reaches it can "
                 "reserve GPUs and bind pods with this extender's credentials\n",
                 flags.listen.c_str());
  }
  extender::ExtenderApp extender(config);
  if (Status s = extender.Start(); !s.ok()) return Fail(s.message());
  std::unique_ptr<k8s::ApiClient> dra_api;
  std::unique_ptr<extender::DraSteeringController> dra;
  if (setup->dra_steering) {
    dra_api = std::make_unique<k8s::ApiClient>(config.api);
    extender::DraSteeringOptions o;
    o.interval = setup->dra_interval;
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
