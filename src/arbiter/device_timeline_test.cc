// Tests for DeviceTimeline: who held the device where the gates' intervals overlap, whatever the
// order they are reported in, checked against a simulated device that runs work in submission
// order (as simgpu does).
#include "arbiter/device_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace tessera::arbiter {
namespace {

constexpr uint64_t kUs = 1000;

// Each container's total of the deltas.
std::map<int, int64_t> Totals(const std::vector<DeviceTimeline::Delta>& deltas) {
  std::map<int, int64_t> out;
  for (const auto& d : deltas) out[d.container] += d.ns;
  return out;
}

// Each container's total of the settled pieces.
std::map<int, int64_t> Settled(const std::vector<DeviceTimeline::Piece>& pieces) {
  std::map<int, int64_t> out;
  for (const auto& p : pieces) out[p.container] += static_cast<int64_t>(p.ns);
  return out;
}

TEST(DeviceTimelineTest, AnIntervalNobodyElseCoversIsItsOwn) {
  DeviceTimeline t;
  std::vector<DeviceTimeline::Delta> deltas;
  t.Add(0, 0, 100 * kUs, 300 * kUs, &deltas);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].ns, static_cast<int64_t>(200 * kUs));
  deltas.clear();
  t.Add(0, 0, 300 * kUs, 300 * kUs, &deltas);  // empty
  t.Add(0, 0, 400 * kUs, 300 * kUs, &deltas);  // backwards
  EXPECT_TRUE(deltas.empty());
}

// A high-priority kernel launched while the holder's 4 ms kernel runs waits behind it: its interval
// starts at its launch, but the device was the holder's until that kernel ended.
TEST(DeviceTimelineTest, WorkQueuedBehindAnotherIsChargedFromWhereItRan) {
  for (bool holder_first : {true, false}) {
    DeviceTimeline t;
    std::vector<DeviceTimeline::Delta> deltas;
    auto holder = [&] { t.Add(0, 0, 0, 4000 * kUs, &deltas); };
    auto lane = [&] { t.Add(1, 1, 1000 * kUs, 4500 * kUs, &deltas); };
    if (holder_first) {
      holder();
      lane();
    } else {
      lane();  // reported first: takes what it can, then gives the holder's part back
      holder();
    }
    auto totals = Totals(deltas);
    EXPECT_EQ(totals[0], static_cast<int64_t>(4000 * kUs)) << holder_first;
    EXPECT_EQ(totals[1], static_cast<int64_t>(500 * kUs)) << holder_first;
  }
}

TEST(DeviceTimelineTest, OverlapWithinOneContainerCountsOnce) {
  DeviceTimeline t;
  std::vector<DeviceTimeline::Delta> deltas;
  t.Add(0, 7, 0, 1000 * kUs, &deltas);
  t.Add(1, 7, 500 * kUs, 800 * kUs, &deltas);  // another process of container 7, earlier end
  t.Add(1, 7, 900 * kUs, 1500 * kUs, &deltas);
  auto totals = Totals(deltas);
  EXPECT_EQ(totals[7], static_cast<int64_t>(1500 * kUs));
}

