// shim_real_bench: what the libcuda shim adds per call on a real GPU, measured in one process
// against the real libcuda called directly (the baseline, same process, same context, rounds
// alternated). Run it under `tessera run --mem SIZE` with a tesserad serving the GPU, so that the
// shim is registered and every allocation goes through the ledger:
//
//   tessera run --mem 64GiB --container bench -- shim_real_bench --real /path/to/libcuda.so.1
//       --shim build/lib/tessera/libcuda.so.1 [--rounds 15] [--json FILE]   (one command line)
//
// Measures cuMemAlloc_v2 + cuMemFree_v2 of 1 MiB, and cuLaunchKernel of an empty kernel (or, with
// --spin-ns N, one that spins N ns on the GPU's global timer; PTX JIT-compiled by the driver) in
// batches of 256 followed by cuCtxSynchronize: the time inside the launch calls per launch, and
// per launch with the synchronisation. Prints the medians and writes
// them as JSON. Needs no CUDA headers; against simgpu (`--real libtessera-simgpu.so`) it runs too,
// which is how it is checked without a GPU. It never changes a GPU setting.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "driver/cuda_api.h"

namespace {

// An empty kernel and one that spins its u64 parameter's ns on the global timer, in PTX; the
// driver JIT-compiles them for the device they load on. (simgpu knows both by name.)
constexpr char kPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry noop()\n"
    "{\n"
    "  ret;\n"
    "}\n"
    ".visible .entry spin(.param .u64 ns)\n"
    "{\n"
    "  .reg .b64 %rd<5>;\n"
    "  .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [ns];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "  add.u64 %rd3, %rd2, %rd1;\n"
    "$L_spin:\n"
    "  mov.u64 %rd4, %globaltimer;\n"
    "  setp.lt.u64 %p1, %rd4, %rd3;\n"
    "  @%p1 bra $L_spin;\n"
    "  ret;\n"
    "}\n";
uint64_t g_spin_ns = 0;  // the kernel's length (0: the empty kernel)

constexpr int kAllocIters = 2000;
constexpr int kLaunchBatch = 256;
constexpr int kLaunchBatches = 20;

struct Api {
  decltype(&cuMemAlloc_v2) alloc = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuCtxSynchronize) sync = nullptr;
};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "shim_real_bench: %s\n", why.c_str());
  std::exit(1);
}

template <typename F>
F Sym(void* handle, const char* name, const char* what) {
  void* p = dlsym(handle, name);
  if (p == nullptr) Die(std::string("no ") + name + " in " + what);
  return reinterpret_cast<F>(p);
}

Api Load(void* handle, const char* what) {
  return Api{Sym<decltype(&cuMemAlloc_v2)>(handle, "cuMemAlloc_v2", what),
             Sym<decltype(&cuMemFree_v2)>(handle, "cuMemFree_v2", what),
             Sym<decltype(&cuLaunchKernel)>(handle, "cuLaunchKernel", what),
             Sym<decltype(&cuCtxSynchronize)>(handle, "cuCtxSynchronize", what)};
}

double NowNs() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ns per cuMemAlloc_v2 + cuMemFree_v2 pair of 1 MiB.
double AllocFree(const Api& api) {
  const double start = NowNs();
  for (int i = 0; i < kAllocIters; ++i) {
    CUdeviceptr p = 0;
    if (api.alloc(&p, 1 << 20) != CUDA_SUCCESS || api.free(p) != CUDA_SUCCESS) {
      Die("an allocation of 1 MiB failed");
    }
  }
  return (NowNs() - start) / kAllocIters;
}

