// simgpu's driver API and NVML, one process: the built library is dlopen'ed by path and called
// through the exact exported symbols, as the shim and real programs will.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "driver/cuda_api.h"
#include "driver/nvml_api.h"
#include "process/child_process.h"
#include "simgpu/test_sim_library.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// The library, opened once for the whole test program with its own simulated machine.
struct Sim {
  static tessera::sim::testing::SimLibrary& Get() {
    return tessera::sim::testing::SimLibrary::Get("api", "SimA:4GiB:108,SimB:2GiB:40");
  }
};

#define SIM(name) (Sim::Get().Fn_<decltype(&::name)>(#name))

class SimApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(SIM(cuInit)(0), CUDA_SUCCESS);
    ASSERT_EQ(SIM(cuDevicePrimaryCtxRetain)(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(SIM(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
    ASSERT_EQ(SIM(cuModuleLoadData)(&module_, "any image"), CUDA_SUCCESS);
    ASSERT_EQ(SIM(cuModuleGetFunction)(&spin_, module_, "spin"), CUDA_SUCCESS);
  }
  void TearDown() override {
    // Leave the primary context clean (and free) for the next test.
    EXPECT_EQ(SIM(cuDevicePrimaryCtxReset_v2)(0), CUDA_SUCCESS);
    EXPECT_EQ(SIM(cuDevicePrimaryCtxRetain)(&ctx_, 0), CUDA_SUCCESS);
    EXPECT_EQ(SIM(cuCtxSetCurrent)(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(UsedBytes(), 0u) << "a test leaked device memory";
  }
  uint64_t UsedBytes() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(SIM(cuMemGetInfo_v2)(&free_bytes, &total), CUDA_SUCCESS);
    return total - free_bytes;
  }
  CUresult Spin(uint64_t ns, CUstream s) {
    void* params[] = {&ns};
    return SIM(cuLaunchKernel)(spin_, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr);
  }

  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
};

TEST_F(SimApiTest, ExportsExactlyTheDeclaredDriverEntryPoints) {
  std::ifstream header(std::string(TESSERA_SOURCE_DIR) + "/src/driver/cuda_api.h");
  ASSERT_TRUE(header.good());
  const std::string text((std::istreambuf_iterator<char>(header)), {});
  const std::regex decl(R"(\nCUresult (cu[A-Za-z0-9_]+)\()");
  int count = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator();
       ++it) {
    EXPECT_NE(Sim::Get().Sym((*it)[1].str().c_str()), nullptr) << (*it)[1].str();
    ++count;
  }
  EXPECT_GT(count, 150);
  EXPECT_EQ(Sim::Get().Sym("cuMemAlloc_v3"), nullptr);  // nothing beyond what is declared
}

TEST_F(SimApiTest, GetProcAddressReturnsTheVariantForVersionAndFlags) {
  auto get = [](const char* sym, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
    void* fn = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(SIM(cuGetProcAddress_v2)(sym, &fn, version, flags, status), CUDA_SUCCESS) << sym;
    return fn;
  };
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(get("cuMemAlloc", 3020, 0, &st), Sim::Get().Sym("cuMemAlloc_v2"));
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(get("cuMemAlloc", 2000, 0, &st), Sim::Get().Sym("cuMemAlloc"));
  EXPECT_EQ(get("cuMemAlloc", 13000, 0, &st), Sim::Get().Sym("cuMemAlloc_v2"));

  for (int version : {12000, 13000}) {
    void* legacy = get("cuLaunchKernel", version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st);
    void* by_default = get("cuLaunchKernel", version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    void* ptsz = get("cuLaunchKernel", version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    EXPECT_EQ(legacy, Sim::Get().Sym("cuLaunchKernel"));
    EXPECT_EQ(by_default, legacy);
    EXPECT_EQ(ptsz, Sim::Get().Sym("cuLaunchKernel_ptsz"));
    EXPECT_NE(ptsz, legacy);
    EXPECT_EQ(get("cuMemcpyHtoD", version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
              Sim::Get().Sym("cuMemcpyHtoD_v2_ptds"));
    EXPECT_EQ(
        get("cuStreamBeginCapture", version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st),
        Sim::Get().Sym("cuStreamBeginCapture_v2_ptsz"));
    EXPECT_EQ(get("cuGraphInstantiate", version, 0, &st),
              Sim::Get().Sym("cuGraphInstantiateWithFlags"));
    EXPECT_EQ(get("cuGetProcAddress", version, 0, &st), Sim::Get().Sym("cuGetProcAddress_v2"));
  }
  EXPECT_EQ(get("cuEventElapsedTime", 12000, 0, &st), Sim::Get().Sym("cuEventElapsedTime"));
  EXPECT_EQ(get("cuEventElapsedTime", 12080, 0, &st), Sim::Get().Sym("cuEventElapsedTime_v2"));
  EXPECT_EQ(get("cuCtxCreate", 12000, 0, &st), Sim::Get().Sym("cuCtxCreate_v3"));
  EXPECT_EQ(get("cuCtxCreate", 13000, 0, &st), Sim::Get().Sym("cuCtxCreate_v4"));

  EXPECT_EQ(get("cuNoSuchFunction", 12000, 0, &st), nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(get("cuMemAllocAsync", 11000, 0, &st), nullptr);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  void* fn = nullptr;
  EXPECT_EQ(SIM(cuGetProcAddress_v2)("cuMemAlloc", &fn, 99000, 0, &st), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(SIM(cuGetProcAddress_v2)("cuMemAlloc", &fn, 12000, 8, &st), CUDA_ERROR_INVALID_VALUE);
  // The CUDA 11.3 entry point without a status argument resolves the same way.
  EXPECT_EQ(SIM(cuGetProcAddress)("cuLaunchKernel", &fn, 12000, 2), CUDA_SUCCESS);
  EXPECT_EQ(fn, Sim::Get().Sym("cuLaunchKernel_ptsz"));
}

TEST_F(SimApiTest, DevicesReportTheirConfiguration) {
  int count = 0;
  ASSERT_EQ(SIM(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  char name[64];
  ASSERT_EQ(SIM(cuDeviceGetName)(name, sizeof(name), 1), CUDA_SUCCESS);
  EXPECT_STREQ(name, "SimB");
  size_t total = 0;
  ASSERT_EQ(SIM(cuDeviceTotalMem_v2)(&total, 1), CUDA_SUCCESS);
  EXPECT_EQ(total, 2 * kGiB);
  int sms = 0;
  ASSERT_EQ(SIM(cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(sms, 108);
  EXPECT_EQ(SIM(cuDeviceGetName)(name, sizeof(name), 2), CUDA_ERROR_INVALID_DEVICE);
  CUuuid a{}, b{};
  ASSERT_EQ(SIM(cuDeviceGetUuid_v2)(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuDeviceGetUuid_v2)(&b, 1), CUDA_SUCCESS);
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, 16), 0);
}

TEST_F(SimApiTest, AllocationPathsChargeTheDevice) {
  CUdeviceptr p = 0;
  ASSERT_EQ(SIM(cuMemAlloc_v2)(&p, 3 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 4 * kMiB) << "rounded to the 2 MiB granularity";
  EXPECT_EQ(SIM(cuMemFree_v2)(p), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuMemFree_v2)(p), CUDA_ERROR_INVALID_VALUE) << "double free is refused";

  size_t pitch = 0;
  ASSERT_EQ(SIM(cuMemAllocPitch_v2)(&p, &pitch, 1000, 4096, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(UsedBytes(), 4 * kMiB) << "pitch x height = 4 MiB";
  EXPECT_EQ(SIM(cuMemFree_v2)(p), CUDA_SUCCESS);

  ASSERT_EQ(SIM(cuMemAllocManaged)(&p, 10 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 10 * kMiB);
  EXPECT_EQ(SIM(cuMemFree_v2)(p), CUDA_SUCCESS);

  CUarray arr = nullptr;
  CUDA_ARRAY_DESCRIPTOR desc{1024, 1024, CU_AD_FORMAT_FLOAT, 4};
  ASSERT_EQ(SIM(cuArrayCreate_v2)(&arr, &desc), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 16 * kMiB) << "bytes, not bits";
  EXPECT_EQ(SIM(cuArrayDestroy)(arr), CUDA_SUCCESS);
  CUmipmappedArray mip = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR d3{1024, 1024, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  ASSERT_EQ(SIM(cuMipmappedArrayCreate)(&mip, &d3, 3), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 2 * kMiB) << "1 MiB + 256 KiB + 64 KiB, rounded";
  EXPECT_EQ(SIM(cuMipmappedArrayDestroy)(mip), CUDA_SUCCESS);

  void* host = nullptr;
  ASSERT_EQ(SIM(cuMemHostAlloc)(&host, 64 * kMiB, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 0u) << "host memory is not device memory";
  EXPECT_EQ(SIM(cuMemFreeHost)(host), CUDA_SUCCESS);
}

TEST_F(SimApiTest, CapacityIsEnforcedWithOutOfMemory) {
  CUdeviceptr big = 0, more = 0;
  ASSERT_EQ(SIM(cuMemAlloc_v2)(&big, 4 * kGiB - 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuMemAlloc_v2)(&more, 4 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(SIM(cuMemAlloc_v2)(&more, 2 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuMemFree_v2)(more), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuMemFree_v2)(big), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuMemAlloc_v2)(&more, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimApiTest, StreamOrderedAllocationAndPools) {
  CUstream s = nullptr;
  ASSERT_EQ(SIM(cuStreamCreate)(&s, 0), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(SIM(cuDeviceGetDefaultMemPool)(&pool, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(SIM(cuMemAllocAsync)(&p, 30 * kMiB, s), CUDA_SUCCESS);
  cuuint64_t reserved = 0, used = 0;
  ASSERT_EQ(SIM(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
            CUDA_SUCCESS);
  EXPECT_EQ(reserved, 30 * kMiB);
  EXPECT_EQ(UsedBytes(), 30 * kMiB);
  ASSERT_EQ(SIM(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
            CUDA_SUCCESS);
  EXPECT_EQ(used, 0u);
  EXPECT_EQ(UsedBytes(), 30 * kMiB) << "the pool keeps the block until a synchronisation";
  ASSERT_EQ(SIM(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 0u) << "release threshold 0: trimmed at the sync";

  cuuint64_t threshold = 64 * kMiB;
  ASSERT_EQ(SIM(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemAllocFromPoolAsync)(&p, 20 * kMiB, pool, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuStreamSynchronize)(s), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 20 * kMiB) << "kept below the threshold";
  ASSERT_EQ(SIM(cuMemPoolTrimTo)(pool, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 0u);
  threshold = 0;
  ASSERT_EQ(SIM(cuMemPoolSetAttribute)(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool own = nullptr;
  ASSERT_EQ(SIM(cuMemPoolCreate)(&own, &props), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemAllocFromPoolAsync)(&p, 6 * kMiB, own, s), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 6 * kMiB);
  ASSERT_EQ(SIM(cuMemFreeAsync)(p, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemPoolDestroy)(own), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), 0u);
  EXPECT_EQ(SIM(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
}

TEST_F(SimApiTest, VirtualMemoryManagementMapsRealBytes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};  // device 1, whatever is current
  size_t gran = 0;
  ASSERT_EQ(SIM(cuMemGetAllocationGranularity)(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(gran, 2 * kMiB);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(SIM(cuMemCreate)(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(SIM(cuMemCreate)(&h, 2 * gran, &prop, 0), CUDA_SUCCESS);
  size_t free1 = 0, total1 = 0;
  // Device 1 is charged, device 0 (current) is not.
  EXPECT_EQ(UsedBytes(), 0u);
  CUcontext ctx1 = nullptr;
  ASSERT_EQ(SIM(cuCtxCreate_v2)(&ctx1, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemGetInfo_v2)(&free1, &total1), CUDA_SUCCESS);
  EXPECT_EQ(total1 - free1, 4 * kMiB);

  CUdeviceptr va = 0;
  ASSERT_EQ(SIM(cuMemAddressReserve)(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemMap)(va, 4 * kMiB, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(SIM(cuMemSetAccess)(va, 4 * kMiB, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemsetD8_v2)(va, 0x5a, 4 * kMiB), CUDA_SUCCESS);
  std::vector<unsigned char> back(4 * kMiB);
  ASSERT_EQ(SIM(cuMemcpyDtoH_v2)(back.data(), va, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back.front(), 0x5a);
  EXPECT_EQ(back.back(), 0x5a);

  ASSERT_EQ(SIM(cuMemRelease)(h), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemGetInfo_v2)(&free1, &total1), CUDA_SUCCESS);
  EXPECT_EQ(total1 - free1, 4 * kMiB) << "released but still mapped: memory stays";
  ASSERT_EQ(SIM(cuMemUnmap)(va, 4 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuMemGetInfo_v2)(&free1, &total1), CUDA_SUCCESS);
  EXPECT_EQ(total1 - free1, 0u) << "last unmap frees it";
  ASSERT_EQ(SIM(cuMemAddressFree)(va, 8 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuCtxDestroy_v2)(ctx1), CUDA_SUCCESS);
}

TEST_F(SimApiTest, EventsTimeKernelsAndGraphsReplayCapturedStreams) {
  CUstream s = nullptr;
  ASSERT_EQ(SIM(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuStreamBeginCapture_v2)(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status;
  ASSERT_EQ(SIM(cuStreamIsCapturing)(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Spin(2'000'000, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuStreamQuery)(s), CUDA_SUCCESS) << "captured work does not run";
  CUgraph graph = nullptr;
  ASSERT_EQ(SIM(cuStreamEndCapture)(s, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(SIM(cuGraphInstantiateWithFlags)(&exec, graph, 0), CUDA_SUCCESS);

  CUevent a = nullptr, b = nullptr;
  ASSERT_EQ(SIM(cuEventCreate)(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuEventCreate)(&b, 0), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuEventRecord)(a, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuGraphLaunch)(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuEventRecord)(b, s), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuEventQuery)(b), CUDA_ERROR_NOT_READY);
  float ms = 0;
  EXPECT_EQ(SIM(cuEventElapsedTime)(&ms, a, b), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(SIM(cuEventSynchronize)(b), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuEventElapsedTime)(&ms, a, b), CUDA_SUCCESS);
  EXPECT_NEAR(ms, 6.0, 0.5);

  EXPECT_EQ(SIM(cuGraphExecDestroy)(exec), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuGraphDestroy)(graph), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuEventDestroy_v2)(a), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuEventDestroy_v2)(b), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuStreamDestroy_v2)(s), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuStreamDestroy_v2)(s), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimApiTest, PerThreadDefaultStreamIsNotTheLegacyStream) {
  // A 20 ms kernel on the legacy stream; the per-thread stream of this thread is a different
  // stream, but a blocking one, so it waits for the legacy stream's work.
  ASSERT_EQ(Spin(20'000'000, TESSERA_CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuStreamQuery)(nullptr), CUDA_ERROR_NOT_READY);
  CUevent e = nullptr;
  ASSERT_EQ(SIM(cuEventCreate)(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuEventRecord_ptsz)(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuStreamQuery_ptsz)(nullptr), CUDA_SUCCESS) << "nothing submitted to it yet";
  ASSERT_EQ(SIM(cuCtxSynchronize)(), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuStreamQuery)(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuEventDestroy_v2)(e), CUDA_SUCCESS);
}

TEST_F(SimApiTest, FaultKernelMakesTheContextStickyFailed) {
  CUfunction fault = nullptr;
  ASSERT_EQ(SIM(cuModuleGetFunction)(&fault, module_, "fault"), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuLaunchKernel)(fault, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuCtxSynchronize)(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(SIM(cuMemAlloc_v2)(&p, kMiB), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(Spin(1000, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUfunction missing = nullptr;
  EXPECT_EQ(SIM(cuModuleGetFunction)(&missing, module_, "matmul"), CUDA_ERROR_NOT_FOUND);
  // TearDown resets the primary context, which clears the error.
}

TEST_F(SimApiTest, FillOutsideAnAllocationFaults) {
  CUfunction fill = nullptr;
  ASSERT_EQ(SIM(cuModuleGetFunction)(&fill, module_, "fill"), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(SIM(cuMemAlloc_v2)(&p, kMiB), CUDA_SUCCESS);
  size_t n = 2 * kMiB + 1;  // past the end of the (rounded) allocation
  uint32_t v = 1;
  void* params[] = {&p, &n, &v};
  ASSERT_EQ(SIM(cuLaunchKernel)(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(SIM(cuCtxSynchronize)(), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(SimApiTest, NvmlSeesTheSameMachine) {
  ASSERT_EQ(SIM(nvmlInit_v2)(), NVML_SUCCESS);
  unsigned int count = 0;
  ASSERT_EQ(SIM(nvmlDeviceGetCount_v2)(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 2u);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(SIM(nvmlDeviceGetHandleByIndex_v2)(0, &dev), NVML_SUCCESS);
  char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
  ASSERT_EQ(SIM(nvmlDeviceGetUUID)(dev, uuid, sizeof(uuid)), NVML_SUCCESS);
  nvmlDevice_t by_uuid = nullptr;
  ASSERT_EQ(SIM(nvmlDeviceGetHandleByUUID)(uuid, &by_uuid), NVML_SUCCESS);
  EXPECT_EQ(by_uuid, dev);

  CUdeviceptr p = 0;
  ASSERT_EQ(SIM(cuMemAlloc_v2)(&p, 100 * kMiB), CUDA_SUCCESS);
  nvmlMemory_t mem{};
  ASSERT_EQ(SIM(nvmlDeviceGetMemoryInfo)(dev, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, 4 * kGiB);
  EXPECT_EQ(mem.used, 100 * kMiB);
  nvmlMemory_v2_t mem2{};
  mem2.version = nvmlMemory_v2;
  ASSERT_EQ(SIM(nvmlDeviceGetMemoryInfo_v2)(dev, &mem2), NVML_SUCCESS);
  EXPECT_EQ(mem2.free, 4 * kGiB - 100 * kMiB);

  nvmlProcessInfo_t procs[8];
  unsigned int n = 8;
  ASSERT_EQ(SIM(nvmlDeviceGetComputeRunningProcesses_v3)(dev, &n, procs), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(procs[0].pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(procs[0].usedGpuMemory, 100 * kMiB);
  n = 0;
  EXPECT_EQ(SIM(nvmlDeviceGetComputeRunningProcesses_v3)(dev, &n, procs),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 1u);

  // Keep the device busy ~100 % for 300 ms, then utilisation over the last second is ~30 %.
  for (int i = 0; i < 30; ++i) ASSERT_EQ(Spin(10'000'000, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(SIM(cuCtxSynchronize)(), CUDA_SUCCESS);
  nvmlUtilization_t util{};
  ASSERT_EQ(SIM(nvmlDeviceGetUtilizationRates)(dev, &util), NVML_SUCCESS);
  EXPECT_GE(util.gpu, 25u);
  EXPECT_LE(util.gpu, 40u);
  // The same busy time, per process: this process did all of it.
  nvmlProcessUtilizationSample_t samples[8];
  unsigned int nsamples = 8;
  ASSERT_EQ(SIM(nvmlDeviceGetProcessUtilization)(dev, samples, &nsamples, 0), NVML_SUCCESS);
  ASSERT_EQ(nsamples, 1u);
  EXPECT_EQ(samples[0].pid, static_cast<unsigned>(getpid()));
  EXPECT_GE(samples[0].smUtil, 25u);
  EXPECT_LE(samples[0].smUtil, 40u);
  unsigned int needed = 0;
  EXPECT_EQ(SIM(nvmlDeviceGetProcessUtilization)(dev, nullptr, &needed, 0),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(needed, 1u);
  EXPECT_EQ(SIM(cuMemFree_v2)(p), CUDA_SUCCESS);
  EXPECT_EQ(SIM(nvmlShutdown)(), NVML_SUCCESS);
}

TEST(SimApiNoInit, CallsBeforeInitFailWithNotInitialized) {
  // A fresh process image would be needed to observe this for real; fork gives one cheaply.
  const pid_t pid = fork();
  if (pid == 0) {
    // After fork the child must call cuInit again before using the driver.
    int count = 0;
    _exit(SIM(cuDeviceGetCount)(&count) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
