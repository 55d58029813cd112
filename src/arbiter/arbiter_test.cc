// Tests for the arbiter's scheduling core: config and container validation, the sliding window,
// and each policy's eligibility, ordering and achieved shares in deterministic simulations.
//
// The simulated GPU here is a loop over a ManualClock: at every kernel boundary the "gate" asks
// Decide(), each container allowed to run launches one kernel of its length, the clock moves on and
// the container is charged the kernel's time. No threads, no sleeps, no real GPU.
#include "arbiter/arbiter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arbiter/usage_window.h"
#include "core/clock.h"

namespace tessera::arbiter {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

Percent Pct(int value) { return *Percent::FromInt(value); }

ContainerSpec Spec(int weight = 1, int core_limit = 100, bool high_priority = false) {
  return ContainerSpec{weight, Pct(core_limit), high_priority};
}

ArbiterConfig Config(ArbiterPolicy policy, int max_inst = 16) {
  ArbiterConfig config;
  config.policy = policy;
  config.max_inst = max_inst;
  return config;
}

::testing::AssertionResult IsOk(const Status& status) {
  if (status.ok()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << status.message();
}

// Success when `status` failed with a one-line message containing every fragment.
::testing::AssertionResult IsError(const Status& status, std::vector<std::string> fragments) {
  if (status.ok()) {
    return ::testing::AssertionFailure() << "was accepted";
  }
  if (status.message().find('\n') != std::string::npos) {
    return ::testing::AssertionFailure() << "not one line: " << status.message();
  }
  for (const std::string& fragment : fragments) {
    if (status.message().find(fragment) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "\"" << status.message() << "\" lacks \"" << fragment << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// A GPU shared by tenants that keep kernels of a fixed length queued while they are busy.
class Sim {
 public:
  explicit Sim(const ArbiterConfig& config) {
    Result<Arbiter> arbiter = Arbiter::Create(&clock_, config);
    EXPECT_TRUE(arbiter.ok()) << arbiter.error();
    arbiter_.emplace(std::move(arbiter).value());
  }

  Arbiter& arbiter() { return *arbiter_; }
  ManualClock& clock() { return clock_; }
  Nanos now() const { return clock_.Now(); }

  // Adds container `id`, busy from now on with kernels of `kernel`.
  void AddTenant(int id, const ContainerSpec& spec, Nanos kernel, bool busy = true) {
    ASSERT_TRUE(IsOk(arbiter_->AddContainer(id, spec)));
    kernel_[id] = kernel;
    SetBusy(id, busy);
  }
  void SetBusy(int id, bool busy) {
    busy_[id] = busy;
    ASSERT_TRUE(IsOk(arbiter_->SetPending(id, busy)));
  }

  // Runs the GPU for `duration` (the last kernel may end a little later).
  void Run(Nanos duration) {
    const Nanos end = clock_.Now() + duration;
    while (clock_.Now() < end) {
      const Decision decision = arbiter_->Decide();
      const Nanos start = clock_.Now();
      std::vector<int> runners;
      for (const auto& [id, kernel] : kernel_) {
        if (busy_[id] && decision.MayRun(id)) {
          runners.push_back(id);
        }
      }
      if (decision.exclusive) {
        ASSERT_LE(runners.size(), 1u);
      }
      if (runners.empty()) {
        ASSERT_GT(decision.until, start) << "an idle decision must say when to ask again";
        clock_.AdvanceTo(std::min(decision.until, end));
        continue;
      }
      Nanos step{0};
      for (int id : runners) {
        step = std::max(step, kernel_[id]);
        segments_.push_back(Segment{id, start, start + kernel_[id]});
      }
      clock_.Advance(step);
      for (int id : runners) {
        ASSERT_TRUE(IsOk(arbiter_->Charge(id, kernel_[id])));
      }
    }
  }

  // Percentage of [from, to) during which container `id` (or anyone, for -1) ran a kernel.
  double Share(int id, Nanos from, Nanos to) const {
    Nanos total{0};
    for (const Segment& segment : segments_) {
      if (id >= 0 && segment.id != id) {
        continue;
      }
      const Nanos lo = std::max(segment.start, from);
      const Nanos hi = std::min(segment.end, to);
      if (hi > lo) {
        total += hi - lo;
      }
    }
    return 100.0 * static_cast<double>(total.count()) / static_cast<double>((to - from).count());
  }
  double Busy(Nanos from, Nanos to) const { return Share(-1, from, to); }

 private:
  struct Segment {
    int id;
    Nanos start;
    Nanos end;
  };
  ManualClock clock_;
  std::optional<Arbiter> arbiter_;
  std::map<int, Nanos> kernel_;
  std::map<int, bool> busy_;
  std::vector<Segment> segments_;
};

// ---- Configuration and containers --------------------------------------------------------------

TEST(ArbiterConfigTest, DefaultsAreValidAndDocumented) {
  const ArbiterConfig config;
  EXPECT_TRUE(IsOk(ValidateArbiterConfig(config)));
  EXPECT_EQ(config.window, seconds(1));
  EXPECT_EQ(config.quota_min, milliseconds(2));
  EXPECT_EQ(config.quota_max, milliseconds(20));
}

TEST(ArbiterConfigTest, RejectsEachInvalidFieldNamingFieldValueAndRange) {
  struct Case {
    void (*mutate)(ArbiterConfig&);
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {[](ArbiterConfig& c) { c.policy = static_cast<ArbiterPolicy>(6); },
       {"policy=6", "0 (fair)", "5 (native)"}},
      {[](ArbiterConfig& c) { c.max_inst = 0; }, {"max_inst=0", "1 to 256"}},
      {[](ArbiterConfig& c) { c.max_inst = 257; }, {"max_inst=257", "1 to 256"}},
      {[](ArbiterConfig& c) { c.prio_ratio = Pct(19); }, {"prio_ratio=19", "20 to 99"}},
      {[](ArbiterConfig& c) { c.prio_ratio = Pct(100); }, {"prio_ratio=100", "20 to 99"}},
      {[](ArbiterConfig& c) { c.window = milliseconds(5); }, {"window=5ms", "10ms to 60s"}},
      {[](ArbiterConfig& c) { c.window = seconds(61); }, {"window=61s", "10ms to 60s"}},
      {[](ArbiterConfig& c) { c.quota_min = microseconds(50); }, {"quota_min=50us", "100us"}},
      {[](ArbiterConfig& c) { c.quota_max = milliseconds(1); },
       {"quota_max=1ms", "quota_min=2ms", "quota_min <= quota_max <= window"}},
      {[](ArbiterConfig& c) {
         c.window = milliseconds(100);
         c.quota_max = milliseconds(200);
       },
       {"quota_max=200ms", "window=100ms"}},
  };
  ManualClock clock;
  for (const Case& test : cases) {
    ArbiterConfig config;
    test.mutate(config);
    EXPECT_TRUE(IsError(ValidateArbiterConfig(config), test.fragments));
    Result<Arbiter> arbiter = Arbiter::Create(&clock, config);
    EXPECT_TRUE(IsError(arbiter.status(), test.fragments));
    Result<Arbiter> good = Arbiter::Create(&clock, ArbiterConfig{});
    ASSERT_TRUE(good.ok());
    EXPECT_TRUE(IsError(good->Configure(config), test.fragments));
  }
  EXPECT_TRUE(IsError(Arbiter::Create(nullptr, ArbiterConfig{}).status(), {"clock"}));
}

TEST(ArbiterContainerTest, RejectsInvalidContainersAndKeepsWeightsWithinMaxInst) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kWeightedPreemptive, 4));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  EXPECT_TRUE(IsError(arbiter.AddContainer(-1, Spec()), {"container -1", "0 to 255"}));
  EXPECT_TRUE(IsError(arbiter.AddContainer(256, Spec()), {"container 256", "0 to 255"}));
  EXPECT_TRUE(IsError(arbiter.AddContainer(0, Spec(0)), {"weight=0", "1 to max_inst=4"}));
  EXPECT_TRUE(IsError(arbiter.AddContainer(0, Spec(5)), {"weight=5", "1 to max_inst=4"}));
  EXPECT_TRUE(IsError(arbiter.AddContainer(0, Spec(1, 0)), {"core_limit=0", "1 to 100"}));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec(3))));
  EXPECT_EQ(arbiter.free_weight(), 1);
  EXPECT_TRUE(IsError(arbiter.AddContainer(0, Spec()), {"container 0", "already added"}));
  EXPECT_TRUE(IsError(arbiter.AddContainer(1, Spec(2)), {"weight=2", "free_weight=1"}));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(1, Spec(1))));
  EXPECT_EQ(arbiter.free_weight(), 0);
  EXPECT_TRUE(IsError(arbiter.UpdateContainer(0, Spec(4)), {"weight=4", "free_weight=0"}));
  EXPECT_TRUE(IsError(arbiter.UpdateContainer(0, Spec(1, 0)), {"core_limit=0"}));
  EXPECT_TRUE(IsError(arbiter.UpdateContainer(9, Spec()), {"container 9", "not added"}));
  ArbiterConfig smaller = Config(ArbiterPolicy::kWeightedPreemptive, 3);
  EXPECT_TRUE(IsError(arbiter.Configure(smaller), {"max_inst=3", "4 weight units"}));
  EXPECT_TRUE(IsError(arbiter.RemoveContainer(7), {"container 7", "not added"}));
  EXPECT_TRUE(IsError(arbiter.SetPending(7, true), {"container 7", "not added"}));
  EXPECT_TRUE(IsError(arbiter.Charge(7, milliseconds(1)), {"container 7", "not added"}));
  EXPECT_TRUE(IsError(arbiter.Charge(0, milliseconds(-1)), {"gpu_time=-1ms", "negative"}));
  EXPECT_TRUE(IsError(arbiter.UsedInWindow(7).status(), {"container 7", "not added"}));
  ASSERT_TRUE(IsOk(arbiter.RemoveContainer(0)));
  EXPECT_EQ(arbiter.free_weight(), 3);
  EXPECT_TRUE(IsOk(arbiter.Configure(smaller)));
}

