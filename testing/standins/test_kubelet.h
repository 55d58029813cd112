// TestKubelet: a STAND-IN for kubelet's side of the device-plugin API v1beta1, for tests only (no
// kubelet can run where the suite runs). It copies what kubelet's device manager does
// (kubernetes/kubernetes pkg/kubelet/cm/devicemanager: manager.go, pod_devices.go,
// plugin/v1beta1/server.go, handler.go, client.go), odd corners included:
//  - Registration on <dir>/kubelet.sock is synchronous: Register checks the version (v1beta1) and
//    the resource name (v1helper.IsExtendedResourceName: not in the kubernetes.io/ namespace, not
//    prefixed "requests.", a qualified name once "requests." is put in front), then, inside the
//    call, dials <dir>/<endpoint> (blocking, 10 s) and asks GetDevicePluginOptions; if either
//    fails the Register call fails with that error, and nothing is kept. Only then does it answer,
//    and start ListAndWatch (a new registration of a resource replaces the old one). A plugin whose
//    gRPC server is not serving, or that answers the options call only after Register returned,
//    is never registered.
//  - Admission: every container in order (init containers first), and for each container each
//    resource of its limits that a plugin serves in Go map order, i.e. an order that differs from
//    call to call (here: drawn from a seeded generator, seed() to replay). Per resource it takes
//    devices left by earlier init containers first (devicesToReuse), then asks
//    GetPreferredAllocation, when the plugin offers it, with `available` = the free healthy devices
//    plus the ones already taken for this container and `must_include` = those taken ones, for the
//    whole size; a failed preference call fails the pod's admission, as in kubelet; then it takes
//    preferred devices that are free, then any free ones. Allocate is called once per container
//    per resource. A plain init container's devices become reusable by the containers after it; a
//    native sidecar's (an init container with restartPolicy Always) and an app container's stay
//    their own. Responses of a container's resources are merged in map order again: the first env
//    or annotation value wins, mounts and device nodes by container path, CDI devices by name.
//  - A failed Allocate fails the pod's admission (UnexpectedAdmissionError) and frees what it took.
//  - PreStartContainer before a container starts, per resource in map order, when the plugin asked.
//  - Restart(): stops serving, deletes every socket in the directory but its own checkpoint
//    (CleanupPluginDirectory), and serves a new kubelet.sock.
// For tests it can refuse the next registrations (FailRegistrations) as kubelet does when its
// dial-back fails, and it records the GetPreferredAllocation calls and the Allocate order.
// It does not do topology alignment, checkpoints of its own or the pod-resources API.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"

namespace grpc {
class Server;
}

namespace tessera::k8s {

class TestKubelet {
 public:
  // `seed` orders the resources of a container as Go's map iteration would (randomly); 0: a seed
  // from the clock (seed() tells which, to replay a failure).
  explicit TestKubelet(std::string plugin_dir, uint64_t seed = 0);
  ~TestKubelet();
  TestKubelet(const TestKubelet&) = delete;
  TestKubelet& operator=(const TestKubelet&) = delete;

  Status Start();
  void Stop();
  Status Restart();
  uint64_t seed() const { return seed_; }

  struct PluginState {
    std::string endpoint;
    bool pre_start_required = false;
    bool preferred_allocation = false;
    std::vector<std::pair<std::string, std::string>> devices;  // ID, health of the latest list
    size_t last_message_bytes = 0;                             // wire size of that ListAndWatch
    int updates = 0;                                           // ListAndWatch messages received
    int registrations = 0;                                     // Register calls accepted for it
    bool connected = false;                                    // its ListAndWatch stream is open
  };
  // Waits until `resource` has registered at least `registrations` times (over every restart) and
  // sent at least one device list since.
  bool WaitForResource(const std::string& resource, std::chrono::milliseconds timeout,
                       int registrations = 1);
  // Waits until `resource`'s stream has sent a list for which `accept(state)` is true.
  bool WaitForState(const std::string& resource, std::chrono::milliseconds timeout,
                    const std::function<bool(const PluginState&)>& accept);
  std::optional<PluginState> Resource(const std::string& resource) const;
  std::vector<std::string> Resources() const;
  // Registrations refused, with the error the plugin's Register call got.
  std::vector<std::string> Refusals() const;
  // The next `n` registrations fail as kubelet's do when its dial-back or the options call fails.
  void FailRegistrations(int n);

  struct Mount {
    std::string container_path, host_path;
    bool read_only = false;
  };
  struct DeviceNode {
    std::string container_path, host_path, permissions;
  };
  // What kubelet hands the runtime for one container: every resource's response merged.
  struct ContainerAllocation {
    std::string name;
    bool init = false;
    bool restartable = false;
    std::map<std::string, std::string> envs;
    std::vector<Mount> mounts;
    std::vector<DeviceNode> devices;
    std::map<std::string, std::string> annotations;
    std::vector<std::string> cdi_devices;
    std::map<std::string, std::vector<std::string>> device_ids;  // resource -> IDs, sorted
    std::vector<std::string> allocate_order;  // resources, as Allocate was called
  };
  // Admits `pod` (its JSON): every container's Allocate, in kubelet's order. The error is what
  // kubelet puts in the pod's status (UnexpectedAdmissionError) when a plugin fails.
  Result<std::vector<ContainerAllocation>> Admit(const Json& pod);
  // PreStartContainer for `container` of an admitted pod, for each of its resources whose plugin
  // asked for it.
  Status PreStart(const std::string& pod_uid, const std::string& container);
  // The pod is gone: its devices are free again.
  void RemovePod(const std::string& pod_uid);

  // A GetPreferredAllocation call as kubelet made it, and the plugin's answer.
  struct PreferredCall {
    std::string resource;
    std::vector<std::string> available, must_include, answer;
    int size = 0;
  };
  std::vector<PreferredCall> PreferredCalls() const;

 private:
  class RegistrationService;
  struct Endpoint;
  Status Register(const std::string& version, const std::string& endpoint,
                  const std::string& resource);
  void StartWatch(std::shared_ptr<Endpoint> endpoint);
  // `items` in an order drawn from the generator (Go's map iteration).
  template <typename T>
  std::vector<T> MapOrder(std::vector<T> items);

  std::string dir_;
  uint64_t seed_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::mt19937_64 rng_;                                         // under mu_
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // by resource
  std::vector<std::shared_ptr<Endpoint>>
      retired_;  // replaced endpoints, their watchers joined by Stop()
  std::map<std::string, PluginState> states_;  // by resource, kept over restarts
  std::vector<std::string> refusals_;
  int fail_registrations_ = 0;
  std::vector<PreferredCall> preferred_calls_;
  // Devices in use, per resource, and per pod and container (for reuse and release).
  std::map<std::string, std::set<std::string>> allocated_;
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<std::string>>>>
      pod_devices_;  // uid -> container -> resource -> IDs
};

}  // namespace tessera::k8s
