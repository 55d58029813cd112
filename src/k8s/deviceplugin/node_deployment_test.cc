// The node as shipped: the DaemonSet of deploy/kubernetes/device-plugin/tessera-node.yaml that runs
// on a node of the mode under test is read from the file (yaml-cpp), and its pod's containers run
// under podman
// + runc with what the manifest gives them: command, environment (the downward API's node name),
// privileges, hostPID, and every volume at its host path with its read-only flag and mount
// propagation. Then a pod placed on the node gets its allocation from the plugin through the
// stand-in kubelet, and its container, started by podman from that allocation, is capped.
//
// What is real: tesserad, tessera-device-plugin, the shims, simgpu, podman and runc, TLS to the API
// server with the service account's token and CA (as in-cluster config finds them). Stand-ins,
// named so: kubelet's device manager (TestKubelet, at kubelet's folder), the API server
// (TestApiServer, behind TlsFront for HTTPS), and kubelet's own part of starting a pod, done here
// as kubelet does it (below, StartPod): a field this test does not know how kubelet applies fails
// the test instead of being skipped. The only changes made to the manifest's pod are the ones a
// node without a GPU needs, each listed in SimulatedNode: `--sim` for tesserad and the plugin, the
// simulated GPUs' variables, and runc for the RuntimeClass nvidia (no NVIDIA runtime here).
//
// The host: the test process runs in mount and network namespaces of its own (NodeNamespace), so
// every hostPath of the manifest (/run/tessera, /var/lib/kubelet/device-plugins, /dev/shm, ...) is
// a private tmpfs there, made shared as kubelet requires for Bidirectional propagation, and the
// pod's network (hostNetwork false) is that namespace's, where the stand-in API server listens.
// podman runs in those namespaces; nothing of the real host's paths is touched. Set
// TESSERA_NODE_MANIFEST=FILE to run another manifest (the way to see a broken one fail).
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "k8s/annotations.h"
#include "k8s/api_client.h"
#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"
#include "testing/standins/test_kubelet.h"
#include "testing/support/node_manifest.h"
#include "testing/support/podman.h"
#include "testing/support/test_support.h"
#include "testing/support/tls_front.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using process::BuildDir;
using testing::AssignmentJson;
using testing::kGiB;
using testing::ManifestDaemonSet;
using testing::PodJson;
using testing::Scalar;
using testing::WaitUntil;

constexpr char kNode[] = "gpu-node-1";
constexpr char kModeLabel[] = "tessera.io/gpu.schedule";
// kubelet's device-plugin folder (fixed in kubelet; a plugin registers at kubelet.sock there).
constexpr char kKubeletPluginDir[] = "/var/lib/kubelet/device-plugins";
constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr char kSimGpus[] = "SimA:16GiB:80,SimA:16GiB:80";
// A mig node: one simulated H100 of 8 GiB in MIG mode, cut before the node's pod starts, as an
// operator would, by `tessera mig apply` from the node's image: 3g.40gb (4 GiB) and two 1g.10gb
// (1 GiB each).
// What reads the device's total memory in a tenant: NVML (what nvidia-smi reads), or on a MIG
// instance CUDA (NVML's device indices are the physical GPUs; the instance is a MIG handle).
constexpr char kNvmlViewer[] = "/opt/tenants/nvml_tenant";
constexpr char kCudaViewer[] = "/opt/tenants/shim_tenant meminfo";
constexpr char kSimMigGpus[] = "H100-80GB:8GiB:132:mig=H100-80GB";

std::string ManifestPath() {
  const char* v = std::getenv("TESSERA_NODE_MANIFEST");
  return v != nullptr && *v != '\0' ? v
                                    : std::string(TESSERA_SOURCE_DIR) +
                                          "/deploy/kubernetes/device-plugin/tessera-node.yaml";
}

