// `tessera demo`: the main job on the embedded default. Starts a private simulated GPU, runs two
// tenant processes on it (each one is this program re-executed as `tessera __demo-tenant`), and
// prints what each got: memory, kernels and device time. At this stage nothing is isolated; the
// demo says so and shows why isolation is needed (first come, first served memory; device time
// proportional to kernel length). It holds no policy: it only drives processes and reports.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "core/bytes.h"
#include "driver/cuda_driver.h"
#include "driver/library.h"
#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace tessera::cli {
namespace {

using namespace std::chrono_literals;

struct TenantSpec {
  const char* name;
  uint64_t memory;  // what it asks for
  uint64_t cap;     // its memory limit in the round with Tessera
  uint64_t kernel_us;
};

// One round of the demo: the tenants, the library they open, their environment.
struct Round {
  std::string state;    // TESSERA_SIM_STATE of this round's simulated machine
  std::string library;  // simgpu itself, or the shim in front of it
  std::string socket;   // when set: a private tesserad serves the round
  std::vector<std::string> env;
};

constexpr const char* kDefaultSimGpus = "SimGPU:16GiB:80";

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "tessera demo: %s\n", message.c_str());
  return 1;
}

// Runs the tenants of one round and prints the table. Returns the exit status.
int RunRound(const Round& round, const TenantSpec* tenants, size_t count, double seconds,
             bool with_tessera) {
  const std::string self = ExecutableDir() + "/tessera";
  auto cleanup = [&] { shm_unlink(("/tessera-sim-" + round.state).c_str()); };
  std::unique_ptr<process::ChildProcess> daemon;
  if (!round.socket.empty()) {
    daemon = std::make_unique<process::ChildProcess>(
        std::vector<std::string>{ExecutableDir() + "/tesserad", "--sim", "--socket", round.socket,
                                 "--ephemeral"},
        round.env);
    bool up = false;
    for (int i = 0; i < 500 && !up; ++i) {
      auto fd = ipc::Connect(round.socket, 100ms);
      up = fd.ok();
      if (up)
        close(*fd);
      else
        std::this_thread::sleep_for(10ms);
    }
    if (!up) {
      cleanup();
      return Fail("the demo's tesserad did not start; see its error above");
    }
  }
  std::vector<std::unique_ptr<process::ChildProcess>> children;
  // Start the tenants one after the other so the memory race has a known winner, then let them
  // run kernels together.
  for (size_t i = 0; i < count; ++i) {
    const TenantSpec& t = tenants[i];
    std::vector<std::string> env = round.env;
    if (with_tessera) {
      env.push_back(std::string("TESSERA_CONTAINER=") + t.name);
      env.push_back("TESSERA_MEM_LIMIT=" + FormatBytes(Bytes(t.cap)));
    }
    children.push_back(std::make_unique<process::ChildProcess>(
        std::vector<std::string>{self, kDemoTenantCommand, round.library, t.name,
                                 std::to_string(t.memory), std::to_string(t.kernel_us),
                                 Fmt("%.3f", seconds)},
        env));
    if (!children.back()->started() || !children.back()->WaitForKey("allocated", 60s)) {
      cleanup();
      return Fail(std::string("tenant ") + t.name + " did not start; see its error above");
    }
  }
  for (auto& c : children) c->CloseStdin();  // "go"
  bool ok = true;
  for (auto& c : children) {
    const auto status =
        c->Wait(std::chrono::milliseconds(static_cast<int>(seconds * 1000) + 60000));
    c->DrainOutput(5s);
    ok = ok && status && *status == 0;
  }
  if (daemon) {
    daemon->Kill(SIGTERM);
    daemon->Wait(10s);
  }
  cleanup();

  std::printf("   %-10s %8s %10s %10s %10s %8s %7s %12s %7s  %s\n", "TENANT", "PID", "MEM ASKED",
              "MEM CAP", "MEM GOT", "KERNELS", "KERNEL", "DEVICE TIME", "SHARE", "NOTE");
  double total_device_s = 0, wall_s = 0;
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& v = children[i]->values();
    auto get = [&](const char* key) { return v.count(key) ? v.at(key) : std::string("?"); };
    const uint64_t got = v.count("allocated") ? std::stoull(v.at("allocated")) : 0;
    const double device_s = v.count("device_ns") ? std::stod(v.at("device_ns")) / 1e9 : 0;
    const double tenant_wall = v.count("wall_ns") ? std::stod(v.at("wall_ns")) / 1e9 : 0;
    total_device_s += device_s;
    wall_s = std::max(wall_s, tenant_wall);
    std::string note;
    if (get("alloc_error") != "CUDA_SUCCESS (0)") {
      note = (with_tessera && got == tenants[i].cap ? "stopped at its cap: "
                                                    : "out of memory after its neighbour: ") +
             get("alloc_error");
    }
    std::printf(
        "   %-10s %8d %10s %10s %10s %8s %7s %12s %7s  %s\n", tenants[i].name,
        static_cast<int>(children[i]->pid()), FormatBytes(Bytes(tenants[i].memory)).c_str(),
        with_tessera ? FormatBytes(Bytes(tenants[i].cap)).c_str() : "-",
        FormatBytes(Bytes(got)).c_str(), get("kernels").c_str(),
        Fmt("%.1fms", tenants[i].kernel_us / 1000.0).c_str(), Fmt("%.2fs", device_s).c_str(),
        Fmt("%.1f%%", tenant_wall > 0 ? 100.0 * device_s / tenant_wall : 0).c_str(), note.c_str());
  }
  std::printf("   device busy %.1f%% of %.2f s.\n",
              wall_s > 0 ? 100.0 * total_device_s / wall_s : 0.0, wall_s);
  if (!ok) return Fail("a tenant failed; see its error above");
  return 0;
}

}  // namespace