// ---- The sliding window ------------------------------------------------------------------------

TEST(UsageWindowTest, CountsOnlyTheWindowIncludingPartOfASpanAtItsStart) {
  UsageWindow window(seconds(1));
  window.Add(milliseconds(100), milliseconds(100));  // [0, 100ms]
  window.Add(milliseconds(150), milliseconds(50));   // touches: merged into [0, 150ms]
  EXPECT_EQ(window.span_count(), 1u);
  window.Add(milliseconds(400), milliseconds(100));  // [300, 400ms]
  EXPECT_EQ(window.span_count(), 2u);
  EXPECT_EQ(window.Used(milliseconds(400)), milliseconds(250));
  EXPECT_EQ(window.Used(milliseconds(1050)), milliseconds(200));  // 50ms of the first left
  EXPECT_EQ(window.Used(milliseconds(1350)), milliseconds(50));
  EXPECT_EQ(window.Used(milliseconds(1400)), Nanos{0});
  EXPECT_EQ(window.span_count(), 0u);
}

TEST(UsageWindowTest, TimeUntilBelowIsTheFirstInstantUnderTheLimit) {
  UsageWindow window(seconds(1));
  window.Add(milliseconds(100), milliseconds(100));
  window.Add(milliseconds(400), milliseconds(100));
  const Nanos now = milliseconds(1000);
  EXPECT_EQ(window.TimeUntilBelow(now, milliseconds(300)), Nanos{0});
  const Nanos wait = window.TimeUntilBelow(now, milliseconds(150));  // 50ms + 1ns of span one
  EXPECT_EQ(wait, milliseconds(50) + Nanos{1});
  EXPECT_LT(window.Used(now + wait), milliseconds(150));
  EXPECT_GE(window.Used(now + wait - Nanos{1}), milliseconds(150));
  const Nanos later = window.TimeUntilBelow(now, milliseconds(50));  // into the second span
  EXPECT_EQ(later, milliseconds(350) + Nanos{1});
}

