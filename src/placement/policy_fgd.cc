// fgd: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023), reimplemented from
// the paper's description and its simulator's documented behaviour:
//   - every node that fits is scored 100 * sigmoid((F_n(M) - F_n'(M)) / 1000), truncated to a
//     whole number as kube-scheduler plugin scores are, where F_n' is the fragmentation after the
//     placement; the highest score wins and equal scores go to the first node in list order;
//   - a fractional single-GPU request tries every GPU of the node that fits and keeps the one with
//     the highest score (the lowest-numbered among equals);
//   - whole-GPU requests take the lowest-numbered free GPUs.
// Fractional multi-GPU requests (not in the paper's traces) take best-fit GPUs.
// Reads the cluster only; its FragEvaluator caches per-node values by node version.
#include <cmath>
#include <memory>

#include "placement/policy_internal.h"

namespace tessera::placement::internal {

namespace {

double FgdScore(double before, double after) {
  return PluginScore(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
}

class FgdPolicy final : public ScoredNodePolicy {
 public:
  explicit FgdPolicy(const PolicyOptions& o)
      : ScoredNodePolicy(o, TieRule::kFirstNode), workload_(o.workload) {}
  std::string_view name() const override { return "fgd"; }

 protected:
  void Attach(const Cluster& c) override { eval_ = std::make_unique<FragEvaluator>(c, *workload_); }

  Score ScoreNode(const Cluster& c, int n, const Request& r) override {
    const double before = eval_->Frag(n);
    if (r.gpu_count == 1 && !r.whole_gpus()) {
      Score best{-1, 0, 0};
      for (int g = 0; g < c.spec(n).gpu_count; ++g) {
        if (!c.GpuFits(n, g, r)) continue;
        if (SameAsEarlierGpu(c, n, g)) continue;
        const int32_t from = c.gpu_share_free(n)[static_cast<size_t>(g)];
        const double score =
            FgdScore(before, eval_->FragAfterOneGpu(n, r, from, ShareAfter(c, n, g, r)));
        if (score > best.primary) best = {score, 0, uint32_t{1} << g};
      }
      return best;
    }
    const uint32_t gpus = BestFitGpus(c, n, r);
    return {FgdScore(before, eval_->FragAfter(n, r, gpus)), 0, gpus};
  }

 private:
  const TargetWorkload* workload_;
  std::unique_ptr<FragEvaluator> eval_;
};

}  // namespace

std::unique_ptr<Policy> MakeFgd(const PolicyOptions& o) { return std::make_unique<FgdPolicy>(o); }

}  // namespace tessera::placement::internal
