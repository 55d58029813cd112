// preload_tenant: a test program that does NOT link against any libcuda: it dlopen()s
// "libcuda.so.1" by name and dlsym()s what it needs, as frameworks do. Run with the shim in
// LD_PRELOAD, the name must resolve to the shim (glibc matches loaded objects by SONAME).
// Prints where cuMemAlloc_v2 came from and allocates 64 MiB chunks until failure. Test tooling.
#include <dlfcn.h>

#include <cstdio>

#include "driver/cuda_api.h"

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("dlopen_error=1\n");
    return 1;
  }
#define SYM(name) reinterpret_cast<decltype(&::name)>(dlsym(lib, #name))
  auto init = SYM(cuInit);
  auto retain = SYM(cuDevicePrimaryCtxRetain);
  auto set_current = SYM(cuCtxSetCurrent);
  auto alloc = SYM(cuMemAlloc_v2);
#undef SYM
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(alloc), &info);
  std::printf("cuMemAlloc_v2_from=%s\n", info.dli_fname != nullptr ? info.dli_fname : "?");
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS) {
    std::printf("init_error=1\n");
    return 1;
  }
  unsigned long long total = 0;
  CUresult r = CUDA_SUCCESS;
  for (;;) {
    CUdeviceptr p = 0;
    r = alloc(&p, 64u << 20);
    if (r != CUDA_SUCCESS) break;
    total += 64u << 20;
  }
  std::printf("allocated=%llu\nfailure=%d\n", total, static_cast<int>(r));
  return 0;
}
