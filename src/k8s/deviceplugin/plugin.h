// DevicePluginServer: build/bin/tessera-device-plugin's machinery. For each extended resource the
// node's mode serves (node_devices.h) it runs a kubelet device-plugin v1beta1 gRPC server on its
// own socket in the plugin directory and registers it with kubelet; ListAndWatch streams the
// resource's devices (healthy while tesserad answers; unhealthy after 10 s without it), Allocate,
// GetPreferredAllocation and PreStartContainer go to the Allocator. It watches:
//  - kubelet: kubelet.sock re-created (a kubelet restart deletes every plugin socket) or one of
//    its own sockets gone makes it serve anew and register again; running containers are not
//    touched (they live in tesserad and the checkpoint, not in the gRPC servers);
//  - the API server: the node (labels: the mode, and each GPU's own mode,
//    tessera.io/gpu.schedule.<index>; a value it does not know is reported on the Node and changes
//    nothing) and the pods bound to it (Reflectors);
// and reconciles once a second (and at every pod change): containers of pods deleted, finished or
// failed are unregistered from tesserad (confirmed with a GET first), containers tesserad lost are
// registered again, pods fully allocated get tessera.io/phase=allocated, the node's
// tessera.io/gpu-inventory follows tesserad's GPUs, and a container chosen among pods with the
// same request is checked against its processes' cgroups. On a mig node the reconciler also reads
// each MIG device's profile and place from NVML (mig_devices.h) whenever tesserad's devices
// change; the profiles present are the resources served. It also answers the extender's MIG
// re-cut requests (tessera.io/mig-recut): never while a pod uses the GPU, else through tesserad's
// MIGCUT (daemon/mig_recut.h), after which tesserad restarts with the new MIG devices and the
// reconciler serves and publishes them like any change of tesserad's devices.
//
// A GPU's own mode takes effect when no recorded container uses that GPU: while one does, the GPU
// keeps (and is advertised in) the mode it has, said once in the log and as a Node event
// (TesseraModeChangeHeld), and changes when the last of its pods is gone. A node with no GPU of
// its own mode, before and after, changes its mode at once, as it always has.
#pragma once

#include <atomic>
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
#include "k8s/deviceplugin/allocator.h"
#include "k8s/deviceplugin/mig_devices.h"
#include "k8s/deviceplugin/node_devices.h"
#include "k8s/deviceplugin/tesserad_client.h"

namespace tessera::k8s {

struct PluginOptions {
  std::string node;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string tesserad_socket = "/run/tessera/tessera.sock";
  ResourceNames names = ResourceNames::kTessera;
  AllocatorConfig allocator;
  std::chrono::milliseconds reconcile_interval{1000};
  std::chrono::seconds unhealthy_after{10};  // tesserad unreachable this long: GPUs unhealthy
  std::string proc_root = "/proc";
  NodeMode default_mode = NodeMode::kCoreMem;  // a node without a mode label (--default-mode)
  // The NVML library a mig node's MIG devices are read from (opened only on a mig node).
  std::string nvml_library = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
  // The least time between two re-cuts of one GPU this plugin applies (--mig-recut-interval).
  std::chrono::milliseconds mig_recut_interval{300000};
};

// The socket file name of `resource` in the plugin directory ("tessera-gpu-mem.sock").
std::string SocketNameOf(const std::string& resource);

class DevicePluginServer {
 public:
  DevicePluginServer(PluginOptions options, ApiClient* api);
  ~DevicePluginServer();
  DevicePluginServer(const DevicePluginServer&) = delete;
  DevicePluginServer& operator=(const DevicePluginServer&) = delete;

  // Loads the checkpoint, starts the watches, serves and registers. Errors: a checkpoint that
  // does not parse, a node the API server does not know.
  Status Start();
  void Stop();

  // For tests and logs.
  std::vector<std::string> ServedResources() const;
  std::optional<NodeMode> mode() const;
  int registrations() const { return registrations_.load(); }

 private:
  class NodePods;
  class ApiEvents;
  class ResourceServer;