// The test process's own mount and network namespaces, made before any test (single-threaded).
class NodeNamespace : public ::testing::Environment {
 public:
  void SetUp() override {
    // podman's locks live in the host's /dev/shm (libpod_lock); made by its first run, here.
    if (!podman::Problem().empty()) return;
    if (unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) {
      error = std::string("unshare(CLONE_NEWNS | CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      error = std::string("making / private: ") + std::strerror(errno);
      return;
    }
    // The loopback device is down in a new network namespace.
    const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (s < 0 || ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
      error = std::string("bringing lo up: ") + std::strerror(errno);
    }
    if (s >= 0) close(s);
  }
  static std::string error;
};
std::string NodeNamespace::error;
const auto* const kNamespace = ::testing::AddGlobalTestEnvironment(new NodeNamespace);

// A private, shared tmpfs at `path` in the test's mount namespace (the folder is made on the host
// if missing, as kubelet's DirectoryOrCreate would). /dev/shm keeps podman's lock file.
Status PrivateHostPath(const std::string& path, std::vector<std::string>* mounted) {
  if (std::system(("mkdir -p " + podman::ShellQuote(path)).c_str()) != 0) {
    return Status::Error("mkdir -p " + path);
  }
  std::string keep;
  if (path == "/dev/shm") {
    keep = "/run/tessera-test-" + std::to_string(getpid()) + "-host-shm";
    mkdir(keep.c_str(), 0700);
    if (mount("/dev/shm", keep.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Status::Error("bind /dev/shm: " + std::string(std::strerror(errno)));
    }
  }
  if (mount("tmpfs", path.c_str(), "tmpfs", 0, "mode=0755") != 0) {
    return Status::Error("tmpfs on " + path + ": " + std::strerror(errno));
  }
  mounted->push_back(path);
  if (mount(nullptr, path.c_str(), nullptr, MS_SHARED, nullptr) != 0) {
    return Status::Error("making " + path + " shared: " + std::strerror(errno));
  }
  if (!keep.empty()) {
    chmod(path.c_str(), 01777);
    const std::string lock = path + "/libpod_lock";
    std::ofstream(lock).close();
    if (mount((keep + "/libpod_lock").c_str(), lock.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Status::Error("podman's lock into the private /dev/shm: " +
                           std::string(std::strerror(errno)));
    }
    umount2(keep.c_str(), MNT_DETACH);
    rmdir(keep.c_str());
  }
  return Status::Ok();
}

// A node image as docs/kubernetes.md ("Deploying") says to build one: the build's programs and
// shims under /opt/tessera, plus simgpu beside them for a simulated node.
podman::ImageContents NodeImage() {
  podman::ImageContents c;
  c.name = "node";
  for (const char* p : {"tesserad", "tessera-device-plugin", "tessera"}) {
    c.files.push_back({BuildDir() + "/bin/" + p, std::string("/opt/tessera/bin/") + p});
  }
  for (const char* l : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    c.files.push_back(
        {BuildDir() + "/lib/tessera/" + l, std::string("/opt/tessera/lib/tessera/") + l});
  }
  c.files.push_back(
      {BuildDir() + "/lib/libtessera-simgpu.so", "/opt/tessera/lib/libtessera-simgpu.so"});
  // What NVIDIA's runtime brings into a container asking "compute": nvidia-cuda-mps-control. Here
  // mps_control_standin, a STAND-IN for it (keeps the pid file, records what it is asked, runs
  // nothing on a GPU), where the toolkit puts the real one.
  c.files.push_back(
      {BuildDir() + "/tests/mps_control_standin", "/usr/bin/nvidia-cuda-mps-control"});
  return c;
}

podman::ImageContents TenantImage() {
  podman::ImageContents c;
  c.name = "tenants";
  for (const char* t : {"preload_tenant", "nvml_tenant", "shim_tenant"}) {
    c.files.push_back({BuildDir() + "/tests/" + t, std::string("/opt/tenants/") + t});
  }
  c.libraries_of = {BuildDir() + "/lib/tessera/libcuda.so.1",
                    BuildDir() + "/lib/tessera/libnvidia-ml.so.1",
                    BuildDir() + "/lib/libtessera-simgpu.so"};
  return c;
}

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

class NodeDeploymentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_PODMAN();
    ASSERT_EQ(NodeNamespace::error, "") << "the test needs namespaces of its own (root)";
    scratch_ = "/tmp/" + process::UniqueName("tessera-node-deploy");
    ASSERT_EQ(std::system(("mkdir -p " + scratch_).c_str()), 0);
    for (auto [image, contents] :
         {std::pair{&node_image_, NodeImage()}, std::pair{&tenant_image_, TenantImage()}}) {
      auto built = podman::Image::Build(contents);
      ASSERT_TRUE(built.ok()) << built.error();
      *image = *built;
    }
  }

  void TearDown() override {
    tenants_.clear();
    // kubelet stops a pod's containers with SIGTERM; a clean stop is exit 0.
    for (auto& [name, c] : node_) {
      if (!c->started()) continue;
      EXPECT_TRUE(c->Kill(SIGTERM).ok());
      const std::optional<int> status = c->Wait(20s);
      EXPECT_EQ(status, 0) << "container " << name << " did not stop cleanly";
    }
    node_.clear();
    kubelet_.reset();
    if (client_) client_->Stop();
    if (front_) front_->Stop();
    api_.Stop();
    for (auto it = mounted_.rbegin(); it != mounted_.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
    std::system(("rm -rf " + scratch_).c_str());
  }

  // The node's pod: the one DaemonSet of the manifest that runs on a node labelled `mode`.
  void StartNode(const std::string& mode) {
    mode_ = mode;
    const std::string file = ManifestPath();
    auto sets = testing::LoadDaemonSets(file);
    ASSERT_TRUE(sets.ok()) << sets.error();
    sets_ = std::move(*sets);
    auto matching = testing::DaemonSetsFor(sets_, {{kModeLabel, mode}});
    ASSERT_TRUE(matching.ok()) << matching.error();
    ASSERT_EQ(matching->size(), 1u)
        << file << ": " << matching->size() << " DaemonSets run on a node labelled " << kModeLabel
        << "=" << mode << "; expected exactly one";
    ds_ = *(*matching)[0];
    const ManifestDaemonSet& ds = ds_;
    std::printf("[ manifest ] %s: DaemonSet %s/%s on a %s node\n", file.c_str(), ds.ns.c_str(),
                ds.name.c_str(), mode.c_str());

    // The cluster: the API server (HTTPS, as a pod reaches it) and the node object.
    ASSERT_TRUE(api_.Start().ok());
    front_ = std::make_unique<testing::TlsFront>(api_.port());
    ASSERT_TRUE(front_->Start().ok());
    ClientConfig c;
    c.server = api_.url();
    client_ = std::make_unique<ApiClient>(c);
    Json labels = {{kModeLabel, mode}};
    for (const auto& [k, v] : extra_labels_) labels[k] = v;
    api_.CreateNode({{"metadata", {{"name", kNode}, {"labels", labels}}}});

    ASSERT_NO_FATAL_FAILURE(StartPod(ds));
    // The stand-in kubelet at kubelet's folder, now a private tmpfs (the manifest's hostPath).
    kubelet_ = std::make_unique<TestKubelet>(kKubeletPluginDir);
    ASSERT_TRUE(kubelet_->Start().ok());
  }

  // kubelet's part: the pod's volumes, then each container, as kubelet and a CRI runtime do.
  void StartPod(const ManifestDaemonSet& ds) {
    const YAML::Node spec = ds.pod_spec;
    static const std::set<std::string> kPodFields = {"serviceAccountName",
                                                     "priorityClassName",
                                                     "runtimeClassName",
                                                     "hostPID",
                                                     "hostNetwork",
                                                     "affinity",
                                                     "nodeSelector",
                                                     "tolerations",
                                                     "containers",
                                                     "volumes",
                                                     "terminationGracePeriodSeconds"};
    for (const auto& kv : spec) {
      ASSERT_TRUE(kPodFields.count(Scalar(kv.first)))
          << "pod field " << Scalar(kv.first) << ": this test does not know how kubelet applies it";
    }
    ASSERT_FALSE(spec["hostNetwork"] && spec["hostNetwork"].as<bool>())
        << "hostNetwork: the test runs the pod in the pod network only";
    const std::string runtime_class = Scalar(spec["runtimeClassName"]);
    if (!runtime_class.empty()) {
      ASSERT_EQ(runtime_class, "nvidia") << "a RuntimeClass this test does not know";
      std::printf("[ node     ] RuntimeClass %s: runc here (no NVIDIA runtime on this host)\n",
                  runtime_class.c_str());
    }
    // Volumes: host paths, private to the test.
    std::map<std::string, std::string> volumes;  // name -> host path
    for (const YAML::Node& v : spec["volumes"]) {
      const std::string name = Scalar(v["name"]);
      ASSERT_TRUE(v["hostPath"]) << "volume " << name << ": only hostPath volumes are run here";
      const std::string path = Scalar(v["hostPath"]["path"]);
      const std::string type = Scalar(v["hostPath"]["type"]);
      ASSERT_TRUE(type.empty() || type == "DirectoryOrCreate" || type == "Directory")
          << "volume " << name << ": hostPath type " << type;
      if (std::find(mounted_.begin(), mounted_.end(), path) == mounted_.end()) {
        Status s = PrivateHostPath(path, &mounted_);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      volumes[name] = path;
    }
    // The service account, as kubelet projects it: token, CA, namespace.
    const std::string account = scratch_ + "/serviceaccount";
    mkdir(account.c_str(), 0755);
    std::ofstream(account + "/token") << "tessera-node-deployment-test-token";
    std::ofstream(account + "/ca.crt") << front_->ca_pem();
    std::ofstream(account + "/namespace") << ds.ns;

    const SimulatedNode sim = Simulate(ds, volumes);
    if (mode_ == "mig") {
      // The operator's step before the node's pod: cut the GPU (docs/kubernetes.md, "mig nodes").
      podman::RunOptions cut;
      cut.image = node_image_;
      cut.command = {"/opt/tessera/bin/tessera",
                     "mig",
                     "apply",
                     "--sim",
                     "--gpu",
                     "H100-80GB",
                     "3g.40gb=1",
                     "1g.10gb=2"};
      cut.env = sim.env;
      cut.volumes = {{sim.folder, sim.folder, ""}};
      podman::Container c("mig-apply", cut);
      c.process().DrainOutput(30s);
      ASSERT_EQ(c.Wait(30s), 0) << "tessera mig apply in the node's image";
    }
    for (const YAML::Node& ctr : spec["containers"]) {
      podman::RunOptions o;
      const std::string name = Scalar(ctr["name"]);
      static const std::set<std::string> kContainerFields = {
          "name",  "image",           "command",      "args",      "env",
          "ports", "securityContext", "volumeMounts", "resources", "imagePullPolicy"};
      for (const auto& kv : ctr) {
        ASSERT_TRUE(kContainerFields.count(Scalar(kv.first)))
            << "container " << name << " field " << Scalar(kv.first)
            << ": this test does not know how kubelet applies it";
      }
      ASSERT_EQ(Scalar(ctr["image"]), "IMAGE") << "container " << name;
      o.image = node_image_;
      ASSERT_TRUE(ctr["command"]) << "container " << name
                                  << ": the image has no entrypoint; the manifest must say";
      for (const YAML::Node& a : ctr["command"]) o.command.push_back(Scalar(a));
      for (const YAML::Node& a : ctr["args"]) o.command.push_back(Scalar(a));
      for (const YAML::Node& e : ctr["env"]) {
        const std::string key = Scalar(e["name"]);
        if (e["value"]) {
          o.env.push_back(key + "=" + Scalar(e["value"]));
          continue;
        }
        const std::string field = Scalar(e["valueFrom"]["fieldRef"]["fieldPath"]);
        static const std::map<std::string, std::string> kFields = {
            {"spec.nodeName", kNode},
            {"metadata.namespace", ds.ns},
            {"metadata.name", ds.name + "-x7k2p"},
            {"status.hostIP", "127.0.0.1"},
            {"status.podIP", "127.0.0.1"}};
        ASSERT_TRUE(kFields.count(field))
            << "container " << name << " env " << key << ": the downward API field " << field;
        o.env.push_back(key + "=" + kFields.at(field));
      }
      // What kubelet adds to every container: the API server's service and the account.
      o.env.push_back("KUBERNETES_SERVICE_HOST=127.0.0.1");
      o.env.push_back("KUBERNETES_SERVICE_PORT=" + std::to_string(front_->port()));
      o.volumes.push_back({account, kServiceAccountDir, "ro"});
      const YAML::Node security = ctr["securityContext"];
      for (const auto& kv : security) {
        ASSERT_EQ(Scalar(kv.first), "privileged")
            << "container " << name << " securityContext." << Scalar(kv.first);
      }
      o.privileged = security && security["privileged"] && security["privileged"].as<bool>();
      if (spec["hostPID"] && spec["hostPID"].as<bool>()) o.pid = "host";
      // hostNetwork false: the pod's network, which is this test's namespace (the API server's).
      o.network = "host";
      for (const YAML::Node& m : ctr["volumeMounts"]) {
        const std::string volume = Scalar(m["name"]);
        ASSERT_TRUE(volumes.count(volume)) << "container " << name << " mounts volume " << volume
                                           << ", which the pod does not have";
        ASSERT_FALSE(m["subPath"]) << "subPath is not run here";
        std::vector<std::string> options;
        if (m["readOnly"] && m["readOnly"].as<bool>()) options.push_back("ro");
        const std::string propagation = Scalar(m["mountPropagation"]);
        if (propagation == "Bidirectional") {
          // kubelet refuses the pod otherwise.
          ASSERT_TRUE(o.privileged) << "container " << name << ": Bidirectional propagation of "
                                    << volume << " needs a privileged container";
          options.push_back("rshared");
        } else if (propagation == "HostToContainer") {
          options.push_back("rslave");
        } else {
          ASSERT_TRUE(propagation.empty() || propagation == "None")
              << "mountPropagation " << propagation;
          options.push_back("rprivate");
        }
        std::string joined;
        for (const std::string& opt : options) joined += (joined.empty() ? "" : ",") + opt;
        o.volumes.push_back({volumes[volume], Scalar(m["mountPath"]), joined});
      }
      // A simulated node: what SimulatedNode says, and nothing else.
      const std::string program = Basename(o.command.empty() ? "" : o.command[0]);
      if (sim.flag_for.count(program)) o.command.push_back("--sim");
      o.env.insert(o.env.end(), sim.env.begin(), sim.env.end());
      // Sanitizer builds: LeakSanitizer's report on exit is what makes a clean stop fail.
      o.env.push_back("ASAN_OPTIONS=detect_leaks=1");
      o.timeout = 300s;
      std::string shown;
      for (const std::string& a : o.command) shown += " " + a;
      std::printf("[ node     ] container %s:%s\n", name.c_str(), shown.c_str());
      node_.emplace_back(name, std::make_unique<podman::Container>("node-" + name, o));
      ASSERT_TRUE(node_.back().second->started());
    }
  }

  // What a node without a GPU changes in the pod: tesserad and the plugin get `--sim`, and both
  // the simulated GPUs' variables, the state being a file in a folder both mount at its host path
  // (docs/contracts.md, "The simulated GPU").
  struct SimulatedNode {
    std::set<std::string> flag_for;
    std::vector<std::string> env;
    std::string folder;  // the host path the simulated GPUs' state is in
  };
  SimulatedNode Simulate(const ManifestDaemonSet& ds,
                         const std::map<std::string, std::string>& volumes) {
    SimulatedNode sim{{"tesserad", "tessera-device-plugin"}, {}, ""};
    // A hostPath every container mounts at its own path.
    std::map<std::string, int> shared;  // host path -> containers mounting it there
    int containers = 0;
    for (const YAML::Node& ctr : ds.pod_spec["containers"]) {
      ++containers;
      for (const YAML::Node& m : ctr["volumeMounts"]) {
        const auto it = volumes.find(Scalar(m["name"]));
        if (it != volumes.end() && it->second == Scalar(m["mountPath"])) ++shared[it->second];
      }
    }
    std::string folder;
    for (const auto& [path, n] : shared) {
      if (n == containers && path != "/dev/shm") folder = path;
    }
    EXPECT_FALSE(folder.empty())
        << "no hostPath is mounted at its own path in every container: the simulated GPUs' "
           "state has nowhere both tesserad and the plugin see it";
    sim.folder = folder;
    sim.env = {"TESSERA_SIM_GPUS=" + std::string(mode_ == "mig" ? kSimMigGpus : kSimGpus),
               "TESSERA_SIM_STATE=" + folder + "/tessera-sim-state"};
    return sim;
  }

  // Places `name` (one container "c" asking `limits`) on device `uuid` with `mem` bytes and `core`
  // percent, as the extender would, and admits it.
  TestKubelet::ContainerAllocation Admit(const std::string& name,
                                         const std::map<std::string, std::string>& limits,
                                         const std::string& uuid, uint64_t mem, int core) {
    Json pod = PodJson("team", name, {{"c", limits}});
    pod["metadata"]["annotations"][kAssignmentAnnotation] =
        AssignmentJson(kNode, 1, {{"c", {{uuid, mem, core}}}});
    pod["metadata"]["annotations"][kPhaseAnnotation] = "assumed";
    const Json created = api_.CreatePod(pod);
    EXPECT_TRUE(client_->BindPod("team", name, created["metadata"]["uid"], kNode).ok());
    const Json bound = *api_.GetPod("team", name);
    auto admitted = kubelet_->Admit(bound);
    EXPECT_TRUE(admitted.ok()) << admitted.error();
    if (!admitted.ok() || admitted->size() != 1) return {};
    Status pre = kubelet_->PreStart(bound["metadata"]["uid"], "c");
    EXPECT_TRUE(pre.ok()) << pre.message();
    return (*admitted)[0];
  }

  podman::Container* RunTenant(const TestKubelet::ContainerAllocation& a,
                               const std::vector<std::string>& command) {
    podman::RunOptions o;
    o.image = tenant_image_;
    o.command = command;
    o.devices = a.cdi_devices;
    for (const auto& [k, v] : a.envs) o.env.push_back(k + "=" + v);
    for (const auto& m : a.mounts) {
      o.volumes.push_back({m.host_path, m.container_path, m.read_only ? "ro" : ""});
    }
    o.env.push_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
    o.timeout = 60s;
    tenants_.push_back(std::make_unique<podman::Container>("tenant", o));
    return tenants_.back().get();
  }

  Json NodeUp(const std::string& mode);
  std::map<std::string, std::string> TenantCapped(const std::map<std::string, std::string>& limits,
                                                  const std::string& uuid, uint64_t cap, int core,
                                                  const std::string& prelude,
                                                  const std::string& viewer = kNvmlViewer);

  // Fails the test when a container of the node's pod has exited.
  void ExpectNodeRunning() {
    for (auto& [name, c] : node_) {
      EXPECT_FALSE(c->Wait(0ms).has_value()) << "the node's container " << name << " exited";
    }
  }

  std::vector<ManifestDaemonSet> sets_;
  std::string mode_;
  std::map<std::string, std::string> extra_labels_;  // the node's labels beside its mode's
  ManifestDaemonSet ds_;                             // the one that runs on the node under test
  std::string scratch_, node_image_, tenant_image_;
  std::vector<std::string> mounted_;
  TestApiServer api_;
  std::unique_ptr<testing::TlsFront> front_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<TestKubelet> kubelet_;
  std::vector<std::pair<std::string, std::unique_ptr<podman::Container>>> node_;
  std::vector<std::unique_ptr<podman::Container>> tenants_;
};

// The node of `mode` comes up as the manifest says: the plugin registers its resources with
// kubelet and publishes the node's GPUs, having reached the API server over TLS with its service
// account; tesserad's metrics port (the containerPort named metrics) answers in the pod's network.
// Returns the node's tessera.io/gpu-inventory.
Json NodeDeploymentTest::NodeUp(const std::string& mode) {
  StartNode(mode);
  if (HasFatalFailure()) return Json();
  const std::vector<std::string> resources =
      mode == "mig" ? std::vector<std::string>{"tessera.io/mig-1g.10gb", "tessera.io/mig-3g.40gb"}
                    : std::vector<std::string>{"tessera.io/gpu-mem", "tessera.io/gpu-core"};
  for (const std::string& r : resources) {
    EXPECT_TRUE(kubelet_->WaitForResource(r, 30s)) << r << " was not registered with kubelet";
    if (HasFailure()) return Json();
  }
  std::string inventory;
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto node = api_.GetNode(kNode);
        const Json annotations =
            node ? (*node)["metadata"].value("annotations", Json::object()) : Json::object();
        inventory = annotations.value(kInventoryAnnotation, "");
        return !inventory.empty();
      },
      20s))
      << "the plugin published no " << kInventoryAnnotation;
  EXPECT_GT(front_->handshakes(), 0) << "the plugin never reached the API server over TLS";
  if (HasFailure()) return Json();
  const Json gpus = Json::parse(inventory);
  EXPECT_EQ(gpus.value("mode", ""), mode);
  EXPECT_TRUE(gpus.contains("gpus") && gpus["gpus"].size() == (mode == "mig" ? 3u : 2u))
      << inventory;
  int metrics_port = 0;
  for (const YAML::Node& ctr : ds_.pod_spec["containers"]) {
    for (const YAML::Node& p : ctr["ports"]) {
      if (Scalar(p["name"]) == "metrics") metrics_port = p["containerPort"].as<int>();
    }
  }
  if (metrics_port > 0) {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(metrics_port));
    EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << "nothing listens on the metrics port " << metrics_port;
    close(s);
  }
  return gpus;
}

