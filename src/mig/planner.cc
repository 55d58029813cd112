// The MIG planner's searches (see planner.h): placement by backtracking, the enumeration of every
// layout of a model, and the exact layout choice for a list of requests. No I/O.
#include "mig/planner.h"

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <utility>

#include "core/number.h"
#include "core/text.h"

namespace tessera::mig {
namespace {

constexpr int kMaxCountPerArgument = 64;

uint32_t SliceBits(int start, int size) { return ((1u << size) - 1u) << start; }

// True when an instance of `p` may start at `start` on a GPU whose taken slices are `used` and
// which already has `media` media-extension instances and `compute` compute slices in use.
bool Fits(const GpuModel& model, const MigProfile& p, int start, uint32_t used, int media,
          int compute) {
  if (((p.start_mask >> start) & 1u) == 0) return false;
  if (start + p.memory_slices > model.memory_slices) return false;
  if ((used & SliceBits(start, p.memory_slices)) != 0) return false;
  if (p.media_extensions && media > 0) return false;
  return compute + p.compute_slices <= model.compute_slices;
}

int MemorySlicesOf(const GpuModel& model, const ProfileCounts& c) {
  int n = 0;
  for (int i = 0; i < model.profile_count; ++i) n += c[i] * model.profiles[i].memory_slices;
  return n;
}

// Backtracking placement of the instances in `order` (profile indices), from position k on.
bool PlaceFrom(const GpuModel& model, const std::vector<int>& order, size_t k, uint32_t used,
               int media, int compute, std::vector<PlacedInstance>* out) {
  if (k == order.size()) return true;
  const MigProfile& p = model.profiles[order[k]];
  // Instances of one profile are interchangeable: the next one starts after the previous one,
  // which keeps the search from trying the same set in every order.
  int first = 0;
  if (k > 0 && order[k - 1] == order[k]) first = out->back().start + 1;
  for (int s = first; s < model.memory_slices; ++s) {
    if (!Fits(model, p, s, used, media, compute)) continue;
    out->push_back({&p, s});
    if (PlaceFrom(model, order, k + 1, used | SliceBits(s, p.memory_slices),
                  media + (p.media_extensions ? 1 : 0), compute + p.compute_slices, out)) {
      return true;
    }
    out->pop_back();
  }
  return false;
}

// Placement of `counts` or nullopt; largest instances first, each at its lowest free slot.
std::optional<Layout> TryPlace(const GpuModel& model, const ProfileCounts& counts) {
  std::vector<int> order;
  for (int i = 0; i < model.profile_count; ++i) {
    for (int n = 0; n < counts[i]; ++n) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const MigProfile& pa = model.profiles[a];
    const MigProfile& pb = model.profiles[b];
    if (pa.memory_slices != pb.memory_slices) return pa.memory_slices > pb.memory_slices;
    return pa.compute_slices > pb.compute_slices;
  });
  if (static_cast<int>(order.size()) > model.memory_slices) return std::nullopt;
  Layout layout{&model, {}};
  if (!PlaceFrom(model, order, 0, 0, 0, 0, &layout.instances)) return std::nullopt;
  std::sort(layout.instances.begin(), layout.instances.end(),
            [](const PlacedInstance& a, const PlacedInstance& b) { return a.start < b.start; });
  return layout;
}

void Enumerate(const GpuModel& model, int slot, uint32_t used, int media, int compute,
               std::vector<PlacedInstance>* current, std::set<ProfileCounts>* seen,
               std::vector<Layout>* out) {
  if (slot == model.memory_slices) {
    Layout layout{&model, *current};
    if (seen->insert(layout.Counts()).second) out->push_back(std::move(layout));
    return;
  }
  Enumerate(model, slot + 1, used, media, compute, current, seen, out);  // slot left free
  if ((used >> slot) & 1u) return;
  for (const MigProfile& p : model.Profiles()) {
    if (!Fits(model, p, slot, used, media, compute)) continue;
    current->push_back({&p, slot});
    Enumerate(model, slot + 1, used | SliceBits(slot, p.memory_slices),
              media + (p.media_extensions ? 1 : 0), compute + p.compute_slices, current, seen, out);
    current->pop_back();
  }
}

ProfileCounts Min(const ProfileCounts& a, const ProfileCounts& b) {
  ProfileCounts out{};
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::min(a[i], b[i]);
  return out;
}

// Value of serving `c`: instances first, then memory slices.
std::pair<int, int> Value(const GpuModel& model, const ProfileCounts& c) {
  return {TotalInstances(c), MemorySlicesOf(model, c)};
}

struct Best {
  std::pair<int, int> value{0, 0};
  int choice = -1;  // index into the candidate mixes; -1 = nothing more to serve
};

class FitSearch {
 public:
  FitSearch(const GpuModel& model, std::vector<ProfileCounts> mixes, size_t max_states)
      : model_(model), mixes_(std::move(mixes)), max_states_(max_states) {}

