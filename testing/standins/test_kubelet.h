// TestKubelet: a STAND-IN for kubelet's side of the device-plugin API v1beta1, for tests only (no
// kubelet can run where the suite runs). What it does is what kubelet's devicemanager does, as
// far as we know it (../shared/research/kubernetes-mig-mps-cdi.md §A, scheduling.md §4):
//  - serves the Registration service on <dir>/kubelet.sock; a Register with another version than
//    v1beta1 or a name that is not an extended resource is refused; an accepted one makes it dial
//    <dir>/<endpoint>, ask GetDevicePluginOptions and keep a ListAndWatch stream open, holding the
//    latest device list per resource (a new registration of a resource replaces the old one);
//  - admits a pod as kubelet does: for each container in order (init containers first), for each
//    resource in its limits that a plugin serves, picks that many healthy free devices (asking
//    GetPreferredAllocation when the plugin offers it; devices of init containers are reused by
//    the containers after them), calls Allocate with one ContainerAllocateRequest, and merges the
//    responses of a container's resources (the first value of an env or annotation wins, mounts,
//    devices and CDI names are deduplicated by container path or name). A failed Allocate fails
//    the pod's admission with the plugin's message and frees what it had taken;
//  - calls PreStartContainer before a container starts when the plugin asked for it;
//  - restarts like kubelet: Restart() stops serving, deletes every socket in the directory but its
//    own checkpoint (kubelet's CleanupPluginDirectory), and serves a new kubelet.sock.
// It does not do topology alignment, checkpoints of its own, or the pod-resources API.
#pragma once

#include <chrono>
#include <functional>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  explicit TestKubelet(std::string plugin_dir);
  ~TestKubelet();
  TestKubelet(const TestKubelet&) = delete;
  TestKubelet& operator=(const TestKubelet&) = delete;

  Status Start();
  void Stop();
  Status Restart();

  struct PluginState {
    std::string endpoint;
    bool pre_start_required = false;
    bool preferred_allocation = false;
    std::vector<std::pair<std::string, std::string>> devices;  // ID, health of the latest list
    size_t last_message_bytes = 0;                             // wire size of that ListAndWatch
    int updates = 0;                                           // ListAndWatch messages received
    int registrations = 0;                                     // Register calls for it
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
  // Registrations refused, with the reason kubelet would log.
  std::vector<std::string> Refusals() const;

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
    std::map<std::string, std::string> envs;
    std::vector<Mount> mounts;
    std::vector<DeviceNode> devices;
    std::map<std::string, std::string> annotations;
    std::vector<std::string> cdi_devices;
    std::map<std::string, std::vector<std::string>> device_ids;  // resource -> IDs
  };
  // Admits `pod` (its JSON): every container's Allocate, in kubelet's order. The error is what
  // kubelet puts in the pod's status (UnexpectedAdmissionError) when a plugin fails.
  Result<std::vector<ContainerAllocation>> Admit(const Json& pod);
  // PreStartContainer for `container` of an admitted pod, for each of its resources whose plugin
  // asked for it.
  Status PreStart(const std::string& pod_uid, const std::string& container);
  // The pod is gone: its devices are free again.
  void RemovePod(const std::string& pod_uid);

 private:
  class RegistrationService;
  struct Endpoint;
  Status Register(const std::string& version, const std::string& endpoint,
                  const std::string& resource);
  void Watch(std::shared_ptr<Endpoint> endpoint);

  std::string dir_;
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;  // by resource
  std::map<std::string, PluginState> states_;                  // by resource, kept over restarts
  std::vector<std::string> refusals_;
  std::vector<std::thread> dialers_;  // one per accepted registration, joined by Stop()
  // Devices in use, per resource, and per pod and container (for reuse and release).
  std::map<std::string, std::set<std::string>> allocated_;
  std::map<std::string, std::map<std::string, std::map<std::string, std::vector<std::string>>>>
      pod_devices_;  // uid -> container -> resource -> IDs
};

}  // namespace tessera::k8s
