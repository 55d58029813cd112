// Target workloads and the FGD fragmentation measure, direct and incremental. No placement here.
#include "placement/frag.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tessera::placement {

namespace {

int CeilShare(int64_t mem_mib, int64_t cap_mib) {
  if (cap_mib <= 0) return kMilliPerGpu + 1;
  return static_cast<int>((mem_mib * kMilliPerGpu + cap_mib - 1) / cap_mib);
}

// Adds `milli` of GPU demand with these constraints to `demands` (TargetWorkload::demands).
void AddDemand(std::vector<TargetShape>& demands, ModelSet allowed, bool whole, double milli) {
  if (milli <= 0) return;
  for (TargetShape& d : demands) {
    if (d.allowed == allowed && (d.gpu_milli == kMilliPerGpu) == whole) {
      d.weight += milli;
      return;
    }
  }
  TargetShape d;
  d.gpu_count = 1;
  d.gpu_milli = whole ? kMilliPerGpu : 1;
  d.allowed = allowed;
  d.weight = milli;
  demands.push_back(d);
}

void NormaliseWeights(std::vector<TargetShape>& shapes) {
  double total = 0;
  for (const TargetShape& s : shapes) total += s.weight;
  if (total > 0) {
    for (TargetShape& s : shapes) s.weight /= total;
  }
}

}  // namespace

TargetWorkload::TargetWorkload(std::vector<TargetShape> shapes, MigDemand mig)
    : shapes_(std::move(shapes)), mig_(std::move(mig)) {
  for (const TargetShape& s : shapes_) {
    if (s.gpu_count == 0 || s.gpu_milli == 0) continue;
    AddDemand(demands_, s.allowed, s.gpu_milli >= kMilliPerGpu,
              s.weight * s.gpu_count * std::min(s.gpu_milli, kMilliPerGpu));
  }
  NormaliseWeights(demands_);
  for (const TargetShape& s : shapes_) {
    if (s.gpu_count == 0 || s.gpu_milli == 0) continue;
    TargetShape d = s;
    d.weight = s.weight * s.gpu_count * std::min(s.gpu_milli, kMilliPerGpu);
    sized_.push_back(d);
  }
  NormaliseWeights(sized_);
}

TargetWorkload TargetWorkload::FromRequests(std::span<const Request> all, double coverage) {
  std::vector<Request> requests;
  MigDemand mig;
  double mig_total = 0;
  for (const Request& r : all) {
    if (!r.mig()) {
      requests.push_back(r);
      continue;
    }
    mig.weight.resize(static_cast<size_t>(MigProfileCount()), 0.0);
    mig.weight[static_cast<size_t>(r.mig_profile)] += 1;
    ++mig_total;
  }
  for (double& w : mig.weight) w /= mig_total;
  using Key = std::tuple<int64_t, int, int, int64_t, uint64_t>;
  std::map<Key, int64_t> counts;
  for (const Request& r : requests) {
    const int milli = r.whole_gpus() ? kMilliPerGpu : r.gpu_milli;
    const int64_t mem = r.memory_only() ? r.gpu_mem_mib : kProportionalMemory;
    ++counts[Key{r.cpu_milli, r.gpu_count, milli, mem, r.allowed.bits()}];
  }
  std::vector<std::pair<Key, int64_t>> sorted(counts.begin(), counts.end());
  // Most frequent first; equal counts in key order, so the result does not depend on input order.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const double total = static_cast<double>(requests.size());
  std::vector<TargetShape> shapes;
  int64_t covered = 0;
  for (const auto& [key, count] : sorted) {
    if (total == 0 || static_cast<double>(covered) >= coverage * total) break;
    TargetShape s;
    s.cpu_milli = std::get<0>(key);
    s.gpu_count = std::get<1>(key);
    s.gpu_milli = std::get<2>(key);
    s.gpu_mem_mib = std::get<3>(key);
    ModelSet allowed = ModelSet::None();
    for (int m = 0; m < kMaxModels; ++m) {
      if (((std::get<4>(key) >> m) & 1) != 0) allowed = allowed.With(m);
    }
    s.allowed = allowed;
    s.weight = static_cast<double>(count);
    shapes.push_back(s);
    covered += count;
  }
  for (TargetShape& s : shapes) s.weight /= static_cast<double>(covered);
  TargetWorkload workload;
  workload.shapes_ = std::move(shapes);
  workload.mig_ = std::move(mig);
  std::map<std::tuple<int64_t, int64_t, int, int, uint64_t>, double> sized;
  for (const Request& r : requests) {
    AddDemand(workload.demands_, r.allowed, r.whole_gpus(),
              static_cast<double>(r.total_gpu_milli()));
    if (r.gpu_count == 0 || r.total_gpu_milli() == 0) continue;
    sized[{r.cpu_milli, r.memory_mib, r.gpu_count, r.whole_gpus() ? kMilliPerGpu : r.gpu_milli,
           r.allowed.bits()}] += static_cast<double>(r.total_gpu_milli());
  }
  NormaliseWeights(workload.demands_);
  for (const auto& [key, milli] : sized) {
    TargetShape d;
    d.cpu_milli = std::get<0>(key);
    d.memory_mib = std::get<1>(key);
    d.gpu_count = std::get<2>(key);
    d.gpu_milli = std::get<3>(key);
    d.allowed = ModelSet::None();
    for (int m = 0; m < kMaxModels; ++m) {
      if (((std::get<4>(key) >> m) & 1) != 0) d.allowed = d.allowed.With(m);
    }
    d.weight = milli;
    workload.sized_.push_back(d);
  }
  NormaliseWeights(workload.sized_);
  return workload;
}

