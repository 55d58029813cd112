// Allocator: the device plugin's decisions, apart from gRPC and the API server's transport.
//
// Finding the pod. kubelet's Allocate carries device IDs only, never the pod. kubelet admits one
// pod at a time, in the order its pod source delivers them (the order the pods were bound to the
// node; a batch of several by creation time), and calls Allocate for the pod's containers in order
// (init containers first), each container once per resource it asks for. So the call for resource
// R with n devices belongs to the first pod, in that order, whose next container asking for R
// (the first whose R is not allocated yet) asks for n: a pod already under way comes first, then
// the others by bind order (the plugin's own watch of pods on the node sees bindings in the order
// kubelet's does). The choice is exact whenever only one waiting pod matches, which is the case
// unless pods with identical requests were bound together; then kubelet's order decides, the
// record keeps the others' names, and the reconciler checks the choice against the cgroups of the
// container's processes (docs/kubernetes.md, "Finding the pod"). Nothing is ever guessed from a
// size alone: a call that matches no waiting pod fails with a message listing what is waiting.
//
// What a container gets comes only from its pod's tessera.io/assignment (checked against the
// node's GPUs, the container's request and the node's mode); a pod without one fails, never runs
// on an unisolated GPU. In core_mem, mem, mig and mps modes the container is registered with
// tesserad (memory cap per device, 0 on the node's other devices, core percent, weight, priority)
// and gets its socket folder, the shims, /etc/ld.so.preload and TESSERA_* environment; in share and
// exclusive modes only its GPUs (NVIDIA_VISIBLE_DEVICES); with CDI, the same as CDI devices.
// On a mig node a container asks one MIG instance (tessera.io/mig-<profile>: 1) and its
// assignment names one MIG device of that profile, registered with tesserad as a device of its
// own (TESSERA_VISIBLE_DEVICES=MIG-...). On an mps node a container gets one GPU, and besides the
// above its GPU's MPS pipe folder (tesserad --mps tells where, in its CONTAINER reply), that GPU's
// MPS server's /dev/shm (not the host's) and the MPS client environment
// (mps::MpsClientEnvironment, as `tessera run` gives).
//
// A GPU with a mode of its own (NodeGpu::mode, tessera.io/gpu.schedule.<index>) is served as that
// mode says: a container's mode is the mode of the GPUs its assignment names, which must all be
// in one mode (an assignment spanning modes is refused by name).
//
// Thread-safety: one mutex; Allocate, Prefer, PreStart and the reconciler's calls serialise.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "k8s/deviceplugin/cdi.h"
#include "k8s/deviceplugin/checkpoint.h"
#include "k8s/deviceplugin/container_edits.h"
#include "k8s/deviceplugin/node_devices.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "k8s/objects.h"
#include "k8s/pod_demand.h"
#include "placement/fit.h"

namespace tessera::k8s {

// tesserad container ids of the plugin's containers start with this.
inline constexpr char kContainerIdPrefix[] = "k8s.";

// A pod bound to this node, as the plugin's cache knows it, and its place in kubelet's order.
struct NodePod {
  PodView view;
  uint64_t order = 0;
};

// The pods bound to this node (the device plugin's cache; tests give their own).
class PodSource {
 public:
  virtual ~PodSource() = default;
  virtual std::vector<NodePod> Pods() const = 0;
  // Lists the pods again now (a pod kubelet admits may not have reached the cache yet).
  virtual Status Refresh() = 0;
};

// Where the plugin reports what users must see (Events on the pod).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void PodEvent(const PodView& pod, const std::string& reason, const std::string& message,
                        bool warning) = 0;
};

struct AllocatorConfig {
  std::string node;
  std::string checkpoint_path;
  std::string container_socket_dir;  // tesserad's --container-sockets (a host path)
  std::string shim_dir;              // host folder with libcuda.so.1 and libnvidia-ml.so.1
  std::string preload_file;          // host file listing the shims, mounted as /etc/ld.so.preload
  bool cdi = false;
  std::string cdi_dir = "/var/run/cdi";
  // With cdi: the host path of tessera-oci-hook and tesserad's node socket, for the createRuntime
  // hook each container's spec carries (tesserad then knows the container's processes by their
  // cgroup, and serves none before). Empty: no hook, and the container is not identified.
  std::string oci_hook;
  std::string tesserad_socket;
  // A simulated node (tests): simgpu's library on the host, the file holding the node's
  // simulated GPUs (simgpu's state, TESSERA_SIM_STATE resolved; a container has its own /dev/shm,
  // so the file itself is mounted, at kContainerSimState) and the rest of the simulation's
  // environment (TESSERA_SIM_GPUS), handed to every container; "" on a real node.
  std::string sim_library;
  std::string sim_state;
  std::vector<std::pair<std::string, std::string>> sim_env;
};

// What kubelet passes on to the runtime for one container (ContainerAllocateResponse).
struct ContainerResponse {
  std::map<std::string, std::string> envs;
  struct Mount {
    std::string container_path, host_path;
    bool read_only = true;
  };
  std::vector<Mount> mounts;
  std::vector<std::string> cdi_devices;
};

class Allocator {
 public:
  Allocator(AllocatorConfig config, const TesseradClient* tesserad, PodSource* pods,
            EventSink* events);

