// The GPU model table and the attribute answers derived from it (device_models.h). Facts only:
// every number below is a published one, cited where it is written; nothing here is measured or
// guessed, and where no GPU publishes a value the driver's documented meaning decides it.
#include "simgpu/device_models.h"

#include <cctype>
#include <cstdio>

#include "driver/cuda_api.h"

namespace tessera::sim {

static_assert(kCudaDeviceAttributeEnd == CU_DEVICE_ATTRIBUTE_MAX);
namespace {

// ---- Architectures -------------------------------------------------------------------------
// Source: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per
// Compute Capability" (resident threads, blocks and warps per SM; registers per SM and per block;
// shared memory per SM and the opt-in maximum per block, which is the SM's less the 1 KB the
// driver reserves per block from 8.0 on), and "Arithmetic Instructions" (FP32 and FP64 results per
// clock per SM, whose quotient is the single-to-double ratio). Core counts per SM: the Turing
// (TU104), Ampere (GA100) and Ada (AD104) whitepapers and the H100 Tensor Core GPU whitepaper.
constexpr ArchSpec kTuring{.name = "Turing",
                           .nvml_arch = kNvmlArchTuring,
                           .cc_major = 7,
                           .cc_minor = 5,
                           .max_threads_per_sm = 1024,
                           .max_blocks_per_sm = 16,
                           .registers_per_sm = 65536,
                           .registers_per_block = 65536,
                           .shared_per_sm = 65536,
                           .shared_per_block_optin = 65536,
                           .reserved_shared_per_block = 0,
                           .fp32_cores_per_sm = 64,
                           .fp32_to_fp64_ratio = 32};
constexpr ArchSpec kAmpereGA100{.name = "Ampere",
                                .nvml_arch = kNvmlArchAmpere,
                                .cc_major = 8,
                                .cc_minor = 0,
                                .max_threads_per_sm = 2048,
                                .max_blocks_per_sm = 32,
                                .registers_per_sm = 65536,
                                .registers_per_block = 65536,
                                .shared_per_sm = 167936,
                                .shared_per_block_optin = 166912,
                                .reserved_shared_per_block = 1024,
                                .fp32_cores_per_sm = 64,
                                .fp32_to_fp64_ratio = 2};
constexpr ArchSpec kAda{.name = "Ada",
                        .nvml_arch = kNvmlArchAda,
                        .cc_major = 8,
                        .cc_minor = 9,
                        .max_threads_per_sm = 1536,
                        .max_blocks_per_sm = 24,
                        .registers_per_sm = 65536,
                        .registers_per_block = 65536,
                        .shared_per_sm = 102400,
                        .shared_per_block_optin = 101376,
                        .reserved_shared_per_block = 1024,
                        .fp32_cores_per_sm = 128,
                        .fp32_to_fp64_ratio = 64};
constexpr ArchSpec kHopper{.name = "Hopper",
                           .nvml_arch = kNvmlArchHopper,
                           .cc_major = 9,
                           .cc_minor = 0,
                           .max_threads_per_sm = 2048,
                           .max_blocks_per_sm = 32,
                           .registers_per_sm = 65536,
                           .registers_per_block = 65536,
                           .shared_per_sm = 233472,
                           .shared_per_block_optin = 232448,
                           .reserved_shared_per_block = 1024,
                           .fp32_cores_per_sm = 128,
                           .fp32_to_fp64_ratio = 2};

constexpr uint64_t kGB = 1000ull * 1000 * 1000;
constexpr int kMiB = 1 << 20;

// ---- Products ------------------------------------------------------------------------------
// SMs, boost clock, memory bus width, L2 size, memory size and bandwidth, TDP: NVIDIA's product
// datasheets and whitepapers (NVIDIA H100 Tensor Core GPU Architecture whitepaper, table
// "Comparison of NVIDIA A100 and H100 Data Center GPUs" for H100 SXM5/PCIe; NVIDIA A100 Tensor
// Core GPU Architecture whitepaper and the A100 datasheet for the A100s; the A30, L4, T4 and H200
// datasheets). The memory clock is the one CUDA's deviceQuery and nvidia-smi report for the
// product; bandwidth = bus width / 8 x 2 (double data rate) x memory clock agrees with the
// datasheet's figure within 3 % (device_models_test checks it). Copy engines: deviceQuery's
// "Concurrent copy and kernel execution: Yes with N copy engine(s)" for the product (published
// listings confirm 3 for the A100 and T4; the H100, H200, A30 and L4 counts are the least certain
// numbers here, and only the attribute ASYNC_ENGINE_COUNT depends on them). PCI device
// IDs: the PCI ID Repository (pci.ids, vendor 10de). Product names: NVML's nvmlDeviceGetName.
// Columns: name, NVML product name, architecture, SMs, memory, boost MHz, memory MHz, bus bits, L2,
// copy engines, PCI device ID, TDP W, bandwidth GB/s, MIG model.
// clang-format off
constexpr GpuSpec kSpecs[] = {
    // The default (index 0) is the H100 SXM5: what a name that names no model simulates.
    {"H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", &kHopper, 132, 80 * kGB, 1980, 2619, 5120,
     50 * kMiB, 3, 0x2330, 700, 3350, "H100-80GB"},
    {"H100-PCIE-80GB", "NVIDIA H100 PCIe", &kHopper, 114, 80 * kGB, 1755, 1593, 5120, 50 * kMiB,
     2, 0x2331, 350, 2000, "H100-80GB"},
    {"H200-SXM5-141GB", "NVIDIA H200", &kHopper, 132, 141 * kGB, 1980, 3201, 6144, 50 * kMiB, 3,
     0x2335, 700, 4800, "H200-141GB"},
    {"A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", &kAmpereGA100, 108, 40 * kGB, 1410, 1215, 5120,
     40 * kMiB, 3, 0x20b0, 400, 1555, "A100-40GB"},
    {"A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", &kAmpereGA100, 108, 80 * kGB, 1410, 1593, 5120,
     40 * kMiB, 3, 0x20b2, 400, 2039, "A100-80GB"},
    {"A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", &kAmpereGA100, 108, 40 * kGB, 1410, 1215, 5120,
     40 * kMiB, 3, 0x20f1, 250, 1555, "A100-40GB"},
    {"A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", &kAmpereGA100, 108, 80 * kGB, 1410, 1512, 5120,
     40 * kMiB, 3, 0x20b5, 300, 1935, "A100-80GB"},
    {"A30-24GB", "NVIDIA A30", &kAmpereGA100, 56, 24 * kGB, 1440, 1215, 3072, 24 * kMiB, 3,
     0x20b7, 165, 933, "A30"},
    {"L4-24GB", "NVIDIA L4", &kAda, 58, 24 * kGB, 2040, 6251, 192, 48 * kMiB, 2, 0x27b8, 72, 300,
     ""},
    {"T4-16GB", "Tesla T4", &kTuring, 40, 16 * kGB, 1590, 5001, 256, 4 * kMiB, 3, 0x1eb8, 70, 320,
     ""},
};
// clang-format on

int SpecIndex(std::string_view name) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    if (kSpecs[i].name == name) return static_cast<int>(i);
  }
  return kDefaultGpuSpec;
}

