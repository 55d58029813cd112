// Tests of the MIG profile tables: every entry against the research notes' tables, and the
// entries against each other (names against slices, IDs unique, geometry shared by the 8-slice
// models), plus the lookups' errors.
#include "mig/profiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

namespace tessera::mig {
namespace {

using ::testing::HasSubstr;

const GpuModel& Model(std::string_view name) { return *FindGpuModel(name).value(); }

struct Expected {
  std::string_view name;
  uint32_t id;
  int compute, memory;
  std::string_view starts;
  int max;
};

// The research notes' tables (kubernetes-mig-mps-cdi.md §E.1), written out once more by hand so a
// typo in the code's table shows up as a difference.
void ExpectProfiles(std::string_view model, std::vector<Expected> expected) {
  SCOPED_TRACE(std::string(model));
  const GpuModel& m = Model(model);
  ASSERT_EQ(m.profile_count, static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const MigProfile& p = m.profiles[i];
    SCOPED_TRACE(std::string(p.name));
    EXPECT_EQ(p.name, expected[i].name);
    EXPECT_EQ(p.id, expected[i].id);
    EXPECT_EQ(p.compute_slices, expected[i].compute);
    EXPECT_EQ(p.memory_slices, expected[i].memory);
    EXPECT_EQ(StartSlots(p), expected[i].starts);
    EXPECT_EQ(p.published_max, expected[i].max);
  }
}

TEST(MigProfiles, A30) {
  ExpectProfiles("A30", {{"1g.6gb", 14, 1, 1, "{0,1,2,3}", 4},
                         {"1g.6gb+me", 21, 1, 1, "{0,1,2,3}", 1},
                         {"2g.12gb", 5, 2, 2, "{0,2}", 2},
                         {"2g.12gb+me", 6, 2, 2, "{0,2}", 1},
                         {"4g.24gb", 0, 4, 4, "{0}", 1}});
  EXPECT_EQ(Model("A30").memory_slices, 4);
  EXPECT_EQ(Model("A30").compute_slices, 4);
}

// The seven 8-slice profiles with a model's names.
std::vector<Expected> EightSlice(std::string_view g1, std::string_view g1me, std::string_view g1x2,
                                 std::string_view g2, std::string_view g3, std::string_view g4,
                                 std::string_view g7) {
  return {{g1, 19, 1, 1, "{0,1,2,3,4,5,6}", 7},
          {g1me, 20, 1, 1, "{0,1,2,3,4,5,6}", 1},
          {g1x2, 15, 1, 2, "{0,2,4,6}", 4},
          {g2, 14, 2, 2, "{0,2,4}", 3},
          {g3, 9, 3, 4, "{0,4}", 2},
          {g4, 5, 4, 4, "{0}", 1},
          {g7, 0, 7, 8, "{0}", 1}};
}

TEST(MigProfiles, EightSliceModels) {
  ExpectProfiles("A100-40GB", EightSlice("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb",
                                         "4g.20gb", "7g.40gb"));
  ExpectProfiles("A100-80GB", EightSlice("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb",
                                         "4g.40gb", "7g.80gb"));
  ExpectProfiles("H100-80GB", EightSlice("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb",
                                         "4g.40gb", "7g.80gb"));
  ExpectProfiles("H100-94GB", EightSlice("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb",
                                         "4g.47gb", "7g.94gb"));
  ExpectProfiles("H100-96GB", EightSlice("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb",
                                         "4g.48gb", "7g.96gb"));
  ExpectProfiles("H200-141GB", EightSlice("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb",
                                          "4g.71gb", "7g.141gb"));
  ExpectProfiles("B200", EightSlice("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb",
                                    "4g.90gb", "7g.180gb"));
  for (const GpuModel& m : GpuModels()) {
    if (m.name == "A30") continue;
    EXPECT_EQ(m.memory_slices, 8) << m.name;
    EXPECT_EQ(m.compute_slices, 7) << m.name;
  }
}

// Parses "<g>g.<gb>gb[+me]".
std::pair<int, int> NameNumbers(std::string_view name) {
  const size_t g = name.find('g');
  const size_t dot = name.find('.');
  const size_t gb = name.find("gb");
  return {std::stoi(std::string(name.substr(0, g))),
          std::stoi(std::string(name.substr(dot + 1, gb - dot - 1)))};
}

// The entries against each other: a name's "g" is its compute slices, and its memory is the
// whole GPU's (the largest profile's name) times its share of the memory slices, rounded to the
// nearest GB with halves up (94/4 = 23.5 -> 24gb, 141/2 = 70.5 -> 71gb, 141/4 = 35.25 -> 35gb).
TEST(MigProfiles, NamesAgreeWithSlices) {
  for (const GpuModel& m : GpuModels()) {
    const MigProfile& whole = m.profiles[m.profile_count - 1];
    ASSERT_EQ(whole.memory_slices, m.memory_slices) << m.name;
    const int total_gb = NameNumbers(whole.name).second;
    for (const MigProfile& p : m.Profiles()) {
      SCOPED_TRACE(std::string(m.name) + " " + std::string(p.name));
      const auto [g, gb] = NameNumbers(p.name);
      EXPECT_EQ(g, p.compute_slices);
      const double share = static_cast<double>(total_gb) * p.memory_slices / m.memory_slices;
      EXPECT_EQ(gb, static_cast<int>(std::floor(share + 0.5)));
      EXPECT_EQ(p.media_extensions, p.name.ends_with("+me"));
    }
  }
}

TEST(MigProfiles, IdsAndNvmlConstantsAreUniquePerModel) {
  for (const GpuModel& m : GpuModels()) {
    std::set<uint32_t> ids, constants;
    std::set<std::string_view> names;
    for (const MigProfile& p : m.Profiles()) {
      EXPECT_TRUE(ids.insert(p.id).second) << m.name << " " << p.name;
      EXPECT_TRUE(constants.insert(p.nvml_profile).second) << m.name << " " << p.name;
      EXPECT_TRUE(names.insert(p.name).second) << m.name << " " << p.name;
      EXPECT_LT(p.nvml_profile, static_cast<uint32_t>(kNvmlGiProfileCount));
    }
  }
}

// Every start slot leaves room for the instance, and an instance's compute slices never exceed
// the memory slices it covers below the last one (slice 7 on 8-slice GPUs, none on A30): this is
// why the compute limit never binds before the memory rules do (checked in planner_test).
TEST(MigProfiles, StartSlotsFitTheGpu) {
  for (const GpuModel& m : GpuModels()) {
    for (const MigProfile& p : m.Profiles()) {
      for (int s = 0; s < kMaxMemorySlices; ++s) {
        if (((p.start_mask >> s) & 1u) == 0) continue;
        EXPECT_LE(s + p.memory_slices, m.memory_slices) << m.name << " " << p.name << "@" << s;
        const int last = s + p.memory_slices - 1;
        const int covered_below_top = p.memory_slices - (m.memory_slices == 8 && last == 7 ? 1 : 0);
        EXPECT_LE(p.compute_slices, covered_below_top) << m.name << " " << p.name << "@" << s;
      }
      EXPECT_NE(p.start_mask, 0u);
    }
  }
}

TEST(MigProfiles, FindModelByNameAndAlias) {
  EXPECT_EQ(Model("h100-80gb").name, "H100-80GB");
  EXPECT_EQ(Model("H100").name, "H100-80GB");
  EXPECT_EQ(Model("H200").name, "H200-141GB");
  EXPECT_EQ(Model("A30-24GB").name, "A30");
  EXPECT_EQ(Model("GH200").name, "H100-96GB");
  EXPECT_EQ(Model("B200-180GB").name, "B200");
  auto bad = FindGpuModel("V100");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "--gpu=\"V100\": not a MIG-capable GPU model we know; expected one of A30, "
            "A100-40GB, A100-80GB, H100-80GB, H100-94GB, H100-96GB, H200-141GB, B200");
}

TEST(MigProfiles, ModelFromNvmlProductName) {
  auto name = [](std::string_view product) {
    const GpuModel* m = GpuModelFromProductName(product);
    return m == nullptr ? std::string("none") : std::string(m->name);
  };
  EXPECT_EQ(name("NVIDIA A30"), "A30");
  EXPECT_EQ(name("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  EXPECT_EQ(name("NVIDIA A100 80GB PCIe"), "A100-80GB");
  EXPECT_EQ(name("NVIDIA H100 80GB HBM3"), "H100-80GB");
  EXPECT_EQ(name("NVIDIA H100 PCIe"), "H100-80GB");
  EXPECT_EQ(name("NVIDIA H100 NVL"), "H100-94GB");
  EXPECT_EQ(name("NVIDIA GH200 480GB"), "H100-96GB");
  EXPECT_EQ(name("NVIDIA H20"), "H100-96GB");
  EXPECT_EQ(name("NVIDIA H200"), "H200-141GB");
  EXPECT_EQ(name("NVIDIA H200 NVL"), "H200-141GB");
  EXPECT_EQ(name("NVIDIA B200"), "B200");
  EXPECT_EQ(name("Tesla V100-SXM2-16GB"), "none");
  EXPECT_EQ(name("SimGPU"), "none");
}

TEST(MigProfiles, FindProfile) {
  const GpuModel& h100 = Model("H100-80GB");
  EXPECT_EQ(FindProfile(h100, "1G.10GB", "p").value()->id, 19u);
  EXPECT_EQ(FindProfile(h100, "MIG 3g.40gb", "p").value()->id, 9u);
  EXPECT_EQ(FindProfile(h100, "1g.10gb+me", "p").value()->id, 20u);
  auto other_model = FindProfile(h100, "1g.5gb", "instance profile");
  ASSERT_FALSE(other_model.ok());
  EXPECT_EQ(other_model.error(),
            "instance profile=\"1g.5gb\": not a MIG profile of the H100-80GB; expected one of "
            "the H100-80GB profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, "
            "7g.80gb");
  auto compute_instance = FindProfile(h100, "1c.3g.40gb", "instance profile");
  ASSERT_FALSE(compute_instance.ok());
  EXPECT_THAT(compute_instance.error(), HasSubstr("compute-instance profiles are not supported"));
  EXPECT_THAT(compute_instance.error(), HasSubstr("1g.10gb, 1g.10gb+me"));
}

TEST(MigProfiles, ComputeInstanceProfileConstants) {
  EXPECT_EQ(NvmlComputeInstanceProfileFor(1), 0);
  EXPECT_EQ(NvmlComputeInstanceProfileFor(2), 1);
  EXPECT_EQ(NvmlComputeInstanceProfileFor(3), 2);
  EXPECT_EQ(NvmlComputeInstanceProfileFor(4), 3);
  EXPECT_EQ(NvmlComputeInstanceProfileFor(7), 4);
  EXPECT_EQ(NvmlComputeInstanceProfileFor(5), -1);
}

}  // namespace
}  // namespace tessera::mig
