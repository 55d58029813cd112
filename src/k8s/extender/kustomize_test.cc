// The kustomize installation (deploy/kubernetes/overlays/*) rendered by the real `kubectl
// kustomize`, as `kubectl apply -k` renders it, and the result checked: every overlay renders;
// every document has apiVersion, kind, name and (when namespaced) a namespace; every object of the
// base and of the overlay's door (device-plugin/ or dra/) is in the overlay, each exactly once; the
// default overlay runs tessera-node on every NVIDIA GPU node without a mode label and each mode's
// DaemonSet on a node labelled with it, one DaemonSet per node; the mps and mig overlays run their
// mode's DaemonSet, told so by --default-mode, where the default runs tessera-node; the dra overlay
// runs tessera-dra-node on every GPU node, no device plugin, and steers claims; the ACK overlay
// serves ACK's resource names and takes ACK's node labels; the monitoring overlay adds the scrape
// config and the dashboards; a user's kustomization over the default (README.md's) names the image
// of every Tessera container; every kustomization.yaml keeps to the fields kustomize v2.0.3
// (kubectl 1.14 to 1.20, Debian 12's kubectl) knows, so the kubectl on PATH, old or new, renders
// them alike. Fails when kubectl is missing. Reads files, writes a kustomization under /tmp and
// runs kubectl only.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
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
         kind == "PriorityClass" || kind == "DeviceClass";
}

// kubectl kustomize DIR: its documents (a failure is reported and gives none). Its stderr (today's
// kubectl warns there of the fields deprecated since kustomize v2) is kept out of the documents.
std::vector<YAML::Node> Render(const std::string& dir) {
  const std::string err = "/tmp/" + process::UniqueName("kustomize-err");
  auto [status, out] = process::RunShell("kubectl kustomize '" + dir + "' 2>'" + err + "'");
  std::string diagnostics;
  {
    std::ifstream in(err);
    diagnostics.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  fs::remove(err);
  EXPECT_EQ(status, 0) << "kubectl kustomize " << dir << ":\n" << diagnostics << out;
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

// The objects of the YAML files in `dir` itself (not its kustomization, nor `except`).
std::multiset<Key> FileKeys(const std::string& dir, const std::string& except = "") {
  std::vector<YAML::Node> docs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml" || e.path().filename() == "kustomization.yaml" ||
        e.path().filename() == except)
      continue;
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

TEST_F(KustomizeTest, EveryOverlayRendersWithEveryObjectOfTheBaseAndItsDoorOnce) {
  const std::multiset<Key> base = FileKeys(kDir + "/base");
  const std::multiset<Key> monitoring = FileKeys(kDir + "/monitoring");
  const std::multiset<Key> device_plugin = FileKeys(kDir + "/device-plugin");
  // claim-templates.yaml holds examples for users' namespaces, not part of the installation.
  const std::multiset<Key> dra = FileKeys(kDir + "/dra", "claim-templates.yaml");
  ASSERT_FALSE(base.empty());
  ASSERT_FALSE(monitoring.empty());
  ASSERT_FALSE(device_plugin.empty());
  ASSERT_FALSE(dra.empty());
  EXPECT_EQ(Keys(Render(kDir + "/base"), "base"), base) << "the base renders its files";
  EXPECT_EQ(Keys(Render(kDir + "/device-plugin"), "device-plugin"), device_plugin);
  EXPECT_EQ(Keys(Render(kDir + "/dra"), "dra"), dra);
  std::set<std::string> overlays;
  for (const auto& e : fs::directory_iterator(kDir + "/overlays")) {
    if (e.is_directory()) overlays.insert(e.path().filename().string());
  }
  EXPECT_EQ(overlays, (std::set<std::string>{"ack", "default", "dra", "mig", "monitoring", "mps"}));
  for (const std::string& o : overlays) {
    std::multiset<Key> want = base;
    const std::multiset<Key>& door = o == "dra" ? dra : device_plugin;
    want.insert(door.begin(), door.end());
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

// The container `name`'s command in `ds`.
std::vector<std::string> Command(const YAML::Node& pod_spec, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& c : pod_spec["containers"]) {
    if (Scalar(c["name"]) != name) continue;
    for (const auto& a : c["command"]) out.push_back(Scalar(a));
  }
  return out;
}

// The value after `flag` in `cmd` ("" when absent).
std::string FlagValue(const std::vector<std::string>& cmd, const std::string& flag) {
  for (size_t i = 0; i + 1 < cmd.size(); ++i)
    if (cmd[i] == flag) return cmd[i + 1];
  return "";
}

TEST_F(KustomizeTest, MpsAndMigPutEveryUnlabelledGpuNodeInTheirModeAndLabelsStillDecide) {
  for (const std::string mode : {"mps", "mig"}) {
    const auto sets = DaemonSets(Render(kDir + "/overlays/" + mode));
    ASSERT_EQ(sets.size(), 3u) << mode;
    const std::string gpu = "nvidia.com/gpu.present";
    const std::string own = "tessera-node-" + mode;
    EXPECT_EQ(Runs(sets, {{gpu, "true"}}), own) << mode;
    EXPECT_EQ(Runs(sets, {}), "") << mode << ": a node without a GPU runs nothing";
    EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"tessera.io/gpu.schedule", "core_mem"}}), "tessera-node")
        << mode;
    EXPECT_EQ(Runs(sets, {{"tessera.io/gpu.schedule", mode}}), own) << mode;
    const std::string other = mode == "mps" ? "mig" : "mps";
    EXPECT_EQ(Runs(sets, {{gpu, "true"}, {"tessera.io/gpu.schedule", other}}),
              "tessera-node-" + other)
        << mode;
    for (const auto& ds : sets) {
      // Only the DaemonSet that takes unlabelled nodes says which mode they are in.
      EXPECT_EQ(FlagValue(Command(ds.pod_spec, "device-plugin"), "--default-mode"),
                ds.name == own ? mode : "")
          << mode << ": " << ds.name;
      EXPECT_EQ(ResourceNames(ds), "tessera") << ds.name;
    }
  }
}

