// tessera-dra-plugin: the DRA kubelet plugin of driver gpu.tessera.io on a Tessera GPU node (runs
// beside tesserad, one per node). A thin door: flags, the state folder (the shims and
// /etc/ld.so.preload that claims' containers mount, tessera-oci-hook that their runtime runs, and
// the checkpoint), then DraPluginServer until SIGTERM. docs/kubernetes.md ("DRA") says how to
// deploy it.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>

#include "core/duration.h"
#include "core/path.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/container_edits.h"
#include "k8s/door.h"
#include "k8s/dra/plugin.h"
#include "process/child_process.h"

namespace {

using namespace tessera;
using namespace tessera::k8s;

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera-dra-plugin: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-dra-plugin: the DRA kubelet plugin of driver gpu.tessera.io"};
  std::string node = EnvOr("NODE_NAME", "");
  std::string kubeconfig, context;
  std::string plugins_dir = "/var/lib/kubelet/plugins";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string tesserad_socket = EnvOr("TESSERA_SOCKET", "/run/tessera/tessera.sock");
  std::string container_sockets = "/run/tessera/containers";
  std::string state_dir = "/var/lib/tessera/dra-plugin";
  std::string shim_dir = process::ExecutableDir() + "/../lib/tessera";
  std::string cdi_dir = "/var/run/cdi";
  std::string interval_text = "1s";
  std::string default_mode_text = "core_mem";
  std::string grace_text = "10s";
  std::string nvml = EnvOr("TESSERA_REAL_NVML", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  std::string oci_hook = process::ExecutableDir() + "/tessera-oci-hook";
  std::string driver_version;
  bool sim = false, no_mig_counters = false;
  app.add_option("--node-name", node, "this node's name (default: $NODE_NAME)");
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig file (default: the pod's service account)");
  app.add_option("--context", context, "kubeconfig context (default: its current-context)");
  app.add_option("--plugins-dir", plugins_dir, "kubelet's plugins folder (the plugin's socket goes in gpu.tessera.io/)");
  app.add_option("--registry-dir", registry_dir, "kubelet's plugin-registration folder");
  app.add_option("--tesserad-socket", tesserad_socket, "tesserad's socket (default: $TESSERA_SOCKET or /run/tessera/tessera.sock)");
  app.add_option("--container-sockets", container_sockets, "tesserad's --container-sockets folder");
  app.add_option("--state-dir", state_dir, "host folder for the shims claims mount and the checkpoint");
  app.add_option("--shim-dir", shim_dir, "folder with Tessera's libcuda.so.1 and libnvidia-ml.so.1");
  app.add_option("--cdi-dir", cdi_dir, "where the claims' CDI specs go");
  app.add_option("--oci-hook", oci_hook,
                 "tessera-oci-hook, copied to --state-dir for the runtime to run in every claim's "
                 "container (default: beside this program; \"\" for none: claims unidentified)");
  app.add_flag("--sim", sim, "a simulated node: hand claims simgpu and $TESSERA_SIM_STATE/$TESSERA_SIM_GPUS");
  app.add_option("--default-mode", default_mode_text,
                 "the mode of a node with no tessera.io/gpu.schedule or ack.node.gpu.schedule label "
                 "(core_mem, mem, share, exclusive, mig, mps; default core_mem)");
  app.add_option("--reconcile-interval", interval_text, "how often to reconcile (100ms to 1m)");
  app.add_option("--unhealthy-after", grace_text,
                 "tesserad unreachable this long marks the devices unhealthy (1s to 10m)");
  app.add_option("--nvml", nvml,
                 "NVML library a mig node's MIG devices are read from (default: $TESSERA_REAL_NVML "
                 "or /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; with --sim, simgpu's)");
  app.add_flag("--no-mig-counters", no_mig_counters,
               "publish MIG instances as plain devices, without shared counters (for clusters "
               "without the DRAPartitionableDevices feature gate)");
  app.add_option("--driver-version", driver_version,
                 "NVIDIA's driver version, published as attribute driverVersion (e.g. 550.54.15)");
  CLI11_PARSE(app, argc, argv);

  if (node.empty()) return Fail("--node-name is not set and neither is NODE_NAME; expected this node's name");
  auto default_mode = ParseNodeMode(default_mode_text, "--default-mode");
  if (!default_mode.ok()) return Fail(default_mode.error());
  auto interval = ParseDuration(interval_text, "--reconcile-interval", std::chrono::milliseconds(100),
                                std::chrono::minutes(1));
  if (!interval.ok()) return Fail(interval.error());
  auto grace = ParseDuration(grace_text, "--unhealthy-after", std::chrono::seconds(1), std::chrono::minutes(10));
  if (!grace.ok()) return Fail(grace.error());
  for (auto [flag, value] : {std::pair<const char*, std::string*>{"--plugins-dir", &plugins_dir},
                             {"--registry-dir", &registry_dir},
                             {"--container-sockets", &container_sockets},
                             {"--state-dir", &state_dir},
                             {"--cdi-dir", &cdi_dir}}) {
    auto p = ParseDirectoryPath(*value, flag);
    if (!p.ok()) return Fail(p.error());
  }
  if (auto p = ParseSocketPath(tesserad_socket, "--tesserad-socket"); !p.ok()) return Fail(p.error());
  if (!driver_version.empty() && dra::SemverOf(driver_version).empty()) {
    return Fail("--driver-version=\"" + driver_version +
                "\": expected a version of two or three numbers, such as 550.54.15");
  }
  if (sim) nvml = process::ExecutableDir() + "/../lib/libtessera-simgpu.so";
  if (nvml.empty() || nvml[0] != '/') {
    return Fail("--nvml=\"" + nvml + "\": expected an absolute path of libnvidia-ml.so.1");
  }
  auto mounts = PrepareNodeMounts(
      state_dir, shim_dir, container_sockets,
      sim ? process::ExecutableDir() + "/../lib/libtessera-simgpu.so" : std::string());
  if (!mounts.ok()) return Fail(mounts.error());
  if (!oci_hook.empty()) {
    // Every claim's spec carries the hook, which the runtime runs on the host: from the state
    // folder, a host path; it tells tesserad which runtime container uses the claim.
    mounts->oci_hook = state_dir + "/tessera-oci-hook";
    mounts->tesserad_socket = tesserad_socket;
    if (Status s = CopyFile(oci_hook, mounts->oci_hook); !s.ok()) {
      return Fail("--oci-hook=\"" + oci_hook + "\": " + s.message() +
                  "; expected tessera-oci-hook (build/bin), or \"\" for none");
    }
  }

  dra::DraPluginOptions options;
  options.node = node;
  options.plugins_dir = plugins_dir;
  options.registry_dir = registry_dir;
  options.tesserad_socket = tesserad_socket;
  options.reconcile_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*interval);
  options.unhealthy_after = std::chrono::duration_cast<std::chrono::seconds>(*grace);
  options.default_mode = *default_mode;
  options.nvml_library = nvml;
  options.pool.mig_counters = !no_mig_counters;
  options.pool.driver_version = driver_version;
  options.preparer.checkpoint_path = state_dir + "/checkpoint.json";
  options.preparer.cdi_dir = cdi_dir;
  options.preparer.mounts = *mounts;
  options.preparer.nvidia_cdi = !sim;

  auto config = ClientConfigFor(kubeconfig, context, "tessera-dra-plugin/" + node);
  if (!config.ok()) return Fail(config.error());
  ApiClient api(*config);

  InstallStopSignals();

  dra::DraPluginServer server(options, &api);
  if (Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "tessera-dra-plugin: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "tessera-dra-plugin: node %s, endpoint %s, tesserad %s, state %s\n",
               node.c_str(), server.endpoint().c_str(), tesserad_socket.c_str(), state_dir.c_str());
  while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server.Stop();
  api.Stop();
  return 0;
}
