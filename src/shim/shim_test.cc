// The libcuda shim end to end: a real tesserad on simgpu, real tenant processes linked against
// the shim, limits from the environment (self-declared) or from the daemon (CONTAINER).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = UniqueName("shim");
    socket_ = "/tmp/" + state_ + ".sock";
    std::vector<std::string> argv = {BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                     "--ephemeral"};
    for (const std::string& a : DaemonArgs()) argv.push_back(a);
    daemon_ = std::make_unique<ChildProcess>(argv, SimEnv());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(tessera::ipc::WaitUntilListening(socket_, 5s))
        << "tesserad did not start listening on " << socket_;
  }
  void TearDown() override {
    daemon_->Kill(SIGTERM);
    EXPECT_EQ(daemon_->Wait(10s), 0);
    shm_unlink(("/tessera-sim-" + state_).c_str());
  }
  virtual std::vector<std::string> DaemonArgs() { return {}; }
  std::vector<std::string> SimEnv() {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimT:8GiB:80,SimU:4GiB:40"};
  }
  std::unique_ptr<ChildProcess> Tenant(const std::vector<std::string>& args,
                                       const std::vector<std::string>& env,
                                       const std::string& program = "shim_tenant") {
    std::vector<std::string> argv = {BuildDir() + "/tests/" + program};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> full = TenantEnv(SimEnv(), socket_);
    full.push_back("TESSERA_REAL_NVML=" + BuildDir() + "/lib/libtessera-simgpu.so");
    full.insert(full.end(), env.begin(), env.end());
    auto child = std::make_unique<ChildProcess>(argv, full);
    EXPECT_TRUE(child->started());
    return child;
  }
  uint64_t Get(ChildProcess& c, const std::string& key) {
    auto v = c.WaitForKey(key, 30s);
    EXPECT_TRUE(v.has_value()) << key;
    return v ? std::stoull(*v) : 0;
  }
  std::string state_, socket_;
  std::unique_ptr<ChildProcess> daemon_;
};

TEST_F(ShimTest, TwoContainersEachStopAtTheirLimitWithOutOfMemory) {
  auto a = Tenant({"alloc-until-oom", "64"}, {"TESSERA_CONTAINER=a", "TESSERA_MEM_LIMIT=1GiB"});
  auto b = Tenant({"alloc-until-oom", "64"}, {"TESSERA_CONTAINER=b", "TESSERA_MEM_LIMIT=2GiB"});
  for (auto* t : {a.get(), b.get()}) {
    const uint64_t limit = t == a.get() ? kGiB : 2 * kGiB;
    const uint64_t got = Get(*t, "allocated");
    EXPECT_LE(got, limit);
    EXPECT_GE(got, limit - 64 * kMiB);
    EXPECT_EQ(Get(*t, "failure"), 2u) << "exactly CUDA_ERROR_OUT_OF_MEMORY";
    EXPECT_EQ(Get(*t, "total"), limit) << "cuMemGetInfo shows the limit as the total";
    EXPECT_EQ(Get(*t, "free"), limit - got);
    t->CloseStdin();
    EXPECT_EQ(t->Wait(30s), 0);
  }
}

TEST_F(ShimTest, EightProcessesOfOneContainerNeverExceedItsLimit) {
  std::vector<std::unique_ptr<ChildProcess>> procs;
  for (int i = 0; i < 8; ++i) {
    procs.push_back(
        Tenant({"alloc-until-oom", "32"}, {"TESSERA_CONTAINER=shared", "TESSERA_MEM_LIMIT=2GiB"}));
  }
  uint64_t sum = 0;
  for (auto& p : procs) {
    sum += Get(*p, "allocated");
    EXPECT_EQ(Get(*p, "failure"), 2u);
  }
  EXPECT_LE(sum, 2 * kGiB);
  EXPECT_GE(sum, 2 * kGiB - 32 * kMiB);
  for (auto& p : procs) {
    p->CloseStdin();
    EXPECT_EQ(p->Wait(30s), 0);
  }
}

// How the tenant gets its entry points: linked directly, or through cuGetProcAddress_v2 at a CUDA
// version with the legacy or per-thread default stream.
struct Resolution {
  const char* name;
  std::vector<std::string> args;
};

