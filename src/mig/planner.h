// The MIG planner: which mixes of a model's profiles fit on one GPU, where each instance goes,
// why a mix does not fit, and which layouts serve the most of a list of requested instances.
//
// The rules (profiles.h): an instance of profile P takes P.memory_slices consecutive memory
// slices starting at a slot in P.start_mask; instances never overlap; their compute slices add up
// to at most the model's; at most one instance per GPU has media extensions. A layout is a set of
// placed instances obeying them. Any subset of a layout is a layout, which is what makes the
// searches below simple: a GPU has at most 8 memory slices, so every layout of a model can be
// enumerated (a few dozen distinct mixes), and choosing layouts for GPUs is an exact search over
// them.
//
// Pure computation on the tables: no NVML, no files, no Kubernetes, no JSON. The CLI
// (src/cli/mig.cc), `tessera mig apply` (apply.h), simgpu and later the placement engine are its
// callers.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "mig/profiles.h"

namespace tessera::mig {

// How many instances of each profile, indexed like GpuModel::Profiles().
using ProfileCounts = std::array<int, kMaxProfilesPerModel>;

int TotalInstances(const ProfileCounts& counts);

// One GPU instance at its place.
struct PlacedInstance {
  const MigProfile* profile = nullptr;
  int start = 0;  // first memory slice
};

// The instances of one GPU, sorted by start slot.
struct Layout {
  const GpuModel* model = nullptr;
  std::vector<PlacedInstance> instances;

  ProfileCounts Counts() const;
  uint32_t UsedMemoryMask() const;  // bit s: memory slice s is taken
  int UsedComputeSlices() const;
  int UsedMemorySlices() const;
};

// Parses the requested instances: each argument is "PROFILE=COUNT" (COUNT 0 to 64) or a bare
// "PROFILE" (one instance); a profile named twice adds up. Errors name the argument, the value
// and what is allowed (the model's profiles).
Result<ProfileCounts> ParseProfileCounts(const GpuModel& model, std::span<const std::string> args);

// Checks every rule on a layout built elsewhere (from NVML, or by hand). The message names the
// first instance that breaks one and the rule.
Status CheckLayout(const Layout& layout);

// A placement of exactly `counts` on one GPU of `model`, or an error saying why none exists:
// a profile over its per-GPU count, more than one +me instance, more memory or compute slices
// than the GPU has, or (when every total fits) the start slots; the error then also names the
// largest part of the request that does fit.
Result<Layout> Place(const GpuModel& model, const ProfileCounts& counts);

// Where one more instance of `profile` could start on a GPU already holding `layout` (the lowest
// such slot), or -1 when it does not fit there without moving anything.
int FirstFreeStart(const Layout& layout, const MigProfile& profile);

// Every distinct mix of instances that fits on one GPU of `model` (the empty one included), each
// with one placement; in a fixed order.
std::vector<Layout> FeasibleLayouts(const GpuModel& model);

// Layouts for `gpu_count` GPUs of `model` that together serve the most of `requested` (ties: the
// most memory slices served, then the earliest layouts in FeasibleLayouts order). Exact: a search
// over every GPU's feasible mixes with memoised remaining demand; when that would take more than
// `max_states` states it finishes GPU by GPU (each GPU still the exact best for what is left) and
// says so in `exact`.
struct FitResult {
  std::vector<Layout> gpus;  // one per GPU, holding only instances that serve a request
  ProfileCounts requested{};
  ProfileCounts served{};
  bool exact = true;
};
FitResult Fit(const GpuModel& model, int gpu_count, const ProfileCounts& requested,
              size_t max_states = 200000);

// "1g.10gb=3 3g.40gb=1" (profiles in table order, zero counts left out; "nothing" when empty).
std::string FormatCounts(const GpuModel& model, const ProfileCounts& counts);
// "3g.40gb@0 1g.10gb@4 1g.10gb@5" ("empty" when there are no instances).
std::string FormatPlacements(const Layout& layout);
// Memory slices and what holds them: "0-3 3g.40gb | 4 1g.10gb | 5-7 free".
std::string SliceMap(const Layout& layout);

// An nvidia-mig-parted configuration (`version: v1`) with one config named `config_name` that
// gives GPU i the instances of gpus[i] (GPUs with the same mix share one entry; `devices: all`
// when every GPU has the same). `comment` lines (without '#') go at the top. The YAML is written
// here rather than by a YAML library because simgpu and the shims' rooms build with a compiler
// alone and every key and value comes from the profile tables (no quoting or escaping can arise);
// config_name must match [A-Za-z0-9_.-]+ (the caller validates it with ValidConfigName).
std::string MigPartedConfig(std::span<const Layout> gpus, std::string_view config_name,
                            std::span<const std::string> comment);
Status ValidConfigName(std::string_view name, std::string_view input_name);

}  // namespace tessera::mig
