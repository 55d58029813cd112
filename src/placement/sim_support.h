// What the two replays of the simulator share (simulator.cc: the FGD protocol; replay.cc: with
// departures): the salt of the policies' tie-break seed, applying a policy's choice, and
// percentiles of decision times and waits. Internal to src/placement; no I/O.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "placement/cluster.h"
#include "placement/policy.h"

namespace tessera::placement::internal {

// Policies break ties from a stream independent of the sampling one.
inline constexpr uint64_t kPolicySeedSalt = 0x7465737365726121ULL;

// Places `r` where `policy` chose (`a`) and tells the policy; an invalid choice is an error that
// names the policy.
inline Status PlaceChosen(Cluster& cluster, Policy& policy, const Request& r, const Assignment& a) {
  Status placed = cluster.Place(r, a);
  if (!placed.ok()) {
    return Status::Error("policy " + std::string(policy.name()) +
                         " chose an invalid placement: " + placed.message());
  }
  policy.OnPlaced(cluster, r, a);
  return Status::Ok();
}

// The q-quantile (0..1) of `v` by the nearest rank at or below (reorders `v`); 0 when empty.
template <typename T>
double Percentile(std::vector<T>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

}  // namespace tessera::placement::internal