// Whether `text` holds `token` (case ignored) with no digit right before or after it: "SimT4"
// and "Tesla T4" hold T4, "RTX 4090" and "L40S" hold no L4.
bool HasToken(std::string_view text, std::string_view token) {
  for (size_t at = 0; at + token.size() <= text.size(); ++at) {
    bool match = true;
    for (size_t i = 0; i < token.size() && match; ++i) {
      match = std::toupper(static_cast<unsigned char>(text[at + i])) ==
              std::toupper(static_cast<unsigned char>(token[i]));
    }
    if (!match) continue;
    const size_t end = at + token.size();
    if (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) continue;
    if (at > 0 && std::isdigit(static_cast<unsigned char>(text[at - 1]))) continue;
    return true;
  }
  return false;
}

// -1 when the name names no model.
int SpecFromName(std::string_view name, uint64_t total_bytes) {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    if (HasToken(name, kSpecs[i].name) || HasToken(name, kSpecs[i].product)) {
      return static_cast<int>(i);
    }
  }
  const bool big = HasToken(name, "80GB") || total_bytes > (48ull << 30);
  const bool pcie = HasToken(name, "PCIe");
  if (HasToken(name, "GH200")) return -1;  // Grace Hopper: not in the table
  if (HasToken(name, "H200")) return SpecIndex("H200-SXM5-141GB");
  if (HasToken(name, "H100")) return SpecIndex(pcie ? "H100-PCIE-80GB" : "H100-SXM5-80GB");
  if (HasToken(name, "A100")) {
    if (pcie) return SpecIndex(big ? "A100-PCIE-80GB" : "A100-PCIE-40GB");
    return SpecIndex(big ? "A100-SXM4-80GB" : "A100-SXM4-40GB");
  }
  if (HasToken(name, "A30")) return SpecIndex("A30-24GB");
  if (HasToken(name, "L4")) return SpecIndex("L4-24GB");
  if (HasToken(name, "T4")) return SpecIndex("T4-16GB");
  return -1;
}