// ---- Policy 3: fixed percentage ----------------------------------------------------------------

class KernelLengthTest : public ::testing::TestWithParam<int> {
 protected:
  Nanos kernel() const { return microseconds(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Kernels, KernelLengthTest, ::testing::Values(1000, 10000),
                         [](const auto& info) { return std::to_string(info.param) + "us"; });

TEST_P(KernelLengthTest, FixedPercentageThirtySeventyWithinOnePointOverTenSeconds) {
  Sim sim(Config(ArbiterPolicy::kFixedPercentage, 10));
  sim.AddTenant(0, Spec(3), kernel());
  sim.AddTenant(1, Spec(7), kernel());
  sim.Run(seconds(11));
  const Nanos from = seconds(1), to = seconds(11);
  EXPECT_NEAR(sim.Share(0, from, to), 30.0, 1.0);
  EXPECT_NEAR(sim.Share(1, from, to), 70.0, 1.0);
  EXPECT_GE(sim.Busy(from, to), 99.0);
}

TEST_P(KernelLengthTest, FixedPercentageCoreLimitIsTheReservedShare) {
  Sim sim(Config(ArbiterPolicy::kFixedPercentage, 10));
  sim.AddTenant(0, Spec(1, 30), kernel());
  sim.AddTenant(1, Spec(1, 70), kernel());
  sim.Run(seconds(11));
  EXPECT_NEAR(sim.Share(0, seconds(1), seconds(11)), 30.0, 1.0);
  EXPECT_NEAR(sim.Share(1, seconds(1), seconds(11)), 70.0, 1.0);
}

TEST_P(KernelLengthTest, FixedPercentageKeepsAnIdleTenantsShareReserved) {
  Sim sim(Config(ArbiterPolicy::kFixedPercentage, 10));
  sim.AddTenant(0, Spec(3), kernel());
  sim.AddTenant(1, Spec(7), kernel(), /*busy=*/false);
  sim.Run(seconds(11));
  EXPECT_NEAR(sim.Share(0, seconds(1), seconds(11)), 30.0, 1.0);
  EXPECT_NEAR(sim.Busy(seconds(1), seconds(11)), 30.0, 1.0);
}

TEST(FixedPercentageTest, GrantsTheTenantFurthestBehindItsShareFirst) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kFixedPercentage, 10));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec(3))));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(1, Spec(7))));
  EXPECT_FALSE(arbiter.Decide().holder) << "nobody has pending work";
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
  ASSERT_TRUE(IsOk(arbiter.SetPending(1, true)));
  // 60 ms is 20 % of the 30 % container's share, 100 ms only 14 % of the 70 % one's.
  ASSERT_TRUE(IsOk(arbiter.Charge(0, milliseconds(60))));
  ASSERT_TRUE(IsOk(arbiter.Charge(1, milliseconds(100))));
  const Decision decision = arbiter.Decide();
  EXPECT_EQ(decision.holder, 1);
  EXPECT_TRUE(decision.exclusive);
  EXPECT_TRUE(decision.MayRun(1));
  EXPECT_FALSE(decision.MayRun(0));
  EXPECT_EQ(decision.until, clock.Now() + milliseconds(20));
}

