// tessera: our own placement policy, the default. FGD's fragmentation gradient, plus the GPUs a
// placement strands for lack of CPU, plus the expected leftover of the GPU shares it leaves, plus
// the protection of the GPU models that constrained requests need, judged in coarse steps with
// first-fit ties.
//
// A node's score for a request is the decrease, over the placement, of
//     F_n  +  S_n  +  R_n  +  P_n
// where, for a node of class k (its GPU model and mode, frag.h's NodeClass):
//   F_n is FGD's expected fragmentation over the target workload (frag.h);
//   S_n the GPU share of the node that its remaining CPU cannot serve: with kappa_k the CPU per
//       GPU that the shapes which may use class k ask for,
//       S_n = min(free share, max(0, kappa_k * free share - free CPU) / kappa_k);
//   R_n the sum over the node's GPUs of W_k(free share) (ExpectedResidual): what the shapes that
//       may use class k are expected to leave unused on a GPU with that much free;
//   P_n protects scarce models: with rho_k the part of class k's GPUs that demand which may go to
//       few classes (by its constraint, or by its size: an 8-GPU request of 120 cores fits only
//       128-core nodes) will need (ClassPressure), and r_k = rho_k x (class k's GPUs / the share
//       it has free now, at least one GPU's; a node's free share counts only as far as its free
//       CPU serves it at kappa_k per GPU), a request pays (r_k - r_min) per milli of GPU it
//       takes, r_min being the lowest among the classes it may use. A request that could go
//       elsewhere leaves scarce models to those that cannot, the more so as a class fills: a
//       small class whose own demand is small against its GPUs draws other pods while it is
//       empty, and stops drawing them before its own pods find it full (its GPUs, or the CPU
//       beside them: a class of little CPU per GPU runs out of CPU first). A request that may use
//       only one class, or classes under equal pressure, pays nothing. (The scores kept per node
//       hold rho_k; what the fill adds is added for each scan, in whole steps: BeginScan. Only
//       where the caller keeps a clock, as the age preference: without one, under the FGD
//       protocol, r_k is rho_k; docs/placement.md says why.) A request that asks no GPU pays for
//       the CPU it takes in the same way, at kCpuProtection of the rate: with sigma_k the part of
//       class k's GPUs that constrained demand alone will need (ClassConstraintPressure) and
//       sigma_min the lowest over the cluster's classes, kCpuProtection (sigma_k - sigma_min) per
//       milli of GPU its CPU would serve (its CPU over kappa_k): the constrained pods of a class
//       run out of its CPU before its GPUs.
// kappa_k and W_k weigh the shapes as class k sees them (ClassShapeWeights: a constrained shape
// counts only on the classes it may use, by its arrivals per GPU there). Without placement
// constraints every class sees the whole workload and P is 0.
// R_n only changes for fractional shares (a whole GPU goes from fresh to full on every node), so
// it is left out of whole-GPU scores.
// A request that takes every GPU of a node is judged without F_n (it leaves no fragment on any
// node it may take whole). Two charges keep whole nodes for the multi-GPU requests that need them:
//   opening: a request that takes part of an empty node of class k pays (w_k - w_min) times the
//       node's GPUs, w_k being the part of class k's GPUs that multi-GPU requests only the larger
//       nodes fit will need (ClassWholeNodePressure; 120-core 8-GPU requests fit only 128-core
//       nodes) and w_min the lowest among the classes the request may use. Such requests need
//       nodes whole, so opening one spoils all of it for them, however small the request.
//   scarce empty nodes: with D the multi-GPU requests of a node kind's size that run at once when
//       the arrived workload equals the cluster (AttachWholeNodeDemand), a request that takes
//       part of an empty node of that kind while at most kKeptEmptyPart x D of them are empty,
//       counted over the whole cluster, pays kScarceEmptyNodeCharge. A cluster filling from empty
//       places as before until its last empty nodes; with departures, CPU-heavy single GPUs no
//       longer open the last whole nodes that 8-GPU requests wait for.
// The decrease is cut into steps of kStepMilli (differences smaller than a step are noise, and
// acting on them spreads requests over the cluster); the highest step wins. Equal steps go to the
// highest of
//     kAgeWeight x ln(1 + a / kAgeScaleS)  -  (share left + CPU left)
// (then the first node in list order): a the time the node's longest-running GPU pod has run on
// the cluster's clock (Cluster::now, oldest_gpu_start; 0 without GPU pods, and for a caller that
// keeps no time), the lefts what the node keeps free after the placement, each as a part of the
// largest node's. A pod that has run long is likely to run long yet (on openb the median time
// still to run of a pod that has run t seconds is about t), so new pods join the nodes that will
// not empty soon, and nodes of young pods and nearly empty nodes are left to empty: whole nodes
// form for multi-GPU pods without holding any. Fractional single-GPU requests take the GPU with
// the best step on the node (lowest-numbered among equals); whole GPUs the lowest-numbered free
// ones. Why each part is there, with measurements: docs/placement.md. Reads the cluster only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "placement/policy_internal.h"

