// The Kubernetes names Tessera owns (docs/contracts.md) and the wire formats of its annotations
// (docs/kubernetes.md, "Wire formats"): the node's GPU inventory, the pod's assignment and phase,
// and the annotations users set. Parsers are strict: a missing required key, a value of the wrong
// type or out of range is an error that names the annotation, the key path, the value and what is
// allowed; unknown keys are ignored so a newer writer can add some. Writers produce exactly what
// the parsers accept. Pure functions over strings: no I/O, no API-server types beyond the names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::k8s {

// Extended resources (docs/contracts.md). Units: GiB, percent of one GPU, GPUs.
inline constexpr char kResourceGpuMem[] = "tessera.io/gpu-mem";
inline constexpr char kResourceGpuCore[] = "tessera.io/gpu-core";
inline constexpr char kResourceGpuCount[] = "tessera.io/gpu-count";
// MIG instances on `mig` nodes: one resource per profile, one device per instance,
// "tessera.io/mig-<profile>" with '+' written '.' (Kubernetes resource names allow no '+'; NVIDIA's
// device plugin spells them the same way): tessera.io/mig-3g.40gb, tessera.io/mig-1g.10gb.me.
inline constexpr char kResourceMigPrefix[] = "tessera.io/mig-";
// ACK's names, served as aliases when the node asks (`--resource-names aliyun|both`).
inline constexpr char kAckResourceGpuMem[] = "aliyun.com/gpu-mem";
inline constexpr char kAckResourceGpuCore[] = "aliyun.com/gpu-core.percentage";
inline constexpr char kAckResourceGpuCount[] = "aliyun.com/gpu-count";

// Node labels, set by the operator; ACK's are read when ours are absent.
inline constexpr char kScheduleLabel[] = "tessera.io/gpu.schedule";
inline constexpr char kAckScheduleLabel[] = "ack.node.gpu.schedule";
// One GPU's own mode: tessera.io/gpu.schedule.<index> (tesserad's device index, decimal, 0-255).
inline constexpr char kGpuScheduleLabelPrefix[] = "tessera.io/gpu.schedule.";
inline constexpr int kMaxGpuIndex = 255;
inline constexpr char kPlacementLabel[] = "tessera.io/gpu.placement";
// `true` on a mig node: the extender may ask the node to cut an idle GPU again
// (kMigRecutAnnotation).
inline constexpr char kMigRecutLabel[] = "tessera.io/mig.recut";
inline constexpr char kAckPlacementLabel[] = "ack.node.gpu.placement";

// Annotations.
inline constexpr char kInventoryAnnotation[] = "tessera.io/gpu-inventory";     // Node
inline constexpr char kAssignmentAnnotation[] = "tessera.io/assignment";       // Pod
inline constexpr char kPhaseAnnotation[] = "tessera.io/phase";                 // Pod
inline constexpr char kGpuModelAnnotation[] = "tessera.io/gpu-model";          // Pod, user
inline constexpr char kHighPriorityAnnotation[] = "tessera.io/high-priority";  // Pod, user
inline constexpr char kWeightAnnotation[] = "tessera.io/weight";               // Pod, user
inline constexpr char kGpuModeAnnotation[] = "tessera.io/gpu-mode";            // Pod, user
inline constexpr char kMigRecutAnnotation[] = "tessera.io/mig-recut";          // Node, extender
inline constexpr char kMigRecutStatusAnnotation[] = "tessera.io/mig-recut-status";  // Node, plugin

// The resource dimension an extended resource name stands for, whichever spelling.
enum class GpuResource { kMem, kCore, kCount };
// kResourceGpuMem and kAckResourceGpuMem both give kMem, and so on; nullopt for any other name.
std::optional<GpuResource> GpuResourceOf(std::string_view resource_name);
// True for the ACK spellings.
bool IsAckResourceName(std::string_view resource_name);
std::string_view GpuResourceName(GpuResource resource, bool ack);
// The resource of MIG profile `profile` ("1g.10gb+me" -> "tessera.io/mig-1g.10gb.me").
std::string MigResourceName(std::string_view profile);
// True for names starting with tessera.io/mig-.
bool IsMigResourceName(std::string_view resource_name);
// The MIG profile a tessera.io/mig-... name stands for, as the MIG tables spell it ("3g.40gb",
// "1g.10gb+me"). The error names `input_name`, the value and every profile name.
Result<std::string> MigProfileOfResource(std::string_view resource_name,
                                         std::string_view input_name);

