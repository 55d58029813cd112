// Cluster state, the fit rules and applying/removing assignments. No policy, no I/O.
#include "placement/cluster.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "placement/fit.h"

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
    case FitResult::kGpuSize:
      return "the node's GPUs are smaller than the memory asked on each";
    case FitResult::kGpuCompute:
      return "too few GPUs with the compute share free";
    case FitResult::kGpuMemory:
      return "too few GPUs with the GPU memory free";
    case FitResult::kMigProfile:
      return "the GPU model has no such MIG profile";
    case FitResult::kMigInstance:
      return "no free instance of the MIG profile";
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
  mig_.resize(n);
  starts_.resize(n);
  oldest_start_.assign(n, std::numeric_limits<double>::infinity());
  int32_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    const NodeSpec& s = specs_[i];
    offset_[i] = next;
    next += s.gpu_count;
    gpu_mem_cap_[i] = s.gpu_count > 0 ? models_.model(s.model).memory_mib : 0;
    cpu_free_[i] = s.cpu_milli;
    mem_free_[i] = s.memory_mib;
    whole_free_[i] = s.gpu_count;
    const bool mig = s.mode == NodeMode::kMig;
    share_total_[i] = mig ? 0 : int64_t{s.gpu_count} * kMilliPerGpu;
    for (int g = 0; g < s.gpu_count; ++g) {
      gpu_milli_free_.push_back(kMilliPerGpu);
      gpu_mem_free_.push_back(gpu_mem_cap_[i]);
      gpu_share_free_.push_back(mig ? 0 : kMilliPerGpu);
      if (mig) mig_[i].push_back(MigGpu{s.mig_gpus[static_cast<size_t>(g)], 0});
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
    if (s.mode_tag > kMaxGpuModeTag) {
      return Result<Cluster>::Error("node \"" + s.name + "\": mode tag " +
                                    std::to_string(s.mode_tag) + "; expected 0 to " +
                                    std::to_string(kMaxGpuModeTag));
    }
    if (s.mixed()) {
      if (s.mode == NodeMode::kMig || static_cast<int>(s.gpu_modes.size()) != s.gpu_count) {
        return Result<Cluster>::Error(
            "node \"" + s.name + "\": " + std::to_string(s.gpu_modes.size()) + " GPU modes for " +
            std::to_string(s.gpu_count) + " GPUs in mode " + std::string(NodeModeName(s.mode)) +
            "; expected one per GPU, on a node not in mode mig");
      }
      for (size_t g = 0; g < s.gpu_modes.size(); ++g) {
        const GpuMode& m = s.gpu_modes[g];
        if (m.mode == NodeMode::kMig || m.tag > kMaxGpuModeTag) {
          return Result<Cluster>::Error(
              "node \"" + s.name + "\": GPU " + std::to_string(g) + " in mode " +
              std::string(NodeModeName(m.mode)) + " (tag " + std::to_string(m.tag) +
              "); expected memory+compute, memory-only or whole-gpu, tag 0 to " +
              std::to_string(kMaxGpuModeTag));
        }
      }
    }
    if (s.mode != NodeMode::kMig) {
      if (!s.mig_gpus.empty() || s.mig_relayout) {
        return Result<Cluster>::Error("node \"" + s.name + "\": MIG layouts on a node in mode " +
                                      std::string(NodeModeName(s.mode)) + "; expected mode mig");
      }
      continue;
    }
    if (static_cast<int>(s.mig_gpus.size()) != s.gpu_count || s.gpu_count == 0) {
      return Result<Cluster>::Error("node \"" + s.name + "\": " + std::to_string(s.gpu_count) +
                                    " GPUs but " + std::to_string(s.mig_gpus.size()) +
                                    " MIG layouts; expected one layout per GPU");
    }
    for (size_t g = 0; g < s.mig_gpus.size(); ++g) {
      const mig::Layout& l = s.mig_gpus[g];
      if (l.model == nullptr || l.model != s.mig_gpus.front().model) {
        return Result<Cluster>::Error("node \"" + s.name + "\": GPU " + std::to_string(g) +
                                      "'s MIG layout has no model or another model than GPU 0's; "
                                      "expected one model per node");
      }
      if (Status ok = mig::CheckLayout(l); !ok.ok()) {
        return Result<Cluster>::Error("node \"" + s.name + "\": GPU " + std::to_string(g) + ": " +
                                      ok.message());
      }
    }
  }
  return Cluster(std::move(models), std::move(nodes));
}

