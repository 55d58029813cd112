// The shape rule. Pure; no I/O.
#include "placement/fit.h"

namespace tessera::placement {

NodeShape ShapeOf(const NodeSpec& spec, int64_t gpu_memory_mib, const mig::GpuModel* mig_model) {
  NodeShape s;
  s.mode = spec.mode;
  s.gpu_count = spec.gpu_count;
  s.gpu_memory_mib = gpu_memory_mib;
  s.mig_model = mig_model;
  s.max_gpus_per_request = spec.max_gpus_per_request;
  return s;
}

FitResult ShapeFits(const Request& r, const NodeShape& node) {
  if (r.gpu_count == 0) return FitResult::kFits;
  if (r.mig() != (node.mode == NodeMode::kMig)) return FitResult::kMode;
  if (r.mig()) {
    if (node.mig_model == nullptr) return FitResult::kMode;
    if (MigProfileOn(*node.mig_model, r.mig_profile) == nullptr) return FitResult::kMigProfile;
    return node.gpu_count >= 1 ? FitResult::kFits : FitResult::kGpuCount;
  }
  if (!r.whole_gpus() && (node.mode == NodeMode::kWholeGpus ||
                          r.memory_only() != (node.mode == NodeMode::kMemoryOnly))) {
    return FitResult::kMode;
  }
  if (r.gpu_count > node.max_gpus_per_request) return FitResult::kMode;
  if (node.gpu_count < r.gpu_count) return FitResult::kGpuCount;
  if (r.gpu_mem_mib > node.gpu_memory_mib) return FitResult::kGpuSize;
  return FitResult::kFits;
}

bool IsShapeFailure(FitResult fit) {
  return fit == FitResult::kMode || fit == FitResult::kGpuCount || fit == FitResult::kGpuSize ||
         fit == FitResult::kMigProfile;
}

}  // namespace tessera::placement
