// tesserad: the node daemon. Discovers the GPUs through NVML (the real library, or simgpu with
// --sim / TESSERA_SIM_GPUS), creates or reopens the node's memory ledger, and serves the Unix
// socket: processes register, `tessera run` sets limits, `tessera smi` reads the state, and a
// process's memory is reclaimed the moment its connection closes.
//
//   tesserad [--config FILE] [--socket PATH] [--sim] [--allow-self-declared true|false]
//            [--ledger NAME] [--ephemeral] [--context-overhead SIZE|measure] [--policy N]
//            [--max-inst N] [--prio-ratio P] [--quota-min MS] [--quota-max MS]
//            [--daemon-loss-timeout MS] [--ctl-mount DIR] [--admin-group NAME] [--http HOST:PORT]
//            [--http-allow-write] [--gpu-policy GPU:POLICY] [--reconcile-interval DURATION]
//            [--over-limit-action log|block|kill] [--unattributed-action report|kill]
//            [--container-sockets DIR] [--require-identity true|false]
//            [--mps [--mps-control PATH] [--mps-dir DIR]] [--max-request-line SIZE]
//            [--max-reply-backlog SIZE] [--request-timeout D] [--idle-timeout D]
//            [--container-max-connections N] [--container-max-processes N]
//            [--refusal-log-rate N]
// --config loads a YAML file (deploy/tesserad.yaml); flags given on the command line override it.
// The compute arbiter (src/daemon/compute.h) runs on a thread of its own beside the event loop.
// The control tree (docs/contracts.md) has three doors onto one DaemonNodeControl: the CTL verb
// on the socket (`tessera ctl`), a FUSE mount (--ctl-mount) and HTTP /v1/ctl/ (--http), which
// also serves /v1/state and /metrics. The reconciler (src/daemon/reconciler.h) compares the
// ledger with NVML's per-process memory every --reconcile-interval on a thread of its own.
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cmdline/cmdline.h"
#include "config/daemon_config.h"
#include "core/bool_flag.h"
#include "core/bytes.h"
#include "core/duration.h"
#include "core/number.h"
#include "core/percent.h"
#include "core/arbiter_policy.h"
#include "ctl/control_tree.h"
#include "ctl/fuse_mount.h"
#include "daemon/compute.h"
#include "daemon/ctl_door.h"
#include "daemon/devices.h"
#include "daemon/http_door.h"
#include "daemon/identity.h"
#include "daemon/node_control.h"
#include "daemon/reconciler.h"
#include "daemon/registry.h"
#include "daemon/server.h"
#include "driver/cuda_api.h"
#include "driver/library.h"
#include "driver/nvml_api.h"
#include "http/server.h"
#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"
#include "mps/mps.h"
#include "process/child_process.h"

// NVML stays loaded for the daemon's life and is never unloaded (not even at exit: its own
// globals must outlive every use). External linkage keeps the pointer, and so the object, alive.
tessera::DynamicLibrary* tesserad_nvml_library = nullptr;
tessera::DynamicLibrary* tesserad_cuda_library = nullptr;
// NVML's handle of each ledger device (a GPU, or a MIG device: see daemon/devices.h).
std::vector<nvmlDevice_t> tesserad_nvml_handles;

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Usage(const std::string& problem) {
  std::fprintf(stderr, "tesserad: %s\n(see tesserad --help)\n", problem.c_str());
  return 2;
}

// The command line as given: a flag left out is nullopt (or false), so that only flags given on
// the command line override the config file.
struct Flags {
  std::optional<std::string> config, socket, ledger, context_overhead, policy, max_inst, prio_ratio,
      quota_min, quota_max, daemon_loss_timeout, ctl_mount, admin_group, http, reconcile_interval,
      over_limit_action, container_sockets, allow_self_declared, mps_control, mps_dir,
      unattributed_action, require_identity;
  // The socket server's bounds, by config key (config::kSocketLimitKeys), as given.
  std::map<std::string, std::optional<std::string>> socket_limits;
  std::vector<std::string> gpu_policy;
  bool sim = false, ephemeral = false, http_allow_write = false, mps = false;
};