std::string ExecutableDir() { return process::ExecutableDir(); }

int RunDemo(const std::vector<std::string>& args) {
  std::string simgpu = ExecutableDir() + "/../lib/libtessera-simgpu.so";
  double seconds = 3.0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--simgpu" && i + 1 < args.size()) {
      simgpu = args[++i];
    } else if (args[i] == "--seconds" && i + 1 < args.size()) {
      char* end = nullptr;
      seconds = std::strtod(args[++i].c_str(), &end);
      if (*end != '\0' || !(seconds >= 0.5 && seconds <= 600)) {
        return Fail("--seconds \"" + args[i] + "\": expected a number of seconds from 0.5 to 600");
      }
    } else {
      std::fprintf(stderr,
                   "tessera demo: unknown argument \"%s\"; usage: tessera demo [--seconds S] "
                   "[--simgpu PATH]\n",
                   args[i].c_str());
      return 2;
    }
  }
  if (access(simgpu.c_str(), R_OK) != 0) {
    return Fail("simulated GPU library not found at " + simgpu +
                " (build it with the README's command, or pass --simgpu PATH)");
  }
  char resolved[4096];
  if (realpath(simgpu.c_str(), resolved) != nullptr) simgpu = resolved;

  const char* user_gpus = std::getenv("TESSERA_SIM_GPUS");
  const std::string gpus = user_gpus != nullptr && *user_gpus != '\0' ? user_gpus : kDefaultSimGpus;
  const std::string lib_dir = simgpu.substr(0, simgpu.rfind('/'));
  const std::string shim = lib_dir + "/tessera/libcuda.so.1";
  const TenantSpec tenants[] = {
      {"inference", 6 * kBytesPerGiB, 6 * kBytesPerGiB, 1000},
      {"training", 12 * kBytesPerGiB, 8 * kBytesPerGiB, 4000},
  };
  std::printf("Tessera demo: %zu tenants on the simulated GPU (%s), %.1f s per round\n",
              std::size(tenants), gpus.c_str(), seconds);

  // Round 1: the tenants talk to the (simulated) driver directly.
  std::printf(
      "\n1. Without Tessera: memory goes first come, first served, and the device runs kernels\n"
      "   in submission order, whoever submitted them.\n\n");
  Round plain;
  plain.state = "demo-" + std::to_string(getpid()) + "-plain";
  plain.library = simgpu;
  plain.env = {"TESSERA_SIM_STATE=" + plain.state, "TESSERA_SIM_GPUS=" + gpus};
  if (int r = RunRound(plain, tenants, std::size(tenants), seconds, false); r != 0) return r;

  // Round 2: the same tenants through the shim, each a container with a memory cap, with a
  // private node daemon keeping the books.
  if (access(shim.c_str(), R_OK) != 0) {
    return Fail("the Tessera shim was not found at " + shim +
                " (build it with the README's command)");
  }
  Round capped;
  capped.state = "demo-" + std::to_string(getpid()) + "-capped";
  capped.library = shim;
  capped.socket = "/tmp/tessera-demo-" + std::to_string(getpid()) + ".sock";
  capped.env = {"TESSERA_SIM_STATE=" + capped.state, "TESSERA_SIM_GPUS=" + gpus,
                "TESSERA_SOCKET=" + capped.socket, "TESSERA_REAL_LIBCUDA=" + simgpu};
  std::printf(
      "\n2. With Tessera's memory caps (inference 6GiB, training 8GiB): each tenant sees a GPU "
      "the\n"
      "   size of its cap and stops exactly there, whoever came first. GPU-time shares are not\n"
      "   enforced yet, so time still follows kernel length.\n\n");
  return RunRound(capped, tenants, std::size(tenants), seconds, true);
}

