// The fit rule in Kubernetes terms. Pure; no I/O.
#include "k8s/fit.h"

#include <algorithm>

#include "mig/profiles.h"

namespace tessera::k8s {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// "tessera.io/gpu-mem=20, tessera.io/gpu-core=100": what the container asks, as it wrote it.
std::string Asked(const GpuRequest& r) {
  if (r.mig()) return MigResourceName(r.mig_profile) + "=1";
  std::string out;
  for (GpuResource res : {GpuResource::kMem, GpuResource::kCore, GpuResource::kCount}) {
    const uint64_t v = r.Of(res);
    if (v == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(GpuResourceName(res, r.ack)) + "=" +
           std::to_string(v);
  }
  return out;
}

}  // namespace

placement::NodeMode PlacementModeOf(NodeMode mode) {
  switch (mode) {
    case NodeMode::kMem:
      return placement::NodeMode::kMemoryOnly;
    case NodeMode::kExclusive:
      return placement::NodeMode::kWholeGpus;
    case NodeMode::kMig:
      return placement::NodeMode::kMig;
    case NodeMode::kCoreMem:
    case NodeMode::kShare:
    case NodeMode::kMps:
      break;
  }
  return placement::NodeMode::kMemoryAndCompute;
}

int MaxGpusPerRequest(NodeMode mode) {
  return mode == NodeMode::kMps ? 1 : placement::kMaxGpusPerNode;
}

placement::NodeShape NodeShapeOf(NodeMode mode, int gpu_count, Bytes gpu_memory,
                                 const mig::GpuModel* mig_model) {
  placement::NodeShape s;
  s.mode = PlacementModeOf(mode);
  s.gpu_count = gpu_count;
  s.gpu_memory_mib = static_cast<int64_t>(gpu_memory.count() / kMiB);
  s.mig_model = mode == NodeMode::kMig ? mig_model : nullptr;
  s.max_gpus_per_request = MaxGpusPerRequest(mode);
  return s;
}

Result<placement::Request> PlacementRequestOf(const GpuRequest& r, int64_t cpu_milli,
                                              int64_t memory_mib, placement::ModelSet allowed) {
  if (r.mig())
    return placement::RequestForMigProfile(cpu_milli, memory_mib, r.mig_profile, allowed);
  const int gpus = static_cast<int>(r.Gpus());
  if (gpus == 0) {
    placement::Request cpu;
    cpu.cpu_milli = cpu_milli;
    cpu.memory_mib = memory_mib;
    cpu.allowed = allowed;
    return cpu;
  }
  const bool whole = r.core >= 100 || (r.core == 0 && r.mem_gib == 0);
  const int64_t mem_mib = static_cast<int64_t>(r.mem_gib) * 1024 / gpus;
  return placement::RequestFromShares(cpu_milli, memory_mib, gpus, mem_mib,
                                      whole ? 100 : static_cast<int>(r.core), allowed);
}

int ModeTag(NodeMode mode) { return static_cast<int>(mode); }

placement::GpuMode PlacementGpuModeOf(NodeMode mode) {
  return placement::GpuMode{PlacementModeOf(mode), MaxGpusPerRequest(mode) == 1,
                            static_cast<uint8_t>(ModeTag(mode))};
}

Result<PodPlacement> PlacementRequestsOf(const PodDemand& d, placement::ModelSet allowed) {
  PodPlacement out;
  constexpr int64_t kMiBytes = int64_t{1} << 20;
  const int64_t memory_mib = (d.memory_bytes + kMiBytes - 1) / kMiBytes;
  if (d.asks.empty()) {
    placement::Request r;
    r.cpu_milli = d.cpu_milli;
    r.memory_mib = memory_mib;
    out.requests.push_back(r);
    out.names.emplace_back();
    out.asked.emplace_back();
    return out;
  }
  out.primary = 0;
  for (size_t i = 0; i < d.asks.size(); ++i) {
    if (!d.asks[i].init) {
      out.primary = i;
      break;
    }
  }
  for (size_t i = 0; i < d.asks.size(); ++i) {
    const ContainerAsk& a = d.asks[i];
    const bool primary = i == out.primary;
    auto r =
        PlacementRequestOf(a.gpu, primary ? d.cpu_milli : 0, primary ? memory_mib : 0, allowed);
    if (!r.ok()) return Result<PodPlacement>::Error("container " + a.name + ": " + r.error());
    if (!d.allowed_modes.empty()) {
      r->gpu_modes = 0;
      for (NodeMode m : d.allowed_modes) r->gpu_modes |= uint32_t{1} << ModeTag(m);
    }
    out.requests.push_back(*r);
    out.names.push_back(a.name);
    out.asked.push_back(a.gpu);
  }
  return out;
}

placement::FitResult ShapeFitOf(const GpuRequest& request, const placement::NodeShape& node) {
  auto r = PlacementRequestOf(request);
  if (!r.ok()) return placement::FitResult::kMode;
  return placement::ShapeFits(*r, node);
}

std::string ShapeRefusal(placement::FitResult fit, const GpuRequest& r, NodeMode mode,
                         const placement::NodeShape& node) {
  const std::string mode_name(NodeModeName(mode));
  const std::string asked = Asked(r);
  switch (fit) {
    case placement::FitResult::kMode:
      if (r.mig() && mode != NodeMode::kMig) {
        return "node mode " + mode_name + " serves no MIG instances (" + kResourceMigPrefix +
               "<profile>); mig nodes do";
      }
      if (mode == NodeMode::kMig) {
        return std::string("node mode mig gives MIG instances only (") + kResourceMigPrefix +
               "<profile>: 1); it asks for a share (" + asked + ")";
      }
      if (mode == NodeMode::kExclusive) {
        return "node mode exclusive (tessera.io/gpu.schedule) takes whole GPUs only (" +
               std::string(GpuResourceName(GpuResource::kCount, r.ack)) + " alone, or " +
               std::string(GpuResourceName(GpuResource::kCore, r.ack)) +
               "=100); it asks for a share (" + asked + ")";
      }
      if (r.core == 0 && r.mem_gib != 0 && mode != NodeMode::kMem) {
        return "node mode " + mode_name + " does not take a memory-only share (" +
               std::string(GpuResourceName(GpuResource::kMem, r.ack)) + " without " +
               std::string(GpuResourceName(GpuResource::kCore, r.ack)) + "); mode mem does";
      }
      if (r.core != 0 && r.core < 100 && mode == NodeMode::kMem) {
        return "node mode mem does not reserve GPU time (" +
               std::string(GpuResourceName(GpuResource::kCore, r.ack)) +
               "); modes core_mem, share and mps do";
      }
      if (static_cast<int>(r.Gpus()) > node.max_gpus_per_request) {
        return "node mode " + mode_name + " gives a container " +
               (node.max_gpus_per_request == 1
                    ? std::string("one GPU")
                    : std::to_string(node.max_gpus_per_request) + " GPUs") +
               " (that GPU's MPS server); it asks " +
               std::string(GpuResourceName(GpuResource::kCount, r.ack)) + "=" +
               std::to_string(r.Gpus());
      }
      return "the request (" + asked + ") does not match node mode " + mode_name;
    case placement::FitResult::kGpuCount:
      return "node has fewer GPUs than " +
             std::string(GpuResourceName(GpuResource::kCount, r.ack)) + "=" +
             std::to_string(r.Gpus()) + " (it has " + std::to_string(node.gpu_count) + ")";
    case placement::FitResult::kGpuSize: {
      const uint64_t gpus = std::max<uint64_t>(r.Gpus(), 1);
      return "it asks " + asked + ", " + FormatBytes(Bytes(r.mem_gib * (kMiB << 10) / gpus)) +
             " on each of " + std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") +
             ", more than the node's GPUs have (" +
             FormatBytes(Bytes(static_cast<uint64_t>(node.gpu_memory_mib) * kMiB)) + " each)";
    }
    case placement::FitResult::kMigProfile:
      if (node.mig_model != nullptr) {
        return "the node's GPUs (" + std::string(node.mig_model->name) + ") have no MIG profile " +
               r.mig_profile + "; theirs: " + mig::ProfileNames(*node.mig_model);
      }
      return "the node's GPUs have no MIG profile " + r.mig_profile;
    default:
      break;
  }
  return "it asks " + asked + ": " + std::string(placement::FitResultName(fit));
}

Bytes WholeGpuCap(const GpuRequest& r, NodeMode mode, Bytes gpu_memory) {
  if (r.mem_gib == 0 || mode == NodeMode::kMem || mode == NodeMode::kExclusive) return gpu_memory;
  const uint64_t gpus = std::max<uint64_t>(r.Gpus(), 1);
  const uint64_t per_gpu = static_cast<uint64_t>(r.mem_gib) * 1024 / gpus * kMiB;
  return Bytes(std::min<uint64_t>(per_gpu, gpu_memory.count()));
}

}  // namespace tessera::k8s