// Reads the command line into `flags` (CLI11). Returns the exit status when the program should
// stop here (--help: 0; a malformed command line: 2 with the reason on stderr).
std::optional<int> ParseCommandLine(int argc, char** argv, Flags* flags) {
  CLI::App app{
      "tesserad: the Tessera node daemon. Keeps the node's GPU memory ledger, arbitrates "
      "GPU time, serves the control tree (socket, FUSE, HTTP) and /metrics.",
      "tesserad"};
  app.set_version_flag("--version", std::string("tesserad ") + TESSERA_VERSION);
  app.footer("Flags given on the command line override --config's keys, whatever their order.");
  auto option = [&app](const char* name, std::optional<std::string>* out, const char* type,
                       const char* help) { app.add_option(name, *out, help)->type_name(type); };
  option("--config", &flags->config, "FILE", "YAML config file (deploy/tesserad.yaml)");
  option("--socket", &flags->socket, "PATH", "the Unix socket (default /run/tessera/tessera.sock)");
  app.add_flag("--sim", flags->sim, "use the simulated GPU (libtessera-simgpu.so)");
  option("--allow-self-declared", &flags->allow_self_declared, "true|false",
         "accept limits processes declare themselves (default true)");
  option("--ledger", &flags->ledger, "NAME",
         "shared-memory ledger (default: from the socket path)");
  app.add_flag("--ephemeral", flags->ephemeral, "remove the ledger at exit");
  option("--context-overhead", &flags->context_overhead, "SIZE|measure",
         "GPU memory charged per process for its context (default measure)");
  option("--policy", &flags->policy, "0-5|NAME", "arbiter policy of every GPU (default 0 fair)");
  option("--max-inst", &flags->max_inst, "1-256", "slots and weight units per GPU (default 16)");
  option("--prio-ratio", &flags->prio_ratio, "20-99", "high-priority lane cap, percent (50)");
  option("--quota-min", &flags->quota_min, "MS", "shortest compute grant, ms (default 2)");
  option("--quota-max", &flags->quota_max, "MS", "longest compute grant, ms (default 20)");
  option("--daemon-loss-timeout", &flags->daemon_loss_timeout, "MS",
         "processes run ungated after this long without the arbiter (default 2000)");
  app.add_option("--gpu-policy", flags->gpu_policy, "one GPU's policy; repeatable")
      ->type_name("GPU:POLICY")
      ->allow_extra_args(false);  // one value per --gpu-policy
  option("--ctl-mount", &flags->ctl_mount, "DIR", "mount the control tree here with FUSE");
  option("--admin-group,--ctl-group", &flags->admin_group, "NAME",
         "group that administers the daemon besides root and its own user: control-tree writes "
         "and CONTAINER on the node socket");
  option("--http", &flags->http, "HOST:PORT", "serve /v1/ctl, /v1/state and /metrics here");
  app.add_flag("--http-allow-write", flags->http_allow_write, "serve PUT /v1/ctl/ over HTTP");
  option("--reconcile-interval", &flags->reconcile_interval, "100ms-10s",
         "how often NVML's view is compared with the ledger (default 1s)");
  option("--over-limit-action", &flags->over_limit_action, "log|block|kill",
         "what to do about a container over its limit (default log)");
  option("--unattributed-action", &flags->unattributed_action, "report|kill",
         "what to do about a process on a GPU that belongs to no container (default report)");
  option("--container-sockets", &flags->container_sockets, "DIR",
         "one socket per registered container in DIR");
  option("--require-identity", &flags->require_identity, "true|false",
         "a container's socket serves only processes identified as its own (default false)");
  app.add_flag("--mps", flags->mps,
               "MPS mode: run and supervise one nvidia-cuda-mps-control per GPU (policy 5 unless "
               "--policy is given)");
  option("--mps-control", &flags->mps_control, "PATH",
         "the MPS control program (default /usr/bin/nvidia-cuda-mps-control)");
  option("--mps-dir", &flags->mps_dir, "DIR",
         "MPS pipe and log directories go under DIR (default /run/tessera/mps)");
  // The socket server's bounds: --max-request-line for max_request_line, and so on.
  const std::map<std::string, std::pair<const char*, const char*>> limit_help = {
      {"max_request_line", {"SIZE", "longest request line (default 8KiB)"}},
      {"max_reply_backlog", {"SIZE", "reply bytes held for a client not reading (256KiB)"}},
      {"request_timeout", {"DURATION", "a request must arrive whole, a reply be taken (5s)"}},
      {"idle_timeout", {"DURATION", "close a connection with no process after (60s)"}},
      {"container_max_connections", {"N", "connections per container socket (256)"}},
      {"container_max_processes", {"N", "registered processes per container (128)"}},
      {"refusal_log_rate", {"N", "refusal lines logged a second, at most (10)"}}};
  for (const char* key : tessera::config::kSocketLimitKeys) {
    std::string flag = std::string("--") + key;
    for (char& c : flag) c = c == '_' ? '-' : c;
    const auto& [type, help] = limit_help.at(key);
    app.add_option(flag, flags->socket_limits[key], help)->type_name(type);
  }
  return tessera::cmdline::Parse(app, argc, argv);
}

