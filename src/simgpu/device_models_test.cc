// The GPU model table (device_models.h) on its own: which model a TESSERA_SIM_GPUS name selects,
// that every model's numbers agree with the published ones written out again here, that every
// attribute of CUDA 13.0's enum has an answer a real GPU of that model could give, and the SM
// counts of MIG instances.
#include "simgpu/device_models.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "simgpu/sim_state.h"

namespace tessera::sim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

const GpuSpec& Named(std::string_view name) {
  for (const GpuSpec& g : GpuSpecs()) {
    if (g.name == name) return g;
  }
  ADD_FAILURE() << "no model " << name;
  return GpuSpecs()[0];
}

std::string SpecName(int index) {
  return index < 0 ? "(none)" : std::string(GpuSpecs()[static_cast<size_t>(index)].name);
}

int MigModelIndex(std::string_view name) {
  auto m = mig::FindGpuModel(name, "mig");
  return m.ok() ? static_cast<int>(*m - mig::GpuModels().data()) : -1;
}

TEST(GpuSpecForTest, NamesSelectTheirModel) {
  struct Case {
    const char* name;
    uint64_t bytes;
    const char* want;
  } cases[] = {
      {"NVIDIA H100 80GB HBM3", 80 * kGiB, "H100-SXM5-80GB"},
      {"NVIDIA H100 PCIe", 80 * kGiB, "H100-PCIE-80GB"},
      {"SimH100", 8 * kGiB, "H100-SXM5-80GB"},
      {"H100-PCIe", 8 * kGiB, "H100-PCIE-80GB"},
      {"NVIDIA H200", 141 * kGiB, "H200-SXM5-141GB"},
      {"NVIDIA A100-SXM4-40GB", 40 * kGiB, "A100-SXM4-40GB"},
      {"NVIDIA A100-SXM4-80GB", 80 * kGiB, "A100-SXM4-80GB"},
      {"NVIDIA A100 80GB PCIe", 80 * kGiB, "A100-PCIE-80GB"},
      {"SimA100", 40 * kGiB, "A100-SXM4-40GB"},
      {"SimA100", 80 * kGiB, "A100-SXM4-80GB"},
      {"a100-pcie", 16 * kGiB, "A100-PCIE-40GB"},
      {"NVIDIA A30", 24 * kGiB, "A30-24GB"},
      {"NVIDIA L4", 24 * kGiB, "L4-24GB"},
      {"Tesla T4", 16 * kGiB, "T4-16GB"},
      {"SimT4", 16 * kGiB, "T4-16GB"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SpecName(GpuSpecFor(c.name, c.bytes, -1)), c.want) << c.name;
  }
  // Names that name none of the models: the default, with the SM count given.
  for (const char* name : {"SimGPU", "SimA", "SimT", "SimH", "NVIDIA L40S", "RTX 4090", "A3000",
                           "NVIDIA GH200 480GB", "T40"}) {
    EXPECT_EQ(GpuSpecFor(name, 16 * kGiB, -1), -1) << name;
  }
}

TEST(GpuSpecForTest, TheMigModelDecidesWhenTheNameDoesNot) {
  EXPECT_EQ(SpecName(GpuSpecFor("SimH", 8 * kGiB, MigModelIndex("H100-80GB"))), "H100-SXM5-80GB");
  EXPECT_EQ(SpecName(GpuSpecFor("SimA", 8 * kGiB, MigModelIndex("A100-80GB"))), "A100-SXM4-80GB");
  EXPECT_EQ(SpecName(GpuSpecFor("SimX", 8 * kGiB, MigModelIndex("A30"))), "A30-24GB");
  EXPECT_EQ(SpecName(GpuSpecFor("SimX", 8 * kGiB, MigModelIndex("H200-141GB"))), "H200-SXM5-141GB");
  EXPECT_EQ(GpuSpecFor("SimX", 8 * kGiB, MigModelIndex("B200")), -1) << "B200 is not in the table";
  // The name wins over the MIG model.
  EXPECT_EQ(SpecName(GpuSpecFor("NVIDIA H100 PCIe", 8 * kGiB, MigModelIndex("H100-80GB"))),
            "H100-PCIE-80GB");
}