// ---- Policy 2: weighted preemptive -------------------------------------------------------------

// The 1:2 and 1:2:3 splits of issue 4.
const std::vector<std::vector<int>> kWeightSets = {{1, 2}, {1, 2, 3}};

// Containers 0, 1, ... with these weights, saturating the GPU with kernels of `kernel`.
void AddWeightedTenants(Sim* sim, const std::vector<int>& weights, Nanos kernel) {
  for (size_t i = 0; i < weights.size(); ++i) {
    sim->AddTenant(static_cast<int>(i), Spec(weights[i]), kernel);
  }
}

TEST_P(KernelLengthTest, WeightedOneToTwoAndOneToTwoToThreeWithinFivePercent) {
  for (const std::vector<int>& weights : kWeightSets) {
    SCOPED_TRACE(weights.size());
    Sim sim(Config(ArbiterPolicy::kWeightedPreemptive, 6));
    AddWeightedTenants(&sim, weights, kernel());
    sim.Run(seconds(11));
    const Nanos from = seconds(1), to = seconds(11);
    const double base = sim.Share(0, from, to);
    for (size_t i = 1; i < weights.size(); ++i) {
      const double ratio = sim.Share(static_cast<int>(i), from, to) / base / weights[i];
      EXPECT_NEAR(ratio, 1.0, 0.05) << "tenant " << i;
    }
    EXPECT_GE(sim.Busy(from, to), 99.0);
  }
}

// Saturated tenants whose weights fill the GPU: with the order taken from the 1 s window's usage
// and the cap checked against it, every tenant came out about half a grant above its share in
// GPU time, which favoured the smallest share (16.87 / 33.67 / 49.47 % for 1:2:3 with 10 ms
// kernels here; 17.2 % for 16.7 % in the scenario benchmark). Ordered by share-weighted time
// with no cap check while the caps fill the window, the shares are exact.
TEST_P(KernelLengthTest, WeightedSharesCarryNoBiasFromEqualChunks) {
  for (const std::vector<int>& weights : kWeightSets) {
    SCOPED_TRACE(weights.size());
    Sim sim(Config(ArbiterPolicy::kWeightedPreemptive, 6));
    AddWeightedTenants(&sim, weights, kernel());
    sim.Run(seconds(31));
    const Nanos from = seconds(1), to = seconds(31);
    int total = 0;
    for (int w : weights) total += w;
    for (size_t i = 0; i < weights.size(); ++i) {
      const double target = 100.0 * weights[i] / total;
      const double share = sim.Share(static_cast<int>(i), from, to);
      EXPECT_NEAR(share / target, 1.0, 0.005) << "tenant " << i << ": " << share << " %";
    }
  }
}