class ShimPathTest : public ShimTest, public ::testing::WithParamInterface<Resolution> {};

TEST_P(ShimPathTest, EveryAllocationPathIsCharged) {
  std::vector<std::string> args = {"paths", std::to_string(64 * kMiB)};
  for (const std::string& a : GetParam().args) args.push_back(a);
  auto t = Tenant(args, {"TESSERA_CONTAINER=paths", "TESSERA_MEM_LIMIT=1GiB"});
  ASSERT_EQ(t->Wait(60s), 0);
  t->DrainOutput(5s);
  const auto& v = t->values();
  ASSERT_TRUE(v.count("free_end")) << "tenant failed: " << (v.count("call") ? v.at("call") : "")
                                   << (v.count("unresolved") ? v.at("unresolved") : "");
  const uint64_t start = std::stoull(v.at("free_start"));
  EXPECT_EQ(start, kGiB);
  for (const char* path :
       {"alloc", "pitch", "managed", "async", "frompool", "ownpool", "vmm", "array"}) {
    const std::string key = std::string("free_after_") + path;
    ASSERT_TRUE(v.count(key)) << key;
    EXPECT_EQ(start - std::stoull(v.at(key)), 64 * kMiB) << path << " charges 64 MiB";
  }
  EXPECT_EQ(start - std::stoull(v.at("free_after_mipmapped")), 80 * kMiB)
      << "mipmapped: 64 MiB + 16 MiB for the second level";
  EXPECT_EQ(std::stoull(v.at("free_after_async_trim")), start) << "a trimmed pool is uncharged";
  EXPECT_EQ(std::stoull(v.at("free_after_ownpool_sync")), start)
      << "the pool gave its block back at the sync (threshold 0) and cuMemGetInfo sees it";
  EXPECT_EQ(std::stoull(v.at("free_after_ownpool_destroy")), start);
  EXPECT_EQ(std::stoull(v.at("free_after_host")), start) << "host memory is not charged";
  EXPECT_EQ(std::stoull(v.at("free_end")), start);
  EXPECT_EQ(v.at("foreign_free"), "1") << "forwarded: the driver's own CUDA_ERROR_INVALID_VALUE";
}

INSTANTIATE_TEST_SUITE_P(Resolutions, ShimPathTest,
                         ::testing::Values(Resolution{"Linked", {}},
                                           Resolution{"GetProc12000", {"12000", "0"}},
                                           Resolution{"GetProc12000PerThread", {"12000", "2"}},
                                           Resolution{"GetProc13000", {"13000", "1"}},
                                           Resolution{"GetProc13000PerThread", {"13000", "2"}}),
                         [](const ::testing::TestParamInfo<Resolution>& info) {
                           return info.param.name;
                         });

TEST_F(ShimTest, PointersFromGetProcAddressAreCapturedAtEveryVersionAndFlag) {
  for (const char* version : {"12000", "13000"}) {
    for (const char* flags : {"0", "1", "2"}) {
      auto t = Tenant({"getproc", version, flags, "128"},
                      {"TESSERA_CONTAINER=gp", "TESSERA_MEM_LIMIT=512MiB"});
      EXPECT_EQ(Get(*t, "alloc_is_wrapper"), 1u) << version << "/" << flags;
      EXPECT_EQ(Get(*t, "launch_is_ptsz"), std::string(flags) == "2" ? 1u : 0u);
      EXPECT_EQ(Get(*t, "allocated"), 512 * kMiB) << version << "/" << flags;
      EXPECT_EQ(Get(*t, "failure"), 2u);
      t->CloseStdin();
      EXPECT_EQ(t->Wait(30s), 0);
    }
  }
}

TEST_F(ShimTest, DlopenOfLibcudaFindsTheShim) {
  auto t = Tenant({"dlopen"}, {"TESSERA_CONTAINER=dl"});
  EXPECT_EQ(Get(*t, "same_object"), 1u);
  EXPECT_EQ(Get(*t, "dlopen_same"), 1u);
  EXPECT_EQ(t->Wait(10s), 0);
}