// How a node shares its GPUs (label tessera.io/gpu.schedule), and each GPU where it has its own
// (GpuModesFromLabels).
enum class NodeMode { kCoreMem, kMem, kShare, kExclusive, kMig, kMps };
std::string_view NodeModeName(NodeMode mode);
// `text` as a mode; the error names `input_name` (a label) and lists the allowed values.
Result<NodeMode> ParseNodeMode(std::string_view text, std::string_view input_name);
// The node's effective mode: tessera.io/gpu.schedule, else ack.node.gpu.schedule, else `fallback`
// (the plugins' --default-mode, core_mem unless set).
Result<NodeMode> NodeModeFromLabels(const std::map<std::string, std::string>& labels,
                                    NodeMode fallback = NodeMode::kCoreMem);
// The GPUs with a mode of their own (labels tessera.io/gpu.schedule.<index>), by device index; a
// GPU without one is in the node's mode. A GPU's own mode is core_mem, mem, share, exclusive or
// mps (mig is the whole node's). Any label under the prefix that is not a valid index, or whose
// value is no such mode, refuses the whole set: the error names the label, the value and what is
// allowed.
Result<std::map<int, NodeMode>> GpuModesFromLabels(
    const std::map<std::string, std::string>& labels);

// How the extender places pods on a node's GPUs (label tessera.io/gpu.placement).
enum class PlacementPolicy { kTessera, kBinpack, kSpread };
std::string_view PlacementPolicyName(PlacementPolicy policy);
Result<PlacementPolicy> ParsePlacementPolicy(std::string_view text, std::string_view input_name);
// tessera.io/gpu.placement, else ack.node.gpu.placement, else tessera.
Result<PlacementPolicy> PlacementPolicyFromLabels(const std::map<std::string, std::string>& labels);

// What a MIG device of a `mig` node is: the GPU it is cut from, that GPU's MIG model (a model
// name of `tessera mig profiles`, e.g. "H100-80GB"), its profile and its first memory slice.
struct InventoryMig {
  std::string gpu;      // the GPU's UUID ("GPU-...")
  std::string model;    // the GPU's MIG model
  std::string profile;  // "3g.40gb"
  int start = 0;        // first memory slice

  bool operator==(const InventoryMig&) const = default;
};

// Node annotation tessera.io/gpu-inventory, written by the device plugin.
struct InventoryGpu {
  int index = 0;  // tesserad's device index (NVML's GPU index, but for MIG devices)
  std::string uuid;
  std::string model;  // NVML's device name
  Bytes memory;       // physical memory (a MIG device's: its instance's)
  bool healthy = true;
  std::optional<InventoryMig> mig{};  // a MIG device (mode mig); nullopt for a GPU
  // The GPU's own mode where it differs from the node's (tessera.io/gpu.schedule.<index>);
  // nullopt: the node's. Never mig.
  std::optional<NodeMode> mode{};

  bool operator==(const InventoryGpu&) const = default;
};
// On a `mig` node the devices are the MIG devices (and any GPU not in MIG mode, which takes no
// pod); the MIG devices of one GPU must form a layout the MIG tables allow, which the parser
// checks.
struct GpuInventory {
  NodeMode mode = NodeMode::kCoreMem;
  std::vector<InventoryGpu> gpus;  // in index order

  const InventoryGpu* Find(std::string_view uuid) const;
  bool operator==(const GpuInventory&) const = default;
};
inline constexpr int kInventoryVersion = 1;
Result<GpuInventory> ParseGpuInventory(std::string_view json);
std::string WriteGpuInventory(const GpuInventory& inventory);

