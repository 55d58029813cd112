// Counting and rendering the extender's metrics. No HTTP.
#include "k8s/extender/extender_metrics.h"

#include <vector>

#include "metrics/exposition.h"

namespace tessera::extender {

void ExtenderMetrics::Request(const std::string& verb, double seconds, bool ok) {
  std::lock_guard lock(mu_);
  ++requests_[{verb, ok}];
  Latency& l = latency_[verb];
  ++l.count;
  l.sum += seconds;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++l.buckets[i];
      break;
    }
  }
}

void ExtenderMetrics::PodRefused(const std::string& verb, const std::string& kind) {
  std::lock_guard lock(mu_);
  ++refused_[{verb, kind}];
}

void ExtenderMetrics::NodeRejected(const std::string& kind, uint64_t count) {
  std::lock_guard lock(mu_);
  rejected_[kind] += count;
}

std::string ExtenderMetrics::Render(const StateStats& s, bool ready) const {
  using metrics::MetricType;
  metrics::ExpositionWriter w;
  // Every name and label here is fixed and valid, so the writer's refusals cannot happen; a
  // failure would drop a sample, never the page.
  auto gauge = [&w](const char* name, const char* help, double value) {
    (void)w.BeginFamily(name, MetricType::kGauge, help);
    (void)w.AddSample({}, value);
  };
  std::lock_guard lock(mu_);
  gauge("tessera_extender_ready", "1 once the first list of Nodes and Pods is in", ready ? 1 : 0);
  (void)w.BeginFamily("tessera_extender_requests_total", MetricType::kCounter,
                      "Extender requests by verb and result (ok, error)");
  for (const auto& [key, n] : requests_) {
    (void)w.AddSample({{"verb", key.first}, {"result", key.second ? "ok" : "error"}}, n);
  }
  (void)w.BeginFamily("tessera_extender_request_duration_seconds", MetricType::kHistogram,
                      "Time from receiving a request to its answer, by verb");
  for (const auto& [verb, l] : latency_) {
    std::vector<uint64_t> cumulative;
    uint64_t total = 0;
    for (uint64_t b : l.buckets) cumulative.push_back(total += b);
    (void)w.AddHistogram({{"verb", verb}}, kBounds, cumulative, l.sum, l.count);
  }
  (void)w.BeginFamily("tessera_extender_pods_refused_total", MetricType::kCounter,
                      "Pods a verb could not place, by reason (filter: the commonest node "
                      "reason when no node fits; bind: the failure)");
  for (const auto& [key, n] : refused_) {
    (void)w.AddSample({{"verb", key.first}, {"reason", key.second}}, n);
  }
  (void)w.BeginFamily("tessera_extender_node_rejections_total", MetricType::kCounter,
                      "Nodes turned down by filter, by reason");
  for (const auto& [kind, n] : rejected_) (void)w.AddSample({{"reason", kind}}, n);
  gauge("tessera_extender_nodes", "Nodes in the extender's cache", static_cast<double>(s.nodes));
  gauge("tessera_extender_pods", "Pods in the extender's cache", static_cast<double>(s.pods));
  (void)w.BeginFamily("tessera_extender_holds", MetricType::kGauge,
                      "Pods holding resources in the extender's books, by state");
  (void)w.AddSample({{"state", "observed"}}, s.holds_observed);
  (void)w.AddSample({{"state", "reserved"}}, s.holds_reserved);
  (void)w.AddSample({{"state", "binding"}}, s.holds_binding);
  gauge("tessera_extender_gpu_capacity_milli", "GPU capacity of the healthy GPUs, in milli-GPUs",
        static_cast<double>(s.gpu_milli_capacity));
  gauge("tessera_extender_gpu_allocated_milli", "GPU compute held by pods, in milli-GPUs",
        static_cast<double>(s.gpu_milli_allocated));
  (void)w.BeginFamily("tessera_extender_cluster_rebuilds_total", MetricType::kCounter,
                      "Times the placement picture was rebuilt after node changes");
  (void)w.AddSample({}, s.rebuilds);
  (void)w.BeginFamily("tessera_extender_reservations_expired_total", MetricType::kCounter,
                      "Filter reservations released because no bind came in time");
  (void)w.AddSample({}, s.reservations_expired);
  (void)w.BeginFamily("tessera_extender_accounting_conflicts_total", MetricType::kCounter,
                      "Shares read from pods' annotations that did not fit their GPUs");
  (void)w.AddSample({}, s.accounting_conflicts);
  return w.text();
}

}  // namespace tessera::extender
