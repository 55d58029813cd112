// ClusterNode: one GPU node of a simulated Kubernetes cluster (the cluster test and the demo's
// cluster act; nothing here ships): a real tesserad on its own simgpu state (SimNode), the real
// tessera-device-plugin program (build/bin) talking to the API server, and the STAND-IN kubelet's
// device manager (testing/standins/test_kubelet.h) it registers with; containers are started by the
// STAND-IN runtime (build/tests/k8s_container_run) with the mounts and environment the plugin's
// Allocate returned, each running build/tests/shim_tenant through the real shim. Errors come back
// as Status/Result (no gtest): the callers decide what a failure means.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"
#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"
#include "testing/standins/test_kubelet.h"
#include "testing/support/sim_node.h"

namespace tessera::k8s::testing {

struct ClusterNode {
  std::unique_ptr<SimNode> sim;
  std::unique_ptr<TestKubelet> kubelet;
  std::unique_ptr<process::ChildProcess> plugin;
  // Where the plugin's stderr goes (appended); empty: inherited.
  std::string plugin_log;

  // Sends tesserad's and the plugin's stderr to files in the node's scratch folder (once `sim`
  // exists, before either starts). Logs(): what they have written, each under a heading.
  void KeepLogs();
  std::string Logs() const;

  // Starts the kubelet and the plugin of node `name` (its tesserad runs) against `api_url`, with
  // the API server's token "t"; `plugin_flags` are added to the plugin's.
  ::tessera::Status StartKubeletAndPlugin(const std::string& name, const std::string& api_url,
                                          const std::vector<std::string>& plugin_flags);
  // The plugin (SIGTERM), the kubelet and tesserad, in that order.
  void Stop();
  // The container of allocation `a` of pod `pod`, started by the stand-in runtime with the
  // allocation's mounts and environment: a tenant that allocates 64 MiB at a time until refused,
  // reports `allocated=<bytes>` and `failure=<CUresult>`, then holds what it got until its stdin
  // closes.
  std::unique_ptr<process::ChildProcess> StartTenant(
      const std::string& pod, const TestKubelet::ContainerAllocation& a) const;

 private:
  std::string tesserad_log_;  // set by KeepLogs()
};

// kubelet on `node` admits pod `name` of namespace default (Allocate per container), calls
// PreStartContainer for its first container, and the runtime starts that container's tenant, which
// joins `containers`; the pod's phase becomes Running. `created`: the pod as the API server
// returned it at creation (its uid). `allocation`, when given, receives what the plugin's Allocate
// returned for that container.
Result<process::ChildProcess*> AdmitAndStart(
    TestApiServer& api, ClusterNode& node,
    std::vector<std::unique_ptr<process::ChildProcess>>& containers, const std::string& name,
    const Json& created, TestKubelet::ContainerAllocation* allocation = nullptr);

// Stops what a cluster started, in that order: the containers (their stdin closed), the extender,
// each node's plugin, kubelet and tesserad, the API server.
template <typename Extender, typename Nodes>
void StopCluster(std::vector<std::unique_ptr<process::ChildProcess>>& containers,
                 std::unique_ptr<Extender>& extender, Nodes& nodes, TestApiServer& api) {
  for (auto& p : containers) {
    p->CloseStdin();
    p->Wait(std::chrono::seconds(10));
  }
  containers.clear();
  extender.reset();
  for (auto& n : nodes) n.Stop();
  api.Stop();
}

}  // namespace tessera::k8s::testing