  // Reads the checkpoint (a restarted plugin carries on where it stopped).
  Status Load();
  void SetMode(NodeMode mode, ResourceNames names);
  NodeMode mode() const;
  // The node's devices as last seen (a mig node's carry their MIG profile; a GPU with a mode of
  // its own carries it).
  void SetNodeGpus(std::vector<NodeGpu> gpus);
  // Sets the node's devices to what `resolve` returns, given the pods whose recorded containers
  // use each GPU (device index -> "namespace/pod"), under the allocator's lock: no allocation
  // lands between the look at the tenants and the GPUs' new modes.
  struct GpuTenants {
    std::set<std::string> pods;    // "namespace/pod"
    std::optional<NodeMode> mode;  // the mode they were set up in, where recorded
  };
  using TenantsByGpu = std::map<int, GpuTenants>;
  void UpdateNodeGpus(const std::function<std::vector<NodeGpu>(const TenantsByGpu&)>& resolve);

  // kubelet's Allocate of `ids` of `resource` for one container.
  Result<ContainerResponse> Allocate(const std::string& resource,
                                     const std::vector<std::string>& ids);
  // GetPreferredAllocation: devices on the GPUs the waiting container's assignment names first.
  std::vector<std::string> Prefer(const std::string& resource,
                                  const std::vector<std::string>& available,
                                  const std::vector<std::string>& must_include, size_t size);
  // PreStartContainer: the container's registration is there (again, after a tesserad restart)
  // and tesserad is reachable, or the container does not start.
  Status PreStart(const std::string& resource, const std::vector<std::string>& ids);

  // For the reconciler.
  Checkpoint Snapshot() const;
  // Pods bound here whose every container's every resource has been allocated.
  std::set<std::string> CompletePods(const std::vector<NodePod>& pods) const;
  // Removes the records of `gone` pods: unregisters their containers from tesserad (their memory
  // goes back as their processes exit, at once if none is left) and deletes their CDI specs.
  // Returns a line per container released.
  std::vector<std::string> Release(const std::set<std::string>& gone_pod_uids);
  // Registers again every recorded container that tesserad lacks (a restarted tesserad with a
  // fresh ledger) and unregisters containers of ours that no record names. Lines of what it did.
  // tesserad's status is read under the allocator's lock: one read before it would miss a
  // container that Allocate registered meanwhile, or still list one that Release removed.
  std::vector<std::string> Resync();
  // Forgets refusals of pods no longer on the node.
  void ForgetRejected(const std::set<std::string>& live_pod_uids);

  // The tesserad container id of a pod's container: readable and unique.
  static std::string ContainerId(const PodView& pod, const std::string& container);

 private:
  struct Match {
    const NodePod* pod = nullptr;
    int container = -1;  // index into pod->view.containers
    std::vector<std::string> also;
  };
  // Whether `resource` is one this node serves (every tessera.io/mig-<profile> on a mig node).
  bool Serves(const std::string& resource) const;
  // The requested quantity of each served resource of `c` (unparseable ones left out).
  std::map<std::string, uint64_t> Steps(const ContainerView& c) const;
  std::optional<Match> Attribute(const std::string& resource, size_t n,
                                 const std::vector<NodePod>& pods) const;
  std::string Waiting(const std::vector<NodePod>& pods) const;
  Result<AllocationRecord> Plan(const PodView& pod, const ContainerView& container,
                                const TesseradStatus& status) const;
  // The environment and mounts a registered container needs (the answer's, or its CDI spec's).
  CdiEdits Edits(const AllocationRecord& record) const;
  ContainerResponse Response(const AllocationRecord& record) const;
  // This node as the fit rule sees it (k8s/fit.h) for a container in `mode`: the GPUs in that
  // mode (a mig node's GPUs in MIG mode and their MIG model) and their memory.
  placement::NodeShape Shape(const TesseradStatus& status, NodeMode mode) const;
  // The mode of GPU `uuid`: its own, else the node's.
  NodeMode ModeOf(const std::string& uuid) const;
  // The mode of the GPUs `gpus` names; an error where they are in different modes.
  Result<NodeMode> ModeOfGpus(const std::vector<AssignedGpu>& gpus) const;
  // The mode a recorded container runs in (its first GPU's).
  NodeMode ModeOf(const AllocationRecord& record) const;
  void ServeModes();
  // The MIG-mode checks of one assigned device: a MIG device of the node, of the profile asked.
  Status CheckMigDevice(const AssignedGpu& gpu, const GpuRequest& request) const;
  // Registers the container with tesserad: its caps on its GPUs, 0 bytes on the node's others;
  // on an mps node also checks that tesserad runs MPS there and records its folder.
  Status Register(AllocationRecord* record) const;
  Status Save() const;

  AllocatorConfig config_;
  const TesseradClient* tesserad_;
  PodSource* pods_;
  EventSink* events_;
  mutable std::mutex mu_;
  NodeMode mode_ = NodeMode::kCoreMem;
  ResourceNames names_ = ResourceNames::kTessera;
  std::set<std::string> served_;
  std::vector<NodeGpu> node_gpus_;
  Checkpoint checkpoint_;
  std::set<std::string> release_failing_;  // ids whose release failed (reported once)
};

}  // namespace tessera::k8s
