// ComputeService's bookkeeping over a real ledger segment, with the processes' side played by the
// test writing their slots (measured GPU time, beats, waiting): what the arbiter is charged when a
// process slot is reused by a new process, and when a restarted daemon finds processes that have
// been running for a while. Shares are read back through Shares(), as `tessera smi` reads them.
#include "daemon/compute.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "ipc/futex.h"
#include "ledger/memory_ledger.h"

namespace tessera::daemon {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMs = 1'000'000;

class ComputeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-compute-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    shm_unlink(name_.c_str());
    auto ledger = ledger::MemoryLedger::CreateOrOpen(
        name_, {{"GPU-aaaaaaaa-0000-4000-8000-000000000000", "A", 8 * kGiB}});
    ASSERT_TRUE(ledger.ok()) << ledger.error();
    ledger_ = std::make_unique<ledger::MemoryLedger>(std::move(*ledger));
  }
  void TearDown() override {
    compute_.reset();
    ledger_.reset();
    shm_unlink(name_.c_str());
  }
  void StartService() {
    ComputeOptions options;
    options.defaults.policy = ArbiterPolicy::kPreemptive;
    auto compute = ComputeService::Create(ledger_->layout(), 1, options);
    ASSERT_TRUE(compute.ok()) << compute.error();
    compute_ = std::move(*compute);
    compute_->Start();
  }
  uint32_t AddContainer(const std::string& id) {
    auto c = ledger_->UpsertContainer(id, {ledger::kUnlimited});
    EXPECT_TRUE(c.ok());
    return c.ok() ? *c : 0;
  }
  uint32_t AddProcess(uint32_t c) {
    auto p = ledger_->AddProcess(c, 1000 + static_cast<int32_t>(c));
    EXPECT_TRUE(p.ok());
    return p.ok() ? *p : 0;
  }
  // Process `p` reports `total_ns` of GPU time measured since it started and that it has work.
  void Report(uint32_t p, uint64_t total_ns) {
    ledger::ProcessSlot& slot = ledger_->layout()->processes[p];
    slot.gpu_ns[0].store(total_ns);
    slot.busy_mask.store(1);
    slot.beat_ns.store(ipc::MonotonicNs());
  }
  // The container's achieved share of GPU 0 over the arbiter's window once the service has read
  // the latest reports (polled: the service runs on its own thread).
  double AchievedAfterReports(uint32_t c, double at_least) {
    double achieved = -1;
    for (int i = 0; i < 100; ++i) {
      ledger_->layout()->gate.demand_seq.fetch_add(1);
      ipc::FutexWakeAll(&ledger_->layout()->gate.demand_seq);
      std::this_thread::sleep_for(5ms);
      for (const ContainerShare& s : compute_->Shares(0).containers) {
        if (s.container == static_cast<int>(c)) achieved = s.achieved;
      }
      if (achieved >= at_least) break;
    }
    return achieved;
  }

  std::string name_;
  std::unique_ptr<ledger::MemoryLedger> ledger_;
  std::unique_ptr<ComputeService> compute_;
};

TEST_F(ComputeServiceTest, AReusedProcessSlotIsChargedFromZero) {
  StartService();
  const uint32_t first = AddContainer("first");
  const uint32_t p = AddProcess(first);
  Report(p, 600 * kMs);
  EXPECT_NEAR(AchievedAfterReports(first, 59), 60, 1);
  // The first process exits; its container goes with it. A new container's process takes the
  // same process slot and reports its own, smaller total: all of it is new GPU time.
  ledger_->ReclaimProcess(p);
  ASSERT_TRUE(ledger_->RemoveContainer(first).ok());
  std::this_thread::sleep_for(20ms);  // the service sees the slot free in between
  const uint32_t second = AddContainer("second");
  const uint32_t q = AddProcess(second);
  ASSERT_EQ(q, p) << "the test needs the slot reused";
  Report(q, 100 * kMs);
  EXPECT_NEAR(AchievedAfterReports(second, 9), 10, 1)
      << "the new process's GPU time was measured against its predecessor's total";
}

TEST_F(ComputeServiceTest, AProcessThatExitsIsChargedItsLastReport) {
  StartService();
  const uint32_t c = AddContainer("web");
  const uint32_t keeper = AddProcess(c);  // keeps the container alive after the other exits
  Report(keeper, 0);
  const uint32_t p = AddProcess(c);
  Report(p, 100 * kMs);
  EXPECT_NEAR(AchievedAfterReports(c, 9), 10, 1);
  Report(p, 300 * kMs);  // its last report, then it exits before the service reads it
  ledger_->ReclaimProcess(p);
  EXPECT_NEAR(AchievedAfterReports(c, 29), 30, 1);
}

TEST_F(ComputeServiceTest, ARestartedDaemonDoesNotChargeTimeFromBeforeItStarted) {
  const uint32_t c = AddContainer("trainer");
  const uint32_t p = AddProcess(c);
  Report(p, 5000 * kMs);  // five seconds of GPU time under the previous daemon
  StartService();
  Report(p, 5050 * kMs);
  EXPECT_NEAR(AchievedAfterReports(c, 4), 5, 1)
      << "the new daemon charged the process's whole history to this window";
}

}  // namespace
}  // namespace tessera::daemon
