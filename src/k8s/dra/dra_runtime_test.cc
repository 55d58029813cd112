// tessera-dra-plugin's claims under a real container runtime: podman + runc start each tenant
// from the CDI devices NodePrepareResources answered (`--device gpu.tessera.io/claim=...`; podman
// resolves them from the spec the plugin wrote in /var/run/cdi), in an image of its own (busybox,
// the tenant programs and their libraries: no libcuda, no Tessera), with its own /dev/shm, mount
// and PID namespaces. Real: the plugin program, tesserad on simulated GPUs, the shims, simgpu,
// podman, runc. Stand-ins (named so): kubelet's plugin watcher and DRA manager (TestDraKubelet)
// and the API server (TestApiServer); claims are allocated as kube-scheduler writes them. The
// 30/70 share is its own CTest entry, labelled timing. runc runs the claim's createRuntime hook
// (the real tessera-oci-hook), so each container of a claim is identified to tesserad by its
// cgroup: a process in it that goes around the shim is still the claim's.
#include <glob.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "ipc/futex.h"
#include "ipc/unix_socket.h"
#include "k8s/deviceplugin/container_edits.h"
#include "k8s/dra/preparer.h"
#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/dra_node.h"
#include "testing/support/dra_objects.h"
#include "testing/support/podman.h"
#include "testing/support/test_support.h"

namespace tessera::k8s::dra {
namespace {

using namespace std::chrono_literals;
using k8s::testing::AllocatedStatus;
using k8s::testing::ClaimJson;
using k8s::testing::DraNode;
using k8s::testing::DraRequest;
using k8s::testing::kGiB;
using k8s::testing::PodWithClaims;
using process::BuildDir;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-node-1";
// Where podman 4 reads CDI specs (and so where the node's plugin writes them).
constexpr char kCdiDir[] = "/var/run/cdi";

// The tenants' image: the test programs and the libraries they and the mounted shims and simgpu
// load. Nothing of Tessera: the claim's CDI spec brings it.
podman::ImageContents TenantImage() {
  podman::ImageContents c;
  c.name = "tenants";
  for (const char* t : {"preload_tenant", "nvml_tenant", "shim_tenant", "sim_tenant"}) {
    c.files.push_back({BuildDir() + "/tests/" + t, std::string("/opt/tenants/") + t});
  }
  c.libraries_of = {BuildDir() + "/lib/tessera/libcuda.so.1",
                    BuildDir() + "/lib/tessera/libnvidia-ml.so.1",
                    BuildDir() + "/lib/libtessera-simgpu.so"};
  return c;
}

class DraRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_PODMAN();
    auto image = podman::Image::Build(TenantImage());
    ASSERT_TRUE(image.ok()) << image.error();
    image_ = *image;
    ASSERT_TRUE(api_.Start().ok());
    api_.CreateNode({{"metadata", {{"name", kNode}, {"labels", Json::object()}}}});
    node_ = std::make_unique<DraNode>(kNode, "SimA:16GiB:80,SimA:16GiB:80", api_.url(), 2s,
                                      DaemonArgs());
    node_->SetCdiDir(kCdiDir);
    ASSERT_TRUE(node_->Start());
    node_->StartPlugin();
    ASSERT_TRUE(node_->WaitRegistered());
  }

  virtual std::vector<std::string> DaemonArgs() const { return {}; }

  void TearDown() override {
    containers_.clear();
    // Claims unprepared (their specs go with them), then the plugin and the node.
    for (const Json& pod : pods_) (void)node_->kubelet().UnprepareResources(pod);
    node_.reset();
    api_.Stop();
    // The specs of this test's claims, had a failure left any behind.
    for (const std::string& uid : uids_) {
      unlink((std::string(kCdiDir) + "/gpu.tessera.io-claim-" + uid + ".json").c_str());
    }
  }

