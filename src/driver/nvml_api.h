// Our own declarations of the NVML (libnvidia-ml.so.1) subset Tessera uses.
//
// Tessera builds without any NVIDIA header, so the NVML types, constants and entry points that the
// NVML shim, simgpu and the daemon's reconciler need are declared here, written from the public ABI
// (nvml.h facts: enum values, struct layouts, buffer sizes, exported symbol names). This file is
// ours; it must stay ABI-identical to NVML, and the static_asserts below pin every layout that
// crosses the ABI.
//
// Every function is declared under its exported symbol name. Unlike nvml.h there are no renaming
// macros (nvml.h turns `nvmlInit` into `nvmlInit_v2`), so the legacy entry points that keep older
// ABIs (nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetComputeRunningProcesses with the v1 struct, ...)
// are distinct declarations here, each naming exactly one exported symbol.
//
// Declarations carry default visibility, so a library built with -fvisibility=hidden that defines
// them (the NVML shim, simgpu) exports them without further annotation.
#pragma once

#include <stddef.h>

#define TESSERA_NVML_API __attribute__((visibility("default")))

extern "C" {

// ---- Return codes ------------------------------------------------------------------------------
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,  // Only in the newest headers; older drivers lack it.
  NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

// ---- Handles -----------------------------------------------------------------------------------
// Opaque; NVML hands out pointers to its own per-device objects. A MIG device (a compute instance
// of a GPU instance) has an nvmlDevice_t of its own.
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;

// ---- Constants ---------------------------------------------------------------------------------
// Flags for nvmlInitWithFlags.
#define NVML_INIT_FLAG_NO_GPUS 1u    // Initialise even if no GPU is present.
#define NVML_INIT_FLAG_NO_ATTACH 2u  // Do not attach to GPUs.

// Buffer sizes guaranteed to be large enough for the string queries (terminating NUL included).
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE 16
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80

// Reported in a field that is not available (e.g. usedGpuMemory under WDDM).
#define NVML_VALUE_NOT_AVAILABLE (-1)

// Versioned structs carry `sizeof(struct) | (version << 24)` in their first field.
#define NVML_STRUCT_VERSION(data, ver) \
  ((unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((unsigned int)(ver) << 24U)))

// ---- Structs -----------------------------------------------------------------------------------
// Device memory in bytes (v1): total = free + used.
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // Includes memory the driver sets aside.
} nvmlMemory_t;

// Device memory in bytes (v2): adds the versioned header and the system-reserved amount.
typedef struct nvmlMemory_v2_st {
  unsigned int version;  // Must be nvmlMemory_v2.
  unsigned long long total;
  unsigned long long reserved;  // Reserved for the driver/firmware; counted in `used`.
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

// Percent of the last sample period (1/6 s to 1 s) the GPU was busy / memory was read or written.
typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

// A process using a GPU, as reported by the legacy (unversioned) process queries.
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // Bytes, or NVML_VALUE_NOT_AVAILABLE.
} nvmlProcessInfo_v1_t;

// A process using a GPU, as reported by the _v2 and _v3 process queries. The MIG instance ids are
// 0xFFFFFFFF when MIG is off.
typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // Bytes, or NVML_VALUE_NOT_AVAILABLE.
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

// One per-process utilisation sample (percentages over the sample interval).
typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds.
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

// PCI location of a GPU.
// Static properties: nvmlDeviceGetArchitecture, nvmlDeviceGetBrand, the clock queries, the serial.
typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10

typedef enum nvmlBrandType_enum {
  NVML_BRAND_UNKNOWN = 0,
  NVML_BRAND_QUADRO = 1,
  NVML_BRAND_TESLA = 2,
  NVML_BRAND_NVS = 3,
  NVML_BRAND_GRID = 4,
  NVML_BRAND_GEFORCE = 5,
  NVML_BRAND_TITAN = 6,
  NVML_BRAND_NVIDIA_VAPPS = 7,
  NVML_BRAND_NVIDIA_VPC = 8,
  NVML_BRAND_NVIDIA_VCS = 9,
  NVML_BRAND_NVIDIA_VWS = 10,
  NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
  NVML_BRAND_QUADRO_RTX = 12,
  NVML_BRAND_NVIDIA_RTX = 13,
  NVML_BRAND_NVIDIA = 14,
  NVML_BRAND_GEFORCE_RTX = 15,
  NVML_BRAND_TITAN_RTX = 16,
  NVML_BRAND_COUNT = 17,
} nvmlBrandType_t;

typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
  NVML_CLOCK_COUNT = 4,
} nvmlClockType_t;

#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30

typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];  // "domain:bus:device.function".
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;                        // 16-bit device id << 16 | 16-bit vendor id.
  unsigned int pciSubSystemId;                     // 32-bit sub system device id.
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "%08X:%02X:%02X.0" form.
} nvmlPciInfo_t;

// ---- MIG ----------------------------------------------------------------------------------------
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1
// Engine profile of a compute instance: engines shared within the GPU instance.
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
// The GPU-instance profile constants (NVML_GPU_INSTANCE_PROFILE_*) and compute-instance profile
// constants are src/mig/profiles.h's NvmlGpuInstanceProfile and NvmlComputeInstanceProfileFor.

// Where a GPU instance lies: its first memory slice and how many it takes.
typedef struct nvmlGpuInstancePlacement_st {
  unsigned int start;
  unsigned int size;
} nvmlGpuInstancePlacement_t;

// A GPU-instance profile as the device describes it (v1). `id` is the device's profile ID, which
// the create and query calls take; memory and SM counts vary by driver.
typedef struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;  // compute slices
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceInfo_st {
  nvmlDevice_t device;  // the parent GPU
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
  unsigned int start;
  unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

// As nvmlComputeInstanceGetInfo_v2 fills it (the unversioned call lacks `placement`).
typedef struct nvmlComputeInstanceInfo_st {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

// ---- Entry points ------------------------------------------------------------------------------
// Initialisation and system queries.
TESSERA_NVML_API nvmlReturn_t nvmlInit(void);  // Legacy; same behaviour as nvmlInit_v2.
TESSERA_NVML_API nvmlReturn_t nvmlInit_v2(void);
TESSERA_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
TESSERA_NVML_API nvmlReturn_t nvmlShutdown(void);
TESSERA_NVML_API const char* nvmlErrorString(nvmlReturn_t result);
TESSERA_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
TESSERA_NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length);
TESSERA_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion);
TESSERA_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion);

// Device enumeration and identity.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount);  // Legacy.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                         nvmlDevice_t* device);  // Legacy.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t* device);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                unsigned int length);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                unsigned int length);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                       unsigned int* minorNumber);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device,
                                                         unsigned int* multiGpuBool);

// Static properties of the GPU (a MIG device answers its GPU's). Clocks in MHz, power in mW.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                 int* minor);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                        nvmlDeviceArchitecture_t* arch);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial,
                                                  unsigned int length);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                     unsigned int* clock);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                        unsigned int* clock);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device,
                                                          unsigned int* busWidth);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                                unsigned int* limit);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                                       unsigned int* defaultLimit);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                              unsigned int* limit);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* numCores);

// Memory and utilisation.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                         nvmlMemory_v2_t* memory);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                            nvmlUtilization_t* utilization);

// Processes. On input *infoCount is the capacity of `infos`; on NVML_ERROR_INSUFFICIENT_SIZE it is
// set to the number needed. The legacy entry point fills the v1 struct.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                   unsigned int* infoCount,
                                                                   nvmlProcessInfo_v1_t* infos);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                      unsigned int* infoCount,
                                                                      nvmlProcessInfo_v2_t* infos);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                      unsigned int* infoCount,
                                                                      nvmlProcessInfo_t* infos);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                       unsigned int* infoCount,
                                                                       nvmlProcessInfo_t* infos);
// Samples newer than lastSeenTimeStamp; utilization == NULL asks for the needed count.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
    unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);