// SMs per MIG profile on a GPU with the model's full SM count, from `nvidia-smi mig -lgip`
// listings as NVIDIA's MIG User Guide ("Supported MIG Profiles") and published captures give them:
// A100 (108 SMs): 14 per compute slice, 98 for 7g; A30 (56 SMs): 14 per slice; H100/H200 (132
// SMs): 1g 16, 1g with two memory slices 26, 2g 32, 3g 60, 4g 64, 7g 132. The H100 94GB (H100 NVL)
// listing gives the same counts; for the H200 the captures show 1g 16, 2g 32 and 7g 132, and its
// other profiles are taken from the H100's (the same GH100 die and slice layout).
struct MigSms {
  std::string_view model;
  int gpu_sms;
  int compute_slices;
  int memory_slices;  // 0: any
  int sms;
};
constexpr MigSms kMigSms[] = {
    {"A100-40GB", 108, 1, 0, 14},   {"A100-40GB", 108, 2, 0, 28},  {"A100-40GB", 108, 3, 0, 42},
    {"A100-40GB", 108, 4, 0, 56},   {"A100-40GB", 108, 7, 0, 98},  {"A100-80GB", 108, 1, 0, 14},
    {"A100-80GB", 108, 2, 0, 28},   {"A100-80GB", 108, 3, 0, 42},  {"A100-80GB", 108, 4, 0, 56},
    {"A100-80GB", 108, 7, 0, 98},   {"A30", 56, 1, 0, 14},         {"A30", 56, 2, 0, 28},
    {"A30", 56, 4, 0, 56},          {"H100-80GB", 132, 1, 1, 16},  {"H100-80GB", 132, 1, 2, 26},
    {"H100-80GB", 132, 2, 0, 32},   {"H100-80GB", 132, 3, 0, 60},  {"H100-80GB", 132, 4, 0, 64},
    {"H100-80GB", 132, 7, 0, 132},  {"H100-94GB", 132, 1, 1, 16},  {"H100-94GB", 132, 1, 2, 26},
    {"H100-94GB", 132, 2, 0, 32},   {"H100-94GB", 132, 3, 0, 60},  {"H100-94GB", 132, 4, 0, 64},
    {"H100-94GB", 132, 7, 0, 132},  {"H200-141GB", 132, 1, 1, 16}, {"H200-141GB", 132, 1, 2, 26},
    {"H200-141GB", 132, 2, 0, 32},  {"H200-141GB", 132, 3, 0, 60}, {"H200-141GB", 132, 4, 0, 64},
    {"H200-141GB", 132, 7, 0, 132},
};

}  // namespace

std::span<const GpuSpec> GpuSpecs() { return kSpecs; }

