// `tessera demo`: the main job on the embedded default, a tour in two acts; `tessera demo node` and
// `tessera demo cluster` run one. The node act starts a private simulated GPU
// and runs three tenant processes on it (each one is this program re-executed as
// `tessera __demo-tenant`): a 4 GiB / 30 % inference service, a 6 GiB / 70 % trainer and a
// high-priority alerting job that launches one short kernel every 20 ms. Round 1 runs them against
// the driver directly; round 2 runs them through Tessera (the shim, and a private tesserad under
// policy 3) with a live smi-style line per second, then a summary of what each got: memory, GPU
// time share and the high-priority job's latency. The cluster act is
// build/tests/tessera-demo-cluster (testing/demo/cluster_demo.cc). It holds no policy: it drives
// and reports.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
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
  int core = 100;  // its GPU-time share (TESSERA_CORE_LIMIT) with Tessera
  bool high_prio = false;
  int period_ms = 0;  // > 0: one kernel per period (latency-sensitive), else back to back
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
                                 "--ephemeral", "--policy", "3"},
        round.env);
    if (!ipc::WaitUntilListening(round.socket, 5s)) {
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
      if (t.core < 100) env.push_back("TESSERA_CORE_LIMIT=" + std::to_string(t.core));
      if (t.high_prio) env.push_back("TESSERA_HIGH_PRIO=1");
    }
    children.push_back(std::make_unique<process::ChildProcess>(
        std::vector<std::string>{self, kDemoTenantCommand, round.library, t.name,
                                 std::to_string(t.memory), std::to_string(t.kernel_us),
                                 Fmt("%.3f", seconds), std::to_string(t.period_ms)},
        env));
    if (!children.back()->started() || !children.back()->WaitForKey("allocated", 60s)) {
      cleanup();
      return Fail(std::string("tenant ") + t.name + " did not start; see its error above");
    }
  }
  for (auto& c : children) c->CloseStdin();  // "go"
  // Each live line: when its snapshot was taken and each tenant's figure in it (-1: none).
  std::vector<std::pair<uint64_t, std::vector<double>>> lines;
  if (daemon) {
    // Live, once a second: the GPU time each tenant's kernels occupied over the last second, as
    // the daemon's arbiter measured it.
    for (int second = 1; second < static_cast<int>(seconds + 0.5); ++second) {
      std::this_thread::sleep_for(1s);
      auto status = ipc::Call(round.socket, "STATUS", nullptr, 2s);
      if (!status.ok() || status->rfind("OK ", 0) != 0) continue;
      uint64_t at = 0;  // the second the figures cover ends here (gpu_time_until_ns)
      // Each tenant is a container of its own name; its share on GPU 0.
      std::string line = Fmt("   t=%2.0fs  GPU time over the last second:", second);
      std::vector<double> figures(count, -1);
      try {
        const nlohmann::json doc = nlohmann::json::parse(status->substr(3));
        at = doc.at("devices").at(0).at("gpu_time_until_ns").get<uint64_t>();
        for (size_t i = 0; i < count; ++i) {
          for (const nlohmann::json& c : doc.at("containers")) {
            if (c.at("id") != tenants[i].name) continue;
            figures[i] = c.at("compute").at(0).at("achieved_percent").get<double>();
            line += std::string("  ") + tenants[i].name + " " + Fmt("%5.1f%%", figures[i]);
          }
        }
      } catch (const nlohmann::json::exception&) {
        continue;  // a snapshot without the share yet: the next second's line shows it
      }
      lines.push_back({at, figures});
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    std::printf("\n");
  }
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

  std::printf("   %-10s %8s %9s %8s %8s %7s %7s %10s %7s %7s %9s  %s\n", "TENANT", "PID",
              "MEM ASKED", "MEM CAP", "MEM GOT", "KERNELS", "KERNEL", "DEVICE", "TARGET", "SHARE",
              "LAT p99", "NOTE");
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
    const TenantSpec& t = tenants[i];
    const std::string target = !with_tessera ? "-" : t.high_prio ? "first" : Fmt("%.0f%%", t.core);
    const std::string latency =
        v.count("latency_p99_us") ? Fmt("%.2fms", std::stod(v.at("latency_p99_us")) / 1000) : "-";
    std::printf("   %-10s %8d %9s %8s %8s %7s %7s %10s %7s %7s %9s  %s\n", t.name,
                static_cast<int>(children[i]->pid()), FormatBytes(Bytes(t.memory)).c_str(),
                with_tessera ? FormatBytes(Bytes(t.cap)).c_str() : "-",
                FormatBytes(Bytes(got)).c_str(), get("kernels").c_str(),
                Fmt("%.1fms", t.kernel_us / 1000.0).c_str(), Fmt("%.2fs", device_s).c_str(),
                target.c_str(),
                Fmt("%.1f%%", tenant_wall > 0 ? 100.0 * device_s / tenant_wall : 0).c_str(),
                latency.c_str(), note.c_str());
  }
  std::printf("   device busy %.1f%% of %.2f s.\n",
              wall_s > 0 ? 100.0 * total_device_s / wall_s : 0.0, wall_s);
  if (!lines.empty()) {
    // The live lines against what each tenant ran in the same second (its kernels' ends, which
    // it reports: each kernel ran for its length up to the end its synchronisation saw).
    double worst = 0;
    for (size_t i = 0; i < children.size(); ++i) {
      const auto& v = children[i]->values();
      auto it = v.find("ran");
      if (it == v.end()) continue;
      const std::string& text = it->second;
      const size_t colon = text.find(':');
      if (colon == std::string::npos) continue;
      const uint64_t base = std::strtoull(text.c_str(), nullptr, 10);
      std::vector<uint64_t> ends;
      for (size_t pos = colon + 1; pos < text.size();) {
        char* next = nullptr;
        ends.push_back(base + std::strtoull(text.c_str() + pos, &next, 10) * 1000);
        pos = static_cast<size_t>(next - text.c_str()) + 1;
      }
      const uint64_t kernel_ns = tenants[i].kernel_us * 1000;
      for (const auto& [at, figures] : lines) {
        if (figures[i] < 0) continue;
        const uint64_t from = at - 1'000'000'000ull;
        uint64_t ran = 0;
        for (uint64_t end : ends) {
          const uint64_t start = end - kernel_ns;
          const uint64_t lo = std::max(start, from), hi = std::min(end, at);
          if (hi > lo) ran += hi - lo;
        }
        worst = std::max(worst, std::fabs(figures[i] - static_cast<double>(ran) / 1e7));
      }
    }
    std::printf(
        "   each per-second figure above is within %.1f points of what its tenant ran then.\n",
        worst);
  }
  if (!ok) return Fail("a tenant failed; see its error above");
  return 0;
}

}  // namespace

