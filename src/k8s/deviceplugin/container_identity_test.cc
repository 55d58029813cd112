// Container identity and the bypasses of issue 26 (findings 1 and 2) in real containers: podman
// 4.3 + runc resolve each container's CDI spec (written by the device plugin's own WriteCdiSpec,
// with what Allocator::Edits puts there: the environment, the shims and the preload file, the
// container's socket folder at /run/tessera, simgpu and its state, and the createRuntime hook).
// runc runs the real tessera-oci-hook, which sends IDENTIFY to a real tesserad on the host; the
// tenants are real processes in the containers' own cgroups and namespaces.
//
//   - TESSERA_DISABLE=1 in a managed container changes nothing: the shim still caps it.
//   - A process that goes around the shim (simgpu opened by path, no HELLO) holding 7 GiB against
//     its container's 1 GiB is charged to that container by its cgroup and killed within the
//     bound; the victim container's process lives and gets its whole 2 GiB.
//   - A process of another container that reaches the victim's socket is refused.
//   - A container whose hook cannot identify it does not start.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "k8s/deviceplugin/allocator.h"
#include "k8s/deviceplugin/cdi.h"
#include "process/child_process.h"
#include "testing/support/podman.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using podman::Container;
using podman::RunOptions;
using process::BuildDir;
using process::ChildProcess;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr char kCdiDir[] = "/var/run/cdi";  // podman 4.3 reads /etc/cdi and /var/run/cdi only

class ContainerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_PODMAN();
    name_ = process::UniqueName("cid");
    socket_ = "/tmp/" + name_ + ".sock";
    sockets_ = "/tmp/" + name_ + "-containers";
    // simgpu's state as a file every mount namespace reaches (a container's /dev/shm is its own).
    sim_state_ = "/tmp/" + name_ + "-simstate";
    preload_ = "/tmp/" + name_ + "-preload";
    log_ = "/tmp/" + name_ + ".err";
    std::ofstream(preload_) << kContainerShimDir << "/libcuda.so.1\n"
                            << kContainerShimDir << "/libnvidia-ml.so.1\n";
    podman::ImageContents contents;
    contents.name = "identity";
    contents.files = {{BuildDir() + "/tests/shim_tenant", "/opt/test/shim_tenant"},
                      {BuildDir() + "/tests/sim_tenant", "/opt/test/sim_tenant"}};
    contents.libraries_of = {BuildDir() + "/lib/tessera/libcuda.so.1",
                             BuildDir() + "/lib/tessera/libnvidia-ml.so.1",
                             BuildDir() + "/lib/libtessera-simgpu.so"};
    auto image = podman::Image::Build(contents);
    ASSERT_TRUE(image.ok()) << image.error();
    image_ = *image;
  }
  void TearDown() override {
    containers_.clear();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    for (const std::string& spec : specs_) unlink(spec.c_str());
    unlink(sim_state_.c_str());
    unlink(preload_.c_str());
    process::RunShell("rm -rf '" + sockets_ + "'");
    if (!HasFailure()) unlink(log_.c_str());
  }

  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + sim_state_, "TESSERA_SIM_GPUS=SimT:8GiB:80"};
  }
  // tesserad as docs/security.md runs it for hostile tenants.
  void StartDaemon() {
    const std::string cmd = "exec '" + BuildDir() + "/bin/tesserad' --sim --socket '" + socket_ +
                            "' --ephemeral --container-sockets '" + sockets_ +
                            "' --over-limit-action kill --allow-self-declared=false 2>'" + log_ +
                            "'";
    daemon_ =
        std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", cmd}, SimEnv());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(ipc::WaitUntilListening(socket_, 10s)) << "tesserad did not listen";
  }
  // A container as the device plugin sets one up with --cdi: registered (identify=1), its spec
  // written with the createRuntime hook. Returns the CDI device name.
  std::string Register(const std::string& short_name, uint64_t mem,
                       const std::string& hook_socket = "") {
    const std::string id = name_ + "-" + short_name;
    auto reply = ipc::Call(
        socket_, "CONTAINER id=" + id + " mem=" + std::to_string(mem) + " identify=1", nullptr, 5s);
    EXPECT_TRUE(reply.ok() && reply->rfind("OK", 0) == 0) << (reply.ok() ? *reply : reply.error());
    CdiEdits edits;
    edits.env = {{"TESSERA_SOCKET", std::string(kContainerSocketDir) + "/tessera.sock"},
                 {"TESSERA_CONTAINER", id},
                 {"TESSERA_MEM_LIMIT", std::to_string(mem / kGiB) + "GiB"},
                 {"TESSERA_REAL_LIBCUDA", std::string(kContainerSimDir) + "/libtessera-simgpu.so"},
                 {"TESSERA_REAL_NVML", std::string(kContainerSimDir) + "/libtessera-simgpu.so"},
                 {"TESSERA_SIM_STATE", sim_state_},
                 {"TESSERA_SIM_GPUS", "SimT:8GiB:80"}};
    edits.mounts = {{BuildDir() + "/lib/tessera", kContainerShimDir, true},
                    {preload_, kContainerPreload, true},
                    {sockets_ + "/" + id, kContainerSocketDir, true},
                    {BuildDir() + "/lib/libtessera-simgpu.so",
                     std::string(kContainerSimDir) + "/libtessera-simgpu.so", true},
                    {sim_state_, sim_state_, false}};
    edits.hooks = {{"createRuntime",
                    BuildDir() + "/bin/tessera-oci-hook",
                    {"tessera-oci-hook", "--container", id, "--socket",
                     hook_socket.empty() ? socket_ : hook_socket},
                    15}};
    auto written = WriteCdiSpec(kCdiDir, id, edits);
    EXPECT_TRUE(written.ok()) << written.error();
    if (written.ok()) specs_.push_back(*written);
    // tesserad opens the container's socket folder within a second of the registration.
    for (int i = 0; i < 100 && access((sockets_ + "/" + id).c_str(), F_OK) != 0; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    return CdiQualifiedName(id);
  }
  Container* Run(const std::string& device, std::vector<std::string> command,
                 std::vector<std::string> env = {}, std::vector<RunOptions::Volume> volumes = {}) {
    RunOptions o;
    o.image = image_;
    o.command = std::move(command);
    o.devices = {device};
    o.env = std::move(env);
    o.env.push_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
    o.volumes = std::move(volumes);
    o.timeout = 90s;
    containers_.push_back(std::make_unique<Container>("identity", o));
    return containers_.back().get();
  }
  std::string DaemonLog() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  bool LogShows(const std::string& text, std::chrono::milliseconds timeout) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    do {
      if (DaemonLog().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < end);
    return false;
  }

  std::string name_, socket_, sockets_, sim_state_, preload_, log_, image_;
  std::unique_ptr<ChildProcess> daemon_;
  std::vector<std::string> specs_;
  std::vector<std::unique_ptr<Container>> containers_;
};