int GpuSpecFor(std::string_view name, uint64_t total_bytes, int mig_model) {
  if (const int by_name = SpecFromName(name, total_bytes); by_name >= 0) return by_name;
  if (mig_model >= 0 && static_cast<size_t>(mig_model) < mig::GpuModels().size()) {
    const std::string_view model = mig::GpuModels()[static_cast<size_t>(mig_model)].name;
    for (size_t i = 0; i < std::size(kSpecs); ++i) {
      if (kSpecs[i].mig_model == model) return static_cast<int>(i);  // the first: SXM
    }
  }
  return -1;
}

uint32_t MigInstanceSms(const mig::GpuModel& model, const mig::MigProfile& profile,
                        uint32_t gpu_sms) {
  for (const MigSms& m : kMigSms) {
    if (m.model == model.name && static_cast<uint32_t>(m.gpu_sms) == gpu_sms &&
        m.compute_slices == profile.compute_slices &&
        (m.memory_slices == 0 || m.memory_slices == profile.memory_slices)) {
      return static_cast<uint32_t>(m.sms);
    }
  }
  const uint32_t sms = gpu_sms * static_cast<uint32_t>(profile.compute_slices) /
                       static_cast<uint32_t>(model.compute_slices);
  return sms == 0 ? 1 : sms;
}

void SerialFromUuid(const char* uuid, char out[14]) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = uuid; *p != '\0'; ++p) {
    h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  }
  // Serials of NVIDIA data-center boards are 13 decimal digits starting with 1.
  std::snprintf(out, 14, "1%012llu", static_cast<unsigned long long>(h % 1000000000000ull));
}