TEST(ParseSimGpusModelTest, EntriesCarryTheirModelAndItsSmCount) {
  auto gpus = ParseSimGpus("NVIDIA L4:24GiB,SimT4:16GiB:8,Plain:8GiB,SimH:8GiB:mig=H100-80GB");
  ASSERT_TRUE(gpus.ok()) << gpus.error();
  EXPECT_EQ(SpecName((*gpus)[0].spec), "L4-24GB");
  EXPECT_EQ((*gpus)[0].sm_count, 58u) << "no SM count given: the model's";
  EXPECT_EQ(SpecName((*gpus)[1].spec), "T4-16GB");
  EXPECT_EQ((*gpus)[1].sm_count, 8u) << "an SM count given is kept";
  EXPECT_EQ((*gpus)[2].spec, kDefaultGpuSpec);
  EXPECT_EQ((*gpus)[2].sm_count, 80u);
  EXPECT_EQ(SpecName((*gpus)[3].spec), "H100-SXM5-80GB");
  EXPECT_EQ((*gpus)[3].sm_count, 132u);
  auto dflt = ParseSimGpus(nullptr);
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ((*dflt)[0].spec, kDefaultGpuSpec);
  EXPECT_EQ((*dflt)[0].sm_count, 80u);
}

// The published numbers, written out again (NVIDIA's whitepapers and datasheets, the CUDA
// programming guide's compute capability table, pci.ids).
struct Published {
  const char* model;
  int cc_major, cc_minor, sms, threads_per_sm, blocks_per_sm, smem_per_sm, smem_optin;
  int clock_khz, mem_clock_khz, bus_bits, l2_bytes, power_w;
  unsigned pci_device;
};
constexpr Published kPublished[] = {
    {"H100-SXM5-80GB", 9, 0, 132, 2048, 32, 233472, 232448, 1980000, 2619000, 5120, 52428800, 700,
     0x2330},
    {"H100-PCIE-80GB", 9, 0, 114, 2048, 32, 233472, 232448, 1755000, 1593000, 5120, 52428800, 350,
     0x2331},
    {"H200-SXM5-141GB", 9, 0, 132, 2048, 32, 233472, 232448, 1980000, 3201000, 6144, 52428800, 700,
     0x2335},
    {"A100-SXM4-40GB", 8, 0, 108, 2048, 32, 167936, 166912, 1410000, 1215000, 5120, 41943040, 400,
     0x20b0},
    {"A100-SXM4-80GB", 8, 0, 108, 2048, 32, 167936, 166912, 1410000, 1593000, 5120, 41943040, 400,
     0x20b2},
    {"A100-PCIE-40GB", 8, 0, 108, 2048, 32, 167936, 166912, 1410000, 1215000, 5120, 41943040, 250,
     0x20f1},
    {"A100-PCIE-80GB", 8, 0, 108, 2048, 32, 167936, 166912, 1410000, 1512000, 5120, 41943040, 300,
     0x20b5},
    {"A30-24GB", 8, 0, 56, 2048, 32, 167936, 166912, 1440000, 1215000, 3072, 25165824, 165, 0x20b7},
    {"L4-24GB", 8, 9, 58, 1536, 24, 102400, 101376, 2040000, 6251000, 192, 50331648, 72, 0x27b8},
    {"T4-16GB", 7, 5, 40, 1024, 16, 65536, 65536, 1590000, 5001000, 256, 4194304, 70, 0x1eb8},
};

DeviceFacts WholeGpu(const GpuSpec& g) {
  DeviceFacts f;
  f.spec = &g;
  f.sms = static_cast<uint32_t>(g.sms);
  f.total_bytes = g.memory_bytes;
  f.pci_bus = 0x10;
  return f;
}

int Attr(const DeviceFacts& f, int attribute) {
  int v = 0x5a5a5a5a;
  EXPECT_TRUE(DeviceAttribute(f, attribute, &v)) << attribute;
  return v;
}

