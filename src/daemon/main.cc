// tesserad: the node daemon. Discovers the GPUs through NVML (the real library, or simgpu with
// --sim / TESSERA_SIM_GPUS), creates or reopens the node's memory ledger, and serves the Unix
// socket: processes register, `tessera run` sets limits, `tessera smi` reads the state, and a
// process's memory is reclaimed the moment its connection closes. `tesserad --help` lists the
// flags; --config loads a YAML file (deploy/tesserad.yaml) that flags override.
//
// This file wires and runs: the command line, the environment and the config file become one
// validated DaemonSettings in src/config (daemon_settings.h); here the daemon's parts are built
// from it. The compute arbiter (daemon/compute.h) and the reconciler (daemon/reconciler.h) run on
// threads of their own beside the socket server's event loop; the control tree
// (docs/contracts.md) has three doors onto one DaemonNodeControl: the CTL verb on the socket, a
// FUSE mount (--ctl-mount) and HTTP /v1/ctl/ (--http), which also serves /v1/state and /metrics.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "config/daemon_settings.h"
#include "ctl/control_tree.h"
#include "ctl/fuse_mount.h"
#include "daemon/compute.h"
#include "daemon/http_door.h"
#include "daemon/identity.h"
#include "daemon/mig_recut.h"
#include "daemon/mps_gpus.h"
#include "daemon/node_control.h"
#include "daemon/nvml_node.h"
#include "daemon/reconciler.h"
#include "daemon/registry.h"
#include "daemon/server.h"
#include "daemon/settings_wiring.h"
#include "http/server.h"
#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"
#include "mps/mps.h"
#include "process/child_process.h"

namespace {

using tessera::config::DaemonSettings;
using tessera::daemon::ComputeService;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& problem, int status = 1) {
  std::fprintf(stderr, "tesserad: %s\n", problem.c_str());
  return status;
}

int Usage(const std::string& problem) { return Fail(problem + "\n(see tesserad --help)", 2); }