// A tenant asking `limits`, placed on device `uuid` with `cap` bytes and `core` percent, stops at
// exactly its cap and `viewer` reads the cap as the device's total. `prelude` runs first in the
// tenant's container (its key=value lines come back too).
std::map<std::string, std::string> NodeDeploymentTest::TenantCapped(
    const std::map<std::string, std::string>& limits, const std::string& uuid, uint64_t cap,
    int core, const std::string& prelude, const std::string& viewer) {
  const TestKubelet::ContainerAllocation a = Admit("capped", limits, uuid, cap, core);
  if (HasFailure()) return {};
  podman::Container* t =
      RunTenant(a, {"/bin/sh", "-c", prelude + "/opt/tenants/preload_tenant; " + viewer});
  t->process().DrainOutput(40s);
  EXPECT_EQ(t->Wait(20s), 0);
  const auto& v = t->process().values();
  auto value = [&](const char* k) { return v.count(k) ? v.at(k) : std::string("(none)"); };
  EXPECT_EQ(value("allocated"), std::to_string(cap)) << "the tenant's cap, exactly";
  EXPECT_EQ(value("failure"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(value("total"), std::to_string(cap)) << viewer << "'s total";
  ExpectNodeRunning();
  return v;
}

const std::map<std::string, std::string> kShare = {{"tessera.io/gpu-mem", "3"},
                                                   {"tessera.io/gpu-core", "50"}};

TEST_F(NodeDeploymentTest, TheShippedDaemonSetRunsACoreMemNodeAndItsTenantIsCapped) {
  const Json inventory = NodeUp("core_mem");
  ASSERT_FALSE(HasFailure());
  TenantCapped(kShare, inventory["gpus"][0]["uuid"], 3 * kGiB, 50, "");
}

TEST_F(NodeDeploymentTest, TheShippedMigDaemonSetServesTheInstancesAndATenantStopsAtItsOwn) {
  const Json inventory = NodeUp("mig");
  ASSERT_FALSE(HasFailure());
  std::string small;  // a 1g.10gb instance
  for (const Json& g : inventory["gpus"]) {
    if (g.contains("mig") && g["mig"].value("profile", "") == "1g.10gb") small = g["uuid"];
  }
  ASSERT_EQ(small.rfind("MIG-", 0), 0u) << inventory.dump();
  // A MIG instance is its container's alone: its whole time (core 100).
  TenantCapped({{"tessera.io/mig-1g.10gb", "1"}}, small, kGiB, 100, "", kCudaViewer);
}

TEST_F(NodeDeploymentTest, TheShippedMpsDaemonSetRunsAnMpsNodeAndItsTenantIsAClient) {
  const Json inventory = NodeUp("mps");
  ASSERT_FALSE(HasFailure());
  // The tenant reaches its GPU's control daemon through the mounted pipe folder, and its /dev/shm
  // is that daemon's, holding nothing of tesserad's.
  const auto v =
      TenantCapped(kShare, inventory["gpus"][0]["uuid"], 3 * kGiB, 50,
                   "echo pid=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"); "
                   "echo server_shm=$(cat /dev/shm/tessera-mps-standin.* 2>/dev/null); "
                   "echo ledgers=$(ls /dev/shm | grep -c tessera-ledger); ");
  const std::string pid = v.count("pid") ? v.at("pid") : "";
  EXPECT_FALSE(pid.empty()) << "no control daemon's pid file in the tenant's pipe folder";
  EXPECT_EQ(v.count("server_shm") ? v.at("server_shm") : "", pid);
  EXPECT_EQ(v.count("ledgers") ? v.at("ledgers") : "", "0");
}

// A node of mixed modes by its labels alone: the node core_mem, GPU 0 labelled mps. The shared
// DaemonSet's tesserad runs MPS on no GPU at start (--mps-gpus none); the plugin has it start GPU
// 0's control daemon. A tenant on GPU 0 is an MPS client of it; one on GPU 1 is none.
TEST_F(NodeDeploymentTest, gpu_modes_TheSharesDaemonSetStartsMpsOnTheGpuLabelledSo) {
  extra_labels_ = {{std::string(kGpuScheduleLabelPrefix) + "0", "mps"}};
  const Json inventory = NodeUp("core_mem");
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(ds_.name, "tessera-node");
  std::string mode0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto node = api_.GetNode(kNode);
        const Json annotations =
            node ? (*node)["metadata"].value("annotations", Json::object()) : Json::object();
        const Json inv = Json::parse(annotations.value(kInventoryAnnotation, "{}"));
        mode0 =
            inv.contains("gpus") && !inv["gpus"].empty() ? inv["gpus"][0].value("mode", "") : "";
        return mode0 == "mps";
      },
      20s))
      << "GPU 0 is served in mode " << mode0;
  const auto v =
      TenantCapped(kShare, inventory["gpus"][0]["uuid"], 3 * kGiB, 50,
                   "echo pid=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid\"); "
                   "echo server_shm=$(cat /dev/shm/tessera-mps-standin.* 2>/dev/null); ");
  const std::string pid = v.count("pid") ? v.at("pid") : "";
  EXPECT_FALSE(pid.empty()) << "no control daemon's pid file in the tenant's pipe folder";
  EXPECT_EQ(v.count("server_shm") ? v.at("server_shm") : "", pid);
  const TestKubelet::ContainerAllocation plain =
      Admit("plain", kShare, inventory["gpus"][1]["uuid"], 3 * kGiB, 50);
  EXPECT_EQ(plain.envs.count("CUDA_MPS_PIPE_DIRECTORY"), 0u) << "GPU 1 runs no MPS";
  EXPECT_EQ(plain.envs.count("TESSERA_VISIBLE_DEVICES"), 1u);
}

}  // namespace
}  // namespace tessera::k8s