  void Reconcile();
  void ReconcileLoop();
  void KubeletLoop();
  // Serves exactly `resources` (stopping the others); `restart` serves anew those already served.
  void Serve(const std::vector<std::string>& resources, bool restart);
  Status RegisterWithKubelet(const std::string& resource);
  void ApplyNode(const Json& node);
  // `gpus` as tesserad lists them, each given its mode as applied (ResolveModes). `mps`: the
  // GPUs tesserad runs MPS on, when it answered (an empty set too when it runs no MPS at all).
  void SetGpus(std::vector<NodeGpu> gpus, std::optional<std::set<int>> mps = std::nullopt);
  // Has tesserad run MPS on exactly the GPUs served, or to be served, in mode mps (MPSGPUS);
  // true when it changed something. A refusal is said once, as a held mode change.
  bool SyncMps(const TesseradStatus& status);
  // Under mu_: each GPU's mode moves to its wanted one unless `tenants` use it, and into or out of
  // mps only as tesserad's MPS (`mps`) follows; lines of what changed or is held.
  std::vector<NodeGpu> ResolveModes(std::vector<NodeGpu> gpus,
                                    const Allocator::TenantsByGpu& tenants,
                                    const std::optional<std::set<int>>& mps,
                                    std::vector<std::string>* changed,
                                    std::vector<std::string>* held);
  // A mig node: each of `gpus` that is a MIG device gets its profile and place (read from NVML
  // when the devices changed since the last call).
  void AddMigParts(std::vector<NodeGpu>* gpus);
  // A mig node: answers the extender's request tessera.io/mig-recut once (the reconciler's
  // thread): refused while a pod uses the GPU, else cut through tesserad (MIGCUT); the answer in
  // tessera.io/mig-recut-status, a refusal also as a Node event.
  void HandleMigRecut();
  std::vector<Device> DevicesFor(const std::string& resource, uint64_t* version) const;

  PluginOptions options_;
  ApiClient* api_;
  TesseradClient tesserad_;
  std::unique_ptr<NodePods> pods_;
  std::unique_ptr<ApiEvents> events_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Reflector> node_watch_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::optional<NodeMode> mode_;
  std::string bad_label_;      // the last label value refused (reported once)
  std::string bad_gpu_label_;  // the last refusal of the GPUs' own mode labels (reported once)
  std::map<int, NodeMode> wanted_modes_;   // GPUs' own modes, as labelled
  std::map<int, NodeMode> applied_modes_;  // each GPU's mode as served (all GPUs once resolved)
  std::map<int, NodeMode> held_;           // GPUs whose change waits for their tenants (said once)
  bool own_modes_ = false;                 // some GPU was last served in a mode of its own
  // The GPUs whose mode, their tenants allowing, is mps: where tesserad must run MPS.
  std::set<int> mps_wanted_;
  std::string mps_refused_;  // tesserad's last refusal of MPSGPUS (said once)
  // The reconciler's: the set last asked for and when, so a refused set is asked again every few
  // seconds, not every pass.
  std::set<int> mps_asked_;
  std::chrono::steady_clock::time_point mps_asked_at_{};
  std::vector<NodeGpu> gpus_;
  uint64_t devices_version_ = 1;
  std::optional<std::chrono::steady_clock::time_point> tesserad_seen_;
  Json node_;
  std::map<std::string, std::unique_ptr<ResourceServer>> servers_;  // under serve_mu_
  mutable std::mutex serve_mu_;
  std::set<std::string> unregistered_;  // resources whose Register failed; retried
  std::set<std::string> verified_;      // records whose cgroup check is done
  // The reconciler's (one thread): the MIG devices as NVML listed them for the devices `mig_key_`.
  MigDeviceLister mig_lister_;
  std::string mig_key_;
  std::map<std::string, InventoryMig> mig_parts_;
  // The reconciler's: the request value last answered, and when each GPU (UUID) was last cut.
  std::string recut_answered_;
  std::map<std::string, std::chrono::steady_clock::time_point> recut_at_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> reconcile_now_{false};
  std::atomic<int> registrations_{0};
  std::thread reconciler_;
  std::thread kubelet_watcher_;
};

}  // namespace tessera::k8s