TEST_F(ShimTest, PreloadedShimCapturesAProgramThatDlopensLibcudaByName) {
  auto t = Tenant({},
                  {"LD_PRELOAD=" + BuildDir() + "/lib/tessera/libcuda.so.1",
                   "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1",
                   "TESSERA_CONTAINER=preloaded", "TESSERA_MEM_LIMIT=768MiB"},
                  "preload_tenant");
  auto from = t->WaitForKey("cuMemAlloc_v2_from", 30s);
  ASSERT_TRUE(from.has_value());
  EXPECT_NE(from->find("lib/tessera/libcuda.so.1"), std::string::npos) << *from;
  EXPECT_EQ(Get(*t, "allocated"), 768 * kMiB);
  EXPECT_EQ(Get(*t, "failure"), 2u);
  EXPECT_EQ(t->Wait(30s), 0);
}

TEST_F(ShimTest, KilledProcessMemoryIsFreeForTheContainerWithinOneSecond) {
  // A second process keeps the container alive (a self-declared container goes with its last
  // process), so what is measured is the reclaim of the killed one's memory.
  auto keeper = Tenant({"hold", std::to_string(64 * kMiB)},
                       {"TESSERA_CONTAINER=crash", "TESSERA_MEM_LIMIT=2GiB"});
  ASSERT_EQ(keeper->WaitForKey("ready", 30s), "1");
  auto holder = Tenant({"hold", std::to_string(1536 * kMiB)},
                       {"TESSERA_CONTAINER=crash", "TESSERA_MEM_LIMIT=2GiB"});
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  holder->Kill(SIGKILL);
  ASSERT_EQ(holder->Wait(10s), 128 + SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  uint64_t got = 0;
  while (std::chrono::steady_clock::now() - killed < 1s) {
    auto next = Tenant({"alloc-until-oom", "64"}, {"TESSERA_CONTAINER=crash"});
    got = Get(*next, "allocated");
    next->CloseStdin();
    EXPECT_EQ(next->Wait(30s), 0);
    if (got == 2 * kGiB - 64 * kMiB) break;
  }
  EXPECT_EQ(got, 2 * kGiB - 64 * kMiB);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 1s);
}

TEST_F(ShimTest, ForkedChildrenAreTrackedAsTheirOwnProcesses) {
  auto t = Tenant({"fork-hold", std::to_string(768 * kMiB)},
                  {"TESSERA_CONTAINER=forky", "TESSERA_MEM_LIMIT=1GiB"});
  const uint64_t parent = Get(*t, "parent_alloc");
  const uint64_t child = Get(*t, "child_alloc");
  EXPECT_TRUE((parent == 0) != (child == 0))
      << "only one of two 768 MiB fits in 1 GiB: parent=" << parent << " child=" << child;
  t->CloseStdin();
  EXPECT_EQ(t->Wait(30s), 0);
}

TEST_F(ShimTest, ErrorPaths) {
  // A bad limit: cuInit fails with CUDA_ERROR_INVALID_VALUE.
  auto bad = Tenant({"meminfo"}, {"TESSERA_MEM_LIMIT=-1GiB"});
  EXPECT_EQ(Get(*bad, "init_error"), 1u);
  EXPECT_EQ(bad->Wait(10s), 3);
  // No daemon: fail closed ...
  auto closed = Tenant({"meminfo"}, {"TESSERA_SOCKET=/tmp/no-such-tessera.sock"});
  EXPECT_EQ(Get(*closed, "init_error"), 3u);
  EXPECT_EQ(closed->Wait(10s), 3);
  // ... or open, unisolated, when asked.
  auto open = Tenant({"meminfo"}, {"TESSERA_SOCKET=/tmp/no-such-tessera.sock",
                                   "TESSERA_FAIL_OPEN=1", "TESSERA_MEM_LIMIT=1GiB"});
  EXPECT_EQ(Get(*open, "total"), 8 * kGiB);
  EXPECT_EQ(open->Wait(10s), 0);
  // Disabled: everything passes through, the limit is ignored.
  auto off = Tenant({"meminfo"}, {"TESSERA_DISABLE=1", "TESSERA_MEM_LIMIT=1GiB"});
  EXPECT_EQ(Get(*off, "total"), 8 * kGiB);
  EXPECT_EQ(off->Wait(10s), 0);
  // Limited: the tenant sees its limit.
  auto on = Tenant({"meminfo"}, {"TESSERA_CONTAINER=seen", "TESSERA_MEM_LIMIT=3GiB"});
  EXPECT_EQ(Get(*on, "total"), 3 * kGiB);
  EXPECT_EQ(Get(*on, "device_total"), 3 * kGiB);
  EXPECT_EQ(on->Wait(10s), 0);
}

