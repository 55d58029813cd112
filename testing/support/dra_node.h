// DraNode: one GPU node of the DRA tests (tests only): a real tesserad on simulated GPUs
// (SimNode), the real tessera-dra-plugin program, and the stand-in kubelet (TestDraKubelet) of
// that node, all on scratch folders of their own, against one API server; and containers started
// as the stand-in runtime starts them, with the CDI devices kubelet hands a pod's container, each
// in a cgroup of its own (the claim's createRuntime hook identifies it to tesserad by it). Where
// no cgroup hierarchy is writable, the plugin runs without the hook (--oci-hook "").
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "k8s/api_client.h"
#include "process/child_process.h"
#include "testing/standins/test_dra_kubelet.h"
#include "testing/support/test_support.h"

namespace tessera::k8s::testing {

class DraNode {
 public:
  // `gpus`: TESSERA_SIM_GPUS; `api_url`: the API server. `wiping_delay`: kubelet's grace before it
  // deletes the slices of a driver gone. `daemon_args` are added to tesserad's.
  DraNode(std::string name, const std::string& gpus, std::string api_url,
          std::chrono::milliseconds wiping_delay = std::chrono::seconds(30),
          std::vector<std::string> daemon_args = {});
  ~DraNode();
  DraNode(const DraNode&) = delete;
  DraNode& operator=(const DraNode&) = delete;

  // Starts tesserad and the stand-in kubelet.
  bool Start();
  // Where the plugin writes its CDI specs (before StartPlugin; a scratch folder unless set): a
  // real container runtime reads them only from its own folders (podman: /var/run/cdi).
  void SetCdiDir(std::string dir) { cdi_ = std::move(dir); }
  void StartPlugin();
  // SIGTERM must end it with status 0 (reported as a test failure otherwise).
  void StopPlugin(int signal);
  // Waits for the plugin's `registrations`-th registration (a test failure otherwise).
  bool WaitRegistered(int registrations = 1);

  // Starts `argv` in container `container` of `pod` with the CDI devices kubelet hands it.
  process::ChildProcess* Run(const Json& pod, const std::string& container,
                             std::vector<std::string> argv);

  const std::string& name() const { return name_; }
  SimNode& sim() { return sim_; }
  TestDraKubelet& kubelet() { return *kubelet_; }
  ApiClient& client() { return *client_; }
  const std::string& registry() const { return registry_; }
  const std::string& plugins() const { return plugins_; }
  const std::string& cdi() const { return cdi_; }
  // The plugin's state folder (its copy of tessera-oci-hook is there).
  const std::string& state() const { return state_; }

 private:
  std::string name_;
  SimNode sim_;
  std::string api_url_;
  std::chrono::milliseconds wiping_delay_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<TestDraKubelet> kubelet_;
  std::unique_ptr<process::ChildProcess> plugin_;
  std::vector<std::unique_ptr<process::ChildProcess>> containers_;
  std::string kubeconfig_, registry_, plugins_, state_, cdi_;
  std::string cgroup_root_;           // "" where none is writable (then no hook)
  std::vector<std::string> cgroups_;  // the containers' groups, removed at the end
};

// A built program of build/tests.
std::string TestProgram(const std::string& name);

}  // namespace tessera::k8s::testing
