// Reconciliation: the ledger against the device's per-process memory.
//   - Reconciler over a real ledger segment and Registry, with the device's process list played by
//     the test: unseen bytes charged to the right container, the over/back-under transitions, the
//     block flag refusing reservations, the kill action's targets, unregistered processes.
//   - End to end: a real tesserad on simgpu and a real tenant that allocates through the shim and
//     then through simgpu's own cuMemAlloc_v2 (the shim never sees it), past its limit. Each
//     action (log, block, kill) must be taken within 2 s of the bypass.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/compute.h"
#include "daemon/reconciler.h"
#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"
#include "protocol/protocol.h"

namespace tessera::daemon {
namespace {

using namespace std::chrono_literals;
using config::OverLimitAction;
using Kind = ReconcileEvent::Kind;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-reconcile-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    shm_unlink(name_.c_str());
    auto ledger = ledger::MemoryLedger::CreateOrOpen(
        name_, {{"GPU-aaaaaaaa-0000-4000-8000-000000000000", "A", 8 * kGiB}});
    ASSERT_TRUE(ledger.ok()) << ledger.error();
    layout_ = ledger->layout();
    auto compute = ComputeService::Create(layout_, 1, ComputeOptions{});
    ASSERT_TRUE(compute.ok());
    compute_ = std::move(*compute);
    registry_ =
        std::make_unique<Registry>(std::move(*ledger), RegistryOptions{true, 0}, compute_.get());
  }
  void TearDown() override {
    registry_.reset();
    compute_.reset();
    shm_unlink(name_.c_str());
  }
  // A container with a 1 GiB limit and one process (host pid `pid`) holding `reserved` bytes
  // through the shim.
  uint32_t Container(const std::string& id, int32_t pid, uint64_t reserved) {
    auto added =
        registry_->SetContainer(*protocol::ParseMessage("CONTAINER id=" + id + " mem=1073741824"));
    EXPECT_TRUE(added.ok()) << added.error();
    const int c = registry_->ledger().FindContainer(id);
    auto p = const_cast<ledger::MemoryLedger&>(registry_->ledger())
                 .AddProcess(static_cast<uint32_t>(c), pid);
    EXPECT_TRUE(p.ok());
    EXPECT_TRUE(const_cast<ledger::MemoryLedger&>(registry_->ledger())
                    .Reserve(static_cast<uint32_t>(c), *p, 0, reserved));
    process_of_[pid] = *p;
    return static_cast<uint32_t>(c);
  }
  Reconciler Make(OverLimitAction action) {
    ReconcilerOptions options;
    options.action = action;
    options.signal = [this](pid_t pid, int sig) {
      signalled_.push_back({pid, sig});
      return 0;
    };
    options.log = [this](const std::string& line) { log_.push_back(line); };
    return Reconciler(
        registry_.get(), 1, [this](int) { return Result(device_); }, options);
  }
  static int Count(const std::vector<ReconcileEvent>& events, Kind kind) {
    int n = 0;
    for (const ReconcileEvent& e : events) n += e.kind == kind ? 1 : 0;
    return n;
  }

  std::string name_;
  ledger::LedgerLayout* layout_ = nullptr;
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<Registry> registry_;
  std::map<int32_t, uint32_t> process_of_;
  std::vector<DeviceProcess> device_;  // what "NVML" reports
  std::vector<std::pair<pid_t, int>> signalled_;
  std::vector<std::string> log_;
};

TEST_F(ReconcilerTest, ChargesWhatTheShimDidNotSeeToTheRightContainer) {
  const uint32_t web = Container("web", 101, 200 * kMiB);
  const uint32_t batch = Container("batch", 202, 300 * kMiB);
  // web's process holds 50 MiB more than it reserved (its context); batch's exactly what it did.
  device_ = {{101, 250 * kMiB}, {202, 300 * kMiB}};
  Reconciler r = Make(OverLimitAction::kBlock);
  EXPECT_TRUE(r.RunOnce().empty());
  EXPECT_EQ(layout_->containers[web].unseen[0].load(), 50 * kMiB);
  EXPECT_EQ(layout_->containers[batch].unseen[0].load(), 0u);
  EXPECT_EQ(layout_->containers[web].used[0].load(), 200 * kMiB) << "reservations are the shim's";
  // The process releases its context: nothing unseen any more.
  device_ = {{101, 200 * kMiB}, {202, 300 * kMiB}};
  r.RunOnce();
  EXPECT_EQ(layout_->containers[web].unseen[0].load(), 0u);
}