// Every connection is a descriptor: the soft open-files limit goes up to the hard one (systemd's
// LimitNOFILE sets both; a shell's soft 1024 would cap the daemon at a few hundred clients).
unsigned long long RaiseOpenFilesLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::config::DaemonFlags flags;
  const std::string version = std::string("tessera ") + TESSERA_VERSION;
  if (auto exit_status = tessera::config::ParseDaemonCommandLine(
          argc, argv, std::string("tesserad ") + TESSERA_VERSION, &flags)) {
    return *exit_status;
  }
  auto setup = tessera::config::ResolveDaemonSettings(flags, tessera::config::ProcessEnvironment());
  if (setup.loaded_config) std::printf("tesserad: loaded config %s\n", flags.config->c_str());
  std::fflush(stdout);
  if (!setup.settings.ok()) {
    return setup.usage_error ? Usage(setup.settings.error()) : Fail(setup.settings.error(), 2);
  }
  const DaemonSettings& s = *setup.settings;
  const tessera::config::DaemonConfig& n = s.node;
  const unsigned long long open_files = RaiseOpenFilesLimit();

  std::string nvml =
      n.sim ? tessera::process::ExecutableDir() + "/../lib/libtessera-simgpu.so" : s.nvml_library;
  if (char resolved[PATH_MAX]; realpath(nvml.c_str(), resolved) != nullptr) nvml = resolved;
  std::vector<std::string> notes;
  auto devices = tessera::daemon::DiscoverNvmlDevices(nvml, &notes);
  for (const std::string& note : notes) Fail(note);
  if (!devices.ok()) return Fail("cannot discover GPUs: " + devices.error());
  auto ledger = tessera::ledger::MemoryLedger::CreateOrOpen(n.ledger, *devices);
  if (!ledger.ok()) return Fail(ledger.error());
  // simgpu's contexts cost nothing by design; a real driver's are measured unless given.
  const uint64_t context_bytes =
      n.context_overhead ? n.context_overhead->count()
                         : (n.sim ? 0 : tessera::daemon::MeasureContextOverhead(s.cuda_library));
  auto created = ComputeService::Create(*ledger, tessera::daemon::ComputeOptionsFor(n));
  if (!created.ok()) return Usage(created.error());
  ComputeService& compute = **created;
  tessera::daemon::Registry registry(
      std::move(*ledger),
      {n.allow_self_declared, context_bytes, n.socket_limits.container_max_processes}, &compute);
  const int reclaimed = registry.ReclaimDeadProcesses();
  if (n.default_memsize.count() != 0) registry.SetDefaultLimit(n.default_memsize.count());
  for (int gpu : s.mps_gpus) {
    if (gpu >= static_cast<int>(devices->size())) {
      return Usage("--mps-gpus names GPU " + std::to_string(gpu) + "; this node has " +
                   std::to_string(devices->size()) + " GPU(s), indices 0-" +
                   std::to_string(static_cast<int>(devices->size()) - 1));
    }
  }
  tessera::daemon::GpuSetup gpus = tessera::daemon::ConfigureGpus(s, &compute);
  for (const std::string& note : gpus.notes) Fail(note);
  if (!gpus.status.ok()) {
    return gpus.usage_error ? Usage(gpus.status.message()) : Fail(gpus.status.message(), 2);
  }

  std::unique_ptr<tessera::mps::MpsSupervisor> mps;
  tessera::mps::MpsOptions mps_options;
  if (!s.mps_control.empty()) mps_options.control = s.mps_control;
  if (!s.mps_dir.empty()) mps_options.root = s.mps_dir;
  if (s.mps) {
    // One control daemon per MPS GPU: every GPU, those --mps-gpus names, or none yet (--mps-gpus
    // none); MPSGPUS changes the set later.
    std::vector<tessera::mps::MpsGpu> mps_gpus;
    for (size_t d = 0; d < devices->size() && !s.mps_none; ++d) {
      if (!s.mps_gpus.empty() && s.mps_gpus.count(static_cast<int>(d)) == 0) continue;
      mps_gpus.push_back({static_cast<int>(d), (*devices)[d].uuid});
    }
    auto started = tessera::mps::MpsSupervisor::Start(mps_options, mps_gpus);
    if (!started.ok()) return Fail("--mps: " + started.error());
    mps = std::move(*started);
  }
  tessera::daemon::MpsGpusContext mps_context;
  mps_context.devices = *devices;
  mps_context.registry = &registry;
  mps_context.compute = &compute;
  mps_context.supervisor = mps.get();
  mps_context.processes = tessera::daemon::NvmlProcessLister();
  mps_context.exempt = [](int32_t pid) { return tessera::daemon::DescendsFrom(pid, getpid()); };
  // A GPU that joins MPS gets policy 5 (MPS runs its clients' kernels side by side; slicing GPU
  // time would undo that) even where --policy set the node's: on a node of mixed modes that is
  // the other GPUs' policy. A GPU's own --gpu-policy is kept.
  mps_context.set_policy = true;
  for (const auto& [gpu, policy] : s.gpu_policies) mps_context.own_policy.insert(gpu);
  mps_context.policy_without_mps = s.policy_without_mps;
  tessera::daemon::MpsGpuSwitch mps_switch(std::move(mps_context));
  if (mps) registry.SetMpsGpus(mps_options.root, mps_switch.Running());

  tessera::daemon::DaemonNodeControl node(&registry, &compute, version);
  const tessera::ctl::ControlTree tree(&node);
  auto listen_fd = tessera::ipc::Listen(n.socket);
  if (!listen_fd.ok()) return Fail(listen_fd.error());
  auto give_up = [&](const std::string& problem) {
    close(*listen_fd);
    unlink(n.socket.c_str());
    return Fail(problem);
  };
  std::unique_ptr<tessera::ctl::FuseMount> mount;
  if (!n.ctl_mount.empty()) {
    mkdir(n.ctl_mount.c_str(), 0755);  // one level, as systemd's RuntimeDirectory leaves it
    tessera::ctl::FuseMountOptions options;
    options.mount_point = n.ctl_mount;
    options.writer_group = s.admin_gid;
    options.log = [](std::string_view line) {
      std::fprintf(stderr, "tesserad: ctl mount: %.*s\n", static_cast<int>(line.size()),
                   line.data());
    };
    auto mounted = tessera::ctl::FuseMount::Mount(tree, std::move(options));
    if (!mounted.ok()) return give_up("--ctl-mount: " + mounted.error());
    mount = std::move(*mounted);
  }
  std::unique_ptr<tessera::http::HttpServer> http;
  if (!n.http.empty()) {
    tessera::daemon::HttpDoor door;
    door.tree = &tree;
    door.state = [&registry] { return registry.StatusJson(); };
    door.metrics = [&registry, &compute, version] {
      return tessera::daemon::RenderMetrics(registry, compute, version);
    };
    door.allow_write = s.http_allow_write;
    auto server = tessera::http::HttpServer::Create(
        n.http, s.http_input,
        [door](const tessera::http::Request& r) { return tessera::daemon::HandleHttp(r, door); });
    tessera::Status started = server.ok() ? (*server)->Start() : server.status();
    if (!started.ok()) return give_up(started.message());
    http = std::move(*server);
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
      n.socket.c_str(), n.ledger.c_str(), devices->size(), n.sim ? " (simulated)" : "", reclaimed,
      static_cast<unsigned long long>(context_bytes), static_cast<int>(n.policy), n.max_inst,
      mount ? mount->mount_point().c_str() : "off", s.http_allow_write ? "on" : "off",
      http ? http->address().c_str() : "off");
  std::fflush(stdout);
  compute.Start();
  if (!n.container_sockets.empty()) {
    // Root's alone: a pod reaches its own folder through its bind mount, nobody else any.
    mkdir(n.container_sockets.c_str(), 0700);
    chmod(n.container_sockets.c_str(), 0700);
  }
  // Container identities (IDENTIFY), kept beside the container sockets over a restart.
  tessera::daemon::IdentityBook identities(
      "/proc", n.container_sockets.empty()
                   ? ""
                   : n.container_sockets + "/" + tessera::daemon::kIdentityStoreName);
  for (const std::string& line : identities.Load()) Fail(line);
  tessera::daemon::ReconcilerOptions reconcile = tessera::daemon::ReconcilerOptionsFor(n);
  reconcile.busy = tessera::daemon::NvmlBusyLister();
  reconcile.measured = [&compute](int device) {
    return compute.Config(device).policy != tessera::ArbiterPolicy::kNative;
  };
  // Who a process on the GPU belongs to, when it never registered: its cgroup (identity.h).
  reconcile.container_of = [&identities](const std::set<int32_t>& pids) {
    return identities.ContainersOf(pids);
  };
  // tesserad's own (the MPS control daemons and their servers) are the node's, never a tenant's.
  reconcile.exempt = [](int32_t pid) { return tessera::daemon::DescendsFrom(pid, getpid()); };
  reconcile.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  tessera::daemon::Reconciler reconciler(&registry, compute.device_count(),
                                         tessera::daemon::NvmlProcessLister(), reconcile);
  reconciler.Start();
  const tessera::config::SocketLimits& limits = n.socket_limits;
  tessera::daemon::Server server(&registry, *listen_fd, &tree,
                                 tessera::daemon::ServerOptionsFor(s, geteuid()));
  server.set_identities(&identities, n.require_identity);
  std::printf(
      "tesserad: at most %zu connections (open-files limit %llu); per container %d "
      "connections and %d processes\n",
      server.max_connections(), open_files, limits.container_max_connections,
      limits.container_max_processes);
  std::fflush(stdout);
  // tessera run (and the device plugin) derive each GPU's MPS pipe directory from this root.
  if (mps) server.set_container_reply_fields({{"mps_root", mps_options.root}});
  // MPSGPUS (mps_gpus.h): the device plugin starts and stops GPUs' MPS as their labels ask.
  if (mps) {
    server.set_mps_gpus_setter([&](const tessera::protocol::Message& request) {
      auto set = mps_switch.Apply(request);
      // A refusal is logged by the server (rate-limited), as every refused request is.
      if (set.ok()) {
        std::fprintf(stderr, "tesserad: MPSGPUS gpus=%s: %s\n", request.Get("gpus").c_str(),
                     tessera::protocol::FormatMessage(*set).c_str());
      }
      return set;
    });
  }
  // MIGCUT (mig_recut.h): a GPU cut again; tesserad restarts itself to manage its new devices.
  std::vector<tessera::ledger::DeviceInfo> recut_devices;
  server.set_mig_cutter([&](const tessera::protocol::Message& request) {
    tessera::daemon::MigCutContext context{nvml, *devices, &registry};
    auto cut = tessera::daemon::CutMigGpu(request, context, &recut_devices);
    std::fprintf(stderr, "tesserad: MIGCUT gpu=%s layout=%s: %s\n", request.Get("gpu").c_str(),
                 request.Get("layout").c_str(),
                 cut.ok() ? "cut; restarting to manage its MIG devices" : cut.error().c_str());
    return cut;
  });
  tessera::Status run = server.Run(g_stop);
  if (mps) mps->Stop();
  if (http) http->Stop();
  if (mount) mount->Stop();
  reconciler.Stop();
  compute.Stop();
  close(*listen_fd);
  unlink(n.socket.c_str());
  if (server.restart_requested() && !g_stop.load()) {
    registry.WithLedger([&](tessera::ledger::MemoryLedger& l) {
      l.RecordDevicesForRestart(recut_devices);
      return 0;
    });
    std::fflush(stdout);
    std::fflush(stderr);
    execv("/proc/self/exe", argv);
    return Fail(std::string("restarting after a MIG re-cut: ") + std::strerror(errno), 2);
  }
  if (s.ephemeral) tessera::ledger::MemoryLedger::Remove(n.ledger);
  return run.ok() ? 0 : Fail(run.message());
}
