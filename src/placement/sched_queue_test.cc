// Tests of the model of kube-scheduler's scheduling queue: one test per rule of upstream's
// PriorityQueue that sched_queue.h lists (ordering, popping from the backoff queue, failures and
// their counts, backoff durations and windows, queueing hints per rejector and event, events
// while a pod is in flight, and both periodic flushes).
#include "placement/sched_queue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tessera::placement {
namespace {

std::vector<int> PopAll(SchedulingQueue& q, double now) {
  std::vector<int> out;
  while (auto p = q.Pop(now)) {
    out.push_back(*p);
    q.Done(*p);
  }
  return out;
}

TEST(SchedulingQueueTest, ActiveQueueOrdersByTimestampThenByOrderOfEvents) {
  SchedulingQueue q;
  q.Add(2, 5.0);
  q.Add(0, 1.0);
  q.Add(1, 5.0);  // same time as pod 2, added after it
  EXPECT_EQ(q.where(0), QueuedIn::kActive);
  EXPECT_EQ(PopAll(q, 6), (std::vector<int>{0, 2, 1}));
}

TEST(SchedulingQueueTest, FailureRefreshesTheTimestampAndCountsTheRejection) {
  SchedulingQueue q;
  q.Add(0, 0);
  q.Add(1, 3);
  ASSERT_EQ(q.Pop(4), 0);
  EXPECT_EQ(q.attempts(0), 1);
  q.AddUnschedulable(0, kRejectedByExtender, 4);
  EXPECT_EQ(q.where(0), QueuedIn::kUnschedulable);  // no event while in flight: the pool
  EXPECT_EQ(q.unschedulable_count(0), 1);
  // Moved back, pod 0 now sorts after pod 1, which arrived at 3 < its failure at 4.
  q.MoveAll(QueueEvent::kNodeAnnotationUpdate, 20);
  EXPECT_EQ(q.where(0), QueuedIn::kActive);  // backoff (1 s from 4) is over at 20
  EXPECT_EQ(PopAll(q, 20), (std::vector<int>{1, 0}));
}

TEST(SchedulingQueueTest, BackoffDoublesFromOneSecondUpToTenInWholeSecondWindows) {
  SchedulingQueue q;
  q.Add(0, 0);
  // Each failure at t = 100.25 k: the expiry is the failure plus 1, 2, 4, 8, 10, 10 s,
  // truncated to the second.
  const double expected[] = {1, 2, 4, 8, 10, 10, 10};
  for (int k = 0; k < 7; ++k) {
    const double t = 100.25 * (k + 1);
    while (q.where(0) != QueuedIn::kInFlight) {
      if (q.where(0) == QueuedIn::kUnschedulable) q.MoveAll(QueueEvent::kUnschedulableTimeout, t);
      ASSERT_TRUE(q.Pop(t).has_value());
    }
    q.AddUnschedulable(0, kRejectedByFit, t);
    EXPECT_EQ(q.backoff_expiry(0), std::floor(t + expected[k])) << "failure " << k + 1;
    // Backing off while the expiry is not before the current second's start.
    EXPECT_TRUE(q.backing_off(0, std::floor(t + expected[k]) + 0.99));
    EXPECT_FALSE(q.backing_off(0, std::floor(t + expected[k]) + 1));
  }
  // A pod never attempted has no backoff.
  q.Add(1, 0);
  EXPECT_FALSE(q.backing_off(1, 0));
}

TEST(SchedulingQueueTest, ErrorsCountApartAndWaitInTheErrorQueue) {
  SchedulingQueue q;
  q.Add(0, 0);
  ASSERT_EQ(q.Pop(0), 0);
  q.AddUnschedulable(0, kRejectedByFit, 0);
  ASSERT_EQ(q.unschedulable_count(0), 1);
  q.MoveAll(QueueEvent::kAssignedPodDelete, 0.5);
  ASSERT_EQ(q.Pop(0.5), 0);  // from the backoff queue: the active queue is empty
  // No plugin rejected it: an error. It is requeued after backoff whatever happened, into the
  // error backoff queue, which popping never takes early; the backoff counts the error (1 s).
  q.AddUnschedulable(0, 0, 0.5);
  EXPECT_EQ(q.where(0), QueuedIn::kErrorBackoff);
  EXPECT_EQ(q.unschedulable_count(0), 1);
  EXPECT_EQ(q.backoff_expiry(0), 1.0);  // floor(0.5 + 1), not the 2 s of two rejections
  EXPECT_FALSE(q.Pop(0.9).has_value());
  q.RunFlushesUntil(1.5);
  EXPECT_EQ(q.where(0), QueuedIn::kErrorBackoff);  // the tick at 1 s: not before its window
  q.RunFlushesUntil(2.0);
  EXPECT_EQ(q.where(0), QueuedIn::kActive);
  ASSERT_EQ(q.Pop(2), 0);
  // A rejection again clears the error count: the backoff is the 2 rejections' 2 s.
  q.AddUnschedulable(0, kRejectedByFit, 2.5);
  EXPECT_EQ(q.unschedulable_count(0), 2);
  EXPECT_EQ(q.backoff_expiry(0), 4.0);
}

TEST(SchedulingQueueTest, PopTakesTheBackoffHeadOnlyWhenTheActiveQueueIsEmpty) {
  for (bool pop_from_backoff : {true, false}) {
    SCOPED_TRACE(pop_from_backoff);
    QueueOptions o;
    o.pop_from_backoff = pop_from_backoff;
    SchedulingQueue q(o);
    q.Add(0, 0);
    ASSERT_EQ(q.Pop(0), 0);
    q.AddUnschedulable(0, kRejectedByExtender, 0);
    q.MoveAll(QueueEvent::kAssignedPodDelete, 0.1);
    EXPECT_EQ(q.where(0), QueuedIn::kBackoff);  // 1 s of backoff from 0
    q.Add(1, 0.2);
    EXPECT_EQ(q.Pop(0.2), 1);  // the active queue first
    q.Done(1);
    const auto next = q.Pop(0.3);
    if (pop_from_backoff) {
      EXPECT_EQ(next, 0);  // still backing off, but nothing else is there
    } else {
      EXPECT_FALSE(next.has_value());
    }
  }
}

TEST(SchedulingQueueTest, BackoffQueueOrdersByExpiryThenTimestamp) {
  SchedulingQueue q;
  for (int pod = 0; pod < 3; ++pod) q.Add(pod, 0);
  // Pod 0 fails twice (2 s), pods 1 and 2 once (1 s), pod 2 before pod 1.
  ASSERT_EQ(q.Pop(0), 0);
  q.AddUnschedulable(0, kRejectedByExtender, 0);
  q.MoveAll(QueueEvent::kAssignedPodDelete, 0);
  ASSERT_EQ(q.Pop(0), 1);
  ASSERT_EQ(q.Pop(0), 2);  // (pod 1 still in flight: the model keeps the last one's events)
  q.AddUnschedulable(2, kRejectedByExtender, 0.5);
  q.AddUnschedulable(1, kRejectedByExtender, 0.6);
  ASSERT_EQ(q.Pop(0.7), 0);
  q.AddUnschedulable(0, kRejectedByExtender, 0.7);
  q.MoveAll(QueueEvent::kNodeAnnotationUpdate, 0.8);
  EXPECT_EQ(q.backoff_expiry(0), 2.0);
  EXPECT_EQ(q.backoff_expiry(1), 1.0);
  EXPECT_EQ(q.backoff_expiry(2), 1.0);
  EXPECT_EQ(PopAll(q, 0.8), (std::vector<int>{2, 1, 0}));
}

TEST(SchedulingQueueTest, EventsMoveThePodsTheirRejectorsHintsQueue) {
  struct Case {
    uint8_t rejectors;
    QueueEvent event;
    bool moves;
  };
  const Case cases[] = {
      {kRejectedByFit, QueueEvent::kAssignedPodDelete, true},
      {kRejectedByFit, QueueEvent::kNodeAdd, true},
      {kRejectedByFit, QueueEvent::kNodeAnnotationUpdate, false},
      {kRejectedByFit, QueueEvent::kAssignedPodAdd, false},
      {kRejectedByExtender, QueueEvent::kAssignedPodDelete, true},
      {kRejectedByExtender, QueueEvent::kNodeAdd, true},
      {kRejectedByExtender, QueueEvent::kNodeAnnotationUpdate, true},
      {kRejectedByExtender, QueueEvent::kAssignedPodAdd, false},
      {kRejectedByFit | kRejectedByExtender, QueueEvent::kNodeAnnotationUpdate, true},
      {kRejectedByFit, QueueEvent::kUnschedulableTimeout, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "rejectors " << int(c.rejectors) << " event " << int(c.event));
    SchedulingQueue q;
    q.Add(0, 0);
    ASSERT_EQ(q.Pop(0), 0);
    q.AddUnschedulable(0, c.rejectors, 0);
    q.MoveAll(c.event, 0.5);  // still backing off: to the backoff queue
    EXPECT_EQ(q.where(0), c.moves ? QueuedIn::kBackoff : QueuedIn::kUnschedulable);
    SchedulingQueue late;
    late.Add(0, 0);
    ASSERT_EQ(late.Pop(0), 0);
    late.AddUnschedulable(0, c.rejectors, 0);
    late.MoveAll(c.event, 2.0);  // expiry 1 is before the window of 2: the active queue
    EXPECT_EQ(late.where(0), c.moves ? QueuedIn::kActive : QueuedIn::kUnschedulable);
  }
}

TEST(SchedulingQueueTest, AnEventWhileThePodIsInFlightRequeuesItAfterItsFailure) {
  SchedulingQueue q;
  q.Add(0, 0);
  ASSERT_EQ(q.Pop(0), 0);
  q.MoveAll(QueueEvent::kNodeAnnotationUpdate, 0);  // NodeResourcesFit has no hint for it
  q.AddUnschedulable(0, kRejectedByFit, 0);
  EXPECT_EQ(q.where(0), QueuedIn::kUnschedulable);
  q.MoveAll(QueueEvent::kAssignedPodDelete, 5);
  ASSERT_EQ(q.Pop(5), 0);
  q.MoveAll(QueueEvent::kAssignedPodDelete, 5);  // a deletion while it is scheduled
  q.AddUnschedulable(0, kRejectedByFit, 5);
  EXPECT_EQ(q.where(0), QueuedIn::kBackoff);  // 2 s from 5
}

TEST(SchedulingQueueTest, LeftoverFlushMovesPodsUnschedulableLongerThanFiveMinutes) {
  SchedulingQueue q;
  q.Add(0, 0);
  ASSERT_EQ(q.Pop(10), 0);
  q.AddUnschedulable(0, kRejectedByFit, 10);  // in the pool from 10 s
  // The flush runs every 30 s; the pod qualifies once 10 + 300 is passed: at 330.
  EXPECT_EQ(q.NextFlush(10), 330);
  q.RunFlushesUntil(329.9);
  EXPECT_EQ(q.where(0), QueuedIn::kUnschedulable);
  q.RunFlushesUntil(330);
  EXPECT_EQ(q.where(0), QueuedIn::kActive);
  // A pod whose timestamp a later failure refreshed waits 5 minutes from that failure.
  ASSERT_EQ(q.Pop(400), 0);
  q.AddUnschedulable(0, kRejectedByFit, 400);
  EXPECT_EQ(q.NextFlush(400), 720);
}

TEST(SchedulingQueueTest, BackoffFlushMovesCompletedPodsToTheActiveQueueEverySecond) {
  QueueOptions o;
  o.pop_from_backoff = false;  // else the pod would be popped early; the flush is the same
  SchedulingQueue q(o);
  q.Add(0, 0);
  for (int k = 0; k < 4; ++k) {  // four failures: 8 s of backoff
    ASSERT_EQ(q.Pop(0), 0);
    q.AddUnschedulable(0, kRejectedByExtender, 0.5);
    q.MoveAll(QueueEvent::kNodeAnnotationUpdate, 0.5);
    if (k < 3) q.RunFlushesUntil(100 * (k + 1));  // completed: back to the active queue
  }
  EXPECT_EQ(q.where(0), QueuedIn::kBackoff);
  EXPECT_EQ(q.backoff_expiry(0), 8.5);  // 0.5 + 8, not truncated without PopFromBackoffQ
  EXPECT_EQ(q.NextFlush(300), 301);     // long completed (the flush had not run since): next tick
}

TEST(SchedulingQueueTest, NothingToFlushMeansNoTimer) {
  SchedulingQueue q;
  EXPECT_TRUE(std::isinf(q.NextFlush(0)));
  q.Add(0, 0);
  EXPECT_TRUE(std::isinf(q.NextFlush(0)));  // the active queue needs no timer
}

}  // namespace
}  // namespace tessera::placement