TEST(DeviceTimelineTest, BeyondTheHorizonAnIntervalIsChargedAsReported) {
  DeviceTimeline t(/*horizon_ns=*/1000 * kUs);
  std::vector<DeviceTimeline::Delta> deltas;
  t.Add(0, 0, 0, 2000 * kUs, &deltas);
  std::vector<DeviceTimeline::Piece> pieces;
  t.Expire(10'000 * kUs, &pieces);
  EXPECT_EQ(t.segment_count(), 0u);
  EXPECT_EQ(Settled(pieces)[0], static_cast<int64_t>(2000 * kUs));  // settled as it went
  deltas.clear();
  t.Add(1, 1, 1000 * kUs, 1500 * kUs, &deltas);  // a late report of forgotten time
  EXPECT_EQ(Totals(deltas)[1], static_cast<int64_t>(500 * kUs));
}

TEST(DeviceTimelineTest, NobodyIsChargedBeyondTheUnionOfItsOwnIntervals) {
  // Whatever another container reports (here: an interval covering everything, ending first),
  // an honest container's charge never exceeds what its own intervals cover, and nobody's goes
  // negative.
  DeviceTimeline t;
  std::vector<DeviceTimeline::Delta> deltas;
  t.Add(0, 0, 1000 * kUs, 2000 * kUs, &deltas);
  t.Add(1, 1, 0, 1900 * kUs, &deltas);  // a liar claiming [0, 1.9 ms)
  t.Add(0, 0, 2000 * kUs, 3000 * kUs, &deltas);
  auto totals = Totals(deltas);
  EXPECT_EQ(totals[0], static_cast<int64_t>(1100 * kUs));  // [1.9, 3): the rest it gave the liar
  EXPECT_EQ(totals[1], static_cast<int64_t>(1900 * kUs));  // the liar pays for what it claimed
}

// Settled time is final: each instant is settled once, to the owner it had then; a report that
// arrives after the part it overlaps was settled gets none of it, and nothing settled is moved.
TEST(DeviceTimelineTest, SettledTimeIsFinalAndCountedOnce) {
  DeviceTimeline t;
  std::vector<DeviceTimeline::Delta> deltas;
  std::vector<DeviceTimeline::Piece> pieces;
  t.Add(1, 1, 1000 * kUs, 4500 * kUs, &deltas);  // reported first; ends last
  t.Settle(3000 * kUs, &pieces);                 // nothing has ended by 3 ms
  EXPECT_TRUE(pieces.empty());
  t.Settle(5000 * kUs, &pieces);
  EXPECT_EQ(Settled(pieces)[1], static_cast<int64_t>(3500 * kUs));
  // The holder it queued behind reports only now: too late for what was settled.
  deltas.clear();
  t.Add(0, 0, 0, 4000 * kUs, &deltas);
  auto totals = Totals(deltas);
  EXPECT_EQ(totals[0], static_cast<int64_t>(1000 * kUs));  // [0, 1 ms): nobody's until now
  EXPECT_EQ(totals[1], 0);
  t.Settle(5000 * kUs, &pieces);  // its own piece ended before 5 ms: settled at once
  auto settled = Settled(pieces);
  EXPECT_EQ(settled[0], static_cast<int64_t>(1000 * kUs));
  EXPECT_EQ(settled[1], static_cast<int64_t>(3500 * kUs));
  t.Settle(9000 * kUs, &pieces);  // nothing twice
  EXPECT_EQ(Settled(pieces)[1], static_cast<int64_t>(3500 * kUs));
}

// The property the daemon relies on: on a device that runs work in submission order, with one
// mark per launch, every container is charged exactly its kernels' device time, whatever order
// the samplers report in.
TEST(DeviceTimelineTest, MatchesASubmissionOrderDeviceWhateverTheReportOrder) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 50; ++round) {
    struct Interval {
      int container;
      uint64_t start, end;
    };
    std::vector<Interval> intervals;
    std::map<int, int64_t> truth;
    uint64_t device_free = 0;
    std::vector<uint64_t> launch_at(3, 0), own_end(3, 0);
    std::uniform_int_distribution<uint64_t> gap(0, 3000), length(10, 4000);
    for (int k = 0; k < 300; ++k) {
      // The container whose next launch comes first launches (each waits for its previous
      // kernel half the time, as a synchronising tenant does).
      const int c = static_cast<int>(std::min_element(launch_at.begin(), launch_at.end()) -
                                     launch_at.begin());
      const uint64_t launch = launch_at[c];
      const uint64_t len = length(rng) * kUs / 10;
      const uint64_t start = std::max(launch, device_free);
      const uint64_t end = start + len;
      device_free = end;
      truth[c] += static_cast<int64_t>(len);
      // The gate's interval: from the launch (or its own previous end), to the completion.
      intervals.push_back({c, std::max(launch, own_end[c]), end});
      own_end[c] = end;
      launch_at[c] = (rng() % 2 ? end : launch) + gap(rng) * kUs / 10;
    }
    // Reported out of order, each within a few intervals of its turn.
    for (size_t i = 0; i + 1 < intervals.size(); ++i) {
      if (rng() % 3 == 0) std::swap(intervals[i], intervals[i + 1]);
    }
    DeviceTimeline t;
    std::vector<DeviceTimeline::Delta> deltas;
    std::vector<DeviceTimeline::Piece> pieces;
    for (size_t i = 0; i < intervals.size(); ++i) {
      const Interval& in = intervals[i];
      t.Add(in.container, in.container, in.start, in.end, &deltas);
      // Settled well behind the reports (each comes within a few of its turn).
      if (i >= 10) t.Settle(intervals[i - 10].start, &pieces);
    }
    t.Settle(~uint64_t{0}, &pieces);
    auto totals = Totals(deltas);
    auto settled = Settled(pieces);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(totals[c], truth[c]) << "round " << round << " c " << c;
      EXPECT_EQ(settled[c], truth[c]) << "round " << round << " c " << c;
    }
  }
}

}  // namespace
}  // namespace tessera::arbiter
