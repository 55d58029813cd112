// Placement policies: given the cluster and one request, choose a node and that node's GPUs.
//
// Every policy sits behind the one Policy interface and is made by name (MakePolicy), so the
// simulator, the CLI and the scheduler extender run the same code. A policy only reads the
// cluster; the caller applies the assignment (Cluster::Place) and then tells the policy
// (OnPlaced), which policies that keep their own per-node records (clustering) use.
//
// Policies (see docs/placement.md for each rule and where it comes from):
//   tessera     ours, the default: FGD's fragmentation plus the GPU share a placement strands
//               for lack of CPU, plus the expected leftover of GPU shares, plus the protection
//               of models that constrained requests need, in 30-milli steps, first-fit ties
//               (policy_tessera.cc)
//   fgd         fragmentation gradient descent, Weng et al., ATC'23 (policy_fgd.cc)
//   bestfit     least CPU/GPU left after placement; GPU best-fit
//   packing     already-shared GPUs first, then partly used nodes, then idle nodes
//   clustering  nodes already running requests of the same shape first, then idle nodes
//   dotprod     smallest dot product of the request and the node's free resources
//   binpack     node and GPU binpack (most used first), as HAMi's binpack
//   spread      node and GPU spread (least used first), as HAMi's spread
//   random      a uniformly random fitting node and random fitting GPUs
// MIG requests (one instance of a MIG profile, on `mig` nodes) are placed by one rule under every
// policy: placement/mig.h's instance choice, the best node by its score.
// Equal scores go to the first node in list order (what the FGD authors' simulator does; with
// random tie breaks FGD's published numbers cannot be reproduced), except for random, which
// draws from the policy's own seeded generator, so a run is reproducible from its seed.
// A policy is not thread-safe (it caches per-node scores); use one per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/model.h"

namespace tessera::placement {

struct PolicyOptions {
  uint64_t seed = 42;
  // The target workload of the fragmentation-aware policies (fgd, tessera), which MakePolicy
  // refuses to make without one; ignored by the others. Must outlive the policy.
  const TargetWorkload* workload = nullptr;
};

// A node's standing for one request under a policy: higher `primary`, then higher `secondary`, is
// better; `gpus` is where on the node the request would go. Scores compare only within one policy.
struct NodeScore {
  int node = -1;
  double primary = 0;
  double secondary = 0;
  uint32_t gpus = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Where `request` should go: a node it fits and exactly request.gpu_count of that node's GPUs
  // that each fit it. nullopt when it fits no node. Does not change the cluster.
  virtual std::optional<Assignment> Select(const Cluster& cluster, const Request& request) = 0;
  // Select over a subset of the nodes: the choice Select would make if the cluster had only the
  // nodes in `candidates` (node indices in increasing order; equal scores still go to the lowest
  // index). Select is this over every node. When `scores` is not null it receives the score of
  // every candidate the request fits, in candidate order (cleared first).
  virtual std::optional<Assignment> SelectAmong(const Cluster& cluster, const Request& request,
                                                std::span<const int> candidates,
                                                std::vector<NodeScore>* scores) = 0;
  // The GPUs this policy gives `request` on `node`, which the request must fit: those Select
  // returns whenever it chooses that node. Does not change the cluster.
  virtual uint32_t GpusOn(const Cluster& cluster, int node, const Request& request) = 0;
  // Whether the callers should keep reservations for pods waiting to be placed
  // (reservation.h): nodes drained for waiting pods that ask several GPUs (or the CPU of several,
  // or that few GPUs serve), which other pods then may not use.
  virtual bool ReservesForWaiting() const { return false; }
  // Called after the caller applied `a` for `request` (or took it back).
  virtual void OnPlaced(const Cluster& cluster, const Request& request, const Assignment& a) {}
  virtual void OnRemoved(const Cluster& cluster, const Request& request, const Assignment& a) {}
};

// Every policy name, the default ("tessera") first.
std::span<const std::string_view> PolicyNames();
inline constexpr std::string_view kDefaultPolicy = "tessera";

// The policy called `name`, or an error naming the value and listing the names.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options);

}  // namespace tessera::placement
