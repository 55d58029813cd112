// tesserad: the node daemon. Discovers the GPUs through NVML (the real library, or simgpu with
// --sim / TESSERA_SIM_GPUS), creates or reopens the node's memory ledger, and serves the Unix
// socket: processes register, `tessera run` sets limits, `tessera smi` reads the state, and a
// process's memory is reclaimed the moment its connection closes.
//
//   tesserad [--socket PATH] [--sim] [--allow-self-declared true|false] [--ledger NAME]
//            [--ephemeral] [--context-overhead SIZE|measure] [--policy N] [--max-inst N]
//            [--prio-ratio P] [--quota-min DUR] [--quota-max DUR] [--daemon-loss-timeout DUR]
// The compute arbiter (src/daemon/compute.h) runs on a thread of its own beside the event loop.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bool_flag.h"
#include "core/bytes.h"
#include "core/number.h"
#include "core/percent.h"
#include "core/policy.h"
#include "daemon/compute.h"
#include "daemon/registry.h"
#include "daemon/server.h"
#include "driver/cuda_api.h"
#include "driver/library.h"
#include "driver/nvml_api.h"
#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"

// NVML stays loaded for the daemon's life and is never unloaded (not even at exit: its own
// globals must outlive every use). External linkage keeps the pointer, and so the object, alive.
tessera::DynamicLibrary* tesserad_nvml_library = nullptr;
tessera::DynamicLibrary* tesserad_cuda_library = nullptr;

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "tesserad: %s\nusage: tesserad [--socket PATH] [--sim] [--allow-self-declared "
               "true|false] [--ledger NAME] [--ephemeral] [--context-overhead SIZE|measure] "
               "[--policy 0-5] [--max-inst 1-256] [--prio-ratio 20-99] [--quota-min MS] "
               "[--quota-max MS] [--daemon-loss-timeout MS]\n",
               problem.c_str());
  return 2;
}

tessera::Result<std::vector<tessera::ledger::DeviceInfo>> Discover(const std::string& nvml_path) {
  using tessera::Result;
  using Devices = std::vector<tessera::ledger::DeviceInfo>;
  auto lib = tessera::DynamicLibrary::Open(nvml_path);
  if (!lib.ok()) return lib.status();
  auto init = lib->Resolve<decltype(&nvmlInit_v2)>("nvmlInit_v2");
  auto count = lib->Resolve<decltype(&nvmlDeviceGetCount_v2)>("nvmlDeviceGetCount_v2");
  auto handle =
      lib->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>("nvmlDeviceGetHandleByIndex_v2");
  auto uuid = lib->Resolve<decltype(&nvmlDeviceGetUUID)>("nvmlDeviceGetUUID");
  auto name = lib->Resolve<decltype(&nvmlDeviceGetName)>("nvmlDeviceGetName");
  auto memory = lib->Resolve<decltype(&nvmlDeviceGetMemoryInfo)>("nvmlDeviceGetMemoryInfo");
  for (const tessera::Status* s : {&init.status(), &count.status(), &handle.status(),
                                   &uuid.status(), &name.status(), &memory.status()}) {
    if (!s->ok()) return *s;
  }
  if (nvmlReturn_t r = (*init)(); r != NVML_SUCCESS) {
    return Result<Devices>::Error("nvmlInit_v2 failed with " + std::to_string(r) + " (" +
                                  nvml_path + ")");
  }
  unsigned int n = 0;
  if ((*count)(&n) != NVML_SUCCESS) return Result<Devices>::Error("nvmlDeviceGetCount failed");
  Devices devices;
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t dev = nullptr;
    char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {}, nm[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    nvmlMemory_t mem{};
    if ((*handle)(i, &dev) != NVML_SUCCESS || (*uuid)(dev, u, sizeof(u)) != NVML_SUCCESS ||
        (*name)(dev, nm, sizeof(nm)) != NVML_SUCCESS || (*memory)(dev, &mem) != NVML_SUCCESS) {
      return Result<Devices>::Error("NVML could not describe device " + std::to_string(i));
    }
    devices.push_back({u, nm, mem.total});
  }
  tesserad_nvml_library = new tessera::DynamicLibrary(std::move(*lib));
  return devices;
}

