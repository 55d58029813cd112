// tessera-device-plugin's containers under a real container runtime: podman + runc start each
// tenant from the CDI device the plugin answers Allocate with (`--cdi`; podman resolves it from the
// spec the plugin wrote in /var/run/cdi), in an image of its own (busybox, the tenant programs and
// their libraries: no libcuda, no Tessera), with its own /dev/shm and mount namespace. Real:
// the plugin program, tesserad on simulated GPUs, the shims, simgpu, podman, runc. Stand-ins
// (named so): kubelet's device manager (TestKubelet) and the API server (TestApiServer).
// The cases bounded by times or shares (a killed container's memory back within 1 s, 30/70) are
// their own CTest entry, labelled timing.
#include <glob.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "ipc/futex.h"
#include "k8s/api_client.h"
#include "k8s/deviceplugin/allocator.h"
#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"
#include "testing/standins/test_kubelet.h"
#include "testing/support/podman.h"
#include "testing/support/test_support.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using process::BuildDir;
using process::ChildProcess;
using testing::AssignmentJson;
using ::testing::HasSubstr;
using testing::kGiB;
using testing::PodJson;
using testing::SimNode;
using testing::WaitUntil;

constexpr char kNode[] = "gpu-node-1";
// Where podman 4 reads CDI specs (and so where a node's plugin writes them).
constexpr char kCdiDir[] = "/var/run/cdi";

// The tenants' image: the test programs and the libraries they and the mounted shims and simgpu
// load. Nothing of Tessera: the plugin's CDI spec brings it.
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

class RuntimeTest : public ::testing::Test {
 protected:
  RuntimeTest() : node_("SimA:16GiB:80,SimA:16GiB:80", {"--policy", "3"}) {}

