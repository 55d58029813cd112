// What the mains of Tessera's Kubernetes doors (tessera-device-plugin, tessera-dra-plugin,
// tessera-extender) share: the node doors' common flags and their checks, stopping on SIGTERM or
// SIGINT, the API server's configuration from a kubeconfig or the pod's service account, and the
// node doors' start-up from the API client to the stop. No policy; for those programs' main.cc
// only.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "k8s/annotations.h"
#include "k8s/api_client.h"

namespace CLI {
class App;
}

namespace tessera::k8s {

// The variable's value, or `fallback` when it is unset or empty.
std::string EnvOr(const char* name, const std::string& fallback);

// SIGTERM and SIGINT make StopRequested() true; SIGPIPE is ignored (a peer that goes away is an
// error of that write, not the end of the program).
void InstallStopSignals();
bool StopRequested();
// Returns once StopRequested() (checked every 100 ms).
void WaitForStop();

// The kubeconfig's `context` (its current-context when empty), or, when `kubeconfig` is empty,
// the pod's service account; `user_agent` names the program.
Result<ClientConfig> ClientConfigFor(const std::string& kubeconfig, const std::string& context,
                                     const std::string& user_agent);

// The flags both node doors (the device plugin and the DRA plugin) take, as given; the defaults
// read NODE_NAME, TESSERA_SOCKET and TESSERA_REAL_NVML (docs/contracts.md) and the program's own
// folder.
struct NodeDoorFlags {
  NodeDoorFlags();
  std::string node, kubeconfig, context, tesserad_socket, container_sockets, shim_dir, nvml;
  std::string reconcile_interval = "1s";
  std::string default_mode = "core_mem";
  bool sim = false;
};

// Registers them on `app` (--node-name, --kubeconfig, --context, --tesserad-socket,
// --container-sockets, --shim-dir, --default-mode, --reconcile-interval, --nvml).
void AddNodeDoorFlags(CLI::App& app, NodeDoorFlags* flags);

// The node doors' shared settings, checked.
struct NodeDoor {
  std::string node;
  NodeMode default_mode{};  // the mode of a node with no mode label
  std::chrono::milliseconds reconcile_interval{0};
  std::chrono::seconds unhealthy_after{0};
  // NVML a mig node's MIG devices are read from: --nvml, or simgpu's with --sim.
  std::string nvml_library;
  // simgpu beside the program with --sim, for the pods' mounts; empty otherwise.
  std::string sim_library;
};

// Checks `flags`, `unhealthy_after` (--unhealthy-after's text) and the program's own folder flags
// (`directories`: the flag and its value; --container-sockets is checked with them). The first
// problem is the error, naming the flag, the value and what is allowed.
Result<NodeDoor> CheckNodeDoor(const NodeDoorFlags& flags, const std::string& unhealthy_after,
                               const std::vector<std::pair<const char*, std::string>>& directories);

// Writes "`program`: `line`" to stderr.
void SayLine(const char* program, const std::string& line);
// Says `message` (SayLine) and returns 2, the exit status of a start-up refused.
int FailStart(const char* program, const std::string& message);

// The rest of a node door's start-up, the same for both: the API server's client (user agent
// "`program`/node"), the stop signals, then Server(options, &api) started, `started(server)` said,
// and served until SIGTERM or SIGINT. Returns the exit status: 2 when the API server's
// configuration is refused, 1 when the server does not start (why is said), 0 after a stop.
template <typename Server, typename Options, typename Started>
int ServeNodeDoor(const char* program, const NodeDoorFlags& flags, const NodeDoor& door,
                  const Options& options, Started started) {
  auto config =
      ClientConfigFor(flags.kubeconfig, flags.context, std::string(program) + "/" + door.node);
  if (!config.ok()) return FailStart(program, config.error());
  ApiClient api(*config);

  InstallStopSignals();

  Server server(options, &api);
  if (Status s = server.Start(); !s.ok()) {
    SayLine(program, s.message());
    return 1;
  }
  SayLine(program, started(server));
  WaitForStop();
  server.Stop();
  api.Stop();
  return 0;
}

}  // namespace tessera::k8s
