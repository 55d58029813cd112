// The MIG profile tables (facts from the research notes, see profiles.h) and their lookups. No
// I/O; nothing here decides placement.
#include "mig/profiles.h"

#include <algorithm>
#include <array>
#include <vector>

#include "core/text.h"

namespace tessera::mig {
namespace {

// Start-slot masks of the 8-memory-slice geometry (A100, H100, H200, B200): nvidia-smi mig -lgipp
// gives {0..6}:1, {0..6}:1 (+me), {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8.
constexpr uint32_t kSlots0To6 = 0x7f;
constexpr uint32_t kSlotsEven = 0x55;  // 0, 2, 4, 6
constexpr uint32_t kSlots024 = 0x15;   // 0, 2, 4
constexpr uint32_t kSlots04 = 0x11;    // 0, 4
constexpr uint32_t kSlot0 = 0x01;
// A30: {0,1,2,3}:1, {0,2}:2, {0}:4.
constexpr uint32_t kSlots0To3 = 0x0f;
constexpr uint32_t kSlots02 = 0x05;

// The seven profiles every 8-slice model has, in lgip order; only their names differ by model
// (the memory in the name is the model's memory over 8, 4, 2 or 1).
constexpr GpuModel EightSlice(std::string_view name, std::string_view products,
                              std::string_view aliases, std::string_view g1, std::string_view g1me,
                              std::string_view g1x2, std::string_view g2, std::string_view g3,
                              std::string_view g4, std::string_view g7) {
  return GpuModel{name,
                  products,
                  aliases,
                  8,
                  7,
                  {
                      {g1, 19, kNvmlGiProfile1Slice, 1, 1, kSlots0To6, 7, false},
                      {g1me, 20, kNvmlGiProfile1SliceRev1, 1, 1, kSlots0To6, 1, true},
                      {g1x2, 15, kNvmlGiProfile1SliceRev2, 1, 2, kSlotsEven, 4, false},
                      {g2, 14, kNvmlGiProfile2Slice, 2, 2, kSlots024, 3, false},
                      {g3, 9, kNvmlGiProfile3Slice, 3, 4, kSlots04, 2, false},
                      {g4, 5, kNvmlGiProfile4Slice, 4, 4, kSlot0, 1, false},
                      {g7, 0, kNvmlGiProfile7Slice, 7, 8, kSlot0, 1, false},
                  },
                  7};
}

constexpr std::array<GpuModel, 8> kModels = {
    GpuModel{"A30",
             "A30 24GB",
             "A30-24GB",
             4,
             4,
             {
                 {"1g.6gb", 14, kNvmlGiProfile1Slice, 1, 1, kSlots0To3, 4, false},
                 {"1g.6gb+me", 21, kNvmlGiProfile1SliceRev1, 1, 1, kSlots0To3, 1, true},
                 {"2g.12gb", 5, kNvmlGiProfile2Slice, 2, 2, kSlots02, 2, false},
                 {"2g.12gb+me", 6, kNvmlGiProfile2SliceRev1, 2, 2, kSlots02, 1, true},
                 {"4g.24gb", 0, kNvmlGiProfile4Slice, 4, 4, kSlot0, 1, false},
             },
             5},
    EightSlice("A100-40GB", "A100 SXM4/PCIe 40GB", "A100 A100-SXM4-40GB A100-PCIE-40GB", "1g.5gb",
               "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    EightSlice("A100-80GB", "A100 SXM4/PCIe 80GB", "A100-SXM4-80GB A100-PCIE-80GB", "1g.10gb",
               "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    EightSlice("H100-80GB", "H100 SXM5/PCIe 80GB", "H100 H100-SXM5-80GB H100-PCIE-80GB", "1g.10gb",
               "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    EightSlice("H100-94GB", "H100 NVL and H100 94GB", "H100-NVL", "1g.12gb", "1g.12gb+me",
               "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    EightSlice("H100-96GB", "H100 96GB on GH200, H20", "GH200 H20", "1g.12gb", "1g.12gb+me",
               "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
    EightSlice("H200-141GB", "H200 SXM5 and H200 NVL 141GB", "H200 H200-NVL", "1g.18gb",
               "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    EightSlice("B200", "B200 180GB", "B200-180GB", "1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb",
               "3g.90gb", "4g.90gb", "7g.180gb"),
};

bool ContainsWord(std::string_view words, std::string_view word) {
  size_t pos = 0;
  while (pos < words.size()) {
    size_t end = words.find(' ', pos);
    if (end == std::string_view::npos) end = words.size();
    if (EqualsIgnoreCase(words.substr(pos, end - pos), word)) return true;
    pos = end + 1;
  }
  return false;
}

bool ContainsIgnoreCase(std::string_view text, std::string_view part) {
  for (size_t i = 0; i + part.size() <= text.size(); ++i) {
    if (EqualsIgnoreCase(text.substr(i, part.size()), part)) return true;
  }
  return false;
}

}  // namespace

int NvmlComputeInstanceProfileFor(int compute_slices) {
  switch (compute_slices) {
    case 1:
      return 0;  // NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE
    case 2:
      return 1;
    case 3:
      return 2;
    case 4:
      return 3;
    case 7:
      return 4;
    case 8:
      return 5;
    case 6:
      return 6;
    default:
      return -1;
  }
}

std::span<const GpuModel> GpuModels() { return kModels; }

std::string ModelNames() {
  std::string out;
  for (const GpuModel& m : kModels) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

std::string ProfileNames(const GpuModel& model) {
  std::string out;
  for (const MigProfile& p : model.Profiles()) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::span<const std::string_view> AllProfileNames() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const GpuModel& m : kModels) {
      for (const MigProfile& p : m.Profiles()) {
        if (std::find(out.begin(), out.end(), p.name) == out.end()) out.push_back(p.name);
      }
    }
    return out;
  }();
  return names;
}

std::string AllProfileNamesText() {
  std::string out;
  for (std::string_view n : AllProfileNames()) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string StartSlots(const MigProfile& profile) {
  std::string out = "{";
  for (int s = 0; s < kMaxMemorySlices; ++s) {
    if ((profile.start_mask >> s) & 1u) {
      if (out.size() > 1) out += ",";
      out += std::to_string(s);
    }
  }
  return out + "}";
}

Result<const GpuModel*> FindGpuModel(std::string_view name, std::string_view input_name) {
  const std::string_view trimmed = TrimSpaces(name);
  for (const GpuModel& m : kModels) {
    if (EqualsIgnoreCase(m.name, trimmed) || ContainsWord(m.aliases, trimmed)) return &m;
  }
  return Result<const GpuModel*>::Error(InputError(
      input_name, name, "not a MIG-capable GPU model we know", "one of " + ModelNames()));
}

const GpuModel* GpuModelFromProductName(std::string_view product_name) {
  // NVML names: "NVIDIA A30", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB
  // HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA H20",
  // "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA B200". Order matters: H200 before H20, GH200 before
  // H200 (it carries H100-class 96GB memory).
  auto has = [&](std::string_view part) { return ContainsIgnoreCase(product_name, part); };
  auto model = [](std::string_view name) { return FindGpuModel(name).value(); };
  if (has("A30")) return model("A30");
  if (has("A100")) return has("80GB") ? model("A100-80GB") : model("A100-40GB");
  if (has("GH200")) return model("H100-96GB");
  if (has("H200")) return model("H200-141GB");
  if (has("H20")) return model("H100-96GB");
  if (has("H100")) {
    if (has("NVL") || has("94GB")) return model("H100-94GB");
    if (has("96GB")) return model("H100-96GB");
    return model("H100-80GB");
  }
  if (has("B200")) return model("B200");
  // A model's own name or alias ("H100-80GB") names it too, as a simulated GPU may be called.
  for (const GpuModel& m : kModels) {
    if (EqualsIgnoreCase(m.name, TrimSpaces(product_name))) return &m;
  }
  return nullptr;
}

Result<const MigProfile*> FindProfile(const GpuModel& model, std::string_view name,
                                      std::string_view input_name) {
  std::string_view text = TrimSpaces(name);
  if (StartsWithIgnoreCase(text, "MIG ")) text = TrimSpaces(text.substr(4));
  for (const MigProfile& p : model.Profiles()) {
    if (EqualsIgnoreCase(p.name, text)) return &p;
  }
  const std::string expected =
      "one of the " + std::string(model.name) + " profiles: " + ProfileNames(model);
  const size_t dot = text.find('.');
  if (dot != std::string_view::npos && dot > 0 && (text[dot - 1] == 'c' || text[dot - 1] == 'C')) {
    return Result<const MigProfile*>::Error(InputError(
        input_name, name,
        "compute-instance profiles are not supported: Tessera creates one compute instance "
        "spanning each GPU instance",
        expected));
  }
  return Result<const MigProfile*>::Error(InputError(
      input_name, name, "not a MIG profile of the " + std::string(model.name), expected));
}

}  // namespace tessera::mig
