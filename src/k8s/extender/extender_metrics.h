// ExtenderMetrics: what tessera-extender counts for GET /metrics: requests per verb and outcome,
// their latency as a histogram, pods refused (filter: no node fits, by the commonest node reason;
// bind: by failure kind) and the nodes each filter turned down, by reason; plus the state's
// gauges (nodes, pods, holds, GPU capacity and allocation) at scrape time.
//
// Thread-safe (a mutex; recording costs a few counter updates). Renders through
// metrics::ExpositionWriter; knows nothing of HTTP.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "k8s/extender/cluster_state.h"

namespace tessera::extender {

class ExtenderMetrics {
 public:
  // One request to `verb` (filter, prioritize, bind) that took `seconds`; `ok` false when it
  // answered an error (a malformed request, a failed bind).
  void Request(const std::string& verb, double seconds, bool ok);
  // A pod the verb could not place, by reason kind (NodeFailure::kind, or a bind failure's).
  void PodRefused(const std::string& verb, const std::string& kind);
  // A node a filter turned down, by reason kind.
  void NodeRejected(const std::string& kind, uint64_t count = 1);

  std::string Render(const StateStats& state, bool ready) const;

  static constexpr std::array<double, 14> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};

 private:
  struct Latency {
    std::array<uint64_t, kBounds.size()> buckets{};  // per bucket, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, bool>, uint64_t> requests_;
  std::map<std::string, Latency> latency_;
  std::map<std::pair<std::string, std::string>, uint64_t> refused_;
  std::map<std::string, uint64_t> rejected_;
};

}  // namespace tessera::extender
