// The model of kube-scheduler's scheduling queue: its three places, backoff, queueing hints and
// periodic flushes (sched_queue.h says which upstream rule each part follows). No I/O.
#include "placement/sched_queue.h"

#include <cmath>
#include <limits>

namespace tessera::placement {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

SchedulingQueue::SchedulingQueue(QueueOptions options) : options_(options) {}

SchedulingQueue::Pod& SchedulingQueue::Get(int pod) {
  const auto i = static_cast<size_t>(pod);
  if (i >= pods_.size()) pods_.resize(i + 1);
  return pods_[i];
}

const SchedulingQueue::Pod* SchedulingQueue::Find(int pod) const {
  const auto i = static_cast<size_t>(pod);
  return pod >= 0 && i < pods_.size() ? &pods_[i] : nullptr;
}

double SchedulingQueue::Align(double t) const {
  // alignToWindow: only with PopFromBackoffQ; truncation to the window.
  if (!options_.pop_from_backoff) return t;
  return std::floor(t / options_.backoff_window_s) * options_.backoff_window_s;
}

double SchedulingQueue::Expiry(const Pod& p) const {
  const int count = p.consecutive_errors > 0 ? p.consecutive_errors : p.unschedulable_count;
  if (count == 0) return -kInf;  // never attempted and failed: no backoff
  // initial << (count - 1), at most the maximum (the shift is compared before it is made).
  double duration = options_.initial_backoff_s;
  for (int i = 1; i < count; ++i) {
    if (duration > options_.max_backoff_s - duration) {
      duration = options_.max_backoff_s;
      break;
    }
    duration += duration;
  }
  duration = std::min(duration, options_.max_backoff_s);
  return Align(p.timestamp.time + duration);
}

bool SchedulingQueue::BackingOff(const Pod& p, double now) const {
  // Backing off while the expiry is not before the current window's start.
  return !(Expiry(p) < Align(now));
}

SchedulingQueue::Strategy SchedulingQueue::Hint(const Pod& p, QueueEvent event) const {
  if (p.rejectors == 0) return Strategy::kAfterBackoff;  // no failed plugin: worth requeuing
  if (event == QueueEvent::kUnschedulableTimeout) return Strategy::kAfterBackoff;  // wildcard
  if (event == QueueEvent::kAssignedPodAdd) return Strategy::kSkip;  // cross-topology pods only
  // An extender is registered for every event with a hint that always queues.
  if (p.rejectors & kRejectedByExtender) return Strategy::kAfterBackoff;
  if (p.rejectors & kRejectedByFit) {
    // NodeResourcesFit: a scheduled pod's deletion may free room; so may a new or bigger node.
    if (event == QueueEvent::kAssignedPodDelete || event == QueueEvent::kNodeAdd) {
      return Strategy::kAfterBackoff;
    }
  }
  return Strategy::kSkip;
}

void SchedulingQueue::ToActive(int pod) {
  Pod& p = Get(pod);
  p.in = QueuedIn::kActive;
  ++p.entry;
  active_.push(Item{0, p.timestamp, pod, p.entry});
}

void SchedulingQueue::ToBackoff(int pod) {
  Pod& p = Get(pod);
  ++p.entry;
  const Item item{Expiry(p), p.timestamp, pod, p.entry};
  if (p.rejectors == 0) {
    p.in = QueuedIn::kErrorBackoff;
    error_backoff_.push(item);
  } else {
    p.in = QueuedIn::kBackoff;
    backoff_.push(item);
  }
}

void SchedulingQueue::ToPool(int pod) {
  Pod& p = Get(pod);
  p.in = QueuedIn::kUnschedulable;
  ++p.entry;
  p.pool_index = unschedulable_.size();
  unschedulable_.push_back(pod);
  pool_by_time_.push(Item{0, p.timestamp, pod, p.entry});
}

void SchedulingQueue::LeavePool(int pod) {
  Pod& p = Get(pod);
  const int last = unschedulable_.back();
  unschedulable_[p.pool_index] = last;
  Get(last).pool_index = p.pool_index;
  unschedulable_.pop_back();
  p.in = QueuedIn::kNone;
}

void SchedulingQueue::Requeue(int pod, Strategy strategy, double now) {
  // requeuePodWithQueueingStrategy.
  if (strategy == Strategy::kSkip) {
    ToPool(pod);
  } else if (BackingOff(Get(pod), now)) {
    ToBackoff(pod);
  } else {
    ToActive(pod);
  }
}

void SchedulingQueue::Add(int pod, double now) {
  Pod& p = Get(pod);
  const uint64_t entry = p.entry;  // entries only grow, so stale heap items stay stale
  p = Pod{};
  p.entry = entry;
  p.timestamp = Now(now);
  ToActive(pod);
}

std::optional<int> SchedulingQueue::Pop(double now) {
  (void)now;
  Item item{};
  if (!active_.empty()) {
    item = active_.top();
    active_.pop();
  } else if (options_.pop_from_backoff && !backoff_.empty()) {
    item = backoff_.top();  // even while it backs off
    backoff_.pop();
  } else {
    return std::nullopt;
  }
  Pod& p = Get(item.pod);
  ++p.attempts;
  p.in = QueuedIn::kInFlight;
  in_flight_ = item.pod;
  in_flight_events_.clear();
  return item.pod;
}

void SchedulingQueue::Done(int pod) {
  Get(pod).in = QueuedIn::kNone;
  if (in_flight_ == pod) in_flight_ = -1;
}

void SchedulingQueue::AddUnschedulable(int pod, uint8_t rejectors, double now) {
  Pod& p = Get(pod);
  if (in_flight_ == pod) in_flight_ = -1;
  p.rejectors = rejectors;
  if (rejectors == 0) {
    ++p.consecutive_errors;
  } else {
    ++p.unschedulable_count;
    p.consecutive_errors = 0;
  }
  p.timestamp = Now(now);
  // determineSchedulingHintForInFlightPod: the events raised while the pod was being scheduled.
  Strategy strategy = rejectors == 0 ? Strategy::kAfterBackoff : Strategy::kSkip;
  for (QueueEvent e : in_flight_events_) {
    if (strategy == Strategy::kAfterBackoff) break;
    strategy = Hint(p, e);
  }
  in_flight_events_.clear();
  Requeue(pod, strategy, now);
}

void SchedulingQueue::MoveAll(QueueEvent event, double now) {
  if (in_flight_ >= 0) in_flight_events_.push_back(event);
  // AssignedPodAdded looks only at pods with inter-pod affinity or topology-spread terms.
  if (event == QueueEvent::kAssignedPodAdd) return;
  // Pods whose hints queue them leave the pool; the pool's order does not matter, since the
  // queues order by timestamps that moving keeps.
  for (size_t i = 0; i < unschedulable_.size();) {
    const int pod = unschedulable_[i];
    const Strategy s = Hint(Get(pod), event);
    if (s == Strategy::kSkip) {
      ++i;
      continue;
    }
    LeavePool(pod);  // puts the last pod at i
    Requeue(pod, s, now);
  }
}

void SchedulingQueue::FlushBackoffCompleted(double now) {
  for (BackoffHeap* q : {&backoff_, &error_backoff_}) {
    while (!q->empty()) {
      const Item item = q->top();
      if (BackingOff(Get(item.pod), now)) break;
      q->pop();
      ToActive(item.pod);
    }
  }
}

void SchedulingQueue::FlushUnschedulableLeftover(double now) {
  std::vector<int> leftover;
  for (int pod : unschedulable_) {
    if (now - Get(pod).timestamp.time > options_.max_in_unschedulable_s) leftover.push_back(pod);
  }
  for (int pod : leftover) {
    LeavePool(pod);
    Requeue(pod, Hint(Get(pod), QueueEvent::kUnschedulableTimeout), now);
  }
}

double SchedulingQueue::NextFlush(double now) const {
  const double w = options_.backoff_window_s;
  const double after_now = std::floor(now / w) * w + w;  // the first backoff tick after now
  double next = kInf;
  // The backoff flush: the first tick at which the head of either queue has completed.
  for (const BackoffHeap* q : {&backoff_, &error_backoff_}) {
    if (q->empty()) continue;
    const double expiry = q->top().expiry;
    // Completed at tick k when expiry < Align(k) = k.
    const double k = expiry == -kInf ? after_now : std::floor(expiry / w) * w + w;
    next = std::min(next, std::max(k, after_now));
  }
  // The leftover flush: the first tick after `now` at which the oldest pool pod has stayed
  // longer than the maximum.
  auto& pool = pool_by_time_;
  while (!pool.empty()) {
    const Item& top = pool.top();
    const Pod* p = Find(top.pod);
    if (p != nullptr && p->in == QueuedIn::kUnschedulable && p->entry == top.entry) break;
    pool.pop();  // stale: the pod left the pool since
  }
  if (!pool.empty()) {
    const double period = options_.leftover_flush_period_s;
    const double due = pool.top().timestamp.time + options_.max_in_unschedulable_s;
    const double from = std::max(now, due);  // a tick strictly after both
    next = std::min(next, std::floor(from / period) * period + period);
  }
  return next;
}

void SchedulingQueue::RunFlushesUntil(double now) {
  while (true) {
    const double next = NextFlush(flushed_until_);
    if (!(next <= now)) break;
    const double w = options_.backoff_window_s;
    const double period = options_.leftover_flush_period_s;
    if (std::floor(next / w) * w == next) FlushBackoffCompleted(next);
    if (std::floor(next / period) * period == next) FlushUnschedulableLeftover(next);
    flushed_until_ = next;
  }
  if (now > flushed_until_) flushed_until_ = now;
}

QueuedIn SchedulingQueue::where(int pod) const {
  const Pod* p = Find(pod);
  return p != nullptr ? p->in : QueuedIn::kNone;
}

int SchedulingQueue::attempts(int pod) const {
  const Pod* p = Find(pod);
  return p != nullptr ? p->attempts : 0;
}

int SchedulingQueue::unschedulable_count(int pod) const {
  const Pod* p = Find(pod);
  return p != nullptr ? p->unschedulable_count : 0;
}

double SchedulingQueue::backoff_expiry(int pod) const {
  const Pod* p = Find(pod);
  return p != nullptr ? Expiry(*p) : -kInf;
}

bool SchedulingQueue::backing_off(int pod, double now) const {
  const Pod* p = Find(pod);
  return p != nullptr && BackingOff(*p, now);
}

}  // namespace tessera::placement
