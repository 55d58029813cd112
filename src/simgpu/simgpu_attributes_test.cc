// simgpu looks like the GPU it names: through the built library's exported cuDeviceGetAttribute
// and NVML entry points, a machine of eight differently named GPUs answers every attribute of
// CUDA 13.0's enum (and refuses the rest as the driver does) with each model's published values,
// and a tenant that sizes a launch limiter from threads per SM x SMs, as peer interposers do,
// runs its launches instead of waiting forever.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"
#include "process/child_process.h"
#include "simgpu/test_sim_library.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;

// One GPU of each model in the table, named as NVML names the real one, or as tests name them.
constexpr const char* kGpus =
    "NVIDIA H100 80GB HBM3:2GiB,NVIDIA H100 PCIe:2GiB,NVIDIA H200:2GiB,SimA100:2GiB,"
    "NVIDIA A100-SXM4-80GB:2GiB,NVIDIA A30:2GiB,NVIDIA L4:2GiB,Tesla T4:2GiB";

struct Sim {
  static tessera::sim::testing::SimLibrary& Get() {
    return tessera::sim::testing::SimLibrary::Get("attr", kGpus);
  }
};

#define SIM(name) (Sim::Get().Fn_<decltype(&::name)>(#name))

// Per device: the published values (NVIDIA whitepapers and datasheets, the CUDA programming
// guide's compute capability table, pci.ids), written out here independently of the table.
struct Expected {
  const char* name;
  int cc_major, cc_minor, sms, threads_per_sm, clock_mhz, mem_clock_mhz, bus_bits;
  unsigned power_w, pci_device, nvml_arch, cores_per_sm;
};
constexpr Expected kExpected[] = {
    {"NVIDIA H100 80GB HBM3", 9, 0, 132, 2048, 1980, 2619, 5120, 700, 0x2330, 9, 128},
    {"NVIDIA H100 PCIe", 9, 0, 114, 2048, 1755, 1593, 5120, 350, 0x2331, 9, 128},
    {"NVIDIA H200", 9, 0, 132, 2048, 1980, 3201, 6144, 700, 0x2335, 9, 128},
    {"SimA100", 8, 0, 108, 2048, 1410, 1215, 5120, 400, 0x20b0, 7, 64},
    {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 2048, 1410, 1593, 5120, 400, 0x20b2, 7, 64},
    {"NVIDIA A30", 8, 0, 56, 2048, 1440, 1215, 3072, 165, 0x20b7, 7, 64},
    {"NVIDIA L4", 8, 9, 58, 1536, 2040, 6251, 192, 72, 0x27b8, 8, 128},
    {"Tesla T4", 7, 5, 40, 1024, 1590, 5001, 256, 70, 0x1eb8, 6, 64},
};

class SimAttributesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(SIM(cuInit)(0), CUDA_SUCCESS);
    ASSERT_EQ(SIM(nvmlInit_v2)(), NVML_SUCCESS);
  }
  void TearDown() override { SIM(nvmlShutdown)(); }
  int Attr(int attribute, CUdevice dev) {
    int v = 0;
    EXPECT_EQ(SIM(cuDeviceGetAttribute)(&v, static_cast<CUdevice_attribute>(attribute), dev),
              CUDA_SUCCESS)
        << attribute;
    return v;
  }
};

TEST_F(SimAttributesTest, EveryAttributeOfTheEnumIsAnsweredAndNoOther) {
  int count = 0;
  ASSERT_EQ(SIM(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  ASSERT_EQ(count, 8);
  for (CUdevice dev = 0; dev < count; ++dev) {
    int answered = 0;
    for (int a = -1; a <= CU_DEVICE_ATTRIBUTE_MAX + 16; ++a) {
      int v = 0x5a5a5a5a;
      const CUresult r = SIM(cuDeviceGetAttribute)(&v, static_cast<CUdevice_attribute>(a), dev);
      if (a >= 1 && a < CU_DEVICE_ATTRIBUTE_MAX) {
        EXPECT_EQ(r, CUDA_SUCCESS) << "device " << dev << " attribute " << a;
        EXPECT_NE(v, 0x5a5a5a5a) << "device " << dev << " attribute " << a << " left unset";
        ++answered;
      } else {
        EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE) << "device " << dev << " attribute " << a;
        EXPECT_EQ(v, 0x5a5a5a5a) << "an invalid attribute wrote its answer";
      }
    }
    EXPECT_EQ(answered, 147);
  }
  int v = 0;
  EXPECT_EQ(SIM(cuDeviceGetAttribute)(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 8),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(SIM(cuDeviceGetAttribute)(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimAttributesTest, EachDeviceAnswersItsModelsPublishedValues) {
  for (CUdevice dev = 0; dev < 8; ++dev) {
    const Expected& e = kExpected[dev];
    SCOPED_TRACE(e.name);
    char name[128] = {};
    ASSERT_EQ(SIM(cuDeviceGetName)(name, sizeof(name), dev), CUDA_SUCCESS);
    EXPECT_STREQ(name, e.name);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), e.cc_major);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), e.cc_minor);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), e.sms);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev), e.threads_per_sm);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev), 1024);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev), 32);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), e.clock_mhz * 1000);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev), e.mem_clock_mhz * 1000);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev), e.bus_bits);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev), 0x10 + dev);
    EXPECT_GT(Attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, dev), 0);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev), 1);
    EXPECT_EQ(Attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev), 1);
  }
}

