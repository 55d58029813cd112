// The deployment manifests (deploy/kubernetes/{base,device-plugin,monitoring}/*.yaml) checked as CI
// can without a cluster: every document parses and has what its kind requires; names and ports
// agree across files (a Service's selector and target ports, ServiceAccounts, ConfigMaps and Roles
// referred to, the scheduler configuration's extender address against the extender's container, the
// Prometheus jobs against the Service and the DaemonSet, the Grafana dashboard against
// deploy/grafana-dashboard.json); RBAC lists its verbs and covers what each program does; the doors
// are wired as docs/security.md says (kube-scheduler alone drives the extender, over HTTPS with
// client certificates from one Secret, behind a NetworkPolicy; tesserad runs as a node for hostile
// tenants, its HTTP door read-only and open to Prometheus alone). Reads files only.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "k8s/annotations.h"
#include "mig/profiles.h"
#include "testing/support/node_manifest.h"

namespace tessera::extender {
namespace {

namespace fs = std::filesystem;
namespace testing_support = ::tessera::k8s::testing;

const std::string kDir = std::string(TESSERA_SOURCE_DIR) + "/deploy/kubernetes";

struct Object {
  std::string file;
  std::string kind;
  std::string ns;
  std::string name;
  YAML::Node doc;
  std::string where() const {
    return file + ": " + kind + " " + (ns.empty() ? "" : ns + "/") + name;
  }
};

// Kinds without a namespace.
bool ClusterScoped(const std::string& kind) {
  return kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding" ||
         kind == "PriorityClass";
}

std::string Str(const YAML::Node& n) {
  return n && n.IsScalar() ? n.as<std::string>() : std::string();
}

// n[k1][k2]..., or an undefined node when a key on the way is missing (yaml-cpp throws when a
// missing key's node is indexed again).
YAML::Node At(const YAML::Node& root, std::initializer_list<const char*> keys) {
  YAML::Node n;
  n.reset(root);  // Node's operator= would write into the node; reset() rebinds
  for (const char* k : keys) {
    if (!n || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node next = static_cast<const YAML::Node&>(n)[k];
    if (!next) return YAML::Node(YAML::NodeType::Undefined);
    n.reset(next);
  }
  return n;
}

std::set<std::string> Strings(const YAML::Node& n) {
  std::set<std::string> out;
  if (n && n.IsSequence()) {
    for (const auto& v : n) out.insert(Str(v));
  }
  return out;
}

std::map<std::string, std::string> Labels(const YAML::Node& n) {
  std::map<std::string, std::string> out;
  if (n && n.IsMap()) {
    for (const auto& kv : n) out[kv.first.as<std::string>()] = Str(kv.second);
  }
  return out;
}

bool Subset(const std::map<std::string, std::string>& a,
            const std::map<std::string, std::string>& b) {
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second != v) return false;
  }
  return !a.empty();
}

// A container's command and args, as one list.
std::vector<std::string> CommandOf(const YAML::Node& container) {
  std::vector<std::string> out;
  for (const char* key : {"command", "args"}) {
    if (container[key] && container[key].IsSequence()) {
      for (const auto& a : container[key]) out.push_back(Str(a));
    }
  }
  return out;
}

// The value of `flag` in a command ("--flag VALUE" or "--flag=VALUE"), or nullopt.
std::optional<std::string> FlagValue(const std::vector<std::string>& cmd, const std::string& flag) {
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (cmd[i] == flag && i + 1 < cmd.size()) return cmd[i + 1];
    if (cmd[i].rfind(flag + "=", 0) == 0) return cmd[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

bool HasFlag(const std::vector<std::string>& cmd, const std::string& flag) {
  for (const std::string& a : cmd) {
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

class ManifestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::is_directory(kDir)) << kDir;
    // The base, the device-plugin door and the monitoring component; their kustomization.yaml
    // files are kustomize's.
    std::vector<fs::directory_entry> files;
    for (const char* sub : {"/base", "/device-plugin", "/monitoring"}) {
      for (const auto& entry : fs::directory_iterator(kDir + sub)) files.push_back(entry);
    }
    for (const auto& entry : files) {
      if (entry.path().extension() != ".yaml" || entry.path().filename() == "kustomization.yaml")
        continue;
      const std::string file = entry.path().filename().string();
      std::vector<YAML::Node> docs;
      try {
        docs = YAML::LoadAllFromFile(entry.path().string());
      } catch (const YAML::Exception& e) {
        ADD_FAILURE() << file << ": does not parse: " << e.what();
        continue;
      }
      for (const YAML::Node& d : docs) {
        if (!d || d.IsNull()) continue;
        Object o;
        o.file = file;
        o.doc = d;
        o.kind = Str(d["kind"]);
        o.name = Str(At(d, {"metadata", "name"}));
        o.ns = Str(At(d, {"metadata", "namespace"}));
        EXPECT_FALSE(Str(d["apiVersion"]).empty()) << file << ": a document without apiVersion";
        EXPECT_FALSE(o.kind.empty()) << file << ": a document without kind";
        EXPECT_FALSE(o.name.empty()) << file << ": a " << o.kind << " without metadata.name";
        if (ClusterScoped(o.kind)) {
          EXPECT_TRUE(o.ns.empty()) << o.where() << ": cluster-scoped, yet has a namespace";
        } else {
          EXPECT_FALSE(o.ns.empty()) << o.where() << ": needs metadata.namespace";
        }
        objects_.push_back(o);
      }
    }
    ASSERT_FALSE(objects_.empty());
  }

  const Object* Find(const std::string& kind, const std::string& ns,
                     const std::string& name) const {
    for (const Object& o : objects_) {
      if (o.kind == kind && o.ns == ns && o.name == name) return &o;
    }
    return nullptr;
  }
  std::vector<const Object*> OfKind(const std::string& kind) const {
    std::vector<const Object*> out;
    for (const Object& o : objects_) {
      if (o.kind == kind) out.push_back(&o);
    }
    return out;
  }
  std::vector<const Object*> Workloads() const {
    auto out = OfKind("Deployment");
    auto ds = OfKind("DaemonSet");
    out.insert(out.end(), ds.begin(), ds.end());
    return out;
  }
  // The verbs the roles bound to ServiceAccount ns/sa grant on `resource` (cluster-wide ones).
  std::set<std::string> Granted(const std::string& ns, const std::string& sa,
                                const std::string& resource) const {
    std::set<std::string> verbs;
    for (const Object* b : OfKind("ClusterRoleBinding")) {
      bool ours = false;
      for (const auto& s : b->doc["subjects"]) {
        ours |=
            Str(s["kind"]) == "ServiceAccount" && Str(s["name"]) == sa && Str(s["namespace"]) == ns;
      }
      if (!ours) continue;
      const Object* role = Find("ClusterRole", "", Str(b->doc["roleRef"]["name"]));
      if (role == nullptr) continue;
      for (const auto& rule : role->doc["rules"]) {
        if (Strings(rule["resources"]).count(resource) == 0) continue;
        for (const std::string& v : Strings(rule["verbs"])) verbs.insert(v);
      }
    }
    return verbs;
  }

  // Some NetworkPolicy selects `workload`'s pods for Ingress; together they admit only `ports`,
  // each rule from named peers (not every source) and naming its ports.
  void ExpectIngressOnlyTo(const Object& workload, const std::set<std::string>& ports) const {
    const auto labels = Labels(workload.doc["spec"]["template"]["metadata"]["labels"]);
    int policies = 0;
    for (const Object* p : OfKind("NetworkPolicy")) {
      if (p->ns != workload.ns) continue;
      if (!Subset(Labels(At(p->doc, {"spec", "podSelector", "matchLabels"})), labels)) continue;
      if (Strings(p->doc["spec"]["policyTypes"]).count("Ingress") == 0) continue;
      ++policies;
      for (const auto& rule : p->doc["spec"]["ingress"]) {
        EXPECT_TRUE(rule["from"] && rule["from"].IsSequence() && rule["from"].size() > 0)
            << p->where() << ": an ingress rule open to every source";
        ASSERT_TRUE(rule["ports"] && rule["ports"].IsSequence())
            << p->where() << ": an ingress rule open on every port";
        for (const auto& port : rule["ports"]) {
          EXPECT_EQ(ports.count(Str(port["port"])), 1u)
              << p->where() << " admits port " << Str(port["port"]);
        }
      }
    }
    EXPECT_GE(policies, 1) << workload.where() << ": no NetworkPolicy isolates its pods";
  }

  std::vector<Object> objects_;
};

TEST_F(ManifestsTest, NamesAreUniqueAndNamespacesExist) {
  std::set<std::string> seen;
  for (const Object& o : objects_) {
    EXPECT_TRUE(seen.insert(o.kind + "/" + o.ns + "/" + o.name).second) << o.where() << ": twice";
    if (!o.ns.empty() && o.ns != "kube-system") {
      EXPECT_NE(Find("Namespace", "", o.ns), nullptr)
          << o.where() << ": namespace " << o.ns << " is not in the manifests";
    }
  }
}

TEST_F(ManifestsTest, WorkloadsReferToWhatExists) {
  ASSERT_FALSE(Workloads().empty());
  for (const Object* w : Workloads()) {
    const YAML::Node spec = w->doc["spec"];
    const YAML::Node pod = spec["template"]["spec"];
    EXPECT_TRUE(Subset(Labels(spec["selector"]["matchLabels"]),
                       Labels(spec["template"]["metadata"]["labels"])))
        << w->where() << ": the selector does not match the pod template's labels";
    const std::string sa = Str(pod["serviceAccountName"]);
    EXPECT_NE(Find("ServiceAccount", w->ns, sa), nullptr)
        << w->where() << ": ServiceAccount " << sa;
    std::set<std::string> volumes;
    for (const auto& v : pod["volumes"]) {
      volumes.insert(Str(v["name"]));
      if (const YAML::Node cm = At(v, {"configMap", "name"})) {
        EXPECT_NE(Find("ConfigMap", w->ns, Str(cm)), nullptr)
            << w->where() << ": ConfigMap " << Str(cm);
      }
    }
    ASSERT_TRUE(pod["containers"].IsSequence()) << w->where();
    for (const auto& c : pod["containers"]) {
      const std::string who = w->where() + " container " + Str(c["name"]);
      EXPECT_FALSE(Str(c["name"]).empty()) << who;
      EXPECT_FALSE(Str(c["image"]).empty()) << who;
      EXPECT_TRUE(c["command"].IsSequence() && c["command"].size() > 0) << who << ": no command";
      std::set<std::string> ports;
      for (const auto& p : c["ports"]) ports.insert(Str(p["name"]));
      for (const auto& m : c["volumeMounts"]) {
        EXPECT_EQ(volumes.count(Str(m["name"])), 1u)
            << who << ": mounts unknown volume " << Str(m["name"]);
      }
      for (const char* probe : {"readinessProbe", "livenessProbe"}) {
        for (const char* how : {"httpGet", "tcpSocket"}) {
          const YAML::Node port = At(c, {probe, how, "port"});
          if (!port || !port.IsScalar()) continue;
          const std::string p = port.as<std::string>();
          if (!std::all_of(p.begin(), p.end(), ::isdigit)) {
            EXPECT_EQ(ports.count(p), 1u) << who << ": " << probe << " names port " << p;
          }
        }
      }
    }
  }
}

TEST_F(ManifestsTest, ServicesSelectAWorkloadAndItsPorts) {
  ASSERT_FALSE(OfKind("Service").empty());
  for (const Object* s : OfKind("Service")) {
    const auto selector = Labels(s->doc["spec"]["selector"]);
    const Object* target = nullptr;
    for (const Object* w : Workloads()) {
      if (w->ns == s->ns &&
          Subset(selector, Labels(w->doc["spec"]["template"]["metadata"]["labels"])))
        target = w;
    }
    ASSERT_NE(target, nullptr) << s->where() << ": selects no workload";
    std::set<std::string> names, numbers;
    for (const auto& c : target->doc["spec"]["template"]["spec"]["containers"]) {
      for (const auto& p : c["ports"]) {
        names.insert(Str(p["name"]));
        numbers.insert(Str(p["containerPort"]));
      }
    }
    for (const auto& p : s->doc["spec"]["ports"]) {
      const std::string t = Str(p["targetPort"]);
      EXPECT_TRUE(names.count(t) || numbers.count(t))
          << s->where() << ": targetPort " << t << " is not a port of " << target->where();
    }
  }
}

TEST_F(ManifestsTest, RbacListsItsVerbsAndBindsWhatExists) {
  const std::set<std::string> builtin_cluster_roles = {"system:kube-scheduler",
                                                       "system:volume-scheduler"};
  const std::set<std::string> builtin_roles = {"extension-apiserver-authentication-reader"};
  for (const char* kind : {"Role", "ClusterRole"}) {
    for (const Object* r : OfKind(kind)) {
      ASSERT_TRUE(r->doc["rules"].IsSequence()) << r->where();
      for (const auto& rule : r->doc["rules"]) {
        const auto verbs = Strings(rule["verbs"]);
        EXPECT_FALSE(verbs.empty()) << r->where() << ": a rule without verbs";
        EXPECT_EQ(verbs.count("*"), 0u) << r->where() << ": verbs must be listed, not *";
        EXPECT_EQ(Strings(rule["resources"]).count("*"), 0u)
            << r->where() << ": resources must be listed";
      }
    }
  }
  for (const char* kind : {"RoleBinding", "ClusterRoleBinding"}) {
    for (const Object* b : OfKind(kind)) {
      const std::string role_kind = Str(b->doc["roleRef"]["kind"]);
      const std::string role = Str(b->doc["roleRef"]["name"]);
      if (role_kind == "ClusterRole") {
        EXPECT_TRUE(Find("ClusterRole", "", role) || builtin_cluster_roles.count(role))
            << b->where() << ": " << role;
      } else {
        EXPECT_TRUE(Find("Role", b->ns, role) || builtin_roles.count(role))
            << b->where() << ": " << role;
      }
      for (const auto& s : b->doc["subjects"]) {
        EXPECT_NE(Find("ServiceAccount", Str(s["namespace"]), Str(s["name"])), nullptr)
            << b->where() << ": subject " << Str(s["namespace"]) << "/" << Str(s["name"]);
      }
    }
  }
  // What each program does on the API server, and nothing beyond it for the extender.
  const std::set<std::string> read_patch = {"get", "list", "watch", "patch"};
  EXPECT_EQ(Granted("tessera-system", "tessera-scheduler", "pods"), read_patch);
  EXPECT_EQ(Granted("tessera-system", "tessera-scheduler", "nodes"), read_patch);
  EXPECT_EQ(Granted("tessera-system", "tessera-scheduler", "pods/binding"),
            std::set<std::string>{"create"});
  EXPECT_EQ(Granted("kube-system", "tessera-device-plugin", "pods"), read_patch);
  EXPECT_EQ(Granted("kube-system", "tessera-device-plugin", "nodes"), read_patch);
  EXPECT_EQ(Granted("kube-system", "tessera-device-plugin", "events"),
            std::set<std::string>{"create"});
}

TEST_F(ManifestsTest, TheSchedulerConfigurationCallsTheExtenderWhereItListens) {
  const Object* cm = Find("ConfigMap", "tessera-system", "tessera-scheduler-config");
  ASSERT_NE(cm, nullptr);
  const YAML::Node config = YAML::Load(Str(cm->doc["data"]["scheduler-config.yaml"]));
  EXPECT_EQ(Str(config["apiVersion"]), "kubescheduler.config.k8s.io/v1");
  EXPECT_EQ(Str(config["kind"]), "KubeSchedulerConfiguration");
  EXPECT_EQ(Str(config["profiles"][0]["schedulerName"]), "tessera-scheduler");
  EXPECT_EQ(Str(config["leaderElection"]["resourceNamespace"]), cm->ns);
  const Object* leader = Find("Role", cm->ns, "tessera-scheduler-leader");
  ASSERT_NE(leader, nullptr);
  bool lease_named = false;
  for (const auto& rule : leader->doc["rules"]) {
    lease_named |=
        Strings(rule["resourceNames"]).count(Str(config["leaderElection"]["resourceName"])) == 1;
  }
  EXPECT_TRUE(lease_named) << "the leader Role does not name the scheduler's Lease";
  ASSERT_EQ(config["extenders"].size(), 1u);
  const YAML::Node ext = config["extenders"][0];
  EXPECT_EQ(Str(ext["filterVerb"]), "filter");
  EXPECT_EQ(Str(ext["prioritizeVerb"]), "prioritize");
  // Without a preempt verb kube-scheduler's preemption evicts pods on nodes the extender refused
  // without asking it (pkg/scheduler/framework/preemption: callExtenders skips such extenders).
  EXPECT_EQ(Str(ext["preemptVerb"]), "preempt");
  EXPECT_EQ(Str(ext["bindVerb"]), "bind");
  EXPECT_TRUE(ext["nodeCacheCapable"].as<bool>());
  std::set<std::string> resources = {"tessera.io/gpu-mem",
                                     "tessera.io/gpu-core",
                                     "tessera.io/gpu-count",
                                     "aliyun.com/gpu-mem",
                                     "aliyun.com/gpu-core.percentage",
                                     "aliyun.com/gpu-count"};
  // Every MIG profile's resource too: kube-scheduler sends a pod to the extender only when it asks
  // a managed resource.
  for (std::string_view profile : mig::AllProfileNames())
    resources.insert(k8s::MigResourceName(profile));
  std::set<std::string> managed;
  for (const auto& r : ext["managedResources"]) managed.insert(Str(r["name"]));
  EXPECT_EQ(managed, resources);
  std::smatch m;
  const std::string url = Str(ext["urlPrefix"]);
  ASSERT_TRUE(std::regex_match(url, m, std::regex(R"(https://127\.0\.0\.1:(\d+))"))) << url;
  const std::string port = m[1];
  // The Deployment that mounts this ConfigMap: its extender listens there, its kube-scheduler
  // reads the file where the ConfigMap is mounted.
  const Object* deployment = nullptr;
  for (const Object* w : OfKind("Deployment")) {
    for (const auto& v : w->doc["spec"]["template"]["spec"]["volumes"]) {
      if (Str(At(v, {"configMap", "name"})) == cm->name) deployment = w;
    }
  }
  ASSERT_NE(deployment, nullptr);
  bool extender = false, scheduler = false;
  for (const auto& c : deployment->doc["spec"]["template"]["spec"]["containers"]) {
    const std::vector<std::string> cmd = CommandOf(c);
    ASSERT_FALSE(cmd.empty());
    if (cmd[0].find("tessera-extender") != std::string::npos) {
      extender = true;
      const auto listen = FlagValue(cmd, "--listen");
      ASSERT_TRUE(listen.has_value());
      EXPECT_EQ(*listen, "127.0.0.1:" + port) << "kube-scheduler calls " << url;
    }
    if (cmd[0] == "kube-scheduler") {
      scheduler = true;
      // A minor upstream still supports (docs/kubernetes.md, "Deploying"): 1.35 or newer.
      const std::string image = Str(c["image"]);
      std::smatch v;
      ASSERT_TRUE(std::regex_match(
          image, v, std::regex(R"(registry\.k8s\.io/kube-scheduler:v1\.(\d+)\.\d+)")))
          << image;
      EXPECT_GE(std::stoi(v[1]), 35) << image << ": a kube-scheduler minor past its end of life";
      const auto path = FlagValue(cmd, "--config");
      ASSERT_TRUE(path.has_value());
      bool mounted = false;
      for (const auto& mount : c["volumeMounts"]) {
        mounted |= *path == Str(mount["mountPath"]) + "/scheduler-config.yaml";
      }
      EXPECT_TRUE(mounted) << *path << " is not where the ConfigMap is mounted";
    }
  }
  EXPECT_TRUE(extender && scheduler);
}

// The file `path` as `container` of `pod` sees it, when it comes from a Secret's key: the Secret's
// name and the key; nullopt when no Secret volume mounted in that container holds it.
std::optional<std::pair<std::string, std::string>> SecretKeyAt(const YAML::Node& pod,
                                                               const YAML::Node& container,
                                                               const std::string& path) {
  for (const auto& mount : container["volumeMounts"]) {
    const std::string dir = Str(mount["mountPath"]);
    if (path.rfind(dir + "/", 0) != 0) continue;
    const std::string file = path.substr(dir.size() + 1);
    for (const auto& v : pod["volumes"]) {
      if (Str(v["name"]) != Str(mount["name"]) || !v["secret"]) continue;
      const std::string secret = Str(v["secret"]["secretName"]);
      if (!v["secret"]["items"]) return std::pair{secret, file};  // every key, by its name
      for (const auto& item : v["secret"]["items"]) {
        if (Str(item["path"]) == file) return std::pair{secret, Str(item["key"])};
      }
    }
  }
  return std::nullopt;
}

// Finding: anyone who reached the extender could bind any pod: no TLS, no client authentication,
// 0.0.0.0 behind a cluster Service, no NetworkPolicy.
TEST_F(ManifestsTest, OnlyKubeSchedulerCanDriveTheExtender) {
  const Object* cm = Find("ConfigMap", "tessera-system", "tessera-scheduler-config");
  ASSERT_NE(cm, nullptr);
  const YAML::Node config = YAML::Load(Str(cm->doc["data"]["scheduler-config.yaml"]));
  const YAML::Node ext = config["extenders"][0];
  ASSERT_TRUE(ext["enableHTTPS"] && ext["enableHTTPS"].as<bool>()) << "enableHTTPS";
  const YAML::Node tls = ext["tlsConfig"];
  ASSERT_TRUE(tls && tls.IsMap()) << "tlsConfig";
  EXPECT_FALSE(tls["insecure"] && tls["insecure"].as<bool>()) << "tlsConfig.insecure";
  // Upstream's makeTransport: without a CA kube-scheduler would not check the extender at all.
  ASSERT_FALSE(Str(tls["caFile"]).empty());
  ASSERT_FALSE(Str(tls["certFile"]).empty());
  ASSERT_FALSE(Str(tls["keyFile"]).empty());
  const Object* deployment = Find("Deployment", "tessera-system", "tessera-scheduler");
  ASSERT_NE(deployment, nullptr);
  const YAML::Node pod = deployment->doc["spec"]["template"]["spec"];
  std::optional<std::pair<std::string, std::string>> scheduler_ca, client_cert, client_key,
      extender_ca, server_cert, server_key;
  std::string verbs_port, metrics_port;
  std::set<std::string> exposed;
  for (const auto& c : pod["containers"]) {
    const std::vector<std::string> cmd = CommandOf(c);
    for (const auto& p : c["ports"]) exposed.insert(Str(p["containerPort"]));
    if (cmd[0] == "kube-scheduler") {
      scheduler_ca = SecretKeyAt(pod, c, Str(tls["caFile"]));
      client_cert = SecretKeyAt(pod, c, Str(tls["certFile"]));
      client_key = SecretKeyAt(pod, c, Str(tls["keyFile"]));
    }
    if (cmd[0].find("tessera-extender") == std::string::npos) continue;
    EXPECT_FALSE(HasFlag(cmd, "--insecure-http"));
    for (const char* flag : {"--tls-cert-file", "--tls-private-key-file", "--client-ca-file"}) {
      ASSERT_TRUE(FlagValue(cmd, flag).has_value()) << flag;
    }
    server_cert = SecretKeyAt(pod, c, *FlagValue(cmd, "--tls-cert-file"));
    server_key = SecretKeyAt(pod, c, *FlagValue(cmd, "--tls-private-key-file"));
    extender_ca = SecretKeyAt(pod, c, *FlagValue(cmd, "--client-ca-file"));
    const std::string listen = FlagValue(cmd, "--listen").value_or("");
    EXPECT_EQ(listen.substr(0, listen.rfind(':')), "127.0.0.1") << "the verbs off loopback";
    verbs_port = listen.substr(listen.rfind(':') + 1);
    const std::string metrics = FlagValue(cmd, "--metrics-listen").value_or("");
    metrics_port = metrics.substr(metrics.rfind(':') + 1);
  }
  // Every file from the one Secret, whose name the docs' script and the docs give.
  for (const auto* key :
       {&scheduler_ca, &client_cert, &client_key, &extender_ca, &server_cert, &server_key}) {
    ASSERT_TRUE(key->has_value()) << "a TLS file that no Secret volume provides";
    EXPECT_EQ((*key)->first, "tessera-extender-tls");
  }
  EXPECT_EQ(scheduler_ca->second, "ca.crt");
  EXPECT_EQ(extender_ca->second, "ca.crt");
  EXPECT_EQ(client_cert->second, "client.crt");
  EXPECT_EQ(client_key->second, "client.key");
  EXPECT_EQ(server_cert->second, "tls.crt");
  EXPECT_EQ(server_key->second, "tls.key");
  for (const char* doc : {"/deploy/kubernetes/extender-certs.sh", "/docs/kubernetes.md"}) {
    std::ifstream in(std::string(TESSERA_SOURCE_DIR) + doc);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("create secret generic tessera-extender-tls"), std::string::npos)
        << doc << " does not say how to make the Secret";
  }
  // The verbs' port is neither a containerPort nor behind a Service; the read-only one is.
  ASSERT_FALSE(verbs_port.empty());
  ASSERT_FALSE(metrics_port.empty());
  EXPECT_EQ(exposed.count(verbs_port), 0u);
  EXPECT_EQ(exposed.count(metrics_port), 1u);
  for (const Object* service : OfKind("Service")) {
    if (service->ns != deployment->ns) continue;
    for (const auto& p : service->doc["spec"]["ports"]) {
      EXPECT_NE(Str(p["port"]), verbs_port) << service->where();
      EXPECT_NE(Str(p["targetPort"]), verbs_port) << service->where();
    }
  }
  // A NetworkPolicy isolates the pod and admits the read-only port alone, from named peers only.
  ExpectIngressOnlyTo(*deployment, {metrics_port});
}

// Finding: the shipped tesserad ran without --over-limit-action kill and
// --allow-self-declared=false, with --http on 0.0.0.0, against docs/security.md.
TEST_F(ManifestsTest, TheNodeDaemonRunsAsTheThreatModelSays) {
  int daemons = 0;
  for (const Object* w : OfKind("DaemonSet")) {
    for (const auto& c : w->doc["spec"]["template"]["spec"]["containers"]) {
      const std::vector<std::string> cmd = CommandOf(c);
      if (cmd.empty() || cmd[0].find("tesserad") == std::string::npos) continue;
      ++daemons;
      const std::string who = w->where() + " container " + Str(c["name"]);
      EXPECT_EQ(FlagValue(cmd, "--allow-self-declared").value_or(""), "false") << who;
      EXPECT_EQ(FlagValue(cmd, "--over-limit-action").value_or(""), "kill") << who;
      EXPECT_FALSE(HasFlag(cmd, "--http-allow-write")) << who << ": HTTP writes on a pod address";
      const auto http = FlagValue(cmd, "--http");
      if (!http) continue;
      const std::string host = http->substr(0, http->rfind(':'));
      if (host == "127.0.0.1" || host == "[::1]" || host == "localhost") continue;
      // Off loopback, the door is fenced: a NetworkPolicy admits its port alone, from named peers.
      ExpectIngressOnlyTo(*w, {http->substr(http->rfind(':') + 1)});
    }
  }
  EXPECT_GE(daemons, 1) << "no tesserad in the manifests";
}

TEST_F(ManifestsTest, PrometheusJobsFindTheServiceAndTheDaemonSet) {
  const Object* cm = Find("ConfigMap", "tessera-system", "tessera-prometheus");
  ASSERT_NE(cm, nullptr);
  const YAML::Node prom = YAML::Load(Str(cm->doc["data"]["prometheus.yml"]));
  std::map<std::string, std::string> keep;  // job -> its keep regex
  for (const auto& job : prom["scrape_configs"]) {
    for (const auto& r : job["relabel_configs"]) {
      if (Str(r["action"]) == "keep") keep[Str(job["job_name"])] = Str(r["regex"]);
    }
  }
  const Object* service = Find("Service", "tessera-system", "tessera-extender");
  ASSERT_NE(service, nullptr);
  EXPECT_EQ(keep["tessera-extender"],
            service->name + ";" + Str(service->doc["spec"]["ports"][0]["name"]));
  const Object* node = Find("DaemonSet", "kube-system", "tessera-node");
  ASSERT_NE(node, nullptr);
  std::string metrics_port, http_flag;
  for (const auto& c : node->doc["spec"]["template"]["spec"]["containers"]) {
    if (Str(c["name"]) != "tesserad") continue;
    for (const auto& p : c["ports"]) {
      if (Str(p["name"]) == "metrics") metrics_port = Str(p["containerPort"]);
    }
    for (size_t i = 0; i + 1 < c["command"].size(); ++i) {
      if (Str(c["command"][i]) == "--http") http_flag = Str(c["command"][i + 1]);
    }
  }
  EXPECT_EQ(keep["tesserad"],
            Str(node->doc["spec"]["template"]["metadata"]["labels"]["app"]) + ";metrics");
  EXPECT_FALSE(metrics_port.empty());
  EXPECT_EQ(http_flag.substr(http_flag.rfind(':') + 1), metrics_port)
      << "tesserad --http and its metrics port";
}

TEST_F(ManifestsTest, GrafanaDashboardsAreTheProjectsOwn) {
  const Object* cm = Find("ConfigMap", "tessera-system", "tessera-grafana-dashboards");
  ASSERT_NE(cm, nullptr);
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/deploy/grafana-dashboard.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(Str(cm->doc["data"]["tesserad.json"])),
            nlohmann::json::parse(text.str()))
      << "the ConfigMap's tesserad.json differs from deploy/grafana-dashboard.json";
  const auto scheduler =
      nlohmann::json::parse(Str(cm->doc["data"]["tessera-scheduler.json"]), nullptr, false);
  ASSERT_FALSE(scheduler.is_discarded());
  ASSERT_FALSE(scheduler["panels"].empty());
  for (const auto& p : scheduler["panels"]) EXPECT_FALSE(p["targets"].empty()) << p["title"];
}

