// Node DaemonSets of a manifest: loading and the node-affinity rule.
#include "testing/support/node_manifest.h"

#include <cstdlib>

namespace tessera::k8s::testing {

std::string Scalar(const YAML::Node& n) {
  return n && n.IsScalar() ? n.as<std::string>() : std::string();
}

Result<std::vector<ManifestDaemonSet>> LoadDaemonSets(const std::string& file) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAllFromFile(file);
  } catch (const YAML::Exception& e) {
    return Result<std::vector<ManifestDaemonSet>>::Error(file + ": " + e.what());
  }
  std::vector<ManifestDaemonSet> out;
  for (const YAML::Node& doc : docs) {
    if (!doc || !doc.IsMap() || Scalar(doc["kind"]) != "DaemonSet") continue;
    ManifestDaemonSet d;
    d.name = Scalar(doc["metadata"]["name"]);
    d.ns = Scalar(doc["metadata"]["namespace"]);
    const YAML::Node tmpl = doc["spec"]["template"];
    if (!tmpl || !tmpl["spec"] || !tmpl["spec"].IsMap()) {
      return Result<std::vector<ManifestDaemonSet>>::Error(file + ": DaemonSet " + d.name +
                                                           " has no spec.template.spec");
    }
    d.pod_spec = tmpl["spec"];
    d.pod_labels = tmpl["metadata"]["labels"];
    out.push_back(d);
  }
  return out;
}

namespace {

Result<bool> ExpressionHolds(const YAML::Node& e,
                             const std::map<std::string, std::string>& labels) {
  const std::string key = Scalar(e["key"]), op = Scalar(e["operator"]);
  const auto it = labels.find(key);
  std::vector<std::string> values;
  if (e["values"]) {
    for (const YAML::Node& v : e["values"]) values.push_back(Scalar(v));
  }
  auto in = [&] {
    for (const std::string& v : values) {
      if (it != labels.end() && it->second == v) return true;
    }
    return false;
  };
  if (op == "In") return in();
  if (op == "NotIn") return !in();
  if (op == "Exists") return it != labels.end();
  if (op == "DoesNotExist") return it == labels.end();
  if (op == "Gt" || op == "Lt") {
    if (it == labels.end() || values.size() != 1) return false;
    const long have = std::strtol(it->second.c_str(), nullptr, 10);
    const long want = std::strtol(values[0].c_str(), nullptr, 10);
    return op == "Gt" ? have > want : have < want;
  }
  return Result<bool>::Error("node affinity operator \"" + op + "\" of key " + key +
                             ": expected In, NotIn, Exists, DoesNotExist, Gt or Lt");
}

}  // namespace

Result<bool> RunsOnNode(const YAML::Node& pod_spec,
                        const std::map<std::string, std::string>& labels) {
  if (const YAML::Node selector = pod_spec["nodeSelector"]) {
    for (const auto& kv : selector) {
      const auto it = labels.find(Scalar(kv.first));
      if (it == labels.end() || it->second != Scalar(kv.second)) return false;
    }
  }
  const YAML::Node affinity = pod_spec["affinity"]["nodeAffinity"];
  const YAML::Node required =
      affinity ? affinity["requiredDuringSchedulingIgnoredDuringExecution"] : YAML::Node();
  if (!required) return true;
  const YAML::Node terms = required["nodeSelectorTerms"];
  if (!terms || !terms.IsSequence() || terms.size() == 0) {
    return Result<bool>::Error(
        "requiredDuringSchedulingIgnoredDuringExecution without "
        "nodeSelectorTerms (matches no node)");
  }
  for (const YAML::Node& term : terms) {
    if (term["matchFields"]) {
      return Result<bool>::Error("node affinity matchFields: not read by this test's rule");
    }
    bool all = true;
    for (const YAML::Node& e : term["matchExpressions"]) {
      auto holds = ExpressionHolds(e, labels);
      if (!holds.ok()) return holds;
      all = all && *holds;
    }
    // A term with no expressions matches no node (upstream's nodeaffinity helper).
    if (all && term["matchExpressions"] && term["matchExpressions"].size() > 0) return true;
  }
  return false;
}

Result<std::vector<const ManifestDaemonSet*>> DaemonSetsFor(
    const std::vector<ManifestDaemonSet>& sets, const std::map<std::string, std::string>& labels) {
  std::vector<const ManifestDaemonSet*> out;
  for (const ManifestDaemonSet& d : sets) {
    auto runs = RunsOnNode(d.pod_spec, labels);
    if (!runs.ok()) {
      return Result<std::vector<const ManifestDaemonSet*>>::Error("DaemonSet " + d.name + ": " +
                                                                  runs.error());
    }
    if (*runs) out.push_back(&d);
  }
  return out;
}

}  // namespace tessera::k8s::testing