// {ns inside cuLaunchKernel per launch, ns per launch including the synchronisation}.
std::pair<double, double> Launch(const Api& api, CUfunction f) {
  double in_calls = 0;
  const double start = NowNs();
  for (int b = 0; b < kLaunchBatches; ++b) {
    const double t0 = NowNs();
    for (int i = 0; i < kLaunchBatch; ++i) {
      void* params[] = {&g_spin_ns};
      if (api.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, g_spin_ns != 0 ? params : nullptr, nullptr) !=
          CUDA_SUCCESS) {
        Die("cuLaunchKernel failed");
      }
    }
    in_calls += NowNs() - t0;
    if (api.sync() != CUDA_SUCCESS) Die("cuCtxSynchronize failed");
  }
  const double n = static_cast<double>(kLaunchBatch) * kLaunchBatches;
  return {in_calls / n, (NowNs() - start) / n};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string real, shim, json;
  int rounds = 15;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--real" || a == "--shim" || a == "--json" || a == "--rounds" || a == "--spin-ns") &&
        i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--real") real = v;
      if (a == "--shim") shim = v;
      if (a == "--json") json = v;
      if (a == "--rounds" || a == "--spin-ns") {
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        const long most = a == "--rounds" ? 1000 : 1000000;
        if (end == v.c_str() || *end != '\0' || n < (a == "--rounds" ? 1 : 0) || n > most) {
          std::fprintf(stderr, "shim_real_bench: %s \"%s\": an integer up to %ld\n", a.c_str(),
                       v.c_str(), most);
          return 2;
        }
        if (a == "--rounds") rounds = static_cast<int>(n);
        if (a == "--spin-ns") g_spin_ns = static_cast<uint64_t>(n);
      }
    } else {
      std::fprintf(stderr,
                   "usage: shim_real_bench --real LIBCUDA --shim SHIM [--rounds N] [--spin-ns N] "
                   "[--json FILE]"
                   " (bad argument \"%s\")\n",
                   a.c_str());
      return 2;
    }
  }
  if (real.empty() || shim.empty()) {
    std::fprintf(stderr, "usage: shim_real_bench --real LIBCUDA --shim SHIM [--rounds N]\n");
    return 2;
  }
  if (std::getenv("TESSERA_SOCKET") == nullptr || std::getenv("TESSERA_CONTAINER") == nullptr) {
    Die("run it under `tessera run --mem SIZE` (TESSERA_SOCKET and TESSERA_CONTAINER unset)");
  }
  setenv("TESSERA_REAL_LIBCUDA", real.c_str(), 1);
  void* shim_lib = dlopen(shim.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (shim_lib == nullptr) Die(std::string("cannot open the shim: ") + dlerror());
  if (Sym<decltype(&cuInit)>(shim_lib, "cuInit", "the shim")(0) != CUDA_SUCCESS) {
    Die("cuInit through the shim failed (is tesserad serving TESSERA_SOCKET?)");
  }
  // The shim opened the real driver at this path: this is the same loaded object.
  void* real_lib = dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (real_lib == nullptr) Die(std::string("cannot open the real libcuda: ") + dlerror());
  if (real_lib == shim_lib) Die("--real names the shim itself");
  const Api direct = Load(real_lib, "the real libcuda");
  const Api shimmed = Load(shim_lib, "the shim");

  // Context and kernel through the shim, as an application makes them.
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction noop = nullptr;
  if (Sym<decltype(&cuDeviceGet)>(shim_lib, "cuDeviceGet", "the shim")(&dev, 0) != CUDA_SUCCESS ||
      Sym<decltype(&cuDevicePrimaryCtxRetain)>(shim_lib, "cuDevicePrimaryCtxRetain", "the shim")(
          &ctx, dev) != CUDA_SUCCESS ||
      Sym<decltype(&cuCtxSetCurrent)>(shim_lib, "cuCtxSetCurrent", "the shim")(ctx) !=
          CUDA_SUCCESS ||
      Sym<decltype(&cuModuleLoadData)>(shim_lib, "cuModuleLoadData", "the shim")(&mod, kPtx) !=
          CUDA_SUCCESS ||
      Sym<decltype(&cuModuleGetFunction)>(shim_lib, "cuModuleGetFunction", "the shim")(
          &noop, mod, g_spin_ns != 0 ? "spin" : "noop") != CUDA_SUCCESS) {
    Die("device 0's context or the kernel could not be set up through the shim");
  }
  // The shim must really be limiting this process: its memory total is the cap, not the GPU's.
  size_t free_direct = 0, total_direct = 0, free_shim = 0, total_shim = 0;
  Sym<decltype(&cuMemGetInfo_v2)>(real_lib, "cuMemGetInfo_v2", "the real libcuda")(&free_direct,
                                                                                   &total_direct);
  Sym<decltype(&cuMemGetInfo_v2)>(shim_lib, "cuMemGetInfo_v2", "the shim")(&free_shim, &total_shim);
  if (total_shim == 0 || total_shim >= total_direct) {
    Die("the shim reports the GPU's whole memory (" + std::to_string(total_shim) +
        " bytes): set a --mem limit below it");
  }

  // Warm-up, then alternated rounds (direct, shim) so drift hits both alike.
  AllocFree(direct);
  AllocFree(shimmed);
  Launch(direct, noop);
  Launch(shimmed, noop);
  std::vector<double> alloc_d, alloc_s, call_d, call_s, sync_d, sync_s;
  for (int r = 0; r < rounds; ++r) {
    alloc_d.push_back(AllocFree(direct));
    alloc_s.push_back(AllocFree(shimmed));
    auto [cd, sd] = Launch(direct, noop);
    auto [cs, ss] = Launch(shimmed, noop);
    call_d.push_back(cd);
    call_s.push_back(cs);
    sync_d.push_back(sd);
    sync_s.push_back(ss);
  }
  auto pair = [](double base, double with) {
    return nlohmann::ordered_json{{"real_ns", base},
                                  {"shim_ns", with},
                                  {"added_ns", with - base},
                                  {"ratio", base > 0 ? with / base : 0}};
  };
  nlohmann::ordered_json report = {
      {"benchmark", "shim_real_bench"},
      {"baseline", "the real libcuda called directly, same process and context"},
      {"real_libcuda", real},
      {"rounds", rounds},
      {"kernel_ns", g_spin_ns},
      {"alloc_free_1mib_pair", pair(Median(alloc_d), Median(alloc_s))},
      {"launch_call", pair(Median(call_d), Median(call_s))},
      {"launch_with_sync", pair(Median(sync_d), Median(sync_s))}};
  std::printf("%s\n", report.dump(2).c_str());
  if (!json.empty()) {
    std::ofstream out(json);
    out << report.dump(2) << "\n";
    if (!out) Die("cannot write " + json);
  }
  return 0;
}
