// tessera: our own placement policy, the default. FGD's fragmentation gradient, plus the GPUs a
// placement strands for lack of CPU, plus the expected leftover of the GPU shares it leaves,
// judged in coarse steps with first-fit ties.
//
// A node's score for a request is the decrease, over the placement, of
//     F_n(M)  +  S_n  +  R_n
// where F_n(M) is FGD's expected fragmentation (frag.h), S_n the GPU share of the node that its
// remaining CPU cannot serve: with kappa the CPU the target workload asks per GPU,
//     S_n = min(free share, max(0, kappa * free share - free CPU) / kappa),
// and R_n the sum over the node's GPUs of ExpectedResidual(free share) (policy_internal.h): what
// the target workload's shapes are expected to leave unused on a GPU with that much free.
// R_n only changes for fractional shares (a whole GPU goes from fresh to full on every node), so
// it is left out of whole-GPU scores.
// The decrease is cut into steps of kStepMilli (differences smaller than a step are noise, and
// acting on them spreads requests over the cluster); the highest step wins and equal steps go to
// the first node in list order, which packs. Fractional single-GPU requests take the GPU with the
// best step on the node (lowest-numbered among equals); whole GPUs the lowest-numbered free ones.
// Why each part is there, with measurements: docs/placement.md. Reads the cluster only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "placement/policy_internal.h"

namespace tessera::placement::internal {

namespace {

constexpr double kStepMilli = 30;
// Future arrivals a GPU's free share waits for before the cluster fills (ExpectedResidual).
constexpr double kArrivalsPerGap = 100;

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
        cpu_per_gpu_(CpuPerGpu(*o.workload)),
        residual_(ExpectedResidual(*o.workload, kArrivalsPerGap)) {}
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
        const int32_t to = ShareAfter(c, n, g, r);
        const double after = eval_->FragAfterOneGpu(n, r, from, to);
        const double step =
            std::floor((before - after + stranded_gain + ResidualGain(from, to)) / kStepMilli);
        if (step > best.primary) best = {step, 0, uint32_t{1} << g};
      }
      return best;
    }
    const uint32_t gpus = BestFitGpus(c, n, r);
    const double after = eval_->FragAfter(n, r, gpus);
    double residual_gain = 0;
    if (r.gpu_count > 0 && !r.whole_gpus()) {
      for (int g = 0; g < c.spec(n).gpu_count; ++g) {
        if (((gpus >> g) & 1) == 0) continue;
        residual_gain +=
            ResidualGain(c.gpu_share_free(n)[static_cast<size_t>(g)], ShareAfter(c, n, g, r));
      }
    }
    return {std::floor((before - after + stranded_gain + residual_gain) / kStepMilli), 0, gpus};
  }

 private:
  // GPU share (milli) of a node with this much free CPU and share that its CPU cannot serve.
  double Stranded(double cpu_free, double share_free) const {
    if (cpu_per_gpu_ <= 0) return 0;
    const double cpu_needed = cpu_per_gpu_ * share_free / kMilliPerGpu;
    if (cpu_needed <= cpu_free) return 0;
    return std::min(share_free, (cpu_needed - cpu_free) / cpu_per_gpu_ * kMilliPerGpu);
  }

  // Decrease of the expected leftover when one GPU goes from `from` to `to` milli free.
  double ResidualGain(int32_t from, int32_t to) const {
    return residual_[static_cast<size_t>(std::clamp(from, 0, kMilliPerGpu))] -
           residual_[static_cast<size_t>(std::clamp(to, 0, kMilliPerGpu))];
  }

  const TargetWorkload* workload_;
  double cpu_per_gpu_;
  std::vector<double> residual_;
  std::unique_ptr<FragEvaluator> eval_;
};

}  // namespace

std::vector<double> ExpectedResidual(const TargetWorkload& w, double arrivals_per_gap) {
  // The shares a GPU can be filled with: one per GPU shape (whole GPUs as 1000), by weight.
  std::vector<std::pair<int, double>> fillers;
  for (const TargetShape& s : w.shapes()) {
    if (s.gpu_count == 0 || s.gpu_milli == 0 || s.weight <= 0) continue;
    fillers.emplace_back(std::min(s.gpu_milli, kMilliPerGpu), s.weight);
  }
  std::vector<double> residual(static_cast<size_t>(kMilliPerGpu) + 1, 0.0);
  for (int f = 1; f <= kMilliPerGpu; ++f) {
    double fitting = 0;  // weight of the shapes that fit in f
    double then = 0;     // weight x residual after each of them
    for (const auto& [share, weight] : fillers) {
      if (share > f) continue;
      fitting += weight;
      then += weight * residual[static_cast<size_t>(f - share)];
    }
    const double unfilled = std::exp(-arrivals_per_gap * fitting);
    residual[static_cast<size_t>(f)] =
        fitting > 0 ? unfilled * f + (1 - unfilled) * then / fitting : f;
  }
  return residual;
}

std::unique_ptr<Policy> MakeTessera(const PolicyOptions& o) {
  return std::make_unique<TesseraPolicy>(o);
}

}  // namespace tessera::placement::internal