int RunDemoTenant(const std::vector<std::string>& args) {
  if (args.size() != 5) return 2;
  const std::string& lib_path = args[0];
  const uint64_t want = std::strtoull(args[2].c_str(), nullptr, 10);
  const uint64_t kernel_ns = std::strtoull(args[3].c_str(), nullptr, 10) * 1000;
  const uint64_t run_ns = static_cast<uint64_t>(std::strtod(args[4].c_str(), nullptr) * 1e9);

  auto lib = DynamicLibrary::Open(lib_path);
  if (!lib.ok()) return Fail(lib.error());
  auto loaded = CudaDriver::Load(*lib);
  if (!loaded.ok()) return Fail(loaded.error());
  const CudaDriver& cu = *loaded;
  auto check = [&](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "tessera demo tenant %s: %s failed: %s\n", args[1].c_str(), what,
                   cu.ErrorText(r).c_str());
      std::exit(1);
    }
  };
  check(cu.cuInit(0), "cuInit");
  CUcontext ctx = nullptr;
  check(cu.cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
  check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod = nullptr;
  CUfunction spin = nullptr;
  check(cu.cuModuleLoadData(&mod, "demo"), "cuModuleLoadData");
  check(cu.cuModuleGetFunction(&spin, mod, "spin"), "cuModuleGetFunction");

  std::vector<CUdeviceptr> held;
  uint64_t got = 0;
  CUresult alloc_status = CUDA_SUCCESS;
  const uint64_t chunk = 512 * kBytesPerMiB;
  while (got < want) {
    CUdeviceptr p = 0;
    alloc_status = cu.cuMemAlloc_v2(&p, std::min(chunk, want - got));
    if (alloc_status != CUDA_SUCCESS) break;
    held.push_back(p);
    got += std::min(chunk, want - got);
  }
  std::printf("allocated=%llu\nalloc_error=%s\n", static_cast<unsigned long long>(got),
              cu.ErrorText(alloc_status).c_str());
  std::fflush(stdout);
  char buf[16];
  while (read(0, buf, sizeof(buf)) > 0) {
  }

  uint64_t kernels = 0;
  const uint64_t start = MonotonicNs();
  while (MonotonicNs() - start < run_ns) {
    uint64_t ns = kernel_ns;
    void* params[] = {&ns};
    check(cu.cuLaunchKernel(spin, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr),
          "cuLaunchKernel");
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    ++kernels;
  }
  const uint64_t wall = MonotonicNs() - start;
  for (CUdeviceptr p : held) check(cu.cuMemFree_v2(p), "cuMemFree");
  std::printf(
      "kernels=%llu\ndevice_ns=%llu\nwall_ns=%llu\n", static_cast<unsigned long long>(kernels),
      static_cast<unsigned long long>(kernels * kernel_ns), static_cast<unsigned long long>(wall));
  return 0;
}

}  // namespace tessera::cli
