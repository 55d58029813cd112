// The kustomize installation (deploy/kubernetes/overlays/*) rendered by the real `kubectl
// kustomize`, as `kubectl apply -k` renders it, and the result checked: every overlay renders;
// every document has apiVersion, kind, name and (when namespaced) a namespace; every object of the
// base is in every overlay, each exactly once; the default overlay runs tessera-node on every
// NVIDIA GPU node without a mode label and each mode's DaemonSet on a node labelled with it, one
// DaemonSet per node; the ACK overlay serves ACK's resource names and takes ACK's node labels; the
// monitoring overlay adds the scrape config and the dashboards. Fails when kubectl is missing.
// Reads files and runs kubectl only.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "process/child_process.h"
#include "testing/support/node_manifest.h"

namespace tessera::extender {
namespace {

namespace fs = std::filesystem;
namespace support = ::tessera::k8s::testing;
using support::Scalar;

const std::string kDir = std::string(TESSERA_SOURCE_DIR) + "/deploy/kubernetes";

using Key = std::tuple<std::string, std::string, std::string>;  // kind, namespace, name

bool ClusterScoped(const std::string& kind) {
  return kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding" ||
         kind == "PriorityClass";
}

// kubectl kustomize DIR: its documents (a failure is reported and gives none).
std::vector<YAML::Node> Render(const std::string& dir) {
  auto [status, out] = process::RunShell("kubectl kustomize '" + dir + "' 2>&1");
  EXPECT_EQ(status, 0) << "kubectl kustomize " << dir << ":\n" << out;
  if (status != 0) return {};
  try {
    return YAML::LoadAll(out);
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << "kubectl kustomize " << dir << " wrote what does not parse: " << e.what();
    return {};
  }
}

std::multiset<Key> Keys(const std::vector<YAML::Node>& docs, const std::string& where) {
  std::multiset<Key> out;
  for (const YAML::Node& d : docs) {
    if (!d || d.IsNull()) continue;
    const std::string kind = Scalar(d["kind"]);
    const std::string name = d["metadata"] ? Scalar(d["metadata"]["name"]) : "";
    const std::string ns = d["metadata"] ? Scalar(d["metadata"]["namespace"]) : "";
    EXPECT_FALSE(Scalar(d["apiVersion"]).empty()) << where << ": a document without apiVersion";
    EXPECT_FALSE(kind.empty()) << where << ": a document without kind";
    EXPECT_FALSE(name.empty()) << where << ": a " << kind << " without metadata.name";
    EXPECT_EQ(ns.empty(), ClusterScoped(kind))
        << where << ": " << kind << " " << name << " namespace \"" << ns << "\"";
    out.insert({kind, ns, name});
  }
  return out;
}

// The objects of the YAML files in `dir` itself (not its kustomization).
std::multiset<Key> FileKeys(const std::string& dir) {
  std::vector<YAML::Node> docs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml" || e.path().filename() == "kustomization.yaml") continue;
    for (const YAML::Node& d : YAML::LoadAllFromFile(e.path().string())) docs.push_back(d);
  }
  return Keys(docs, dir);
}

// The rendered DaemonSets, read as Kubernetes reads them.
std::vector<support::ManifestDaemonSet> DaemonSets(const std::vector<YAML::Node>& docs) {
  const std::string file = "/tmp/" + process::UniqueName("kustomize") + ".yaml";
  {
    std::ofstream out(file);
    for (const YAML::Node& d : docs) out << "---\n" << YAML::Dump(d) << "\n";
  }
  auto sets = support::LoadDaemonSets(file);
  fs::remove(file);
  EXPECT_TRUE(sets.ok()) << sets.error();
  return sets.ok() ? *sets : std::vector<support::ManifestDaemonSet>{};
}

// The names of the DaemonSets that run on a node with `labels` ("" when none, "a,b" for two).
std::string Runs(const std::vector<support::ManifestDaemonSet>& sets,
                 const std::map<std::string, std::string>& labels) {
  auto m = support::DaemonSetsFor(sets, labels);
  EXPECT_TRUE(m.ok()) << m.error();
  std::string out;
  if (m.ok())
    for (const auto* ds : *m) out += (out.empty() ? "" : ",") + ds->name;
  return out;
}

std::string ResourceNames(const support::ManifestDaemonSet& ds) {
  for (const auto& c : ds.pod_spec["containers"]) {
    if (Scalar(c["name"]) != "device-plugin") continue;
    const YAML::Node cmd = c["command"];
    for (size_t i = 0; i + 1 < cmd.size(); ++i)
      if (Scalar(cmd[i]) == "--resource-names") return Scalar(cmd[i + 1]);
  }
  return "";
}

class KustomizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [status, version] = process::RunShell("kubectl version --client 2>&1");
    ASSERT_EQ(status, 0) << "kubectl is needed to render deploy/kubernetes/overlays (kubectl "
                            "kustomize): "
                         << version;
  }
};

