// Multi-process behaviour of simgpu: real processes (sim_tenant) each dlopen the built library
// and share one simulated machine through TESSERA_SIM_STATE. Each test uses its own state name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;

constexpr uint64_t kGiB = 1ull << 30;

class SimMultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { state_ = UniqueName("mp"); }
  void TearDown() override { shm_unlink(("/tessera-sim-" + state_).c_str()); }

  std::unique_ptr<ChildProcess> Tenant(const std::vector<std::string>& args,
                                       const std::string& gpus = "SimT:8GiB:80",
                                       const std::string& visible = "") {
    std::vector<std::string> argv = {BuildDir() + "/tests/sim_tenant",
                                     BuildDir() + "/lib/libtessera-simgpu.so"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=" + gpus};
    if (!visible.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
    auto child = std::make_unique<ChildProcess>(argv, env);
    EXPECT_TRUE(child->started());
    return child;
  }

  uint64_t FreeBytes() {
    auto probe = Tenant({"meminfo"});
    auto free_bytes = probe->WaitForKey("free", 10s);
    EXPECT_TRUE(free_bytes.has_value());
    EXPECT_EQ(probe->Wait(10s), 0);
    return free_bytes ? std::stoull(*free_bytes) : 0;
  }

  std::string state_;
};

TEST_F(SimMultiProcessTest, TwoProcessesShareCapacityAndGetExactOutOfMemory) {
  auto a = Tenant({"alloc-until-oom", "64"});
  auto b = Tenant({"alloc-until-oom", "64"});
  auto a_bytes = a->WaitForKey("allocated", 60s);
  auto b_bytes = b->WaitForKey("allocated", 60s);
  ASSERT_TRUE(a_bytes && b_bytes);
  EXPECT_EQ(a->WaitForKey("failure", 5s), "2");  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(b->WaitForKey("failure", 5s), "2");
  const uint64_t sum = std::stoull(*a_bytes) + std::stoull(*b_bytes);
  EXPECT_LE(sum, 8 * kGiB);
  EXPECT_EQ(sum, 8 * kGiB) << "64 MiB chunks fill an 8 GiB device exactly";
  EXPECT_EQ(FreeBytes(), 0u);
  a->CloseStdin();
  b->CloseStdin();
  EXPECT_EQ(a->Wait(30s), 0);
  EXPECT_EQ(b->Wait(30s), 0);
  EXPECT_EQ(FreeBytes(), 8 * kGiB) << "frees return memory to the shared device";
}

TEST_F(SimMultiProcessTest, ConcurrentSpinKernelsAreSerialisedAndShared) {
  // Both start their loops at the same instant (half a second from now, once both are up).
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const uint64_t start_at = static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ull +
                            static_cast<uint64_t>(now.tv_nsec) + 500'000'000ull;
  auto a = Tenant({"spin-loop", "1000", "2000", std::to_string(start_at)});
  auto b = Tenant({"spin-loop", "1000", "2000", std::to_string(start_at)});
  ASSERT_EQ(a->Wait(30s), 0);
  ASSERT_EQ(b->Wait(30s), 0);
  a->DrainOutput(5s);
  b->DrainOutput(5s);
  const auto& va = a->values();
  const auto& vb = b->values();
  ASSERT_TRUE(va.count("device_ns") && vb.count("device_ns"));
  const double da = std::stod(va.at("device_ns")) / 1e9;
  const double db = std::stod(vb.at("device_ns")) / 1e9;
  const uint64_t start = std::min(std::stoull(va.at("start_ns")), std::stoull(vb.at("start_ns")));
  const uint64_t end = std::max(std::stoull(va.at("end_ns")), std::stoull(vb.at("end_ns")));
  const double wall = static_cast<double>(end - start) / 1e9;
  // One kernel at a time: the device time of both can never exceed the wall time.
  EXPECT_LE(da + db, wall + 0.002);
  // Alternating submission gives each about half of two seconds.
  EXPECT_NEAR(da, 1.0, 0.2);
  EXPECT_NEAR(db, 1.0, 0.2);
}

TEST_F(SimMultiProcessTest, EventElapsedTimeMeasuresDeviceExecution) {
  auto t = Tenant({"elapsed", "10000"});
  auto ms = t->WaitForKey("elapsed_ms", 10s);
  ASSERT_TRUE(ms.has_value());
  EXPECT_NEAR(std::stod(*ms), 10.0, 1.0);
  EXPECT_EQ(t->Wait(10s), 0);
}

// TESSERA_SIM_SYNC_DELAY: a synchronisation returns that much late (a host that runs the waiting
// thread late), the device's own time is unchanged; a value that is not a duration up to 1s makes
// cuInit fail, naming the variable.
TEST_F(SimMultiProcessTest, ASyncDelayMakesWaitsReturnLateNotTheDeviceSlower) {
  std::vector<std::string> argv = {BuildDir() + "/tests/sim_tenant",
                                   BuildDir() + "/lib/libtessera-simgpu.so", "elapsed", "10000"};
  ChildProcess t(argv, {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimT:8GiB:80",
                        "TESSERA_SIM_SYNC_DELAY=5ms"});
  auto ms = t.WaitForKey("elapsed_ms", 10s);
  auto waited = t.WaitForKey("waited_ms", 10s);
  ASSERT_TRUE(ms.has_value() && waited.has_value());
  EXPECT_NEAR(std::stod(*ms), 10.0, 1.0);
  EXPECT_GE(std::stod(*waited), 14.5);
  EXPECT_EQ(t.Wait(10s), 0);
  for (const char* bad : {"5", "2s", "-1ms"}) {
    const auto [status, out] = tessera::process::RunShell(
        "TESSERA_SIM_STATE=" + state_ + " TESSERA_SIM_SYNC_DELAY=" + bad + " " + argv[0] + " " +
        argv[1] + " elapsed 1000 2>&1");
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(out.find("TESSERA_SIM_SYNC_DELAY"), std::string::npos) << bad << ": " << out;
  }
}

TEST_F(SimMultiProcessTest, SigkilledProcessMemoryIsFreeWithinOneSecond) {
  auto holder = Tenant({"hold", std::to_string(6 * kGiB)});
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  EXPECT_EQ(FreeBytes(), 2 * kGiB);
  holder->Kill(SIGKILL);  // not reaped by us yet: the sim must see through the zombie too
  const auto killed = std::chrono::steady_clock::now();
  uint64_t free_bytes = 0;
  while (std::chrono::steady_clock::now() - killed < 1s) {
    free_bytes = FreeBytes();
    if (free_bytes == 8 * kGiB) break;
  }
  EXPECT_EQ(free_bytes, 8 * kGiB);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 1s);
  EXPECT_EQ(holder->Wait(10s), 128 + SIGKILL);
}