namespace tessera::placement::internal {

namespace {

constexpr double kStepMilli = 30;
// Future arrivals a GPU's free share waits for before the cluster fills (ExpectedResidual).
constexpr double kArrivalsPerGap = 100;
// The part of a node kind's whole-node demand kept as empty nodes, and what taking part of one
// of the last of them costs (milli, as the score's other terms).
constexpr double kKeptEmptyPart = 0.5;
constexpr double kScarceEmptyNodeCharge = 3000;
// What a request that asks no GPU pays for a constrained class's CPU, as a part of what the GPUs
// its CPU would serve cost a GPU request (the file's comment).
constexpr double kCpuProtection = 0.3;
// The age preference among equal steps (the file's comment).
constexpr double kAgeWeight = 2;
constexpr double kAgeScaleS = 600;

// CPU milli that shapes ask per whole GPU, with these weights (0 when none asks for a GPU).
double CpuPerGpu(const TargetWorkload& w, const std::vector<double>& weights) {
  double cpu = 0;
  double gpus = 0;
  for (size_t j = 0; j < w.shapes().size(); ++j) {
    const TargetShape& s = w.shapes()[j];
    if (s.gpu_count == 0 || s.gpu_milli == 0) continue;
    cpu += weights[j] * static_cast<double>(s.cpu_milli);
    gpus += weights[j] * s.gpu_count * std::min(s.gpu_milli, kMilliPerGpu) / 1000.0;
  }
  return gpus > 0 ? cpu / gpus : 0;
}

// The shares a GPU can be filled with, with these weights: one per GPU shape (whole GPUs as
// 1000); CPU-only and memory-only shapes are not fillers.
std::vector<std::pair<int, double>> Fillers(const TargetWorkload& w,
                                            const std::vector<double>& weights) {
  std::vector<std::pair<int, double>> fillers;
  for (size_t j = 0; j < w.shapes().size(); ++j) {
    const TargetShape& s = w.shapes()[j];
    if (s.gpu_count == 0 || s.gpu_milli == 0 || weights[j] <= 0) continue;
    fillers.emplace_back(std::min(s.gpu_milli, kMilliPerGpu), weights[j]);
  }
  return fillers;
}

// Whether a request may use the GPUs of nodes like `spec` (model and mode, as Cluster::Fits; not
// counting GPUs): whole GPUs any mode but MIG, a compute share memory+compute, a memory share
// memory-only.
bool MayUse(const Request& r, const NodeSpec& spec) {
  if (spec.gpu_count == 0 || !r.allowed.Contains(spec.model) || spec.mode == NodeMode::kMig) {
    return false;
  }
  if (r.whole_gpus()) return true;
  return spec.mode == (r.memory_only() ? NodeMode::kMemoryOnly : NodeMode::kMemoryAndCompute);
}

class TesseraPolicy final : public ScoredNodePolicy {
 public:
  TesseraPolicy(const PolicyOptions& o, bool memo)
      : ScoredNodePolicy(o, TieRule::kFirstNode), workload_(o.workload), memo_on_(memo) {}
  std::string_view name() const override { return "tessera"; }
  bool ReservesForWaiting() const override { return true; }

 protected:
  void Attach(const Cluster& c) override {
    memo_.Clear();
    largest_gpu_milli_ = 1;
    largest_cpu_milli_ = 1;
    for (int n = 0; n < c.node_count(); ++n) {
      largest_gpu_milli_ =
          std::max<int64_t>(largest_gpu_milli_, int64_t{c.spec(n).gpu_count} * kMilliPerGpu);
      largest_cpu_milli_ = std::max(largest_cpu_milli_, c.spec(n).cpu_milli);
    }
    eval_ = std::make_unique<FragEvaluator>(c, *workload_);
    const std::vector<ClassInfo> classes = ClusterClasses(c);
    const std::vector<double> pressure = ClassPressure(c, classes, *workload_);
    const std::vector<double> whole_pressure = ClassWholeNodePressure(c, classes, *workload_);
    const std::vector<double> constraint_pressure = ClassConstraintPressure(c, classes, *workload_);
    class_of_.assign(kNodeClasses, -1);
    tables_.clear();
    fillers_.clear();
    for (size_t i = 0; i < classes.size(); ++i) {
      class_of_[static_cast<size_t>(classes[i].node_class)] = static_cast<int>(i);
      const std::vector<double> weights =
          ClassShapeWeights(c, classes, classes[i].node_class, *workload_);
      ClassTable t;
      t.first_node = classes[i].first_node;
      t.cpu_per_gpu = CpuPerGpu(*workload_, weights);
      // Classes that see the same fillers (all of them, without constraints) share one table.
      std::vector<std::pair<int, double>> fillers = Fillers(*workload_, weights);
      for (size_t j = 0; j < i && t.residual.empty(); ++j) {
        if (fillers_[j] == fillers) t.residual = tables_[j].residual;
      }
      if (t.residual.empty()) t.residual = ExpectedResidual(fillers, kArrivalsPerGap);
      fillers_.push_back(std::move(fillers));
      t.pressure = pressure[i];
      t.whole_pressure = whole_pressure[i];
      t.constraint_pressure = constraint_pressure[i];
      tables_.push_back(std::move(t));
    }
    lowest_constraint_pressure_ = 1;
    for (const ClassTable& t : tables_) {
      lowest_constraint_pressure_ = std::min(lowest_constraint_pressure_, t.constraint_pressure);
    }
    AttachWholeNodeDemand(c, classes);
    std::vector<int> table_of(static_cast<size_t>(c.node_count()), -1);
    for (int n = 0; n < c.node_count(); ++n) {
      const int k = NodeClass(c.spec(n));
      if (k >= 0) table_of[static_cast<size_t>(n)] = class_of_[static_cast<size_t>(k)];
    }
    std::vector<double> cpu_per_gpu;
    for (const ClassTable& t : tables_) cpu_per_gpu.push_back(t.cpu_per_gpu);
    class_free_.Reset(c, std::move(table_of), std::move(cpu_per_gpu));
  }