  // Sets *best to the best value for `gpus` GPUs and demand `left`; false once the state budget
  // is spent.
  bool Solve(int gpus, const ProfileCounts& left, Best* best) {
    *best = Best{};
    if (gpus == 0 || TotalInstances(left) == 0) return true;
    const auto key = std::make_pair(gpus, left);
    if (auto it = memo_.find(key); it != memo_.end()) {
      *best = it->second;
      return true;
    }
    if (memo_.size() >= max_states_) return false;
    std::set<ProfileCounts> tried;
    for (size_t i = 0; i < mixes_.size(); ++i) {
      const ProfileCounts served = Min(mixes_[i], left);
      if (TotalInstances(served) == 0 || !tried.insert(served).second) continue;
      ProfileCounts rest = left;
      for (size_t j = 0; j < rest.size(); ++j) rest[j] -= served[j];
      Best sub;
      if (!Solve(gpus - 1, rest, &sub)) return false;
      const auto here = Value(model_, served);
      const std::pair<int, int> value{here.first + sub.value.first, here.second + sub.value.second};
      if (value > best->value) *best = Best{value, static_cast<int>(i)};
    }
    memo_.emplace(key, *best);
    return true;
  }

 private:
  const GpuModel& model_;
  std::vector<ProfileCounts> mixes_;
  size_t max_states_;
  std::map<std::pair<int, ProfileCounts>, Best> memo_;
};

}  // namespace

int TotalInstances(const ProfileCounts& counts) {
  int n = 0;
  for (int c : counts) n += c;
  return n;
}

ProfileCounts Layout::Counts() const {
  ProfileCounts c{};
  for (const PlacedInstance& i : instances) ++c[model->IndexOf(*i.profile)];
  return c;
}

uint32_t Layout::UsedMemoryMask() const {
  uint32_t used = 0;
  for (const PlacedInstance& i : instances) used |= SliceBits(i.start, i.profile->memory_slices);
  return used;
}

int Layout::UsedComputeSlices() const {
  int n = 0;
  for (const PlacedInstance& i : instances) n += i.profile->compute_slices;
  return n;
}

int Layout::UsedMemorySlices() const { return std::popcount(UsedMemoryMask()); }

Result<ProfileCounts> ParseProfileCounts(const GpuModel& model, std::span<const std::string> args) {
  ProfileCounts counts{};
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    auto profile = FindProfile(model, name, "instance profile");
    if (!profile.ok()) return profile.status();
    int count = 1;
    if (eq != std::string::npos) {
      auto n = ParseUnsigned(std::string_view(arg).substr(eq + 1), name, 0, kMaxCountPerArgument,
                             "an instance count from 0 to 64");
      if (!n.ok()) return n.status();
      count = static_cast<int>(*n);
    }
    counts[model.IndexOf(**profile)] += count;
  }
  return counts;
}

Status CheckLayout(const Layout& layout) {
  const GpuModel& model = *layout.model;
  uint32_t used = 0;
  int media = 0, compute = 0;
  std::vector<PlacedInstance> sorted = layout.instances;
  std::sort(sorted.begin(), sorted.end(),
            [](const PlacedInstance& a, const PlacedInstance& b) { return a.start < b.start; });
  for (const PlacedInstance& i : sorted) {
    const MigProfile& p = *i.profile;
    const std::string what = std::string(p.name) + "@" + std::to_string(i.start);
    if (i.start < 0 || i.start >= model.memory_slices || ((p.start_mask >> i.start) & 1u) == 0) {
      return Status::Error(what + ": " + std::string(p.name) + " may start only at memory slices " +
                           StartSlots(p));
    }
    if (i.start + p.memory_slices > model.memory_slices) {
      return Status::Error(what + ": runs past the GPU's " + std::to_string(model.memory_slices) +
                           " memory slices");
    }
    if ((used & SliceBits(i.start, p.memory_slices)) != 0) {
      return Status::Error(what + ": overlaps another instance's memory slices");
    }
    if (p.media_extensions && ++media > 1) {
      return Status::Error(what + ": at most one instance per GPU has media extensions (+me)");
    }
    compute += p.compute_slices;
    if (compute > model.compute_slices) {
      return Status::Error(what + ": the instances need more than the GPU's " +
                           std::to_string(model.compute_slices) + " compute slices");
    }
    used |= SliceBits(i.start, p.memory_slices);
  }
  return Status::Ok();
}

