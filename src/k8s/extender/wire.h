// The kube-scheduler HTTP extender protocol (k8s.io/kube-scheduler/extender/v1): what the
// scheduler POSTs to the filter, prioritize, preempt and bind verbs and what it expects back.
//
// The Go structs carry no json tags, so the keys are the Go field names: ExtenderArgs {Pod, Nodes,
// NodeNames}, ExtenderFilterResult {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes,
// Error}, HostPriorityList [{Host, Score}], ExtenderBindingArgs {PodName, PodNamespace, PodUID,
// Node}, ExtenderBindingResult {Error}, ExtenderPreemptionArgs {Pod, NodeNameToVictims,
// NodeNameToMetaVictims}, ExtenderPreemptionResult {NodeNameToMetaVictims}, Victims {Pods,
// NumPDBViolations}, MetaVictims {Pods, NumPDBViolations}, MetaPod {UID}. kube-scheduler sends them
// capitalised; Go's decoder
// matches keys ignoring case, so the readers here do too. NodeNames is set when the extender is
// nodeCacheCapable, else Nodes (a v1.NodeList); a filter answer uses the same form as its request.
//
// Parsing and writing only: no decisions, no HTTP. Every malformed body is refused with the key,
// the value's kind and what was expected.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/objects.h"

namespace tessera::extender {

struct ExtenderArgs {
  k8s::Json pod;  // the v1.Pod
  // The names, from NodeNames or Nodes.items[].metadata.name, as views into `name_bytes` (which
  // moves with the struct: keep it whole while the views are used).
  std::vector<std::string_view> nodes;
  bool node_objects = false;  // the request carried Nodes (answer with Nodes)
  k8s::Json node_list;        // the Nodes list when node_objects

  std::unique_ptr<char[]> name_bytes;  // the names, back to back
};
// The names of a body as kube-scheduler writes it (Go's encoding/json: NodeNames last, plain
// names) are read without the JSON lexer; any other body is read whole. The answer is the same.
Result<ExtenderArgs> ParseExtenderArgs(std::string_view body);
// The whole body through the JSON library, always: the reference the quick path is tested against.
Result<ExtenderArgs> ParseExtenderArgsWhole(std::string_view body);

// ExtenderFilterResult for `outcome`; with `args.node_objects`, Nodes holds the fitting items.
std::string WriteFilterResult(const ExtenderArgs& args, const FilterOutcome& outcome);
// ExtenderFilterResult carrying only Error.
std::string WriteFilterError(std::string_view error);
// HostPriorityList.
std::string WritePriorities(const std::vector<NodePriority>& priorities);

// ExtenderPreemptionArgs: the pod and, per node, the victims kube-scheduler's own preemption
// chose there. A nodeCacheCapable extender gets NodeNameToMetaVictims (pod UIDs); otherwise
// NodeNameToVictims (whole v1.Pods), whose UIDs are read here. Nodes come in name order.
struct PreemptionArgs {
  k8s::Json pod;
  std::vector<PreemptCandidate> nodes;
};
Result<PreemptionArgs> ParsePreemptionArgs(std::string_view body);
// ExtenderPreemptionResult: NodeNameToMetaVictims of `nodes` (an empty map when none).
std::string WritePreemptionResult(const std::vector<PreemptCandidate>& nodes);

struct BindingArgs {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};
Result<BindingArgs> ParseBindingArgs(std::string_view body);
// ExtenderBindingResult; an empty error means bound.
std::string WriteBindingResult(std::string_view error);

}  // namespace tessera::extender
