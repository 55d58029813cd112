// MigNodeStandin: the node side of MIG re-cuts for replays through tessera-extender, on the
// replay's clock: what tessera-device-plugin (src/k8s/deviceplugin, HandleMigRecut and the
// inventory it publishes) and tesserad (MIGCUT, src/daemon/mig_recut.cc) do on `mig` nodes, with
// the GPUs' layouts held here instead of in NVML. It is not the plugin: a stand-in of its side of
// the tessera.io/mig-recut / tessera.io/mig-recut-status exchange (docs/kubernetes.md), for test
// and benchmark tooling.
//
// Each node reconciles every `reconcile_s` (the plugin's --reconcile-interval), at the instants
// k x reconcile_s, in this order, as the plugin's reconcile does: first it publishes the
// inventory if it changed, then it answers the node's latest unanswered request once. The answer
// is `refused` when the node is not labelled tessera.io/mig.recut=true, when it serves no MIG
// device of the GPU, when it cut that GPU less than `recut_interval_s` ago (the plugin's
// --mig-recut-interval), when a pod bound to the node holds one of the GPU's MIG devices (the
// plugin's allocation records; here the bound pods' tessera.io/assignment, which is what kubelet
// set up), and, as tesserad refuses MIGCUT, when a pod holds a device of a later GPU (tesserad's
// device indices of every later device would move; `later_devices_block`); `failed` when the
// request or its layout does not parse (the layout placed by mig::Place, as MIGCUT places it).
// Otherwise the GPU is cut: its old devices leave the inventory at once (tesserad restarts) and
// the new ones, with new UUIDs, are published at the first reconcile `cut_s` or more later.
// Writes go through the API server (k8s::ApiClient), as the plugin's do.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"
#include "mig/planner.h"
#include "placement/cluster.h"
#include "testing/standins/test_apiserver.h"

namespace tessera::extender::testing {

struct MigNodeOptions {
  double reconcile_s = 1;         // --reconcile-interval of the plugin
  double cut_s = 1;               // from MIGCUT to the new devices listed (tesserad's restart)
  double recut_interval_s = 300;  // --mig-recut-interval of the plugin
  bool later_devices_block = true;
};

class MigNodeStandin {
 public:
  MigNodeStandin(k8s::TestApiServer& api, MigNodeOptions options);
  ~MigNodeStandin();

  // The v1.Node of `cluster`'s mig node `node` (its GPUs as first cut; the label
  // tessera.io/mig.recut=true when the node may be cut again, mig_relayout), created on the API
  // server. Fails for a node that is not mig, or a GPU not cut at all: the extender sees a GPU
  // only through its MIG devices, so a `dynamic` node needs a first cut.
  Status AddNode(const placement::Cluster& cluster, int node);

  // A MIG device now listed: its node (index in the cluster), GPU and start slot.
  struct Device {
    int node = -1;
    int gpu = -1;
    int start = -1;
  };
  std::optional<Device> Find(const std::string& uuid) const;
  // The layout GPU `gpu` of `node` has now.
  const mig::Layout& LayoutOf(int node, int gpu) const;

  // The first reconcile after `now` at which a node has something to do (a request unanswered,
  // devices to publish), or infinity.
  double NextEvent(double now) const;
  // Runs the reconciles at instants in (last run, now]; true when a Node was written.
  Result<bool> Advance(double now);

  struct Counts {
    int64_t applied = 0;
    int64_t refused_interval = 0;
    int64_t refused_pod = 0;           // a pod on the GPU
    int64_t refused_later_device = 0;  // a pod on a later GPU (tesserad)
    int64_t refused_other = 0;
    int64_t failed = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  struct Gpu {
    std::string uuid;
    mig::Layout layout;
    std::vector<std::string> devices;  // per instance of layout, its MIG UUID; empty: none served
    double cut_at = -1;                // the plugin's last cut of it (-1: never)
  };
  struct Node {
    std::string name;
    const mig::GpuModel* model = nullptr;
    int64_t gpu_mib = 0;
    std::vector<Gpu> gpus;
    double publish_at = -1;  // new devices to publish at the first reconcile from then (-1: none)
    std::string answered;    // the request text last answered
  };

  std::string Inventory(const Node& n) const;
  Result<bool> Reconcile(Node& n, double at);
  Result<bool> Answer(Node& n, const k8s::Json& object, double at);
  bool Pending(const Node& n) const;

  k8s::TestApiServer& api_;
  MigNodeOptions options_;
  std::unique_ptr<k8s::ApiClient> client_;
  std::vector<Node> nodes_;              // by cluster node index (non-mig: empty name)
  std::map<std::string, Device> where_;  // MIG UUID -> device
  double last_ = -1;                     // the last reconcile instant run
  uint64_t generation_ = 0;              // for new MIG UUIDs
  Counts counts_;
};

}  // namespace tessera::extender::testing