TEST_F(KustomizeTest, EveryOverlayRendersWithEveryObjectOfTheBaseOnce) {
  const std::multiset<Key> base = FileKeys(kDir + "/base");
  const std::multiset<Key> monitoring = FileKeys(kDir + "/monitoring");
  ASSERT_FALSE(base.empty());
  ASSERT_FALSE(monitoring.empty());
  EXPECT_EQ(Keys(Render(kDir + "/base"), "base"), base) << "the base renders its files";
  std::set<std::string> overlays;
  for (const auto& e : fs::directory_iterator(kDir + "/overlays")) {
    if (e.is_directory()) overlays.insert(e.path().filename().string());
  }
  EXPECT_EQ(overlays, (std::set<std::string>{"ack", "default", "monitoring"}));
  for (const std::string& o : overlays) {
    std::multiset<Key> want = base;
    if (o == "monitoring") want.insert(monitoring.begin(), monitoring.end());
    EXPECT_EQ(Keys(Render(kDir + "/overlays/" + o), o), want) << "overlays/" << o;
  }
}

TEST_F(KustomizeTest, TheDefaultRunsCoreMemOnEveryGpuNodeWithoutLabellingAndEachModeWhereLabelled) {
  const auto sets = DaemonSets(Render(kDir + "/overlays/default"));
  ASSERT_EQ(sets.size(), 3u);
  const std::string gpu = "nvidia.com/gpu.present";
  EXPECT_EQ(Runs(sets, {{gpu, "true"}}), "tessera-node");
  EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"kubernetes.io/os", "linux"}}), "tessera-node");
  EXPECT_EQ(Runs(sets, {}), "") << "a node without a GPU runs nothing";
  EXPECT_EQ(Runs(sets, {{gpu, "false"}}), "");
  for (const auto& [mode, ds] : std::map<std::string, std::string>{{"core_mem", "tessera-node"},
                                                                   {"mem", "tessera-node"},
                                                                   {"share", "tessera-node"},
                                                                   {"exclusive", "tessera-node"},
                                                                   {"mig", "tessera-node-mig"},
                                                                   {"mps", "tessera-node-mps"}}) {
    EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"tessera.io/gpu.schedule", mode}}), ds) << mode;
    EXPECT_EQ(Runs(sets, {{"tessera.io/gpu.schedule", mode}}), ds) << mode << " without GFD";
  }
  // A label the device plugin refuses, or ACK's (overlays/ack): no node pod here.
  EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"tessera.io/gpu.schedule", "other"}}), "");
  EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"ack.node.gpu.schedule", "share"}}), "");
  for (const auto& ds : sets) EXPECT_EQ(ResourceNames(ds), "tessera") << ds.name;
}

TEST_F(KustomizeTest, AckServesBothResourceNamesAndTakesAcksNodeLabels) {
  const auto sets = DaemonSets(Render(kDir + "/overlays/ack"));
  ASSERT_EQ(sets.size(), 3u);
  for (const auto& ds : sets) EXPECT_EQ(ResourceNames(ds), "both") << ds.name;
  EXPECT_EQ(Runs(sets, {{"ack.node.gpu.schedule", "share"}}), "tessera-node");
  EXPECT_EQ(Runs(sets, {{"ack.node.gpu.schedule", "core_mem"}}), "tessera-node");
  EXPECT_EQ(Runs(sets, {{"nvidia.com/gpu.present", "true"}}), "tessera-node");
  // Tessera's label wins over ACK's, as the device plugin and the extender read them.
  EXPECT_EQ(Runs(sets, {{"ack.node.gpu.schedule", "share"}, {"tessera.io/gpu.schedule", "mps"}}),
            "tessera-node-mps");
  EXPECT_EQ(Runs(sets, {{"ack.node.gpu.schedule", "cgpu"}}), "") << "a mode Tessera does not know";
}

TEST_F(KustomizeTest, MonitoringAddsTheScrapeConfigAndTheDashboards) {
  const auto keys = Keys(Render(kDir + "/overlays/monitoring"), "monitoring");
  EXPECT_EQ(keys.count({"ConfigMap", "tessera-system", "tessera-prometheus"}), 1u);
  EXPECT_EQ(keys.count({"ConfigMap", "tessera-system", "tessera-grafana-dashboards"}), 1u);
  EXPECT_EQ(Keys(Render(kDir + "/overlays/default"), "default")
                .count({"ConfigMap", "tessera-system", "tessera-prometheus"}),
            0u);
}

}  // namespace
}  // namespace tessera::extender