TEST_F(SimAttributesTest, NvmlAnswersFromTheSameTable) {
  const std::regex uuid_format("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  for (unsigned int i = 0; i < 8; ++i) {
    const Expected& e = kExpected[i];
    SCOPED_TRACE(e.name);
    nvmlDevice_t d = nullptr;
    ASSERT_EQ(SIM(nvmlDeviceGetHandleByIndex_v2)(i, &d), NVML_SUCCESS);
    char name[96] = {};
    ASSERT_EQ(SIM(nvmlDeviceGetName)(d, name, sizeof(name)), NVML_SUCCESS);
    EXPECT_STREQ(name, e.name);
    int major = -1, minor = -1;
    ASSERT_EQ(SIM(nvmlDeviceGetCudaComputeCapability)(d, &major, &minor), NVML_SUCCESS);
    EXPECT_EQ(major, e.cc_major);
    EXPECT_EQ(minor, e.cc_minor);
    nvmlDeviceArchitecture_t arch = 0;
    ASSERT_EQ(SIM(nvmlDeviceGetArchitecture)(d, &arch), NVML_SUCCESS);
    EXPECT_EQ(arch, e.nvml_arch);
    nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
    ASSERT_EQ(SIM(nvmlDeviceGetBrand)(d, &brand), NVML_SUCCESS);
    EXPECT_EQ(brand, NVML_BRAND_NVIDIA);
    unsigned int clock = 0;
    ASSERT_EQ(SIM(nvmlDeviceGetMaxClockInfo)(d, NVML_CLOCK_SM, &clock), NVML_SUCCESS);
    EXPECT_EQ(clock, static_cast<unsigned>(e.clock_mhz));
    ASSERT_EQ(SIM(nvmlDeviceGetMaxClockInfo)(d, NVML_CLOCK_GRAPHICS, &clock), NVML_SUCCESS);
    EXPECT_EQ(clock, static_cast<unsigned>(e.clock_mhz));
    ASSERT_EQ(SIM(nvmlDeviceGetMaxClockInfo)(d, NVML_CLOCK_MEM, &clock), NVML_SUCCESS);
    EXPECT_EQ(clock, static_cast<unsigned>(e.mem_clock_mhz));
    ASSERT_EQ(SIM(nvmlDeviceGetClockInfo)(d, NVML_CLOCK_SM, &clock), NVML_SUCCESS);
    EXPECT_GT(clock, 0u);
    EXPECT_EQ(SIM(nvmlDeviceGetClockInfo)(d, static_cast<nvmlClockType_t>(7), &clock),
              NVML_ERROR_INVALID_ARGUMENT);
    unsigned int width = 0;
    ASSERT_EQ(SIM(nvmlDeviceGetMemoryBusWidth)(d, &width), NVML_SUCCESS);
    EXPECT_EQ(width, static_cast<unsigned>(e.bus_bits));
    unsigned int limit = 0, dflt = 0, enforced = 0;
    ASSERT_EQ(SIM(nvmlDeviceGetPowerManagementLimit)(d, &limit), NVML_SUCCESS);
    ASSERT_EQ(SIM(nvmlDeviceGetPowerManagementDefaultLimit)(d, &dflt), NVML_SUCCESS);
    ASSERT_EQ(SIM(nvmlDeviceGetEnforcedPowerLimit)(d, &enforced), NVML_SUCCESS);
    EXPECT_EQ(limit, e.power_w * 1000);
    EXPECT_EQ(dflt, e.power_w * 1000);
    EXPECT_EQ(enforced, e.power_w * 1000);
    nvmlPciInfo_t pci{};
    ASSERT_EQ(SIM(nvmlDeviceGetPciInfo_v3)(d, &pci), NVML_SUCCESS);
    EXPECT_EQ(pci.pciDeviceId, (e.pci_device << 16) | 0x10deu);
    EXPECT_EQ(pci.bus, 0x10 + i);
    unsigned int cores = 0;
    ASSERT_EQ(SIM(nvmlDeviceGetNumGpuCores)(d, &cores), NVML_SUCCESS);
    EXPECT_EQ(cores, static_cast<unsigned>(e.sms) * e.cores_per_sm);
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE] = {};
    ASSERT_EQ(SIM(nvmlDeviceGetSerial)(d, serial, sizeof(serial)), NVML_SUCCESS);
    EXPECT_TRUE(std::regex_match(serial, std::regex("1[0-9]{12}"))) << serial;
    char small[5];
    EXPECT_EQ(SIM(nvmlDeviceGetSerial)(d, small, sizeof(small)), NVML_ERROR_INSUFFICIENT_SIZE);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    ASSERT_EQ(SIM(nvmlDeviceGetUUID)(d, uuid, sizeof(uuid)), NVML_SUCCESS);
    EXPECT_TRUE(std::regex_match(uuid, uuid_format)) << uuid;
    unsigned int current = 9, pending = 9;
    EXPECT_EQ(SIM(nvmlDeviceGetMigMode)(d, &current, &pending), NVML_ERROR_NOT_SUPPORTED)
        << "no GPU here was configured MIG-capable";
  }
  int major = 0, minor = 0;
  EXPECT_EQ(SIM(nvmlDeviceGetCudaComputeCapability)(nullptr, &major, &minor),
            NVML_ERROR_INVALID_ARGUMENT);
}

