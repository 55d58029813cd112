// MPS mode: client environment and the per-GPU control daemon supervisor (see mps.h). The only
// processes started are CONTROL -d and CONTROL reading `quit`; nothing else is touched.
#include "mps/mps.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace tessera::mps {
namespace {

using namespace std::chrono_literals;

// Alive and not a zombie.
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ||
         (line[close + 2] != 'Z' && line[close + 2] != 'X');
}

Status MakeDirs(const std::string& path) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::Error("cannot create " + partial + ": " + std::strerror(errno));
    }
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::Error(path + " is not a directory");
  }
  return Status::Ok();
}

// The pid in PIPE/nvidia-cuda-mps-control.pid, or 0.
pid_t ReadPidFile(const std::string& pipe_dir) {
  std::ifstream in(pipe_dir + "/" + kPidFileName);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

// RunControl's child could not be given the MPS /dev/shm (EnterServerShm failed).
constexpr int kNoShmOfItsOwn = 125;

// Runs CONTROL (with `arg` when not empty) in `paths`' environment for GPU `uuid`, feeding
// `input` on stdin; waits up to `timeout` for it to exit. Its exit status, or -1 on timeout
// (then killed) or when it could not run.
int RunControl(const std::string& control, const std::string& arg, const std::string& uuid,
               const MpsPaths& paths, const std::string& input, std::chrono::milliseconds timeout) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  if (child == 0) {
    if (!paths.shm_dir.empty() && EnterServerShm(paths.shm_dir.c_str()) != 0) _exit(kNoShmOfItsOwn);
    dup2(in[0], 0);
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, 1);  // its chatter is in its log directory
    setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
    setenv("CUDA_MPS_PIPE_DIRECTORY", paths.pipe_dir.c_str(), 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", paths.log_dir.c_str(), 1);
    const char* argv[] = {control.c_str(), arg.empty() ? nullptr : arg.c_str(), nullptr};
    execv(control.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  close(in[0]);
  if (!input.empty() && write(in[1], input.data(), input.size()) < 0) {
    // A control program that does not read its input still gets its exit status waited for.
  }
  close(in[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) break;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Status CheckControl(const std::string& control) {
  struct stat st {};
  if (control.empty() || control[0] != '/' || stat(control.c_str(), &st) != 0 ||
      !S_ISREG(st.st_mode) || access(control.c_str(), X_OK) != 0) {
    return Status::Error("--mps-control=\"" + control +
                         "\": not an executable file; expected the absolute path of "
                         "nvidia-cuda-mps-control");
  }
  return Status::Ok();
}

}  // namespace

MpsPaths PathsFor(const std::string& root, const std::string& gpu_uuid) {
  const std::string base = root + "/" + gpu_uuid;
  return {base + "/pipe", base + "/log", base + "/shm"};
}

int EnterServerShm(const char* shm_dir) {
  if (unshare(CLONE_NEWNS) != 0) return errno;
  // Nothing mounted here reaches the namespace it came from (nor the host's /dev/shm).
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
  if (mount(shm_dir, "/dev/shm", nullptr, MS_BIND, nullptr) != 0) return errno;
  return 0;
}

Result<std::vector<std::string>> MpsClientEnvironment(const MpsPaths& paths,
                                                      std::optional<Percent> core,
                                                      std::optional<Bytes> memory) {
  std::vector<std::string> env = {"CUDA_MPS_PIPE_DIRECTORY=" + paths.pipe_dir};
  if (core) {
    if (core->value() < 1) {
      return Result<std::vector<std::string>>::Error(
          "core=\"0\": MPS gives a client at least 1 percent of the SMs; expected 1 to 100");
    }
    env.push_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + std::to_string(core->value()));
  }
  if (memory) {
    const uint64_t mib = memory->count() / kBytesPerMiB;
    if (mib == 0) {
      return Result<std::vector<std::string>>::Error(
          "memory=\"" + FormatBytes(*memory) +
          "\": MPS limits pinned device memory in whole MiB; expected at least 1MiB");
    }
    env.push_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + std::to_string(mib) + "M");
  }
  return env;
}

Result<std::unique_ptr<MpsSupervisor>> MpsSupervisor::Start(MpsOptions options,
                                                            std::vector<MpsGpu> gpus) {
  using Out = Result<std::unique_ptr<MpsSupervisor>>;
  // With no GPU yet the program is checked when one is added: a node that runs no MPS needs none.
  if (Status checked = CheckControl(options.control); !gpus.empty() && !checked.ok()) {
    return Out::Error(checked.message());
  }
  std::unique_ptr<MpsSupervisor> s(new MpsSupervisor(std::move(options)));
  for (const MpsGpu& gpu : gpus) {
    if (Status st2 = s->Add(gpu); !st2.ok()) {
      s->Stop();
      return st2;
    }
  }
  s->watcher_ = std::thread([p = s.get()] { p->Watch(); });
  return s;
}

Status MpsSupervisor::Add(const MpsGpu& gpu) {
  std::lock_guard<std::mutex> walk(walk_mu_);
  if (stop_.load()) return Status::Error("MPS for GPU " + std::to_string(gpu.index) + ": stopped");
  if (Status checked = CheckControl(options_.control); !checked.ok()) return checked;
  for (const auto& d : daemons_) {
    if (d->gpu.index == gpu.index) return Status::Ok();
  }
  auto d = std::make_unique<Daemon>();
  d->gpu = gpu;
  d->paths = PathsFor(options_.root, gpu.uuid);
  if (Status st = Launch(*d); !st.ok()) return st;
  Log("MPS control daemon for GPU " + std::to_string(d->gpu.index) + " (" + d->gpu.uuid +
      ") runs as pid " + std::to_string(d->pid) +
      "; clients use CUDA_MPS_PIPE_DIRECTORY=" + d->paths.pipe_dir);
  std::lock_guard<std::mutex> lock(mu_);
  daemons_.push_back(std::move(d));
  return Status::Ok();
}

bool MpsSupervisor::Remove(int index) {
  std::lock_guard<std::mutex> walk(walk_mu_);
  for (auto it = daemons_.begin(); it != daemons_.end(); ++it) {
    if ((*it)->gpu.index != index) continue;
    Quit(**it);
    Log("MPS control daemon for GPU " + std::to_string(index) + " (" + (*it)->gpu.uuid +
        ") stopped; the GPU runs no MPS");
    std::lock_guard<std::mutex> lock(mu_);
    daemons_.erase(it);
    return true;
  }
  return false;
}

std::vector<MpsGpu> MpsSupervisor::Gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<MpsGpu> out;
  for (const auto& d : daemons_) out.push_back(d->gpu);
  return out;
}

