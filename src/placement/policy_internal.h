// Pieces the policies share: choosing GPUs inside a node, the node loop with its per-node score
// cache and tie rules, and the constructors of each policy. Internal to src/placement; callers
// use policy.h. Reads the cluster only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/policy.h"
#include "placement/rng.h"

namespace tessera::placement::internal {

// GPUs of `node` for `request` (gpu_count of them, each fitting; the caller checked the node
// fits). Whole GPUs: the lowest-numbered free ones. Fractional shares: best fit takes the GPUs
// with the least free share, worst fit the most; ties to the lowest number.
uint32_t BestFitGpus(const Cluster& cluster, int node, const Request& request);
uint32_t WorstFitGpus(const Cluster& cluster, int node, const Request& request);
uint32_t RandomGpus(const Cluster& cluster, int node, const Request& request, Rng& rng);

// True when an earlier GPU of `node` has the same free share, memory and mode as `gpu`: a one-GPU
// placement there would score the same, so scoring policies skip it.
bool SameAsEarlierGpu(const Cluster& cluster, int node, int gpu);

// kube-scheduler scores are whole numbers from 0 to 100; policies ported from plugins that
// produce them truncate the same way, which makes ties (and the tie rule) matter.
double PluginScore(double x);

// How equal scores are decided.
enum class TieRule {
  kFirstNode,  // the lowest-numbered node: what the FGD authors' simulator does (docs/placement.md)
  kRandom,     // uniformly at random (reservoir sampling, as kube-scheduler's host selection)
};

// A policy made of a per-node score: the fitting node with the highest (primary, secondary)
// wins, ties by the tie rule. A node's score depends only on the node's state and the request,
// so it is cached per request shape and recomputed only for nodes whose version changed: a
// decision costs a scan of cached scores plus the nodes changed since that shape was last seen.
class ScoredNodePolicy : public Policy {
 public:
  ScoredNodePolicy(const PolicyOptions& options, TieRule tie) : rng_(options.seed), tie_(tie) {}
  std::optional<Assignment> Select(const Cluster& cluster, const Request& request) final;
  std::optional<Assignment> SelectAmong(const Cluster& cluster, const Request& request,
                                        std::span<const int> candidates,
                                        std::vector<NodeScore>* scores) final;
  uint32_t GpusOn(const Cluster& cluster, int node, const Request& request) final;

 protected:
  struct Score {
    double primary = 0;
    double secondary = 0;
    uint32_t gpus = 0;  // where on the node the request would go
  };
  // Only called for nodes the request fits.
  virtual Score ScoreNode(const Cluster& cluster, int node, const Request& request) = 0;
  // The GPUs to return for the winning node; by default the scored ones.
  virtual uint32_t FinalGpus(const Cluster& cluster, int node, const Request& request,
                             uint32_t scored) {
    return scored;
  }
  // Called before scoring whenever the cluster object differs from the last call's.
  virtual void Attach(const Cluster& cluster) {}
  // Called once per scan, before any score is compared. A policy whose choice also depends on
  // the cluster as a whole, not only on each node, prepares that part here and returns true;
  // AdjustScore then adds it to each fitting node's (cached) score for this scan.
  virtual bool BeginScan(const Cluster& cluster, const Request& request) { return false; }
  virtual void AdjustScore(const Cluster& cluster, int node, const Request& request, Score& s) {}

  Rng rng_;

 private:
  struct Entry {
    uint64_t version = ~uint64_t{0};
    bool fits = false;
    Score score;
  };
  struct ShapeKey {
    int64_t cpu, memory, gpu_mem;
    int32_t gpu_count, gpu_milli;
    uint64_t allowed;
    uint32_t gpu_modes;
    bool operator==(const ShapeKey&) const = default;
  };
  struct ShapeHash {
    size_t operator()(const ShapeKey& k) const;
  };
  static constexpr size_t kMaxCachedShapes = 256;