int ShapeNeed(const Cluster& cluster, int node, const TargetShape& shape) {
  const NodeSpec& spec = cluster.spec(node);
  if (shape.gpu_count == 0 || spec.gpu_count == 0 || !shape.allowed.Contains(spec.model) ||
      spec.mode == NodeMode::kMig) {
    return -1;
  }
  if (shape.gpu_milli >= kMilliPerGpu) return kMilliPerGpu;
  const int64_t cap = cluster.gpu_memory_mib(node);
  if (shape.gpu_milli == 0) {  // memory-only
    if (spec.mode != NodeMode::kMemoryOnly) return -1;
    const int need = CeilShare(shape.gpu_mem_mib, cap);
    return need > kMilliPerGpu ? -1 : std::max(need, 1);
  }
  if (spec.mode != NodeMode::kMemoryAndCompute) return -1;
  int need = shape.gpu_milli;
  if (shape.gpu_mem_mib != kProportionalMemory)
    need = std::max(need, CeilShare(shape.gpu_mem_mib, cap));
  return need > kMilliPerGpu ? -1 : need;
}

double NodeFragMilli(const Cluster& cluster, int node, const TargetWorkload& workload) {
  const auto shares = cluster.gpu_share_free(node);
  int64_t total = 0;
  for (int32_t s : shares) total += s;
  double frag = 0;
  for (const TargetShape& m : workload.shapes()) {
    const int need = ShapeNeed(cluster, node, m);
    int64_t value = total;
    if (need >= 0 && cluster.cpu_free(node) >= m.cpu_milli) {
      int fitting = 0;
      int64_t low = 0;
      for (int32_t s : shares) {
        if (s >= need) {
          ++fitting;
        } else {
          low += s;
        }
      }
      if (fitting >= m.gpu_count) value = low;
    }
    frag += m.weight * static_cast<double>(value);
  }
  return frag;
}

int32_t ShareAfter(const Cluster& cluster, int node, int gpu, const Request& r) {
  const int64_t cap = cluster.gpu_memory_mib(node);
  const int32_t milli = cluster.gpu_milli_free(node)[static_cast<size_t>(gpu)] -
                        (r.whole_gpus() ? kMilliPerGpu : r.gpu_milli);
  const int64_t mem = cluster.gpu_memory_free(node)[static_cast<size_t>(gpu)] - r.MemoryOn(cap);
  const int32_t mem_share = cap > 0 ? static_cast<int32_t>(mem * kMilliPerGpu / cap) : 0;
  return cluster.spec(node).ModeOf(gpu) == NodeMode::kMemoryOnly ? mem_share
                                                                 : std::min(milli, mem_share);
}

FragEvaluator::FragEvaluator(const Cluster& cluster, const TargetWorkload& workload)
    : cluster_(cluster),
      workload_(workload),
      cache_(static_cast<size_t>(cluster.node_count())),
      stride_(std::max<size_t>(workload.shapes().size(), 1)),
      classes_(kNodeClasses) {
  count_.assign(static_cast<size_t>(cluster.node_count()) * stride_, 0);
  low_.assign(static_cast<size_t>(cluster.node_count()) * stride_, 0);
}

const FragEvaluator::ClassShapes& FragEvaluator::ShapesFor(int node) {
  ClassShapes& c = classes_[static_cast<size_t>(NodeClass(cluster_.spec(node)))];
  if (!c.built) {
    const auto& shapes = workload_.shapes();
    for (size_t j = 0; j < shapes.size(); ++j) {
      const int need = ShapeNeed(cluster_, node, shapes[j]);
      if (need < 0) {
        c.never_weight += shapes[j].weight;
      } else {
        c.shape.push_back(static_cast<int>(j));
        c.need.push_back(need);
      }
    }
    c.built = true;
  }
  return c;
}

