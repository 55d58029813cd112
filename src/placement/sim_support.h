// What the two replays of the simulator share (simulator.cc: the FGD protocol; replay.cc: with
// departures): the salt of the policies' tie-break seed and percentiles of decision times and
// waits. Internal to src/placement; no I/O.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::placement::internal {

// Policies break ties from a stream independent of the sampling one.
inline constexpr uint64_t kPolicySeedSalt = 0x7465737365726121ULL;

// The q-quantile (0..1) of `v` by the nearest rank at or below (reorders `v`); 0 when empty.
template <typename T>
double Percentile(std::vector<T>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

}  // namespace tessera::placement::internal