  // The node loop behind Select and SelectAmong: every node when `candidates` is null, else the
  // `count` nodes listed there.
  std::optional<Assignment> Scan(const Cluster& cluster, const Request& request,
                                 const int* candidates, int count, std::vector<NodeScore>* scores);
  // The cached entries of `request`'s shape (nullptr when the cache is full), after resetting the
  // cache for a new cluster object.
  std::vector<Entry>* EntriesFor(const Cluster& cluster, const Request& request);
  // `e` brought up to date for `node`.
  void Refresh(const Cluster& cluster, int node, const Request& request, Entry& e);

  TieRule tie_;
  uint64_t cluster_id_ = 0;
  std::unordered_map<ShapeKey, std::vector<Entry>, ShapeHash> cache_;
};

// Remembers a value computed for a node in some state (its class, free CPU, and every GPU's
// free compute and memory, in GPU order) for one request shape, so that a node in the same state
// gets it back instead of computing it again: a policy whose node score depends only on those
// (tessera) scores the idle nodes of one kind once, not once per node. Exact: a hit compares the
// whole state, not only its hash; a node never changed since the cluster was built (version 0)
// is entirely free, so its state is its kind (class, CPU, GPU count). Values are kept per request
// shape and forgotten on Clear and when 1 << 16 states or 256 shapes are stored.
template <typename Value>
class NodeStateMemo {
 public:
  void Clear() {
    entries_.clear();
    arena_.clear();
    slots_.assign(slots_.size(), kEmpty);
    shapes_.clear();
    shape_ = -1;
  }

  // The value stored for a node in `node`'s state for `request`, or nullptr. Remembers the state
  // for Store.
  const Value* Find(const Cluster& c, int node, const Request& request) {
    if (shape_ < 0 || !SameShape(request, shapes_[static_cast<size_t>(shape_)])) {
      FindShape(request);
    }
    const NodeSpec& spec = c.spec(node);
    length_ = 0;
    state_[length_++] = shape_;
    state_[length_++] = NodeClass(spec);
    if (c.version(node) == 0) {  // idle: its kind (-1 where a state has its free CPU, >= 0)
      state_[length_++] = -1;
      state_[length_++] = spec.cpu_milli;
      state_[length_++] = spec.gpu_count;
    } else {
      state_[length_++] = c.cpu_free(node);
      for (int32_t m : c.gpu_milli_free(node)) state_[length_++] = m;
      for (int64_t m : c.gpu_memory_free(node)) state_[length_++] = m;
    }
    uint64_t h = 0;
    for (size_t i = 0; i < length_; ++i) {
      h = (h ^ static_cast<uint64_t>(state_[i])) * 0x9e3779b97f4a7c15ULL;
      h ^= h >> 29;
    }
    hash_ = h;
    if (slots_.empty()) return nullptr;
    for (size_t i = hash_ & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == kEmpty) return nullptr;
      const Entry& e = entries_[slots_[i]];
      if (e.hash == hash_ && e.length == length_ &&
          std::equal(state_.begin(), state_.begin() + static_cast<std::ptrdiff_t>(length_),
                     arena_.begin() + e.offset)) {
        return &e.value;
      }
    }
  }

  // Stores `value` for the state the last Find looked up (and did not find).
  void Store(const Value& value) {
    if (entries_.size() >= kMostEntries) {  // start again, keeping the shapes
      entries_.clear();
      arena_.clear();
      slots_.assign(slots_.size(), kEmpty);
    }
    if (2 * (entries_.size() + 1) > slots_.size()) Grow();
    entries_.push_back(
        {hash_, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(length_), value});
    arena_.insert(arena_.end(), state_.begin(),
                  state_.begin() + static_cast<std::ptrdiff_t>(length_));
    Insert(static_cast<uint32_t>(entries_.size() - 1));
  }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  static constexpr size_t kMostEntries = size_t{1} << 16;
  static constexpr size_t kMostShapes = 256;

  struct Entry {
    uint64_t hash;
    uint32_t offset, length;  // of the state in arena_
    Value value;
  };

  static bool SameShape(const Request& a, const Request& b) {
    return a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib &&
           a.gpu_count == b.gpu_count && a.gpu_milli == b.gpu_milli &&
           a.gpu_mem_mib == b.gpu_mem_mib && a.allowed == b.allowed && a.gpu_modes == b.gpu_modes;
  }