// A tenant that pauses for a moment now and then (between launches, at a sync) keeps its place in
// the order: raised to the floor at every pause, it lost its catch-up each time (20.2 % here).
// (Under policy 1 such a tenant gets at most what it runs between pauses, since a grant is kept
// until its end: a periodic pause that always finds the next grant given away is not remedied.)
TEST(WeightedTest, ShortPausesCostNoShare) {
  for (ArbiterPolicy policy :
       {ArbiterPolicy::kWeightedPreemptive, ArbiterPolicy::kFixedPercentage}) {
    SCOPED_TRACE(static_cast<int>(policy));
    Sim sim(Config(policy, 6));
    for (int i = 0; i < 3; ++i) {
      sim.AddTenant(i, Spec(i + 1), milliseconds(1));
    }
    // Tenant 1 pauses 1 ms in every 13.
    while (sim.now() < seconds(11)) {
      sim.Run(milliseconds(12));
      sim.SetBusy(1, false);
      sim.Run(milliseconds(1));
      sim.SetBusy(1, true);
    }
    EXPECT_NEAR(sim.Share(1, seconds(1), seconds(11)), 100.0 / 3, 0.7);
  }
}

TEST_P(KernelLengthTest, WeightedReservesTheShareOfAnExistingIdleContainer) {
  Sim sim(Config(ArbiterPolicy::kWeightedPreemptive, 6));
  sim.AddTenant(0, Spec(1), kernel());
  sim.AddTenant(1, Spec(2), kernel(), /*busy=*/false);
  sim.Run(seconds(11));
  EXPECT_NEAR(sim.Share(0, seconds(1), seconds(11)), 100.0 / 3, 1.0);
  EXPECT_NEAR(sim.Busy(seconds(1), seconds(11)), 100.0 / 3, 1.0);
  // Once the idle container is removed, its share is no longer reserved.
  ASSERT_TRUE(IsOk(sim.arbiter().RemoveContainer(1)));
  const Nanos t = sim.now();
  sim.Run(seconds(2));
  EXPECT_GE(sim.Share(0, t + seconds(1), t + seconds(2)), 99.0);
}

// ---- Policy 1: preemptive ----------------------------------------------------------------------

TEST_P(KernelLengthTest, PreemptiveSharesEquallyAndReclaimsAnIdleTenantsShareWithin100ms) {
  Sim sim(Config(ArbiterPolicy::kPreemptive));
  sim.AddTenant(0, Spec(), kernel());
  sim.AddTenant(1, Spec(), kernel());
  sim.AddTenant(2, Spec(), kernel());
  sim.Run(seconds(5));
  for (int id = 0; id < 3; ++id) {
    EXPECT_NEAR(sim.Share(id, seconds(1), seconds(5)), 100.0 / 3, 1.0) << id;
  }
  sim.SetBusy(2, false);
  const Nanos t = sim.now();
  sim.Run(seconds(2));
  EXPECT_GE(sim.Busy(t, t + milliseconds(100)), 97.0);
  EXPECT_GE(sim.Share(0, t, t + milliseconds(100)), 40.0);
  EXPECT_GE(sim.Share(1, t, t + milliseconds(100)), 40.0);
  EXPECT_NEAR(sim.Share(0, t, t + seconds(2)), 50.0, 1.0);
  EXPECT_NEAR(sim.Share(1, t, t + seconds(2)), 50.0, 1.0);
}

TEST(PreemptiveTest, ATenantReturningFromIdleBanksNoCredit) {
  Sim sim(Config(ArbiterPolicy::kPreemptive));
  sim.AddTenant(0, Spec(), milliseconds(1));
  sim.AddTenant(1, Spec(), milliseconds(1), /*busy=*/false);
  sim.Run(seconds(5));
  EXPECT_GE(sim.Share(0, Nanos{0}, seconds(5)), 99.9);
  sim.SetBusy(1, true);
  const Nanos t = sim.now();
  sim.Run(seconds(1));
  EXPECT_NEAR(sim.Share(1, t, t + seconds(1)), 50.0, 2.0);
  // And the tenant that ran alone carries no debt either once the other has idled.
  sim.SetBusy(0, false);
  sim.Run(seconds(3));
  sim.SetBusy(0, true);
  const Nanos u = sim.now();
  sim.Run(seconds(1));
  EXPECT_NEAR(sim.Share(0, u, u + seconds(1)), 50.0, 2.0);
}