  // A claim of `consumed` on `device`, allocated and reserved for a new pod as kube-scheduler
  // leaves them, bound to the node and prepared by kubelet's DRA manager: the pod.
  Json Prepared(const std::string& name, const std::string& device,
                const std::map<std::string, std::string>& consumed) {
    const std::string full = prefix_ + name;
    Json pod = api_.CreatePod(PodWithClaims("team", full, {{"gpu", full}}, {{"app", {"gpu"}}}));
    DraRequest request;
    request.capacity = consumed;
    auto claim = api_.CreateResource("ResourceClaim", ClaimJson("team", full, {request}));
    EXPECT_TRUE(claim.ok()) << claim.error();
    if (claim.ok()) uids_.push_back((*claim)["metadata"].value("uid", ""));
    EXPECT_TRUE(api_.SetClaimStatus("team", full,
                                    AllocatedStatus(kNode, {{"gpu", "", device, consumed}},
                                                    Json::array(), full, pod["metadata"]["uid"])));
    EXPECT_TRUE(node_->client().BindPod("team", full, pod["metadata"]["uid"], kNode).ok());
    pod = *api_.GetPod("team", full);
    const Status prepared = node_->kubelet().PrepareResources(pod);
    EXPECT_TRUE(prepared.ok()) << prepared.message();
    pods_.push_back(pod);
    return pod;
  }

  std::string ContainerOf(const std::string& name) {
    const std::string full = prefix_ + name;
    const std::string uid = (*api_.GetResource("ResourceClaim", "team", full))["metadata"]["uid"];
    return MakeContainerId(kClaimContainerPrefix, "team", full, uid);
  }

  // `pod2`, a second pod of the namespace, reserves `pod`'s claim `name` too and is prepared.
  Json SharedWith(const std::string& name, const std::string& pod2) {
    const std::string full = prefix_ + name;
    Json second =
        api_.CreatePod(PodWithClaims("team", prefix_ + pod2, {{"gpu", full}}, {{"app", {"gpu"}}}));
    Json claim = *api_.GetResource("ResourceClaim", "team", full);
    claim["status"]["reservedFor"].push_back(
        {{"resource", "pods"}, {"name", prefix_ + pod2}, {"uid", second["metadata"]["uid"]}});
    EXPECT_TRUE(api_.SetClaimStatus("team", full, claim["status"]));
    EXPECT_TRUE(
        node_->client().BindPod("team", prefix_ + pod2, second["metadata"]["uid"], kNode).ok());
    second = *api_.GetPod("team", prefix_ + pod2);
    const Status prepared = node_->kubelet().PrepareResources(second);
    EXPECT_TRUE(prepared.ok()) << prepared.message();
    pods_.push_back(second);
    return second;
  }

  // Starts container "app" of `pod` from the tenants' image as a runtime does from kubelet's CRI
  // request: the CDI devices the claim was prepared with, nothing else of the node.
  podman::Container* Run(const Json& pod, const std::vector<std::string>& command) {
    auto cdi = node_->kubelet().CdiDevices(pod, "app");
    EXPECT_TRUE(cdi.ok()) << cdi.error();
    podman::RunOptions o;
    o.image = image_;
    o.command = command;
    o.devices = cdi.ok() ? *cdi : std::vector<std::string>{};
    // The sanitizer builds' shims load into programs that link no sanitizer runtime first.
    o.env.push_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
    o.timeout = 60s;
    containers_.push_back(std::make_unique<podman::Container>("dra", o));
    EXPECT_TRUE(containers_.back()->started());
    return containers_.back().get();
  }

  TestApiServer api_;
  std::unique_ptr<DraNode> node_;
  std::vector<std::unique_ptr<podman::Container>> containers_;
  std::vector<Json> pods_;
  std::vector<std::string> uids_;
  std::string image_;
  // Claim and pod names start with this: what this test leaves in /var/run/cdi is its own.
  const std::string prefix_ = "dra" + std::to_string(getpid()) + "-";
};