  // Two parts of a score are added to the cached scores for each scan. The age preference (the
  // file's comment) depends on the clock, which moves without the node changing. The
  // scarce-empty-node charge depends on how many nodes of a kind are empty in the whole cluster:
  // counted over every node (kept up to date from the nodes changed since the last scan), also
  // when the extender asks among kube-scheduler's candidates only.
  bool BeginScan(const Cluster& c, const Request& r) override {
    aging_ = c.now() > 0;
    if (aging_ && (age_.size() != static_cast<size_t>(c.node_count()) || age_cluster_ != c.id())) {
      age_.assign(static_cast<size_t>(c.node_count()), AgeEntry{});
      age_cluster_ = c.id();
    }
    charging_ = false;
    if (!kind_keep_.empty() && !r.mig()) {
      empty_.Update(c);
      // Only a kind at or below what is kept, which the request would take part of, is charged.
      for (size_t k = 0; k < kind_keep_.size() && !charging_; ++k) {
        charging_ = empty_.empty(static_cast<int>(k)) <= kind_keep_[k] &&
                    r.gpu_count < kind_size_[k].gpu_count;
      }
    }
    // A GPU request pays for its class by the constrained demand over what the class has free,
    // where a clock is kept (pods come and go; the file's comment).
    filling_ = aging_ && r.gpu_count > 0 && !r.mig() && !tables_.empty();
    if (filling_) {
      class_free_.Update(c);
      lowest_static_ = LowestPressure(c, r);
      lowest_filled_ = 1e300;
      filled_.resize(tables_.size());
      for (size_t i = 0; i < tables_.size(); ++i) {
        filled_[i] = FilledPressure(i);
        if (MayUse(r, c.spec(tables_[i].first_node))) {
          lowest_filled_ = std::min(lowest_filled_, filled_[i]);
        }
      }
      // No class it may use as a whole (nodes whose GPUs have modes of their own): P_n as cached.
      if (lowest_filled_ == 1e300) filling_ = false;
    }
    return aging_ || charging_ || filling_;
  }

  void AdjustScore(const Cluster& c, int n, const Request& r, Score& s) override {
    if (aging_) s.secondary += AgeTerm(c, n);
    if (filling_) {
      // The cached score holds P_n at the class's whole capacity; what its fill adds since, in
      // whole steps.
      const int i = class_free_.class_of(n);
      if (i >= 0) {
        const auto k = static_cast<size_t>(i);
        const double extra = (filled_[k] - lowest_filled_) - (tables_[k].pressure - lowest_static_);
        s.primary -= std::round(extra * static_cast<double>(r.total_gpu_milli()) / kStepMilli);
      }
    }
    if (!charging_) return;
    const int k = kind_of_[static_cast<size_t>(n)];
    if (k < 0 || empty_.empty(k) > kind_keep_[static_cast<size_t>(k)]) return;
    const KindSize& size = kind_size_[static_cast<size_t>(k)];
    if (r.gpu_count >= size.gpu_count || c.cpu_free(n) != size.cpu_milli ||
        c.share_free_total(n) != size.share_milli) {
      return;
    }
    s.primary -= kScarceEmptyNodeCharge / kStepMilli;
  }

  Score ScoreNode(const Cluster& c, int n, const Request& r) override {
    Score s;
    if (!memo_on_) {
      s = Compute(c, n, r);
    } else if (const Score* known = memo_.Find(c, n, r)) {
      // A node's score depends only on its class, free CPU and GPUs and the request: nodes in
      // the same state (idle nodes of one kind, above all) are scored once.
      s = *known;
    } else {
      s = Compute(c, n, r);
      memo_.Store(s);
    }
    // Whether the node is empty also depends on its capacity, which the memo's state of a used
    // node leaves out: the opening charge is added here, in whole steps.
    s.primary -= std::ceil(OpeningCharge(c, n, r) / kStepMilli);
    return s;
  }