  // Points shape_ at `r`'s shape, adding it (after a Clear when there are too many).
  void FindShape(const Request& r) {
    for (size_t i = 0; i < shapes_.size(); ++i) {
      if (SameShape(r, shapes_[i])) {
        shape_ = static_cast<int>(i);
        return;
      }
    }
    if (shapes_.size() >= kMostShapes) Clear();
    shapes_.push_back(r);
    shape_ = static_cast<int>(shapes_.size() - 1);
  }

  void Insert(uint32_t entry) {
    size_t i = entries_[entry].hash & (slots_.size() - 1);
    while (slots_[i] != kEmpty) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = entry;
  }

  void Grow() {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), kEmpty);
    for (uint32_t e = 0; e < entries_.size(); ++e) Insert(e);
  }

  std::vector<Request> shapes_;  // the request shapes seen; values are kept per shape
  int shape_ = -1;               // the last Find's, index into shapes_
  // The state of the last Find (shape, class, then the free CPU and GPUs, or an idle node's
  // kind) and its hash.
  std::array<int64_t, 3 + 2 * kMaxGpusPerNode> state_{};
  size_t length_ = 0;
  uint64_t hash_ = 0;
  std::vector<Entry> entries_;
  std::vector<int64_t> arena_;
  std::vector<uint32_t> slots_;  // open addressing, a power of two long
};

// Expected leftover share, in milli, of one GPU with f milli free (index f, 0..1000) once the
// target workload's GPU shapes have filled it: while some shape fits, the next one that lands
// there is drawn by weight among those that fit; with probability exp(-a x their total weight),
// a = `arrivals_per_gap`, none ever comes, and all of f is left. A shape's share counts once per
// GPU (whole GPUs as 1000); CPU-only and memory-only shapes are not fillers. tessera's R_n term.
std::vector<double> ExpectedResidual(const TargetWorkload& workload, double arrivals_per_gap);
// The same over explicit (share, weight) fillers: tessera's per-class tables.
std::vector<double> ExpectedResidual(std::span<const std::pair<int, double>> fillers,
                                     double arrivals_per_gap);

// The node classes (frag.h's NodeClass) of a cluster: for each class present, its GPUs and its
// first node, whose model and mode stand for the class; in order of first appearance.
struct ClassInfo {
  int node_class = -1;
  int first_node = -1;
  int64_t gpus = 0;
};
std::vector<ClassInfo> ClusterClasses(const Cluster& cluster);

// The target workload as a node of class `node_class` sees it: per shape of `workload`, its
// weight there. A GPU shape that may use the class weighs p_m x (cluster GPUs / GPUs of the
// classes it may use), its arrivals per GPU it can go to; a GPU shape that may not weighs 0;
// CPU-only shapes keep p_m. Normalised to sum 1. Without placement constraints: the p_m.
std::vector<double> ClassShapeWeights(const Cluster& cluster, std::span<const ClassInfo> classes,
                                      int node_class, const TargetWorkload& workload);

// Per class of `classes`: the part of its GPUs (0..1) that the GPU demand which may use only some
// classes (TargetWorkload::demands) will need once the arrived workload equals the cluster's GPUs.
// Each such demand is spread over the classes it may use in proportion to their GPUs. So is
// demand that may use any model but that only the larger nodes fit, for lack of CPU, memory or
// GPUs on the others (TargetWorkload::sized_demands), over the GPUs of the nodes it fits when
// empty, when those hold at most half the cluster's GPUs. Demand that fits everywhere loads no
// class. tessera's rho_k.
std::vector<double> ClassPressure(const Cluster& cluster, std::span<const ClassInfo> classes,
                                  const TargetWorkload& workload);
// ClassPressure without the demand that only the larger nodes fit: the part of each class's GPUs
// that the demand constrained to some models will need. What a constrained class's CPU is kept
// for (tessera's sigma_k).
std::vector<double> ClassConstraintPressure(const Cluster& cluster,
                                            std::span<const ClassInfo> classes,
                                            const TargetWorkload& w);
// Per class: the part of its GPUs that multi-GPU requests which only the larger nodes fit (as
// ClassPressure counts them by size) will need; such requests need nodes whole, so a request that
// takes part of an empty node of the class spoils all of it for them.
std::vector<double> ClassWholeNodePressure(const Cluster& cluster,
                                           std::span<const ClassInfo> classes,
                                           const TargetWorkload& workload);

