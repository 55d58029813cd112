// shim_bench: what the libcuda shim adds per call, measured in one process against simgpu called
// directly (the baseline, same run, same simulated machine). A private tesserad serves the run;
// the tenant is limited (so every allocation really goes through the ledger) but never near its
// limit. Launches are measured twice through the shim: on GPU 0, under policy 1 with the compute
// gate holding the token (issue 4's fast path: an atomic load and a branch, plus the in-flight
// count), and on GPU 1, which runs policy 5 (no compute control: the "no-limit shim"). Writes
// build/bench/shim_bench.json (override with --json PATH) with each pair's ns per call and the
// added ns.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"
#include "driver/cuda_api.h"
#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace {

struct Api {
  decltype(&cuMemAlloc_v2) alloc = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuMemGetInfo_v2) info = nullptr;
};
Api g_sim, g_shim;
CUfunction g_noop = nullptr;       // in GPU 0's context (gated)
CUfunction g_noop_free = nullptr;  // in GPU 1's context (policy 5)
CUcontext g_ctx0 = nullptr, g_ctx1 = nullptr;
decltype(&cuCtxSetCurrent) g_shim_set_current = nullptr;

void Die(const std::string& why) {
  std::fprintf(stderr, "shim_bench: %s\n", why.c_str());
  std::exit(1);
}

Api Load(void* handle, const char* what) {
  Api api;
  api.alloc = reinterpret_cast<decltype(api.alloc)>(dlsym(handle, "cuMemAlloc_v2"));
  api.free = reinterpret_cast<decltype(api.free)>(dlsym(handle, "cuMemFree_v2"));
  api.launch = reinterpret_cast<decltype(api.launch)>(dlsym(handle, "cuLaunchKernel"));
  api.info = reinterpret_cast<decltype(api.info)>(dlsym(handle, "cuMemGetInfo_v2"));
  if (!api.alloc || !api.free || !api.launch || !api.info) Die(std::string("symbols of ") + what);
  return api;
}

void AllocFree(benchmark::State& state, const Api& api) {
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (api.alloc(&p, 1 << 20) != CUDA_SUCCESS || api.free(p) != CUDA_SUCCESS) {
      state.SkipWithError("allocation failed");
      break;
    }
  }
}
void Launch(benchmark::State& state, const Api& api, CUcontext ctx, CUfunction f) {
  // Through the shim's wrapper, so the gate re-resolves the thread's current device.
  g_shim_set_current(ctx);
  for (auto _ : state) {
    benchmark::DoNotOptimize(api.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  }
  g_shim_set_current(g_ctx0);
}

void BM_Simgpu_MemAllocFree(benchmark::State& s) { AllocFree(s, g_sim); }
void BM_Shim_MemAllocFree(benchmark::State& s) { AllocFree(s, g_shim); }
void BM_Simgpu_LaunchNoop(benchmark::State& s) { Launch(s, g_sim, g_ctx0, g_noop); }
void BM_Shim_LaunchNoop(benchmark::State& s) { Launch(s, g_shim, g_ctx0, g_noop); }
void BM_ShimNoLimit_LaunchNoop(benchmark::State& s) { Launch(s, g_shim, g_ctx1, g_noop_free); }
BENCHMARK(BM_Simgpu_MemAllocFree);
BENCHMARK(BM_Shim_MemAllocFree);
BENCHMARK(BM_Simgpu_LaunchNoop);
BENCHMARK(BM_Shim_LaunchNoop);
BENCHMARK(BM_ShimNoLimit_LaunchNoop);

}  // namespace