// A peer interposer's limiter, played by sim_tenant: tokens = threads per SM x SMs. With the
// attribute at 0 every launch waited for tokens that never came.
class LimiterTenantTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& s : states_) shm_unlink(("/tessera-sim-" + s).c_str());
  }
  // `through_shim`: the tenant opens the libcuda shim, which forwards to simgpu (no tesserad:
  // the shim fails open, so only the pass-through of the attributes is under test).
  std::unique_ptr<ChildProcess> Tenant(const char* gpus, bool through_shim = false) {
    states_.push_back(UniqueName("limiter"));
    const std::string simgpu = BuildDir() + "/lib/libtessera-simgpu.so";
    // Empty TESSERA_SIM_GPUS is the default machine (this process's own value is inherited
    // otherwise).
    std::vector<std::string> env = {"TESSERA_SIM_STATE=" + states_.back(),
                                    std::string("TESSERA_SIM_GPUS=") + (gpus ? gpus : "")};
    if (through_shim) {
      env.push_back("TESSERA_REAL_LIBCUDA=" + simgpu);
      env.push_back("TESSERA_FAIL_OPEN=1");
      env.push_back("TESSERA_SOCKET=/tmp/" + states_.back() + ".sock");  // nobody listens
    }
    auto child = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/sim_tenant",
                                 through_shim ? BuildDir() + "/lib/tessera/libcuda.so.1" : simgpu,
                                 "limiter", "200"},
        env);
    EXPECT_TRUE(child->started());
    return child;
  }
  std::vector<std::string> states_;
};

TEST_F(LimiterTenantTest, ALimiterSizedFromTheAttributesLetsLaunchesThrough) {
  struct Case {
    const char* gpus;  // nullptr: the default machine
    const char* sms;
    const char* threads_per_sm;
    const char* cc;
    bool through_shim;
  } cases[] = {
      {nullptr, "80", "2048", "9.0", false},  // SimGPU:16GiB:80, the default model's architecture
      {"Tesla T4:2GiB", "40", "1024", "7.5", false},
      {"NVIDIA L4:2GiB", "58", "1536", "8.9", false},
      {"NVIDIA L4:2GiB", "58", "1536", "8.9", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.gpus == nullptr ? "default" : c.gpus) +
                 (c.through_shim ? " through the shim" : ""));
    auto tenant = Tenant(c.gpus, c.through_shim);
    ASSERT_EQ(tenant->Wait(30s), 0) << "the limiter stalled (exit 1) or the tenant failed";
    tenant->DrainOutput(5s);
    EXPECT_EQ(tenant->values().at("sms"), c.sms);
    EXPECT_EQ(tenant->values().at("threads_per_sm"), c.threads_per_sm);
    EXPECT_EQ(tenant->values().at("cc"), c.cc);
    EXPECT_EQ(tenant->values().at("capacity"),
              std::to_string(std::stoll(c.sms) * std::stoll(c.threads_per_sm)));
    EXPECT_EQ(tenant->values().at("launched"), "200");
    EXPECT_EQ(tenant->values().count("stalled"), 0u);
  }
}

}  // namespace
