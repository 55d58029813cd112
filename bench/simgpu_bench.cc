// simgpu_bench: the per-call cost of simgpu's cuLaunchKernel(noop), cuMemAlloc+cuMemFree and
// cuEventRecord, measured against a baseline in the same run (an indirect call to an empty
// function: the floor of any call through a resolved driver pointer). Later benchmarks measure the
// shim's overhead against these numbers. Writes build/bench/simgpu_bench.json (override with
// --json PATH) with each benchmark's ns per call and its ratio to the baseline.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "driver/cuda_api.h"
#include "process/child_process.h"

namespace {

void* g_lib = nullptr;
CUfunction g_noop = nullptr;
CUstream g_stream = nullptr;
CUevent g_event = nullptr;

template <typename Fn>
Fn Sym(const char* name) {
  void* p = dlsym(g_lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "simgpu_bench: %s missing from simgpu\n", name);
    std::exit(1);
  }
  return reinterpret_cast<Fn>(p);
}
#define SIM(name) (Sym<decltype(&::name)>(#name))

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "simgpu_bench: %s failed with %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

__attribute__((noinline)) CUresult EmptyCall(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                             unsigned, unsigned, unsigned, CUstream, void**,
                                             void**) {
  benchmark::ClobberMemory();
  return CUDA_SUCCESS;
}

void BM_Baseline_IndirectCall(benchmark::State& state) {
  auto* volatile fn = &EmptyCall;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fn(g_noop, 1, 1, 1, 1, 1, 1, 0, g_stream, nullptr, nullptr));
  }
}
BENCHMARK(BM_Baseline_IndirectCall);

void BM_Simgpu_LaunchNoop(benchmark::State& state) {
  auto launch = SIM(cuLaunchKernel);
  for (auto _ : state) {
    benchmark::DoNotOptimize(launch(g_noop, 1, 1, 1, 1, 1, 1, 0, g_stream, nullptr, nullptr));
  }
}
BENCHMARK(BM_Simgpu_LaunchNoop);

void BM_Simgpu_MemAllocFree(benchmark::State& state) {
  auto alloc = SIM(cuMemAlloc_v2);
  auto free_fn = SIM(cuMemFree_v2);
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    Check(alloc(&p, bytes), "cuMemAlloc_v2");
    Check(free_fn(p), "cuMemFree_v2");
  }
}
BENCHMARK(BM_Simgpu_MemAllocFree)->Arg(1 << 20)->Arg(64 << 20);

void BM_Simgpu_EventRecord(benchmark::State& state) {
  auto record = SIM(cuEventRecord);
  for (auto _ : state) benchmark::DoNotOptimize(record(g_event, g_stream));
}
BENCHMARK(BM_Simgpu_EventRecord);

}  // namespace

int main(int argc, char** argv) {
  std::string json = tessera::process::BuildDir() + "/bench/simgpu_bench.json";
  tessera::bench::Initialize(argc, argv, &json);

  const std::string state = "bench-" + std::to_string(getpid());
  setenv("TESSERA_SIM_STATE", state.c_str(), 1);
  setenv("TESSERA_SIM_GPUS", "SimBench:80GiB:132", 1);
  const std::string lib = tessera::process::BuildDir() + "/lib/libtessera-simgpu.so";
  g_lib = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (g_lib == nullptr) {
    std::fprintf(stderr, "simgpu_bench: cannot open %s: %s\n", lib.c_str(), dlerror());
    return 1;
  }
  Check(SIM(cuInit)(0), "cuInit");
  CUcontext ctx = nullptr;
  Check(SIM(cuDevicePrimaryCtxRetain)(&ctx, 0), "cuDevicePrimaryCtxRetain");
  Check(SIM(cuCtxSetCurrent)(ctx), "cuCtxSetCurrent");
  CUmodule mod = nullptr;
  Check(SIM(cuModuleLoadData)(&mod, "bench"), "cuModuleLoadData");
  Check(SIM(cuModuleGetFunction)(&g_noop, mod, "noop"), "cuModuleGetFunction");
  Check(SIM(cuStreamCreate)(&g_stream, 0), "cuStreamCreate");
  Check(SIM(cuEventCreate)(&g_event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");

  tessera::bench::CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  shm_unlink(("/tessera-sim-" + state).c_str());

  double baseline = 0;
  for (const auto& r : reporter.results) {
    if (r.name == "BM_Baseline_IndirectCall") baseline = r.real_ns;
  }
  const std::string dir = json.substr(0, json.rfind('/'));
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& r : reporter.results) {
    results.push_back({{"name", r.name},
                       {"ns_per_call", r.real_ns},
                       {"ratio_to_baseline", baseline > 0 ? r.real_ns / baseline : 0}});
  }
  const nlohmann::ordered_json report = {{"benchmark", "simgpu_bench"},
                                         {"baseline", "BM_Baseline_IndirectCall"},
                                         {"baseline_ns", baseline},
                                         {"results", std::move(results)}};
  std::ofstream out(json);
  out << report.dump(2) << "\n";
  std::printf("\nwrote %s\n", json.c_str());
  for (const auto& r : reporter.results) {
    std::printf("  %-36s %10.1f ns/call  %8.1fx baseline\n", r.name.c_str(), r.real_ns,
                baseline > 0 ? r.real_ns / baseline : 0);
  }
  return out.good() ? 0 : 1;
}