TEST(PreemptiveTest, RoundRobinsFullQuotasAmongPendingOnlyAndKeepsAGrantUntilItEnds) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kPreemptive));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  for (int id = 0; id < 4; ++id) {
    ASSERT_TRUE(IsOk(arbiter.AddContainer(id, Spec())));
  }
  for (int id : {0, 1, 3}) {
    ASSERT_TRUE(IsOk(arbiter.SetPending(id, true)));
  }
  std::vector<int> order;
  for (int turn = 0; turn < 6; ++turn) {
    const Decision decision = arbiter.Decide();
    ASSERT_TRUE(decision.holder);
    EXPECT_EQ(decision.until - clock.Now(), milliseconds(20));
    order.push_back(*decision.holder);
    clock.Advance(milliseconds(10));
    EXPECT_EQ(arbiter.Decide().holder, decision.holder) << "a grant lasts its quota";
    clock.Advance(milliseconds(10));
    ASSERT_TRUE(IsOk(arbiter.Charge(*decision.holder, milliseconds(20))));
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 3, 0, 1, 3}));
  // A holder that runs out of work loses the token at once; so does a removed one.
  const Decision first = arbiter.Decide();
  ASSERT_EQ(first.holder, 0);
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, false)));
  EXPECT_EQ(arbiter.Decide().holder, 1);
  ASSERT_TRUE(IsOk(arbiter.RemoveContainer(1)));
  EXPECT_EQ(arbiter.Decide().holder, 3);
}

// ---- Policy 0: fair ----------------------------------------------------------------------------

TEST_P(KernelLengthTest, FairGivesEachOfTwoTenantsAQuarterOfFourSlotsAndIdlesTheRest) {
  Sim sim(Config(ArbiterPolicy::kFair, 4));
  sim.AddTenant(0, Spec(), kernel());
  sim.AddTenant(1, Spec(), kernel());
  sim.Run(seconds(11));
  const Nanos from = seconds(1), to = seconds(11);
  EXPECT_NEAR(sim.Share(0, from, to), 25.0, 1.0);
  EXPECT_NEAR(sim.Share(1, from, to), 25.0, 1.0);
  EXPECT_NEAR(100.0 - sim.Busy(from, to), 50.0, 1.0);
}

TEST(FairTest, IdleDecisionSaysWhenACappedTenantMayRunAgain) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kFair, 4));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec())));
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
  clock.Advance(milliseconds(250));
  ASSERT_TRUE(IsOk(arbiter.Charge(0, milliseconds(250))));  // its whole slot of the window
  const Decision idle = arbiter.Decide();
  EXPECT_FALSE(idle.holder);
  EXPECT_TRUE(idle.may_run.none());
  EXPECT_EQ(idle.until, seconds(1) + Nanos{1});  // when its first nanosecond leaves the window
  clock.AdvanceTo(idle.until);
  EXPECT_EQ(arbiter.Decide().holder, 0);
}

// ---- High priority -----------------------------------------------------------------------------

TEST(HighPriorityTest, PreemptsABestEffortGrantAtOnce) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kPreemptive));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec())));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(1, Spec(1, 100, /*high_priority=*/true))));
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
  const Decision best_effort = arbiter.Decide();
  ASSERT_EQ(best_effort.holder, 0);
  EXPECT_FALSE(best_effort.high_priority_lane);
  clock.Advance(milliseconds(1));
  ASSERT_TRUE(IsOk(arbiter.SetPending(1, true)));
  const Decision urgent = arbiter.Decide();
  EXPECT_EQ(urgent.holder, 1);
  EXPECT_TRUE(urgent.high_priority_lane);
  EXPECT_LT(urgent.until, best_effort.until + milliseconds(20));
  // Not under policy 5: nobody is gated there.
  ASSERT_TRUE(IsOk(arbiter.Configure(Config(ArbiterPolicy::kNative))));
  EXPECT_FALSE(arbiter.Decide().holder);
}

