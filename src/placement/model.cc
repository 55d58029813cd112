// Model tables, request validation and the share-form constructor. Pure values; no I/O.
#include "placement/model.h"

#include <algorithm>
#include <array>
#include <utility>

#include "placement/mig.h"

namespace tessera::placement {

std::string_view NodeModeName(NodeMode mode) {
  switch (mode) {
    case NodeMode::kMemoryOnly:
      return "memory-only";
    case NodeMode::kWholeGpus:
      return "whole-gpu";
    case NodeMode::kMig:
      return "mig";
    case NodeMode::kMemoryAndCompute:
      break;
  }
  return "memory+compute";
}

int64_t KnownModelMemoryMib(std::string_view name) {
  // The openb trace's models (G2 and G3 are anonymised; their nominal sizes are 20 and 30 GB) and
  // a few data-centre GPUs people share today.
  static constexpr std::array<std::pair<std::string_view, int64_t>, 14> kKnown = {{
      {"P100", 16 * 1024},
      {"T4", 16 * 1024},
      {"V100M16", 16 * 1024},
      {"V100M32", 32 * 1024},
      {"A10", 24 * 1024},
      {"G2", 20 * 1024},
      {"G3", 30 * 1024},
      {"A30", 24 * 1024},
      {"L4", 24 * 1024},
      {"A100", 40 * 1024},
      {"A100-80GB", 80 * 1024},
      {"H100", 80 * 1024},
      {"H200", 141 * 1024},
      {"L40S", 48 * 1024},
  }};
  for (const auto& [known, mib] : kKnown) {
    if (known == name) return mib;
  }
  return 0;
}

Result<int> ModelTable::Intern(std::string_view name, int64_t memory_mib) {
  const int found = Find(name);
  if (found >= 0) return found;
  if (size() >= kMaxModels) {
    return Result<int>::Error("GPU model \"" + std::string(name) + "\": more than " +
                              std::to_string(kMaxModels) + " distinct models");
  }
  if (memory_mib <= 0) memory_mib = KnownModelMemoryMib(name);
  if (memory_mib <= 0) memory_mib = 16 * 1024;
  models_.push_back(GpuModel{std::string(name), memory_mib});
  return size() - 1;
}

int ModelTable::Find(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int64_t Request::MemoryOn(int64_t gpu_memory_mib) const {
  if (gpu_milli >= kMilliPerGpu) return gpu_memory_mib;
  if (gpu_mem_mib == kProportionalMemory) return gpu_memory_mib * gpu_milli / kMilliPerGpu;
  return gpu_mem_mib;
}

Status ValidateRequest(const Request& r, std::string_view what) {
  const std::string w(what);
  if (r.cpu_milli < 0) return Status::Error(w + ": negative CPU request");
  if (r.memory_mib < 0) return Status::Error(w + ": negative memory request");
  if (r.gpu_count < 0 || r.gpu_count > kMaxGpusPerNode) {
    return Status::Error(w + ": GPU count " + std::to_string(r.gpu_count) +
                         " is out of range; expected 0 to " + std::to_string(kMaxGpusPerNode));
  }
  if (r.gpu_milli < 0 || r.gpu_milli > kMilliPerGpu) {
    return Status::Error(w + ": per-GPU share " + std::to_string(r.gpu_milli) +
                         " milli is out of range; expected 0 to 1000");
  }
  if (r.gpu_count == 0 && (r.gpu_milli != 0 || r.gpu_mem_mib > 0)) {
    return Status::Error(w + ": asks for a GPU share but for 0 GPUs");
  }
  if (r.gpu_count > 0 && r.gpu_milli == 0 && r.gpu_mem_mib <= 0) {
    return Status::Error(w + ": asks for " + std::to_string(r.gpu_count) +
                         " GPU(s) but for neither compute nor memory on them");
  }
  if (r.gpu_mem_mib < kProportionalMemory) return Status::Error(w + ": negative GPU memory");
  if (r.mig() && (r.mig_profile >= MigProfileCount() || r.gpu_count != 1 || r.gpu_mem_mib != 0)) {
    return Status::Error(w +
                         ": a MIG request asks for exactly one instance of a known profile "
                         "and nothing else of the GPU");
  }
  return Status::Ok();
}

Result<Request> RequestFromShares(int64_t cpu_milli, int64_t memory_mib, int gpu_count,
                                  int64_t gpu_mem_mib, int gpu_core_percent, ModelSet allowed) {
  if (gpu_core_percent < 0 || gpu_core_percent > 100) {
    return Result<Request>::Error("gpu-core=" + std::to_string(gpu_core_percent) +
                                  ": expected a percent of one GPU from 0 to 100");
  }
  if (gpu_mem_mib < 0 || gpu_mem_mib > int64_t{1} << 30) {
    return Result<Request>::Error("gpu-mem=" + std::to_string(gpu_mem_mib) +
                                  " MiB: expected MiB from 0 to 1073741824");
  }
  Request r;
  r.cpu_milli = cpu_milli;
  r.memory_mib = memory_mib;
  r.gpu_count = gpu_count;
  r.gpu_milli = gpu_core_percent * 10;
  // No memory given with a compute share: the same fraction of the GPU's memory.
  r.gpu_mem_mib = gpu_mem_mib == 0 && gpu_core_percent > 0 ? kProportionalMemory : gpu_mem_mib;
  r.allowed = allowed;
  Status valid = ValidateRequest(r, "gpu-mem/gpu-core request");
  if (!valid.ok()) return valid;
  return r;
}

Result<Request> RequestFromShareForm(int64_t cpu_milli, int64_t memory_mib, int gpu_count,
                                     int64_t gpu_mem_gib, int gpu_core_percent, ModelSet allowed) {
  if (gpu_core_percent < 0 || gpu_core_percent > 100 || gpu_core_percent % 5 != 0) {
    return Result<Request>::Error("gpu-core=" + std::to_string(gpu_core_percent) +
                                  ": expected a percent of one GPU from 0 to 100 in steps of 5");
  }
  if (gpu_mem_gib < 0 || gpu_mem_gib > 1 << 20) {
    return Result<Request>::Error("gpu-mem=" + std::to_string(gpu_mem_gib) +
                                  ": expected GiB from 0 to 1048576");
  }
  return RequestFromShares(cpu_milli, memory_mib, gpu_count, gpu_mem_gib * 1024, gpu_core_percent,
                           allowed);
}

Result<Request> RequestForMigProfile(int64_t cpu_milli, int64_t memory_mib,
                                     std::string_view profile, ModelSet allowed) {
  const int id = MigProfileId(profile);
  if (id < 0) {
    return Result<Request>::Error("MIG profile \"" + std::string(profile) +
                                  "\": no GPU model has it; expected one of " +
                                  mig::AllProfileNamesText());
  }
  Request r;
  r.cpu_milli = cpu_milli;
  r.memory_mib = memory_mib;
  r.gpu_count = 1;
  // The compute share on the first model with the profile, for demand totals only (every model
  // with a profile of that name gives it the same share but for rounding; Cluster counts the
  // share of the model it lands on).
  r.gpu_milli = 1;
  for (const mig::GpuModel& m : mig::GpuModels()) {
    if (const mig::MigProfile* p = MigProfileOn(m, id)) {
      r.gpu_milli = std::max(1, p->compute_slices * kMilliPerGpu / m.compute_slices);
      break;
    }
  }
  r.gpu_mem_mib = 0;
  r.allowed = allowed;
  r.mig_profile = id;
  Status valid = ValidateRequest(r, "MIG request");
  if (!valid.ok()) return valid;
  return r;
}

}  // namespace tessera::placement
