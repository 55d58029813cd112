// The replay: the trace with departures. Pods arrive at their creation times and leave when they
// have run as long as the trace says (deletion - creation); a pod that fits nowhere waits. How it
// waits is a model of kube-scheduler's scheduling queue (sched_queue.h: the active, backoff and
// unschedulable queues, backoff, and which cluster events move a waiting pod, as the extender's
// commits, bound pods' deletions and the unschedulable timeout raise them), or, for comparison,
// first come first served: every waiting pod is retried in arrival order whenever capacity frees
// (a pod that still does not fit does not hold back those behind it). This is what a running
// cluster sees and what the FGD protocol (simulator.h: no departures, no retries) leaves out:
// holes that departures open, and how long pods wait.
//
// The trace's pod list is a small sample of its cluster's pods: at its own pace it never asks
// more than ~86 of the openb cluster's 6212 GPUs at once. So the replay samples pods from the
// list with replacement (seed S, the FGD protocol's draws continued) until the GPU demand at the
// busiest instant, were every pod to start on arrival, is `load` x the cluster's GPUs, and plays
// the creation times `speedup` times as fast (run times unscaled: a pod runs as long as in the
// trace). Waits are in the trace's seconds.
//
// Who places the pods is a ReplayScheduler: the policy in process (Replay), or tessera-extender
// through kube-scheduler's HTTP calls (bench/extender_bench.cc, which must give the same result).
// A policy that keeps reservations for waiting pods (Policy::ReservesForWaiting; reservation.h)
// gets them planned here from the pods that have failed an attempt, oldest first, as the
// extender plans them from the pods kube-scheduler marked unschedulable.
//
// Recorded, at `points` instants evenly spread from the moment the offered demand first reaches
// a tenth of the cluster's GPUs to the last arrival: the GPU allocation ratio, the pods waiting
// and the GPUs they ask. Per pod: its wait (placement - arrival). Runs on one thread; no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/model.h"
#include "placement/reservation.h"
#include "placement/sched_queue.h"
#include "placement/trace.h"