// The empty nodes (all CPU and every GPU's share free) of each kind, kept up to date from the
// cluster's change log: a call revisits only the nodes changed since the last one, and counts
// every node afresh for another cluster object or when more than Cluster::kChangeLog changes
// have passed. tessera's scarce-empty-node charge reads it once per decision.
class EmptyNodeCount {
 public:
  // `kind_of`: per node of the clusters to count, its kind (0..kinds-1), or -1 for a node not
  // counted. Forgets the counts.
  void Reset(std::vector<int> kind_of, int kinds);
  // Brings the counts up to date with `cluster`, whose nodes `kind_of` lists.
  void Update(const Cluster& cluster);
  int empty(int kind) const { return count_[static_cast<size_t>(kind)]; }
  static bool Empty(const Cluster& cluster, int node) {
    return cluster.cpu_free(node) == cluster.spec(node).cpu_milli &&
           cluster.share_free_total(node) == int64_t{cluster.spec(node).gpu_count} * kMilliPerGpu;
  }

 private:
  void Set(const Cluster& cluster, int node);

  std::vector<int> kind_of_;
  std::vector<uint8_t> empty_;  // per node, as last seen
  std::vector<int> count_;      // per kind
  uint64_t cluster_id_ = 0;     // the cluster counted (0: none; Cluster ids start at 1)
  uint64_t changes_ = 0;        // its Cluster::changes() when counted
};

// The GPU share free per node class (indices of the caller's), over the whole cluster, counted as
// far as each node's free CPU serves it: a node's free share, at most its free CPU over the
// class's CPU per GPU (a GPU whose node has no CPU left serves no pod). Brought up to date from
// the nodes changed since the last Update, or counted again when further behind.
class ClassFree {
 public:
  // `class_of`: per node of the clusters to count, its class (0..classes-1), or -1 for a node
  // not counted; `cpu_per_gpu`: per class, the CPU (milli) its pods ask per whole GPU (0: CPU
  // limits nothing); capacities from `cluster`. Forgets the counts.
  void Reset(const Cluster& cluster, std::vector<int> class_of, std::vector<double> cpu_per_gpu);
  void Update(const Cluster& cluster);
  int class_of(int node) const { return class_of_[static_cast<size_t>(node)]; }
  int64_t free(int k) const { return free_[static_cast<size_t>(k)]; }
  int64_t capacity(int k) const { return capacity_[static_cast<size_t>(k)]; }

 private:
  void Set(const Cluster& cluster, int node);

  std::vector<int> class_of_;
  std::vector<double> cpu_per_gpu_;  // per class
  std::vector<int64_t> seen_;        // per node: its share free as served, as last counted
  std::vector<int64_t> free_;        // per class
  std::vector<int64_t> capacity_;    // per class: its GPUs' whole share
  uint64_t cluster_id_ = 0;          // the cluster counted (0: none; Cluster ids start at 1)
  uint64_t changes_ = 0;             // its Cluster::changes() when counted
};

std::unique_ptr<Policy> MakeRandom(const PolicyOptions& options);
std::unique_ptr<Policy> MakeBinpack(const PolicyOptions& options);
std::unique_ptr<Policy> MakeSpread(const PolicyOptions& options);
std::unique_ptr<Policy> MakeBestFit(const PolicyOptions& options);
std::unique_ptr<Policy> MakeDotProd(const PolicyOptions& options);
std::unique_ptr<Policy> MakePacking(const PolicyOptions& options);
std::unique_ptr<Policy> MakeClustering(const PolicyOptions& options);
std::unique_ptr<Policy> MakeFgd(const PolicyOptions& options);
std::unique_ptr<Policy> MakeTessera(const PolicyOptions& options);
// tessera scoring every node afresh (no NodeStateMemo): the reference its memo must agree with,
// decision for decision (policy_test), and the "before" of placement_bench's cold decisions.
std::unique_ptr<Policy> MakeTesseraUnmemoised(const PolicyOptions& options);

}  // namespace tessera::placement::internal