 private:
  // The score itself (the file's comment).
  Score Compute(const Cluster& c, int n, const Request& r) {
    const ClassTable* t = TableOf(c, n);
    const double before = eval_->Frag(n);
    const double cpu_per_gpu = t != nullptr ? t->cpu_per_gpu : 0;  // no GPUs: none stranded
    const double stranded_gain =
        Stranded(cpu_per_gpu, static_cast<double>(c.cpu_free(n)),
                 static_cast<double>(c.share_free_total(n))) -
        Stranded(cpu_per_gpu, static_cast<double>(c.cpu_free(n) - r.cpu_milli),
                 static_cast<double>(c.share_free_total(n) - r.total_gpu_milli()));
    // P_n's decrease: minus what the request pays for taking a scarcer class than it needs.
    double protection = 0;
    if (t != nullptr && r.gpu_count > 0) {
      protection = -(t->pressure - LowestPressure(c, r)) * static_cast<double>(r.total_gpu_milli());
    } else if (t != nullptr && t->cpu_per_gpu > 0) {
      protection = -kCpuProtection * (t->constraint_pressure - lowest_constraint_pressure_) *
                   static_cast<double>(r.cpu_milli) / t->cpu_per_gpu * kMilliPerGpu;
    }
    const double gain = stranded_gain + protection;
    if (r.gpu_count == 1 && !r.whole_gpus()) {
      Score best{-1e300, 0, 0};
      for (int g = 0; g < c.spec(n).gpu_count; ++g) {
        if (!c.GpuFits(n, g, r)) continue;
        if (SameAsEarlierGpu(c, n, g)) continue;
        const int32_t from = c.gpu_share_free(n)[static_cast<size_t>(g)];
        const int32_t to = ShareAfter(c, n, g, r);
        const double after = eval_->FragAfterOneGpu(n, r, from, to);
        const double step =
            std::floor((before - after + gain + ResidualGain(*t, from, to)) / kStepMilli);
        if (step > best.primary) best = {step, 0, uint32_t{1} << g};
      }
      best.secondary = Drain(c, n, r);
      return best;
    }
    const uint32_t gpus = BestFitGpus(c, n, r);
    // A request that takes every GPU of a node leaves no fragment there, wherever it goes: F_n's
    // decrease would only be F_n of the node before, which is high on nodes that many typical
    // shapes may not use (a model few constraints allow), and would draw whole-node requests to
    // the nodes that only the largest requests fit. Such placements are judged without it.
    const double after = r.gpu_count == c.spec(n).gpu_count ? before : eval_->FragAfter(n, r, gpus);
    double residual_gain = 0;
    if (r.gpu_count > 0 && !r.whole_gpus()) {
      for (int g = 0; g < c.spec(n).gpu_count; ++g) {
        if (((gpus >> g) & 1) == 0) continue;
        residual_gain +=
            ResidualGain(*t, c.gpu_share_free(n)[static_cast<size_t>(g)], ShareAfter(c, n, g, r));
      }
    }
    return {std::floor((before - after + gain + residual_gain) / kStepMilli), Drain(c, n, r), gpus};
  }

  // The age preference: kAgeWeight x ln(1 + a / kAgeScaleS), a the time the node's longest-running
  // GPU pod has run. Worked out once per node and instant (many decisions share an instant).
  double AgeTerm(const Cluster& c, int n) {
    AgeEntry& e = age_[static_cast<size_t>(n)];
    if (e.now != c.now() || e.version != c.version(n)) {
      const double oldest = c.oldest_gpu_start(n);
      e.now = c.now();
      e.version = c.version(n);
      e.term = oldest < c.now() ? kAgeWeight * std::log1p((c.now() - oldest) / kAgeScaleS) : 0;
    }
    return e.term;
  }

  // The drain preference, which decides equal steps with the age preference (AgeTerm): the node
  // left with the least free after the placement (GPU share and CPU, each as a part of the largest
  // node's), so that free capacity gathers on the nodes that are emptying and whole nodes form for
  // multi-GPU pods. Higher is better.
  double Drain(const Cluster& c, int n, const Request& r) const {
    const double gpu_left = static_cast<double>(c.share_free_total(n) - r.total_gpu_milli()) /
                            static_cast<double>(largest_gpu_milli_);
    const double cpu_left =
        static_cast<double>(c.cpu_free(n) - r.cpu_milli) / static_cast<double>(largest_cpu_milli_);
    return -(gpu_left + cpu_left);
  }

