// Cluster state, the fit rules and applying/removing assignments. No policy, no I/O.
#include "placement/cluster.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <utility>

namespace tessera::placement {

std::string_view FitResultName(FitResult result) {
  switch (result) {
    case FitResult::kFits:
      return "fits";
    case FitResult::kCpu:
      return "not enough free CPU";
    case FitResult::kMemory:
      return "not enough free memory";
    case FitResult::kModel:
      return "GPU model not allowed";
    case FitResult::kMode:
      return "share form does not match the node's mode";
    case FitResult::kGpuCount:
      return "node has too few GPUs";
    case FitResult::kGpuCompute:
      return "too few GPUs with the compute share free";
    case FitResult::kGpuMemory:
      return "too few GPUs with the GPU memory free";
  }
  return "?";
}

uint64_t Cluster::InstanceId::Next() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

Cluster::Cluster(ModelTable models, std::vector<NodeSpec> nodes)
    : models_(std::move(models)), specs_(std::move(nodes)) {
  const size_t n = specs_.size();
  offset_.resize(n);
  gpu_mem_cap_.resize(n);
  cpu_free_.resize(n);
  mem_free_.resize(n);
  whole_free_.resize(n);
  share_total_.resize(n);
  version_.assign(n, 0);
  int32_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const NodeSpec& s = specs_[i];
    offset_[i] = next;
    next += s.gpu_count;
    gpu_mem_cap_[i] = s.gpu_count > 0 ? models_.model(s.model).memory_mib : 0;
    cpu_free_[i] = s.cpu_milli;
    mem_free_[i] = s.memory_mib;
    whole_free_[i] = s.gpu_count;
    share_total_[i] = int64_t{s.gpu_count} * kMilliPerGpu;
    for (int g = 0; g < s.gpu_count; ++g) {
      gpu_milli_free_.push_back(kMilliPerGpu);
      gpu_mem_free_.push_back(gpu_mem_cap_[i]);
      gpu_share_free_.push_back(kMilliPerGpu);
    }
  }
  gpu_capacity_milli_ = int64_t{next} * kMilliPerGpu;
}

Result<Cluster> Cluster::Create(ModelTable models, std::vector<NodeSpec> nodes) {
  for (const NodeSpec& s : nodes) {
    if (s.cpu_milli < 0 || s.memory_mib < 0) {
      return Result<Cluster>::Error("node \"" + s.name + "\": negative CPU or memory");
    }
    if (s.gpu_count < 0 || s.gpu_count > kMaxGpusPerNode) {
      return Result<Cluster>::Error("node \"" + s.name + "\": " + std::to_string(s.gpu_count) +
                                    " GPUs; expected 0 to " + std::to_string(kMaxGpusPerNode));
    }
    if (s.gpu_count > 0 && (s.model < 0 || s.model >= models.size())) {
      return Result<Cluster>::Error("node \"" + s.name + "\": GPUs of an unknown model");
    }
  }
  return Cluster(std::move(models), std::move(nodes));
}

bool Cluster::GpuFits(int node, int gpu, const Request& r) const {
  const size_t i = offset(node) + static_cast<size_t>(gpu);
  const int64_t cap = gpu_mem_cap_[static_cast<size_t>(node)];
  if (r.whole_gpus()) return gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == cap;
  return gpu_milli_free_[i] >= r.gpu_milli && gpu_mem_free_[i] >= r.MemoryOn(cap);
}

uint32_t Cluster::FittingGpus(int node, const Request& r) const {
  uint32_t mask = 0;
  for (int g = 0; g < spec(node).gpu_count; ++g) {
    if (GpuFits(node, g, r)) mask |= uint32_t{1} << g;
  }
  return mask;
}

FitResult Cluster::Fits(int node, const Request& r) const {
  const size_t n = static_cast<size_t>(node);
  if (cpu_free_[n] < r.cpu_milli) return FitResult::kCpu;
  if (mem_free_[n] < r.memory_mib) return FitResult::kMemory;
  if (r.gpu_count == 0) return FitResult::kFits;
  const NodeSpec& s = specs_[n];
  if (s.gpu_count == 0 || !r.allowed.Contains(s.model)) return FitResult::kModel;
  if (!r.whole_gpus() && (s.mode == NodeMode::kWholeGpus ||
                          r.memory_only() != (s.mode == NodeMode::kMemoryOnly))) {
    return FitResult::kMode;
  }
  if (s.gpu_count < r.gpu_count) return FitResult::kGpuCount;
  if (r.whole_gpus()) {
    return whole_free_[n] >= r.gpu_count ? FitResult::kFits : FitResult::kGpuCompute;
  }
  const int64_t need_mem = r.MemoryOn(gpu_mem_cap_[n]);
  int compute_ok = 0;
  int both_ok = 0;
  const size_t base = offset(node);
  for (int g = 0; g < s.gpu_count; ++g) {
    const size_t i = base + static_cast<size_t>(g);
    if (gpu_milli_free_[i] >= r.gpu_milli) {
      ++compute_ok;
      if (gpu_mem_free_[i] >= need_mem) ++both_ok;
    }
  }
  if (compute_ok < r.gpu_count) return FitResult::kGpuCompute;
  if (both_ok < r.gpu_count) return FitResult::kGpuMemory;
  return FitResult::kFits;
}

