// Stranded GPUs (see stranded.h). Reads the cluster only.
#include "placement/stranded.h"

#include <algorithm>

namespace tessera::placement {

bool GpuHasFree(const Cluster& cluster, int node, int gpu) {
  const auto g = static_cast<size_t>(gpu);
  const int64_t cap = cluster.gpu_memory_mib(node);
  const bool memory = cap > 0 && cluster.gpu_memory_free(node)[g] * kMilliPerGpu / cap > 0;
  if (cluster.spec(node).ModeOf(gpu) == NodeMode::kMemoryOnly) return memory;
  return memory || cluster.gpu_milli_free(node)[g] > 0;
}

uint32_t StrandedGpus(const Cluster& cluster, int node, std::span<const Request> demand) {
  if (demand.empty()) return 0;
  const int gpus = cluster.spec(node).gpu_count;
  uint32_t free = 0;
  for (int g = 0; g < gpus; ++g) {
    if (GpuHasFree(cluster, node, g)) free |= uint32_t{1} << g;
  }
  uint32_t usable = 0;
  for (const Request& r : demand) {
    if (usable == free) break;
    if (r.gpu_count == 0 || cluster.Fits(node, r) != FitResult::kFits) continue;
    usable |= cluster.FittingGpus(node, r);
  }
  return free & ~usable;
}

StrandedCount CountStranded(const Cluster& cluster, std::span<const Request> demand) {
  StrandedCount out;
  for (int n = 0; n < cluster.node_count(); ++n) {
    const uint32_t mask = StrandedGpus(cluster, n, demand);
    for (int g = 0; g < cluster.spec(n).gpu_count; ++g) {
      if (((mask >> g) & 1) == 0) continue;
      const bool memory_only = cluster.spec(n).ModeOf(g) == NodeMode::kMemoryOnly;
      ++out.gpus;
      out.free_milli += memory_only ? cluster.gpu_share_free(n)[static_cast<size_t>(g)]
                                    : cluster.gpu_milli_free(n)[static_cast<size_t>(g)];
    }
  }
  return out;
}

namespace {

bool SameRequest(const Request& a, const Request& b) {
  return a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib && a.gpu_count == b.gpu_count &&
         a.gpu_milli == b.gpu_milli && a.gpu_mem_mib == b.gpu_mem_mib && a.allowed == b.allowed &&
         a.mig_profile == b.mig_profile && a.gpu_modes == b.gpu_modes;
}

}  // namespace

std::vector<Request> StrandingDemand(std::span<const Request> waiting,
                                     const TargetWorkload& workload) {
  std::vector<Request> out;
  if (!waiting.empty()) {
    // Each distinct request once: a thousand waiting pods are usually a few shapes.
    for (const Request& r : waiting) {
      if (std::none_of(out.begin(), out.end(), [&](const Request& o) { return SameRequest(o, r); }))
        out.push_back(r);
    }
    return out;
  }
  for (const TargetShape& s : workload.shapes()) {
    if (s.gpu_count == 0) continue;
    Request r;
    r.cpu_milli = s.cpu_milli;
    r.gpu_count = s.gpu_count;
    r.gpu_milli = s.gpu_milli;
    r.gpu_mem_mib = s.gpu_mem_mib;
    r.allowed = s.allowed;
    out.push_back(r);
  }
  return out;
}

}  // namespace tessera::placement