int main(int argc, char** argv) {
  const std::string build = tessera::process::BuildDir();
  std::string json = build + "/bench/shim_bench.json";
  tessera::bench::Initialize(argc, argv, &json);

  const std::string state = "shimbench-" + std::to_string(getpid());
  const std::string socket = "/tmp/" + state + ".sock";
  const std::string sim = build + "/lib/libtessera-simgpu.so";
  setenv("TESSERA_SIM_STATE", state.c_str(), 1);
  setenv("TESSERA_SIM_GPUS", "SimBench:80GiB:132,SimBench:80GiB:132", 1);
  tessera::process::ChildProcess daemon({build + "/bin/tesserad", "--sim", "--socket", socket,
                                         "--ephemeral", "--policy", "1", "--gpu-policy", "1:5"},
                                        {});
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    auto fd = tessera::ipc::Connect(socket, std::chrono::milliseconds(100));
    up = fd.ok();
    if (up)
      close(*fd);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!up) Die("tesserad did not start");
  setenv("TESSERA_SOCKET", socket.c_str(), 1);
  setenv("TESSERA_CONTAINER", "bench", 1);
  setenv("TESSERA_MEM_LIMIT", "64GiB", 1);
  setenv("TESSERA_REAL_LIBCUDA", sim.c_str(), 1);

  void* shim = dlopen((build + "/lib/tessera/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (shim == nullptr) Die(std::string("cannot open the shim: ") + dlerror());
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(shim, "cuInit"));
  if (init == nullptr || init(0) != CUDA_SUCCESS) Die("cuInit through the shim failed");
  // The shim has opened simgpu as its real driver; this is the same loaded object.
  void* simlib = dlopen(sim.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (simlib == nullptr) Die("cannot open simgpu");
  g_sim = Load(simlib, "simgpu");
  g_shim = Load(shim, "the shim");
  auto retain = reinterpret_cast<decltype(&cuDevicePrimaryCtxRetain)>(
      dlsym(simlib, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(simlib, "cuCtxSetCurrent"));
  auto load = reinterpret_cast<decltype(&cuModuleLoadData)>(dlsym(simlib, "cuModuleLoadData"));
  auto get = reinterpret_cast<decltype(&cuModuleGetFunction)>(dlsym(simlib, "cuModuleGetFunction"));
  g_shim_set_current = reinterpret_cast<decltype(&cuCtxSetCurrent)>(dlsym(shim, "cuCtxSetCurrent"));
  CUmodule mod = nullptr, mod1 = nullptr;
  if (g_shim_set_current == nullptr || retain(&g_ctx1, 1) != CUDA_SUCCESS ||
      set_current(g_ctx1) != CUDA_SUCCESS || load(&mod1, "bench") != CUDA_SUCCESS ||
      get(&g_noop_free, mod1, "noop") != CUDA_SUCCESS || retain(&g_ctx0, 0) != CUDA_SUCCESS ||
      set_current(g_ctx0) != CUDA_SUCCESS || load(&mod, "bench") != CUDA_SUCCESS ||
      get(&g_noop, mod, "noop") != CUDA_SUCCESS || g_shim_set_current(g_ctx0) != CUDA_SUCCESS) {
    Die("simgpu setup failed");
  }
  // The daemon runs what the comparison assumes: GPU 0 gated (policy 1), GPU 1 native (5).
  auto status = tessera::ipc::Call(socket, "STATUS", nullptr, std::chrono::seconds(2));
  if (!status.ok() || status->find("\"index\":0,") == std::string::npos ||
      status->find("\"policy\":1,") == std::string::npos ||
      status->find("\"policy\":5,") == std::string::npos) {
    Die("the daemon does not run policy 1 on GPU 0 and 5 on GPU 1: " +
        (status.ok() ? *status : status.error()));
  }
  size_t free_bytes = 0, total = 0;
  if (g_shim.info(&free_bytes, &total) != CUDA_SUCCESS || total != (64ull << 30)) {
    Die("the shim does not enforce the 64GiB limit (total=" + std::to_string(total) + ")");
  }

  // The measured path must really charge the ledger: one 1 MiB allocation costs 2 MiB of the cap.
  CUdeviceptr probe = 0;
  size_t free_after = 0;
  if (g_shim.alloc(&probe, 1 << 20) != CUDA_SUCCESS ||
      g_shim.info(&free_after, &total) != CUDA_SUCCESS || free_bytes - free_after != (2u << 20) ||
      g_shim.free(probe) != CUDA_SUCCESS) {
    Die("an allocation through the shim was not charged to the ledger");
  }

  tessera::bench::CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  daemon.Kill(SIGTERM);
  daemon.Wait(std::chrono::seconds(10));
  shm_unlink(("/tessera-sim-" + state).c_str());

  const double alloc_base = reporter.RealNs("BM_Simgpu_MemAllocFree");
  const double alloc_shim = reporter.RealNs("BM_Shim_MemAllocFree");
  const double launch_base = reporter.RealNs("BM_Simgpu_LaunchNoop");
  const double launch_shim = reporter.RealNs("BM_Shim_LaunchNoop");
  const double launch_free = reporter.RealNs("BM_ShimNoLimit_LaunchNoop");
  std::error_code ignored;
  std::filesystem::create_directories(json.substr(0, json.rfind('/')), ignored);
  auto pair = [](const char* base_name, double base, const char* shim_name, double shim) {
    return nlohmann::ordered_json{{base_name, base},
                                  {shim_name, shim},
                                  {"added_ns", shim - base},
                                  {"ratio", base > 0 ? shim / base : 0}};
  };
  nlohmann::ordered_json report = {
      {"benchmark", "shim_bench"},
      {"baseline", "simgpu called directly"},
      {"alloc_free_pair", pair("simgpu_ns", alloc_base, "shim_ns", alloc_shim)},
      {"launch_noop", pair("simgpu_ns", launch_base, "shim_ns", launch_shim)},
      {"launch_noop_token_held_vs_no_limit",
       pair("no_limit_shim_ns", launch_free, "token_held_shim_ns", launch_shim)}};
  report["launch_noop_token_held_vs_no_limit"]["budget_ns"] = 30;
  std::ofstream out(json);
  out << report.dump(2) << "\n";
  std::printf(
      "\nwrote %s\n  cuMemAlloc+cuMemFree: simgpu %.1f ns, shim %.1f ns, added %.1f ns\n"
      "  cuLaunchKernel(noop): simgpu %.1f ns, shim %.1f ns, added %.1f ns\n"
      "  cuLaunchKernel(noop) with the token held: %.1f ns vs the no-limit shim %.1f ns, added "
      "%.1f ns (budget 30 ns)\n",
      json.c_str(), alloc_base, alloc_shim, alloc_shim - alloc_base, launch_base, launch_shim,
      launch_shim - launch_base, launch_shim, launch_free, launch_shim - launch_free);
  return out.good() ? 0 : 1;
}