tessera::Result<std::vector<tessera::ledger::DeviceInfo>> Discover(const std::string& nvml_path) {
  using tessera::Result;
  using Devices = std::vector<tessera::ledger::DeviceInfo>;
  auto lib = tessera::DynamicLibrary::Open(nvml_path);
  if (!lib.ok()) return lib.status();
  auto init = lib->Resolve<decltype(&nvmlInit_v2)>("nvmlInit_v2");
  if (!init.ok()) return init.status();
  if (nvmlReturn_t r = (*init)(); r != NVML_SUCCESS) {
    return Result<Devices>::Error("nvmlInit_v2 failed with " + std::to_string(r) + " (" +
                                  nvml_path + ")");
  }
  std::vector<std::string> notes;
  auto managed = tessera::daemon::DiscoverDevices(*lib, &notes);
  if (!managed.ok()) return managed.status();
  for (const std::string& note : notes) std::fprintf(stderr, "tesserad: %s\n", note.c_str());
  Devices devices;
  for (const auto& m : *managed) {
    devices.push_back(m.info);
    tesserad_nvml_handles.push_back(m.handle);
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

// The group's id, or an error naming the flag and the group.
tessera::Result<gid_t> LookUpGroup(const std::string& name, const std::string& input) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return tessera::Result<gid_t>::Error(input + "=\"" + name +
                                         "\": no such group on this node; expected a group name "
                                         "from /etc/group");
  }
  return found->gr_gid;
}

// Every connection is a descriptor: the soft open-files limit goes up to the hard one (systemd's
// LimitNOFILE sets both; a shell's soft 1024 would cap the daemon at a few hundred clients).
void RaiseOpenFilesLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

unsigned long long OpenFilesLimit() {
  rlimit limit{};
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
}

}  // namespace

// The device's own per-process busy time for the reconciler's GPU-time check: NVML's process
// utilisation since the newest sample of the previous call (per GPU). A process's samples' mean
// SM utilisation times the interval between the two calls is the GPU time the device saw it use.
// The first call per GPU only sets the mark (no interval yet).
tessera::daemon::BusyLister NvmlBusyLister() {
  using tessera::Result;
  using List = std::vector<tessera::daemon::DeviceProcess>;
  if (tesserad_nvml_library == nullptr) {
    return [](int) { return Result<List>::Error("NVML is not loaded"); };
  }
  auto util = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetProcessUtilization)>(
      "nvmlDeviceGetProcessUtilization");
  auto handle = tesserad_nvml_library->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
      "nvmlDeviceGetHandleByIndex_v2");
  if (!util.ok() || !handle.ok()) {
    return [](int) { return Result<List>::Error("NVML has no nvmlDeviceGetProcessUtilization"); };
  }
  auto marks = std::make_shared<std::map<int, unsigned long long>>();  // per GPU, newest sample
  // Per GPU, when the previous call was made (by this process's clock).
  auto called = std::make_shared<std::map<int, std::chrono::steady_clock::time_point>>();
  return [util = *util, handle = *handle, marks, called](int device) -> Result<List> {
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = handle(static_cast<unsigned int>(device), &dev); r != NVML_SUCCESS) {
      return Result<List>::Error("nvmlDeviceGetHandleByIndex_v2 failed with " + std::to_string(r));
    }
    const unsigned long long since = (*marks)[device];
    const auto now = std::chrono::steady_clock::now();
    const bool first_call = called->count(device) == 0;
    const double elapsed_ns =
        first_call ? 0.0
                   : std::chrono::duration<double, std::nano>(now - (*called)[device]).count();
    (*called)[device] = now;
    std::vector<nvmlProcessUtilizationSample_t> samples(64);
    unsigned int count = 0;
    nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      count = static_cast<unsigned int>(samples.size());
      r = util(dev, samples.data(), &count, since);
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) samples.resize(static_cast<size_t>(count) + 16);
    }
    if (r == NVML_ERROR_NOT_FOUND)
      count = 0;  // no sample since the mark: nobody ran
    else if (r != NVML_SUCCESS) {
      return Result<List>::Error("nvmlDeviceGetProcessUtilization failed with " +
                                 std::to_string(r));
    }
    unsigned long long newest = since;
    std::map<int32_t, std::pair<double, int>> mean;  // pid -> (sum of smUtil, samples)
    for (unsigned int i = 0; i < count; ++i) {
      newest = std::max(newest, samples[i].timeStamp);
      auto& [sum, n] = mean[static_cast<int32_t>(samples[i].pid)];
      sum += std::min(samples[i].smUtil, 100u);
      ++n;
    }
    (*marks)[device] = newest;
    List out;
    // The first call only sets the mark. Samples since the mark were taken since the previous
    // call, so they cover at most the time since then: also when the mark is old (no process ran
    // in between) or unset (none had run yet, so the previous calls found nothing).
    if (first_call || newest <= since) return out;
    const double interval_ns =
        since == 0 ? elapsed_ns
                   : std::min(static_cast<double>(newest - since) * 1000.0, elapsed_ns);
    for (const auto& [pid, sum_n] : mean) {
      const double percent = sum_n.first / sum_n.second;
      out.push_back({pid, static_cast<uint64_t>(percent / 100.0 * interval_ns)});
    }
    return out;
  };
}