// ---- the node DaemonSets (tessera-node.yaml) ------------------------------------------------

namespace node {

// The node DaemonSets (those of tessera-node.yaml).
std::vector<testing_support::ManifestDaemonSet> Load() {
  auto sets = testing_support::LoadDaemonSets(kDir + "/device-plugin/tessera-node.yaml");
  EXPECT_TRUE(sets.ok()) << sets.error();
  return sets.ok() ? *sets : std::vector<testing_support::ManifestDaemonSet>{};
}

// `flag`'s value in `command` ("" when absent, "present" for a flag without a value).
std::string Flag(const YAML::Node& command, const std::string& flag) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (Str(command[i]) != flag) continue;
    if (i + 1 < command.size() && Str(command[i + 1]).rfind("--", 0) != 0)
      return Str(command[i + 1]);
    return "present";
  }
  return "";
}

std::map<std::string, std::string> Env(const YAML::Node& container) {
  std::map<std::string, std::string> out;
  for (const auto& e : container["env"]) out[Str(e["name"])] = Str(e["value"]);
  return out;
}

YAML::Node Container(const testing_support::ManifestDaemonSet& ds, const std::string& name) {
  for (const auto& c : ds.pod_spec["containers"]) {
    if (Str(c["name"]) == name) return c;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

}  // namespace node

TEST_F(ManifestsTest, EachNodeModeRunsExactlyOneNodeDaemonSetAndAnUnlabelledNodeNone) {
  const auto sets = node::Load();
  ASSERT_FALSE(sets.empty());
  const std::map<std::string, std::string> expected = {
      {"core_mem", "tessera-node"},  {"mem", "tessera-node"},     {"share", "tessera-node"},
      {"exclusive", "tessera-node"}, {"mig", "tessera-node-mig"}, {"mps", "tessera-node-mps"}};
  for (const auto& [mode, name] : expected) {
    auto matching = testing_support::DaemonSetsFor(
        sets, {{"tessera.io/gpu.schedule", mode}, {"kubernetes.io/os", "linux"}});
    ASSERT_TRUE(matching.ok()) << matching.error();
    ASSERT_EQ(matching->size(), 1u)
        << "DaemonSets on a node labelled tessera.io/gpu.schedule=" << mode;
    EXPECT_EQ((*matching)[0]->name, name) << mode;
  }
  for (const std::map<std::string, std::string>& labels :
       std::vector<std::map<std::string, std::string>>{
           {}, {{"ack.node.gpu.schedule", "core_mem"}}, {{"tessera.io/gpu.schedule", "other"}}}) {
    auto matching = testing_support::DaemonSetsFor(sets, labels);
    ASSERT_TRUE(matching.ok()) << matching.error();
    EXPECT_TRUE(matching->empty())
        << "a node without a Tessera mode label runs " << matching->size();
  }
  // Each DaemonSet's selector picks its own pods only (overlapping selectors make controllers
  // fight over pods), and every node pod keeps app=tessera-node (Prometheus keeps those).
  for (const auto& a : sets) {
    const Object* o = Find("DaemonSet", a.ns, a.name);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(Str(a.pod_labels["app"]), "tessera-node") << a.name;
    for (const auto& b : sets) {
      if (&a == &b) continue;
      EXPECT_FALSE(Subset(Labels(o->doc["spec"]["selector"]["matchLabels"]), Labels(b.pod_labels)))
          << a.name << "'s selector also selects " << b.name << "'s pods";
    }
  }
}

TEST_F(ManifestsTest, NodeDaemonSetsReachTheDriverThroughNvidiasToolkit) {
  for (const auto& ds : node::Load()) {
    EXPECT_EQ(Str(ds.pod_spec["runtimeClassName"]), "nvidia") << ds.name;
    const YAML::Node tesserad = node::Container(ds, "tesserad");
    ASSERT_TRUE(tesserad) << ds.name;
    const auto env = node::Env(tesserad);
    EXPECT_EQ(env.count("NVIDIA_VISIBLE_DEVICES") ? env.at("NVIDIA_VISIBLE_DEVICES") : "", "all")
        << ds.name << ": tesserad manages every GPU of the node";
    const std::string caps =
        env.count("NVIDIA_DRIVER_CAPABILITIES") ? env.at("NVIDIA_DRIVER_CAPABILITIES") : "";
    EXPECT_NE(caps.find("utility"), std::string::npos) << ds.name << ": NVML needs utility";
    EXPECT_NE(caps.find("compute"), std::string::npos) << ds.name << ": libcuda needs compute";
    EXPECT_TRUE(tesserad["securityContext"]["privileged"].as<bool>()) << ds.name;
  }
}

TEST_F(ManifestsTest, MigAndMpsNodesGetTheirOwnArguments) {
  for (const auto& ds : node::Load()) {
    const YAML::Node tesserad = node::Container(ds, "tesserad");
    const YAML::Node plugin = node::Container(ds, "device-plugin");
    ASSERT_TRUE(tesserad && plugin) << ds.name;
    const bool mig = ds.name == "tessera-node-mig", mps = ds.name == "tessera-node-mps";
    EXPECT_EQ(node::Flag(tesserad["command"], "--mps").empty(), !mps) << ds.name << ": --mps";
    // The shared DaemonSet allows MPS on no GPU at start: GPUs labelled mps get it by MPSGPUS.
    const bool shares = ds.name == "tessera-node";
    EXPECT_EQ(node::Flag(tesserad["command"], "--mps-gpus"), shares ? "none" : "")
        << ds.name << ": --mps-gpus";
    for (const YAML::Node& c : {tesserad, plugin}) {
      const auto env = node::Env(c);
      EXPECT_EQ(env.count("NVIDIA_MIG_MONITOR_DEVICES") == 1, mig)
          << ds.name << " " << Str(c["name"])
          << ": NVIDIA_MIG_MONITOR_DEVICES (NVML lists MIG instances)";
    }
    if (mig) {
      // The plugin reads the instances' profiles through the driver's NVML.
      EXPECT_EQ(node::Flag(plugin["command"], "--nvml"),
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
      EXPECT_EQ(node::Env(plugin).at("NVIDIA_VISIBLE_DEVICES"), "all");
    }
    if (mps || shares) {
      // The MPS folders are under a host path the plugin mounts at the same path (it hands them
      // to pods), and tesserad needs CAP_SYS_ADMIN for each control daemon's mount namespace.
      const std::string dir = node::Flag(tesserad["command"], "--mps-dir");
      ASSERT_FALSE(dir.empty()) << ds.name;
      bool reached = false;
      for (const auto& m : plugin["volumeMounts"]) {
        const std::string path = Str(m["mountPath"]);
        reached |= dir.rfind(path + "/", 0) == 0;
      }
      EXPECT_TRUE(reached) << ds.name << ": --mps-dir " << dir
                           << " is not under a folder the plugin mounts";
      EXPECT_NE(node::Flag(tesserad["command"], "--mps-control"), "") << ds.name;
    }
  }
}

TEST_F(ManifestsTest, NodeHostPathsAreMountedAtTheirOwnPath) {
  // kubelet mounts the host paths the plugin writes into allocations (its state folder, the
  // container sockets, CDI specs) into pods: the plugin must see each at the host's path.
  for (const auto& ds : node::Load()) {
    std::map<std::string, std::string> host;  // volume -> host path
    for (const auto& v : ds.pod_spec["volumes"]) host[Str(v["name"])] = Str(v["hostPath"]["path"]);
    const YAML::Node plugin = node::Container(ds, "device-plugin");
    ASSERT_TRUE(plugin) << ds.name;
    std::set<std::string> seen;
    for (const auto& m : plugin["volumeMounts"]) {
      if (host[Str(m["name"])] == Str(m["mountPath"])) seen.insert(Str(m["mountPath"]));
    }
    for (const char* flag : {"--state-dir", "--container-sockets", "--tesserad-socket"}) {
      const std::string path = node::Flag(plugin["command"], flag);
      ASSERT_FALSE(path.empty()) << ds.name << " " << flag;
      bool under = false;
      for (const std::string& s : seen) under |= path == s || path.rfind(s + "/", 0) == 0;
      EXPECT_TRUE(under) << ds.name << ": " << flag << " " << path
                         << " is not under a host path mounted at its own path";
    }
    EXPECT_EQ(node::Flag(plugin["command"], "--container-sockets"),
              node::Flag(node::Container(ds, "tesserad")["command"], "--container-sockets"))
        << ds.name;
  }
}

}  // namespace
}  // namespace tessera::extender