MpsSupervisor::~MpsSupervisor() { Stop(); }

void MpsSupervisor::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "tesserad: %s\n", line.c_str());
  }
}

Status MpsSupervisor::Launch(Daemon& d) {
  const std::string what = "GPU " + std::to_string(d.gpu.index) + " (" + d.gpu.uuid + ")";
  for (const std::string& dir : {d.paths.pipe_dir, d.paths.log_dir, d.paths.shm_dir}) {
    if (Status s = MakeDirs(dir); !s.ok())
      return Status::Error("MPS for " + what + ": " + s.message());
  }
  chmod(d.paths.shm_dir.c_str(), 01777);  // like /dev/shm: clients of any user create there
  unlink((d.paths.pipe_dir + "/" + kPidFileName).c_str());  // a dead daemon's
  const int status =
      RunControl(options_.control, "-d", d.gpu.uuid, d.paths, "", options_.start_timeout);
  if (status == kNoShmOfItsOwn) {
    return Status::Error("MPS for " + what + ": cannot give `" + options_.control +
                         "` a /dev/shm of its own (" + d.paths.shm_dir +
                         " on /dev/shm in a mount namespace of its own; tesserad needs "
                         "CAP_SYS_ADMIN for that, as root or a privileged container has)");
  }
  if (status != 0) {
    return Status::Error("MPS for " + what + ": `" + options_.control + " -d` " +
                         (status < 0 ? std::string("did not finish or could not run")
                                     : "exited with status " + std::to_string(status)) +
                         "; see " + d.paths.log_dir + "/control.log");
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  for (;;) {
    const pid_t pid = ReadPidFile(d.paths.pipe_dir);
    if (pid > 0 && Alive(pid)) {
      std::lock_guard<std::mutex> lock(mu_);
      d.pid = pid;
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Error("MPS for " + what + ": `" + options_.control +
                           " -d` left no live pid in " + d.paths.pipe_dir + "/" + kPidFileName +
                           " within " + std::to_string(options_.start_timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(10ms);
  }
}

void MpsSupervisor::Watch() {
  while (!stop_.load()) {
    std::unique_lock<std::mutex> walk(walk_mu_);
    for (size_t i = 0; i < daemons_.size() && !stop_.load(); ++i) {
      Daemon& d = *daemons_[i];
      pid_t pid;
      {
        std::lock_guard<std::mutex> lock(mu_);
        pid = d.pid;
      }
      if (pid > 0 && Alive(pid)) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now < d.next_try) continue;
      if (pid > 0) {
        Log("MPS control daemon for GPU " + std::to_string(d.gpu.index) + " (" + d.gpu.uuid +
            ", pid " + std::to_string(pid) + ") is gone; starting another (restart " +
            std::to_string(d.restarts + 1) + ")");
        std::lock_guard<std::mutex> lock(mu_);
        d.pid = 0;
        ++d.restarts;
      }
      if (Status s = Launch(d); !s.ok()) {
        // Try again later, waiting longer each time (up to 30 s) so a broken binary does not spin.
        d.backoff = std::min<std::chrono::milliseconds>(
            d.backoff.count() == 0 ? options_.check_interval : d.backoff * 2, 30s);
        d.next_try = std::chrono::steady_clock::now() + d.backoff;
        Log(s.message() + "; trying again in " + std::to_string(d.backoff.count()) + " ms");
      } else {
        d.backoff = 0ms;
        Log("MPS control daemon for GPU " + std::to_string(d.gpu.index) + " runs again as pid " +
            std::to_string(d.pid));
      }
    }
    walk.unlock();
    const auto until = std::chrono::steady_clock::now() + options_.check_interval;
    while (!stop_.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(
          std::min<std::chrono::milliseconds>(options_.check_interval, 20ms));
    }
  }
}

void MpsSupervisor::Stop() {
  if (stop_.exchange(true)) return;
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard<std::mutex> walk(walk_mu_);
  for (auto& d : daemons_) Quit(*d);
}

void MpsSupervisor::Quit(Daemon& d) {
  if (d.pid <= 0) return;
  RunControl(options_.control, "", d.gpu.uuid, d.paths, "quit\n", 10s);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (Alive(d.pid) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  if (Alive(d.pid)) {
    Log("MPS control daemon pid " + std::to_string(d.pid) + " did not quit; SIGKILL");
    kill(d.pid, SIGKILL);
  }
  std::lock_guard<std::mutex> lock(mu_);
  d.pid = 0;
}

pid_t MpsSupervisor::pid(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return i < daemons_.size() ? daemons_[i]->pid : 0;
}

int MpsSupervisor::restarts(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return i < daemons_.size() ? daemons_[i]->restarts : 0;
}

}  // namespace tessera::mps