// The device's own per-process memory view for the reconciler: NVML's compute-process list
// (_v3, else _v2), growing the buffer while processes come and go.
tessera::daemon::ProcessLister NvmlProcessLister() {
  using tessera::Result;
  using List = std::vector<tessera::daemon::DeviceProcess>;
  if (tesserad_nvml_library == nullptr) {
    return [](int) { return Result<List>::Error("NVML is not loaded"); };
  }
  using ListFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
  auto v3 = tesserad_nvml_library->Resolve<ListFn>("nvmlDeviceGetComputeRunningProcesses_v3");
  auto v2 = tesserad_nvml_library->Resolve<ListFn>("nvmlDeviceGetComputeRunningProcesses_v2");
  ListFn list = v3.ok() ? *v3 : v2.ok() ? *v2 : nullptr;
  if (list == nullptr) {
    return [](int) {
      return Result<List>::Error("NVML has no nvmlDeviceGetComputeRunningProcesses_v3/_v2");
    };
  }
  return [list](int device) -> Result<List> {
    if (device < 0 || static_cast<size_t>(device) >= tesserad_nvml_handles.size()) {
      return Result<List>::Error("no NVML handle for device " + std::to_string(device));
    }
    nvmlDevice_t dev = tesserad_nvml_handles[static_cast<size_t>(device)];
    std::vector<nvmlProcessInfo_t> infos(64);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned int count = static_cast<unsigned int>(infos.size());
      const nvmlReturn_t r = list(dev, &count, infos.data());
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        infos.resize(static_cast<size_t>(count) + 16);
        continue;
      }
      if (r != NVML_SUCCESS) {
        return Result<List>::Error("nvmlDeviceGetComputeRunningProcesses failed with " +
                                   std::to_string(r));
      }
      List out;
      for (unsigned int i = 0; i < count; ++i) {
        // Not available (a container without the right to see other processes): unknown, skip.
        if (infos[i].usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)) {
          continue;
        }
        out.push_back({static_cast<int32_t>(infos[i].pid), infos[i].usedGpuMemory});
      }
      return out;
    }
    return Result<List>::Error("the process list kept growing");
  };
}