// MIG. Mode (a pending mode applies after a GPU reset on real hardware); GPU-instance profiles,
// placements and capacity; GPU and compute instances (destroy compute instances first); MIG device
// handles (nvmlDeviceGetUUID on one gives its MIG- UUID).
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                                   unsigned int* pendingMode);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                                   nvmlReturn_t* activationStatus);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t* info);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                        unsigned int profileId,
                                                                        unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                          unsigned int profileId,
                                                          nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
// `gpuInstances` must hold the profile's instanceCount entries.
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstance_t* gpuInstances,
                                                        unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                           nvmlGpuInstance_t* gpuInstance);
TESSERA_NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                                     nvmlGpuInstanceInfo_t* info);
TESSERA_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t* info);
TESSERA_NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t* computeInstance);
TESSERA_NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
TESSERA_NVML_API nvmlReturn_t
nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                   nvmlComputeInstance_t* computeInstances, unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                            nvmlComputeInstanceInfo_t* info);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                          unsigned int* isMigDevice);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device,
                                                             unsigned int* count);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device,
                                                                  unsigned int index,
                                                                  nvmlDevice_t* migDevice);
TESSERA_NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                           nvmlDevice_t* device);

}  // extern "C"

// ---- ABI pins (x86-64 and aarch64 Linux, LP64) --------------------------------------------------
static_assert(sizeof(nvmlReturn_t) == 4, "nvmlReturn_t is a C enum (int)");
static_assert(sizeof(nvmlDevice_t) == sizeof(void*), "nvmlDevice_t is a pointer");

static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
static_assert(offsetof(nvmlMemory_t, free) == 8 && offsetof(nvmlMemory_t, used) == 16,
              "nvmlMemory_t layout");

static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
static_assert(offsetof(nvmlMemory_v2_t, total) == 8 && offsetof(nvmlMemory_v2_t, reserved) == 16 &&
                  offsetof(nvmlMemory_v2_t, free) == 24 && offsetof(nvmlMemory_v2_t, used) == 32,
              "nvmlMemory_v2_t layout");
static_assert(nvmlMemory_v2 == 0x02000028u, "nvmlMemory_v2 = sizeof(nvmlMemory_v2_t) | 2 << 24");

static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t layout");

static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t layout");
static_assert(offsetof(nvmlProcessInfo_v1_t, usedGpuMemory) == 8, "nvmlProcessInfo_v1_t layout");

static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t (v2/v3) layout");
static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 &&
                  offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16 &&
                  offsetof(nvmlProcessInfo_t, computeInstanceId) == 20,
              "nvmlProcessInfo_t (v2/v3) layout");

static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t");
static_assert(offsetof(nvmlProcessUtilizationSample_t, timeStamp) == 8 &&
                  offsetof(nvmlProcessUtilizationSample_t, smUtil) == 16 &&
                  offsetof(nvmlProcessUtilizationSample_t, decUtil) == 28,
              "nvmlProcessUtilizationSample_t layout");

static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
static_assert(offsetof(nvmlPciInfo_t, domain) == 16 && offsetof(nvmlPciInfo_t, pciDeviceId) == 28 &&
                  offsetof(nvmlPciInfo_t, pciSubSystemId) == 32 &&
                  offsetof(nvmlPciInfo_t, busId) == 36,
              "nvmlPciInfo_t layout");

static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8, "nvmlGpuInstancePlacement_t layout");
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48 &&
                  offsetof(nvmlGpuInstanceProfileInfo_t, sliceCount) == 8 &&
                  offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40,
              "nvmlGpuInstanceProfileInfo_t layout");
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24 && offsetof(nvmlGpuInstanceInfo_t, id) == 8 &&
                  offsetof(nvmlGpuInstanceInfo_t, placement) == 16,
              "nvmlGpuInstanceInfo_t layout");
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36, "nvmlComputeInstanceProfileInfo_t");
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32 &&
                  offsetof(nvmlComputeInstanceInfo_t, id) == 16 &&
                  offsetof(nvmlComputeInstanceInfo_t, placement) == 24,
              "nvmlComputeInstanceInfo_t layout");