TEST_F(ShimTest, VisibleDevicesRenumberAndLimitsFollowThem) {
  // Only the second GPU (4 GiB), seen as device 0, limited to 1 GiB.
  auto t =
      Tenant({"alloc-until-oom", "64"},
             {"TESSERA_CONTAINER=second", "TESSERA_VISIBLE_DEVICES=1", "TESSERA_MEM_LIMIT=1GiB"});
  EXPECT_EQ(Get(*t, "allocated"), kGiB);
  EXPECT_EQ(Get(*t, "total"), kGiB);
  t->CloseStdin();
  EXPECT_EQ(t->Wait(30s), 0);
  auto unlimited =
      Tenant({"meminfo"}, {"TESSERA_CONTAINER=second-free", "TESSERA_VISIBLE_DEVICES=1"});
  EXPECT_EQ(Get(*unlimited, "total"), 4 * kGiB) << "device 0 is the node's device 1";
  EXPECT_EQ(unlimited->Wait(10s), 0);
  auto unknown = Tenant({"meminfo"}, {"TESSERA_VISIBLE_DEVICES=5"});
  EXPECT_EQ(Get(*unknown, "init_error"), 1u) << "an unknown device is CUDA_ERROR_INVALID_VALUE";
  EXPECT_EQ(unknown->Wait(10s), 3);
}

TEST_F(ShimTest, NvmlShowsTheContainersLimitUsageAndOnlyItsProcesses) {
  auto holder = Tenant({"hold", std::to_string(300 * kMiB)},
                       {"TESSERA_CONTAINER=viewed", "TESSERA_MEM_LIMIT=1GiB"});
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  auto other = Tenant({"hold", std::to_string(100 * kMiB)}, {"TESSERA_CONTAINER=neighbour"});
  ASSERT_EQ(other->WaitForKey("ready", 30s), "1");

  auto inside = Tenant({}, {"TESSERA_CONTAINER=viewed"}, "nvml_tenant");
  ASSERT_EQ(inside->Wait(30s), 0);
  inside->DrainOutput(5s);
  const auto& v = inside->values();
  EXPECT_EQ(v.at("total"), std::to_string(kGiB));
  EXPECT_EQ(v.at("v2_total"), std::to_string(kGiB));
  EXPECT_EQ(v.at("used"), std::to_string(300 * kMiB));
  EXPECT_EQ(v.at("free"), std::to_string(kGiB - 300 * kMiB));
  ASSERT_EQ(v.at("processes"), "1") << "only the container's own process, not the neighbour";
  EXPECT_EQ(v.at("pid_0"), std::to_string(holder->pid()));
  EXPECT_EQ(v.at("mem_0"), std::to_string(300 * kMiB));

  // Without isolation the real (simulated) device is shown, every process included.
  auto outside = Tenant({}, {"TESSERA_DISABLE=1"}, "nvml_tenant");
  ASSERT_EQ(outside->Wait(30s), 0);
  outside->DrainOutput(5s);
  EXPECT_EQ(outside->values().at("total"), std::to_string(8 * kGiB));
  EXPECT_EQ(outside->values().at("processes"), "2");
}

