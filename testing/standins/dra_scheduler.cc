// DraScheduler: the stand-in scheduling cycle (see the header).
#include "testing/standins/dra_scheduler.h"

#include <algorithm>
#include <cmath>

namespace tessera::k8s {
namespace {

// Upstream's defaults for a container asking nothing, as the scoring plugins count them.
constexpr int64_t kDefaultCpuMilli = 100;
constexpr int64_t kDefaultMemoryMib = 200;
constexpr int64_t kMaxNodeScore = 100;

}  // namespace

DraScheduler::DraScheduler(std::vector<Node> nodes, DraAllocator* allocator, uint64_t seed)
    : allocator_(allocator), rng_(seed) {
  for (Node& n : nodes) nodes_.push_back({std::move(n), 0, 0});
}

int DraScheduler::NumFeasibleNodesToFind() const {
  const int all = static_cast<int>(nodes_.size());
  if (all < 100) return all;
  int percentage = 50 - all / 125;
  if (percentage < 5) percentage = 5;
  const int n = all * percentage / 100;
  return n < 100 ? 100 : n;
}

int64_t DraScheduler::Score(const State& s, int64_t cpu, int64_t memory) const {
  const int64_t cpu_req = s.cpu_used + (cpu > 0 ? cpu : kDefaultCpuMilli);
  const int64_t mem_req = s.memory_used + (memory > 0 ? memory : kDefaultMemoryMib);
  auto least = [](int64_t requested, int64_t capacity) -> int64_t {
    if (capacity == 0 || requested > capacity) return 0;
    return (capacity - requested) * kMaxNodeScore / capacity;
  };
  const int64_t least_allocated =
      (least(cpu_req, s.node.cpu_milli) + least(mem_req, s.node.memory_mib)) / 2;
  auto fraction = [](int64_t requested, int64_t capacity) {
    if (capacity == 0) return 1.0;
    return std::min(1.0, static_cast<double>(requested) / static_cast<double>(capacity));
  };
  // Balanced allocation counts the pod's own request as given (no defaults).
  const double f_cpu = fraction(s.cpu_used + cpu, s.node.cpu_milli);
  const double f_mem = fraction(s.memory_used + memory, s.node.memory_mib);
  const double std = std::abs((f_cpu - f_mem) / 2);
  const int64_t balanced = static_cast<int64_t>((1 - std) * static_cast<double>(kMaxNodeScore));
  return least_allocated + balanced;
}

Result<std::optional<DraScheduler::Decision>> DraScheduler::Schedule(
    int64_t cpu, int64_t memory, const std::vector<Json>& claims) {
  const size_t all = nodes_.size();
  const int want = NumFeasibleNodesToFind();
  struct Feasible {
    size_t node;
    std::vector<Json> allocations;
  };
  std::vector<Feasible> feasible;
  size_t examined = 0;
  for (; examined < all && static_cast<int>(feasible.size()) < want; ++examined) {
    const size_t i = (next_start_ + examined) % all;
    const State& s = nodes_[i];
    if (s.cpu_used + cpu > s.node.cpu_milli || s.memory_used + memory > s.node.memory_mib) continue;
    std::vector<Json> allocations;
    if (!claims.empty()) {
      auto a = allocator_->Allocate({s.node.name, {}}, claims);
      if (!a.ok()) return a.status();
      if (!*a) continue;
      allocations = std::move(**a);
    }
    feasible.push_back({i, std::move(allocations)});
  }
  next_start_ = (next_start_ + examined) % std::max<size_t>(all, 1);
  examined_ = static_cast<int>(examined);
  if (feasible.empty()) return std::optional<Decision>();
  // The best score; among equals a uniformly random one (reservoir sampling, as selectHost).
  size_t best = 0;
  int64_t best_score = -1;
  int ties = 0;
  for (size_t f = 0; f < feasible.size(); ++f) {
    const int64_t score = Score(nodes_[feasible[f].node], cpu, memory);
    if (score > best_score) {
      best_score = score;
      best = f;
      ties = 1;
    } else if (score == best_score) {
      ++ties;
      if (std::uniform_int_distribution<int>(0, ties - 1)(rng_) == 0) best = f;
    }
  }
  State& chosen = nodes_[feasible[best].node];
  chosen.cpu_used += cpu;
  chosen.memory_used += memory;
  for (const Json& a : feasible[best].allocations) allocator_->AddAllocation(a);
  return std::optional<Decision>(Decision{chosen.node.name, std::move(feasible[best].allocations)});
}

void DraScheduler::Hold(const std::string& node, int64_t cpu, int64_t memory) {
  for (State& s : nodes_) {
    if (s.node.name != node) continue;
    s.cpu_used += cpu;
    s.memory_used += memory;
  }
}

void DraScheduler::Release(const std::string& node, int64_t cpu, int64_t memory) {
  Hold(node, -cpu, -memory);
}

}  // namespace tessera::k8s