namespace tessera::placement {

// How waiting pods are retried.
enum class QueueModel : uint8_t {
  kKubeScheduler,  // sched_queue.h's model of kube-scheduler's queue
  kFcfs,           // every waiting pod, in arrival order, whenever capacity frees
};
std::string_view QueueModelName(QueueModel model);

struct ReplayOptions {
  uint64_t seed = 42;
  QueueModel queue = QueueModel::kKubeScheduler;
  QueueOptions queue_options;  // kKubeScheduler's settings (kube-scheduler's defaults)
  // Plan reservations for waiting pods when the policy keeps them (false: never, to measure
  // what they give), for those that have waited `hold_after_s` since their first failed attempt.
  bool reservations = true;
  double hold_after_s = Reservations::kHoldAfterS;  // [0, 1e9]
  // An attempt whose request failed since the last departure and reservation change fails again
  // without asking the scheduler (the outcome is the same; false asks every time).
  bool skip_known_failures = true;
  double load = 1.2;     // GPU demand at the busiest instant / cluster GPUs, (0, 100]
  double speedup = 100;  // creation times are divided by this, [1e-6, 1e12]
  bool resample = true;  // false: every pod of the list once, as listed (load is then unused)
  int points = 101;      // timeline samples, 2..10000
};

struct ReplayResult {
  std::string policy;
  uint64_t seed = 0;
  std::string queue;          // QueueModelName
  bool reservations = false;  // planned for waiting pods (the policy keeps them and they were on)
  int64_t pods = 0;           // sampled
  int64_t placed = 0;         // placed at some point
  int64_t unplaceable = 0;    // fit no node even of the empty cluster; refused on arrival
  int64_t never_placed = 0;   // still waiting when nothing was left to free (pods that never leave)
  int64_t waited = 0;         // placed or not, waited longer than 0 s
  int total_gpus = 0;
  double speedup = 0;           // creation times were divided by this
  double peak_demand_gpus = 0;  // GPUs asked at the busiest instant, were none to wait
  double timeline_start_s = 0;  // when the offered demand first reaches 10 % of the GPUs
  double last_arrival_s = 0;
  double end_s = 0;  // the last placement (or the last arrival, if later)
  // Timeline: index i is the instant start + i / (points - 1) x (last_arrival_s - start).
  std::vector<double> allocation_ratio;  // %
  std::vector<double> waiting_pods;
  std::vector<double> waiting_gpus;  // GPUs the waiting pods ask
  // Means over the timeline's window [timeline_start_s, last_arrival_s], the same for every
  // policy, weighted by time: the allocation ratio, and the allocation ratio while at least one
  // GPU pod waits (0 when none ever does) with the share of the window that is.
  double allocation_mean = 0;
  double allocation_while_waiting = 0;
  double waiting_time_share = 0;
  int64_t peak_waiting_pods = 0;
  // Waits of the pods that could be placed (never_placed pods count with their wait until
  // end_s), in seconds.
  double wait_s_p50 = 0;
  double wait_s_p99 = 0;
  double wait_s_max = 0;
  double wait_s_mean = 0;
  int64_t attempts = 0;   // scheduling attempts, known failures included
  int64_t decisions = 0;  // attempts the scheduler was asked (the others were known to fail)
  int64_t reservations_made = 0;  // times a waiting pod was given a node to drain
  double decision_us_p50 = 0;
  double decision_us_p99 = 0;
  double seconds = 0;  // wall time of the whole run
  // Per pod of the run, in arrival order: its wait (-1: refused as unplaceable) and where it was
  // placed (node -1: never); for comparing two replays pod by pod.
  std::vector<double> pod_waits;
  std::vector<Assignment> pod_placements;
};

// The scheduler a replay drives, one attempt at a time; pods are numbered in arrival order.
class ReplayScheduler {
 public:
  virtual ~ReplayScheduler() = default;
  virtual std::string_view name() const = 0;
  // Whether it keeps reservations for waiting pods (reservation.h).
  virtual bool ReservesForWaiting() const = 0;
  // Pod `pod` arrived: it is pending.
  virtual Status Arrive(int pod, const Request& request, double at) = 0;
  // One attempt: where `pod` goes on `cluster` (the replay's picture, every placement so far
  // applied), or nullopt when it fits nowhere it may go. `reservations` is the replay's plan
  // (null when none is kept); a scheduler that plans its own (the extender) must agree with it.
  virtual Result<std::optional<Assignment>> Attempt(const Cluster& cluster, int pod,
                                                    const Request& request,
                                                    const Reservations* reservations) = 0;
  // `pod` failed its first attempt: it now waits (kube-scheduler marks it unschedulable).
  virtual Status MarkWaiting(int pod, const Request& request) = 0;
  // The replay applied `pod`'s placement to `cluster`.
  virtual void Placed(const Cluster& cluster, int pod, const Request& request,
                      const Assignment& a) = 0;
  // `pod` left; the replay already took it off `cluster`.
  virtual Status Leave(const Cluster& cluster, int pod, const Request& request,
                       const Assignment& a) = 0;
  // What the scheduler's side does on its own clock, between attempts (the extender's MIG
  // re-cut loop, the nodes answering it): the first instant after `now` at which it acts
  // (infinity: none), and running what is due at `now`. Advance returns whether a Node changed
  // in a way kube-scheduler's queue sees (an annotation update: it moves the pods an extender
  // rejected). The replay calls Advance at every instant it stops at, after that instant's
  // departures and before its arrivals and attempts, and stops at NextEvent while pods wait.
  // The policy in process has none.
  virtual double NextEvent(double now) const;
  virtual Result<bool> Advance(double now);
};

// The pods of a run and their times, in arrival order: `order` indexes the list (`pods`).
struct ReplayPods {
  std::vector<int> order;
  std::vector<double> arrival_s;  // creation / speedup
};
// The pods a replay with these options plays (resampled for the load, or the list as it is).
Result<ReplayPods> ReplayPodsFor(std::span<const Request> pods, std::span<const PodTimes> times,
                                 int64_t gpu_milli_capacity, const ReplayOptions& options);

// The replay with `scheduler` placing the pods (Replay is this with the policy in process).
Result<ReplayResult> ReplayWith(const Cluster& cluster, std::span<const Request> pods,
                                std::span<const PodTimes> times, ReplayScheduler& scheduler,
                                const ReplayOptions& options);

// One replay of `policy` (a PolicyNames() name) over `pods` with their `times` (one per pod;
// every pod needs a creation time; no deletion time: it never leaves). `cluster` is copied.
Result<ReplayResult> Replay(const Cluster& cluster, std::span<const Request> pods,
                            std::span<const PodTimes> times, const TargetWorkload& workload,
                            std::string_view policy, const ReplayOptions& options);

// The pods of a resampled replay: the first n draws of the FGD protocol's sampler for `seed`
// (SampleWorkload draws the same pods first), n the fewest that make the GPU demand at the
// busiest instant reach `load` x `gpu_milli_capacity` when creation times are divided by
// `speedup`. Fails when even 4 million pods do not (the list asks no GPU, or runs too short).
Result<std::vector<int>> SampleForLoad(std::span<const Request> pods,
                                       std::span<const PodTimes> times, uint64_t seed,
                                       double speedup, int64_t gpu_milli_capacity, double load);

}  // namespace tessera::placement