bool Cluster::GpuFits(int node, int gpu, const Request& r) const {
  const NodeSpec& s = spec(node);
  if (r.mig() || s.mode == NodeMode::kMig) return r.mig() && MigGpuFits(node, gpu, r);
  if (s.mixed()) {
    if (!GpuModeTakes(s.gpu_modes[static_cast<size_t>(gpu)], r)) return false;
    if (r.gpu_count > 1) return ((SpanGroup(node, r) >> gpu) & 1) != 0;
  }
  return GpuStateFits(node, gpu, r);
}

bool Cluster::GpuStateFits(int node, int gpu, const Request& r) const {
  const size_t i = offset(node) + static_cast<size_t>(gpu);
  const int64_t cap = gpu_mem_cap_[static_cast<size_t>(node)];
  if (r.whole_gpus()) return gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == cap;
  return gpu_milli_free_[i] >= r.gpu_milli && gpu_mem_free_[i] >= r.MemoryOn(cap);
}

uint32_t Cluster::SpanGroup(int node, const Request& r) const {
  const NodeSpec& s = spec(node);
  std::array<uint32_t, kMaxGpuModeTag + 1> fit{};
  for (int g = 0; g < s.gpu_count; ++g) {
    const GpuMode& m = s.gpu_modes[static_cast<size_t>(g)];
    if (GpuModeTakes(m, r) && GpuStateFits(node, g, r)) fit[m.tag] |= uint32_t{1} << g;
  }
  // The mode whose lowest GPU comes first, among those with enough.
  uint32_t best = 0;
  for (const uint32_t mask : fit) {
    if (std::popcount(mask) < r.gpu_count) continue;
    if (best == 0 || std::countr_zero(mask) < std::countr_zero(best)) best = mask;
  }
  return best;
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
  if (s.mixed()) return MixedFits(node, r);
  if (!r.AcceptsModeTag(s.mode_tag)) return FitResult::kMode;
  const FitResult shape = ShapeFits(r, ShapeOf(s, gpu_mem_cap_[n], mig_model(node)));
  if (shape != FitResult::kFits) return shape;
  if (r.mig()) return MigFits(node, r);
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

FitResult Cluster::MixedFits(int node, const Request& r) const {
  const NodeSpec& s = spec(node);
  const size_t n = static_cast<size_t>(node);
  // Per mode (tag): its GPUs that take the request's form, those with the compute free, and those
  // with compute and memory free. A request's GPUs are all of one mode (the device plugin refuses
  // a container whose GPUs differ in mode).
  std::array<int, kMaxGpuModeTag + 1> shape{}, compute_ok{}, both_ok{};
  const int64_t need_mem = r.whole_gpus() ? gpu_mem_cap_[n] : r.MemoryOn(gpu_mem_cap_[n]);
  const int32_t need_milli = r.whole_gpus() ? kMilliPerGpu : r.gpu_milli;
  bool any = false;
  for (int g = 0; g < s.gpu_count; ++g) {
    const GpuMode& m = s.gpu_modes[static_cast<size_t>(g)];
    if (!GpuModeTakes(m, r)) continue;
    any = true;
    ++shape[m.tag];
    const size_t i = offset(node) + static_cast<size_t>(g);
    if (gpu_milli_free_[i] >= need_milli) {
      ++compute_ok[m.tag];
      if (gpu_mem_free_[i] >= need_mem) ++both_ok[m.tag];
    }
  }
  if (!any) return FitResult::kMode;
  auto most = [](const std::array<int, kMaxGpuModeTag + 1>& a) {
    return *std::max_element(a.begin(), a.end());
  };
  if (most(shape) < r.gpu_count) return FitResult::kGpuCount;
  if (r.gpu_mem_mib > gpu_mem_cap_[n]) return FitResult::kGpuSize;
  if (most(both_ok) >= r.gpu_count) return FitResult::kFits;
  if (r.whole_gpus() || most(compute_ok) < r.gpu_count) return FitResult::kGpuCompute;
  return FitResult::kGpuMemory;
}

void Cluster::RefreshGpu(int node, int gpu) {
  const size_t n = static_cast<size_t>(node);
  const size_t i = offset(node) + static_cast<size_t>(gpu);
  const int64_t cap = gpu_mem_cap_[n];
  const int32_t mem_share =
      cap > 0 ? static_cast<int32_t>(gpu_mem_free_[i] * kMilliPerGpu / cap) : 0;
  int32_t share = specs_[n].ModeOf(gpu) == NodeMode::kMemoryOnly
                      ? mem_share
                      : std::min(gpu_milli_free_[i], mem_share);
  if (specs_[n].mode == NodeMode::kMig) share = 0;  // no fractional share fits a MIG GPU
  share_total_[n] += share - gpu_share_free_[i];
  gpu_share_free_[i] = share;
}

Status Cluster::Place(const Request& r, const Assignment& a, double started_s) {
  if (a.node < 0 || a.node >= node_count()) {
    return Status::Error("assignment to node " + std::to_string(a.node) + ": no such node");
  }
  if (!std::isfinite(started_s)) {
    return Status::Error("assignment to node \"" + spec(a.node).name + "\": start " +
                         std::to_string(started_s) + " is not a finite number of seconds");
  }
  Status placed = r.mig() ? PlaceMig(r, a) : PlaceRequest(r, a);
  if (!placed.ok() || r.gpu_count == 0) return placed;
  const auto n = static_cast<size_t>(a.node);
  starts_[n].push_back(started_s);
  oldest_start_[n] = std::min(oldest_start_[n], started_s);
  return placed;
}

Status Cluster::Remove(const Request& r, const Assignment& a, double started_s) {
  if (a.node < 0 || a.node >= node_count()) {
    return Status::Error("removal from node " + std::to_string(a.node) + ": no such node");
  }
  const auto n = static_cast<size_t>(a.node);
  std::vector<double>& starts = starts_[n];
  const auto start =
      r.gpu_count > 0 ? std::find(starts.begin(), starts.end(), started_s) : starts.end();
  if (r.gpu_count > 0 && start == starts.end()) {
    return Status::Error("removal from node \"" + spec(a.node).name +
                         "\": no request with GPUs placed there started at " +
                         std::to_string(started_s) + " s");
  }
  Status removed = r.mig() ? RemoveMig(r, a) : RemoveRequest(r, a);
  if (!removed.ok() || r.gpu_count == 0) return removed;
  starts.erase(start);
  if (started_s == oldest_start_[n]) {
    oldest_start_[n] = starts.empty() ? std::numeric_limits<double>::infinity()
                                      : *std::min_element(starts.begin(), starts.end());
  }
  return removed;
}

Status Cluster::PlaceRequest(const Request& r, const Assignment& a) {
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
  int tag = -1;
  for (int g = 0; g < s.gpu_count; ++g) {
    if (((a.gpus >> g) & 1) == 0) continue;
    // On a node with GPU modes of its own any GPUs of one mode that take it (not only those
    // SpanGroup would choose: an assignment made earlier may have taken another mode's).
    const bool fits = s.mixed() ? GpuModeTakes(s.gpu_modes[static_cast<size_t>(g)], r) &&
                                      GpuStateFits(a.node, g, r)
                                : GpuFits(a.node, g, r);
    if (!fits) {
      return Status::Error("GPU " + std::to_string(g) + " of node \"" + s.name +
                           "\" cannot take the request's share");
    }
    if (s.mixed()) {
      const int t = s.gpu_modes[static_cast<size_t>(g)].tag;
      if (tag >= 0 && t != tag) {
        return Status::Error("assignment on node \"" + s.name +
                             "\" spans GPUs of different modes (GPU " + std::to_string(g) +
                             "'s differs); a request's GPUs are all of one mode");
      }
      tag = t;
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
  Changed(n);
  return Status::Ok();
}

Status Cluster::RemoveRequest(const Request& r, const Assignment& a) {
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
  Changed(n);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// MIG nodes

bool Cluster::MigRelayoutable(int node, int gpu) const {
  const NodeSpec& s = spec(node);
  return s.mode == NodeMode::kMig && s.mig_relayout &&
         mig_[static_cast<size_t>(node)][static_cast<size_t>(gpu)].AllFree();
}

int64_t Cluster::MigInstanceMemoryMib(int node, const mig::MigProfile& profile) const {
  const mig::GpuModel* model = mig_model(node);
  if (model == nullptr) return 0;
  return gpu_mem_cap_[static_cast<size_t>(node)] * profile.memory_slices / model->memory_slices;
}

int32_t Cluster::MigInstanceMilli(int node, const mig::MigProfile& profile) const {
  const mig::GpuModel* model = mig_model(node);
  if (model == nullptr) return 0;
  return profile.compute_slices * kMilliPerGpu / model->compute_slices;
}

int Cluster::MigInstanceFor(int node, int gpu, const Request& r) const {
  const mig::GpuModel* model = mig_model(node);
  if (model == nullptr || !r.mig() || gpu < 0 || gpu >= spec(node).gpu_count) return -1;
  const mig::MigProfile* profile = MigProfileOn(*model, r.mig_profile);
  if (profile == nullptr) return -1;
  const MigGpu& g = mig_[static_cast<size_t>(node)][static_cast<size_t>(gpu)];
  const int i = g.FreeInstanceOf(*profile);
  return i < 0 ? -1 : g.layout.instances[static_cast<size_t>(i)].start;
}

bool Cluster::MigGpuFits(int node, int gpu, const Request& r) const {
  const mig::GpuModel* model = mig_model(node);
  if (model == nullptr) return false;
  const mig::MigProfile* profile = MigProfileOn(*model, r.mig_profile);
  if (profile == nullptr) return false;
  return mig_[static_cast<size_t>(node)][static_cast<size_t>(gpu)].FreeInstanceOf(*profile) >= 0 ||
         MigRelayoutable(node, gpu);
}

FitResult Cluster::MigFits(int node, const Request& r) const {
  const mig::GpuModel* model = mig_model(node);
  if (model == nullptr) return FitResult::kMode;
  if (MigProfileOn(*model, r.mig_profile) == nullptr) return FitResult::kMigProfile;
  for (int g = 0; g < spec(node).gpu_count; ++g) {
    if (MigGpuFits(node, g, r)) return FitResult::kFits;
  }
  return FitResult::kMigInstance;
}

void Cluster::RefreshMigGpu(int node, int gpu) {
  const size_t n = static_cast<size_t>(node);
  const size_t i = offset(node) + static_cast<size_t>(gpu);
  const MigGpu& g = mig_[n][static_cast<size_t>(gpu)];
  int32_t milli = 0;
  int64_t mem = 0;
  for (size_t k = 0; k < g.layout.instances.size(); ++k) {
    if (!g.Taken(k)) continue;
    milli += MigInstanceMilli(node, *g.layout.instances[k].profile);
    mem += MigInstanceMemoryMib(node, *g.layout.instances[k].profile);
  }
  const bool was_whole = gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == gpu_mem_cap_[n];
  gpu_allocated_milli_ += milli - (kMilliPerGpu - int64_t{gpu_milli_free_[i]});
  gpu_milli_free_[i] = kMilliPerGpu - milli;
  gpu_mem_free_[i] = gpu_mem_cap_[n] - mem;
  const bool is_whole = gpu_milli_free_[i] == kMilliPerGpu && gpu_mem_free_[i] == gpu_mem_cap_[n];
  whole_free_[n] += (is_whole ? 1 : 0) - (was_whole ? 1 : 0);
}

Status Cluster::PlaceMig(const Request& r, const Assignment& a) {
  const NodeSpec& s = spec(a.node);
  const FitResult fit = Fits(a.node, r);
  if (fit != FitResult::kFits) {
    return Status::Error("MIG request for " + std::string(MigProfileName(r.mig_profile)) +
                         " does not fit node \"" + s.name +
                         "\": " + std::string(FitResultName(fit)));
  }
  if (std::popcount(a.gpus) != 1 || (s.gpu_count < 32 && (a.gpus >> s.gpu_count) != 0)) {
    return Status::Error("MIG assignment on node \"" + s.name + "\" names GPU mask " +
                         std::to_string(a.gpus) + "; expected one of the node's " +
                         std::to_string(s.gpu_count) + " GPUs");
  }
  const int g = std::countr_zero(a.gpus);
  const size_t n = static_cast<size_t>(a.node);
  const mig::GpuModel& model = *mig_model(a.node);
  const mig::MigProfile* profile = MigProfileOn(model, r.mig_profile);
  const std::string where = "GPU " + std::to_string(g) + " of node \"" + s.name + "\"";
  MigGpu next = mig_[n][static_cast<size_t>(g)];
  if (a.mig_layout >= 0) {
    const std::vector<mig::Layout>& layouts = MigLayoutsOf(model);
    if (!MigRelayoutable(a.node, g)) {
      return Status::Error(
          where + " cannot be cut again: " +
          (s.mig_relayout ? "some of its instances are taken" : "the node keeps its MIG layouts"));
    }
    if (static_cast<size_t>(a.mig_layout) >= layouts.size()) {
      return Status::Error(where + ": layout " + std::to_string(a.mig_layout) + " of " +
                           std::to_string(layouts.size()) + " " + std::string(model.name) +
                           " layouts does not exist");
    }
    next.layout = layouts[static_cast<size_t>(a.mig_layout)];
    next.taken = 0;
  }
  const int i = next.InstanceAt(a.mig_start);
  if (i < 0 || next.layout.instances[static_cast<size_t>(i)].profile != profile ||
      next.Taken(static_cast<size_t>(i))) {
    return Status::Error(where + " has no free " + std::string(profile->name) +
                         " instance at memory slice " + std::to_string(a.mig_start) + " (" +
                         mig::SliceMap(next.layout) + ")");
  }
  next.taken |= uint32_t{1} << i;
  cpu_free_[n] -= r.cpu_milli;
  mem_free_[n] -= r.memory_mib;
  mig_[n][static_cast<size_t>(g)] = std::move(next);
  RefreshMigGpu(a.node, g);
  Changed(n);
  return Status::Ok();
}

Status Cluster::RemoveMig(const Request& r, const Assignment& a) {
  const NodeSpec& s = spec(a.node);
  const size_t n = static_cast<size_t>(a.node);
  const mig::GpuModel* model = mig_model(a.node);
  const mig::MigProfile* profile = model != nullptr ? MigProfileOn(*model, r.mig_profile) : nullptr;
  const int g = std::popcount(a.gpus) == 1 ? std::countr_zero(a.gpus) : -1;
  int i = -1;
  if (profile != nullptr && g >= 0 && g < s.gpu_count) {
    i = mig_[n][static_cast<size_t>(g)].InstanceAt(a.mig_start);
  }
  const MigGpu* gpu = i >= 0 ? &mig_[n][static_cast<size_t>(g)] : nullptr;
  if (gpu == nullptr || gpu->layout.instances[static_cast<size_t>(i)].profile != profile ||
      !gpu->Taken(static_cast<size_t>(i)) || cpu_free_[n] + r.cpu_milli > s.cpu_milli ||
      mem_free_[n] + r.memory_mib > s.memory_mib) {
    return Status::Error("removal of a MIG instance from node \"" + s.name +
                         "\" names no taken instance of the request's profile");
  }
  cpu_free_[n] += r.cpu_milli;
  mem_free_[n] += r.memory_mib;
  mig_[n][static_cast<size_t>(g)].taken &= ~(uint32_t{1} << i);
  RefreshMigGpu(a.node, g);
  Changed(n);
  return Status::Ok();
}

}  // namespace tessera::placement