TEST_F(ShimTest, NvmlShowsProcessesWithThePidsOfTheirOwnNamespace) {
  if (std::system("unshare --pid --fork --kill-child true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "cannot create a pid namespace here (needs root and unshare(1))";
  }
  // The holder runs in a new pid namespace, where it is pid 1; the daemon knows its host pid.
  std::vector<std::string> env = TenantEnv(SimEnv(), socket_, "namespaced");
  auto holder = std::make_unique<ChildProcess>(
      std::vector<std::string>{"/usr/bin/unshare", "--pid", "--fork", "--kill-child",
                               BuildDir() + "/tests/shim_tenant", "hold",
                               std::to_string(64 * kMiB)},
      env);
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  auto inside = Tenant({}, {"TESSERA_CONTAINER=namespaced"}, "nvml_tenant");
  ASSERT_EQ(inside->Wait(30s), 0);
  inside->DrainOutput(5s);
  ASSERT_EQ(inside->values().at("processes"), "1");
  EXPECT_EQ(inside->values().at("pid_0"), "1") << "the pid the tenant sees for itself";
  EXPECT_EQ(inside->values().at("mem_0"), std::to_string(64 * kMiB));
}

TEST_F(ShimTest, ARestartedDaemonKeepsTheBooksAndReapsTenantsThatDieLater) {
  auto holder = Tenant({"hold", std::to_string(kGiB)},
                       {"TESSERA_CONTAINER=survivor", "TESSERA_MEM_LIMIT=2GiB"});
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  // The daemon dies hard and a new one starts on the same socket: it reopens the ledger.
  daemon_->Kill(SIGKILL);
  ASSERT_EQ(daemon_->Wait(10s), 128 + SIGKILL);
  daemon_ =
      std::make_unique<ChildProcess>(std::vector<std::string>{BuildDir() + "/bin/tesserad", "--sim",
                                                              "--socket", socket_, "--ephemeral"},
                                     SimEnv());
  // The survivor container's bytes on GPU 0 in the daemon's STATUS, "gone" without it, "" when
  // the daemon does not answer.
  auto used = [&]() -> std::string {
    auto reply = tessera::ipc::Call(socket_, "STATUS", nullptr, 2s);
    if (!reply.ok() || reply->rfind("OK ", 0) != 0) return "";
    const nlohmann::json status = nlohmann::json::parse(reply->substr(3));
    for (const auto& c : status.at("containers")) {
      if (c.at("id") == "survivor") return std::to_string(c.at("used_bytes").at(0).get<uint64_t>());
    }
    return "gone";
  };
  std::string seen;
  for (int i = 0; i < 300 && (seen.empty() || seen == "gone"); ++i) {
    seen = used();
    if (seen.empty() || seen == "gone") std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(seen, std::to_string(kGiB)) << "the live tenant's memory is still counted";
  // The tenant dies; it never registered with this daemon, so the sweep must find it, take its
  // memory back and remove its (self-declared, now empty) container.
  holder->Kill(SIGKILL);
  ASSERT_EQ(holder->Wait(10s), 128 + SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  while (used() != "gone" && std::chrono::steady_clock::now() - killed < 3s) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(used(), "gone");
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 3s);
}

class ShimContextTest : public ShimTest {
 protected:
  std::vector<std::string> DaemonArgs() override { return {"--context-overhead", "300MiB"}; }
};

TEST_F(ShimContextTest, EachProcessPaysItsContextOncePerDevice) {
  auto t = Tenant({"alloc-until-oom", "64"}, {"TESSERA_CONTAINER=ctx", "TESSERA_MEM_LIMIT=1GiB"});
  // 1 GiB - 300 MiB of context = 724 MiB, so 11 chunks of 64 MiB (704 MiB).
  EXPECT_EQ(Get(*t, "allocated"), 704 * kMiB);
  EXPECT_EQ(Get(*t, "free"), 20 * kMiB);
  t->CloseStdin();
  EXPECT_EQ(t->Wait(30s), 0);
}

class ShimStrictDaemonTest : public ShimTest {
 protected:
  std::vector<std::string> DaemonArgs() override { return {"--allow-self-declared=false"}; }
};

TEST_F(ShimStrictDaemonTest, UnregisteredContainersAreRefused) {
  auto t = Tenant({"meminfo"}, {"TESSERA_CONTAINER=stranger", "TESSERA_MEM_LIMIT=1GiB"});
  EXPECT_EQ(Get(*t, "init_error"), 3u) << "fail closed: CUDA_ERROR_NOT_INITIALIZED";
  EXPECT_EQ(t->Wait(10s), 3);
}

}  // namespace
