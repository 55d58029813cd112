// Stranded GPUs (see stranded.h). Reads the cluster only.
#include "placement/stranded.h"

namespace tessera::placement {

bool GpuHasFree(const Cluster& cluster, int node, int gpu) {
  const auto g = static_cast<size_t>(gpu);
  const int64_t cap = cluster.gpu_memory_mib(node);
  const bool memory = cap > 0 && cluster.gpu_memory_free(node)[g] * kMilliPerGpu / cap > 0;
  if (cluster.spec(node).mode == NodeMode::kMemoryOnly) return memory;
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
    const bool memory_only = cluster.spec(n).mode == NodeMode::kMemoryOnly;
    for (int g = 0; g < cluster.spec(n).gpu_count; ++g) {
      if (((mask >> g) & 1) == 0) continue;
      ++out.gpus;
      out.free_milli += memory_only ? cluster.gpu_share_free(n)[static_cast<size_t>(g)]
                                    : cluster.gpu_milli_free(n)[static_cast<size_t>(g)];
    }
  }
  return out;
}

std::vector<Request> StrandingDemand(std::span<const Request> waiting,
                                     const TargetWorkload& workload) {
  if (!waiting.empty()) return {waiting.begin(), waiting.end()};
  std::vector<Request> out;
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
