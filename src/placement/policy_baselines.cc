// The baseline policies FGD was compared against (random, bestfit, packing, clustering, dotprod)
// and HAMi-style binpack and spread. Each rule is reimplemented from its published description
// (docs/placement.md); none keeps state beyond its generator and, for clustering, the shapes
// placed per node. Reads the cluster only.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "placement/policy_internal.h"

namespace tessera::placement::internal {

namespace {

double GpuCapacity(const Cluster& c, int node) {
  return static_cast<double>(c.spec(node).gpu_count) * kMilliPerGpu;
}

// GPU share used on the node, as a fraction, after `r` would be placed there.
double GpuUsedAfter(const Cluster& c, int node, const Request& r) {
  const double cap = GpuCapacity(c, node);
  if (cap == 0) return 0;
  return 1.0 - (static_cast<double>(c.share_free_total(node)) -
                static_cast<double>(r.total_gpu_milli())) /
                   cap;
}

double CpuUsedAfter(const Cluster& c, int node, const Request& r) {
  const double cap = static_cast<double>(c.spec(node).cpu_milli);
  if (cap == 0) return 1;
  return 1.0 - static_cast<double>(c.cpu_free(node) - r.cpu_milli) / cap;
}

class RandomPolicy final : public ScoredNodePolicy {
 public:
  explicit RandomPolicy(const PolicyOptions& o) : ScoredNodePolicy(o, TieRule::kRandom) {}
  std::string_view name() const override { return "random"; }

 protected:
  Score ScoreNode(const Cluster&, int, const Request&) override { return {}; }
  uint32_t FinalGpus(const Cluster& c, int node, const Request& r, uint32_t) override {
    return RandomGpus(c, node, r, rng_);
  }
};

// The baselines below decide equal scores by node order, as the FGD authors' simulator does.
class FirstNodePolicy : public ScoredNodePolicy {
 public:
  explicit FirstNodePolicy(const PolicyOptions& o) : ScoredNodePolicy(o, TieRule::kFirstNode) {}

 protected:
  Score ScoreNode(const Cluster& c, int node, const Request& r) override {
    return {NodeScore(c, node, r), 0, Gpus(c, node, r)};
  }
  virtual double NodeScore(const Cluster& c, int node, const Request& r) = 0;
  virtual uint32_t Gpus(const Cluster& c, int node, const Request& r) {
    return BestFitGpus(c, node, r);
  }
};

// Best fit: least resources left after placement, CPU and GPU weighted equally and normalised by
// the largest node of the trace's kind (128 cores, 8 GPUs); a 0..100 plugin score.
class BestFitPolicy final : public FirstNodePolicy {
 public:
  using FirstNodePolicy::FirstNodePolicy;
  std::string_view name() const override { return "bestfit"; }

 protected:
  double NodeScore(const Cluster& c, int node, const Request& r) override {
    const double cpu_left = static_cast<double>(c.cpu_free(node) - r.cpu_milli) / 128000.0;
    const double gpu_left =
        static_cast<double>(c.share_free_total(node) - r.total_gpu_milli()) / 8000.0;
    return PluginScore(100.0 * (1.0 - (0.5 * cpu_left + 0.5 * gpu_left)));
  }
};

// GPU packing, as the FGD authors' simulator scores it (0..100 plugin scores, equal scores to the
// first node in list order). Three tiers, from high to low:
//   1. the request fits entirely on GPUs that are already in use (a share on a shared GPU):
//      100 - (sum over the chosen GPUs of their free share in whole percent) / 10, at least 50;
//      the chosen GPU's free share before placement counts, in 100-milli steps;
//   2. it needs entirely free GPUs of a node that is in use: 50 - those GPUs, at least 33;
//   3. the node is idle: 33 - its GPU count, at least its GPU count (smaller nodes first).
// Within a tier, nodes are not ordered by how full they are; ties go to the first node. A CPU-only
// request scores 0 everywhere and so takes the first node it fits. GPUs best fit.
class PackingPolicy final : public FirstNodePolicy {
 public:
  using FirstNodePolicy::FirstNodePolicy;
  std::string_view name() const override { return "packing"; }

 protected:
  double NodeScore(const Cluster& c, int node, const Request& r) override {
    if (r.gpu_count == 0) return 0;
    const int gpus = c.spec(node).gpu_count;
    if (c.whole_gpus_free(node) == gpus) return std::max(33 - gpus, gpus);
    const uint32_t chosen = BestFitGpus(c, node, r);
    const auto shares = c.gpu_share_free(node);
    int fresh = 0;
    int64_t free_percent = 0;
    for (int g = 0; g < gpus; ++g) {
      if ((chosen & (uint32_t{1} << g)) == 0) continue;
      const int32_t s = shares[static_cast<size_t>(g)];
      if (s == kMilliPerGpu) ++fresh;
      free_percent += s * 100 / kMilliPerGpu;
    }
    if (fresh > 0) return std::max(50 - fresh, 33);
    return static_cast<double>(std::max<int64_t>(100 - free_percent / 10, 50));
  }
};

// GPU clustering: a node already running requests with the same per-GPU share first, then idle
// nodes, then the rest.
class ClusteringPolicy final : public FirstNodePolicy {
 public:
  using FirstNodePolicy::FirstNodePolicy;
  std::string_view name() const override { return "clustering"; }

