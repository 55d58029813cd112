// The policy registry and the GPU choosers the policies share. No policy rules here.
#include "placement/policy.h"

#include <algorithm>
#include <array>
#include <string>

#include "placement/policy_internal.h"

namespace tessera::placement {

namespace {

constexpr std::array<std::string_view, 9> kNames = {
    "tessera", "fgd", "bestfit", "packing", "clustering", "dotprod", "binpack", "spread", "random",
};

// Every policy as made by name, with MIG requests placed by the one MIG rule (placement/mig.h)
// and every other request passed on to the policy itself.
class MigAwarePolicy final : public Policy {
 public:
  MigAwarePolicy(std::unique_ptr<Policy> inner, const TargetWorkload* workload)
      : inner_(std::move(inner)), workload_(workload) {}
  std::string_view name() const override { return inner_->name(); }

  std::optional<Assignment> Select(const Cluster& c, const Request& r) override {
    if (!r.mig()) return inner_->Select(c, r);
    return Scan(c, r, nullptr, c.node_count(), nullptr);
  }
  std::optional<Assignment> SelectAmong(const Cluster& c, const Request& r,
                                        std::span<const int> candidates,
                                        std::vector<NodeScore>* scores) override {
    if (!r.mig()) return inner_->SelectAmong(c, r, candidates, scores);
    if (scores != nullptr) scores->clear();
    return Scan(c, r, candidates.data(), static_cast<int>(candidates.size()), scores);
  }
  uint32_t GpusOn(const Cluster& c, int node, const Request& r) override {
    if (!r.mig()) return inner_->GpusOn(c, node, r);
    auto a = MigAssignmentOn(c, node, r, Demand());
    return a ? a->gpus : 0;
  }
  bool ReservesForWaiting() const override { return inner_->ReservesForWaiting(); }
  void OnPlaced(const Cluster& c, const Request& r, const Assignment& a) override {
    if (!r.mig()) inner_->OnPlaced(c, r, a);
  }
  void OnRemoved(const Cluster& c, const Request& r, const Assignment& a) override {
    if (!r.mig()) inner_->OnRemoved(c, r, a);
  }

 private:
  const MigDemand& Demand() const {
    static const MigDemand kAnyProfile;
    return workload_ != nullptr ? workload_->mig_demand() : kAnyProfile;
  }
  // The best node's choice: better scores first, equal ones to the earliest node.
  std::optional<Assignment> Scan(const Cluster& c, const Request& r, const int* candidates,
                                 int count, std::vector<NodeScore>* scores) {
    std::optional<MigChoice> best;
    int best_node = -1;
    for (int i = 0; i < count; ++i) {
      const int n = candidates != nullptr ? candidates[i] : i;
      if (c.spec(n).mode != NodeMode::kMig) continue;
      auto choice = ChooseMigInstance(c, n, r, Demand());
      if (!choice) continue;
      if (scores != nullptr) {
        scores->push_back(
            NodeScore{n, choice->Primary(), choice->Secondary(), uint32_t{1} << choice->gpu});
      }
      if (!best || choice->BetterThan(*best)) {
        best = choice;
        best_node = n;
      }
    }
    if (!best) return std::nullopt;
    return Assignment{best_node, uint32_t{1} << best->gpu, best->start, best->layout};
  }

  std::unique_ptr<Policy> inner_;
  const TargetWorkload* workload_;
};

}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyOptions& options) {
  using namespace internal;
  if ((name == "tessera" || name == "fgd") && options.workload == nullptr) {
    return Result<std::unique_ptr<Policy>>::Error(
        "policy \"" + std::string(name) + "\": needs a target workload (PolicyOptions::workload)");
  }
  std::unique_ptr<Policy> p;
  if (name == "tessera") p = MakeTessera(options);
  if (name == "fgd") p = MakeFgd(options);
  if (name == "bestfit") p = MakeBestFit(options);
  if (name == "packing") p = MakePacking(options);
  if (name == "clustering") p = MakeClustering(options);
  if (name == "dotprod") p = MakeDotProd(options);
  if (name == "binpack") p = MakeBinpack(options);
  if (name == "spread") p = MakeSpread(options);
  if (name == "random") p = MakeRandom(options);
  if (p)
    return std::unique_ptr<Policy>(
        std::make_unique<MigAwarePolicy>(std::move(p), options.workload));
  std::string names;
  for (std::string_view n : PolicyNames()) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  return Result<std::unique_ptr<Policy>>::Error("policy \"" + std::string(name) +
                                                "\": unknown; expected one of " + names);
}

