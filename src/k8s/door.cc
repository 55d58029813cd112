// The Kubernetes doors' shared main parts (see the header).
#include "k8s/door.h"

#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/duration.h"
#include "core/path.h"
#include "process/child_process.h"

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

void WaitForStop() {
  while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

Result<ClientConfig> ClientConfigFor(const std::string& kubeconfig, const std::string& context,
                                     const std::string& user_agent) {
  auto config = kubeconfig.empty() ? InClusterConfig() : KubeconfigConfig(kubeconfig, context);
  if (!config.ok()) return config.status();
  config->user_agent = user_agent;
  return config;
}

NodeDoorFlags::NodeDoorFlags()
    : node(EnvOr("NODE_NAME", "")),
      tesserad_socket(EnvOr("TESSERA_SOCKET", "/run/tessera/tessera.sock")),
      container_sockets("/run/tessera/containers"),
      shim_dir(process::ExecutableDir() + "/../lib/tessera"),
      nvml(EnvOr("TESSERA_REAL_NVML", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")) {}

void AddNodeDoorFlags(CLI::App& app, NodeDoorFlags* flags) {
  app.add_option("--node-name", flags->node, "this node's name (default: $NODE_NAME)");
  app.add_option("--kubeconfig", flags->kubeconfig,
                 "kubeconfig file (default: the pod's service account)");
  app.add_option("--context", flags->context, "kubeconfig context (default: its current-context)");
  app.add_option("--tesserad-socket", flags->tesserad_socket,
                 "tesserad's socket (default: $TESSERA_SOCKET or /run/tessera/tessera.sock)");
  app.add_option("--container-sockets", flags->container_sockets,
                 "tesserad's --container-sockets folder");
  app.add_option("--shim-dir", flags->shim_dir,
                 "folder with Tessera's libcuda.so.1 and libnvidia-ml.so.1");
  app.add_option(
      "--default-mode", flags->default_mode,
      "the mode of a node with no tessera.io/gpu.schedule or ack.node.gpu.schedule label "
      "(core_mem, mem, share, exclusive, mig, mps; default core_mem)");
  app.add_option("--reconcile-interval", flags->reconcile_interval,
                 "how often to reconcile (100ms to 1m)");
  app.add_option("--nvml", flags->nvml,
                 "NVML library a mig node's MIG devices are read from (default: $TESSERA_REAL_NVML "
                 "or /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; with --sim, simgpu's)");
}

Result<NodeDoor> CheckNodeDoor(
    const NodeDoorFlags& flags, const std::string& unhealthy_after,
    const std::vector<std::pair<const char*, std::string>>& directories) {
  using R = Result<NodeDoor>;
  NodeDoor door;
  if (flags.node.empty()) {
    return R::Error("--node-name is not set and neither is NODE_NAME; expected this node's name");
  }
  door.node = flags.node;
  auto mode = ParseNodeMode(flags.default_mode, "--default-mode");
  if (!mode.ok()) return mode.status();
  door.default_mode = *mode;
  auto interval = ParseDuration(flags.reconcile_interval, "--reconcile-interval",
                                std::chrono::milliseconds(100), std::chrono::minutes(1));
  if (!interval.ok()) return interval.status();
  door.reconcile_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*interval);
  auto grace = ParseDuration(unhealthy_after, "--unhealthy-after", std::chrono::seconds(1),
                             std::chrono::minutes(10));
  if (!grace.ok()) return grace.status();
  door.unhealthy_after = std::chrono::duration_cast<std::chrono::seconds>(*grace);
  std::vector<std::pair<const char*, std::string>> folders = directories;
  folders.emplace_back("--container-sockets", flags.container_sockets);
  for (const auto& [flag, value] : folders) {
    if (auto p = ParseDirectoryPath(value, flag); !p.ok()) return p.status();
  }
  if (auto p = ParseSocketPath(flags.tesserad_socket, "--tesserad-socket"); !p.ok()) {
    return p.status();
  }
  if (flags.sim) door.sim_library = process::ExecutableDir() + "/../lib/libtessera-simgpu.so";
  door.nvml_library = flags.sim ? door.sim_library : flags.nvml;
  if (door.nvml_library.empty() || door.nvml_library[0] != '/') {
    return R::Error("--nvml=\"" + door.nvml_library +
                    "\": expected an absolute path of libnvidia-ml.so.1");
  }
  return door;
}

void SayLine(const char* program, const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", program, line.c_str());
}

int FailStart(const char* program, const std::string& message) {
  SayLine(program, message);
  return 2;
}

}  // namespace tessera::k8s