// Finding 1, first half: one environment variable no longer turns Tessera off in a container it
// manages: the shim ignores TESSERA_DISABLE=1 (and says so) and the tenant stops at its cap.
TEST_F(ContainerIdentityTest, TesseraDisableChangesNothingInAManagedContainer) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string tenant = Register("tenant", kGiB);
  Container* c = Run(tenant, {"/opt/test/shim_tenant", "alloc-until-oom", "64"},
                     {"TESSERA_DISABLE=1", "CGPU_DISABLE=1"});
  ASSERT_TRUE(c->started());
  auto allocated = c->process().WaitForKey("allocated", 60s);
  ASSERT_TRUE(allocated.has_value()) << DaemonLog();
  EXPECT_EQ(*allocated, std::to_string(kGiB)) << "TESSERA_DISABLE=1 took the cap off";
  EXPECT_EQ(c->process().WaitForKey("failure", 5s), "2");  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_TRUE(LogShows("is runtime container", 1s)) << "the hook did not identify it";
  c->process().CloseStdin();
  EXPECT_EQ(c->Wait(30s), 0);
}

// Finding 1: a process of the tenant's container that never says HELLO (simgpu opened by path)
// holds 7 GiB of the 8 GiB GPU against its 1 GiB cap. tesserad sees the host pid in NVML's list,
// finds the container by the process's cgroup, charges it and kills it; the victim keeps its
// process and gets its second GiB.
TEST_F(ContainerIdentityTest, ABypassInAContainerIsChargedToItAndKilledAndTheVictimIsWhole) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string victim = Register("victim", 2 * kGiB);
  const std::string tenant = Register("tenant", kGiB);
  Container* held = Run(victim, {"/opt/test/shim_tenant", "hold", std::to_string(kGiB)});
  ASSERT_EQ(held->process().WaitForKey("ready", 60s), "1") << DaemonLog();
  Container* greedy =
      Run(tenant, {"/opt/test/sim_tenant", std::string(kContainerSimDir) + "/libtessera-simgpu.so",
                   "hold", std::to_string(7 * kGiB)});
  ASSERT_EQ(greedy->process().WaitForKey("ready", 60s), "1") << "the bypass did not get 7 GiB";
  const auto allocated = std::chrono::steady_clock::now();
  // The bypass is the container's first process: gone (or a zombie) once tesserad killed it.
  const std::optional<pid_t> pid = greedy->HostPid(5s);
  ASSERT_TRUE(pid.has_value());
  auto gone = [&] {
    std::ifstream stat("/proc/" + std::to_string(*pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    const size_t close = text.rfind(')');
    return !stat || close == std::string::npos || text[close + 2] == 'Z';
  };
  while (!gone() && std::chrono::steady_clock::now() - allocated < 5s) {
    std::this_thread::sleep_for(5ms);
  }
  const auto acted_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - allocated)
                            .count();
  std::printf("acted_after_ms=%lld\n", static_cast<long long>(acted_ms));
  const std::optional<int> status = greedy->Wait(10s);
  ASSERT_TRUE(status.has_value()) << "the bypass was not killed; daemon log:\n" << DaemonLog();
  EXPECT_EQ(*status, 128 + SIGKILL);
  // One 1 s interval and the pass; the slack is for a loaded CI machine.
  EXPECT_LE(acted_ms, 2000) << DaemonLog();
  EXPECT_TRUE(LogShows("its cgroup is container " + name_ + "-tenant's", 1s)) << DaemonLog();
  EXPECT_EQ(DaemonLog().find("of container " + name_ + "-victim ("), std::string::npos)
      << DaemonLog();
  EXPECT_FALSE(held->Wait(0ms).has_value()) << "the victim's process was killed";
  Container* second = Run(victim, {"/opt/test/shim_tenant", "hold", std::to_string(kGiB)});
  EXPECT_EQ(second->process().WaitForKey("ready", 60s), "1") << "the victim cannot get its 2 GiB";
}

