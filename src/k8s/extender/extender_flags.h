// tessera-extender's command line: its flags (CLI11) and the ExtenderApp configuration they make,
// checked once. Every refusal names the flag, the value and what is allowed. Reads the --workload
// file and the kubeconfig it is given; starts nothing. For tessera-extender's main.cc only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/extender/extender_app.h"

namespace CLI {
class App;
}

namespace tessera::extender {

// What --help says the program is.
extern const char* const kExtenderDescription;

// The command line as given, with the defaults.
struct ExtenderFlags {
  std::string listen = "127.0.0.1:8888", metrics_listen;
  std::string cert_file, key_file, client_ca_file;
  bool insecure_http = false;
  std::vector<std::string> scheduler_names;
  std::string max_request_text = "4MiB";
  std::string apiserver, kubeconfig, context, workload_csv;
  std::string ttl_text = "30s", relearn_text = "60s", answer_text = "chosen";
  std::string recut_interval_text = "5m";
  std::string dra_interval_text = "1s";
  bool dra_steering = false;
};

// Registers every flag on `app`.
void AddExtenderFlags(CLI::App& app, ExtenderFlags* flags);

// What the program runs: the ExtenderApp's configuration and DRA steering's.
struct ExtenderSetup {
  AppConfig config;
  bool dra_steering = false;
  std::chrono::milliseconds dra_interval{1000};
};

// Checks `f` and builds the setup; the API server's configuration is --apiserver, the kubeconfig,
// or the pod's service account. The first problem is the error.
Result<ExtenderSetup> ExtenderSetupFrom(const ExtenderFlags& f);

}  // namespace tessera::extender