void FragEvaluator::Refresh(int node) {
  NodeCache& nc = cache_[static_cast<size_t>(node)];
  nc.version = cluster_.version(node);
  if (cluster_.spec(node).gpu_count == 0) {
    nc.frag = 0;
    return;
  }
  const ClassShapes& c = ShapesFor(node);
  const auto shares = cluster_.gpu_share_free(node);
  const double total = static_cast<double>(cluster_.share_free_total(node));
  const int64_t cpu = cluster_.cpu_free(node);
  const auto& shapes = workload_.shapes();
  double frag = c.never_weight * total;
  const size_t base = static_cast<size_t>(node) * stride_;
  for (size_t k = 0; k < c.shape.size(); ++k) {
    const int need = c.need[k];
    int fitting = 0;
    int32_t low = 0;
    for (int32_t s : shares) {
      if (s >= need) {
        ++fitting;
      } else {
        low += s;
      }
    }
    count_[base + k] = static_cast<int16_t>(fitting);
    low_[base + k] = low;
    const TargetShape& m = shapes[static_cast<size_t>(c.shape[k])];
    frag += m.weight * (cpu >= m.cpu_milli && fitting >= m.gpu_count ? low : total);
  }
  nc.frag = frag;
}

double FragEvaluator::Frag(int node) {
  if (cache_[static_cast<size_t>(node)].version != cluster_.version(node)) Refresh(node);
  return cache_[static_cast<size_t>(node)].frag;
}

double FragEvaluator::FragAfterOneGpu(int node, const Request& r, int32_t from, int32_t to) {
  if (cache_[static_cast<size_t>(node)].version != cluster_.version(node)) Refresh(node);
  const ClassShapes& c = ShapesFor(node);
  const double total = static_cast<double>(cluster_.share_free_total(node) + to - from);
  const int64_t cpu = cluster_.cpu_free(node) - r.cpu_milli;
  const auto& shapes = workload_.shapes();
  const size_t base = static_cast<size_t>(node) * stride_;
  double frag = c.never_weight * total;
  for (size_t k = 0; k < c.shape.size(); ++k) {
    const int need = c.need[k];
    const int fitting = count_[base + k] - (from >= need) + (to >= need);
    const int32_t low = low_[base + k] - (from < need ? from : 0) + (to < need ? to : 0);
    const TargetShape& m = shapes[static_cast<size_t>(c.shape[k])];
    frag += m.weight * (cpu >= m.cpu_milli && fitting >= m.gpu_count ? low : total);
  }
  return frag;
}

double FragEvaluator::FragAfter(int node, const Request& r, uint32_t gpus) {
  if (cluster_.spec(node).gpu_count == 0) return 0;
  if (cache_[static_cast<size_t>(node)].version != cluster_.version(node)) Refresh(node);
  // The changed GPUs as (from, to, how many) groups; whole-GPU requests make one group.
  struct Change {
    int32_t from, to, times;
  };
  Change changes[kMaxGpusPerNode];
  int n_changes = 0;
  const auto shares = cluster_.gpu_share_free(node);
  int64_t total = cluster_.share_free_total(node);
  for (int g = 0; g < cluster_.spec(node).gpu_count; ++g) {
    if (((gpus >> g) & 1) == 0) continue;
    const int32_t from = shares[static_cast<size_t>(g)];
    const int32_t to = ShareAfter(cluster_, node, g, r);
    total += to - from;
    bool merged = false;
    for (int i = 0; i < n_changes && !merged; ++i) {
      if (changes[i].from == from && changes[i].to == to) {
        ++changes[i].times;
        merged = true;
      }
    }
    if (!merged) changes[n_changes++] = Change{from, to, 1};
  }
  const ClassShapes& c = ShapesFor(node);
  const int64_t cpu = cluster_.cpu_free(node) - r.cpu_milli;
  const auto& shapes = workload_.shapes();
  const size_t base = static_cast<size_t>(node) * stride_;
  const double dtotal = static_cast<double>(total);
  double frag = c.never_weight * dtotal;
  for (size_t k = 0; k < c.shape.size(); ++k) {
    const int need = c.need[k];
    int fitting = count_[base + k];
    int64_t low = low_[base + k];
    for (int i = 0; i < n_changes; ++i) {
      const Change& ch = changes[i];
      fitting += ch.times * ((ch.to >= need) - (ch.from >= need));
      low += ch.times * ((ch.to < need ? ch.to : 0) - (ch.from < need ? ch.from : 0));
    }
    const TargetShape& m = shapes[static_cast<size_t>(c.shape[k])];
    frag += m.weight *
            (cpu >= m.cpu_milli && fitting >= m.gpu_count ? static_cast<double>(low) : dtotal);
  }
  return frag;
}

double FragEvaluator::ClusterFragMilli() {
  double sum = 0;
  for (int n = 0; n < cluster_.node_count(); ++n) sum += Frag(n);
  return sum;
}

}  // namespace tessera::placement
