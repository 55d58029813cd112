// The node DaemonSets of a manifest (deploy/kubernetes/device-plugin/tessera-node.yaml) read as
// Kubernetes reads them, for the tests (tests only): which DaemonSet runs on a node with given
// labels (the DaemonSet controller's rule: the pod's nodeSelector, and any one term of its required
// node affinity, each term's expressions all holding), and the parts of a pod template kubelet
// turns into containers. Reads YAML only; starts nothing.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "core/result.h"

namespace tessera::k8s::testing {

struct ManifestDaemonSet {
  std::string name;
  std::string ns;
  YAML::Node pod_spec;    // spec.template.spec
  YAML::Node pod_labels;  // spec.template.metadata.labels
};

// Every DaemonSet in `file` (documents of other kinds are skipped).
Result<std::vector<ManifestDaemonSet>> LoadDaemonSets(const std::string& file);

// Whether a pod with `pod_spec` may run on a node with `labels`: its nodeSelector and its
// requiredDuringSchedulingIgnoredDuringExecution node affinity (In, NotIn, Exists, DoesNotExist,
// Gt, Lt), as kube-scheduler's NodeAffinity plugin and the DaemonSet controller decide. An
// operator or field it does not know is an error, not a match.
Result<bool> RunsOnNode(const YAML::Node& pod_spec,
                        const std::map<std::string, std::string>& labels);

// The DaemonSets of `sets` that run on a node with `labels`.
Result<std::vector<const ManifestDaemonSet*>> DaemonSetsFor(
    const std::vector<ManifestDaemonSet>& sets, const std::map<std::string, std::string>& labels);

// A scalar as a string ("" when absent or not a scalar).
std::string Scalar(const YAML::Node& n);

}  // namespace tessera::k8s::testing
