// MPS mode (docs/contracts.md `mps`): tesserad runs one NVIDIA MPS control daemon per GPU and gives
// each container the environment that makes its processes MPS clients of its GPU's server, with the
// container's share of SMs and its memory as MPS limits. Tessera's memory ledger keeps enforcing
// on top (the shim still charges every allocation), so a container's cap holds even where MPS's
// own limit is looser or unsupported.
//
// Why one control daemon per GPU: a fatal fault in one MPS client is reported to every client of
// that server and the server refuses new clients until they have all exited; with one server
// spanning GPUs that spreads to every GPU it serves (research notes §F.4). Per GPU, the blast
// radius is that GPU's clients. docs/architecture.md compares the fault scope of MPS with ours.
//
// Layout on disk, per GPU, under the MPS root (tesserad --mps-dir, default /run/tessera/mps):
//   ROOT/<GPU UUID>/pipe   CUDA_MPS_PIPE_DIRECTORY of the control daemon, its server, its clients
//   ROOT/<GPU UUID>/log    CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
// A container mounts its GPU's pipe directory and gets MpsClientEnvironment().
//
// MpsSupervisor starts `CONTROL -d` for each GPU (CONTROL: the nvidia-cuda-mps-control binary,
// configurable) with CUDA_VISIBLE_DEVICES=<UUID> and the two directories, learns the daemon's pid
// from PIPE/nvidia-cuda-mps-control.pid, checks it every interval and starts a new one when it is
// gone; Stop() sends `quit` to each through CONTROL, as an operator would. Add() and Remove() start
// and stop one GPU's daemon while the others run on (a GPU whose mode changes: docs/kubernetes.md,
// "A mode per GPU"). No Kubernetes, no JSON; processes and files only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::mps {

inline constexpr const char* kDefaultRoot = "/run/tessera/mps";
inline constexpr const char* kDefaultControl = "/usr/bin/nvidia-cuda-mps-control";
// The pid file the control daemon keeps in its pipe directory.
inline constexpr const char* kPidFileName = "nvidia-cuda-mps-control.pid";

struct MpsPaths {
  std::string pipe_dir;
  std::string log_dir;
  // The /dev/shm the GPU's MPS server and its clients share, in place of the host's (which holds
  // tesserad's ledger segments and every other process's shared memory: a client must not see
  // it). Empty: the caller's own /dev/shm.
  std::string shm_dir;
};

// ROOT/<uuid>/pipe, ROOT/<uuid>/log and ROOT/<uuid>/shm. ROOT should be on a tmpfs (the default,
// under /run, is).
MpsPaths PathsFor(const std::string& root, const std::string& gpu_uuid);

// In a child about to exec (the control daemon, or `tessera run`'s command): gives the calling
// process a mount namespace of its own, private below /, in which `shm_dir` is mounted on
// /dev/shm. Only system calls (safe between fork and exec). 0, or the errno of the step that
// failed (EPERM without CAP_SYS_ADMIN).
int EnterServerShm(const char* shm_dir);

// The environment of an MPS client of the GPU whose directories are `paths`:
//   CUDA_MPS_PIPE_DIRECTORY=<pipe dir>
//   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<core>      when a core share is given (1-100)
//   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M     when a memory limit is given: device 0 is the
//                                                 one GPU the client's MPS server exposes
// A memory limit under 1 MiB is refused (MPS takes whole MiB), naming the value.
Result<std::vector<std::string>> MpsClientEnvironment(const MpsPaths& paths,
                                                      std::optional<Percent> core,
                                                      std::optional<Bytes> memory);

struct MpsGpu {
  int index = 0;     // tesserad's device index, for messages
  std::string uuid;  // "GPU-..."
};

struct MpsOptions {
  std::string control = kDefaultControl;  // the nvidia-cuda-mps-control binary (absolute path)
  std::string root = kDefaultRoot;
  std::chrono::milliseconds check_interval{1000};
  std::chrono::milliseconds start_timeout{10000};  // for the pid file to appear
  std::function<void(const std::string&)> log;     // one line per event; stderr when empty
};

// One control daemon per GPU, kept running (see the file comment). Thread-safe.
class MpsSupervisor {
 public:
  // Creates the directories and starts every GPU's daemon (none at all is fine: Add() them later,
  // and CONTROL is checked then); fails (stopping those it started) when a directory cannot be
  // made, CONTROL is not an executable file, `CONTROL -d` fails, or no pid file appears within
  // start_timeout, naming the GPU and what was found.
  static Result<std::unique_ptr<MpsSupervisor>> Start(MpsOptions options, std::vector<MpsGpu> gpus);
  ~MpsSupervisor();
  MpsSupervisor(const MpsSupervisor&) = delete;
  MpsSupervisor& operator=(const MpsSupervisor&) = delete;

  // Sends `quit` to each daemon through CONTROL and waits for it to go (SIGKILL after 10 s).
  void Stop();

  // Starts the daemon of one more GPU (as Start does each), leaving the others alone; ok and
  // nothing done when the GPU has one already. Refused after Stop().
  Status Add(const MpsGpu& gpu);
  // Stops GPU `index`'s daemon (as Stop does each) and supervises it no more; the others run on.
  // False when the GPU had none.
  bool Remove(int index);
  // The GPUs supervised now, in the order they were started.
  std::vector<MpsGpu> Gpus() const;

  const MpsOptions& options() const { return options_; }
  // The daemon's pid for the `i`th GPU supervised (in the order started), 0 while none runs.
  pid_t pid(size_t i) const;
  // How many times the `i`th GPU's daemon was found dead and started again.
  int restarts(size_t i) const;

 private:
  struct Daemon {
    MpsGpu gpu;
    MpsPaths paths;
    pid_t pid = 0;
    int restarts = 0;
    std::chrono::steady_clock::time_point next_try{};
    std::chrono::milliseconds backoff{0};
  };
  explicit MpsSupervisor(MpsOptions options) : options_(std::move(options)) {}
  Status Launch(Daemon& d);  // runs CONTROL -d and waits for the pid file
  void Quit(Daemon& d);      // `quit` through CONTROL; SIGKILL after 10 s
  void Watch();              // the supervising thread
  void Log(const std::string& line) const;

  MpsOptions options_;
  // Held while the daemons are walked or their list changes (Watch, Add, Remove, Stop): a daemon
  // is never restarted while it is being removed.
  std::mutex walk_mu_;
  mutable std::mutex mu_;  // pids and restart counts; the list's shape, for pid() and Gpus()
  std::vector<std::unique_ptr<Daemon>> daemons_;
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace tessera::mps