Result<Layout> Place(const GpuModel& model, const ProfileCounts& counts) {
  const std::string asked = FormatCounts(model, counts);
  const std::string head = "no placement of " + asked + " on one " + std::string(model.name) + ": ";
  int media = 0, compute = 0;
  for (int i = 0; i < model.profile_count; ++i) {
    const MigProfile& p = model.profiles[i];
    if (counts[i] > p.published_max) {
      return Result<Layout>::Error(
          head + std::string(p.name) + "=" + std::to_string(counts[i]) + " but at most " +
          std::to_string(p.published_max) + " fit on one GPU (start slots " + StartSlots(p) + ", " +
          std::to_string(p.memory_slices) + " memory slice" + (p.memory_slices == 1 ? "" : "s") +
          " each" +
          (p.media_extensions ? ", and only one instance per GPU may have media extensions" : "") +
          ")");
    }
    if (p.media_extensions) media += counts[i];
    compute += counts[i] * p.compute_slices;
  }
  if (media > 1) {
    return Result<Layout>::Error(head + std::to_string(media) +
                                 " instances with media extensions (+me), but one GPU has room "
                                 "for one");
  }
  const int memory = MemorySlicesOf(model, counts);
  auto breakdown = [&](auto slices_of) {
    std::string out;
    for (int i = 0; i < model.profile_count; ++i) {
      if (counts[i] == 0) continue;
      if (!out.empty()) out += " + ";
      out += std::string(model.profiles[i].name) + " " + std::to_string(counts[i]) + "x" +
             std::to_string(slices_of(model.profiles[i]));
    }
    return out;
  };
  if (memory > model.memory_slices) {
    return Result<Layout>::Error(head + "they take " + std::to_string(memory) + " memory slices (" +
                                 breakdown([](const MigProfile& p) { return p.memory_slices; }) +
                                 ") and the GPU has " + std::to_string(model.memory_slices));
  }
  if (compute > model.compute_slices) {
    return Result<Layout>::Error(head + "they take " + std::to_string(compute) +
                                 " compute slices (" +
                                 breakdown([](const MigProfile& p) { return p.compute_slices; }) +
                                 ") and the GPU has " + std::to_string(model.compute_slices));
  }
  if (auto layout = TryPlace(model, counts)) return *layout;
  std::string rules;
  for (int i = 0; i < model.profile_count; ++i) {
    if (counts[i] == 0) continue;
    const MigProfile& p = model.profiles[i];
    rules += "; " + std::string(p.name) + " starts at " + StartSlots(p) + " and takes " +
             std::to_string(p.memory_slices);
  }
  const FitResult part = Fit(model, 1, counts);
  return Result<Layout>::Error(
      head + "the start slots leave no room for all of them" + rules +
      " memory slices. The largest part that fits: " + FormatPlacements(part.gpus[0]));
}

int FirstFreeStart(const Layout& layout, const MigProfile& profile) {
  const GpuModel& model = *layout.model;
  int media = 0;
  for (const PlacedInstance& i : layout.instances) media += i.profile->media_extensions ? 1 : 0;
  for (int s = 0; s < model.memory_slices; ++s) {
    if (Fits(model, profile, s, layout.UsedMemoryMask(), media, layout.UsedComputeSlices())) {
      return s;
    }
  }
  return -1;
}

std::vector<Layout> FeasibleLayouts(const GpuModel& model) {
  std::vector<Layout> out;
  std::set<ProfileCounts> seen;
  std::vector<PlacedInstance> current;
  Enumerate(model, 0, 0, 0, 0, &current, &seen, &out);
  return out;
}