// Measures what a context costs on device 0: NVML's used memory around a primary-context retain
// through the real driver. 0 (with a note) when it cannot be measured.
uint64_t MeasureContextOverhead(const std::string& libcuda) {
  auto cuda = tessera::DynamicLibrary::Open(libcuda);
  if (!cuda.ok() || tesserad_nvml_library == nullptr) return 0;
  auto init = cuda->Resolve<decltype(&cuInit)>("cuInit");
  auto retain = cuda->Resolve<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  auto release =
      cuda->Resolve<decltype(&cuDevicePrimaryCtxRelease_v2)>("cuDevicePrimaryCtxRelease_v2");
  auto handle = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
      "nvmlDeviceGetHandleByIndex_v2");
  auto memory =
      tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetMemoryInfo)>("nvmlDeviceGetMemoryInfo");
  if (!init.ok() || !retain.ok() || !release.ok() || !handle.ok() || !memory.ok()) return 0;
  nvmlDevice_t dev = nullptr;
  nvmlMemory_t before{}, after{};
  CUcontext ctx = nullptr;
  if ((*init)(0) != CUDA_SUCCESS || (*handle)(0, &dev) != NVML_SUCCESS ||
      (*memory)(dev, &before) != NVML_SUCCESS || (*retain)(&ctx, 0) != CUDA_SUCCESS) {
    return 0;
  }
  const bool ok = (*memory)(dev, &after) == NVML_SUCCESS;
  (*release)(0);
  // Keep the driver loaded: unloading a CUDA driver in a running process is not supported.
  tesserad_cuda_library = new tessera::DynamicLibrary(std::move(*cuda));
  return ok && after.used > before.used ? after.used - before.used : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path = "/run/tessera/tessera.sock";
  std::string ledger_name;
  bool sim = std::getenv("TESSERA_SIM_GPUS") != nullptr;
  bool allow_self_declared = true;
  bool ephemeral = false;
  std::string context_overhead = "measure";
  tessera::daemon::ComputeOptions compute_options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "--socket") {
      const char* v = value();
      if (v == nullptr) return Usage("--socket needs a path");
      socket_path = v;
    } else if (arg == "--ledger") {
      const char* v = value();
      if (v == nullptr) return Usage("--ledger needs a name");
      ledger_name = v;
    } else if (arg == "--context-overhead") {
      const char* v = value();
      if (v == nullptr) return Usage("--context-overhead needs a size (e.g. 300MiB) or measure");
      context_overhead = v;
    } else if (arg == "--policy" || arg == "--max-inst" || arg == "--prio-ratio" ||
               arg == "--quota-min" || arg == "--quota-max" || arg == "--daemon-loss-timeout") {
      const char* v = value();
      if (v == nullptr) return Usage(arg + " needs a value");
      auto& config = compute_options.defaults;
      if (arg == "--policy") {
        auto p = tessera::ParseArbiterPolicy(v, "--policy");
        if (!p.ok()) return Usage(p.error());
        config.policy = *p;
      } else if (arg == "--max-inst") {
        auto n = tessera::ParseUnsigned(v, "--max-inst", 1, 256);
        if (!n.ok()) return Usage(n.error());
        config.max_inst = static_cast<int>(*n);
      } else if (arg == "--prio-ratio") {
        auto p = tessera::ParsePercent(v, "--prio-ratio", 20, 99);
        if (!p.ok()) return Usage(p.error());
        config.prio_ratio = *p;
      } else {
        // Milliseconds, fractions allowed (0.5 = 500 us).
        char* end = nullptr;
        const double ms = std::strtod(v, &end);
        if (*v == '\0' || *end != '\0' || !(ms > 0) || ms > 600000) {
          return Usage(arg + " \"" + v + "\": expected milliseconds, e.g. 2 or 0.5");
        }
        const auto ns = std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6));
        if (arg == "--quota-min") config.quota_min = ns;
        if (arg == "--quota-max") config.quota_max = ns;
        if (arg == "--daemon-loss-timeout") {
          compute_options.loss_timeout_ns = static_cast<uint64_t>(ns.count());
        }
      }
    } else if (arg == "--sim") {
      sim = true;
    } else if (arg == "--ephemeral") {
      ephemeral = true;
    } else if (arg == "--allow-self-declared" || arg.rfind("--allow-self-declared=", 0) == 0) {
      std::string text;
      if (arg.size() > std::strlen("--allow-self-declared")) {
        text = arg.substr(std::strlen("--allow-self-declared="));
      } else {
        const char* v = value();
        if (v == nullptr) return Usage("--allow-self-declared needs true or false");
        text = v;
      }
      auto parsed = tessera::ParseBoolFlag(text, "--allow-self-declared");
      if (!parsed.ok()) return Usage(parsed.error());
      allow_self_declared = *parsed;
    } else {
      return Usage("unknown argument \"" + arg + "\"");
    }
  }
  if (socket_path.empty() || socket_path[0] != '/' || socket_path.size() > 107) {
    return Usage("--socket \"" + socket_path +
                 "\": expected an absolute path of at most 107 bytes");
  }
  if (ledger_name.empty()) {
    // One ledger per socket path, so daemons on different sockets never share accounting.
    uint64_t h = 1469598103934665603ull;
    for (char c : socket_path) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "/tessera-ledger-%016llx", static_cast<unsigned long long>(h));
    ledger_name = buf;
  } else if (ledger_name[0] != '/') {
    ledger_name = "/" + ledger_name;
  }

  std::string nvml = sim ? tessera::process::ExecutableDir() + "/../lib/libtessera-simgpu.so" : "";
  if (!sim) {
    const char* real = std::getenv("TESSERA_REAL_NVML");
    nvml = real != nullptr && *real != '\0' ? real : "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
  }
  char resolved[4096];
  if (realpath(nvml.c_str(), resolved) != nullptr) nvml = resolved;
  auto devices = Discover(nvml);
  if (!devices.ok()) {
    std::fprintf(stderr, "tesserad: cannot discover GPUs: %s\n", devices.error().c_str());
    return 1;
  }
  auto ledger = tessera::ledger::MemoryLedger::CreateOrOpen(ledger_name, *devices);
  if (!ledger.ok()) {
    std::fprintf(stderr, "tesserad: %s\n", ledger.error().c_str());
    return 1;
  }
  uint64_t context_bytes = 0;
  if (context_overhead == "measure") {
    // simgpu's contexts cost nothing by design; a real driver's are measured.
    if (!sim) {
      const char* real = std::getenv("TESSERA_REAL_LIBCUDA");
      context_bytes = MeasureContextOverhead(
          real != nullptr && *real != '\0' ? real : "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    }
  } else {
    auto parsed = tessera::ParseBytes(context_overhead, "--context-overhead");
    if (!parsed.ok()) return Usage(parsed.error() + " (or measure)");
    context_bytes = parsed->count();
  }
  auto compute = tessera::daemon::ComputeService::Create(ledger->layout(), ledger->device_count(),
                                                        compute_options);
  if (!compute.ok()) return Usage(compute.error());
  tessera::daemon::Registry registry(std::move(*ledger), {allow_self_declared, context_bytes},
                                     compute->get());
  const int reclaimed = registry.ReclaimDeadProcesses();
  auto listen_fd = tessera::ipc::Listen(socket_path);
  if (!listen_fd.ok()) {
    std::fprintf(stderr, "tesserad: %s\n", listen_fd.error().c_str());
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::printf(
      "tesserad: listening on %s, ledger /dev/shm%s, %zu device(s)%s, reclaimed %d, "
      "context overhead %llu bytes, policy %d max_inst %d\n",
      socket_path.c_str(), ledger_name.c_str(), devices->size(), sim ? " (simulated)" : "",
      reclaimed, static_cast<unsigned long long>(context_bytes),
      static_cast<int>(compute_options.defaults.policy), compute_options.defaults.max_inst);
  std::fflush(stdout);
  (*compute)->Start();
  tessera::daemon::Server server(&registry, *listen_fd);
  tessera::Status run = server.Run(g_stop);
  (*compute)->Stop();
  close(*listen_fd);
  unlink(socket_path.c_str());
  if (ephemeral) shm_unlink(ledger_name.c_str());
  if (!run.ok()) {
    std::fprintf(stderr, "tesserad: %s\n", run.message().c_str());
    return 1;
  }
  return 0;
}
