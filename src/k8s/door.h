// What the mains of Tessera's node doors (tessera-device-plugin, tessera-dra-plugin) share: an
// environment default, stopping on SIGTERM or SIGINT, and the API server's configuration from a
// kubeconfig or the pod's service account. No policy.
#pragma once

#include <string>

#include "core/result.h"
#include "k8s/api_client.h"

namespace tessera::k8s {

// The variable's value, or `fallback` when it is unset or empty.
std::string EnvOr(const char* name, const std::string& fallback);

// SIGTERM and SIGINT make StopRequested() true; SIGPIPE is ignored (a peer that goes away is an
// error of that write, not the end of the program).
void InstallStopSignals();
bool StopRequested();

// The kubeconfig's `context` (its current-context when empty), or, when `kubeconfig` is empty,
// the pod's service account; `user_agent` names the program.
Result<ClientConfig> ClientConfigFor(const std::string& kubeconfig, const std::string& context,
                                     const std::string& user_agent);

}  // namespace tessera::k8s
