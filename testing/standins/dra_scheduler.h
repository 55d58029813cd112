// DraScheduler: a STAND-IN for kube-scheduler's scheduling cycle of a pod with ResourceClaims,
// for tests and the benchmark only, as the default profile runs it (pkg/scheduler, as far as a
// pod without affinity, spread constraints, taints or volumes meets it):
//  - Filter: NodeResourcesFit (the pod's CPU and memory fit what the node's allocatable leaves)
//    and the DynamicResources plugin (its claims allocate on the node: DraAllocator, the stand-in
//    of upstream's structured allocator); nodes are filtered from a start index that moves on by
//    the nodes examined each cycle, until numFeasibleNodesToFind feasible nodes are found (all of
//    them below 100 nodes, else max(100, n x (50 - n/125) %), at least 5 %);
//  - Score: NodeResourcesFit (LeastAllocated on CPU and memory, weight 1) plus
//    NodeResourcesBalancedAllocation (weight 1), in integers as upstream computes them; DRA
//    scores nothing;
//  - the best node, ties broken at random (upstream's reservoir sampling; seeded here);
//  - Reserve: the claims' allocations on that node are the ones its Filter found.
// It does not preempt, retry, or run the extender; pods are scheduled one by one.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/objects.h"
#include "testing/standins/dra_allocator.h"

namespace tessera::k8s {

class DraScheduler {
 public:
  struct Node {
    std::string name;
    int64_t cpu_milli = 0;   // allocatable
    int64_t memory_mib = 0;  // allocatable
  };
  struct Decision {
    std::string node;
    std::vector<Json> allocations;  // one per claim
  };

  // `allocator` holds the slices and classes; what this scheduler allocates is added to it.
  DraScheduler(std::vector<Node> nodes, DraAllocator* allocator, uint64_t seed);

  // One scheduling cycle; nullopt when no node is feasible.
  Result<std::optional<Decision>> Schedule(int64_t cpu_milli, int64_t memory_mib,
                                           const std::vector<Json>& claims);
  // A pod placed by someone else (its CPU and memory), or gone.
  void Hold(const std::string& node, int64_t cpu_milli, int64_t memory_mib);
  void Release(const std::string& node, int64_t cpu_milli, int64_t memory_mib);

  int examined_last() const { return examined_; }

 private:
  struct State {
    Node node;
    int64_t cpu_used = 0, memory_used = 0;
  };
  int NumFeasibleNodesToFind() const;
  int64_t Score(const State& s, int64_t cpu, int64_t memory) const;

  std::vector<State> nodes_;
  DraAllocator* allocator_;
  std::mt19937_64 rng_;
  size_t next_start_ = 0;
  int examined_ = 0;
};

}  // namespace tessera::k8s