// A lane is open (the gate lets the container's next launch in by itself) for a high-priority
// container under its lane cap, with or without work, unless another container's lane holds the
// token; never for a best-effort container, past the cap, or under policy 5.
TEST(HighPriorityTest, LaneIsOpenUnderItsCapUnlessAnotherLaneHoldsTheToken) {
  ManualClock clock;
  ArbiterConfig config = Config(ArbiterPolicy::kPreemptive);
  config.prio_ratio = Pct(20);
  Result<Arbiter> created = Arbiter::Create(&clock, config);
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec())));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(1, Spec(1, 100, /*high_priority=*/true))));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(2, Spec(1, 100, /*high_priority=*/true))));
  // Nobody has work: both lanes are open, the best-effort container has none.
  Decision idle = arbiter.Decide();
  EXPECT_FALSE(idle.holder);
  EXPECT_TRUE(idle.lane_open.test(1));
  EXPECT_TRUE(idle.lane_open.test(2));
  EXPECT_FALSE(idle.lane_open.test(0));
  // A best-effort holder keeps both open: either lane would preempt it.
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
  Decision best_effort = arbiter.Decide();
  ASSERT_EQ(best_effort.holder, 0);
  EXPECT_EQ(best_effort.lane_open.count(), 2u);
  // Container 1's lane holds the token: 2's lane is shut until it ends, 1's stays open.
  ASSERT_TRUE(IsOk(arbiter.SetPending(1, true)));
  Decision lane = arbiter.Decide();
  ASSERT_EQ(lane.holder, 1);
  ASSERT_TRUE(lane.high_priority_lane);
  EXPECT_TRUE(lane.lane_open.test(1));
  EXPECT_FALSE(lane.lane_open.test(2));
  // Past its cap (20 % of the 1 s window) 1's lane shuts, and 2's opens again.
  clock.Advance(milliseconds(250));
  ASSERT_TRUE(IsOk(arbiter.Charge(1, milliseconds(250))));
  Decision capped = arbiter.Decide();
  EXPECT_FALSE(capped.high_priority_lane && capped.holder == 1);
  EXPECT_FALSE(capped.lane_open.test(1));
  EXPECT_TRUE(capped.lane_open.test(2));
  // Policy 5 gates nobody: no lanes.
  ASSERT_TRUE(IsOk(arbiter.Configure(Config(ArbiterPolicy::kNative))));
  EXPECT_TRUE(arbiter.Decide().lane_open.none());
}

TEST(HighPriorityTest, LaneIsCappedAtPrioRatioAgainstTwoSaturatingTenants) {
  ArbiterConfig config = Config(ArbiterPolicy::kPreemptive);
  config.prio_ratio = Pct(50);
  Sim sim(config);
  sim.AddTenant(0, Spec(), milliseconds(1));
  sim.AddTenant(1, Spec(), milliseconds(1));
  sim.AddTenant(2, Spec(1, 100, /*high_priority=*/true), milliseconds(1));
  sim.Run(seconds(11));
  const Nanos from = seconds(1), to = seconds(11);
  EXPECT_NEAR(sim.Share(2, from, to), 50.0, 1.0);
  EXPECT_NEAR(sim.Share(0, from, to), 25.0, 1.0);
  EXPECT_NEAR(sim.Share(1, from, to), 25.0, 1.0);
}

TEST(HighPriorityTest, LaneRunsAheadOfReservedSharesUpToPrioRatio) {
  ArbiterConfig config = Config(ArbiterPolicy::kFair, 4);
  config.prio_ratio = Pct(60);
  Sim sim(config);
  sim.AddTenant(0, Spec(), milliseconds(1));
  sim.AddTenant(1, Spec(), milliseconds(1));
  sim.AddTenant(2, Spec(1, 100, /*high_priority=*/true), milliseconds(1));
  sim.Run(seconds(11));
  const Nanos from = seconds(1), to = seconds(11);
  EXPECT_NEAR(sim.Share(2, from, to), 60.0, 1.0);  // its slot (25 %) is within the 60 %
  EXPECT_NEAR(sim.Share(0, from, to), 20.0, 1.0);
  EXPECT_NEAR(sim.Share(1, from, to), 20.0, 1.0);
}

TEST(HighPriorityTest, CoreLimitCapsTheLaneToo) {
  ArbiterConfig config = Config(ArbiterPolicy::kPreemptive);
  config.prio_ratio = Pct(50);
  Sim sim(config);
  sim.AddTenant(0, Spec(), milliseconds(1));
  sim.AddTenant(1, Spec(1, 30, /*high_priority=*/true), milliseconds(1));
  sim.Run(seconds(11));
  EXPECT_NEAR(sim.Share(1, seconds(1), seconds(11)), 30.0, 1.0);
  EXPECT_NEAR(sim.Share(0, seconds(1), seconds(11)), 70.0, 1.0);
}

// ---- Core limit under every policy -------------------------------------------------------------

TEST(CoreLimitTest, CapsASaturatingTenantUnderEveryPolicyButNative) {
  for (int number = 0; number < kArbiterPolicyCount; ++number) {
    const ArbiterPolicy policy = *ArbiterPolicyFromNumber(number);
    SCOPED_TRACE(std::string(ArbiterPolicyName(policy)));
    Sim sim(Config(policy, 1));
    sim.AddTenant(0, Spec(1, 40), milliseconds(1));
    sim.Run(seconds(11));
    const double expected = policy == ArbiterPolicy::kNative ? 100.0 : 40.0;
    EXPECT_NEAR(sim.Share(0, seconds(1), seconds(11)), expected, 1.0);
  }
}

// ---- Policies 4 and 5 --------------------------------------------------------------------------

