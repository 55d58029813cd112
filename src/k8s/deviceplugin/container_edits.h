// What a container isolated by tesserad needs from its node, whichever door set it up (the device
// plugin's Allocate or the DRA plugin's NodePrepareResources): the environment the shim reads, the
// shims, /etc/ld.so.preload and its own socket folder mounted, and on an mps node the MPS client
// side. One function builds it for both doors, so they cannot drift apart; a hook the runtime must
// run for every such container belongs in IsolatedContainerEdits too. Also the tesserad container
// ids both doors make and the atomic file write their checkpoints use. No I/O but that write.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"
#include "k8s/deviceplugin/cdi.h"
#include "k8s/deviceplugin/tesserad_client.h"

namespace tessera::k8s {

// Paths inside a container (fixed; documented in docs/kubernetes.md).
inline constexpr char kContainerShimDir[] = "/usr/local/tessera/lib";
inline constexpr char kContainerSimDir[] = "/usr/local/tessera/sim";
// A simulated node: where a container sees the node's simulated GPUs (simgpu's state file).
inline constexpr char kContainerSimState[] = "/usr/local/tessera/sim/state";
inline constexpr char kContainerSocketDir[] = "/run/tessera";
inline constexpr char kContainerPreload[] = "/etc/ld.so.preload";
// mps nodes: where a container sees its GPU's MPS pipe folder, and the shared memory MPS uses.
inline constexpr char kContainerMpsPipeDir[] = "/run/tessera-mps";
inline constexpr char kContainerShm[] = "/dev/shm";

// The node's side of those mounts (host paths) and, on a simulated node (tests), simgpu.
struct NodeMounts {
  std::string container_socket_dir;  // tesserad's --container-sockets
  std::string shim_dir;              // holds libcuda.so.1 and libnvidia-ml.so.1
  std::string preload_file;          // lists the shims; mounted as /etc/ld.so.preload
  // A simulated node (tests): simgpu's library on the host, the file holding the node's
  // simulated GPUs (simgpu's state, TESSERA_SIM_STATE resolved; a container has its own /dev/shm,
  // so the file itself is mounted, at kContainerSimState) and the rest of the simulation's
  // environment (TESSERA_SIM_GPUS), handed to every container; "" on a real node.
  std::string sim_library;
  std::string sim_state;
  std::vector<std::pair<std::string, std::string>> sim_env;
  // The OCI createRuntime hook every registered container's edits carry (tessera-oci-hook, a
  // host path, run with --socket `tesserad_socket`), so tesserad learns which runtime container it
  // is (IDENTIFY); "" for none (then nothing is registered for identification).
  std::string oci_hook;
  std::string tesserad_socket;
};

// A container as tesserad knows it.
struct IsolatedContainer {
  std::string id;                  // tesserad's container id
  std::vector<std::string> uuids;  // its GPUs (MIG- UUIDs for MIG devices)
  std::vector<Bytes> limits;       // its memory cap on each of them
  std::optional<Percent> core;     // its GPU-time cap; nullopt: none
  uint32_t weight = 1;
  bool high_priority = false;
  std::string mps_root;   // tesserad's MPS folder on an mps node; "" elsewhere
  bool identify = false;  // the runtime identifies it (the OCI hook of NodeMounts.oci_hook)
};

// Fills the node's state folder with what pods mount, and says where it is: the shims copied from
// `shim_source` into <state_dir>/lib (each through a file renamed over the old, so a process that
// maps the old one keeps it whole), the preload list <state_dir>/ld.so.preload and, when
// `sim_library_source` is not empty (a simulated node), simgpu under <state_dir>/sim, the file of
// the node's simulated GPUs (TESSERA_SIM_STATE resolved) and its TESSERA_SIM_GPUS. Errors name
// the file.
Result<NodeMounts> PrepareNodeMounts(const std::string& state_dir, const std::string& shim_source,
                                     const std::string& container_sockets,
                                     const std::string& sim_library_source);

// On a simulated node: OK when its simulated GPUs' state file exists; an error naming it
// otherwise (nothing a container could use). OK on a real node.
Status SimStateReachable(const NodeMounts& node);

// The environment and mounts of `container`; `registered` false (share and exclusive nodes) gives
// only the simulated node's environment.
CdiEdits IsolatedContainerEdits(const NodeMounts& node, const IsolatedContainer& container,
                                bool registered = true);

// Registers `container` with tesserad: its caps on `indices` (tesserad's device index of each of
// its GPUs, in order), 0 bytes on the others of the node's `devices`, whatever a process in it
// declares visible; its core cap, weight and priority. On an mps node (`mps`) tesserad must also
// run its first GPU's MPS control daemon, whose pipe folder the container mounts (seen here at the
// same path as on the host); the answer is then tesserad's MPS folder ("" elsewhere), and a
// registration without it is taken back. Errors say what is missing.
Result<std::string> RegisterIsolated(const TesseradClient& tesserad,
                                     const IsolatedContainer& container,
                                     const std::vector<int>& indices, size_t devices, bool mps,
                                     const std::string& node);

// A tesserad container id of at most 63 characters of [A-Za-z0-9_.-]: `prefix` (with its dot),
// `first`.`second` made safe and cut to fit, then "-" and 6 hex digits of a hash of `unique` (two
// ids differ when `unique` does, whatever the cut).
std::string MakeContainerId(std::string_view prefix, std::string_view first,
                            std::string_view second, std::string_view unique);

// Writes `text` to `path` through a temporary file in the same folder, synced and renamed over
// it, so a reader sees the old or the new file whole. Errors name the file.
// Copies `from` to `to` (mode 0755) through a temporary file renamed over it, so a process that
// maps or runs the old one keeps it whole.
Status CopyFile(const std::string& from, const std::string& to);

Status WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode = 0600);

}  // namespace tessera::k8s