TEST_F(ReconcilerTest, BlockRefusesReservationsWhileOverAndLiftsWhenBackUnder) {
  const uint32_t web = Container("web", 101, 600 * kMiB);
  device_ = {{101, 600 * kMiB + 500 * kMiB}};  // 500 MiB behind the shim's back: 1.1 GiB > 1 GiB
  Reconciler r = Make(OverLimitAction::kBlock);
  auto events = r.RunOnce();
  ASSERT_EQ(Count(events, Kind::kOverLimit), 1);
  EXPECT_EQ(events[0].container, "web");
  EXPECT_EQ(events[0].reserved, 600 * kMiB);
  EXPECT_EQ(events[0].unseen, 500 * kMiB);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("container web is over its limit on GPU 0"), std::string::npos) << log_[0];
  EXPECT_NE(log_[0].find("action block"), std::string::npos) << log_[0];
  auto& ledger = const_cast<ledger::MemoryLedger&>(registry_->ledger());
  EXPECT_FALSE(ledger.Reserve(web, process_of_[101], 0, 1 * kMiB)) << "blocked, though 1 MiB fits";
  EXPECT_TRUE(r.RunOnce().empty()) << "said once, not every pass";
  device_ = {{101, 600 * kMiB}};
  events = r.RunOnce();
  EXPECT_EQ(Count(events, Kind::kBackUnder), 1);
  EXPECT_TRUE(ledger.Reserve(web, process_of_[101], 0, 1 * kMiB));
  EXPECT_TRUE(signalled_.empty());
}

TEST_F(ReconcilerTest, LogOnlyReportsAndBlocksNothing) {
  const uint32_t web = Container("web", 101, 600 * kMiB);
  device_ = {{101, 2 * kGiB}};
  Reconciler r = Make(OverLimitAction::kLog);
  EXPECT_EQ(Count(r.RunOnce(), Kind::kOverLimit), 1);
  auto& ledger = const_cast<ledger::MemoryLedger&>(registry_->ledger());
  EXPECT_TRUE(ledger.Reserve(web, process_of_[101], 0, 1 * kMiB));
  EXPECT_TRUE(signalled_.empty());
}

TEST_F(ReconcilerTest, KillTargetsOnlyTheOverLimitContainersProcesses) {
  Container("web", 101, 600 * kMiB);
  Container("batch", 202, 300 * kMiB);
  device_ = {{101, 1200 * kMiB}, {202, 300 * kMiB}};
  Reconciler r = Make(OverLimitAction::kKill);
  auto events = r.RunOnce();
  EXPECT_EQ(Count(events, Kind::kKilled), 1);
  ASSERT_EQ(signalled_.size(), 1u);
  EXPECT_EQ(signalled_[0], std::make_pair(pid_t{101}, SIGKILL));
}

TEST_F(ReconcilerTest, AnUnregisteredProcessIsReportedOnceAndChargedToNobody) {
  const uint32_t web = Container("web", 101, 100 * kMiB);
  device_ = {{101, 100 * kMiB}, {999, 3 * kGiB}};
  Reconciler r = Make(OverLimitAction::kKill);
  auto events = r.RunOnce();
  ASSERT_EQ(Count(events, Kind::kUnregistered), 1);
  EXPECT_EQ(events[0].pid, 999);
  EXPECT_EQ(layout_->containers[web].unseen[0].load(), 0u);
  EXPECT_TRUE(signalled_.empty()) << "nobody's limit applies to it";
  EXPECT_TRUE(r.RunOnce().empty());
}

TEST_F(ReconcilerTest, AFailingProcessListIsSaidOnceAndChangesNothing) {
  const uint32_t web = Container("web", 101, 100 * kMiB);
  ReconcilerOptions options;
  options.log = [this](const std::string& line) { log_.push_back(line); };
  Reconciler r(
      registry_.get(), 1,
      [](int) { return Result<std::vector<DeviceProcess>>::Error("NVML said 999"); }, options);
  r.RunOnce();
  r.RunOnce();
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("GPU 0: NVML said 999"), std::string::npos) << log_[0];
  EXPECT_EQ(layout_->containers[web].unseen[0].load(), 0u);
}

