// SchedulingQueue: a model of kube-scheduler's scheduling queue (PriorityQueue in upstream's
// pkg/scheduler/backend/queue: scheduling_queue.go, active_queue.go, backoff_queue.go) as
// Kubernetes 1.34 runs it by default: queueing hints on (SchedulerQueueingHints, GA) and popping
// from the backoff queue when the active queue is empty (SchedulerPopFromBackoffQ, beta, on).
// The replay (replay.h) makes its pods wait through it; it decides nothing about placement.
//
// What is modelled, rule by rule (each has a test in sched_queue_test.cc):
//   - Three places a pending pod can be: the active queue (ordered as the PrioritySort plugin
//     orders it: priority, all equal here, then the pod's timestamp, earliest first), the backoff
//     queue (ordered by backoff expiry, then as the active queue), and the unschedulable pool.
//     A new pod enters the active queue with its arrival as timestamp.
//   - Pop takes the active queue's head; when that queue is empty it takes the backoff queue's
//     head even while it still backs off (PopFromBackoffQ); never the error backoff queue.
//   - A failed attempt (AddUnschedulable) refreshes the pod's timestamp to the failure and counts
//     it: a rejection by some plugin adds to the unschedulable count (and clears the error
//     count), a failure that no plugin rejected (an error) to the consecutive error count. The
//     pod then goes to the unschedulable pool, unless an event that one of its rejectors' hints
//     queues arrived while it was being scheduled (or no plugin rejected it): then to the
//     backoff queue while it backs off, else to the active queue.
//   - Backoff: count = the error count if it is above 0, else the unschedulable count;
//     duration = initial << (count - 1), at most the maximum (1 s and 10 s by default); the
//     expiry is the timestamp plus the duration, truncated to the 1 s ordering window. A pod
//     backs off while its expiry is not before the current window's start. No count, no backoff.
//   - Events move pods out of the unschedulable pool (MoveAll) by the queueing hints of the
//     plugins that rejected them: NodeResourcesFit queues on a bound pod's deletion and on a
//     node's addition or allocatable change; an extender, which has no hints of its own, is
//     registered for every event with a hint that always queues (so any cluster event moves a
//     pod an extender rejected); a bound pod's addition moves only pods with inter-pod affinity
//     or topology-spread terms (none here), so it moves nothing; the unschedulable timeout is a
//     wildcard that moves every pod it is raised for. A moved pod goes to the backoff queue while
//     it backs off, else to the active queue; its timestamp is kept.
//   - Timers: every second (aligned to the window) the backoff queues' pods whose backoff has
//     completed move to the active queue; every 30 s the pods that have stayed in the pool
//     longer than podMaxInUnschedulablePodsDuration (5 min) since their timestamp are moved by
//     the unschedulable timeout.
// What is not: priorities and preemption (the trace has none), scheduling gates and PreEnqueue
// plugins, nominated pods, pod updates. Attempts take no time on the queue's clock; ties of time
// are ordered by a sequence number, as nanosecond timestamps order attempts made one after the
// other.
//
// Times are seconds on the caller's clock. Pods are small non-negative integers of the caller's.
// Not thread-safe; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace tessera::placement {

// Who rejected a pod in its last attempt (kube-scheduler's QueuedPodInfo.UnschedulablePlugins).
enum Rejector : uint8_t {
  kRejectedByFit = 1,       // NodeResourcesFit: CPU or memory on some node
  kRejectedByExtender = 2,  // an extender filtered out some node (framework.ExtenderName)
};

// The cluster events the queue reacts to, as kube-scheduler's event handlers raise them.
enum class QueueEvent : uint8_t {
  kAssignedPodDelete,     // a bound pod was deleted (Pod/Delete)
  kAssignedPodAdd,        // a pod was bound (Pod/Add of an assigned pod)
  kNodeAdd,               // a node was added (Node/Add)
  kNodeAnnotationUpdate,  // a node's annotations changed (Node/UpdateNodeAnnotation)
  kUnschedulableTimeout,  // a pod stayed in the unschedulable pool too long (wildcard)
};

// Where a pod is.
enum class QueuedIn : uint8_t {
  kNone,
  kActive,
  kBackoff,
  kErrorBackoff,
  kUnschedulable,
  kInFlight
};

struct QueueOptions {
  double initial_backoff_s = 1;         // podInitialBackoffSeconds
  double max_backoff_s = 10;            // podMaxBackoffSeconds
  double max_in_unschedulable_s = 300;  // podMaxInUnschedulablePodsDuration
  double leftover_flush_period_s = 30;  // flushUnschedulablePodsLeftover's period
  double backoff_window_s = 1;          // backoffQOrderingWindowDuration, the flush period
  bool pop_from_backoff = true;         // SchedulerPopFromBackoffQ
};

