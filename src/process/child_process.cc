// ChildProcess implementation: posix_spawn with pipes, poll-based bounded reads, SIGKILL on exit.
#include "process/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace tessera::process {

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& extra_env) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& kv : extra_env) {
    const std::string name = kv.substr(0, kv.find('='));
    for (auto& existing : env_strings) {
      if (existing.compare(0, name.size() + 1, name + "=") == 0) existing.clear();
    }
    env_strings.push_back(kv);
  }
  std::vector<char*> envp, args;
  for (auto& s : env_strings) {
    if (!s.empty()) envp.push_back(s.data());
  }
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data()) == 0) pid_ = pid;
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  stdin_fd_ = in[1];
  stdout_fd_ = out[0];
}

ChildProcess::~ChildProcess() {
  CloseStdin();
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

bool ChildProcess::ReadSome(std::chrono::steady_clock::time_point deadline) {
  if (stdout_fd_ < 0) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{stdout_fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char buf[4096];
  const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
  if (n <= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
    return false;
  }
  buffer_.append(buf, static_cast<size_t>(n));
  size_t nl;
  while ((nl = buffer_.find('\n')) != std::string::npos) {
    const std::string line = buffer_.substr(0, nl);
    buffer_.erase(0, nl + 1);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) values_[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return true;
}

std::optional<std::string> ChildProcess::WaitForKey(const std::string& key,
                                                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto it = values_.find(key);
    if (it != values_.end()) return it->second;
    if (!ReadSome(deadline)) {
      it = values_.find(key);
      if (it != values_.end()) return it->second;
      if (stdout_fd_ < 0 || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    }
  }
}

bool ChildProcess::WaitForValue(const std::string& key, const std::string& value,
                                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto says = [&] {
    auto it = values_.find(key);
    return it != values_.end() && it->second == value;
  };
  while (!says()) {
    if (!ReadSome(deadline) && !says() &&
        (stdout_fd_ < 0 || std::chrono::steady_clock::now() >= deadline)) {
      return false;
    }
  }
  return true;
}

void ChildProcess::DrainOutput(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (stdout_fd_ >= 0 && std::chrono::steady_clock::now() < deadline) ReadSome(deadline);
}

bool ChildProcess::WriteStdin(const std::string& text) {
  if (stdin_fd_ < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(stdin_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void ChildProcess::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0 && !exited_) kill(pid_, signal);
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  if (exited_) return status_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::string ExecutableDir() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ".";
  self[n] = '\0';
  const std::string path(self);
  return path.substr(0, path.rfind('/'));
}

std::string BuildDir() {
  const char* dir = std::getenv("TESSERA_BUILD_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  const std::string bin = ExecutableDir();
  return bin.substr(0, bin.rfind('/'));
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

std::pair<int, std::string> RunShell(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::vector<std::string> TenantEnv(std::vector<std::string> base, const std::string& socket,
                                   const std::string& container) {
  base.push_back("TESSERA_SOCKET=" + socket);
  base.push_back("TESSERA_REAL_LIBCUDA=" + BuildDir() + "/lib/libtessera-simgpu.so");
  if (!container.empty()) base.push_back("TESSERA_CONTAINER=" + container);
  return base;
}

}  // namespace tessera::process
