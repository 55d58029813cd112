// Reservations: a node kept draining for a waiting pod that asks for several GPUs, or for as
// much CPU as several GPUs come with, or that few of the cluster's GPUs can serve.
//
// With pods leaving, the GPUs they free are scattered over many partly used nodes. A pod that
// needs several GPUs on one node fits only when one node happens to empty that far, while pods
// asking one GPU or a share take whatever frees first, so it can wait for hours (the openb
// replay's 8-GPU pods did). A pod asking one GPU with the CPU of several (24 cores where a node
// has 8 per GPU) fits only such a node too. A pod that only a few nodes fit (a model with few
// GPUs, or CPU that only the largest nodes have) seldom finds that a GPU which frees is on one of
// them. So the waiting pods that ask for two GPUs or more, for one GPU with the CPU of two or more
// of the GPUs of every node they fit, or that fit only nodes with few of the cluster's GPUs
// (Holds), hold one node each, once they have waited hold_after_s (kHoldAfterS, 20 minutes, by
// default), the oldest waiting pod first, while the GPUs asked by those that hold come to less
// than kHeldGpus (the oldest always holds one): the node that is closest to fitting it (the least
// GPU share missing on its best GPUs for the pod, then the least CPU and memory missing as parts
// of the node, then the lowest index) among those it fits when empty and no older holder took.
// A held node stands partly idle while it drains, and the pods that could have used it wait; the
// policy's age preference (policy_tessera.cc) lets nodes empty on their own, so a few holders at
// a time are enough to bound the longest wait, and most multi-GPU pods find a node that emptied
// on its own within minutes: a hold for them would only idle GPUs that waiting single GPUs could
// use (docs/placement.md, "Holding after 20 minutes"). While it holds the node, no other pod that
// asks for GPUs may go there, and a pod that asks for none only if it leaves the holder's CPU and
// memory; so the node only drains until the holder fits, and the holder may still go wherever
// else it fits first. Any other pod that asks for one GPU, or a share, holds nothing: most GPUs
// that free serve it, and the queue's order serves it in turn.
//
// The reservations are a function of the cluster (its clock included) and the waiting pods in age
// order with the instant each was first found unschedulable, nothing else: the simulator knows
// its waiting pods; the extender reads them from the API server (pods kube-scheduler marked
// unschedulable, by creation time) and notes on its clock when it first saw each so marked. The
// plan does not change when a pod is placed on a node no one holds (that node only gets further
// from fitting anyone), which is what lets a caller plan again only after a departure, a change
// of the waiting pods, or once the clock reaches next_change_s(); planning more often gives the
// same plan. A caller that keeps no clock (Cluster::now() 0) has every waiting pod hold at once.
//
// Not thread-safe; no I/O.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "placement/cluster.h"
#include "placement/model.h"

namespace tessera::placement {

// A pod waiting to be placed, as the reservations see it.
struct WaitingPod {
  uint64_t key = 0;  // the caller's identity of the pod
  Request request;
  double waiting_since_s = 0;  // when it was first found unschedulable, on the cluster's clock
};

class Reservations {
 public:
  struct Held {
    uint64_t key = 0;
    int node = -1;
    Request request;
  };

  // Whether a waiting pod asking `r` holds a reservation on `cluster` (never a MIG request): two
  // GPUs or more, or one GPU (or a share of one) asking at least kHeldCpuOfGpus of a node's GPUs'
  // worth of CPU (the node's CPU over its GPU count) on every node it fits when empty, or whose
  // nodes (those it fits when empty) have at most kFewGpusPart of the cluster's GPUs. The first
  // fits only a node that has mostly emptied, as a multi-GPU pod does; for the second, a GPU that
  // frees is seldom one it can use. Remembered per request shape and cluster.
  bool Holds(const Cluster& cluster, const Request& r);
  static constexpr int kHeldCpuOfGpus = 2;
  static constexpr double kFewGpusPart = 0.05;
  // Holders are planned, oldest first, while the GPUs they ask come to less than this.
  static constexpr int kHeldGpus = 8;
  // A waiting pod holds only once it has waited this long (seconds on the cluster's clock), by
  // default.
  static constexpr double kHoldAfterS = 1200;

  // `hold_after_s`: how long a pod waits before it holds (>= 0; 0: from its first failure).
  explicit Reservations(double hold_after_s = kHoldAfterS) : hold_after_s_(hold_after_s) {}
  double hold_after_s() const { return hold_after_s_; }
  // Whether `r` fits `node` once everything on it has left: the node's shape, model and mode.
  static bool FitsWhenEmpty(const Cluster& cluster, int node, const Request& r);

  // Plans the reservations on `cluster` at its clock for `waiting`, oldest first (pods that hold
  // none, or have not waited hold_after_s yet, are skipped), on the nodes whose `eligible` entry is
  // not 0 (empty: every node). Returns true when the plan differs from the previous one.
  bool Plan(const Cluster& cluster, std::span<const WaitingPod> waiting_oldest_first,
            std::span<const uint8_t> eligible = {});
  void Clear();
  // The first instant after the last Plan at which a skipped pod will have waited hold_after_s
  // (+infinity: none): the plan may change then with nothing else changing.
  double next_change_s() const { return next_change_s_; }

  bool empty() const { return held_.empty(); }
  std::span<const Held> held() const { return held_; }
  // Bumped whenever Plan changes the reservations.
  uint64_t generation() const { return generation_; }
  // The reservation on `node`, or nullptr.
  const Held* On(int node) const;
  // Whether pod `key`, asking `r`, may go to `node`.
  bool Allows(const Cluster& cluster, int node, uint64_t key, const Request& r) const;
  // The nodes of `candidates` (in their order) that pod `key`, asking `r`, may go to.
  void Allowed(const Cluster& cluster, uint64_t key, const Request& r,
               std::span<const int> candidates, std::vector<int>* out) const;
  // Every node pod `key` may go to, in index order.
  void AllowedNodes(const Cluster& cluster, uint64_t key, const Request& r,
                    std::vector<int>* out) const;

 private:
  // How far a node is from fitting a request: GPU share missing (milli), then CPU and memory
  // missing as parts of the node's.
  struct Deficit {
    uint64_t version = ~uint64_t{0};
    bool fits_empty = false;
    double gpu = 0;
    double rest = 0;
  };
  struct ShapeKey {
    int64_t cpu, memory, gpu_mem;
    int32_t gpu_count, gpu_milli;
    uint64_t allowed;
    uint32_t gpu_modes;
    bool operator==(const ShapeKey&) const = default;
  };
  struct ShapeHash {
    size_t operator()(const ShapeKey& k) const;
  };
  static Deficit Measure(const Cluster& cluster, int node, const Request& r);
  std::vector<Deficit>& DeficitsFor(const Cluster& cluster, const Request& r);
  static ShapeKey KeyOf(const Request& r);
  void Forget(const Cluster& cluster);  // drops what is remembered of another cluster

  std::vector<Held> held_;
  std::vector<int> holder_of_;  // per node: index into held_, or -1
  double hold_after_s_;
  double next_change_s_ = std::numeric_limits<double>::infinity();
  uint64_t generation_ = 0;
  uint64_t cluster_id_ = 0;
  std::unordered_map<ShapeKey, std::vector<Deficit>, ShapeHash> deficits_;
  std::unordered_map<ShapeKey, bool, ShapeHash> holds_;
};

}  // namespace tessera::placement