  void OnPlaced(const Cluster&, const Request& r, const Assignment& a) override {
    if (r.gpu_count == 0) return;
    ++shapes_[Key(a.node, r)];
    Grow(a.node);
    ++gpu_requests_[static_cast<size_t>(a.node)];
  }
  void OnRemoved(const Cluster&, const Request& r, const Assignment& a) override {
    if (r.gpu_count == 0) return;
    auto it = shapes_.find(Key(a.node, r));
    if (it != shapes_.end() && --it->second == 0) shapes_.erase(it);
    Grow(a.node);
    --gpu_requests_[static_cast<size_t>(a.node)];
  }

 protected:
  double NodeScore(const Cluster& c, int node, const Request& r) override {
    if (r.gpu_count == 0) return 0;
    Grow(node);
    if (shapes_.count(Key(node, r)) != 0) return 2;
    return gpu_requests_[static_cast<size_t>(node)] == 0 ? 1 : 0;
  }

 private:
  static uint64_t Key(int node, const Request& r) {
    const uint64_t share = r.whole_gpus() ? kMilliPerGpu : static_cast<uint64_t>(r.gpu_milli);
    return (static_cast<uint64_t>(node) << 32) | (share << 8) | static_cast<uint64_t>(r.gpu_count);
  }
  void Grow(int node) {
    if (gpu_requests_.size() <= static_cast<size_t>(node))
      gpu_requests_.resize(static_cast<size_t>(node) + 1);
  }
  std::unordered_map<uint64_t, int> shapes_;
  std::vector<int> gpu_requests_;
};

// Dot product (Tetris-style alignment) of the request and the node's free resources, each
// normalised by the node's capacity, over CPU, memory and GPU; the smallest wins.
class DotProdPolicy final : public FirstNodePolicy {
 public:
  using FirstNodePolicy::FirstNodePolicy;
  std::string_view name() const override { return "dotprod"; }

 protected:
  double NodeScore(const Cluster& c, int node, const Request& r) override {
    const NodeSpec& s = c.spec(node);
    double dot = 0;
    if (s.cpu_milli > 0) {
      dot += static_cast<double>(r.cpu_milli) / s.cpu_milli *
             static_cast<double>(c.cpu_free(node)) / s.cpu_milli;
    }
    if (s.memory_mib > 0) {
      dot += static_cast<double>(r.memory_mib) / s.memory_mib *
             static_cast<double>(c.memory_free(node)) / s.memory_mib;
    }
    const double cap = GpuCapacity(c, node);
    if (cap > 0) {
      dot += static_cast<double>(r.total_gpu_milli()) / cap *
             static_cast<double>(c.share_free_total(node)) / cap;
    }
    return -dot;
  }
};

// HAMi's binpack and spread: the node's GPU share and CPU in use after placement, most (binpack)
// or least (spread) first; GPUs by the same rule.
class BinpackPolicy final : public FirstNodePolicy {
 public:
  BinpackPolicy(const PolicyOptions& o, bool spread) : FirstNodePolicy(o), spread_(spread) {}
  std::string_view name() const override { return spread_ ? "spread" : "binpack"; }

 protected:
  double NodeScore(const Cluster& c, int node, const Request& r) override {
    const double used = GpuUsedAfter(c, node, r) + CpuUsedAfter(c, node, r);
    return spread_ ? -used : used;
  }
  uint32_t Gpus(const Cluster& c, int node, const Request& r) override {
    return spread_ ? WorstFitGpus(c, node, r) : BestFitGpus(c, node, r);
  }

 private:
  bool spread_;
};

}  // namespace

std::unique_ptr<Policy> MakeRandom(const PolicyOptions& o) {
  return std::make_unique<RandomPolicy>(o);
}
std::unique_ptr<Policy> MakeBestFit(const PolicyOptions& o) {
  return std::make_unique<BestFitPolicy>(o);
}
std::unique_ptr<Policy> MakePacking(const PolicyOptions& o) {
  return std::make_unique<PackingPolicy>(o);
}
std::unique_ptr<Policy> MakeClustering(const PolicyOptions& o) {
  return std::make_unique<ClusteringPolicy>(o);
}
std::unique_ptr<Policy> MakeDotProd(const PolicyOptions& o) {
  return std::make_unique<DotProdPolicy>(o);
}
std::unique_ptr<Policy> MakeBinpack(const PolicyOptions& o) {
  return std::make_unique<BinpackPolicy>(o, false);
}
std::unique_ptr<Policy> MakeSpread(const PolicyOptions& o) {
  return std::make_unique<BinpackPolicy>(o, true);
}

}  // namespace tessera::placement::internal