std::string ExecutableDir() { return process::ExecutableDir(); }

// The cluster act: build/tests/tessera-demo-cluster (testing/demo): real tesserads, device plugins
// and extender over the stand-in API server and kubelets.
int RunClusterAct() {
  const std::string act = ExecutableDir() + "/../tests/tessera-demo-cluster";
  if (access(act.c_str(), X_OK) != 0) {
    return Fail(
        "the cluster act is not built (" + act +
        "); build it with `cmake --build build --target tessera-demo-cluster` (it needs the "
        "Kubernetes doors' packages, see scripts/dev)");
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return Fail(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {  // the act writes to this terminal
    execl(act.c_str(), act.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  return Fail("the cluster act failed (wait status " + std::to_string(status) + ")");
}

int RunNodeAct(const DemoArgs& args);

int RunDemo(const DemoArgs& args) {
  if (args.act && *args.act != "node" && *args.act != "cluster") {
    std::fprintf(stderr, "tessera demo: act \"%s\": expected node or cluster (or none: both)\n",
                 args.act->c_str());
    return 2;
  }
  if (args.act == "cluster") return RunClusterAct();
  if (int r = RunNodeAct(args); r != 0 || args.act) return r;
  std::printf("\n");
  return RunClusterAct();
}

int RunNodeAct(const DemoArgs& args) {
  std::string simgpu = args.simgpu.value_or(ExecutableDir() + "/../lib/libtessera-simgpu.so");
  double seconds = 3.0;
  if (args.seconds) {
    char* end = nullptr;
    seconds = std::strtod(args.seconds->c_str(), &end);
    if (args.seconds->empty() || *end != '\0' || !(seconds >= 0.5 && seconds <= 600)) {
      std::fprintf(stderr,
                   "tessera demo: --seconds \"%s\": expected a number of seconds from 0.5 to 600\n",
                   args.seconds->c_str());
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
      {"service", 4 * kBytesPerGiB, 4 * kBytesPerGiB, 1000, 30, false, 0},
      {"trainer", 12 * kBytesPerGiB, 6 * kBytesPerGiB, 4000, 70, false, 0},
      {"alerts", 1 * kBytesPerGiB, 1 * kBytesPerGiB, 500, 100, true, 20},
  };
  std::printf("Tessera demo: %zu tenants on the simulated GPU (%s), %.1f s per round\n",
              std::size(tenants), gpus.c_str(), seconds);

  // Round 1: the tenants talk to the (simulated) driver directly.
  std::printf(
      "\n1. Without Tessera: memory goes first come, first served, the device runs kernels in\n"
      "   submission order whoever submitted them, and the alerts job waits behind the "
      "others.\n\n");
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
      "\n2. With Tessera (policy 3, fixed percentage): caps of 4/6/1 GiB and GPU-time shares of\n"
      "   30%% (service) and 70%% (trainer); alerts is high priority and goes first when it has\n"
      "   work. Each tenant sees a GPU the size of its cap and stops exactly there.\n\n");
  return RunRound(capped, tenants, std::size(tenants), seconds, true);
}

int RunDemoTenant(const std::vector<std::string>& args) {
  if (args.size() != 6) return 2;
  const int period_ms = std::atoi(args[5].c_str());
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
  std::vector<uint64_t> latencies;  // launch call to kernel start, for a periodic tenant
  std::vector<uint64_t> ends;       // each kernel's end, as its synchronisation saw it
  const uint64_t start = MonotonicNs();
  while (MonotonicNs() - start < run_ns) {
    uint64_t ns = kernel_ns;
    void* params[] = {&ns};
    const uint64_t asked = MonotonicNs();
    check(cu.cuLaunchKernel(spin, 1, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr),
          "cuLaunchKernel");
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    ends.push_back(MonotonicNs());
    ++kernels;
    if (period_ms > 0) {
      const uint64_t done = MonotonicNs();
      latencies.push_back(done - asked > kernel_ns ? done - asked - kernel_ns : 0);
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
          std::chrono::nanoseconds(asked + static_cast<uint64_t>(period_ms) * 1000000)));
    }
  }
  const uint64_t wall = MonotonicNs() - start;
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    std::printf("latency_p50_us=%.1f\nlatency_p99_us=%.1f\n", latencies[latencies.size() / 2] / 1e3,
                latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)] / 1e3);
  }
  for (CUdeviceptr p : held) check(cu.cuMemFree_v2(p), "cuMemFree");
  // ran=START:END,END,... (microseconds after START): for comparing the live per-second lines.
  std::string ran = "ran=" + std::to_string(start) + ":";
  for (size_t i = 0; i < ends.size(); ++i) {
    ran += (i ? "," : "") + std::to_string((ends[i] - start) / 1000);
  }
  std::printf("%s\n", ran.c_str());
  std::printf(
      "kernels=%llu\ndevice_ns=%llu\nwall_ns=%llu\n", static_cast<unsigned long long>(kernels),
      static_cast<unsigned long long>(kernels * kernel_ns), static_cast<unsigned long long>(wall));
  return 0;
}

}  // namespace tessera::cli
