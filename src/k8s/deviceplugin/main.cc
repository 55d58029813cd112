// tessera-device-plugin: the kubelet device plugin of a Tessera GPU node (docs/contracts.md; runs
// beside tesserad, one per node). A thin door: flags, the state folder (the shims and
// /etc/ld.so.preload that pods mount, and the checkpoint), then DevicePluginServer until SIGTERM.
// docs/kubernetes.md says how to deploy it.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>

#include "core/duration.h"
#include "core/path.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/plugin.h"
#include "k8s/door.h"
#include "process/child_process.h"

namespace {

using namespace tessera;
using namespace tessera::k8s;

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-device-plugin: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-device-plugin: kubelet device plugin for Tessera GPU nodes"};
  std::string node = EnvOr("NODE_NAME", "");
  std::string kubeconfig, context;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string tesserad_socket = EnvOr("TESSERA_SOCKET", "/run/tessera/tessera.sock");
  std::string container_sockets = "/run/tessera/containers";
  std::string state_dir = "/var/lib/tessera/device-plugin";
  std::string shim_dir = process::ExecutableDir() + "/../lib/tessera";
  std::string names_text = "tessera";
  std::string cdi_dir = "/var/run/cdi";
  std::string interval_text = "1s";
  std::string default_mode_text = "core_mem";
  std::string grace_text = "10s";
  std::string proc_root = "/proc";
  std::string oci_hook = process::ExecutableDir() + "/tessera-oci-hook";
  std::string nvml = EnvOr("TESSERA_REAL_NVML", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  bool cdi = false, sim = false;
  app.add_option("--node-name", node, "this node's name (default: $NODE_NAME)");
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig file (default: the pod's service account)");
  app.add_option("--context", context, "kubeconfig context (default: its current-context)");
  app.add_option("--device-plugin-dir", plugin_dir, "kubelet's device-plugin folder");
  app.add_option("--tesserad-socket", tesserad_socket, "tesserad's socket (default: $TESSERA_SOCKET or /run/tessera/tessera.sock)");
  app.add_option("--container-sockets", container_sockets, "tesserad's --container-sockets folder");
  app.add_option("--state-dir", state_dir, "host folder for the shims pods mount and the checkpoint");
  app.add_option("--shim-dir", shim_dir, "folder with Tessera's libcuda.so.1 and libnvidia-ml.so.1");
  app.add_option("--resource-names", names_text, "tessera, aliyun (ACK's names) or both");
  app.add_flag("--cdi", cdi, "answer with CDI devices and write their specs");
  app.add_option("--cdi-dir", cdi_dir, "where CDI specs go");
  app.add_option("--oci-hook", oci_hook,
                 "with --cdi: tessera-oci-hook, copied to --state-dir for the runtime to run "
                 "(default: beside this program)");
  app.add_flag("--sim", sim,
               "a simulated node: hand pods simgpu, the state file $TESSERA_SIM_STATE names and "
               "$TESSERA_SIM_GPUS");
  app.add_option("--default-mode", default_mode_text,
                 "the mode of a node with no tessera.io/gpu.schedule or ack.node.gpu.schedule label "
                 "(core_mem, mem, share, exclusive, mig, mps; default core_mem)");
  app.add_option("--reconcile-interval", interval_text, "how often to reconcile (100ms to 1m)");
  app.add_option("--proc-root", proc_root, "the host's /proc (to read processes' cgroups)");
  app.add_option("--nvml", nvml,
                 "NVML library a mig node's MIG devices are read from (default: $TESSERA_REAL_NVML "
                 "or /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; with --sim, simgpu's)");
  app.add_option("--unhealthy-after", grace_text,
                 "tesserad unreachable this long marks the GPUs unhealthy (1s to 10m)");
  CLI11_PARSE(app, argc, argv);

  if (node.empty()) return Fail("--node-name is not set and neither is NODE_NAME; expected this node's name");
  auto names = ParseResourceNames(names_text);
  if (!names.ok()) return Fail(names.error());
  auto default_mode = ParseNodeMode(default_mode_text, "--default-mode");
  if (!default_mode.ok()) return Fail(default_mode.error());
  auto interval = ParseDuration(interval_text, "--reconcile-interval", std::chrono::milliseconds(100),
                                std::chrono::minutes(1));
  if (!interval.ok()) return Fail(interval.error());
  auto grace = ParseDuration(grace_text, "--unhealthy-after", std::chrono::seconds(1), std::chrono::minutes(10));
  if (!grace.ok()) return Fail(grace.error());
  for (auto [flag, value] : {std::pair<const char*, std::string*>{"--device-plugin-dir", &plugin_dir},
                             {"--container-sockets", &container_sockets},
                             {"--state-dir", &state_dir},
                             {"--cdi-dir", &cdi_dir},
                             {"--proc-root", &proc_root}}) {
    auto p = ParseDirectoryPath(*value, flag);
    if (!p.ok()) return Fail(p.error());
  }
  if (auto p = ParseSocketPath(tesserad_socket, "--tesserad-socket"); !p.ok()) return Fail(p.error());
  if (sim) nvml = process::ExecutableDir() + "/../lib/libtessera-simgpu.so";
  if (nvml.empty() || nvml[0] != '/') {
    return Fail("--nvml=\"" + nvml + "\": expected an absolute path of libnvidia-ml.so.1");
  }

  // The state folder: the shims and the preload list pods mount (host paths kubelet can bind).
  PluginOptions options;
  options.node = node;
  options.plugin_dir = plugin_dir;
  options.tesserad_socket = tesserad_socket;
  options.names = *names;
  options.default_mode = *default_mode;
  options.reconcile_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*interval);
  options.proc_root = proc_root;
  options.unhealthy_after = std::chrono::duration_cast<std::chrono::seconds>(*grace);
  options.nvml_library = nvml;
  AllocatorConfig& a = options.allocator;
  a.node = node;
  a.checkpoint_path = state_dir + "/checkpoint.json";
  a.container_socket_dir = container_sockets;
  a.cdi = cdi;
  a.cdi_dir = cdi_dir;
  auto mounts = PrepareNodeMounts(
      state_dir, shim_dir, container_sockets,
      sim ? process::ExecutableDir() + "/../lib/libtessera-simgpu.so" : std::string());
  if (!mounts.ok()) return Fail(mounts.error());
  a.shim_dir = mounts->shim_dir;
  a.preload_file = mounts->preload_file;
  a.sim_library = mounts->sim_library;
  a.sim_state = mounts->sim_state;
  a.sim_env = mounts->sim_env;
  a.tesserad_socket = tesserad_socket;
  if (cdi) {
    // The runtime runs the hook on the host: from the state folder, a host path.
    a.oci_hook = state_dir + "/tessera-oci-hook";
    if (Status s = CopyFile(oci_hook, a.oci_hook); !s.ok()) {
      return Fail("--oci-hook=\"" + oci_hook + "\": " + s.message() +
                  "; expected tessera-oci-hook (build/bin)");
    }
  }

  auto config = ClientConfigFor(kubeconfig, context, "tessera-device-plugin/" + node);
  if (!config.ok()) return Fail(config.error());
  ApiClient api(*config);

  InstallStopSignals();

  DevicePluginServer server(options, &api);
  if (Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "tessera-device-plugin: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "tessera-device-plugin: node %s, plugin folder %s, tesserad %s, state %s\n",
               node.c_str(), plugin_dir.c_str(), tesserad_socket.c_str(), state_dir.c_str());
  while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.Stop();
  api.Stop();
  return 0;
}