// The claim end to end: 4 GiB and 30 % of a GPU's time, in a podman container.
TEST_F(DraRuntimeTest, AClaimOfFourGibAndThirtyPercentStopsAtExactlyFourGibInPodman) {
  const Json pod = Prepared("infer", "gpu-0", {{"memory", "4Gi"}, {"cores", "30"}});
  auto cdi = node_->kubelet().CdiDevices(pod, "app");
  ASSERT_TRUE(cdi.ok()) << cdi.error();
  ASSERT_EQ(cdi->size(), 1u);
  EXPECT_THAT((*cdi)[0], HasSubstr("gpu.tessera.io/claim="));
  // A program that links no libcuda, captured by /etc/ld.so.preload alone, then what NVML (what
  // nvidia-smi reads) says of the GPU.
  podman::Container* c = Run(pod, {"/bin/sh", "-c",
                                   "/opt/tenants/preload_tenant; echo preload_exit=$?; "
                                   "/opt/tenants/nvml_tenant; echo nvml_exit=$?"});
  c->process().DrainOutput(40s);
  EXPECT_EQ(c->Wait(20s), 0);
  const auto& v = c->process().values();
  auto value = [&](const char* k) { return v.count(k) ? v.at(k) : std::string("(none)"); };
  EXPECT_EQ(value("allocated"), std::to_string(4 * kGiB)) << "the claim's memory, exactly";
  EXPECT_EQ(value("failure"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_THAT(value("cuMemAlloc_v2_from"), HasSubstr("/usr/local/tessera/lib/libcuda.so.1"));
  EXPECT_EQ(value("preload_exit"), "0");
  EXPECT_EQ(value("total"), std::to_string(4 * kGiB)) << "NVML's total is the claim's memory";
  EXPECT_EQ(value("nvml_exit"), "0");
  const TesseradStatus s = node_->sim().Status();
  const TesseradContainer* t = s.Find(ContainerOf("infer"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->limits[0], Bytes(4 * kGiB));
  EXPECT_EQ(t->limits[1], Bytes(0));
  EXPECT_EQ(t->core_percent, 30u);
  // The claim released: its memory cap and its spec leave the node.
  ASSERT_TRUE(node_->kubelet().UnprepareResources(pod).ok());
  pods_.clear();
  EXPECT_EQ(node_->sim().Status().Find(ContainerOf("infer")), nullptr);
}

// Claims of 30 % and 70 % of one GPU, each spinning 1 ms kernels for 10 s in its own podman
// container (label timing): each gets its share of the device time within a point.
TEST_F(DraRuntimeTest, ClaimsOfThirtyAndSeventyPercentInTwoPodmanContainers) {
  const Json low = Prepared("thirty", "gpu-0", {{"memory", "4Gi"}, {"cores", "30"}});
  const Json high = Prepared("seventy", "gpu-0", {{"memory", "4Gi"}, {"cores", "70"}});
  const int seconds = 10;
  const uint64_t start = ipc::MonotonicNs() + 3'000'000'000ull;  // both containers up by then
  auto spin = [&](const Json& pod) {
    return Run(pod, {"/opt/tenants/shim_tenant", "spin", "1000", std::to_string(seconds),
                     std::to_string(start), "stream"});
  };
  podman::Container* t30 = spin(low);
  podman::Container* t70 = spin(high);
  auto k30 = t30->process().WaitForKey("kernels", std::chrono::seconds(seconds + 30));
  auto k70 = t70->process().WaitForKey("kernels", std::chrono::seconds(seconds + 30));
  ASSERT_TRUE(k30 && k70);
  // A container that reached the common start late (podman and the shim starting on a loaded
  // machine) ran for less than the window: each is measured over the time it ran. Lateness itself
  // is bounded, so a start-up that eats the window still fails.
  auto late_s = [](podman::Container* c) {
    const auto& v = c->process().values();
    return v.count("late_ms") ? std::stod(v.at("late_ms")) / 1000.0 : 0.0;
  };
  const double late30 = late_s(t30), late70 = late_s(t70);
  ASSERT_LT(std::max(late30, late70), seconds / 4.0)
      << "the containers started too late to measure";
  const double s30 = std::stod(*k30) / ((seconds - late30) * 10.0);
  const double s70 = std::stod(*k70) / ((seconds - late70) * 10.0);
  const double busy = s30 + s70;
  std::printf(
      "[ shares   ] claims in podman: thirty %.1f %%  seventy %.1f %% of %d s (late %.3f / %.3f "
      "s); "
      "split %.1f/%.1f\n",
      s30, s70, seconds, late30, late70, 100.0 * s30 / busy, 100.0 * s70 / busy);
  EXPECT_NEAR(100.0 * s30 / busy, 30.0, 1.0) << "of the device time the two claims got";
  EXPECT_NEAR(100.0 * s70 / busy, 70.0, 1.0) << "of the device time the two claims got";
  EXPECT_GT(busy, 94.0) << "the two kept the device busy only " << busy
                        << " % of the time they ran";
}

// tesserad as docs/security.md runs it for hostile tenants: what goes over a cap is killed.
class DraRuntimeIdentityTest : public DraRuntimeTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    return {"--over-limit-action", "kill", "--allow-self-declared=false"};
  }
};

// A claim's containers are identified by the runtime: its spec carries tessera-oci-hook, which
// runc runs for each container of each pod that uses the claim. Until then the claim's socket
// serves nobody; then it serves the containers' processes and refuses others; and a process in
// one of them that goes around the shim (simgpu opened by path, never registered) holding 3 GiB
// against the claim's 1 GiB is charged to the claim by its cgroup and killed, while another
// claim's process on the same GPU keeps its memory.
TEST_F(DraRuntimeIdentityTest, AClaimsContainersAreIdentifiedAndABypassInOneIsKilled) {
  const Json tenant = Prepared("tenant", "gpu-0", {{"memory", "1Gi"}, {"cores", "20"}});
  const Json other = SharedWith("tenant", "tenant-b");
  const Json victim = Prepared("victim", "gpu-0", {{"memory", "2Gi"}, {"cores", "30"}});
  const std::string id = ContainerOf("tenant");
  const std::string uid =
      (*api_.GetResource("ResourceClaim", "team", prefix_ + "tenant"))["metadata"]["uid"];

  // The claim's spec: the hook from the plugin's state folder, naming the claim's container.
  std::ifstream spec_file(std::string(kCdiDir) + "/gpu.tessera.io-claim-" + uid + ".json");
  const Json spec = Json::parse(spec_file, nullptr, false);
  ASSERT_FALSE(spec.is_discarded());
  const Json hooks = spec["containerEdits"].value("hooks", Json::array());
  ASSERT_EQ(hooks.size(), 1u) << "the claim's spec carries no hook: " << spec.dump();
  EXPECT_EQ(hooks[0]["hookName"], "createRuntime");
  EXPECT_EQ(hooks[0]["path"], node_->state() + "/tessera-oci-hook");
  EXPECT_EQ(hooks[0]["args"],
            Json({"tessera-oci-hook", "--container", id, "--socket", node_->sim().socket()}));

  // Before any container of the claim ran, its socket serves nobody (here: this test).
  const std::string socket = node_->sim().container_sockets() + "/" + id + "/tessera.sock";
  auto early = ipc::Call(socket, "HELLO version=1 container=" + id, nullptr, 5s);
  ASSERT_TRUE(early.ok()) << early.error();
  EXPECT_THAT(*early, HasSubstr("has no recorded identity yet"));

  podman::Container* held = Run(victim, {"/opt/tenants/shim_tenant", "hold", std::to_string(kGiB)});
  ASSERT_EQ(held->process().WaitForKey("ready", 60s), "1");
  // The claim's container in the second pod: identified, its process served.
  podman::Container* second =
      Run(other, {"/opt/tenants/shim_tenant", "hold", std::to_string(256ull << 20)});
  ASSERT_EQ(second->process().WaitForKey("ready", 60s), "1")
      << "a container of the claim's second pod was not served";
  // A process outside the claim's containers (this test) is not one of the claim's.
  auto stranger = ipc::Call(socket, "HELLO version=1 container=" + id, nullptr, 5s);
  ASSERT_TRUE(stranger.ok()) << stranger.error();
  EXPECT_THAT(*stranger, HasSubstr("is not a process of container " + id));
  // The bypass, in the claim's container of the first pod.
  podman::Container* greedy = Run(
      tenant, {"/opt/tenants/sim_tenant", std::string(kContainerSimDir) + "/libtessera-simgpu.so",
               "hold", std::to_string(3 * kGiB)});
  ASSERT_EQ(greedy->process().WaitForKey("ready", 60s), "1") << "the bypass did not get 3 GiB";
  const auto allocated = std::chrono::steady_clock::now();
  const std::optional<int> status = greedy->Wait(10s);
  const auto acted_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - allocated)
                            .count();
  ASSERT_TRUE(status.has_value()) << "the bypass in the claim's container was not killed";
  EXPECT_EQ(*status, 128 + SIGKILL);
  std::printf("bypass_killed_after_ms=%lld\n", static_cast<long long>(acted_ms));
  EXPECT_FALSE(held->Wait(0ms).has_value()) << "the other claim's process was killed";
}

}  // namespace
}  // namespace tessera::k8s::dra