  void SetUp() override {
    TESSERA_REQUIRE_PODMAN();
    auto image = podman::Image::Build(TenantImage());
    ASSERT_TRUE(image.ok()) << image.error();
    image_ = *image;
    ASSERT_TRUE(node_.Start());
    ASSERT_TRUE(api_.Start().ok());
    ClientConfig c;
    c.server = api_.url();
    client_ = std::make_unique<ApiClient>(c);
    api_.CreateNode({{"metadata", {{"name", kNode}, {"labels", Json::object()}}}});
    const std::string kubeconfig = node_.Scratch("kube") + "/config";
    std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                                 "contexts: [{name: test, context: {cluster: c, user: u}}]\n"
                                 "clusters: [{name: c, cluster: {server: \""
                              << api_.url() << "\"}}]\nusers: [{name: u, user: {token: t}}]\n";
    const std::string plugin_dir = node_.Scratch("device-plugins");
    kubelet_ = std::make_unique<TestKubelet>(plugin_dir);
    ASSERT_TRUE(kubelet_->Start().ok());
    plugin_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            BuildDir() + "/bin/tessera-device-plugin", "--node-name", kNode, "--kubeconfig",
            kubeconfig, "--device-plugin-dir", plugin_dir, "--tesserad-socket", node_.socket(),
            "--container-sockets", node_.container_sockets(), "--state-dir", node_.Scratch("state"),
            "--sim", "--cdi", "--cdi-dir", kCdiDir, "--reconcile-interval", "200ms"},
        node_.SimEnv());
    ASSERT_TRUE(plugin_->started());
    for (const char* r : {"tessera.io/gpu-mem", "tessera.io/gpu-core"}) {
      ASSERT_TRUE(kubelet_->WaitForResource(r, 30s)) << r << " was not registered";
    }
  }

  void TearDown() override {
    containers_.clear();
    if (plugin_) {
      plugin_->Kill(SIGTERM);
      EXPECT_EQ(plugin_->Wait(20s), 0) << "tessera-device-plugin did not stop cleanly";
    }
    kubelet_.reset();
    if (client_) client_->Stop();
    api_.Stop();
    // The specs of this test's pods, had a failure left any behind.
    glob_t g{};
    if (glob((std::string(kCdiDir) + "/tessera.io-container-k8s." + prefix_ + "*").c_str(), 0,
             nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) unlink(g.gl_pathv[i]);
    }
    globfree(&g);
  }

  // The extender's part (its decision in tessera.io/assignment, then a Binding), then kubelet's
  // admission: the allocation of the pod's one container "c".
  TestKubelet::ContainerAllocation Admit(const std::string& name, uint64_t mem_gib, int core) {
    const std::string gpu0 = node_.Uuid(0);
    Json pod = PodJson("team", prefix_ + name,
                       {{"c",
                         {{"tessera.io/gpu-mem", std::to_string(mem_gib)},
                          {"tessera.io/gpu-core", std::to_string(core)}}}});
    pod["metadata"]["annotations"][kAssignmentAnnotation] =
        AssignmentJson(kNode, ++seq_, {{"c", {{gpu0, mem_gib * kGiB, core}}}});
    pod["metadata"]["annotations"][kPhaseAnnotation] = "assumed";
    const Json created = api_.CreatePod(pod);
    EXPECT_TRUE(client_->BindPod("team", prefix_ + name, created["metadata"]["uid"], kNode).ok());
    const Json bound = *api_.GetPod("team", prefix_ + name);
    auto admitted = kubelet_->Admit(bound);
    EXPECT_TRUE(admitted.ok()) << admitted.error();
    if (!admitted.ok() || admitted->size() != 1) return {};
    EXPECT_TRUE(kubelet_->PreStart(bound["metadata"]["uid"], "c").ok());
    ids_[name] = Allocator::ContainerId(*PodFromJson(bound), "c");
    return (*admitted)[0];
  }

  // Starts a container of the tenants' image as a runtime does from kubelet's CRI request: the
  // allocation's CDI devices, environment and mounts, nothing else of the node.
  podman::Container* Run(const TestKubelet::ContainerAllocation& a,
                         const std::vector<std::string>& command) {
    podman::RunOptions o;
    o.image = image_;
    o.command = command;
    o.devices = a.cdi_devices;
    for (const auto& [k, v] : a.envs) o.env.push_back(k + "=" + v);
    for (const auto& m : a.mounts) {
      o.volumes.push_back({m.host_path, m.container_path, m.read_only ? "ro" : ""});
    }
    // The sanitizer builds' shims load into programs that link no sanitizer runtime first.
    o.env.push_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
    o.timeout = 60s;
    containers_.push_back(std::make_unique<podman::Container>("tenant", o));
    EXPECT_TRUE(containers_.back()->started());
    return containers_.back().get();
  }

  // simgpu's free memory of GPU 0 as the node sees it (no shim: the simulated device itself).
  uint64_t NodeFreeBytes() {
    std::vector<std::string> env = node_.SimEnv();
    ChildProcess p(
        {BuildDir() + "/tests/sim_tenant", BuildDir() + "/lib/libtessera-simgpu.so", "meminfo"},
        env);
    auto free = p.WaitForKey("free", 20s);
    EXPECT_TRUE(free.has_value()) << "sim_tenant meminfo";
    p.Wait(10s);
    return free ? std::stoull(*free) : 0;
  }

  Bytes UsedInTesserad(const std::string& name) {
    const TesseradStatus s = node_.Status();
    const TesseradContainer* c = s.Find(ids_[name]);
    return c != nullptr && !c->used.empty() ? c->used[0] : Bytes(0);
  }

  // The spin case's check; defined below, beside its tests.
  void ThirtyBesideSeventy(int seconds);

  SimNode node_;
  TestApiServer api_;
  std::unique_ptr<ApiClient> client_;
  std::unique_ptr<TestKubelet> kubelet_;
  std::unique_ptr<ChildProcess> plugin_;
  std::vector<std::unique_ptr<podman::Container>> containers_;
  std::map<std::string, std::string> ids_;  // pod name (less prefix) -> tesserad container id
  std::string image_;
  // Pod names start with this: spec files in the shared /var/run/cdi are this test's own.
  const std::string prefix_ = "rt" + std::to_string(getpid()) + "-";
  uint64_t seq_ = 0;
};