// A tenant in a pid namespace of its own (pid 1 there), as in a container: the real driver's NVML
// gives a daemon on the host the tenant's host pid, and a process that cannot see the tenant's
// namespace must never take it for dead. Before slot owners held their slot's record lock, the
// host's reaper checked "pid 1" against the host's init and took the tenant's 2 GiB back while it
// ran, and the process list named pid 1.
TEST_F(SimMultiProcessTest, ATenantInAnotherPidNamespaceIsListedByItsPidHereAndNeverReaped) {
  if (std::system("unshare --pid --fork --kill-child true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "cannot create a pid namespace here (needs root and unshare(1))";
  }
  auto in_namespace = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/unshare",
                                     "--pid",
                                     "--fork",
                                     "--kill-child",
                                     BuildDir() + "/tests/sim_tenant",
                                     BuildDir() + "/lib/libtessera-simgpu.so"};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<ChildProcess>(
        argv,
        std::vector<std::string>{"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimT:8GiB:80"});
  };
  auto holder = in_namespace({"hold", std::to_string(2 * kGiB)});
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  // unshare's child is the tenant: its pid here.
  std::ifstream children("/proc/" + std::to_string(holder->pid()) + "/task/" +
                         std::to_string(holder->pid()) + "/children");
  pid_t tenant = 0;
  children >> tenant;
  ASSERT_GT(tenant, 1);
  EXPECT_EQ(FreeBytes(), 6 * kGiB) << "a reaper here took the tenant's memory back while it runs";
  auto here = Tenant({"processes"});
  EXPECT_EQ(here->WaitForKey("processes", 10s), "1");
  EXPECT_EQ(here->WaitForKey("pid_0", 1s), std::to_string(tenant))
      << "the list must name the tenant by its pid in the lister's namespace";
  EXPECT_EQ(here->WaitForKey("mem_0", 1s), std::to_string(2 * kGiB));
  EXPECT_EQ(here->Wait(10s), 0);
  // A lister in a namespace of its own cannot see the tenant: pid 0, as the kernel reports an
  // invisible process; the tenant's memory is still listed and still held.
  auto elsewhere = in_namespace({"processes"});
  EXPECT_EQ(elsewhere->WaitForKey("self", 10s), "1");
  EXPECT_EQ(elsewhere->WaitForKey("processes", 1s), "1");
  EXPECT_EQ(elsewhere->WaitForKey("pid_0", 1s), "0");
  EXPECT_EQ(elsewhere->WaitForKey("mem_0", 1s), std::to_string(2 * kGiB));
  EXPECT_EQ(elsewhere->Wait(10s), 0);
  EXPECT_EQ(FreeBytes(), 6 * kGiB);
  holder->Kill(SIGKILL);  // unshare --kill-child takes the tenant with it
  EXPECT_EQ(holder->Wait(10s), 128 + SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  uint64_t free_bytes = 0;
  while (std::chrono::steady_clock::now() - killed < 2s && free_bytes != 8 * kGiB) {
    free_bytes = FreeBytes();
  }
  EXPECT_EQ(free_bytes, 8 * kGiB) << "the dead tenant's memory was not taken back";
}

TEST_F(SimMultiProcessTest, FillThenCopyToHostMovesTheRightBytes) {
  auto t = Tenant({"fill-copy", std::to_string(3 << 20), "171"});  // 0xAB
  EXPECT_EQ(t->WaitForKey("wrong_bytes", 30s), "0");
  EXPECT_EQ(t->Wait(10s), 0);
}

TEST_F(SimMultiProcessTest, CudaVisibleDevicesRenumbersFromZero) {
  const std::string gpus = "SimA:8GiB,SimB:2GiB";
  auto second = Tenant({"meminfo"}, gpus, "1");
  EXPECT_EQ(second->WaitForKey("total", 10s), std::to_string(2 * kGiB));
  EXPECT_EQ(second->Wait(10s), 0);
  auto none = Tenant({"meminfo"}, gpus, "7");
  auto error = none->WaitForKey("error", 10s);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("CUDA_ERROR_INVALID_DEVICE"), std::string::npos) << *error;
}

TEST_F(SimMultiProcessTest, InvalidSimConfigurationIsRejectedWithItsName) {
  auto t = Tenant({"meminfo"}, "SimT:-8GiB");
  auto error = t->WaitForKey("error", 10s);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << *error;
  EXPECT_EQ(t->Wait(10s), 1);
}

}  // namespace
