// Reservations for waiting multi-GPU pods: the plan (which node each holder keeps draining) and
// the rule of who may use a held node (reservation.h). No I/O.
#include "placement/reservation.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>

namespace tessera::placement {

bool Reservations::Holds(const Cluster& c, const Request& r) {
  if (r.mig() || r.gpu_count == 0) return false;
  if (r.gpu_count >= 2) return true;
  Forget(c);
  if (holds_.size() >= 4096) holds_.clear();  // many shapes: start again
  auto [it, fresh] = holds_.try_emplace(KeyOf(r), false);
  if (!fresh) return it->second;
  bool node_sized = true;
  int64_t reach = 0;  // GPUs of the nodes it fits when empty
  for (int n = 0; n < c.node_count(); ++n) {
    if (!FitsWhenEmpty(c, n, r)) continue;
    const NodeSpec& spec = c.spec(n);
    reach += spec.gpu_count;
    node_sized =
        node_sized && r.cpu_milli * spec.gpu_count >= int64_t{kHeldCpuOfGpus} * spec.cpu_milli;
  }
  const bool few = static_cast<double>(reach * kMilliPerGpu) <=
                   kFewGpusPart * static_cast<double>(c.gpu_milli_capacity());
  it->second = reach > 0 && (node_sized || few);
  return it->second;
}

bool Reservations::FitsWhenEmpty(const Cluster& c, int node, const Request& r) {
  const NodeSpec& spec = c.spec(node);
  if (r.cpu_milli > spec.cpu_milli || r.memory_mib > spec.memory_mib) return false;
  if (r.gpu_count == 0) return true;
  if (r.mig() || spec.mode == NodeMode::kMig) return false;  // MIG requests hold nothing
  if (spec.gpu_count < r.gpu_count || !r.allowed.Contains(spec.model)) return false;
  if (!r.whole_gpus()) {
    const NodeMode form = r.memory_only() ? NodeMode::kMemoryOnly : NodeMode::kMemoryAndCompute;
    if (spec.mode != form) return false;
  }
  const int64_t gpu_memory = c.gpu_memory_mib(node);
  return r.MemoryOn(gpu_memory) <= gpu_memory;
}

size_t Reservations::ShapeHash::operator()(const ShapeKey& k) const {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (uint64_t v : {static_cast<uint64_t>(k.cpu), static_cast<uint64_t>(k.memory),
                     static_cast<uint64_t>(k.gpu_mem), static_cast<uint64_t>(k.gpu_count),
                     static_cast<uint64_t>(k.gpu_milli), k.allowed}) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}

Reservations::Deficit Reservations::Measure(const Cluster& c, int node, const Request& r) {
  Deficit d;
  d.version = c.version(node);
  d.fits_empty = FitsWhenEmpty(c, node, r);
  if (!d.fits_empty) return d;
  const NodeSpec& spec = c.spec(node);
  if (r.gpu_count > 0) {
    // The share each GPU must have free (a whole GPU: all of it), against the node's GPUs with
    // the most free, as many as the request asks.
    const int64_t gpu_memory = c.gpu_memory_mib(node);
    int32_t need = r.gpu_milli;
    if (r.whole_gpus()) need = kMilliPerGpu;
    if (r.memory_only() && gpu_memory > 0) {
      need = static_cast<int32_t>((r.MemoryOn(gpu_memory) * kMilliPerGpu + gpu_memory - 1) /
                                  gpu_memory);
    }
    std::array<int32_t, kMaxGpusPerNode> free{};
    const auto shares = c.gpu_share_free(node);
    std::copy(shares.begin(), shares.end(), free.begin());
    std::partial_sort(free.begin(), free.begin() + r.gpu_count, free.begin() + spec.gpu_count,
                      std::greater<>());
    for (int g = 0; g < r.gpu_count; ++g) {
      d.gpu += std::max(0, need - free[static_cast<size_t>(g)]);
    }
  }
  if (spec.cpu_milli > 0) {
    d.rest += static_cast<double>(std::max<int64_t>(0, r.cpu_milli - c.cpu_free(node))) /
              static_cast<double>(spec.cpu_milli);
  }
  if (spec.memory_mib > 0) {
    d.rest += static_cast<double>(std::max<int64_t>(0, r.memory_mib - c.memory_free(node))) /
              static_cast<double>(spec.memory_mib);
  }
  return d;
}

Reservations::ShapeKey Reservations::KeyOf(const Request& r) {
  return ShapeKey{r.cpu_milli, r.memory_mib,     r.gpu_mem_mib, r.gpu_count,
                  r.gpu_milli, r.allowed.bits(), r.gpu_modes};
}

void Reservations::Forget(const Cluster& c) {
  if (c.id() == cluster_id_) return;
  deficits_.clear();
  holds_.clear();
  cluster_id_ = c.id();
}

std::vector<Reservations::Deficit>& Reservations::DeficitsFor(const Cluster& c, const Request& r) {
  Forget(c);
  if (deficits_.size() >= 64) deficits_.clear();  // many shapes: start again
  auto [it, fresh] = deficits_.try_emplace(KeyOf(r));
  if (fresh) it->second.resize(static_cast<size_t>(c.node_count()));
  return it->second;
}

bool Reservations::Plan(const Cluster& c, std::span<const WaitingPod> waiting,
                        std::span<const uint8_t> eligible) {
  std::vector<Held> held;
  std::vector<int> holder_of(static_cast<size_t>(c.node_count()), -1);
  int held_gpus = 0;
  const double now = c.now();
  next_change_s_ = std::numeric_limits<double>::infinity();
  for (const WaitingPod& w : waiting) {
    if (!Holds(c, w.request)) continue;
    if (held_gpus >= kHeldGpus) break;
    if (now > 0 && now - w.waiting_since_s < hold_after_s_) {
      next_change_s_ = std::min(next_change_s_, w.waiting_since_s + hold_after_s_);
      continue;
    }
    std::vector<Deficit>& deficits = DeficitsFor(c, w.request);
    int best = -1;
    const Deficit* best_d = nullptr;
    for (int n = 0; n < c.node_count(); ++n) {
      Deficit& d = deficits[static_cast<size_t>(n)];
      if (d.version != c.version(n)) d = Measure(c, n, w.request);
      if (!d.fits_empty || holder_of[static_cast<size_t>(n)] >= 0) continue;
      if (!eligible.empty() && eligible[static_cast<size_t>(n)] == 0) continue;
      if (best_d == nullptr || d.gpu < best_d->gpu ||
          (d.gpu == best_d->gpu && d.rest < best_d->rest)) {
        best = n;
        best_d = &d;
      }
    }
    if (best < 0) continue;  // every node it fits is held by older pods
    holder_of[static_cast<size_t>(best)] = static_cast<int>(held.size());
    held_gpus += w.request.gpu_count;
    held.push_back(Held{w.key, best, w.request});
  }
  const bool changed =
      held.size() != held_.size() ||
      !std::equal(held.begin(), held.end(), held_.begin(),
                  [](const Held& a, const Held& b) { return a.key == b.key && a.node == b.node; });
  held_ = std::move(held);
  holder_of_ = std::move(holder_of);
  if (changed) ++generation_;
  return changed;
}

void Reservations::Clear() {
  if (!held_.empty()) ++generation_;
  held_.clear();
  holder_of_.clear();
  next_change_s_ = std::numeric_limits<double>::infinity();
}

const Reservations::Held* Reservations::On(int node) const {
  const auto n = static_cast<size_t>(node);
  if (node < 0 || n >= holder_of_.size() || holder_of_[n] < 0) return nullptr;
  return &held_[static_cast<size_t>(holder_of_[n])];
}

bool Reservations::Allows(const Cluster& c, int node, uint64_t key, const Request& r) const {
  const Held* h = On(node);
  if (h == nullptr || h->key == key) return true;
  if (r.gpu_count > 0) return false;
  // A pod that asks for no GPU may stay beside the holder's CPU and memory.
  return c.cpu_free(node) - r.cpu_milli >= h->request.cpu_milli &&
         c.memory_free(node) - r.memory_mib >= h->request.memory_mib;
}

void Reservations::Allowed(const Cluster& c, uint64_t key, const Request& r,
                           std::span<const int> candidates, std::vector<int>* out) const {
  out->clear();
  for (int n : candidates) {
    if (Allows(c, n, key, r)) out->push_back(n);
  }
}

void Reservations::AllowedNodes(const Cluster& c, uint64_t key, const Request& r,
                                std::vector<int>* out) const {
  out->clear();
  for (int n = 0; n < c.node_count(); ++n) {
    if (Allows(c, n, key, r)) out->push_back(n);
  }
}

}  // namespace tessera::placement
