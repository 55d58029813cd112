// The node doors' shared main parts (see the header).
#include "k8s/door.h"

#include <signal.h>

#include <cstdlib>

namespace tessera::k8s {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

void InstallStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool StopRequested() { return g_stop != 0; }

Result<ClientConfig> ClientConfigFor(const std::string& kubeconfig, const std::string& context,
                                     const std::string& user_agent) {
  auto config = kubeconfig.empty() ? InClusterConfig() : KubeconfigConfig(kubeconfig, context);
  if (!config.ok()) return config.status();
  config->user_agent = user_agent;
  return config;
}

}  // namespace tessera::k8s
