// DraNode: tesserad, tessera-dra-plugin and the stand-in kubelet of one test node (see the header).
#include "testing/support/dra_node.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "testing/support/cgroup_container.h"

namespace tessera::k8s::testing {

using namespace std::chrono_literals;
using process::BuildDir;
using process::ChildProcess;

std::string TestProgram(const std::string& name) { return BuildDir() + "/tests/" + name; }

DraNode::DraNode(std::string name, const std::string& gpus, std::string api_url,
                 std::chrono::milliseconds wiping_delay, std::vector<std::string> daemon_args)
    : name_(std::move(name)),
      sim_(gpus,
           [&] {
             std::vector<std::string> args = {"--policy", "3"};
             args.insert(args.end(), daemon_args.begin(), daemon_args.end());
             return args;
           }()),
      api_url_(std::move(api_url)),
      wiping_delay_(wiping_delay),
      cgroup_root_(::tessera::testing::WritableCgroupRoot()) {}

DraNode::~DraNode() {
  containers_.clear();
  StopPlugin(SIGTERM);
  kubelet_.reset();
  if (client_) client_->Stop();
  // The containers' groups (what a container left running in its group killed first), then their
  // pods' (each empty once its containers are gone).
  for (const std::string& group : cgroups_) {
    for (int round = 0; round < 50; ++round) {
      std::ifstream procs(group + "/cgroup.procs");
      pid_t pid = 0;
      bool any = false;
      while (procs >> pid) any = kill(pid, SIGKILL) == 0 || any;
      if (!any) break;
      std::this_thread::sleep_for(20ms);
    }
    rmdir(group.c_str());
    rmdir(group.substr(0, group.rfind('/')).c_str());
  }
}

bool DraNode::Start() {
  if (!sim_.Start()) return false;
  ClientConfig c;
  c.server = api_url_;
  client_ = std::make_unique<ApiClient>(c);
  kubeconfig_ = sim_.Scratch("kube") + "/config";
  std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                                "contexts: [{name: test, context: {cluster: c, user: u}}]\n"
                                "clusters: [{name: c, cluster: {server: \""
                             << api_url_ << "\"}}]\nusers: [{name: u, user: {token: t}}]\n";
  registry_ = sim_.Scratch("plugins_registry");
  plugins_ = sim_.Scratch("plugins");
  state_ = sim_.Scratch("state");
  if (cdi_.empty()) cdi_ = sim_.Scratch("cdi");
  TestDraKubelet::Options o;
  o.registry_dir = registry_;
  o.node = name_;
  o.api = client_.get();
  o.wiping_delay = wiping_delay_;
  kubelet_ = std::make_unique<TestDraKubelet>(o);
  return kubelet_->Start().ok();
}

void DraNode::StartPlugin() {
  std::vector<std::string> argv = {BuildDir() + "/bin/tessera-dra-plugin",
                                   "--node-name",
                                   name_,
                                   "--kubeconfig",
                                   kubeconfig_,
                                   "--plugins-dir",
                                   plugins_,
                                   "--registry-dir",
                                   registry_,
                                   "--tesserad-socket",
                                   sim_.socket(),
                                   "--container-sockets",
                                   sim_.container_sockets(),
                                   "--state-dir",
                                   state_,
                                   "--cdi-dir",
                                   cdi_,
                                   "--sim",
                                   "--reconcile-interval",
                                   "200ms",
                                   "--unhealthy-after",
                                   "1s"};
  if (cgroup_root_.empty()) {
    // No cgroup to put a container in, so nothing would tell its processes from the test's:
    // claims go unidentified, as on a node whose runtime runs no hooks.
    argv.insert(argv.end(), {"--oci-hook", ""});
  }
  plugin_ = std::make_unique<ChildProcess>(argv, sim_.SimEnv());
  EXPECT_TRUE(plugin_->started());
}

void DraNode::StopPlugin(int signal) {
  if (!plugin_) return;
  plugin_->Kill(signal);
  const std::optional<int> status = plugin_->Wait(20s);
  if (signal == SIGTERM) {
    EXPECT_EQ(status, 0) << "tessera-dra-plugin of " << name_ << " did not stop cleanly";
  }
  plugin_.reset();
}

bool DraNode::WaitRegistered(int registrations) {
  const bool ok = kubelet_->WaitForPlugin("gpu.tessera.io", 30s, registrations);
  EXPECT_TRUE(ok) << name_ << ": refusals: " << ::testing::PrintToString(kubelet_->Refusals());
  return ok;
}

ChildProcess* DraNode::Run(const Json& pod, const std::string& container,
                           std::vector<std::string> argv) {
  auto cdi = kubelet_->CdiDevices(pod, container);
  EXPECT_TRUE(cdi.ok()) << cdi.error();
  std::vector<std::string> cmd = {TestProgram("k8s_container_run"), "--scratch",
                                  sim_.Scratch("ctr" + std::to_string(containers_.size())),
                                  "--cdi-dir", cdi_};
  for (const std::string& d : cdi.ok() ? *cdi : std::vector<std::string>{})
    cmd.insert(cmd.end(), {"--cdi", d});
  if (!cgroup_root_.empty()) {
    // A group of its own below its pod's, as a runtime puts a container (kubelet's pod<uid>).
    const std::string group = cgroup_root_ + "/tessera-test-" + sim_.name() + "-pod" +
                              pod["metadata"].value("uid", "") + "/" + container + "-" +
                              std::to_string(containers_.size());
    cmd.insert(cmd.end(), {"--cgroup", group});
    cgroups_.push_back(group);
  }
  cmd.push_back("--");
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  // The image's own environment: nothing of the test's Tessera settings.
  containers_.push_back(std::make_unique<ChildProcess>(
      cmd, std::vector<std::string>{"ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"}));
  return containers_.back().get();
}

}  // namespace tessera::k8s::testing