bool DeviceAttribute(const DeviceFacts& device, int attribute, int* value) {
  const GpuSpec& g = *device.spec;
  const ArchSpec& a = *g.arch;
  const bool ampere_on = a.cc_major >= 8;
  const bool hopper_on = a.cc_major >= 9;
  // A MIG device has its share of the L2 (its memory slices' share).
  const int l2 = static_cast<int>(static_cast<int64_t>(g.l2_bytes) * device.mig_fraction_num /
                                  device.mig_fraction_den);
  int v = 0;
  // Texture, surface and grid limits: the programming guide's per-compute-capability table, the
  // same for every compute capability from 5.0 on (cudaDeviceProp's maxTexture*, maxSurface*).
  // clang-format off
  switch (attribute) {
    case 1: v = 1024; break;                  // MAX_THREADS_PER_BLOCK
    case 2: v = 1024; break;                  // MAX_BLOCK_DIM_X
    case 3: v = 1024; break;                  // MAX_BLOCK_DIM_Y
    case 4: v = 64; break;                    // MAX_BLOCK_DIM_Z
    case 5: v = 2147483647; break;            // MAX_GRID_DIM_X
    case 6: v = 65535; break;                 // MAX_GRID_DIM_Y
    case 7: v = 65535; break;                 // MAX_GRID_DIM_Z
    case 8: v = 49152; break;                 // MAX_SHARED_MEMORY_PER_BLOCK (48 KB static)
    case 9: v = 65536; break;                 // TOTAL_CONSTANT_MEMORY
    case 10: v = 32; break;                   // WARP_SIZE
    case 11: v = 2147483647; break;           // MAX_PITCH
    case 12: v = a.registers_per_block; break;  // MAX_REGISTERS_PER_BLOCK
    case 13: v = g.max_clock_mhz * 1000; break;  // CLOCK_RATE (kHz)
    case 14: v = 512; break;                  // TEXTURE_ALIGNMENT
    case 15: v = 1; break;                    // GPU_OVERLAP
    case 16: v = static_cast<int>(device.sms); break;  // MULTIPROCESSOR_COUNT
    case 17: v = 0; break;                    // KERNEL_EXEC_TIMEOUT: no display watchdog
    case 18: v = 0; break;                    // INTEGRATED: discrete
    case 19: v = 1; break;                    // CAN_MAP_HOST_MEMORY
    case 20: v = 0; break;                    // COMPUTE_MODE: CU_COMPUTEMODE_DEFAULT
    case 21: v = 131072; break;               // MAXIMUM_TEXTURE1D_WIDTH
    case 22: v = 131072; break;               // MAXIMUM_TEXTURE2D_WIDTH
    case 23: v = 65536; break;                // MAXIMUM_TEXTURE2D_HEIGHT
    case 24: v = 16384; break;                // MAXIMUM_TEXTURE3D_WIDTH
    case 25: v = 16384; break;                // MAXIMUM_TEXTURE3D_HEIGHT
    case 26: v = 16384; break;                // MAXIMUM_TEXTURE3D_DEPTH
    case 27: v = 32768; break;                // MAXIMUM_TEXTURE2D_LAYERED_WIDTH
    case 28: v = 32768; break;                // MAXIMUM_TEXTURE2D_LAYERED_HEIGHT
    case 29: v = 2048; break;                 // MAXIMUM_TEXTURE2D_LAYERED_LAYERS
    case 30: v = 512; break;                  // SURFACE_ALIGNMENT
    case 31: v = 1; break;                    // CONCURRENT_KERNELS
    case 32: v = 1; break;                    // ECC_ENABLED (data-center boards ship with it on)
    case 33: v = device.pci_bus; break;       // PCI_BUS_ID
    case 34: v = 0; break;                    // PCI_DEVICE_ID: the slot's device number, 0
    case 35: v = 0; break;                    // TCC_DRIVER: Windows only
    case 36: v = g.memory_clock_mhz * 1000; break;  // MEMORY_CLOCK_RATE (kHz)
    case 37: v = g.bus_width_bits; break;     // GLOBAL_MEMORY_BUS_WIDTH
    case 38: v = l2; break;                   // L2_CACHE_SIZE
    case 39: v = a.max_threads_per_sm; break;  // MAX_THREADS_PER_MULTIPROCESSOR
    case 40:                                   // ASYNC_ENGINE_COUNT
      v = device.mig_copy_engines > 0 ? device.mig_copy_engines : g.copy_engines;
      break;
    case 41: v = 1; break;                    // UNIFIED_ADDRESSING
    case 42: v = 32768; break;                // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
    case 43: v = 2048; break;                 // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
    case 44: v = 1; break;                    // CAN_TEX2D_GATHER
    case 45: v = 32768; break;                // MAXIMUM_TEXTURE2D_GATHER_WIDTH
    case 46: v = 32768; break;                // MAXIMUM_TEXTURE2D_GATHER_HEIGHT
    case 47: v = 8192; break;                 // MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE
    case 48: v = 8192; break;                 // MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE
    case 49: v = 32768; break;                // MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
    case 50: v = 0; break;                    // PCI_DOMAIN_ID: domain 0000
    case 51: v = 32; break;                   // TEXTURE_PITCH_ALIGNMENT
    case 52: v = 32768; break;                // MAXIMUM_TEXTURECUBEMAP_WIDTH
    case 53: v = 32768; break;                // MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH
    case 54: v = 2046; break;                 // MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
    case 55: v = 32768; break;                // MAXIMUM_SURFACE1D_WIDTH
    case 56: v = 131072; break;               // MAXIMUM_SURFACE2D_WIDTH
    case 57: v = 65536; break;                // MAXIMUM_SURFACE2D_HEIGHT
    case 58: v = 16384; break;                // MAXIMUM_SURFACE3D_WIDTH
    case 59: v = 16384; break;                // MAXIMUM_SURFACE3D_HEIGHT
    case 60: v = 16384; break;                // MAXIMUM_SURFACE3D_DEPTH
    case 61: v = 32768; break;                // MAXIMUM_SURFACE1D_LAYERED_WIDTH
    case 62: v = 2048; break;                 // MAXIMUM_SURFACE1D_LAYERED_LAYERS
    case 63: v = 32768; break;                // MAXIMUM_SURFACE2D_LAYERED_WIDTH
    case 64: v = 32768; break;                // MAXIMUM_SURFACE2D_LAYERED_HEIGHT
    case 65: v = 2048; break;                 // MAXIMUM_SURFACE2D_LAYERED_LAYERS
    case 66: v = 32768; break;                // MAXIMUM_SURFACECUBEMAP_WIDTH
    case 67: v = 32768; break;                // MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH
    case 68: v = 2046; break;                 // MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
    case 69: v = 268435456; break;            // MAXIMUM_TEXTURE1D_LINEAR_WIDTH (2^28)
    case 70: v = 131072; break;               // MAXIMUM_TEXTURE2D_LINEAR_WIDTH
    case 71: v = 65000; break;                // MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
    case 72: v = 2097120; break;              // MAXIMUM_TEXTURE2D_LINEAR_PITCH
    case 73: v = 32768; break;                // MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
    case 74: v = 32768; break;                // MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT
    case 75: v = a.cc_major; break;           // COMPUTE_CAPABILITY_MAJOR
    case 76: v = a.cc_minor; break;           // COMPUTE_CAPABILITY_MINOR
    case 77: v = 32768; break;                // MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
    case 78: v = 1; break;                    // STREAM_PRIORITIES_SUPPORTED
    case 79: v = 1; break;                    // GLOBAL_L1_CACHE_SUPPORTED
    case 80: v = 1; break;                    // LOCAL_L1_CACHE_SUPPORTED
    case 81: v = a.shared_per_sm; break;      // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: v = a.registers_per_sm; break;   // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 83: v = 1; break;                    // MANAGED_MEMORY
    case 84: v = 0; break;                    // MULTI_GPU_BOARD: one GPU per board
    case 85: v = device.gpu_index; break;     // MULTI_GPU_BOARD_GROUP_ID: one group per board
    case 86: v = 0; break;                    // HOST_NATIVE_ATOMIC_SUPPORTED: PCIe to x86
    case 87: v = a.fp32_to_fp64_ratio; break;  // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    case 88: v = 0; break;                    // PAGEABLE_MEMORY_ACCESS: x86 without HMM
    case 89: v = 1; break;                    // CONCURRENT_MANAGED_ACCESS
    case 90: v = 1; break;                    // COMPUTE_PREEMPTION_SUPPORTED
    case 91: v = 1; break;                    // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
    case 92: v = 1; break;                    // CAN_USE_STREAM_MEM_OPS_V1
    case 93: v = 1; break;                    // CAN_USE_64_BIT_STREAM_MEM_OPS_V1
    case 94: v = 1; break;                    // CAN_USE_STREAM_WAIT_VALUE_NOR_V1
    case 95: v = 1; break;                    // COOPERATIVE_LAUNCH
    case 96: v = 1; break;                    // COOPERATIVE_MULTI_DEVICE_LAUNCH
    case 97: v = a.shared_per_block_optin; break;  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    case 98: v = 0; break;                    // CAN_FLUSH_REMOTE_WRITES: not on x86
    case 99: v = 1; break;                    // HOST_REGISTER_SUPPORTED
    case 100: v = 0; break;                   // PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES
    case 101: v = 0; break;                   // DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: not on x86
    case 102: v = 1; break;                   // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    case 103: v = 1; break;                   // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
    case 104: v = 0; break;                   // HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: Linux
    case 105: v = 0; break;                   // HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: Linux
    case 106: v = a.max_blocks_per_sm; break;  // MAX_BLOCKS_PER_MULTIPROCESSOR
    case 107: v = ampere_on ? 1 : 0; break;   // GENERIC_COMPRESSION_SUPPORTED (8.0 on)
    // MAX_PERSISTING_L2_CACHE_SIZE: the set-aside may take up to 75 % of the L2 (CUDA C++ Best
    // Practices Guide, "L2 Cache"; 30 MB of the A100's 40 MB); none before 8.0.
    case 108: v = ampere_on ? l2 / 4 * 3 : 0; break;
    case 109: v = ampere_on ? 134213632 : 0; break;  // MAX_ACCESS_POLICY_WINDOW_SIZE (8.0 on)
    case 110: v = 1; break;                   // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
    case 111: v = a.reserved_shared_per_block; break;  // RESERVED_SHARED_MEMORY_PER_BLOCK
    case 112: v = 1; break;                   // SPARSE_CUDA_ARRAY_SUPPORTED
    case 113: v = 1; break;                   // READ_ONLY_HOST_REGISTER_SUPPORTED
    case 114: v = 1; break;                   // TIMELINE_SEMAPHORE_INTEROP_SUPPORTED
    case 115: v = 1; break;                   // MEMORY_POOLS_SUPPORTED
    case 116: v = 1; break;                   // GPU_DIRECT_RDMA_SUPPORTED
    case 117: v = 1; break;                   // GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: HOST
    case 118: v = 0; break;                   // GPU_DIRECT_RDMA_WRITES_ORDERING: NONE
    case 119: v = 1; break;                   // MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX fd
    case 120: v = hopper_on ? 1 : 0; break;   // CLUSTER_LAUNCH (9.0 on)
    case 121: v = 1; break;                   // DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED
    case 122: v = 1; break;                   // CAN_USE_64_BIT_STREAM_MEM_OPS
    case 123: v = 1; break;                   // CAN_USE_STREAM_WAIT_VALUE_NOR
    case 124: v = 1; break;                   // DMA_BUF_SUPPORTED
    case 125: v = 1; break;                   // IPC_EVENT_SUPPORTED
    case 126: v = hopper_on ? 4 : 1; break;   // MEM_SYNC_DOMAIN_COUNT (4 from 9.0)
    case 127: v = hopper_on ? 1 : 0; break;   // TENSOR_MAP_ACCESS_SUPPORTED (9.0 on)
    case 128: v = 0; break;                   // HANDLE_TYPE_FABRIC_SUPPORTED: needs IMEX
    case 129: v = 0; break;                   // UNIFIED_FUNCTION_POINTERS
    case 130: v = 0; break;                   // NUMA_CONFIG: CU_DEVICE_NUMA_CONFIG_NONE
    case 131: v = -1; break;                  // NUMA_ID: the GPU is no NUMA node
    case 132: v = 0; break;                   // MULTICAST_SUPPORTED: needs NVSwitch fabric
    case 133: v = 0; break;                   // MPS_ENABLED
    case 134: v = 0; break;                   // HOST_NUMA_ID: host node 0
    case 135: v = 0; break;                   // D3D12_CIG_SUPPORTED: Windows
    case 136: v = 0; break;                   // MEM_DECOMPRESS_ALGORITHM_MASK: Blackwell on
    case 137: v = 0; break;                   // MEM_DECOMPRESS_MAXIMUM_LENGTH
    case 138: v = 0; break;                   // VULKAN_CIG_SUPPORTED
    case 139:                                 // GPU_PCI_DEVICE_ID: device << 16 | vendor
      v = static_cast<int>((static_cast<uint32_t>(g.pci_device_id) << 16) | 0x10deu);
      break;
    case 140:  // GPU_PCI_SUBSYSTEM_ID: NVIDIA's own boards carry subsystem vendor 10de
      v = static_cast<int>((static_cast<uint32_t>(g.pci_device_id) << 16) | 0x10deu);
      break;
    case 141: v = 1; break;                   // HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    case 142: v = 1; break;                   // HOST_NUMA_MEMORY_POOLS_SUPPORTED
    case 143: v = 0; break;                   // HOST_NUMA_MULTINODE_IPC_SUPPORTED
    case 144: v = 1; break;                   // HOST_MEMORY_POOLS_SUPPORTED
    case 145: v = 1; break;                   // HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    case 146: v = 0; break;                   // HOST_ALLOC_DMA_BUF_SUPPORTED
    case 147: v = 0; break;                   // ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED
    default:
      return false;
  }
  // clang-format on
  *value = v;
  return true;
}

}  // namespace tessera::sim
