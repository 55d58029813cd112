// ClaimPreparer: NodePrepareResources and NodeUnprepareResources of the DRA plugin, apart from
// gRPC. Preparing a claim reads it from the API server, plans it (claims.h), checks the plan
// against the claims already prepared on the same GPUs (the plugin is the last line of defence
// against a GPU given twice), registers the claim with tesserad as one container (its memory cap
// on each of its GPUs, 0 bytes on the node's others; its cores as the GPU-time cap; weight and
// priority from its configuration), writes the claim's CDI spec and records all of it in the
// checkpoint before answering kubelet. Any failure undoes what was done for that claim and
// changes nothing else. Preparing a prepared claim answers what was recorded (kubelet repeats its
// calls after restarts); unpreparing releases the container (its memory comes back as its last
// processes exit) and deletes the spec, and an unknown claim is unprepared already.
//
// The claim's CDI spec (kind gpu.tessera.io/claim, file gpu.tessera.io-claim-<uid>.json): the
// claim's edits (container_edits.h) once in the spec's own containerEdits, and one device per
// allocation result, "<claim uid>-<n>", which adds TESSERA_CLAIM_DEVICE_<n>=<request>:<device>.
// A container using several requests of a claim thus gets the claim's mounts once. When the
// node's mounts name tessera-oci-hook, the claim's edits carry it as a createRuntime hook with the
// claim's container id: every runtime container that uses the claim, of whichever pod, is
// identified to tesserad by its cgroup (docs/security.md), and the claim is registered with
// identify=1.
//
// Thread-safety: one mutex; every call serialises (as upstream's plugin helper does by default).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/container_edits.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "k8s/dra/claims.h"

namespace tessera::k8s::dra {

inline constexpr char kCdiClaimKind[] = "gpu.tessera.io/claim";
// tesserad container ids of claims start with this (the device plugin's start with "k8s.").
inline constexpr char kClaimContainerPrefix[] = "dra.";

// What kubelet gets back for one allocation result.
struct PreparedDevice {
  std::string request, pool, device;
  std::optional<std::string> share_id;
  std::vector<std::string> cdi_ids;
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  ClaimRef ref;
  std::string container;  // tesserad's container id
  std::vector<ClaimGpu> gpus;
  std::optional<int> core;  // the GPU-time cap registered; nullopt: none
  uint32_t weight = 1;
  bool high_priority = false;
  bool registered = false;
  // Registered with identify=1: its spec carries the createRuntime hook (NodeMounts::oci_hook),
  // and tesserad serves the claim's socket only to processes of the containers the hook
  // identified. Kept, so a claim is registered again as its spec was written.
  bool identify = false;
  std::string mps_root;
  std::string cdi_file;
  std::vector<PreparedDevice> devices;
};

struct PreparerConfig {
  std::string node;  // also the pool's name
  std::string checkpoint_path;
  std::string cdi_dir = "/var/run/cdi";
  NodeMounts mounts;
  // Answer each device with NVIDIA's CDI name for its GPU too ("nvidia.com/gpu=<uuid>"), which
  // NVIDIA's container toolkit resolves; off on a simulated node.
  bool nvidia_cdi = true;
};

class ClaimPreparer {
 public:
  ClaimPreparer(PreparerConfig config, const TesseradClient* tesserad, ApiClient* api);

  // Reads the checkpoint; a file that does not parse is an error naming it.
  Status Load();
  // The node's mode and tesserad's devices as last seen (what the pool publishes).
  void SetNode(NodeMode mode, std::vector<NodeGpu> gpus);

  Result<std::vector<PreparedDevice>> Prepare(const ClaimRef& claim);
  Status Unprepare(const ClaimRef& claim);

  // Registers again every prepared claim tesserad lacks (a tesserad started afresh) and
  // unregisters containers named dra.* that no prepared claim owns. Lines of what it did.
  // tesserad's status is read under the preparer's lock, so that a claim prepared or unprepared
  // meanwhile is not taken for one tesserad lost or one nobody owns.
  std::vector<std::string> Resync();
  std::vector<PreparedClaim> Snapshot() const;

 private:
  Status Register(PreparedClaim* claim, const TesseradStatus& status) const;
  CdiEdits Edits(const PreparedClaim& claim) const;
  Status Save() const;

  PreparerConfig config_;
  const TesseradClient* tesserad_;
  ApiClient* api_;
  mutable std::mutex mu_;
  NodeMode mode_ = NodeMode::kCoreMem;
  std::vector<NodeGpu> gpus_;
  std::map<std::string, PreparedClaim> claims_;  // by uid
};

}  // namespace tessera::k8s::dra
