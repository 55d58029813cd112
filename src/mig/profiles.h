// The MIG profiles NVIDIA publishes for each MIG-capable GPU model, as facts: names, device
// profile IDs, the NVML profile constants they answer to, compute and memory slices, the memory
// slices an instance may start at, and the published instance counts.
//
// A GPU in MIG mode is cut into GPU instances. Each instance takes a run of consecutive memory
// slices (8 on A100/H100/H200/B200, 4 on A30) starting at one of its profile's start slots, and
// some of the compute slices (7, or 4 on A30); two instances never share a memory slice, and at
// most one instance per GPU carries the media extensions (+me). Everything else (which mixes fit,
// where) follows from these rules; planner.h does that.
//
// Sources: NVIDIA's MIG user guide (its profile and placement tables) and `nvidia-smi mig
// -lgip/-lgipp` output as published. Where the guide is thin (B200, H100 94/96 GB) the IDs follow
// the Hopper pattern, which the MIG user guide's B200 table and published lgipp-style captures
// agree with; memory sizes and SM counts are not kept here at all, since they vary by driver: read
// them from NVML at run time.
//
// Pure data and lookups: no I/O, no NVML, nothing that allocates except the error messages.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera::mig {

inline constexpr int kMaxProfilesPerModel = 8;
inline constexpr int kMaxMemorySlices = 8;

// NVML_GPU_INSTANCE_PROFILE_* (the index nvmlDeviceGetGpuInstanceProfileInfo takes; the device's
// own profile ID comes back in the answer).
enum NvmlGpuInstanceProfile : uint32_t {
  kNvmlGiProfile1Slice = 0x0,
  kNvmlGiProfile2Slice = 0x1,
  kNvmlGiProfile3Slice = 0x2,
  kNvmlGiProfile4Slice = 0x3,
  kNvmlGiProfile7Slice = 0x4,
  kNvmlGiProfile8Slice = 0x5,
  kNvmlGiProfile6Slice = 0x6,
  kNvmlGiProfile1SliceRev1 = 0x7,  // 1g with media extensions (+me)
  kNvmlGiProfile2SliceRev1 = 0x8,  // 2g with media extensions (A30)
  kNvmlGiProfile1SliceRev2 = 0x9,  // 1g with twice the memory (1g.20gb on an H100-80GB)
  kNvmlGiProfileCount = 0x12,
};

// NVML_COMPUTE_INSTANCE_PROFILE_* for a compute instance spanning `compute_slices` slices.
// Returns -1 for a slice count without a profile.
int NvmlComputeInstanceProfileFor(int compute_slices);

// One GPU instance profile of one GPU model.
struct MigProfile {
  std::string_view name;  // "1g.10gb", "1g.10gb+me": nvidia-smi's and mig-parted's spelling
  uint32_t id;            // the device's profile ID (nvidia-smi mig -lgip "ID"), e.g. 19
  uint32_t nvml_profile;  // NvmlGpuInstanceProfile
  int compute_slices;     // the "g" of the name
  int memory_slices;      // consecutive memory slices an instance takes (placement size)
  uint32_t start_mask;    // bit s: an instance may start at memory slice s
  int published_max;      // instances per GPU, as NVIDIA's tables publish it
  bool media_extensions;  // "+me": at most one such instance per GPU
};

// One MIG-capable GPU model and its profiles.
struct GpuModel {
  std::string_view name;      // what --gpu takes: "H100-80GB"
  std::string_view products;  // which products it covers, for people
  std::string_view aliases;   // other accepted spellings, space separated
  int memory_slices;          // 8, or 4 on A30
  int compute_slices;         // 7, or 4 on A30
  MigProfile profiles[kMaxProfilesPerModel];
  int profile_count;

  std::span<const MigProfile> Profiles() const { return {profiles, size_t(profile_count)}; }
  // Index of `profile` in Profiles(); it must be one of this model's.
  int IndexOf(const MigProfile& profile) const { return static_cast<int>(&profile - &profiles[0]); }
};

// Every model we know, in a fixed order.
std::span<const GpuModel> GpuModels();

// The model named `name` (its name or an alias, ignoring case). The error names the value and
// lists every model.
Result<const GpuModel*> FindGpuModel(std::string_view name, std::string_view input_name = "--gpu");

// The model an NVML product name ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB") denotes, or
// nullptr when it is none we know.
const GpuModel* GpuModelFromProductName(std::string_view product_name);

// The profile of `model` named `name` (ignoring case; a leading "MIG " is allowed). The error
// names the value and lists the model's profiles; compute-instance profiles ("1c.3g.40gb") are
// refused with the reason.
Result<const MigProfile*> FindProfile(const GpuModel& model, std::string_view name,
                                      std::string_view input_name);

// "1g.10gb, 1g.10gb+me, ..." for messages.
std::string ProfileNames(const GpuModel& model);
// Every profile name of every model, each once, in table order (models, then their profiles).
// One name may mean different slices on different models (1g.10gb: one memory slice of an
// H100-80GB, two of an A100-40GB); look it up on a model with FindProfile.
std::span<const std::string_view> AllProfileNames();
// The same, comma separated, for messages.
std::string AllProfileNamesText();
// "A30, A100-40GB, ..." for messages.
std::string ModelNames();
// The start slots of `profile` as "{0,2,4}".
std::string StartSlots(const MigProfile& profile);

}  // namespace tessera::mig