// Pod annotation tessera.io/assignment, written by the extender before it binds.
struct AssignedGpu {
  std::string uuid;
  Bytes mem;     // the container's cap on this GPU
  Percent core;  // its GPU-time share there, 1-100 (100: not limited)

  bool operator==(const AssignedGpu&) const = default;
};
struct ContainerAssignment {
  std::string name;  // the container's name in the pod spec (init containers included)
  std::vector<AssignedGpu> gpus;

  bool operator==(const ContainerAssignment&) const = default;
};
struct Assignment {
  std::string node;
  uint64_t seq = 0;
  std::vector<ContainerAssignment> containers;

  const ContainerAssignment* Find(std::string_view container_name) const;
  bool operator==(const Assignment&) const = default;
};
inline constexpr int kAssignmentVersion = 1;  // a MIG device is one of `gpus`, by its MIG- UUID
Result<Assignment> ParseAssignment(std::string_view json);
std::string WriteAssignment(const Assignment& assignment);

// Node annotation tessera.io/mig-recut, written by the extender: cut GPU `gpu` of this node
// again into `layout`. `id` numbers the node's requests (each one more than the last), so the
// node answers each once (MigRecutStatus).
struct MigRecutRequest {
  uint64_t id = 0;     // 1 ..= 2^53
  std::string gpu;     // the GPU's UUID ("GPU-...")
  std::string layout;  // profile counts as `tessera mig apply` takes them: "1g.10gb=7"
  std::string pod;     // namespace/name of the waiting pod it is for (for people; "" allowed)

  bool operator==(const MigRecutRequest&) const = default;
};
inline constexpr int kMigRecutVersion = 1;
inline constexpr uint64_t kMaxMigRecutId = uint64_t{1} << 53;
// The layout must be space-separated `<profile>=<count>` (profile names of `tessera mig
// profiles`, counts 1-7); whether the GPU's model has the profiles is the node's check.
Result<MigRecutRequest> ParseMigRecutRequest(std::string_view json);
std::string WriteMigRecutRequest(const MigRecutRequest& request);
// The layout's words ("1g.10gb=7 3g.40gb=1" -> {"1g.10gb=7", "3g.40gb=1"}), checked as above; the
// error names `input_name`.
Result<std::vector<std::string>> MigRecutLayoutWords(std::string_view layout,
                                                     std::string_view input_name);

// Node annotation tessera.io/mig-recut-status, written by the device plugin: what became of
// request `id`.
enum class MigRecutState { kApplied, kRefused, kFailed };
std::string_view MigRecutStateName(MigRecutState state);
struct MigRecutStatus {
  uint64_t id = 0;  // the request's
  MigRecutState state = MigRecutState::kApplied;
  std::string gpu;  // the GPU's UUID as the request named it ("" when the request was unreadable)
  std::string reason;  // why refused or failed; what was applied

  bool operator==(const MigRecutStatus&) const = default;
};
Result<MigRecutStatus> ParseMigRecutStatus(std::string_view json);
std::string WriteMigRecutStatus(const MigRecutStatus& status);

// Pod annotation tessera.io/phase.
enum class Phase { kAssumed, kAllocated };
std::string_view PhaseName(Phase phase);
Result<Phase> ParsePhase(std::string_view text);

// The annotations users set on a pod; absent ones stay unset.
struct UserAnnotations {
  std::vector<std::string> gpu_models;  // tessera.io/gpu-model, '|'-separated; empty: any
  std::optional<bool> high_priority;    // tessera.io/high-priority: true/false
  std::optional<uint32_t> weight;       // tessera.io/weight: 1..max_weight
  // tessera.io/gpu-mode: the GPU modes the pod's GPUs may be in, '|'-separated ("mps",
  // "core_mem|mps"); empty: any whose mode takes its request.
  std::vector<NodeMode> gpu_modes;

  bool operator==(const UserAnnotations&) const = default;
};
// `max_weight` is the node's max_inst (the largest weight a container may have there); the
// extender, which checks before it knows the node, passes the largest any node allows (256).
Result<UserAnnotations> ParseUserAnnotations(const std::map<std::string, std::string>& annotations,
                                             uint32_t max_weight = 256);

}  // namespace tessera::k8s
