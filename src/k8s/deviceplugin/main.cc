// tessera-device-plugin: the kubelet device plugin of a Tessera GPU node (docs/contracts.md; runs
// beside tesserad, one per node). A thin door: flags, the state folder (the shims and
// /etc/ld.so.preload that pods mount, and the checkpoint), then DevicePluginServer until SIGTERM.
// docs/kubernetes.md says how to deploy it.

#include <CLI/CLI.hpp>
#include <string>

#include "core/duration.h"
#include "k8s/deviceplugin/plugin.h"
#include "k8s/door.h"
#include "process/child_process.h"

namespace {

using namespace tessera;
using namespace tessera::k8s;

constexpr const char* kProgram = "tessera-device-plugin";
int Fail(const std::string& message) { return FailStart(kProgram, message); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-device-plugin: kubelet device plugin for Tessera GPU nodes"};
  NodeDoorFlags door_flags;
  AddNodeDoorFlags(app, &door_flags);
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string state_dir = "/var/lib/tessera/device-plugin";
  std::string names_text = "tessera";
  std::string cdi_dir = "/var/run/cdi";
  std::string grace_text = "10s";
  std::string recut_text = "5m";
  std::string proc_root = "/proc";
  std::string oci_hook = process::ExecutableDir() + "/tessera-oci-hook";
  bool cdi = false;
  app.add_option("--device-plugin-dir", plugin_dir, "kubelet's device-plugin folder");
  app.add_option("--state-dir", state_dir,
                 "host folder for the shims pods mount and the checkpoint");
  app.add_option("--resource-names", names_text, "tessera, aliyun (ACK's names) or both");
  app.add_flag("--cdi", cdi, "answer with CDI devices and write their specs");
  app.add_option("--cdi-dir", cdi_dir, "where CDI specs go");
  app.add_option("--oci-hook", oci_hook,
                 "with --cdi: tessera-oci-hook, copied to --state-dir for the runtime to run "
                 "(default: beside this program)");
  app.add_flag("--sim", door_flags.sim,
               "a simulated node: hand pods simgpu, the state file $TESSERA_SIM_STATE names and "
               "$TESSERA_SIM_GPUS");
  app.add_option("--proc-root", proc_root, "the host's /proc (to read processes' cgroups)");
  app.add_option("--unhealthy-after", grace_text,
                 "tesserad unreachable this long marks the GPUs unhealthy (1s to 10m)");
  app.add_option("--mig-recut-interval", recut_text,
                 "a mig node labelled tessera.io/mig.recut=true cuts one GPU again at most once "
                 "this long, whatever the extender asks (1s to 7 days; default 5m)");
  CLI11_PARSE(app, argc, argv);

  auto door = CheckNodeDoor(door_flags, grace_text,
                            {{"--device-plugin-dir", plugin_dir},
                             {"--state-dir", state_dir},
                             {"--cdi-dir", cdi_dir},
                             {"--proc-root", proc_root}});
  if (!door.ok()) return Fail(door.error());
  auto recut = ParseDuration(recut_text, "--mig-recut-interval", std::chrono::seconds(1),
                             std::chrono::hours(24 * 7));
  if (!recut.ok()) return Fail(recut.error());
  auto names = ParseResourceNames(names_text);
  if (!names.ok()) return Fail(names.error());

  PluginOptions options;
  options.node = door->node;
  options.plugin_dir = plugin_dir;
  options.tesserad_socket = door_flags.tesserad_socket;
  options.names = *names;
  options.default_mode = door->default_mode;
  options.reconcile_interval = door->reconcile_interval;
  options.proc_root = proc_root;
  options.unhealthy_after = door->unhealthy_after;
  options.nvml_library = door->nvml_library;
  options.mig_recut_interval = std::chrono::duration_cast<std::chrono::milliseconds>(*recut);
  AllocatorConfig& a = options.allocator;
  a.node = door->node;
  a.checkpoint_path = state_dir + "/checkpoint.json";
  a.container_socket_dir = door_flags.container_sockets;
  a.cdi = cdi;
  a.cdi_dir = cdi_dir;
  // The state folder: the shims and the preload list pods mount (host paths kubelet can bind).
  auto mounts = PrepareNodeMounts(state_dir, door_flags.shim_dir, door_flags.container_sockets,
                                  door->sim_library);
  if (!mounts.ok()) return Fail(mounts.error());
  a.shim_dir = mounts->shim_dir;
  a.preload_file = mounts->preload_file;
  a.sim_library = mounts->sim_library;
  a.sim_state = mounts->sim_state;
  a.sim_env = mounts->sim_env;
  a.tesserad_socket = door_flags.tesserad_socket;
  if (cdi) {
    // The runtime runs the hook on the host: from the state folder, a host path.
    a.oci_hook = state_dir + "/tessera-oci-hook";
    if (Status s = CopyFile(oci_hook, a.oci_hook); !s.ok()) {
      return Fail("--oci-hook=\"" + oci_hook + "\": " + s.message() +
                  "; expected tessera-oci-hook (build/bin)");
    }
  }

  return ServeNodeDoor<DevicePluginServer>(
      kProgram, door_flags, *door, options, [&](const DevicePluginServer&) {
        return "node " + door->node + ", plugin folder " + plugin_dir + ", tesserad " +
               door_flags.tesserad_socket + ", state " + state_dir;
      });
}
