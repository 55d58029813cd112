// Typed views of the Kubernetes objects Tessera reads (Pods, Nodes) over their JSON. Views copy
// what they need out of the JSON, quantities as written; the JSON stays the object of record
// (ApiClient returns it). What a pod asks of Tessera is read from these views by pod_demand.h.
// Pure functions: no I/O. Nothing outside src/k8s may know these shapes.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "k8s/annotations.h"

namespace tessera::k8s {

using Json = nlohmann::json;

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

// Any object's metadata.resourceVersion; empty when it has none (or it is not a string).
std::string ResourceVersionOf(const Json& object);

}  // namespace tessera::k8s