void Cluster::RefreshGpu(int node, int gpu) {
  const size_t n = static_cast<size_t>(node);
  const size_t i = offset(node) + static_cast<size_t>(gpu);
  const int64_t cap = gpu_mem_cap_[n];
  const int32_t mem_share =
      cap > 0 ? static_cast<int32_t>(gpu_mem_free_[i] * kMilliPerGpu / cap) : 0;
  const int32_t share =
      specs_[n].mode == NodeMode::kMemoryOnly ? mem_share : std::min(gpu_milli_free_[i], mem_share);
  share_total_[n] += share - gpu_share_free_[i];
  gpu_share_free_[i] = share;
}

Status Cluster::Place(const Request& r, const Assignment& a) {
  if (a.node < 0 || a.node >= node_count()) {
    return Status::Error("assignment to node " + std::to_string(a.node) + ": no such node");
  }
  const NodeSpec& s = spec(a.node);
  const FitResult fit = Fits(a.node, r);
  if (fit != FitResult::kFits) {
    return Status::Error("request does not fit node \"" + s.name +
                         "\": " + std::string(FitResultName(fit)));
  }
  if (std::popcount(a.gpus) != r.gpu_count || (s.gpu_count < 32 && (a.gpus >> s.gpu_count) != 0)) {
    return Status::Error(
        "assignment on node \"" + s.name + "\" names " + std::to_string(std::popcount(a.gpus)) +
        " GPUs (mask " + std::to_string(a.gpus) + "); the request needs " +
        std::to_string(r.gpu_count) + " of the node's " + std::to_string(s.gpu_count));
  }
  for (int g = 0; g < s.gpu_count; ++g) {
    if (((a.gpus >> g) & 1) != 0 && !GpuFits(a.node, g, r)) {
      return Status::Error("GPU " + std::to_string(g) + " of node \"" + s.name +
                           "\" cannot take the request's share");
    }
  }
  const size_t n = static_cast<size_t>(a.node);
  cpu_free_[n] -= r.cpu_milli;
  mem_free_[n] -= r.memory_mib;
  const int32_t milli = r.whole_gpus() ? kMilliPerGpu : r.gpu_milli;
  const int64_t mem = r.MemoryOn(gpu_mem_cap_[n]);
  for (int g = 0; g < s.gpu_count; ++g) {
    if (((a.gpus >> g) & 1) == 0) continue;
    const size_t i = offset(a.node) + static_cast<size_t>(g);
    const bool was_whole =
        gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == gpu_mem_cap_[n];
    gpu_milli_free_[i] -= milli;
    gpu_mem_free_[i] -= mem;
    const bool is_whole = gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == gpu_mem_cap_[n];
    whole_free_[n] -= (was_whole && !is_whole) ? 1 : 0;
    RefreshGpu(a.node, g);
  }
  gpu_allocated_milli_ += r.total_gpu_milli();
  ++version_[n];
  return Status::Ok();
}

Status Cluster::Remove(const Request& r, const Assignment& a) {
  if (a.node < 0 || a.node >= node_count()) {
    return Status::Error("removal from node " + std::to_string(a.node) + ": no such node");
  }
  const NodeSpec& s = spec(a.node);
  const size_t n = static_cast<size_t>(a.node);
  const int32_t milli = r.whole_gpus() ? kMilliPerGpu : r.gpu_milli;
  const int64_t mem = r.gpu_count > 0 ? r.MemoryOn(gpu_mem_cap_[n]) : 0;
  bool consistent =
      cpu_free_[n] + r.cpu_milli <= s.cpu_milli && mem_free_[n] + r.memory_mib <= s.memory_mib &&
      std::popcount(a.gpus) == r.gpu_count && (s.gpu_count >= 32 || (a.gpus >> s.gpu_count) == 0);
  for (int g = 0; consistent && g < s.gpu_count; ++g) {
    if (((a.gpus >> g) & 1) == 0) continue;
    const size_t i = offset(a.node) + static_cast<size_t>(g);
    consistent =
        gpu_milli_free_[i] + milli <= kMilliPerGpu && gpu_mem_free_[i] + mem <= gpu_mem_cap_[n];
  }
  if (!consistent) {
    return Status::Error("removal from node \"" + s.name +
                         "\" gives back more than was placed there");
  }
  cpu_free_[n] += r.cpu_milli;
  mem_free_[n] += r.memory_mib;
  for (int g = 0; g < s.gpu_count; ++g) {
    if (((a.gpus >> g) & 1) == 0) continue;
    const size_t i = offset(a.node) + static_cast<size_t>(g);
    gpu_milli_free_[i] += milli;
    gpu_mem_free_[i] += mem;
    if (gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == gpu_mem_cap_[n]) ++whole_free_[n];
    RefreshGpu(a.node, g);
  }
  gpu_allocated_milli_ -= r.total_gpu_milli();
  ++version_[n];
  return Status::Ok();
}

}  // namespace tessera::placement