FitResult Fit(const GpuModel& model, int gpu_count, const ProfileCounts& requested,
              size_t max_states) {
  FitResult result;
  result.requested = requested;
  std::vector<ProfileCounts> mixes;
  for (const Layout& l : FeasibleLayouts(model)) mixes.push_back(l.Counts());
  // Demand beyond what every GPU together could hold of a profile can never be served.
  ProfileCounts left{};
  for (int i = 0; i < model.profile_count; ++i) {
    left[i] = std::min(requested[i], model.profiles[i].published_max * gpu_count);
  }
  FitSearch search(model, mixes, max_states);
  for (int g = 0; g < gpu_count; ++g) {
    Best best;
    if (!result.exact || !search.Solve(gpu_count - g, left, &best)) {
      // Over budget: this GPU gets the exact best for itself alone (one GPU never needs more
      // states than there are mixes).
      result.exact = false;
      FitSearch one(model, mixes, mixes.size() + 1);
      if (!one.Solve(1, left, &best)) best = Best{};
    }
    ProfileCounts served{};
    if (best.choice >= 0) served = Min(mixes[static_cast<size_t>(best.choice)], left);
    for (size_t j = 0; j < left.size(); ++j) {
      left[j] -= served[j];
      result.served[j] += served[j];
    }
    auto layout = TryPlace(model, served);
    result.gpus.push_back(layout ? *layout : Layout{&model, {}});
  }
  return result;
}

std::string FormatCounts(const GpuModel& model, const ProfileCounts& counts) {
  std::string out;
  for (int i = 0; i < model.profile_count; ++i) {
    if (counts[i] == 0) continue;
    if (!out.empty()) out += " ";
    out += std::string(model.profiles[i].name) + "=" + std::to_string(counts[i]);
  }
  return out.empty() ? "nothing" : out;
}

std::string FormatPlacements(const Layout& layout) {
  std::string out;
  for (const PlacedInstance& i : layout.instances) {
    if (!out.empty()) out += " ";
    out += std::string(i.profile->name) + "@" + std::to_string(i.start);
  }
  return out.empty() ? "empty" : out;
}

std::string SliceMap(const Layout& layout) {
  const int n = layout.model->memory_slices;
  std::vector<std::string> owner(static_cast<size_t>(n), "free");
  for (const PlacedInstance& i : layout.instances) {
    for (int s = i.start; s < i.start + i.profile->memory_slices && s < n; ++s) {
      owner[static_cast<size_t>(s)] = std::string(i.profile->name) + "@" + std::to_string(i.start);
    }
  }
  std::string out;
  for (int s = 0; s < n;) {
    int e = s;
    while (e + 1 < n && owner[static_cast<size_t>(e + 1)] == owner[static_cast<size_t>(s)]) ++e;
    if (!out.empty()) out += " | ";
    out += std::to_string(s) + (e > s ? "-" + std::to_string(e) : "") + " ";
    const std::string& o = owner[static_cast<size_t>(s)];
    out += o == "free" ? o : o.substr(0, o.find('@'));
    s = e + 1;
  }
  return out;
}

Status ValidConfigName(std::string_view name, std::string_view input_name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  }
  if (ok) return Status::Ok();
  return Status::Error(
      InputError(input_name, name, "not a config name", "1-63 characters of [A-Za-z0-9_.-]"));
}

std::string MigPartedConfig(std::span<const Layout> gpus, std::string_view config_name,
                            std::span<const std::string> comment) {
  std::string out;
  for (const std::string& line : comment) out += "# " + line + "\n";
  out += "version: v1\nmig-configs:\n  " + std::string(config_name) + ":\n";
  // Group GPUs by their mix, in order of first appearance.
  std::vector<std::pair<ProfileCounts, std::vector<size_t>>> groups;
  for (size_t g = 0; g < gpus.size(); ++g) {
    const ProfileCounts c = gpus[g].Counts();
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == c; });
    if (it == groups.end()) {
      groups.push_back({c, {g}});
    } else {
      it->second.push_back(g);
    }
  }
  for (const auto& [counts, devices] : groups) {
    const GpuModel& model = *gpus[devices[0]].model;
    std::string list;
    if (groups.size() == 1) {
      list = "all";
    } else {
      for (size_t d : devices) list += (list.empty() ? "[" : ", ") + std::to_string(d);
      list += "]";
    }
    out += "    - devices: " + list + "\n      mig-enabled: true\n";
    if (TotalInstances(counts) == 0) {
      out += "      mig-devices: {}\n";
      continue;
    }
    out += "      mig-devices:\n";
    for (int i = 0; i < model.profile_count; ++i) {
      if (counts[i] == 0) continue;
      out += "        \"" + std::string(model.profiles[i].name) +
             "\": " + std::to_string(counts[i]) + "\n";
    }
  }
  return out;
}

}  // namespace tessera::mig