namespace internal {

double PluginScore(double x) {
  if (x <= 0) return 0;
  if (x >= 100) return 100;
  return static_cast<double>(static_cast<int64_t>(x));
}

size_t ScoredNodePolicy::ShapeHash::operator()(const ShapeKey& k) const {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (uint64_t v : {static_cast<uint64_t>(k.cpu), static_cast<uint64_t>(k.memory),
                     static_cast<uint64_t>(k.gpu_mem), static_cast<uint64_t>(k.gpu_count),
                     static_cast<uint64_t>(k.gpu_milli), k.allowed, uint64_t{k.gpu_modes}}) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}

std::vector<ScoredNodePolicy::Entry>* ScoredNodePolicy::EntriesFor(const Cluster& c,
                                                                   const Request& r) {
  if (c.id() != cluster_id_) {
    cache_.clear();
    cluster_id_ = c.id();
    Attach(c);
  }
  const ShapeKey key{r.cpu_milli, r.memory_mib,     r.gpu_mem_mib, r.gpu_count,
                     r.gpu_milli, r.allowed.bits(), r.gpu_modes};
  if (auto it = cache_.find(key); it != cache_.end()) return &it->second;
  if (cache_.size() >= kMaxCachedShapes) return nullptr;
  return &cache_.emplace(key, std::vector<Entry>(static_cast<size_t>(c.node_count())))
              .first->second;
}

void ScoredNodePolicy::Refresh(const Cluster& c, int n, const Request& r, Entry& e) {
  e.version = c.version(n);
  e.fits = c.Fits(n, r) == FitResult::kFits;
  if (e.fits) e.score = ScoreNode(c, n, r);
}

std::optional<Assignment> ScoredNodePolicy::Select(const Cluster& c, const Request& r) {
  return Scan(c, r, nullptr, c.node_count(), nullptr);
}

std::optional<Assignment> ScoredNodePolicy::SelectAmong(const Cluster& c, const Request& r,
                                                        std::span<const int> candidates,
                                                        std::vector<NodeScore>* scores) {
  if (scores != nullptr) scores->clear();
  return Scan(c, r, candidates.data(), static_cast<int>(candidates.size()), scores);
}

uint32_t ScoredNodePolicy::GpusOn(const Cluster& c, int node, const Request& r) {
  std::vector<Entry>* entries = EntriesFor(c, r);
  Entry uncached;
  Entry& e = entries != nullptr ? (*entries)[static_cast<size_t>(node)] : uncached;
  if (entries == nullptr || e.version != c.version(node)) Refresh(c, node, r, e);
  if (!e.fits) return 0;
  return FinalGpus(c, node, r, e.score.gpus);
}

std::optional<Assignment> ScoredNodePolicy::Scan(const Cluster& c, const Request& r,
                                                 const int* candidates, int count,
                                                 std::vector<NodeScore>* scores) {
  std::vector<Entry>* entries = EntriesFor(c, r);
  int best = -1;
  Score best_score;
  uint64_t ties = 0;
  Entry uncached;
  const bool adjusting = BeginScan(c, r);
  Score adjusted;
  for (int i = 0; i < count; ++i) {
    const int n = candidates != nullptr ? candidates[i] : i;
    Entry* e = entries != nullptr ? &(*entries)[static_cast<size_t>(n)] : &uncached;
    if (entries == nullptr || e->version != c.version(n)) Refresh(c, n, r, *e);
    if (!e->fits) continue;
    const Score* score = &e->score;
    if (adjusting) {
      adjusted = e->score;
      AdjustScore(c, n, r, adjusted);
      score = &adjusted;
    }
    const Score& s = *score;
    if (scores != nullptr) scores->push_back(NodeScore{n, s.primary, s.secondary, s.gpus});
    if (best < 0 || s.primary > best_score.primary ||
        (s.primary == best_score.primary && s.secondary > best_score.secondary)) {
      best = n;
      best_score = s;
      ties = 1;
    } else if (tie_ == TieRule::kRandom && s.primary == best_score.primary &&
               s.secondary == best_score.secondary) {
      ++ties;
      if (rng_.Below(ties) == 0) {
        best = n;
        best_score = s;
      }
    }
  }
  if (best < 0) return std::nullopt;
  return Assignment{best, FinalGpus(c, best, r, best_score.gpus)};
}

namespace {

// Fractional shares: the fitting GPUs ordered by free share (ascending for best fit), ties to the
// lower number; the first gpu_count of them.
uint32_t OrderedFit(const Cluster& cluster, int node, const Request& r, bool most_free) {
  const auto shares = cluster.gpu_share_free(node);
  std::array<int, kMaxGpusPerNode> fit{};
  int n = 0;
  for (int g = 0; g < cluster.spec(node).gpu_count; ++g) {
    if (cluster.GpuFits(node, g, r)) fit[static_cast<size_t>(n++)] = g;
  }
  std::stable_sort(fit.begin(), fit.begin() + n, [&](int a, int b) {
    const int32_t sa = shares[static_cast<size_t>(a)];
    const int32_t sb = shares[static_cast<size_t>(b)];
    return most_free ? sa > sb : sa < sb;
  });
  uint32_t mask = 0;
  for (int i = 0; i < std::min(n, r.gpu_count); ++i)
    mask |= uint32_t{1} << fit[static_cast<size_t>(i)];
  return mask;
}

uint32_t LowestFree(const Cluster& cluster, int node, const Request& r) {
  uint32_t mask = 0;
  int taken = 0;
  for (int g = 0; g < cluster.spec(node).gpu_count && taken < r.gpu_count; ++g) {
    if (cluster.GpuFits(node, g, r)) {
      mask |= uint32_t{1} << g;
      ++taken;
    }
  }
  return mask;
}

}  // namespace

bool SameAsEarlierGpu(const Cluster& cluster, int node, int gpu) {
  const auto milli = cluster.gpu_milli_free(node);
  const auto mem = cluster.gpu_memory_free(node);
  const auto g = static_cast<size_t>(gpu);
  const NodeSpec& s = cluster.spec(node);
  for (size_t h = 0; h < g; ++h) {
    if (milli[h] == milli[g] && mem[h] == mem[g] &&
        (!s.mixed() || s.gpu_modes[h] == s.gpu_modes[g]))
      return true;
  }
  return false;
}

uint32_t BestFitGpus(const Cluster& cluster, int node, const Request& r) {
  if (r.gpu_count == 0) return 0;
  if (r.whole_gpus()) return LowestFree(cluster, node, r);
  return OrderedFit(cluster, node, r, /*most_free=*/false);
}

uint32_t WorstFitGpus(const Cluster& cluster, int node, const Request& r) {
  if (r.gpu_count == 0) return 0;
  if (r.whole_gpus()) return LowestFree(cluster, node, r);
  return OrderedFit(cluster, node, r, /*most_free=*/true);
}

uint32_t RandomGpus(const Cluster& cluster, int node, const Request& r, Rng& rng) {
  uint32_t fitting = cluster.FittingGpus(node, r);
  uint32_t mask = 0;
  for (int i = 0; i < r.gpu_count; ++i) {
    const int n = std::popcount(fitting);
    if (n == 0) break;
    int pick = static_cast<int>(rng.Below(static_cast<uint64_t>(n)));
    uint32_t rest = fitting;
    while (pick-- > 0) rest &= rest - 1;
    const uint32_t bit = rest & (0 - rest);
    mask |= bit;
    fitting &= ~bit;
  }
  return mask;
}

}  // namespace internal
}  // namespace tessera::placement