// ---- End to end
// ----------------------------------------------------------------------------------
class BypassTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    state_ = process::UniqueName("reconcile");
    socket_ = "/tmp/" + state_ + ".sock";
    log_ = "/tmp/" + state_ + ".err";
    std::string cmd = "exec '" + process::BuildDir() + "/bin/tesserad' --sim --socket '" + socket_ +
                      "' --ephemeral --reconcile-interval 1s --over-limit-action " + GetParam() +
                      " 2>'" + log_ + "'";
    daemon_ = std::make_unique<process::ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", cmd}, Env());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(ipc::WaitUntilListening(socket_, 5s))
        << "tesserad did not start listening on " << socket_;
  }
  void TearDown() override {
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    shm_unlink(("/tessera-sim-" + state_).c_str());
    unlink(log_.c_str());
  }
  std::vector<std::string> Env() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimT:8GiB:80"};
  }
  std::string DaemonLog() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Polls the daemon's log for `text` for up to `timeout`; the time it took, or nullopt.
  std::optional<std::chrono::milliseconds> LogShows(const std::string& text,
                                                    std::chrono::milliseconds timeout) const {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < timeout) {
      if (DaemonLog().find(text) != std::string::npos) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start);
      }
      std::this_thread::sleep_for(20ms);
    }
    return std::nullopt;
  }
  // A tenant of container "web" (limit 1 GiB): 512 MiB through the shim, 768 MiB around it.
  std::unique_ptr<process::ChildProcess> Bypasser() const {
    std::vector<std::string> env = Env();
    env.push_back("TESSERA_SOCKET=" + socket_);
    env.push_back("TESSERA_REAL_LIBCUDA=" + process::BuildDir() + "/lib/libtessera-simgpu.so");
    env.push_back("TESSERA_CONTAINER=web");
    env.push_back("TESSERA_MEM_LIMIT=1GiB");
    return std::make_unique<process::ChildProcess>(
        std::vector<std::string>{process::BuildDir() + "/tests/shim_tenant", "bypass",
                                 std::to_string(512 * kMiB), std::to_string(768 * kMiB)},
        env);
  }
  std::string state_, socket_, log_;
  std::unique_ptr<process::ChildProcess> daemon_;
};

TEST_P(BypassTest, AContainerOverItsLimitBehindTheShimsBackIsHandledWithinTwoSeconds) {
  auto tenant = Bypasser();
  ASSERT_EQ(tenant->WaitForKey("ready", 30s), "1");
  const auto detected = LogShows("container web is over its limit on GPU 0", 2s);
  ASSERT_TRUE(detected.has_value()) << "not detected within 2 s; daemon log:\n" << DaemonLog();
  EXPECT_NE(DaemonLog().find("512MiB reserved through the shim + 768MiB the shim did not see"),
            std::string::npos)
      << DaemonLog();
  const std::string action = GetParam();
  if (action == "log") {
    EXPECT_TRUE(tenant->WaitForValue("shim_alloc", "0", 1s)) << "log only: allocations go on";
    tenant->CloseStdin();
    EXPECT_EQ(tenant->Wait(10s), 0);
  } else if (action == "block") {
    // Detected within 2 s of the bypass; the refusal follows at once (the same pass).
    EXPECT_TRUE(tenant->WaitForValue("shim_alloc", "2", 1s))
        << "1 MiB through the shim was not refused";
    ASSERT_TRUE(tenant->WriteStdin("free\n"));
    EXPECT_EQ(tenant->WaitForKey("freed", 5s), "1");
    EXPECT_TRUE(tenant->WaitForValue("shim_alloc", "0", 3s))
        << "still blocked after it went back under";
    EXPECT_TRUE(LogShows("container web is back under its limit on GPU 0", 1s)) << DaemonLog();
    tenant->CloseStdin();
    EXPECT_EQ(tenant->Wait(10s), 0);
  } else {
    EXPECT_EQ(tenant->Wait(2s), 128 + SIGKILL) << "the kill action left the tenant running";
    EXPECT_TRUE(LogShows("of container web (over its limit on GPU 0)", 1s)) << DaemonLog();
  }
}

INSTANTIATE_TEST_SUITE_P(Actions, BypassTest, ::testing::Values("log", "block", "kill"));

}  // namespace
}  // namespace tessera::daemon
