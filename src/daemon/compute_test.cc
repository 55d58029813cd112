// ComputeService's bookkeeping over a real ledger segment, with the processes' side played by the
// test writing their slots (measured GPU time, beats, waiting, busy, idle_at): what the arbiter is
// charged when a process slot is reused by a new process, and when a restarted daemon finds
// processes that have been running for a while; when a hand-off lets the next holder in (the
// published end of the previous holder's work). Shares are read back through Shares(), as
// `tessera smi` reads them; the token from the ledger's gate words, as the shim reads it.
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
    ledger::MemoryLedger::Remove(name_);
    auto ledger = ledger::MemoryLedger::CreateOrOpen(
        name_, {{"GPU-aaaaaaaa-0000-4000-8000-000000000000", "A", 8 * kGiB}});
    ASSERT_TRUE(ledger.ok()) << ledger.error();
    ledger_ = std::make_unique<ledger::MemoryLedger>(std::move(*ledger));
  }
  void TearDown() override {
    compute_.reset();
    ledger_.reset();
    ledger::MemoryLedger::Remove(name_);
  }
  void StartService(std::chrono::nanoseconds quota_max = 20ms) {
    ComputeOptions options;
    options.defaults.policy = ArbiterPolicy::kPreemptive;
    options.defaults.quota_max = quota_max;
    auto compute = ComputeService::Create(*ledger_, options);
    ASSERT_TRUE(compute.ok()) << compute.error();
    compute_ = std::move(*compute);
    compute_->Start();
  }
  uint32_t AddContainer(const std::string& id) {
    auto c = ledger_->UpsertContainer(id, {ledger::kUnlimited});
    EXPECT_TRUE(c.ok());
    return c.ok() ? *c : 0;
  }
  uint32_t AddHighPriorityContainer(const std::string& id) {
    const uint32_t c = AddContainer(id);
    ledger_->SetCompute(c, 100, 1, 1);
    return c;
  }
  uint32_t AddProcess(uint32_t c) {
    auto p = ledger_->AddProcess(c, 1000 + static_cast<int32_t>(c));
    EXPECT_TRUE(p.ok());
    return p.ok() ? *p : 0;
  }
  // Process `p` reports `total_ns` of GPU time measured since it started and that it has work.
  void Report(uint32_t p, uint64_t total_ns) {
    ledger::ProcessCounters& slot = ledger_->process(p);
    slot.gpu_ns[0].store(total_ns);
    slot.busy_mask.store(1);
    slot.beat_ns.store(ipc::MonotonicNs());
  }
  // The container's achieved share of GPU 0 over the arbiter's window once the service has read
  // the latest reports (polled: the service runs on its own thread).
  double AchievedAfterReports(uint32_t c, double at_least) {
    double achieved = -1;
    for (int i = 0; i < 100; ++i) {
      ledger_->exchange().demand_seq.fetch_add(1);
      ipc::FutexWakeAll(&ledger_->exchange().demand_seq);
      std::this_thread::sleep_for(5ms);
      for (const ContainerShare& s : compute_->Shares(0).containers) {
        if (s.container == static_cast<int>(c)) achieved = s.achieved;
      }
      if (achieved >= at_least) break;
    }
    return achieved;
  }

  // Process `p` of container `c` exits and its container goes with it.
  void EndWithContainer(uint32_t p, uint32_t c) {
    ledger_->ReclaimProcess(p);
    ASSERT_TRUE(ledger_->RemoveContainer(c).ok());
  }
  // A new container `id` whose process takes slot `p` (the test fails if another slot is taken)
  // and reports `total_ns`; returns the container.
  uint32_t ReuseSlot(uint32_t p, const std::string& id, uint64_t total_ns) {
    const uint32_t c = AddContainer(id);
    const uint32_t q = AddProcess(c);
    EXPECT_EQ(q, p) << "the test needs the slot reused";
    Report(q, total_ns);
    return c;
  }

  ledger::ProcessCounters& Slot(uint32_t p) { return ledger_->process(p); }
  // Process `p`: `waiting` threads at the gate, work in flight or not; its sampler beats.
  void SetDemand(uint32_t p, uint32_t waiting, bool busy) {
    Slot(p).waiting[0].store(waiting);
    Slot(p).busy_mask.store(busy ? 1 : 0);
    Slot(p).beat_ns.store(ipc::MonotonicNs());
    ledger_->exchange().demand_seq.fetch_add(1);
    ipc::FutexWakeAll(&ledger_->exchange().demand_seq);
  }
  // Process `p`, still busy, says its queued work ends `in_ns` from now; returns that instant.
  uint64_t PublishEnd(uint32_t p, uint64_t in_ns) {
    const uint64_t end = ipc::MonotonicNs() + in_ns;
    Slot(p).idle_at_ns[0].store(end);
    SetDemand(p, 0, true);
    return end;
  }
  bool MayRun(uint32_t c) {
    return (ledger_->layout()->gate.devices[0].may_run[c / 64].load() >> (c % 64)) & 1;
  }
  // Polls until container `c` may run (or not, `want` false) while keeping the listed processes'
  // beats fresh; returns when that happened, or 0 when it did not within `limit`.
  uint64_t AwaitMayRun(uint32_t c, bool want, std::chrono::milliseconds limit,
                       std::initializer_list<uint32_t> beating) {
    const uint64_t deadline = ipc::MonotonicNs() + static_cast<uint64_t>(limit.count()) * kMs;
    for (;;) {
      const uint64_t now = ipc::MonotonicNs();
      if (MayRun(c) == want) return now;
      if (now > deadline) return 0;
      for (uint32_t p : beating) Slot(p).beat_ns.store(now);
      std::this_thread::sleep_for(50us);
    }
  }

  // a holds the token for a 5 ms grant while b (process pb) waits; returns once a's grant is
  // revoked (a still busy, its queued work draining). `a_used_ns`: GPU time a reports first.
  void RevokeAForB(uint32_t a, uint32_t pa, uint32_t pb, uint64_t a_used_ns) {
    Slot(pa).quota_hint_ns[0].store(5 * kMs);  // its grant: 5 ms, then b's turn
    SetDemand(pa, 0, true);
    ASSERT_NE(AwaitMayRun(a, true, 2000ms, {pa}), 0u);
    if (a_used_ns > 0) Report(pa, a_used_ns);
    SetDemand(pb, 1, false);
    ASSERT_NE(AwaitMayRun(a, false, 2000ms, {pa, pb}), 0u) << "a's 5 ms grant never ended";
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
  EndWithContainer(p, first);
  std::this_thread::sleep_for(20ms);  // the service sees the slot free in between
  const uint32_t second = ReuseSlot(p, "second", 100 * kMs);
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

TEST_F(ComputeServiceTest, ASlotFreeWhenTheDaemonRestartedIsChargedFromZeroWhenReused) {
  // The chaos soak's stall: a process exited under the previous daemon, leaving its total in its
  // free slot; the restarted daemon took that total as already charged, and the next process in
  // the slot ran its first 1.3 s uncharged, winning the token over everyone with work.
  const uint32_t old_container = AddContainer("old");
  const uint32_t p = AddProcess(old_container);
  Report(p, 1300 * kMs);
  EndWithContainer(p, old_container);
  StartService();
  const uint32_t c = ReuseSlot(p, "new", 100 * kMs);
  EXPECT_NEAR(AchievedAfterReports(c, 9), 10, 1)
      << "the new process's GPU time was measured against the dead one's total";
}

// A revoked holder's queued work drains before the next holder launches, but the next one is let
// in just before the drain's published end, not after the drained process notices and reports it.
TEST_F(ComputeServiceTest, TheNextHolderIsLetInJustBeforeTheDrainEnds) {
  const uint32_t a = AddContainer("a");
  const uint32_t b = AddContainer("b");
  const uint32_t pa = AddProcess(a);
  const uint32_t pb = AddProcess(b);
  StartService(/*quota_max=*/200ms);
  ASSERT_NO_FATAL_FAILURE(RevokeAForB(a, pa, pb, 0));
  // a still has work in flight and has said nothing about its end: b waits (for up to a quota).
  EXPECT_EQ(AwaitMayRun(b, true, 30ms, {pa, pb}), 0u) << "b was let in during a's drain";
  const uint64_t end = PublishEnd(pa, 20 * kMs);
  const uint64_t granted = AwaitMayRun(b, true, 150ms, {pa, pb});
  ASSERT_NE(granted, 0u) << "b was not let in by a's published end nor by the drain deadline";
  EXPECT_GE(granted + 1000, end - 200'000) << "b was let in more than the lead before a's end";
  EXPECT_LT(granted, end + 50 * kMs) << "b waited for the drain deadline, not a's published end";
  EXPECT_EQ(Slot(pa).busy_mask.load(), 1u);  // a never reported the drain done
  // b pays from a's published end (or from its grant, when that came after the end): b's first
  // kernels, queued behind a's last, are not b's time.
  const ledger::GateDevice& gd = ledger_->layout()->gate.devices[0];
  EXPECT_EQ(gd.holder.load(), static_cast<int32_t>(b));
  EXPECT_GE(gd.charge_from_ns.load(), end);
  EXPECT_LE(gd.charge_from_ns.load(), std::max(end, granted));
}

// The instant a new holder pays from is the arbiter's, from what the revoked holder published in
// its own segment, and a revoked holder cannot move it further than the hand-off lead past the
// grant: one that says its queued work ends a second from now (it lies, hangs, or its estimate is
// off) makes b wait the drain deadline, and b then pays from the grant plus at most the lead, not
// from a's second (no tenant can make another under-measure its own time by more than that).
// Nor does it get the token back for it: the wait is charged to it (before, b's grant lapsed
// unused while it waited, a won the next decision on the tie, and b never ran).
// A revoked holder that claims its work ends far ahead (a lie, or a long graph still queued)
// moves where its successor's charging starts by a grant's length at most, and is itself charged
// the part of the wait its measured GPU time did not cover, so a forged end buys no GPU time.
TEST_F(ComputeServiceTest, ARevokedHolderMovesItsSuccessorsChargingByAGrantAtMost) {
  const uint32_t a = AddContainer("a");
  const uint32_t b = AddContainer("b");
  const uint32_t pa = AddProcess(a);
  const uint32_t pb = AddProcess(b);
  StartService(/*quota_max=*/50ms);
  // a has had the GPU: b is next whenever the arbiter decides again.
  ASSERT_NO_FATAL_FAILURE(RevokeAForB(a, pa, pb, 100 * kMs));
  const uint64_t claimed = PublishEnd(pa, 1000 * kMs);
  const uint64_t granted = AwaitMayRun(b, true, 500ms, {pa, pb});
  ASSERT_NE(granted, 0u) << "b was not let in at the drain deadline";
  const ledger::GateDevice& gd = ledger_->layout()->gate.devices[0];
  EXPECT_EQ(gd.holder.load(), static_cast<int32_t>(b));
  EXPECT_LE(gd.charge_from_ns.load(), granted + 50 * kMs) << "b's charging moved past a grant";
  EXPECT_LT(gd.charge_from_ns.load(), claimed);
  EXPECT_LE(gd.drain_end_ns.load(), granted + 50 * kMs) << "an estimate beyond a grant's length";
}

// A high-priority process that is done launching says when its work ends; the token goes on just
// before then, not when its sampler has seen the work finish and then idle for two ticks.
TEST_F(ComputeServiceTest, AHighPriorityProcessDoneLaunchingHandsOnBeforeItsWorkEnds) {
  const uint32_t hp = AddHighPriorityContainer("hp");
  const uint32_t be = AddContainer("be");
  const uint32_t php = AddProcess(hp);
  const uint32_t pbe = AddProcess(be);
  StartService();
  SetDemand(pbe, 0, true);
  ASSERT_NE(AwaitMayRun(be, true, 2000ms, {pbe}), 0u);
  EXPECT_TRUE(MayRun(hp)) << "its open lane lets it launch at once";
  SetDemand(php, 1, false);  // a request: the lane takes the token at once
  ASSERT_NE(AwaitMayRun(be, false, 2000ms, {php, pbe}), 0u) << "be kept the token beside the lane";
  SetDemand(pbe, 1, false);  // be drained and wants the token back
  SetDemand(php, 0, true);   // hp launched; its work is in flight
  EXPECT_EQ(AwaitMayRun(be, true, 30ms, {php, pbe}), 0u) << "be got the token while hp had work";
  const uint64_t end = PublishEnd(php, 10 * kMs);
  const uint64_t granted = AwaitMayRun(be, true, 2000ms, {php, pbe});
  ASSERT_NE(granted, 0u) << "be never got the token back while hp stayed busy";
  EXPECT_GE(granted + 1000, end - 200'000) << "be was let in more than the lead before hp's end";
  EXPECT_EQ(ledger_->layout()->gate.devices[0].holder.load(), static_cast<int32_t>(be));
}

// The high-priority lane goes in at once, but the holder it revoked still drains: the holder
// after the lane waits for that drain as well as for the lane's own work.
TEST_F(ComputeServiceTest, AfterTheLaneTheNextHolderStillWaitsForTheDrainTheLaneCut) {
  const uint32_t hp = AddHighPriorityContainer("hp");
  const uint32_t a = AddContainer("a");
  const uint32_t b = AddContainer("b");
  const uint32_t php = AddProcess(hp);
  const uint32_t pa = AddProcess(a);
  const uint32_t pb = AddProcess(b);
  StartService(/*quota_max=*/200ms);
  SetDemand(pa, 0, true);
  ASSERT_NE(AwaitMayRun(a, true, 2000ms, {pa}), 0u);
  Report(pa, 100 * kMs);     // a has had the GPU: b goes first once the lane is done
  SetDemand(php, 1, false);  // a request: the lane takes the token at once
  ASSERT_NE(AwaitMayRun(a, false, 2000ms, {php, pa}), 0u) << "a kept the token beside the lane";
  ASSERT_TRUE(MayRun(hp));
  const uint64_t end = PublishEnd(pa, 60 * kMs);  // a's revoked work runs 60 ms more
  SetDemand(pb, 1, false);
  SetDemand(php, 0, false);  // the request was short: the lane is done
  EXPECT_EQ(AwaitMayRun(b, true, 30ms, {php, pa, pb}), 0u)
      << "b was let in at the lane's end with a's work still queued";
  const uint64_t granted = AwaitMayRun(b, true, 2000ms, {php, pa, pb});
  ASSERT_NE(granted, 0u) << "b never got the token";
  EXPECT_GE(granted + 1000, end - 200'000) << "b was let in more than the lead before a's end";
}

// An open lane (GateDevice::lane_open) is published with its container's may_run bit set, so the
// high-priority launcher passes the gate at once without writing anyone else's bits; its first
// launch rings the arbiter, which then makes it the holder and revokes the best-effort one. Past
// its cap the lane shuts, its bit goes, and the token goes back.
TEST_F(ComputeServiceTest, AnOpenLaneIsPublishedAndTheRingingLauncherBecomesTheHolder) {
  const uint32_t hp = AddHighPriorityContainer("hp");
  const uint32_t be = AddContainer("be");
  const uint32_t php = AddProcess(hp);
  const uint32_t pbe = AddProcess(be);
  StartService();
  ledger::GateDevice& gd = ledger_->layout()->gate.devices[0];
  auto lane_open = [&](uint32_t c) { return (gd.lane_open[c / 64].load() >> (c % 64)) & 1; };
  SetDemand(pbe, 0, true);
  ASSERT_NE(AwaitMayRun(be, true, 2000ms, {pbe}), 0u);
  EXPECT_TRUE(lane_open(hp)) << "hp has no work and is under its cap";
  EXPECT_FALSE(lane_open(be)) << "be is not high-priority";
  EXPECT_TRUE(MayRun(hp)) << "an open lane is published with its bit set";
  EXPECT_EQ(gd.holder.load(), static_cast<int32_t>(be)) << "an idle lane is not the holder";
  SetDemand(php, 0, true);  // what the gate does at the lane's first launch: busy, and a ring
  ASSERT_NE(AwaitMayRun(be, false, 2000ms, {php, pbe}), 0u) << "be kept the token beside the lane";
  EXPECT_TRUE(MayRun(hp));
  EXPECT_EQ(gd.holder.load(), static_cast<int32_t>(hp));
  // Past its cap (50 % of the 1 s window) the lane shuts and be gets the token back.
  Report(php, 900 * kMs);
  ASSERT_NE(AwaitMayRun(be, true, 2000ms, {php, pbe}), 0u) << "be never got the token back";
  EXPECT_FALSE(lane_open(hp));
  EXPECT_FALSE(MayRun(hp)) << "a shut lane's bit went with it";
}

}  // namespace
}  // namespace tessera::daemon
