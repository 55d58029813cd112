// The GPU models simgpu simulates, as published facts, and the answers a real driver gives about
// them: every cuDeviceGetAttribute attribute of CUDA 13.0's CUdevice_attribute enum, and the
// static NVML properties (compute capability, architecture, brand, clocks, memory bus width,
// power limit, PCI IDs, core count), all from one table per model (device_models.cc says where
// each number is published).
//
// A TESSERA_SIM_GPUS entry simulates the model its NAME names ("NVIDIA H100 80GB HBM3",
// "H100-SXM5-80GB", "SimA100", "T4", ...), else the model of its mig=MODEL, else the default
// (the H100 SXM5's architecture and clocks). Its configured memory and SM count are kept: they are
// what the user asked for; everything else is the model's.
//
// Pure data and lookups: no I/O, no shared state, no allocation. Must build with nothing but a
// compiler (no CUDA headers: the attribute numbers are CUDA 13.0's enum values, written here).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "mig/profiles.h"

namespace tessera::sim {

// One past the last CUdevice_attribute of CUDA 13.0 (CU_DEVICE_ATTRIBUTE_MAX). Attributes 1 to
// kCudaDeviceAttributeEnd - 1 are answered; anything else is CUDA_ERROR_INVALID_VALUE.
inline constexpr int kCudaDeviceAttributeEnd = 148;

// NVML's nvmlDeviceArchitecture_t and nvmlBrandType_t values used below.
inline constexpr uint32_t kNvmlArchTuring = 6;
inline constexpr uint32_t kNvmlArchAmpere = 7;
inline constexpr uint32_t kNvmlArchAda = 8;
inline constexpr uint32_t kNvmlArchHopper = 9;
inline constexpr uint32_t kNvmlBrandNvidia = 14;

// What a compute capability fixes (the CUDA programming guide's per-compute-capability table).
struct ArchSpec {
  std::string_view name;  // "Hopper"
  uint32_t nvml_arch;     // kNvmlArch*
  int cc_major;
  int cc_minor;
  int max_threads_per_sm;
  int max_blocks_per_sm;
  int registers_per_sm;        // 32-bit registers
  int registers_per_block;     // 32-bit registers
  int shared_per_sm;           // bytes (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
  int shared_per_block_optin;  // bytes (..._MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
  int reserved_shared_per_block;  // bytes the driver keeps per block
  int fp32_cores_per_sm;
  int fp32_to_fp64_ratio;  // CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
};

// One GPU product.
struct GpuSpec {
  std::string_view name;     // our name for it: "H100-SXM5-80GB"
  std::string_view product;  // what NVML calls the real GPU: "NVIDIA H100 80GB HBM3"
  const ArchSpec* arch;
  int sms;
  uint64_t memory_bytes;
  int max_clock_mhz;     // boost SM/graphics clock
  int memory_clock_mhz;  // peak memory clock as CUDA and NVML report it
  int bus_width_bits;
  int l2_bytes;
  int copy_engines;            // CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
  uint16_t pci_device_id;      // vendor 0x10de
  int power_limit_w;           // default (TDP) power limit
  int bandwidth_gbs;           // published memory bandwidth, GB/s (a check on clock and bus width)
  std::string_view mig_model;  // the mig::GpuModel name when MIG-capable, else empty
};

// Every model, in a fixed order; index 0 is the default.
std::span<const GpuSpec> GpuSpecs();
inline constexpr int kDefaultGpuSpec = 0;

// The model a TESSERA_SIM_GPUS entry simulates (an index in GpuSpecs()): the one its name names
// (case ignored: a model's name, its product name, or a GPU's short name such as "A100", "T4",
// "L4" inside it, e.g. "SimA100"), else the one of its MIG model (`mig_model`: an index in
// mig::GpuModels(), or -1), else -1 (the device then simulates kDefaultGpuSpec with the SM count
// it is given). `total_bytes` tells 40 from 80 GB A100s.
int GpuSpecFor(std::string_view name, uint64_t total_bytes, int mig_model);

// What one simulated device is, for the answers below.
struct DeviceFacts {
  const GpuSpec* spec = nullptr;
  uint32_t sms = 0;          // its SMs (a MIG device: its instance's)
  uint64_t total_bytes = 0;  // its memory
  int pci_bus = 0;
  int gpu_index = 0;         // the physical GPU it is or belongs to
  int mig_fraction_num = 1;  // a MIG device's share of the GPU's memory slices (L2 follows it)
  int mig_fraction_den = 1;
  int mig_copy_engines = 0;  // a MIG device's copy engines; 0 for a whole GPU
};

// cuDeviceGetAttribute: true and *value for every attribute of CUDA 13.0's enum (1 to
// kCudaDeviceAttributeEnd - 1); false for anything else (the driver's CUDA_ERROR_INVALID_VALUE).
bool DeviceAttribute(const DeviceFacts& device, int attribute, int* value);

// The SMs of a MIG instance of `profile` on a GPU of `gpu_sms` SMs: the count NVIDIA's MIG
// profile listings give when the GPU has the model's full SM count, else proportional to the
// profile's compute slices.
uint32_t MigInstanceSms(const mig::GpuModel& model, const mig::MigProfile& profile,
                        uint32_t gpu_sms);

// A 13-digit board serial number, derived from the UUID text (the format of nvidia-smi's
// "Serial Number"). `out` gets 14 bytes with the NUL.
void SerialFromUuid(const char* uuid, char out[14]);

}  // namespace tessera::sim
