// DraPluginServer: build/bin/tessera-dra-plugin's machinery, the DRA kubelet plugin of driver
// gpu.tessera.io. It serves, on <plugins dir>/gpu.tessera.io/dra.sock:
//   k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin and ...dra.v1beta1.DRAPlugin (NodePrepareResources,
//   NodeUnprepareResources; preparer.h), and v1.DRAResourceHealth and v1alpha1.DRAResourceHealth
//   (NodeWatchResources: every device's health as tesserad sees it, sent when it changes and
//   every 20 s with a 60 s timeout, so kubelet notices a plugin that stopped talking),
// and registers through kubelet's plugin watcher: pluginregistration.Registration on
// <registry dir>/gpu.tessera.io-reg.sock answers GetInfo with type DRAPlugin, the driver's name,
// the endpoint and the services above as "supported versions" (v1.DRAPlugin first: kubelet uses
// the first it knows). A socket removed under it is served again.
// It publishes the node's pool (slices.h) through SlicePublisher and follows the node: the mode
// from its label (a value it does not know is logged once and changes nothing), the GPUs from
// tesserad (and on a mig node each MIG device's profile from NVML), so a change of either gives
// new slices. Stop removes both sockets (kubelet then forgets the plugin and, after its 30 s
// grace, deletes the node's slices of the driver); the slices are not deleted by the plugin,
// so a restart does not take the devices away from the scheduler.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/mig_devices.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "k8s/dra/preparer.h"
#include "k8s/dra/publisher.h"
#include "k8s/dra/slices.h"

namespace grpc {
class Server;
}

namespace tessera::k8s::dra {

// What kubelet's plugin watcher is told the plugin serves, in this order.
inline constexpr const char* kSupportedServices[] = {
    "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"};

struct DraPluginOptions {
  std::string node;
  std::string plugins_dir = "/var/lib/kubelet/plugins";            // the endpoint's parent
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";  // kubelet's plugin watcher
  std::string tesserad_socket = "/run/tessera/tessera.sock";
  PreparerConfig preparer;
  PoolOptions pool;
  std::chrono::milliseconds reconcile_interval{1000};
  std::chrono::seconds unhealthy_after{10};    // tesserad unreachable this long: devices unhealthy
  NodeMode default_mode = NodeMode::kCoreMem;  // a node without a mode label (--default-mode)
  // The NVML library a mig node's MIG devices are read from (opened only on a mig node).
  std::string nvml_library = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
};

class DraPluginServer {
 public:
  DraPluginServer(DraPluginOptions options, ApiClient* api);
  ~DraPluginServer();
  DraPluginServer(const DraPluginServer&) = delete;
  DraPluginServer& operator=(const DraPluginServer&) = delete;

  // Loads the checkpoint, reads the node, serves, registers and publishes. Errors: a checkpoint
  // that does not parse, a node the API server does not know, a socket that cannot be served.
  Status Start();
  void Stop();

  std::string endpoint() const;             // <plugins dir>/gpu.tessera.io/dra.sock
  std::string registration_socket() const;  // <registry dir>/gpu.tessera.io-reg.sock
  // kubelet's last NotifyRegistrationStatus: registered, or the error it gave (for tests, logs).
  std::optional<bool> registered() const;
  SlicePublisher& publisher() { return *publisher_; }
  ClaimPreparer& preparer() { return *preparer_; }

 private:
  class Services;

  Status Serve();
  void Reconcile();
  void Loop();
  void ApplyNode(const Json& node);

  DraPluginOptions options_;
  ApiClient* api_;
  TesseradClient tesserad_;
  std::unique_ptr<ClaimPreparer> preparer_;
  std::unique_ptr<SlicePublisher> publisher_;
  std::unique_ptr<Reflector> node_watch_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> server_;        // dra.sock
  std::unique_ptr<grpc::Server> registration_;  // reg.sock
  MigDeviceLister mig_lister_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::optional<NodeMode> mode_;
  std::string bad_label_;
  std::vector<NodeGpu> gpus_;
  std::optional<std::chrono::steady_clock::time_point> tesserad_seen_;
  std::string tesserad_error_;
  std::optional<bool> registered_;
  uint64_t health_version_ = 1;

  std::atomic<bool> stop_{false};
  std::thread loop_;
};

}  // namespace tessera::k8s::dra
