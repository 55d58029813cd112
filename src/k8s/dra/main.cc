// tessera-dra-plugin: the DRA kubelet plugin of driver gpu.tessera.io on a Tessera GPU node (runs
// beside tesserad, one per node). A thin door: flags, the state folder (the shims and
// /etc/ld.so.preload that claims' containers mount, tessera-oci-hook that their runtime runs, and
// the checkpoint), then DraPluginServer until SIGTERM. docs/kubernetes.md ("DRA") says how to
// deploy it.

#include <CLI/CLI.hpp>
#include <string>

#include "k8s/deviceplugin/container_edits.h"
#include "k8s/door.h"
#include "k8s/dra/plugin.h"
#include "process/child_process.h"

namespace {

using namespace tessera;
using namespace tessera::k8s;

constexpr const char* kProgram = "tessera-dra-plugin";
int Fail(const std::string& message) { return FailStart(kProgram, message); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-dra-plugin: the DRA kubelet plugin of driver gpu.tessera.io"};
  NodeDoorFlags door_flags;
  AddNodeDoorFlags(app, &door_flags);
  std::string plugins_dir = "/var/lib/kubelet/plugins";
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string state_dir = "/var/lib/tessera/dra-plugin";
  std::string cdi_dir = "/var/run/cdi";
  std::string grace_text = "10s";
  std::string oci_hook = process::ExecutableDir() + "/tessera-oci-hook";
  std::string driver_version;
  bool no_mig_counters = false;
  app.add_option("--plugins-dir", plugins_dir,
                 "kubelet's plugins folder (the plugin's socket goes in gpu.tessera.io/)");
  app.add_option("--registry-dir", registry_dir, "kubelet's plugin-registration folder");
  app.add_option("--state-dir", state_dir,
                 "host folder for the shims claims mount and the checkpoint");
  app.add_option("--cdi-dir", cdi_dir, "where the claims' CDI specs go");
  app.add_option("--oci-hook", oci_hook,
                 "tessera-oci-hook, copied to --state-dir for the runtime to run in every claim's "
                 "container (default: beside this program; \"\" for none: claims unidentified)");
  app.add_flag("--sim", door_flags.sim,
               "a simulated node: hand claims simgpu and $TESSERA_SIM_STATE/$TESSERA_SIM_GPUS");
  app.add_option("--unhealthy-after", grace_text,
                 "tesserad unreachable this long marks the devices unhealthy (1s to 10m)");
  app.add_flag("--no-mig-counters", no_mig_counters,
               "publish MIG instances as plain devices, without shared counters (for clusters "
               "without the DRAPartitionableDevices feature gate)");
  app.add_option("--driver-version", driver_version,
                 "NVIDIA's driver version, published as attribute driverVersion (e.g. 550.54.15)");
  CLI11_PARSE(app, argc, argv);

  auto door = CheckNodeDoor(door_flags, grace_text,
                            {{"--plugins-dir", plugins_dir},
                             {"--registry-dir", registry_dir},
                             {"--state-dir", state_dir},
                             {"--cdi-dir", cdi_dir}});
  if (!door.ok()) return Fail(door.error());
  if (!driver_version.empty() && dra::SemverOf(driver_version).empty()) {
    return Fail("--driver-version=\"" + driver_version +
                "\": expected a version of two or three numbers, such as 550.54.15");
  }
  const std::string& tesserad_socket = door_flags.tesserad_socket;
  auto mounts = PrepareNodeMounts(state_dir, door_flags.shim_dir, door_flags.container_sockets,
                                  door->sim_library);
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
  options.node = door->node;
  options.plugins_dir = plugins_dir;
  options.registry_dir = registry_dir;
  options.tesserad_socket = tesserad_socket;
  options.reconcile_interval = door->reconcile_interval;
  options.unhealthy_after = door->unhealthy_after;
  options.default_mode = door->default_mode;
  options.nvml_library = door->nvml_library;
  options.pool.mig_counters = !no_mig_counters;
  options.pool.driver_version = driver_version;
  options.preparer.checkpoint_path = state_dir + "/checkpoint.json";
  options.preparer.cdi_dir = cdi_dir;
  options.preparer.mounts = *mounts;
  options.preparer.nvidia_cdi = !door_flags.sim;

  return ServeNodeDoor<dra::DraPluginServer>(
      kProgram, door_flags, *door, options, [&](const dra::DraPluginServer& server) {
        return "node " + door->node + ", endpoint " + server.endpoint() + ", tesserad " +
               tesserad_socket + ", state " + state_dir;
      });
}
