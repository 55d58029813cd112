// The options of tesserad's parts (compute arbiter, socket server, reconciler) from its validated
// settings (config/daemon_settings.h): a field-for-field translation, nothing checked or decided
// here. The parts' callbacks (NVML listers, identities) are wired by tesserad's main.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "config/daemon_settings.h"
#include "daemon/compute.h"
#include "daemon/reconciler.h"
#include "daemon/server.h"

namespace tessera::daemon {

// Every GPU's arbiter settings at start, and the gates' loss timeout.
ComputeOptions ComputeOptionsFor(const config::DaemonConfig& node);

// The socket server's bounds, container sockets and administrators (`daemon_user`, root and the
// admin group).
ServerOptions ServerOptionsFor(const config::DaemonSettings& settings, uid_t daemon_user);

// Applies the config file's per-GPU settings (`gpus`), then --gpu-policy (a flag wins over the
// file), to the node's GPUs. A GPU the file names that the node lacks is a note; one --gpu-policy
// names is an error of the command line (usage_error).
struct GpuSetup {
  Status status;
  bool usage_error = false;
  std::vector<std::string> notes;
};
GpuSetup ConfigureGpus(const config::DaemonSettings& settings, ComputeService* compute);

// The reconciler's interval and actions; its callbacks are left unset.
ReconcilerOptions ReconcilerOptionsFor(const config::DaemonConfig& node);

}  // namespace tessera::daemon
