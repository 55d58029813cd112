// TestDraKubelet: a STAND-IN for kubelet's side of Dynamic Resource Allocation, for tests only (no
// kubelet can run where the suite runs). What it does is what kubelet's plugin manager
// (pkg/kubelet/pluginmanager) and DRA manager (pkg/kubelet/cm/dra) do, as far as we read them:
//  - plugin watcher: watches the registry folder (inotify, as fsnotify); a socket whose name does
//    not start with '.' is a plugin to register, with the time it was seen; a removed one is a
//    plugin to unregister; folders are watched too. A reconciler runs every second (upstream's
//    loop period): it unregisters plugins whose socket is gone or was re-created, then registers
//    new ones: dial (10 s), GetInfo (1 s), a handler by type (only "DRAPlugin"; any other type is
//    told it was not registered), an empty endpoint means the registration socket, validation of
//    the supported services (the first of the plugin's list that kubelet knows: v1.DRAPlugin or
//    v1beta1.DRAPlugin), the plugin recorded as registered before the handler registers it (so a
//    failure there is not retried while the socket stays, as upstream), one endpoint per driver
//    only once, then NotifyRegistrationStatus (5 s). A failed registration is retried with
//    exponential backoff from 500 ms.
//  - plugin manager of DRA: keeps the plugins of each driver (the newest connected one is used),
//    calls the health service the plugin lists (v1.DRAResourceHealth before v1alpha1) and keeps
//    its stream open (again 5 s after it ends), deletes all of the node's ResourceSlices at start,
//    and a driver's slices when no plugin of it has been usable for the wiping delay (30 s).
//  - DRA manager: PrepareResources(pod) finds the pod's claims (spec.resourceClaims, a template's
//    claim through status.resourceClaimStatuses, checking the claim's owner), fetches each, checks
//    it is reserved for the pod and allocated, batches the claims per driver and calls
//    NodePrepareResources with the chosen version and a 45 s timeout, failing the pod with
//    upstream's messages; a claim prepared for another pod is not prepared again.
//    CdiDevices(pod, container) is GetResources: the CDI IDs of the devices of the requests the
//    container names (all of a claim when it names no request). UnprepareResources(pod) calls
//    NodeUnprepareResources for the claims no other pod uses.
// It does not checkpoint its claim cache to disk (Restart() keeps it, as a restored checkpoint
// would), run its periodic unprepare of pods that went away, or honour skipNodeOperations.
#pragma once

#include <chrono>
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
#include "k8s/api_client.h"
#include "k8s/objects.h"

namespace tessera::k8s {

class TestDraKubelet {
 public:
  struct Options {
    std::string registry_dir;  // kubelet's plugins_registry
    std::string node;
    ApiClient* api = nullptr;  // the API server (claims; slices to wipe)
    std::chrono::milliseconds reconcile_period{1000};
    std::chrono::milliseconds wiping_delay{30000};
    std::chrono::milliseconds call_timeout{45000};
  };
  explicit TestDraKubelet(Options options);
  ~TestDraKubelet();
  TestDraKubelet(const TestDraKubelet&) = delete;
  TestDraKubelet& operator=(const TestDraKubelet&) = delete;

  Status Start();
  void Stop();
  // Stops and starts again (plugins register anew; the claim cache stays).
  Status Restart();

  struct PluginState {
    std::string driver;
    std::string socket;    // the registration socket
    std::string endpoint;  // where the DRA services are
    std::vector<std::string> supported;
    std::string service;         // the chosen DRAPlugin service
    std::string health_service;  // the chosen DRAResourceHealth service, "" when none
    int registrations = 0;
    bool connected = false;
  };
  // The newest registered plugin of `driver`.
  std::optional<PluginState> Plugin(const std::string& driver) const;
  bool WaitForPlugin(const std::string& driver, std::chrono::milliseconds timeout,
                     int registrations = 1) const;
  // Registrations refused or failed, with the reason kubelet would log.
  std::vector<std::string> Refusals() const;
  // Device health the driver's stream reported last: "pool/device" -> HEALTHY, UNHEALTHY, UNKNOWN
  // and the message.
  std::map<std::string, std::pair<std::string, std::string>> Health(
      const std::string& driver) const;
  int health_messages(const std::string& driver) const;
  // Times the node's slices were wiped (at start, and per driver gone too long).
  int wipes() const;

  // The DRA manager's calls for a pod (its JSON as the API server holds it).
  Status PrepareResources(const Json& pod);
  Result<std::vector<std::string>> CdiDevices(const Json& pod, const std::string& container) const;
  Status UnprepareResources(const Json& pod);
  // Claims prepared, "namespace/name" -> pods using them.
  std::map<std::string, std::set<std::string>> PreparedClaims() const;

 private:
  struct PluginConn;
  struct Desired {
    std::chrono::steady_clock::time_point seen;
    std::chrono::steady_clock::time_point retry_at;
    std::chrono::milliseconds backoff{0};
  };
  struct ClaimInfo {
    std::string uid, ns, name;
    std::set<std::string> drivers;
    std::set<std::string> pods;
    bool prepared = false;
    struct Device {
      std::string driver;
      std::vector<std::string> requests;
      std::string pool, device;
      std::optional<std::string> share_id;
      std::vector<std::string> cdi;
    };
    std::vector<Device> devices;
  };

  void WatchLoop();
  void ReconcileLoop();
  void Reconcile();
  Status RegisterPlugin(const std::string& socket, std::chrono::steady_clock::time_point seen);
  void Unregister(const std::string& socket);
  void HealthLoop(std::shared_ptr<PluginConn> plugin);
  void SyncWipe(const std::string& driver);  // under mu_
  void Wipe(const std::string& driver);
  std::shared_ptr<PluginConn> GetPlugin(const std::string& driver) const;  // under mu_
  Result<std::optional<std::string>> ClaimName(const Json& pod, const Json& pod_claim,
                                               bool* must_check_owner) const;

  Options options_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  bool stop_ = true;
  int inotify_ = -1;
  std::thread watcher_, reconciler_, initial_wipe_;
  std::map<std::string, Desired> desired_;                                   // socket -> when seen
  std::map<std::string, std::chrono::steady_clock::time_point> registered_;  // socket -> seen
  std::map<std::string, std::string> socket_driver_;                         // socket -> driver
  std::map<std::string, std::vector<std::shared_ptr<PluginConn>>> plugins_;  // by driver
  std::map<std::string, int> registrations_;                                 // by driver
  std::map<std::string, std::chrono::steady_clock::time_point> wipe_at_;     // by driver
  std::vector<std::string> refusals_;
  std::map<std::string, std::map<std::string, std::pair<std::string, std::string>>> health_;
  std::map<std::string, int> health_messages_;
  int wipes_ = 0;
  std::map<std::string, ClaimInfo> claims_;  // by namespace/name
};

}  // namespace tessera::k8s