class SchedulingQueue {
 public:
  explicit SchedulingQueue(QueueOptions options = {});
  SchedulingQueue(const SchedulingQueue&) = delete;
  SchedulingQueue& operator=(const SchedulingQueue&) = delete;

  // A new pending pod (Add): to the active queue, its timestamp `now`.
  void Add(int pod, double now);
  // The next pod to attempt (Pop), now in flight; nullopt when nothing can be popped.
  std::optional<int> Pop(double now);
  // The in-flight pod was placed (Done): the queue forgets it.
  void Done(int pod);
  // The in-flight pod's attempt failed (AddUnschedulableIfNotPresent); `rejectors` is a set of
  // Rejector bits, empty for an error.
  void AddUnschedulable(int pod, uint8_t rejectors, double now);
  // A cluster event (MoveAllToActiveOrBackoffQueue, or AssignedPodAdded for kAssignedPodAdd):
  // moves the unschedulable pods it concerns, and is remembered for pods in flight.
  void MoveAll(QueueEvent event, double now);
  // The periodic flushes due at `now`: the backoff flush when `now` is a multiple of the window,
  // the leftover flush when it is a multiple of its period (the caller calls at those instants).
  void FlushBackoffCompleted(double now);
  void FlushUnschedulableLeftover(double now);
  // The first instant after `now` at which one of the two periodic flushes would move a pod
  // (infinity when none would, whatever happens in between only adding to that).
  double NextFlush(double now) const;
  // Runs every flush due at instants in (last run, now], in time order.
  void RunFlushesUntil(double now);

  QueuedIn where(int pod) const;
  int attempts(int pod) const;
  int unschedulable_count(int pod) const;
  // The pod's backoff expiry (-infinity when it has no count), as the backoff queue orders it.
  double backoff_expiry(int pod) const;
  bool backing_off(int pod, double now) const;
  size_t active_size() const { return active_.size(); }
  size_t backoff_size() const { return backoff_.size() + error_backoff_.size(); }
  size_t unschedulable_size() const { return unschedulable_.size(); }

 private:
  struct Stamp {  // a timestamp: the time, then the order of events at that time
    double time = 0;
    uint64_t seq = 0;
    bool operator<(const Stamp& o) const { return time != o.time ? time < o.time : seq < o.seq; }
  };
  struct Pod {
    QueuedIn in = QueuedIn::kNone;
    Stamp timestamp;
    int attempts = 0;
    int unschedulable_count = 0;
    int consecutive_errors = 0;
    uint8_t rejectors = 0;
    uint64_t entry = 0;     // bumped whenever the pod enters a queue, to drop stale heap items
    size_t pool_index = 0;  // in unschedulable_, while there
  };
  // A heap item: the key it was pushed with and the pod's entry stamp then.
  struct Item {
    double expiry;  // backoff queues only
    Stamp timestamp;
    int pod;
    uint64_t entry;
  };
  struct ActiveLater {
    bool operator()(const Item& a, const Item& b) const { return b.timestamp < a.timestamp; }
  };
  struct BackoffLater {
    bool operator()(const Item& a, const Item& b) const {
      if (a.expiry != b.expiry) return a.expiry > b.expiry;
      return b.timestamp < a.timestamp;
    }
  };
  using ActiveHeap = std::priority_queue<Item, std::vector<Item>, ActiveLater>;
  using BackoffHeap = std::priority_queue<Item, std::vector<Item>, BackoffLater>;
  enum class Strategy { kSkip, kAfterBackoff };

  Pod& Get(int pod);
  const Pod* Find(int pod) const;
  double Align(double t) const;
  double Expiry(const Pod& p) const;
  bool BackingOff(const Pod& p, double now) const;
  Strategy Hint(const Pod& p, QueueEvent event) const;
  void ToActive(int pod);
  void ToBackoff(int pod);
  void ToPool(int pod);
  void LeavePool(int pod);
  void Requeue(int pod, Strategy strategy, double now);
  Stamp Now(double now) { return Stamp{now, ++seq_}; }

  QueueOptions options_;
  std::vector<Pod> pods_;
  ActiveHeap active_;
  BackoffHeap backoff_;        // pods some plugin rejected
  BackoffHeap error_backoff_;  // pods that failed with no rejection
  std::vector<int> unschedulable_;
  // The pool's pods by timestamp, for the leftover flush (stale items are skipped).
  mutable std::priority_queue<Item, std::vector<Item>, ActiveLater> pool_by_time_;
  int in_flight_ = -1;
  std::vector<QueueEvent> in_flight_events_;  // raised since in_flight_ was popped
  uint64_t seq_ = 0;
  double flushed_until_ = -1;  // RunFlushesUntil's last instant
};

}  // namespace tessera::placement
