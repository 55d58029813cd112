// MIG profile ids, layouts per model, stranded slices and the instance choice (see mig.h). Reads
// the cluster only.
#include "placement/mig.h"

#include <map>
#include <mutex>

#include "placement/cluster.h"

namespace tessera::placement {
namespace {

// What is computed once per model: its layouts and the id of each of its profiles.
struct ModelTables {
  std::vector<mig::Layout> layouts;
  std::array<int, mig::kMaxProfilesPerModel> ids{};
};

const ModelTables& TablesOf(const mig::GpuModel& model) {
  static std::mutex mu;
  static std::map<const mig::GpuModel*, ModelTables> tables;
  std::lock_guard<std::mutex> lock(mu);
  auto it = tables.find(&model);
  if (it != tables.end()) return it->second;
  ModelTables t;
  t.layouts = mig::FeasibleLayouts(model);
  for (const mig::MigProfile& p : model.Profiles()) {
    t.ids[static_cast<size_t>(model.IndexOf(p))] = MigProfileId(p.name);
  }
  return tables.emplace(&model, std::move(t)).first->second;
}

int IdOn(const mig::GpuModel& model, const mig::MigProfile& profile) {
  return TablesOf(model).ids[static_cast<size_t>(model.IndexOf(profile))];
}

// Memory slices no instance of `gpu` holds, or held by a free one, i.e. what is not taken.
int FreeSlices(const MigGpu& gpu) {
  int taken = 0;
  for (size_t i = 0; i < gpu.layout.instances.size(); ++i) {
    if (gpu.Taken(i)) taken += gpu.layout.instances[i].profile->memory_slices;
  }
  return gpu.layout.model->memory_slices - taken;
}

}  // namespace

int MigProfileCount() { return static_cast<int>(mig::AllProfileNames().size()); }

int MigProfileId(std::string_view name) {
  const auto names = mig::AllProfileNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string_view MigProfileName(int id) {
  const auto names = mig::AllProfileNames();
  return id >= 0 && static_cast<size_t>(id) < names.size() ? names[static_cast<size_t>(id)] : "?";
}

const mig::MigProfile* MigProfileOn(const mig::GpuModel& model, int id) {
  if (id < 0) return nullptr;
  const std::string_view name = MigProfileName(id);
  for (const mig::MigProfile& p : model.Profiles()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const std::vector<mig::Layout>& MigLayoutsOf(const mig::GpuModel& model) {
  return TablesOf(model).layouts;
}

int MigGpu::FreeInstanceOf(const mig::MigProfile& profile) const {
  for (size_t i = 0; i < layout.instances.size(); ++i) {
    if (layout.instances[i].profile == &profile && !Taken(i)) return static_cast<int>(i);
  }
  return -1;
}

int MigGpu::InstanceAt(int start) const {
  for (size_t i = 0; i < layout.instances.size(); ++i) {
    if (layout.instances[i].start == start) return static_cast<int>(i);
  }
  return -1;
}

bool MigGpu::operator==(const MigGpu& other) const {
  if (taken != other.taken || layout.model != other.layout.model ||
      layout.instances.size() != other.layout.instances.size()) {
    return false;
  }
  for (size_t i = 0; i < layout.instances.size(); ++i) {
    if (layout.instances[i].profile != other.layout.instances[i].profile ||
        layout.instances[i].start != other.layout.instances[i].start) {
      return false;
    }
  }
  return true;
}

double MigDemand::Weight(int id) const {
  if (weight.empty()) return 1;
  return id >= 0 && static_cast<size_t>(id) < weight.size() ? weight[static_cast<size_t>(id)] : 0;
}

int StrandedSlices(const MigGpu& gpu, bool relayout, const MigDemand& demand) {
  if (relayout && gpu.AllFree()) return 0;
  const mig::GpuModel& model = *gpu.layout.model;
  int stranded = model.memory_slices;
  for (size_t i = 0; i < gpu.layout.instances.size(); ++i) {
    const mig::MigProfile& p = *gpu.layout.instances[i].profile;
    // Held, or free for a profile someone asks: not stranded.
    if (gpu.Taken(i) || demand.Asks(IdOn(model, p))) stranded -= p.memory_slices;
  }
  return stranded;
}

double MigChoice::Primary() const { return -(2.0 * newly_stranded + (layout >= 0 ? 1 : 0)); }
double MigChoice::Secondary() const { return 1000.0 * asked_free_after - free_slices_after; }

bool MigChoice::BetterThan(const MigChoice& other) const {
  if (Primary() != other.Primary()) return Primary() > other.Primary();
  return Secondary() > other.Secondary();
}

namespace {

// An all-free GPU of `model` cut as layout `k` with one instance of `profile` taken: where it
// starts, the slices it strands (an all-free GPU that may be cut strands none before) and the
// asked memory left free; nullopt when the layout has no such instance. The caller sets the GPU
// and the node's free slices.
std::optional<MigChoice> RecutChoice(const mig::GpuModel& model, size_t k,
                                     const mig::MigProfile& profile, const MigDemand& demand) {
  MigGpu after{MigLayoutsOf(model)[k], 0};
  const int i = after.FreeInstanceOf(profile);
  if (i < 0) return std::nullopt;
  after.taken = uint32_t{1} << i;
  MigChoice c;
  c.start = after.layout.instances[static_cast<size_t>(i)].start;
  c.layout = static_cast<int>(k);
  c.newly_stranded = StrandedSlices(after, /*relayout=*/true, demand);
  for (size_t j = 0; j < after.layout.instances.size(); ++j) {
    if (static_cast<int>(j) == i) continue;
    const mig::MigProfile& p = *after.layout.instances[j].profile;
    c.asked_free_after += demand.Weight(IdOn(model, p)) * p.memory_slices;
  }
  return c;
}

}  // namespace

std::optional<MigChoice> ChooseMigInstance(const Cluster& cluster, int node, const Request& r,
                                           const MigDemand& demand) {
  const mig::GpuModel* model = cluster.mig_model(node);
  if (model == nullptr || !r.mig() || cluster.Fits(node, r) != FitResult::kFits) {
    return std::nullopt;
  }
  const mig::MigProfile* profile = MigProfileOn(*model, r.mig_profile);
  const bool relayout = cluster.spec(node).mig_relayout;
  const std::span<const MigGpu> gpus = cluster.mig_gpus(node);
  int free_slices = 0;
  for (const MigGpu& g : gpus) free_slices += FreeSlices(g);
  const int free_after = free_slices - profile->memory_slices;
  std::optional<MigChoice> best;
  auto consider = [&](const MigChoice& c) {
    if (!best || c.BetterThan(*best)) best = c;
  };
  for (size_t g = 0; g < gpus.size(); ++g) {
    const MigGpu& gpu = gpus[g];
    bool same_as_earlier = false;  // an identical GPU before it gives the same candidates
    for (size_t h = 0; h < g && !same_as_earlier; ++h) same_as_earlier = gpus[h] == gpu;
    if (same_as_earlier) continue;
    const int before = StrandedSlices(gpu, relayout, demand);
    if (const int i = gpu.FreeInstanceOf(*profile); i >= 0) {
      MigGpu after = gpu;
      after.taken |= uint32_t{1} << i;
      MigChoice c;
      c.gpu = static_cast<int>(g);
      c.start = gpu.layout.instances[static_cast<size_t>(i)].start;
      c.newly_stranded = StrandedSlices(after, relayout, demand) - before;
      c.free_slices_after = free_after;
      consider(c);
    }
    if (!relayout || !gpu.AllFree()) continue;
    for (size_t k = 0; k < MigLayoutsOf(*model).size(); ++k) {
      std::optional<MigChoice> c = RecutChoice(*model, k, *profile, demand);
      if (!c) continue;
      c->gpu = static_cast<int>(g);
      c->newly_stranded -= before;
      c->free_slices_after = free_after;
      consider(*c);
    }
  }
  return best;
}

int ChooseRecutLayout(const mig::GpuModel& model, int profile_id, const MigDemand& demand) {
  const mig::MigProfile* profile = MigProfileOn(model, profile_id);
  if (profile == nullptr) return -1;
  std::optional<MigChoice> best;
  for (size_t k = 0; k < MigLayoutsOf(model).size(); ++k) {
    const std::optional<MigChoice> c = RecutChoice(model, k, *profile, demand);
    if (c && (!best || c->BetterThan(*best))) best = c;
  }
  return best ? best->layout : -1;
}

std::optional<Assignment> MigAssignmentOn(const Cluster& cluster, int node, const Request& r,
                                          const MigDemand& demand) {
  auto c = ChooseMigInstance(cluster, node, r, demand);
  if (!c) return std::nullopt;
  return Assignment{node, uint32_t{1} << c->gpu, c->start, c->layout};
}

}  // namespace tessera::placement
