// Tests for the clocks: ManualClock moves only forward and only when told, also under threads;
// the real clock never goes backwards and is one shared instance.
#include "core/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace tessera {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ManualClockTest, MovesOnlyForwardAndOnlyWhenTold) {
  ManualClock clock(seconds(5));
  EXPECT_EQ(clock.Now(), seconds(5));
  EXPECT_EQ(clock.Now(), seconds(5));
  clock.Advance(milliseconds(250));
  EXPECT_EQ(clock.Now(), milliseconds(5250));
  clock.Advance(milliseconds(-1000));  // time never goes backwards
  clock.Advance(Nanos{0});
  EXPECT_EQ(clock.Now(), milliseconds(5250));
  clock.AdvanceTo(seconds(1));  // earlier than now: ignored
  EXPECT_EQ(clock.Now(), milliseconds(5250));
  clock.AdvanceTo(seconds(9));
  EXPECT_EQ(clock.Now(), seconds(9));
  EXPECT_EQ(ManualClock().Now(), Nanos{0});
}

TEST(ManualClockTest, ThreadsMovingItTogetherLoseNoStep) {
  ManualClock clock(Nanos{4});  // past every instant the threads move it to: those never move it
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&clock, t] {
      for (int i = 0; i < 10000; ++i) {
        clock.Advance(Nanos{1});
        clock.AdvanceTo(Nanos{t});  // never moves it back
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(clock.Now(), Nanos{40004});
}

TEST(RealClockTest, NeverGoesBackwardsAndIsShared) {
  const Clock& real = RealClock();
  EXPECT_EQ(&real, &RealClock());
  Nanos last = real.Now();
  for (int i = 0; i < 1000; ++i) {
    const Nanos now = real.Now();
    EXPECT_GE(now, last);
    last = now;
  }
  const MonotonicClock own;
  EXPECT_GE(own.Now(), last);
  EXPECT_GE(RealClock().Now(), last);
}

}  // namespace
}  // namespace tessera
