// tessera: our own placement policy, the default. FGD's fragmentation gradient plus the GPUs a
// placement strands for lack of CPU, judged in coarse steps with first-fit ties.
//
// A node's score for a request is the decrease, over the placement, of
//     F_n(M)  +  S_n
// where F_n(M) is FGD's expected fragmentation (frag.h) and S_n the GPU share of the node that its
// remaining CPU cannot serve: with kappa the CPU the target workload asks per GPU,
//     S_n = min(free share, max(0, kappa * free share - free CPU) / kappa).
// The decrease is cut into steps of kStepMilli (differences smaller than a step are noise, and
// acting on them spreads requests over the cluster); the highest step wins and equal steps go to
// the first node in list order, which packs. Fractional single-GPU requests take the GPU with the
// best step on the node (lowest-numbered among equals); whole GPUs the lowest-numbered free ones.
// Why each part is there, with measurements: docs/placement.md. Reads the cluster only.
#include <algorithm>
#include <cmath>
#include <memory>

#include "placement/policy_internal.h"

namespace tessera::placement::internal {

namespace {

constexpr double kStepMilli = 30;

// CPU milli the workload's GPU shapes ask per whole GPU (0 when it has none).
double CpuPerGpu(const TargetWorkload& w) {
  double cpu = 0;
  double gpus = 0;
  for (const TargetShape& s : w.shapes()) {
    if (s.gpu_count == 0 || s.gpu_milli == 0) continue;
    cpu += s.weight * static_cast<double>(s.cpu_milli);
    gpus += s.weight * s.gpu_count * std::min(s.gpu_milli, kMilliPerGpu) / 1000.0;
  }
  return gpus > 0 ? cpu / gpus : 0;
}

class TesseraPolicy final : public ScoredNodePolicy {
 public:
  explicit TesseraPolicy(const PolicyOptions& o)
      : ScoredNodePolicy(o, TieRule::kFirstNode),
        workload_(o.workload),
        cpu_per_gpu_(CpuPerGpu(*o.workload)) {}
  std::string_view name() const override { return "tessera"; }

 protected:
  void Attach(const Cluster& c) override { eval_ = std::make_unique<FragEvaluator>(c, *workload_); }

  Score ScoreNode(const Cluster& c, int n, const Request& r) override {
    const double before = eval_->Frag(n);
    const double stranded_gain =
        Stranded(static_cast<double>(c.cpu_free(n)), static_cast<double>(c.share_free_total(n))) -
        Stranded(static_cast<double>(c.cpu_free(n) - r.cpu_milli),
                 static_cast<double>(c.share_free_total(n) - r.total_gpu_milli()));
    if (r.gpu_count == 1 && !r.whole_gpus()) {
      Score best{-1e300, 0, 0};
      for (int g = 0; g < c.spec(n).gpu_count; ++g) {
        if (!c.GpuFits(n, g, r)) continue;
        if (SameAsEarlierGpu(c, n, g)) continue;
        const int32_t from = c.gpu_share_free(n)[static_cast<size_t>(g)];
        const double after = eval_->FragAfterOneGpu(n, r, from, ShareAfter(c, n, g, r));
        const double step = std::floor((before - after + stranded_gain) / kStepMilli);
        if (step > best.primary) best = {step, 0, uint32_t{1} << g};
      }
      return best;
    }
    const uint32_t gpus = BestFitGpus(c, n, r);
    const double after = eval_->FragAfter(n, r, gpus);
    return {std::floor((before - after + stranded_gain) / kStepMilli), 0, gpus};
  }

 private:
  // GPU share (milli) of a node with this much free CPU and share that its CPU cannot serve.
  double Stranded(double cpu_free, double share_free) const {
    if (cpu_per_gpu_ <= 0) return 0;
    const double cpu_needed = cpu_per_gpu_ * share_free / kMilliPerGpu;
    if (cpu_needed <= cpu_free) return 0;
    return std::min(share_free, (cpu_needed - cpu_free) / cpu_per_gpu_ * kMilliPerGpu);
  }

  const TargetWorkload* workload_;
  double cpu_per_gpu_;
  std::unique_ptr<FragEvaluator> eval_;
};

}  // namespace

std::unique_ptr<Policy> MakeTessera(const PolicyOptions& o) {
  return std::make_unique<TesseraPolicy>(o);
}

}  // namespace tessera::placement::internal