TEST_F(RuntimeTest, ACdiContainerStopsAtExactlyItsCapAndSeesItInNvml) {
  const TestKubelet::ContainerAllocation a = Admit("capped", 2, 30);
  ASSERT_EQ(a.cdi_devices.size(), 1u);
  EXPECT_EQ(a.cdi_devices[0], CdiQualifiedName(ids_["capped"]));
  EXPECT_TRUE(a.mounts.empty()) << "with --cdi everything comes through the spec";
  // A program that links no libcuda, captured by /etc/ld.so.preload alone, then what NVML (what
  // nvidia-smi reads) says of the GPU.
  podman::Container* c = Run(a, {"/bin/sh", "-c",
                                 "/opt/tenants/preload_tenant; echo preload_exit=$?; "
                                 "/opt/tenants/nvml_tenant; echo nvml_exit=$?"});
  c->process().DrainOutput(40s);
  EXPECT_EQ(c->Wait(20s), 0);
  const auto& v = c->process().values();
  auto value = [&](const char* k) { return v.count(k) ? v.at(k) : std::string("(none)"); };
  EXPECT_EQ(value("allocated"), std::to_string(2 * kGiB)) << "the cap, exactly";
  EXPECT_EQ(value("failure"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_THAT(value("cuMemAlloc_v2_from"), HasSubstr("/usr/local/tessera/lib/libcuda.so.1"));
  EXPECT_EQ(value("preload_exit"), "0");
  EXPECT_EQ(value("total"), std::to_string(2 * kGiB)) << "NVML's total is the cap";
  EXPECT_EQ(value("v2_total"), std::to_string(2 * kGiB));
  EXPECT_EQ(value("nvml_exit"), "0");
  const TesseradStatus s = node_.Status();
  const TesseradContainer* t = s.Find(ids_["capped"]);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->limits[0], Bytes(2 * kGiB));
  EXPECT_EQ(t->core_percent, 30u);
}

TEST_F(RuntimeTest, TheContainersSimulatedGpuIsTheNodes) {
  // With --sim, the node's simulated GPUs are a file the spec mounts: memory a container takes
  // is gone from the node's GPU, not from a simulated machine of the container's own /dev/shm.
  const uint64_t before = NodeFreeBytes();
  const TestKubelet::ContainerAllocation a = Admit("sim", 4, 100);
  podman::Container* c = Run(a, {"/opt/tenants/shim_tenant", "hold", std::to_string(3 * kGiB)});
  ASSERT_TRUE(c->process().WaitForKey("ready", 30s).has_value()) << "the tenant did not start";
  EXPECT_EQ(before - NodeFreeBytes(), 3 * kGiB)
      << "the container allocated on a simulated GPU other than the node's";
  EXPECT_EQ(UsedInTesserad("sim"), Bytes(3 * kGiB));
  // The node's NVML names the container's process by the pid the node sees (the container has
  // its own PID namespace, where the tenant is pid 1), as tesserad does.
  const std::optional<pid_t> host_pid = c->HostPid(10s);
  ASSERT_TRUE(host_pid.has_value());
  ChildProcess nvml(
      {BuildDir() + "/tests/sim_tenant", BuildDir() + "/lib/libtessera-simgpu.so", "processes"},
      node_.SimEnv());
  nvml.DrainOutput(20s);
  EXPECT_EQ(nvml.Wait(10s), 0);
  std::map<std::string, std::string> seen;  // pid -> memory
  const auto& v = nvml.values();
  for (int i = 0; v.count("pid_" + std::to_string(i)) != 0; ++i) {
    seen[v.at("pid_" + std::to_string(i))] = v.at("mem_" + std::to_string(i));
  }
  EXPECT_EQ(
      seen,
      (std::map<std::string, std::string>{{std::to_string(*host_pid), std::to_string(3 * kGiB)}}));
  const TesseradStatus status = node_.Status();
  const TesseradContainer* t = status.Find(ids_["sim"]);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->pids, std::vector<pid_t>{*host_pid});
}