int main(int argc, char** argv) {
  std::string socket_path = "/run/tessera/tessera.sock";
  std::string ledger_name;
  bool sim = std::getenv("TESSERA_SIM_GPUS") != nullptr;
  bool allow_self_declared = true;
  bool ephemeral = false;
  std::string context_overhead = "measure";
  tessera::daemon::ComputeOptions compute_options;
  std::string ctl_mount, admin_group, http_listen, http_input = "--http";
  tessera::config::SocketLimits socket_limits;
  std::string container_sockets;  // --container-sockets DIR: one socket per registered container
  bool http_allow_write = false;
  tessera::Bytes default_memsize = tessera::Bytes::Zero();  // 0: no default limit
  std::map<int, tessera::config::GpuOverrides> gpu_overrides;
  std::vector<std::pair<int, tessera::ArbiterPolicy>> gpu_policies;  // --gpu-policy, applied last
  std::chrono::nanoseconds reconcile_interval = std::chrono::seconds(1);
  tessera::config::OverLimitAction over_limit_action = tessera::config::OverLimitAction::kLog;
  tessera::config::UnattributedAction unattributed_action =
      tessera::config::UnattributedAction::kReport;
  bool require_identity = false;
  // MPS mode (mps/mps.h): one nvidia-cuda-mps-control per GPU, supervised.
  bool mps = false, policy_given = false;
  std::string mps_control = tessera::mps::kDefaultControl, mps_dir = tessera::mps::kDefaultRoot;

  Flags flags;
  if (std::optional<int> exit_status = ParseCommandLine(argc, argv, &flags)) return *exit_status;
  RaiseOpenFilesLimit();
  // The config file first, so every flag on the command line overrides it whatever their order.
  const std::string config_path = flags.config.value_or("");
  if (flags.config) {
    auto loaded = tessera::config::LoadDaemonConfig(config_path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "tesserad: %s\n", loaded.error().c_str());
      return 2;
    }
    const tessera::config::DaemonConfig& c = *loaded;
    const tessera::config::DaemonConfig defaults;
    socket_path = c.socket;
    sim = sim || c.sim;
    ledger_name = c.ledger;
    allow_self_declared = c.allow_self_declared;
    context_overhead = c.context_overhead ? std::to_string(c.context_overhead->count()) : "measure";
    compute_options.defaults.policy = c.policy;
    compute_options.defaults.max_inst = c.max_inst;
    compute_options.defaults.prio_ratio = c.prio_ratio;
    compute_options.defaults.quota_min = c.quota_min;
    compute_options.defaults.quota_max = c.quota_max;
    default_memsize = c.default_memsize;
    http_listen = c.http;
    http_input = config_path + ": http";
    ctl_mount = c.ctl_mount;
    admin_group = c.admin_group;
    socket_limits = c.socket_limits;
    container_sockets = c.container_sockets;
    gpu_overrides = c.gpus;
    reconcile_interval = c.reconcile_interval;
    over_limit_action = c.over_limit_action;
    unattributed_action = c.unattributed_action;
    require_identity = c.require_identity;
    // Not applied: the file's key means "fail closed after", the gate's --daemon-loss-timeout
    // "run ungated after". Said once, never silently ignored.
    if (c.daemon_loss_timeout != defaults.daemon_loss_timeout) {
      std::fprintf(stderr,
                   "tesserad: note: %s: daemon_loss_timeout is not applied yet (captured "
                   "processes go ungated after --daemon-loss-timeout MS without the arbiter)\n",
                   config_path.c_str());
    }
    std::printf("tesserad: loaded config %s\n", config_path.c_str());
  }

  if (flags.socket) socket_path = *flags.socket;
  if (flags.ledger) ledger_name = *flags.ledger;
  if (flags.context_overhead) context_overhead = *flags.context_overhead;
  for (const auto& [flag, value, out] : {std::tuple{"--ctl-mount", &flags.ctl_mount, &ctl_mount},
                                         {"--admin-group", &flags.admin_group, &admin_group},
                                         {"--http", &flags.http, &http_listen}}) {
    if (!*value) continue;
    if ((*value)->empty()) return Usage(std::string(flag) + " needs a value");
    *out = **value;
  }
  if (flags.http) http_input = "--http";
  if (flags.container_sockets) {
    if (flags.container_sockets->empty() || (*flags.container_sockets)[0] != '/') {
      return Usage("--container-sockets \"" + *flags.container_sockets +
                   "\": expected an absolute directory");
    }
    container_sockets = *flags.container_sockets;
  }
  http_allow_write = http_allow_write || flags.http_allow_write;
  sim = sim || flags.sim;
  ephemeral = flags.ephemeral;
  // A node-wide flag overrides the config file's per-GPU value of that setting as well.
  auto& defaults = compute_options.defaults;
  if (flags.policy) {
    auto p = tessera::ParseArbiterPolicy(*flags.policy, "--policy");
    if (!p.ok()) return Usage(p.error());
    defaults.policy = *p;
    policy_given = true;
    for (auto& [gpu, o] : gpu_overrides) o.policy.reset();
  }
  mps = flags.mps;
  for (const auto& [flag, value, out] : {std::tuple{"--mps-control", &flags.mps_control, &mps_control},
                                         {"--mps-dir", &flags.mps_dir, &mps_dir}}) {
    if (!*value) continue;
    if ((*value)->empty() || (**value)[0] != '/') {
      return Usage(std::string(flag) + " \"" + **value + "\": expected an absolute path");
    }
    *out = **value;
  }
  if (flags.max_inst) {
    auto n = tessera::ParseUnsigned(*flags.max_inst, "--max-inst", 1, 256);
    if (!n.ok()) return Usage(n.error());
    defaults.max_inst = static_cast<int>(*n);
    for (auto& [gpu, o] : gpu_overrides) o.max_inst.reset();
  }
  if (flags.prio_ratio) {
    auto p = tessera::ParsePercent(*flags.prio_ratio, "--prio-ratio", 20, 99);
    if (!p.ok()) return Usage(p.error());
    defaults.prio_ratio = *p;
    for (auto& [gpu, o] : gpu_overrides) o.prio_ratio.reset();
  }
  // Milliseconds, fractions allowed (0.5 = 500 us).
  for (const auto& [flag, value] : {std::pair{"--quota-min", &flags.quota_min},
                                    {"--quota-max", &flags.quota_max},
                                    {"--daemon-loss-timeout", &flags.daemon_loss_timeout}}) {
    if (!*value) continue;
    const std::string& v = **value;
    char* end = nullptr;
    const double ms = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(ms > 0) || ms > 600000) {
      return Usage(std::string(flag) + " \"" + v +
                   "\": expected milliseconds, e.g. 2 or 0.5 (at most 600000)");
    }
    const auto ns = std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6));
    if (value == &flags.quota_min) defaults.quota_min = ns;
    if (value == &flags.quota_max) defaults.quota_max = ns;
    if (value == &flags.daemon_loss_timeout) {
      compute_options.loss_timeout_ns = static_cast<uint64_t>(ns.count());
    }
  }
  // One GPU's policy, overriding --policy and the config file: INDEX:POLICY, e.g. 1:5.
  for (const std::string& text : flags.gpu_policy) {
    const size_t colon = text.find(':');
    auto index = tessera::ParseUnsigned(text.substr(0, colon), "--gpu-policy GPU index", 0, 15);
    auto policy = colon == std::string::npos
                      ? tessera::Result<tessera::ArbiterPolicy>::Error("no \":\"")
                      : tessera::ParseArbiterPolicy(text.substr(colon + 1), "--gpu-policy");
    if (!index.ok() || !policy.ok()) {
      return Usage("--gpu-policy \"" + text + "\": expected GPU:POLICY, e.g. 1:5 (" +
                   (index.ok() ? policy.error() : index.error()) + ")");
    }
    gpu_policies.emplace_back(static_cast<int>(*index), *policy);
  }
  if (flags.reconcile_interval) {
    auto d = tessera::ParseDuration(*flags.reconcile_interval, "--reconcile-interval",
                                    std::chrono::milliseconds(100), std::chrono::seconds(10));
    if (!d.ok()) return Usage(d.error());
    reconcile_interval = *d;
  }
  if (flags.over_limit_action) {
    bool known = false;
    for (auto a : {tessera::config::OverLimitAction::kLog, tessera::config::OverLimitAction::kBlock,
                   tessera::config::OverLimitAction::kKill}) {
      if (*flags.over_limit_action == tessera::config::OverLimitActionName(a)) {
        over_limit_action = a;
        known = true;
      }
    }
    if (!known) {
      return Usage("--over-limit-action \"" + *flags.over_limit_action +
                   "\": expected log, block or kill");
    }
  }
  if (flags.unattributed_action) {
    bool known = false;
    for (auto a : {tessera::config::UnattributedAction::kReport,
                   tessera::config::UnattributedAction::kKill}) {
      if (*flags.unattributed_action == tessera::config::UnattributedActionName(a)) {
        unattributed_action = a;
        known = true;
      }
    }
    if (!known) {
      return Usage("--unattributed-action \"" + *flags.unattributed_action +
                   "\": expected report or kill");
    }
  }
  if (flags.require_identity) {
    auto parsed = tessera::ParseBoolFlag(*flags.require_identity, "--require-identity");
    if (!parsed.ok()) return Usage(parsed.error());
    require_identity = *parsed;
  }
  if (flags.allow_self_declared) {
    auto parsed = tessera::ParseBoolFlag(*flags.allow_self_declared, "--allow-self-declared");
    if (!parsed.ok()) return Usage(parsed.error());
    allow_self_declared = *parsed;
  }
  if (mps && !policy_given) {
    // MPS runs clients' kernels side by side; slicing GPU time would undo that. Memory isolation
    // stays (policy 5); an explicit --policy or --gpu-policy still wins.
    compute_options.defaults.policy = tessera::ArbiterPolicy::kNative;
  }
  for (const auto& [key, value] : flags.socket_limits) {
    if (!value) continue;
    std::string flag = "--" + key;
    for (char& c : flag) c = c == '_' ? '-' : c;
    auto parsed = tessera::config::ParseSocketLimit(key, *value, flag, &socket_limits);
    if (!parsed.ok()) return Usage(parsed.error());
  }
  if (tessera::Status s = tessera::config::CheckSocketLimits(socket_limits); !s.ok()) {
    return Usage(s.message());
  }
  std::optional<gid_t> admin_gid;
  if (!admin_group.empty()) {
    auto gid = LookUpGroup(admin_group, "--admin-group");
    if (!gid.ok()) return Usage(gid.error());
    admin_gid = *gid;
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
  auto compute = tessera::daemon::ComputeService::Create(*ledger, compute_options);
  if (!compute.ok()) return Usage(compute.error());
  tessera::daemon::Registry registry(
      std::move(*ledger),
      {allow_self_declared, context_bytes, socket_limits.container_max_processes}, compute->get());
  const int reclaimed = registry.ReclaimDeadProcesses();
  if (default_memsize.count() != 0) registry.SetDefaultLimit(default_memsize.count());
  // The config file's per-GPU settings (flags given on the command line already removed theirs).
  for (const auto& [gpu, o] : gpu_overrides) {
    if (gpu >= (*compute)->device_count()) {
      std::fprintf(stderr, "tesserad: note: %s: gpus.%d: this node has %d GPU(s); ignored\n",
                   config_path.c_str(), gpu, (*compute)->device_count());
      continue;
    }
    tessera::arbiter::ArbiterConfig config = (*compute)->Config(gpu);
    if (o.policy) config.policy = *o.policy;
    if (o.max_inst) config.max_inst = *o.max_inst;
    if (o.prio_ratio) config.prio_ratio = *o.prio_ratio;
    if (tessera::Status s = (*compute)->Configure(gpu, config); !s.ok()) {
      std::fprintf(stderr, "tesserad: %s: gpus.%d: %s\n", config_path.c_str(), gpu,
                   s.message().c_str());
      return 2;
    }
  }
  // --gpu-policy last: a flag wins over the config file.
  for (const auto& [index, policy] : gpu_policies) {
    if (index >= (*compute)->device_count()) {
      return Usage("--gpu-policy " + std::to_string(index) + ": this node has " +
                   std::to_string((*compute)->device_count()) + " GPU(s)");
    }
    auto config = (*compute)->Config(index);
    config.policy = policy;
    if (tessera::Status s = (*compute)->Configure(index, config); !s.ok()) {
      return Usage("--gpu-policy " + std::to_string(index) + ": " + s.message());
    }
  }

  std::unique_ptr<tessera::mps::MpsSupervisor> mps_supervisor;
  if (mps) {
    tessera::mps::MpsOptions options;
    options.control = mps_control;
    options.root = mps_dir;
    std::vector<tessera::mps::MpsGpu> gpus;
    for (size_t d = 0; d < devices->size(); ++d) {
      gpus.push_back({static_cast<int>(d), (*devices)[d].uuid});
    }
    auto started = tessera::mps::MpsSupervisor::Start(options, gpus);
    if (!started.ok()) {
      std::fprintf(stderr, "tesserad: --mps: %s\n", started.error().c_str());
      return 1;
    }
    mps_supervisor = std::move(*started);
  }

  const std::string version = std::string("tessera ") + TESSERA_VERSION;
  tessera::daemon::DaemonNodeControl node(&registry, compute->get(), version);
  const tessera::ctl::ControlTree tree(&node);
  auto listen_fd = tessera::ipc::Listen(socket_path);
  if (!listen_fd.ok()) {
    std::fprintf(stderr, "tesserad: %s\n", listen_fd.error().c_str());
    return 1;
  }
  std::unique_ptr<tessera::ctl::FuseMount> mount;
  if (!ctl_mount.empty()) {
    mkdir(ctl_mount.c_str(), 0755);  // one level, as systemd's RuntimeDirectory leaves it
    tessera::ctl::FuseMountOptions options;
    options.mount_point = ctl_mount;
    options.writer_group = admin_gid;
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "tesserad: ctl mount: %.*s\n", static_cast<int>(line.size()),
                   line.data());
    };
    auto mounted = tessera::ctl::FuseMount::Mount(tree, std::move(options));
    if (!mounted.ok()) {
      std::fprintf(stderr, "tesserad: --ctl-mount: %s\n", mounted.error().c_str());
      close(*listen_fd);
      unlink(socket_path.c_str());
      return 1;
    }
    mount = std::move(*mounted);
  }
  std::unique_ptr<tessera::http::HttpServer> http;
  if (!http_listen.empty()) {
    tessera::daemon::HttpDoor door;
    door.tree = &tree;
    door.state = [&registry] { return registry.StatusJson(); };
    door.metrics = [&registry, compute = compute->get(), version] {
      return tessera::daemon::RenderMetrics(registry, *compute, version);
    };
    door.allow_write = http_allow_write;
    auto created = tessera::http::HttpServer::Create(
        http_listen, http_input,
        [door](const tessera::http::Request& r) { return tessera::daemon::HandleHttp(r, door); });
    tessera::Status started = created.ok() ? (*created)->Start() : created.status();
    if (!started.ok()) {
      std::fprintf(stderr, "tesserad: %s\n", started.message().c_str());
      close(*listen_fd);
      unlink(socket_path.c_str());
      return 1;
    }
    http = std::move(*created);
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::printf(
      "tesserad: listening on %s, ledger /dev/shm%s, %zu device(s)%s, reclaimed %d, "
      "context overhead %llu bytes, policy %d max_inst %d, ctl mount %s, http writes %s, "
      "http=%s\n",
      socket_path.c_str(), ledger_name.c_str(), devices->size(), sim ? " (simulated)" : "",
      reclaimed, static_cast<unsigned long long>(context_bytes),
      static_cast<int>(compute_options.defaults.policy), compute_options.defaults.max_inst,
      mount ? mount->mount_point().c_str() : "off", http_allow_write ? "on" : "off",
      http ? http->address().c_str() : "off");
  std::fflush(stdout);
  (*compute)->Start();
  if (!container_sockets.empty()) {
    // Root's alone: a pod reaches its own folder through its bind mount, nobody else any.
    mkdir(container_sockets.c_str(), 0700);
    chmod(container_sockets.c_str(), 0700);
  }
  // Container identities (IDENTIFY), kept beside the container sockets over a restart.
  tessera::daemon::IdentityBook identities(
      "/proc", container_sockets.empty()
                   ? ""
                   : container_sockets + "/" + tessera::daemon::kIdentityStoreName);
  for (const std::string& line : identities.Load()) {
    std::fprintf(stderr, "tesserad: %s\n", line.c_str());
  }
  tessera::daemon::ReconcilerOptions reconcile;
  reconcile.busy = NvmlBusyLister();
  reconcile.measured = [&compute](int device) {
    return (*compute)->Config(device).policy != tessera::ArbiterPolicy::kNative;
  };
  reconcile.interval = reconcile_interval;
  reconcile.action = over_limit_action;
  reconcile.unattributed = unattributed_action;
  // Who a process on the GPU belongs to, when it never registered: its cgroup (identity.h).
  reconcile.container_of = [&identities](const std::set<int32_t>& pids) {
    return identities.ContainersOf(pids);
  };
  // tesserad's own (the MPS control daemons and their servers) are the node's, never a tenant's.
  reconcile.exempt = [](int32_t pid) { return tessera::daemon::DescendsFrom(pid, getpid()); };
  reconcile.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  tessera::daemon::Reconciler reconciler(&registry, (*compute)->device_count(), NvmlProcessLister(),
                                         reconcile);
  reconciler.Start();
  tessera::daemon::ServerOptions server_options;
  server_options.admins = {geteuid(), admin_gid};
  server_options.container_socket_dir = container_sockets;
  server_options.max_request_line = socket_limits.max_request_line.count();
  server_options.max_reply_backlog = socket_limits.max_reply_backlog.count();
  server_options.request_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(socket_limits.request_timeout);
  server_options.idle_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(socket_limits.idle_timeout);
  server_options.container_max_connections = socket_limits.container_max_connections;
  server_options.refusal_log_rate = socket_limits.refusal_log_rate;
  tessera::daemon::Server server(&registry, *listen_fd, &tree, server_options);
  server.set_identities(&identities, require_identity);
  std::printf(
      "tesserad: at most %zu connections (open-files limit %llu); per container %d "
      "connections and %d processes\n",
      server.max_connections(), static_cast<unsigned long long>(OpenFilesLimit()),
      server_options.container_max_connections, socket_limits.container_max_processes);
  std::fflush(stdout);
  // tessera run (and the device plugin) derive each GPU's MPS pipe directory from this root.
  if (mps_supervisor) server.set_container_reply_fields({{"mps_root", mps_dir}});
  tessera::Status run = server.Run(g_stop);
  if (mps_supervisor) mps_supervisor->Stop();
  if (http) http->Stop();
  if (mount) mount->Stop();
  reconciler.Stop();
  (*compute)->Stop();
  close(*listen_fd);
  unlink(socket_path.c_str());
  if (ephemeral) tessera::ledger::MemoryLedger::Remove(ledger_name);
  if (!run.ok()) {
    std::fprintf(stderr, "tesserad: %s\n", run.message().c_str());
    return 1;
  }
  return 0;
}