// Finding 2 in real containers: the tenant's container is handed the victim's socket folder (as a
// host user reached it before); its processes are not the victim's, and are refused.
TEST_F(ContainerIdentityTest, AnotherContainersProcessIsRefusedOnTheVictimsSocket) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string victim = Register("victim", 2 * kGiB);
  const std::string tenant = Register("tenant", kGiB);
  Container* held = Run(victim, {"/opt/test/shim_tenant", "hold", std::to_string(kGiB)});
  ASSERT_EQ(held->process().WaitForKey("ready", 60s), "1") << DaemonLog();
  // A raw client (no shim) in the tenant's container, on the victim's socket.
  Container* raw =
      Run(tenant,
          {"/opt/test/sim_tenant", std::string(kContainerSimDir) + "/libtessera-simgpu.so", "hello",
           "/run/tessera-victim/tessera.sock", name_ + "-victim"},
          {}, {{sockets_ + "/" + name_ + "-victim", "/run/tessera-victim", "ro"}});
  auto reply = raw->process().WaitForKey("reply", 60s);
  ASSERT_TRUE(reply.has_value()) << DaemonLog();
  EXPECT_THAT(*reply, HasSubstr("is not a process of container " + name_ + "-victim")) << *reply;
  EXPECT_EQ(raw->Wait(30s), 0);
  EXPECT_FALSE(held->Wait(0ms).has_value());
}

// A container whose hook cannot reach tesserad (here: a socket nobody listens on) does not start:
// a container Tessera could not identify gets no GPU.
TEST_F(ContainerIdentityTest, AContainerTheHookCannotIdentifyDoesNotStart) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string lost = Register("lost", kGiB, "/tmp/" + name_ + "-nobody.sock");
  Container* c = Run(lost, {"/bin/sh", "-c", "echo started=1"});
  c->process().DrainOutput(60s);
  const std::optional<int> status = c->Wait(30s);
  ASSERT_TRUE(status.has_value());
  EXPECT_NE(*status, 0);
  EXPECT_EQ(c->process().values().count("started"), 0u) << "the container ran unidentified";
}

}  // namespace
}  // namespace tessera::k8s