  // The whole-node demand per node kind (class, CPU, memory, GPU count; nodes of 2 GPUs or more):
  // each multi-GPU request size of the workload (TargetWorkload::sized_demands) spread over the
  // kinds it fits when empty, in proportion to their GPUs, as the requests of it running at once
  // when the arrived workload equals the cluster. kind_keep_ is kKeptEmptyPart of it, rounded up:
  // the empty nodes below which taking part of one costs kScarceEmptyNodeCharge.
  void AttachWholeNodeDemand(const Cluster& c, std::span<const ClassInfo> classes) {
    kind_of_.assign(static_cast<size_t>(c.node_count()), -1);
    kind_size_.clear();
    std::vector<int> first;  // per kind: its first node
    std::vector<int64_t> gpus;
    for (int n = 0; n < c.node_count(); ++n) {
      const NodeSpec& spec = c.spec(n);
      if (NodeClass(spec) < 0 || spec.gpu_count < 2) continue;
      size_t k = 0;
      while (k < first.size() && !SameKind(c.spec(first[k]), spec)) ++k;
      if (k == first.size()) {
        first.push_back(n);
        gpus.push_back(0);
        kind_size_.push_back(
            {spec.cpu_milli, int64_t{spec.gpu_count} * kMilliPerGpu, spec.gpu_count});
      }
      gpus[k] += spec.gpu_count;
      kind_of_[static_cast<size_t>(n)] = static_cast<int>(k);
    }
    int64_t all_gpus = 0;
    for (const ClassInfo& k : classes) all_gpus += k.gpus;
    std::vector<double> demand(first.size(), 0.0);
    std::vector<uint8_t> fits(first.size());
    for (const TargetShape& d : workload_->sized_demands()) {
      if (d.gpu_count < 2) continue;
      int64_t reach = 0;
      for (size_t k = 0; k < first.size(); ++k) {
        const NodeSpec& spec = c.spec(first[k]);
        fits[k] = spec.cpu_milli >= d.cpu_milli && spec.memory_mib >= d.memory_mib &&
                  spec.gpu_count >= d.gpu_count && ShapeNeed(c, first[k], d) >= 0;
        if (fits[k] != 0) reach += gpus[k];
      }
      if (reach == 0) continue;
      const double per_request = static_cast<double>(d.gpu_count) *
                                 std::clamp(d.gpu_milli, 1, kMilliPerGpu) / kMilliPerGpu;
      const double requests = d.weight * static_cast<double>(all_gpus) / per_request;
      for (size_t k = 0; k < first.size(); ++k) {
        if (fits[k] != 0) {
          demand[k] += requests * static_cast<double>(gpus[k]) / static_cast<double>(reach);
        }
      }
    }
    kind_keep_.assign(first.size(), 0);
    empty_.Reset(kind_of_, static_cast<int>(first.size()));
    bool any = false;
    for (size_t k = 0; k < first.size(); ++k) {
      kind_keep_[k] = static_cast<int>(std::ceil(kKeptEmptyPart * demand[k]));
      any = any || kind_keep_[k] > 0;
    }
    if (!any) kind_keep_.clear();
  }

  static bool SameKind(const NodeSpec& a, const NodeSpec& b) {
    return NodeClass(a) == NodeClass(b) && a.cpu_milli == b.cpu_milli &&
           a.memory_mib == b.memory_mib && a.gpu_count == b.gpu_count;
  }

  // What tessera knows of one node class of the attached cluster.
  struct ClassTable {
    int first_node = -1;             // stands for the class's model and mode
    double cpu_per_gpu = 0;          // kappa_k
    std::vector<double> residual;    // W_k, indexed by free share 0..1000
    double pressure = 0;             // rho_k
    double whole_pressure = 0;       // the part of class k's GPUs needed as whole nodes
    double constraint_pressure = 0;  // sigma_k
  };

  const ClassTable* TableOf(const Cluster& c, int n) const {
    const int k = NodeClass(c.spec(n));
    return k < 0 ? nullptr : &tables_[static_cast<size_t>(class_of_[static_cast<size_t>(k)])];
  }

  // GPU share (milli) of a node with this much free CPU and share that its CPU cannot serve.
  static double Stranded(double cpu_per_gpu, double cpu_free, double share_free) {
    if (cpu_per_gpu <= 0) return 0;
    const double cpu_needed = cpu_per_gpu * share_free / kMilliPerGpu;
    if (cpu_needed <= cpu_free) return 0;
    return std::min(share_free, (cpu_needed - cpu_free) / cpu_per_gpu * kMilliPerGpu);
  }

  // Decrease of the expected leftover when one GPU goes from `from` to `to` milli free.
  static double ResidualGain(const ClassTable& t, int32_t from, int32_t to) {
    return t.residual[static_cast<size_t>(std::clamp(from, 0, kMilliPerGpu))] -
           t.residual[static_cast<size_t>(std::clamp(to, 0, kMilliPerGpu))];
  }

  // The opening charge (the file's comment), in milli: what `r` pays for taking part of empty
  // node `n`.
  double OpeningCharge(const Cluster& c, int n, const Request& r) const {
    const ClassTable* t = TableOf(c, n);
    if (t == nullptr || t->whole_pressure <= 0 || r.gpu_count >= c.spec(n).gpu_count ||
        !EmptyNodeCount::Empty(c, n)) {
      return 0;
    }
    return (t->whole_pressure - LowestWholePressure(c, r)) *
           static_cast<double>(c.spec(n).gpu_count) * kMilliPerGpu;
  }

  // The lowest whole-node pressure among the classes `r` may use; 0 for a request asking no GPU.
  double LowestWholePressure(const Cluster& c, const Request& r) const {
    if (r.gpu_count == 0) return 0;
    double lowest = 1;
    for (const ClassTable& t : tables_) {
      if (MayUse(r, c.spec(t.first_node))) lowest = std::min(lowest, t.whole_pressure);
    }
    return lowest;
  }

