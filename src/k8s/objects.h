// Typed views of the Kubernetes objects Tessera reads (Pods, Nodes) over their JSON, resource
// quantities, and what a container asks of Tessera's resources. Views copy what they need out of
// the JSON; the JSON stays the object of record (ApiClient returns it). Pure functions: no I/O.
// Nothing outside src/k8s may know these shapes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "k8s/annotations.h"

namespace tessera::k8s {

using Json = nlohmann::json;

// A resource quantity of an extended resource, which Kubernetes requires to be a whole number:
// digits with an optional suffix k, M, G, T, P, E (powers of 1000), Ki, Mi, Gi, Ti, Pi, Ei
// (powers of 1024) or m (thousandths, only when the result is whole). "2" -> 2, "1k" -> 1000,
// "2000m" -> 2. Errors name `input_name` and the value.
Result<uint64_t> ParseQuantity(std::string_view text, std::string_view input_name);

struct ContainerView {
  std::string name;
  bool init = false;
  // An init container with restartPolicy Always: a native sidecar, which runs beside the app
  // containers for the pod's life (kubelet keeps its devices its own).
  bool restartable = false;
  std::map<std::string, std::string> limits;    // resources.limits, quantities as written
  std::map<std::string, std::string> requests;  // resources.requests
};

struct PodView {
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string creation_timestamp;  // RFC 3339, as the server wrote it
  bool deleting = false;           // metadata.deletionTimestamp is set
  std::string node_name;           // spec.nodeName; empty while unbound
  std::string scheduler_name;      // spec.schedulerName
  std::string phase;               // status.phase (Pending, Running, Succeeded, Failed, Unknown)
  // status.conditions has PodScheduled False with reason Unschedulable: kube-scheduler tried the
  // pod and found no node for it (it writes this after every failed attempt).
  bool unschedulable = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::vector<ContainerView> containers;  // init containers first, in order, then the others

  std::string Key() const { return ns + "/" + name; }
  bool Terminal() const { return phase == "Succeeded" || phase == "Failed"; }
  const ContainerView* Container(std::string_view container_name) const;
  const std::string* Annotation(std::string_view key) const;
};
Result<PodView> PodFromJson(const Json& pod);

struct NodeView {
  std::string name;
  std::string uid;
  std::string resource_version;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> allocatable;  // status.allocatable
};
Result<NodeView> NodeFromJson(const Json& node);

// What one container asks of Tessera's resources (docs/contracts.md), from its limits (extended
// resources cannot be overcommitted, so a request must equal its limit when both are written).
struct GpuRequest {
  uint64_t mem_gib = 0;   // tessera.io/gpu-mem (or aliyun.com/gpu-mem), GiB
  uint32_t core = 0;      // tessera.io/gpu-core (aliyun.com/gpu-core.percentage), 1-100
  uint32_t count = 0;     // tessera.io/gpu-count (aliyun.com/gpu-count), GPUs
  bool ack = false;       // written with ACK's names
  // tessera.io/mig-<profile>: 1, as the MIG tables spell the profile ("1g.10gb+me"); then no
  // other of these is asked.
  std::string mig_profile;

  bool mig() const { return !mig_profile.empty(); }
  bool any() const { return mem_gib != 0 || core != 0 || count != 0 || mig(); }
  // The amount asked of `resource` (0 when not asked).
  uint64_t Of(GpuResource resource) const;
  // Distinct GPUs the container spans: count, or 1 when only mem/core is asked.
  uint32_t Gpus() const { return count != 0 ? count : (any() ? 1 : 0); }
  bool operator==(const GpuRequest&) const = default;
};
// Errors name the pod's container and resource: mixing both spellings, a quantity that is not a
// whole number, core outside 1-100 (a multiple of 5 with the ACK name), a request that differs
// from its limit; a MIG resource of no known profile, asked more than once (a CUDA process sees
// one MIG device), beside another MIG profile or beside a share.
Result<GpuRequest> GpuRequestOf(const ContainerView& container);

}  // namespace tessera::k8s