TEST(WeakTest, HolderByPreemptiveOrderAndOverlapForOthersWithWorkUnderTheirCap) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kWeak));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec())));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(1, Spec())));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(2, Spec(1, 10))));  // will be over its cap
  ASSERT_TRUE(IsOk(arbiter.AddContainer(3, Spec())));       // no work
  for (int id : {0, 1, 2}) {
    ASSERT_TRUE(IsOk(arbiter.SetPending(id, true)));
  }
  clock.Advance(milliseconds(200));
  ASSERT_TRUE(IsOk(arbiter.Charge(2, milliseconds(150))));
  ASSERT_TRUE(IsOk(arbiter.Charge(0, milliseconds(30))));
  const Decision decision = arbiter.Decide();
  EXPECT_FALSE(decision.exclusive);
  EXPECT_EQ(decision.holder, 1) << "smallest virtual time";
  EXPECT_TRUE(decision.MayRun(0));
  EXPECT_TRUE(decision.MayRun(1));
  EXPECT_FALSE(decision.MayRun(2)) << "over its core limit";
  EXPECT_FALSE(decision.MayRun(3)) << "no work";
}

TEST(NativeTest, EveryContainerMayRunAlwaysWithoutCapsOrPriority) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kNative));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec(1, 10))));
  ASSERT_TRUE(IsOk(arbiter.AddContainer(5, Spec(1, 100, /*high_priority=*/true))));
  ASSERT_TRUE(IsOk(arbiter.SetPending(5, true)));
  clock.Advance(seconds(1));
  ASSERT_TRUE(IsOk(arbiter.Charge(0, seconds(1))));
  const Decision decision = arbiter.Decide();
  EXPECT_FALSE(decision.exclusive);
  EXPECT_FALSE(decision.holder);
  EXPECT_EQ(decision.until, Nanos::max());
  EXPECT_TRUE(decision.MayRun(0));
  EXPECT_TRUE(decision.MayRun(5));
  EXPECT_EQ(decision.may_run.count(), 2u);
}

// ---- Live changes ------------------------------------------------------------------------------

TEST(LiveChangeTest, SharesFollowAPolicySwitchAndAWeightUpdate) {
  Sim sim(Config(ArbiterPolicy::kPreemptive, 4));
  sim.AddTenant(0, Spec(1), milliseconds(1));
  sim.AddTenant(1, Spec(1), milliseconds(1));
  sim.Run(seconds(2));
  ASSERT_TRUE(IsOk(sim.arbiter().Configure(Config(ArbiterPolicy::kWeightedPreemptive, 4))));
  ASSERT_TRUE(IsOk(sim.arbiter().UpdateContainer(1, Spec(3))));
  const Nanos t = sim.now();
  sim.Run(seconds(6));
  EXPECT_NEAR(sim.Share(0, t + seconds(1), t + seconds(6)), 25.0, 1.0);
  EXPECT_NEAR(sim.Share(1, t + seconds(1), t + seconds(6)), 75.0, 1.0);
}

// Adaptive quota: a grant lasts the container's hint, clamped to [quota_min, quota_max] and to
// its remaining budget; without a hint it lasts quota_max.
TEST(ArbiterQuota, GrantsFollowTheHintWithinBounds) {
  ManualClock clock;
  Result<Arbiter> created = Arbiter::Create(&clock, Config(ArbiterPolicy::kPreemptive));
  ASSERT_TRUE(created.ok());
  Arbiter& arbiter = *created;
  ASSERT_TRUE(IsOk(arbiter.AddContainer(0, Spec())));
  ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
  struct Case {
    Nanos hint;
    Nanos quota;
  };
  for (const Case& c :
       {Case{Nanos{0}, milliseconds(20)}, Case{milliseconds(7), milliseconds(7)},
        Case{microseconds(300), milliseconds(2)}, Case{milliseconds(90), milliseconds(20)}}) {
    ASSERT_TRUE(IsOk(arbiter.SetQuotaHint(0, c.hint)));
    ASSERT_TRUE(IsOk(arbiter.SetPending(0, false)));
    EXPECT_FALSE(arbiter.Decide().holder);
    ASSERT_TRUE(IsOk(arbiter.SetPending(0, true)));
    const Decision d = arbiter.Decide();
    ASSERT_EQ(d.holder, 0);
    EXPECT_EQ(d.until - clock.Now(), c.quota) << "hint " << c.hint.count();
  }
  EXPECT_TRUE(IsError(arbiter.SetQuotaHint(0, Nanos{-1}), {"hint=", "negative"}));
  EXPECT_TRUE(IsError(arbiter.SetQuotaHint(5, milliseconds(1)), {"container 5", "not added"}));
}

}  // namespace
}  // namespace tessera::arbiter