  // Class i's pressure against what it has free now: rho_i x its GPUs / its free share that its
  // nodes' free CPU serves (ClassFree; at least one GPU's worth). rho_i when the class is empty;
  // it grows as the class fills.
  double FilledPressure(size_t i) const {
    const int64_t capacity = class_free_.capacity(static_cast<int>(i));
    const int64_t free = std::max<int64_t>(class_free_.free(static_cast<int>(i)), kMilliPerGpu);
    return tables_[i].pressure * static_cast<double>(capacity) / static_cast<double>(free);
  }

  // The lowest pressure among the classes `r` may use.
  double LowestPressure(const Cluster& c, const Request& r) const {
    double lowest = 1;
    for (const ClassTable& t : tables_) {
      if (MayUse(r, c.spec(t.first_node))) lowest = std::min(lowest, t.pressure);
    }
    return lowest;
  }

  const TargetWorkload* workload_;
  const bool memo_on_;
  NodeStateMemo<Score> memo_;
  std::unique_ptr<FragEvaluator> eval_;
  std::vector<int> class_of_;      // NodeClass -> index into tables_
  int64_t largest_gpu_milli_ = 1;  // the largest node's GPU share and CPU, in milli
  int64_t largest_cpu_milli_ = 1;
  std::vector<ClassTable> tables_;
  double lowest_constraint_pressure_ = 1;                     // sigma_min
  std::vector<std::vector<std::pair<int, double>>> fillers_;  // per class, W_k's fillers
  std::vector<int> kind_of_;    // per node: its kind, -1 for nodes of fewer than 2 GPUs
  std::vector<int> kind_keep_;  // per kind: empty nodes kept for whole-node demand
  EmptyNodeCount empty_;        // per kind: empty nodes, brought up to date by BeginScan
  struct KindSize {
    int64_t cpu_milli = 0;
    int64_t share_milli = 0;  // all its GPUs' share
    int gpu_count = 0;
  };
  std::vector<KindSize> kind_size_;  // per kind
  bool charging_ = false;            // this scan adds the scarce-empty-node charge
  bool aging_ = false;               // this scan adds the age preference (a clock is kept)
  struct AgeEntry {
    double now = -1;
    uint64_t version = ~uint64_t{0};
    double term = 0;
  };
  std::vector<AgeEntry> age_;   // per node: AgeTerm at an instant and node version
  uint64_t age_cluster_ = 0;    // the Cluster age_ is of
  ClassFree class_free_;        // per class: GPU share free as served, up to date by BeginScan
  bool filling_ = false;        // this scan adds what the classes' fill adds to P_n
  std::vector<double> filled_;  // per class: FilledPressure this scan
  double lowest_filled_ = 0;    // among the classes the request may use (r_min)
  double lowest_static_ = 0;    // the same of rho (rho_min)
};

}  // namespace

void EmptyNodeCount::Reset(std::vector<int> kind_of, int kinds) {
  kind_of_ = std::move(kind_of);
  empty_.assign(kind_of_.size(), 0);
  count_.assign(static_cast<size_t>(kinds), 0);
  cluster_id_ = 0;
  changes_ = 0;
}

void EmptyNodeCount::Set(const Cluster& c, int n) {
  const int k = kind_of_[static_cast<size_t>(n)];
  if (k < 0) return;
  const uint8_t now = Empty(c, n) ? 1 : 0;
  uint8_t& was = empty_[static_cast<size_t>(n)];
  count_[static_cast<size_t>(k)] += now - was;
  was = now;
}

// Brings per-node values summed per group up to date with `c`: `set(node)` for each node changed
// since `changes` while the cluster's change log still holds them, else `clear()` and every node.
namespace {
template <typename SetNode, typename Clear>
void CatchUp(const Cluster& c, uint64_t& cluster_id, uint64_t& changes, SetNode set, Clear clear) {
  if (c.id() == cluster_id && c.changes() - changes <= Cluster::kChangeLog) {
    for (uint64_t change = changes + 1; change <= c.changes(); ++change) {
      set(c.changed_node(change));
    }
  } else {
    clear();
    for (int n = 0; n < c.node_count(); ++n) set(n);
    cluster_id = c.id();
  }
  changes = c.changes();
}
}  // namespace

void EmptyNodeCount::Update(const Cluster& c) {
  CatchUp(
      c, cluster_id_, changes_, [&](int n) { Set(c, n); },
      [&] {
        std::fill(empty_.begin(), empty_.end(), 0);
        std::fill(count_.begin(), count_.end(), 0);
      });
}

void ClassFree::Reset(const Cluster& c, std::vector<int> class_of,
                      std::vector<double> cpu_per_gpu) {
  class_of_ = std::move(class_of);
  cpu_per_gpu_ = std::move(cpu_per_gpu);
  seen_.assign(class_of_.size(), 0);
  free_.assign(cpu_per_gpu_.size(), 0);
  capacity_.assign(cpu_per_gpu_.size(), 0);
  for (int n = 0; n < c.node_count() && static_cast<size_t>(n) < class_of_.size(); ++n) {
    const int k = class_of_[static_cast<size_t>(n)];
    if (k >= 0) capacity_[static_cast<size_t>(k)] += int64_t{c.spec(n).gpu_count} * kMilliPerGpu;
  }
  cluster_id_ = 0;
  changes_ = 0;
}

void ClassFree::Set(const Cluster& c, int node) {
  if (node < 0 || static_cast<size_t>(node) >= class_of_.size()) return;
  const int k = class_of_[static_cast<size_t>(node)];
  if (k < 0) return;
  int64_t served = c.share_free_total(node);
  const double cpu_per_gpu = cpu_per_gpu_[static_cast<size_t>(k)];
  if (cpu_per_gpu > 0) {
    served = std::min(served, static_cast<int64_t>(static_cast<double>(c.cpu_free(node)) *
                                                   kMilliPerGpu / cpu_per_gpu));
  }
  int64_t& seen = seen_[static_cast<size_t>(node)];
  free_[static_cast<size_t>(k)] += served - seen;
  seen = served;
}

void ClassFree::Update(const Cluster& c) {
  CatchUp(
      c, cluster_id_, changes_, [&](int n) { Set(c, n); },
      [&] {
        std::fill(seen_.begin(), seen_.end(), 0);
        std::fill(free_.begin(), free_.end(), 0);
      });
}

std::vector<ClassInfo> ClusterClasses(const Cluster& cluster) {
  std::vector<ClassInfo> classes;
  std::vector<int> index(kNodeClasses, -1);
  for (int n = 0; n < cluster.node_count(); ++n) {
    const int k = NodeClass(cluster.spec(n));
    if (k < 0) continue;
    int& i = index[static_cast<size_t>(k)];
    if (i < 0) {
      i = static_cast<int>(classes.size());
      classes.push_back(ClassInfo{k, n, 0});
    }
    classes[static_cast<size_t>(i)].gpus += cluster.spec(n).gpu_count;
  }
  return classes;
}

namespace {

// GPUs of the classes that `shape` may use.
int64_t Reach(const Cluster& cluster, std::span<const ClassInfo> classes, const TargetShape& s) {
  int64_t reach = 0;
  for (const ClassInfo& k : classes) {
    if (ShapeNeed(cluster, k.first_node, s) >= 0) reach += k.gpus;
  }
  return reach;
}

int64_t AllGpus(std::span<const ClassInfo> classes) {
  int64_t gpus = 0;
  for (const ClassInfo& k : classes) gpus += k.gpus;
  return gpus;
}

// One spec of node (class, CPU, memory, GPUs) and how many GPUs the cluster's nodes of it hold.
struct NodeKind {
  int node = -1;   // its first node
  size_t cls = 0;  // index into the classes
  int64_t gpus = 0;
};

std::vector<NodeKind> NodeKinds(const Cluster& cluster, std::span<const ClassInfo> classes) {
  std::vector<NodeKind> kinds;
  for (int n = 0; n < cluster.node_count(); ++n) {
    const NodeSpec& spec = cluster.spec(n);
    const int k = NodeClass(spec);
    if (k < 0) continue;
    auto same = [&](const NodeKind& kind) {
      const NodeSpec& o = cluster.spec(kind.node);
      return NodeClass(o) == k && o.cpu_milli == spec.cpu_milli &&
             o.memory_mib == spec.memory_mib && o.gpu_count == spec.gpu_count;
    };
    auto it = std::find_if(kinds.begin(), kinds.end(), same);
    if (it == kinds.end()) {
      size_t cls = 0;
      while (cls < classes.size() && classes[cls].node_class != k) ++cls;
      kinds.push_back(NodeKind{n, cls, 0});
      it = kinds.end() - 1;
    }
    it->gpus += spec.gpu_count;
  }
  return kinds;
}

// Adds to `load` (GPUs per class) the demand that no placement constraint limits but that only
// the larger nodes can take, for lack of CPU, memory or GPUs on the others: each such request
// size (TargetWorkload::sized_demands) that fits the nodes of at most half the cluster's GPUs is
// spread over those nodes, in proportion to their GPUs. A size that most nodes fit is left out:
// spread over nearly every class it would load them all alike and make the few small nodes look
// free, drawing requests to them that constraints need there. Constrained demand is left out
// too: ClassPressure counts it by its constraint.
void AddSizedLoad(const Cluster& cluster, std::span<const ClassInfo> classes,
                  const TargetWorkload& w, std::vector<double>& load, int min_gpu_count = 1) {
  const int64_t all_gpus = AllGpus(classes);
  const std::vector<NodeKind> kinds = NodeKinds(cluster, classes);
  std::vector<int64_t> reach_of(classes.size());
  for (const TargetShape& d : w.sized_demands()) {
    if (d.gpu_count < min_gpu_count) continue;
    if (Reach(cluster, classes, d) < all_gpus) continue;
    std::fill(reach_of.begin(), reach_of.end(), 0);
    int64_t reach = 0;
    for (const NodeKind& kind : kinds) {
      const NodeSpec& spec = cluster.spec(kind.node);
      if (kind.cls >= classes.size() || spec.cpu_milli < d.cpu_milli ||
          spec.memory_mib < d.memory_mib || spec.gpu_count < d.gpu_count ||
          ShapeNeed(cluster, kind.node, d) < 0) {
        continue;
      }
      reach_of[kind.cls] += kind.gpus;
      reach += kind.gpus;
    }
    if (reach == 0 || 2 * reach > all_gpus) continue;
    const double demand = d.weight * static_cast<double>(all_gpus);
    for (size_t i = 0; i < classes.size(); ++i) {
      load[i] += demand * static_cast<double>(reach_of[i]) / static_cast<double>(reach);
    }
  }
}

}  // namespace

std::vector<double> ClassShapeWeights(const Cluster& cluster, std::span<const ClassInfo> classes,
                                      int node_class, const TargetWorkload& workload) {
  const auto& shapes = workload.shapes();
  std::vector<double> weights(shapes.size(), 0.0);
  int representative = -1;
  for (const ClassInfo& k : classes) {
    if (k.node_class == node_class) representative = k.first_node;
  }
  const double all_gpus = static_cast<double>(AllGpus(classes));
  double total = 0;
  for (size_t j = 0; j < shapes.size(); ++j) {
    const TargetShape& m = shapes[j];
    if (m.gpu_count == 0) {
      weights[j] = m.weight;
    } else if (representative >= 0 && ShapeNeed(cluster, representative, m) >= 0) {
      weights[j] = m.weight * all_gpus / static_cast<double>(Reach(cluster, classes, m));
    }
    total += weights[j];
  }
  if (total > 0) {
    for (double& w : weights) w /= total;
  }
  return weights;
}

namespace {

// Per class: the GPUs that the demand which may use only some classes by its constraint will need,
// each demand spread over the classes it may use in proportion to their GPUs.
std::vector<double> ConstrainedLoad(const Cluster& cluster, std::span<const ClassInfo> classes,
                                    const TargetWorkload& w) {
  const int64_t all_gpus = AllGpus(classes);
  std::vector<double> load(classes.size(), 0.0);  // GPUs
  for (const TargetShape& d : w.demands()) {
    const int64_t reach = Reach(cluster, classes, d);
    if (reach == 0 || reach >= all_gpus) continue;  // may go nowhere, or anywhere
    const double demand = d.weight * static_cast<double>(all_gpus);
    for (size_t i = 0; i < classes.size(); ++i) {
      if (ShapeNeed(cluster, classes[i].first_node, d) < 0) continue;
      load[i] += demand * static_cast<double>(classes[i].gpus) / static_cast<double>(reach);
    }
  }
  return load;
}

std::vector<double> PressureOf(std::span<const ClassInfo> classes, std::span<const double> load) {
  std::vector<double> pressure(classes.size(), 0.0);
  for (size_t i = 0; i < classes.size(); ++i) {
    pressure[i] = std::min(1.0, load[i] / static_cast<double>(classes[i].gpus));
  }
  return pressure;
}

}  // namespace

std::vector<double> ClassPressure(const Cluster& cluster, std::span<const ClassInfo> classes,
                                  const TargetWorkload& w) {
  std::vector<double> load = ConstrainedLoad(cluster, classes, w);
  AddSizedLoad(cluster, classes, w, load);
  return PressureOf(classes, load);
}

std::vector<double> ClassConstraintPressure(const Cluster& cluster,
                                            std::span<const ClassInfo> classes,
                                            const TargetWorkload& w) {
  return PressureOf(classes, ConstrainedLoad(cluster, classes, w));
}

std::vector<double> ClassWholeNodePressure(const Cluster& cluster,
                                           std::span<const ClassInfo> classes,
                                           const TargetWorkload& w) {
  std::vector<double> load(classes.size(), 0.0);  // GPUs
  AddSizedLoad(cluster, classes, w, load, /*min_gpu_count=*/2);
  std::vector<double> pressure(classes.size(), 0.0);
  for (size_t i = 0; i < classes.size(); ++i) {
    pressure[i] = std::min(1.0, load[i] / static_cast<double>(classes[i].gpus));
  }
  return pressure;
}

std::vector<double> ExpectedResidual(std::span<const std::pair<int, double>> fillers,
                                     double arrivals_per_gap) {
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

std::vector<double> ExpectedResidual(const TargetWorkload& w, double arrivals_per_gap) {
  std::vector<double> weights;
  for (const TargetShape& s : w.shapes()) weights.push_back(s.weight);
  return ExpectedResidual(Fillers(w, weights), arrivals_per_gap);
}

std::unique_ptr<Policy> MakeTessera(const PolicyOptions& o) {
  return std::make_unique<TesseraPolicy>(o, /*memo=*/true);
}

std::unique_ptr<Policy> MakeTesseraUnmemoised(const PolicyOptions& o) {
  return std::make_unique<TesseraPolicy>(o, /*memo=*/false);
}

}  // namespace tessera::placement::internal
