// ClusterState's records (cluster_state.h): what the extender keeps of each Node and Pod it
// watches (NodeRec, PodRec, read from their JSON by ReadNodeRec and ReadPodRec) and of each
// decision on the books (Hold: observed from the API server, reserved at a filter, or binding).
// Internal to the extender's cluster_*.cc files; no placement decisions here, no I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "core/result.h"
#include "k8s/annotations.h"
#include "k8s/extender/commit_log.h"
#include "k8s/pod_demand.h"
#include "mig/profiles.h"
#include "placement/cluster.h"

namespace tessera::extender {

namespace pl = tessera::placement;
using k8s::Json;

constexpr int64_t kMiB = int64_t{1} << 20;
inline int64_t CeilMib(int64_t bytes) { return (bytes + kMiB - 1) / kMiB; }

// What the extender keeps of a Node: the placement inputs and the commit's condition.
struct NodeRec {
  std::string name;
  std::string resource_version;
  CommitLog log;              // kCommitLogAnnotation
  bool log_readable = true;   // false: the annotation is there but unreadable
  uint64_t verified_seq = 0;  // see NodeCommitView
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  k8s::PlacementPolicy policy = k8s::PlacementPolicy::kTessera;
  bool mig_recut = false;  // label tessera.io/mig.recut=true: its idle MIG GPUs may be cut again
  bool has_inventory = false;
  k8s::NodeMode mode = k8s::NodeMode::kCoreMem;
  std::vector<k8s::InventoryGpu> gpus;       // healthy, in index order: placement GPU i
  std::vector<k8s::InventoryGpu> unhealthy;  // out of placement; their holders keep them
  std::string problem;  // why no GPU pod can go here (bad inventory or label); empty when fine
  // A mig node: its GPUs (placement GPU i is mig_gpus[i]) and their healthy MIG devices, by start
  // slot (an unhealthy instance is out of placement, its slices unused).
  struct MigInstance {
    std::string uuid;
    std::string profile;
    int start = 0;
    uint64_t memory_bytes = 0;
  };
  struct MigGpu {
    std::string uuid;
    const mig::GpuModel* model = nullptr;
    std::vector<MigInstance> instances;
    mig::Layout Layout() const {
      mig::Layout l{model, {}};
      for (const MigInstance& i : instances)
        l.instances.push_back({*mig::FindProfile(*model, i.profile, ""), i.start});
      return l;
    }
  };
  std::vector<MigGpu> mig_gpus;
  // The GPU and the instance of MIG device `uuid` (healthy ones), or {-1, nullptr}.
  std::pair<int, const MigInstance*> MigDevice(std::string_view uuid) const {
    for (size_t g = 0; g < mig_gpus.size(); ++g) {
      for (const MigInstance& i : mig_gpus[g].instances) {
        if (i.uuid == uuid) return {static_cast<int>(g), &i};
      }
    }
    return {-1, nullptr};
  }

  bool SamePlacement(const NodeRec& o) const {
    return cpu_milli == o.cpu_milli && memory_mib == o.memory_mib && policy == o.policy &&
           mig_recut == o.mig_recut && has_inventory == o.has_inventory && mode == o.mode &&
           gpus == o.gpus && unhealthy == o.unhealthy && problem == o.problem;
  }
  int GpuIndex(std::string_view uuid) const {
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i].uuid == uuid) return static_cast<int>(i);
    }
    return -1;
  }
  bool KnowsGpu(std::string_view uuid) const {
    if (GpuIndex(uuid) >= 0) return true;
    for (const auto& g : unhealthy) {
      if (g.uuid == uuid) return true;
    }
    return false;
  }
};

// One GPU of a container's hold, as the assignment annotation states it.
struct GpuPart {
  std::string uuid;
  int core_percent = 0;
  int64_t mem_bytes = 0;
};
struct ContainerPart {
  std::string name;
  std::vector<GpuPart> gpus;
};

enum class HoldKind { kObserved, kReserved, kBinding };

std::string_view HoldKindName(HoldKind k, bool bound);

struct Hold {
  HoldKind kind = HoldKind::kObserved;
  std::string pod;  // ns/name
  std::string node;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<ContainerPart> containers;
  uint64_t seq = 0;
  bool bound = false;  // observed on a bound pod (else assumed)
  Nanos deadline{0};
  // When the pod was first held, in seconds on the state's clock: what it is placed with on the
  // Cluster (its start, for the policy's age preference).
  double started_s = 0;
  // What was placed on the cluster of build `epoch` (nothing when the node is unknown there).
  uint64_t epoch = 0;
  std::vector<std::pair<pl::Request, pl::Assignment>> applied;
  std::string conflict;  // why some of it could not be placed; empty when all was

  bool SameShares(const Hold& o) const {
    if (node != o.node || cpu_milli != o.cpu_milli || memory_mib != o.memory_mib ||
        containers.size() != o.containers.size()) {
      return false;
    }
    for (size_t i = 0; i < containers.size(); ++i) {
      const auto& a = containers[i].gpus;
      const auto& b = o.containers[i].gpus;
      if (a.size() != b.size()) return false;
      for (size_t j = 0; j < a.size(); ++j) {
        if (a[j].uuid != b[j].uuid || a[j].core_percent != b[j].core_percent ||
            a[j].mem_bytes != b[j].mem_bytes) {
          return false;
        }
      }
    }
    return true;
  }
};

// What the extender keeps of a Pod.
struct PodRec {
  std::string uid;
  std::string key;  // ns/name
  std::string resource_version;
  std::string node_name;
  std::string scheduler_name;
  bool terminal = false;
  bool deleting = false;
  k8s::PodDemand demand;
  int64_t priority = 0;  // spec.priority (admission sets it from the PriorityClass; 0 without)
  std::optional<k8s::Assignment> assignment;
  std::string assignment_error;
  bool assumed = false;  // tessera.io/phase=assumed
  bool waiting = false;  // pending, and kube-scheduler found no node for it
  std::string created;   // metadata.creationTimestamp
};

// A resourceVersion as a number, or nullopt (they are opaque strings; every server we know counts).
std::optional<uint64_t> VersionNumber(const std::string& rv);

// True when `incoming` is older than `held` (a watch event that lags a direct read).
bool Older(const std::string& incoming, const std::string& held);

Result<PodRec> ReadPodRec(const Json& pod);

Result<NodeRec> ReadNodeRec(const Json& node);

}  // namespace tessera::extender