TEST(DeviceModelsTest, EveryModelHasItsPublishedNumbers) {
  ASSERT_EQ(GpuSpecs().size(), std::size(kPublished)) << "a model without published numbers here";
  for (const Published& p : kPublished) {
    SCOPED_TRACE(p.model);
    const DeviceFacts f = WholeGpu(Named(p.model));
    EXPECT_EQ(Attr(f, 75), p.cc_major);
    EXPECT_EQ(Attr(f, 76), p.cc_minor);
    EXPECT_EQ(Attr(f, 16), p.sms);
    EXPECT_EQ(Attr(f, 39), p.threads_per_sm);
    EXPECT_EQ(Attr(f, 106), p.blocks_per_sm);
    EXPECT_EQ(Attr(f, 81), p.smem_per_sm);
    EXPECT_EQ(Attr(f, 97), p.smem_optin);
    EXPECT_EQ(Attr(f, 13), p.clock_khz);
    EXPECT_EQ(Attr(f, 36), p.mem_clock_khz);
    EXPECT_EQ(Attr(f, 37), p.bus_bits);
    EXPECT_EQ(Attr(f, 38), p.l2_bytes);
    EXPECT_EQ(static_cast<unsigned>(Attr(f, 139)), (p.pci_device << 16) | 0x10deu);
    EXPECT_EQ(f.spec->power_limit_w, p.power_w);
    EXPECT_EQ(Attr(f, 1), 1024);
    EXPECT_EQ(Attr(f, 10), 32);
    EXPECT_EQ(Attr(f, 12), 65536);
    EXPECT_EQ(Attr(f, 82), 65536);
    // Bandwidth from clock and bus width agrees with the datasheet's figure.
    const double gbs = f.spec->bus_width_bits / 8.0 * 2 * f.spec->memory_clock_mhz / 1000.0;
    EXPECT_NEAR(gbs, f.spec->bandwidth_gbs, f.spec->bandwidth_gbs * 0.03);
  }
}

// Attributes a discrete data-center GPU on x86-64 Linux answers with 0 (written from the enum's
// documentation, independently of the table): no watchdog, not integrated, default compute mode,
// slot device number and PCI domain 0, no TCC (Windows), one GPU per board, no host-native
// atomics or pageable access over PCIe, no remote-write flush, no Win32 handles, no fabric or
// multicast without NVSwitch/IMEX, no NUMA node of its own, no MPS, no CIG, no decompression
// engine before Blackwell, RDMA write ordering "none".
const std::set<int> kZeroOnDiscreteLinux = {17,  18,  20,  34,  35,  50,  84,  86,  88,  98,
                                            100, 101, 104, 105, 118, 128, 129, 130, 132, 133,
                                            134, 135, 136, 137, 138, 143, 146, 147};

TEST(DeviceModelsTest, EveryAttributeOfTheEnumIsAnsweredAsARealGpuWould) {
  for (const GpuSpec& g : GpuSpecs()) {
    SCOPED_TRACE(std::string(g.name));
    DeviceFacts f = WholeGpu(g);
    f.gpu_index = 1;  // board group 1: non-zero, so attribute 85 is checked too
    for (int a = -2; a < kCudaDeviceAttributeEnd + 20; ++a) {
      int v = 0x5a5a5a5a;
      const bool known = DeviceAttribute(f, a, &v);
      if (a < 1 || a >= kCudaDeviceAttributeEnd) {
        EXPECT_FALSE(known) << a << ": not in the enum, CUDA_ERROR_INVALID_VALUE";
        EXPECT_EQ(v, 0x5a5a5a5a) << a;
        continue;
      }
      ASSERT_TRUE(known) << a;
      std::set<int> zero = kZeroOnDiscreteLinux;
      if (g.arch->cc_major < 8) zero.insert({107, 108, 109, 111});  // before Ampere
      if (g.arch->cc_major < 9) zero.insert({120, 127});            // before Hopper
      if (g.arch->cc_minor == 0) zero.insert(76);                   // compute capability x.0
      if (a == 131) {
        EXPECT_EQ(v, -1) << "NUMA_ID: the GPU is no NUMA node";
      } else if (zero.count(a) != 0) {
        EXPECT_EQ(v, 0) << a;
      } else {
        EXPECT_GT(v, 0) << "attribute " << a << " is 0 or negative; a real " << g.product
                        << " gives a positive value";
      }
    }
    // Consistency between attributes.
    EXPECT_LE(Attr(f, 8), Attr(f, 97));   // static <= opt-in shared memory per block
    EXPECT_LE(Attr(f, 97), Attr(f, 81));  // opt-in per block <= per SM
    EXPECT_EQ(Attr(f, 97) + Attr(f, 111), Attr(f, 81))
        << "the opt-in maximum is the SM's shared memory less what the driver reserves";
    EXPECT_LE(Attr(f, 1), Attr(f, 39));
    EXPECT_LE(Attr(f, 108), Attr(f, 38));
    EXPECT_EQ(Attr(f, 106) * 64, Attr(f, 39)) << "blocks of 64 threads fill an SM exactly";
  }
}

