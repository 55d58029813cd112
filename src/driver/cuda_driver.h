// CudaDriver: a table of driver entry points resolved from a library opened by path (the real
// libcuda.so.1 or simgpu), for Tessera's own programs: the demo's tenants, tests and benchmarks.
// Each member has the type of the exported symbol it names, so a call through it is an ABI-exact
// call of that variant. Resolution fails with an error naming the library and the missing symbol.
// Holds no state beyond the pointers; it does not initialise the driver.
#pragma once

#include <string>

#include "core/result.h"
#include "driver/cuda_api.h"
#include "driver/library.h"

namespace tessera {

#define TESSERA_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                              \
  X(cuDriverGetVersion)                  \
  X(cuGetErrorName)                      \
  X(cuGetProcAddress)                    \
  X(cuGetProcAddress_v2)                 \
  X(cuDeviceGet)                         \
  X(cuDeviceGetCount)                    \
  X(cuDeviceGetName)                     \
  X(cuDeviceTotalMem_v2)                 \
  X(cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease_v2)        \
  X(cuCtxCreate_v2)                      \
  X(cuCtxDestroy_v2)                     \
  X(cuCtxSetCurrent)                     \
  X(cuCtxSynchronize)                    \
  X(cuMemGetInfo_v2)                     \
  X(cuMemAlloc_v2)                       \
  X(cuMemFree_v2)                        \
  X(cuMemcpyHtoD_v2)                     \
  X(cuMemcpyDtoH_v2)                     \
  X(cuModuleLoadData)                    \
  X(cuModuleGetFunction)                 \
  X(cuLaunchKernel)                      \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy_v2)                  \
  X(cuStreamSynchronize)                 \
  X(cuEventCreate)                       \
  X(cuEventDestroy_v2)                   \
  X(cuEventRecord)                       \
  X(cuEventSynchronize)                  \
  X(cuEventElapsedTime)

struct CudaDriver {
#define TESSERA_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  TESSERA_CUDA_DRIVER_FUNCTIONS(TESSERA_DECLARE_MEMBER)
#undef TESSERA_DECLARE_MEMBER

  // Resolves every member from `lib`, which must outlive the table.
  static Result<CudaDriver> Load(const DynamicLibrary& lib) {
    CudaDriver d;
#define TESSERA_RESOLVE_MEMBER(name)                 \
  {                                                  \
    auto fn = lib.Resolve<decltype(&::name)>(#name); \
    if (!fn.ok()) return fn.status();                \
    d.name = *fn;                                    \
  }
    TESSERA_CUDA_DRIVER_FUNCTIONS(TESSERA_RESOLVE_MEMBER)
#undef TESSERA_RESOLVE_MEMBER
    return d;
  }

  // "CUDA_ERROR_OUT_OF_MEMORY (2)" for messages.
  std::string ErrorText(CUresult r) const {
    const char* name = nullptr;
    if (cuGetErrorName == nullptr || cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) {
      name = "CUDA_ERROR_?";
    }
    return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
  }
};

}  // namespace tessera
