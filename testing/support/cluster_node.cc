// ClusterNode: a simulated GPU node's tesserad, device plugin and stand-in kubelet
// (testing/support/cluster_node.h).
#include "testing/support/cluster_node.h"

#include <signal.h>

#include <fstream>
#include <iterator>

namespace tessera::k8s::testing {

using process::BuildDir;
using process::ChildProcess;

::tessera::Status ClusterNode::StartKubeletAndPlugin(const std::string& name,
                                                     const std::string& api_url,
                                                     const std::vector<std::string>& plugin_flags) {
  const std::string dir = sim->Scratch("device-plugins");
  kubelet = std::make_unique<TestKubelet>(dir);
  if (auto s = kubelet->Start(); !s.ok()) {
    return ::tessera::Status::Error(name + ": the stand-in kubelet did not start: " + s.message());
  }
  const std::string kubeconfig = sim->Scratch("kube") + "/config";
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                               "contexts: [{name: test, context: {cluster: c, user: u}}]\n"
                               "clusters: [{name: c, cluster: {server: \""
                            << api_url << "\"}}]\nusers: [{name: u, user: {token: t}}]\n";
  std::vector<std::string> argv = {BuildDir() + "/bin/tessera-device-plugin",
                                   "--node-name",
                                   name,
                                   "--kubeconfig",
                                   kubeconfig,
                                   "--device-plugin-dir",
                                   dir,
                                   "--tesserad-socket",
                                   sim->socket(),
                                   "--container-sockets",
                                   sim->container_sockets(),
                                   "--state-dir",
                                   sim->Scratch("state"),
                                   "--sim",
                                   "--reconcile-interval",
                                   "200ms"};
  argv.insert(argv.end(), plugin_flags.begin(), plugin_flags.end());
  if (!plugin_log.empty()) {
    // The shell only redirects and is replaced by the plugin (its pid is the plugin's).
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", plugin_log});
  }
  plugin = std::make_unique<ChildProcess>(argv, sim->SimEnv());
  if (!plugin->started()) {
    return ::tessera::Status::Error(name + ": tessera-device-plugin did not start");
  }
  return ::tessera::Status::Ok();
}

void ClusterNode::KeepLogs() {
  tesserad_log_ = sim->Scratch("logs") + "/tesserad.log";
  plugin_log = sim->Scratch("logs") + "/device-plugin.log";
  sim->LogTo(tesserad_log_);
}

std::string ClusterNode::Logs() const {
  std::string out;
  for (const std::string& path : {tesserad_log_, plugin_log}) {
    if (path.empty()) continue;
    std::ifstream in(path);
    out += "---- " + path + "\n" +
           std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

void ClusterNode::Stop() {
  if (plugin) {
    plugin->Kill(SIGTERM);
    plugin->Wait(std::chrono::seconds(20));
  }
  kubelet.reset();
  sim.reset();
}

std::unique_ptr<ChildProcess> ClusterNode::StartTenant(
    const std::string& pod, const TestKubelet::ContainerAllocation& a) const {
  std::vector<std::string> cmd = {BuildDir() + "/tests/k8s_container_run", "--scratch",
                                  sim->Scratch("ctr-" + pod)};
  for (const auto& m : a.mounts) {
    cmd.insert(cmd.end(),
               {"--mount", m.host_path + ":" + m.container_path + (m.read_only ? ":ro" : "")});
  }
  for (const auto& [k, v] : a.envs) cmd.insert(cmd.end(), {"--env", k + "=" + v});
  cmd.insert(cmd.end(), {"--", BuildDir() + "/tests/shim_tenant", "alloc-until-oom", "64"});
  return std::make_unique<ChildProcess>(
      cmd, std::vector<std::string>{"ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
}

Result<ChildProcess*> AdmitAndStart(TestApiServer& api, ClusterNode& node,
                                    std::vector<std::unique_ptr<ChildProcess>>& containers,
                                    const std::string& name, const Json& created,
                                    TestKubelet::ContainerAllocation* allocation) {
  auto pod = api.GetPod("default", name);
  if (!pod) return Result<ChildProcess*>::Error(name + ": no such pod at the API server");
  auto admitted = node.kubelet->Admit(*pod);
  if (!admitted.ok()) return Result<ChildProcess*>::Error(name + ": " + admitted.error());
  if (admitted->empty()) return Result<ChildProcess*>::Error(name + ": admitted no container");
  const TestKubelet::ContainerAllocation& a = (*admitted)[0];
  if (auto s = node.kubelet->PreStart(created["metadata"]["uid"], a.name); !s.ok()) {
    return Result<ChildProcess*>::Error(name + ": PreStartContainer: " + s.message());
  }
  if (allocation != nullptr) *allocation = a;
  containers.push_back(node.StartTenant(name, a));
  api.SetPodPhase("default", name, "Running");
  return containers.back().get();
}

}  // namespace tessera::k8s::testing