TEST_F(RuntimeTest, AKilledContainersMemoryIsBackWithinOneSecond) {
  const TestKubelet::ContainerAllocation a = Admit("killed", 4, 100);
  const uint64_t before = NodeFreeBytes();
  podman::Container* c = Run(a, {"/opt/tenants/shim_tenant", "hold", std::to_string(4 * kGiB)});
  ASSERT_TRUE(c->process().WaitForKey("ready", 30s).has_value()) << "the tenant did not start";
  ASSERT_EQ(UsedInTesserad("killed"), Bytes(4 * kGiB));
  // Killed as the runtime (or the kernel's OOM killer) kills it: SIGKILL to its process, whose
  // host pid podman reported; timed from the signal (not from podman's own command line).
  const std::optional<pid_t> pid = c->HostPid(10s);
  ASSERT_TRUE(pid.has_value());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(*pid, SIGKILL), 0);
  const bool released = WaitUntil([&] { return UsedInTesserad("killed") == Bytes(0); }, 5s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ released ] a killed container's 4 GiB back in tesserad %.3f s after SIGKILL\n",
              seconds);
  ASSERT_TRUE(released) << "tesserad still counts the killed container's memory";
  EXPECT_LT(seconds, 1.0);
  EXPECT_TRUE(WaitUntil([&] { return NodeFreeBytes() == before; }, 1s))
      << "the simulated GPU still holds the killed container's memory";
  EXPECT_EQ(c->Wait(10s), 137);
  // kubelet restarts the container with the same devices: the whole cap is there again.
  podman::Container* again = Run(a, {"/opt/tenants/preload_tenant"});
  EXPECT_EQ(again->process().WaitForKey("allocated", 30s), std::to_string(4 * kGiB));
}

// Two pods on one GPU at 30 and 70 % of its time, each spinning 1 ms kernels for `seconds` in its
// own container: the split of the device time they got is 30/70 within 2 points.
void RuntimeTest::ThirtyBesideSeventy(int seconds) {
  const TestKubelet::ContainerAllocation low = Admit("thirty", 1, 30);
  const TestKubelet::ContainerAllocation high = Admit("seventy", 1, 70);
  const uint64_t start = ipc::MonotonicNs() + 3'000'000'000ull;  // both containers up by then
  auto spin = [&](const TestKubelet::ContainerAllocation& a) {
    return Run(a, {"/opt/tenants/shim_tenant", "spin", "1000", std::to_string(seconds),
                   std::to_string(start), "stream"});
  };
  podman::Container* t30 = spin(low);
  podman::Container* t70 = spin(high);
  auto k30 = t30->process().WaitForKey("kernels", std::chrono::seconds(seconds + 30));
  auto k70 = t70->process().WaitForKey("kernels", std::chrono::seconds(seconds + 30));
  ASSERT_TRUE(k30 && k70);
  const double s30 = std::stod(*k30) / (seconds * 10.0), s70 = std::stod(*k70) / (seconds * 10.0);
  std::printf("[ shares   ] in podman containers: thirty %.1f %%  seventy %.1f %% of %d s\n", s30,
              s70, seconds);
  const double busy = s30 + s70;
  EXPECT_NEAR(100.0 * s30 / busy, 30.0, 2.0) << "of the device time the two tenants got";
  EXPECT_NEAR(100.0 * s70 / busy, 70.0, 2.0) << "of the device time the two tenants got";
  EXPECT_GT(busy, 94.0) << "the two kept the device busy only " << busy << " % of the time";
}

TEST_F(RuntimeTest, ThirtyPercentBesideSeventyInTwoContainers) { ThirtyBesideSeventy(5); }

}  // namespace
}  // namespace tessera::k8s