TEST(DeviceModelsTest, AMigDeviceHasItsShareOfTheL2AndItsCopyEngines) {
  DeviceFacts f = WholeGpu(Named("H100-SXM5-80GB"));
  f.sms = 16;
  f.mig_fraction_num = 1;
  f.mig_fraction_den = 8;
  f.mig_copy_engines = 1;
  EXPECT_EQ(Attr(f, 16), 16);
  EXPECT_EQ(Attr(f, 38), 52428800 / 8);
  EXPECT_EQ(Attr(f, 40), 1);
  EXPECT_EQ(Attr(f, 39), 2048) << "an SM of a MIG device is still a whole SM";
}

TEST(MigInstanceSmsTest, PublishedCountsOnFullGpusProportionalOtherwise) {
  const mig::GpuModel& h100 = *mig::FindGpuModel("H100-80GB").value();
  const mig::GpuModel& a100 = *mig::FindGpuModel("A100-40GB").value();
  const mig::GpuModel& a30 = *mig::FindGpuModel("A30").value();
  auto sms = [](const mig::GpuModel& m, const char* profile, uint32_t gpu_sms) {
    return MigInstanceSms(m, *mig::FindProfile(m, profile, "p").value(), gpu_sms);
  };
  EXPECT_EQ(sms(h100, "1g.10gb", 132), 16u);
  EXPECT_EQ(sms(h100, "1g.10gb+me", 132), 16u);
  EXPECT_EQ(sms(h100, "1g.20gb", 132), 26u);
  EXPECT_EQ(sms(h100, "2g.20gb", 132), 32u);
  EXPECT_EQ(sms(h100, "3g.40gb", 132), 60u);
  EXPECT_EQ(sms(h100, "4g.40gb", 132), 64u);
  EXPECT_EQ(sms(h100, "7g.80gb", 132), 132u);
  EXPECT_EQ(sms(a100, "1g.5gb", 108), 14u);
  EXPECT_EQ(sms(a100, "3g.20gb", 108), 42u);
  EXPECT_EQ(sms(a100, "7g.40gb", 108), 98u);
  EXPECT_EQ(sms(a30, "2g.12gb", 56), 28u);
  EXPECT_EQ(sms(a30, "4g.24gb", 56), 56u);
  // Not the model's full SM count (an H100 PCIe's 114, or a small simulated GPU): proportional.
  EXPECT_EQ(sms(h100, "3g.40gb", 114), 114u * 3 / 7);
  EXPECT_EQ(sms(h100, "1g.10gb", 4), 1u) << "never 0 SMs";
}

TEST(SerialFromUuidTest, ThirteenDigitsStableAndDistinct) {
  char a[14], b[14], c[14];
  SerialFromUuid("GPU-11111111-2222-3333-4444-555555555555", a);
  SerialFromUuid("GPU-11111111-2222-3333-4444-555555555555", b);
  SerialFromUuid("GPU-11111111-2222-3333-4444-555555555556", c);
  EXPECT_EQ(std::strlen(a), 13u);
  for (char ch : std::string(a)) EXPECT_TRUE(ch >= '0' && ch <= '9') << a;
  EXPECT_STREQ(a, b);
  EXPECT_STRNE(a, c);
}

}  // namespace
}  // namespace tessera::sim