TEST_F(KustomizeTest, DraRunsTheDraNodeOnEveryGpuNodeWithoutDevicePluginsAndSteersClaims) {
  const auto docs = Render(kDir + "/overlays/dra");
  const auto sets = DaemonSets(docs);
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0].name, "tessera-dra-node");
  EXPECT_EQ(Runs(sets, {{"nvidia.com/gpu.present", "true"}}), "tessera-dra-node");
  EXPECT_EQ(Runs(sets, {{"tessera.io/gpu.schedule", "mps"}}), "tessera-dra-node");
  EXPECT_EQ(Runs(sets, {{"ack.node.gpu.schedule", "share"}}), "tessera-dra-node");
  EXPECT_EQ(Runs(sets, {}), "") << "a node without a GPU runs nothing";
  const auto keys = Keys(docs, "dra");
  EXPECT_EQ(keys.count({"DeviceClass", "", "gpu.tessera.io"}), 1u);
  EXPECT_EQ(keys.count({"NetworkPolicy", "kube-system", "tessera-dra-node"}), 1u);
  bool steering = false;
  for (const YAML::Node& d : docs) {
    if (Scalar(d["kind"]) != "Deployment" || Scalar(d["metadata"]["name"]) != "tessera-scheduler")
      continue;
    for (const std::string& a : Command(d["spec"]["template"]["spec"], "tessera-extender"))
      steering |= a == "--dra-steering";
  }
  EXPECT_TRUE(steering) << "the extender in overlays/dra does not run with --dra-steering";
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

// README.md's quick start: a kustomization of the user's beside the checkout, over the default,
// naming the image. Every container of Tessera's gets it; kube-scheduler keeps its own.
TEST_F(KustomizeTest, AUsersOverlayNamesTheImageOfEveryTesseraContainer) {
  const fs::path mine = fs::path("/tmp") / process::UniqueName("my-tessera");
  fs::create_directories(mine);
  {
    std::ofstream out(mine / "kustomization.yaml");
    out << "bases: [" << fs::relative(kDir + "/overlays/default", mine).string() << "]\n"
        << "images: [{name: IMAGE, newName: registry.example.com/tessera, newTag: \"0.1\"}]\n";
  }
  const auto docs = Render(mine.string());
  fs::remove_all(mine);
  std::map<std::string, int> images;  // image -> containers
  for (const YAML::Node& d : docs) {
    if (!d || !d["spec"] || !d["spec"]["template"]) continue;
    const YAML::Node pod = d["spec"]["template"]["spec"];
    for (const char* list : {"initContainers", "containers"})
      for (const auto& c : pod[list]) ++images[Scalar(c["image"])];
  }
  EXPECT_EQ(images, (std::map<std::string, int>{{"registry.example.com/tessera:0.1", 7},
                                                {"registry.k8s.io/kube-scheduler:v1.35.0", 1}}));
}

// kustomize v2.0.3 refuses `patches`, `components` and a directory under `resources`; today's
// kustomize reads every field it knows. Checked here too, so a kubectl newer than CI's does not
// hide a kustomization that CI's (Debian 12's 1.20) cannot render.
TEST_F(KustomizeTest, EveryKustomizationKeepsToTheFieldsOfKustomizeV2) {
  std::set<std::string> known;
  std::istringstream fields(
      "apiVersion kind resources bases namespace namePrefix nameSuffix commonLabels "
      "commonAnnotations images patchesStrategicMerge patchesJson6902 configMapGenerator "
      "secretGenerator generatorOptions vars crds configurations");
  for (std::string f; fields >> f;) known.insert(f);
  int seen = 0;
  for (const auto& e : fs::recursive_directory_iterator(kDir)) {
    if (e.path().filename() != "kustomization.yaml") continue;
    ++seen;
    const std::string file = e.path().string();
    const YAML::Node k = YAML::LoadFile(file);
    EXPECT_EQ(Scalar(k["kind"]), "Kustomization") << file;
    for (const auto& field : k) {
      const std::string name = field.first.as<std::string>();
      EXPECT_TRUE(known.count(name))
          << file << ": field \"" << name << "\" is not one kustomize v2.0.3 knows";
    }
    for (const auto& r : k["resources"])
      EXPECT_FALSE(fs::is_directory(e.path().parent_path() / Scalar(r)))
          << file << ": resource \"" << Scalar(r)
          << "\" is a directory (kustomize v2.0.3 takes those under bases)";
  }
  EXPECT_EQ(seen, 10) << "base, device-plugin, dra, monitoring and the six overlays";
}

}  // namespace
}  // namespace tessera::extender
