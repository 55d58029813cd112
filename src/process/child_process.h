// ChildProcess: spawn a real program, talk to it over pipes, and bound every wait. Used by the
// multi-process tests and by `tessera demo` to run its tenants; holds no policy of its own.
//
// The child gets a pipe on stdin (closing it is how tests say "you may exit now") and stdout
// captured line by line; stderr is inherited so failures show in the test log. Every wait takes a
// deadline; a child still running when the object is destroyed is killed with SIGKILL and reaped.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::process {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with argv and the current environment plus `extra_env` (NAME=VALUE).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }

  // Reads stdout until a line "key=..." appears; returns its value, or nullopt at EOF/timeout.
  std::optional<std::string> WaitForKey(const std::string& key, std::chrono::milliseconds timeout);
  // Reads stdout until the latest "key=..." line says `value`; false at EOF/timeout. (Values
  // printed and replaced within one read are not seen: for states that last, not blips.)
  bool WaitForValue(const std::string& key, const std::string& value,
                    std::chrono::milliseconds timeout);
  // Writes `text` to the child's stdin; false when it is closed or the write fails.
  bool WriteStdin(const std::string& text);
  // Closes the child's stdin.
  void CloseStdin();
  // Sends a signal.
  void Kill(int signal);
  // Waits for exit; returns the exit status (or 128+signal), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Everything the child printed so far, parsed as key=value lines.
  const std::map<std::string, std::string>& values() const { return values_; }
  // Reads the rest of stdout (until EOF or the timeout) into values().
  void DrainOutput(std::chrono::milliseconds timeout);

 private:
  bool ReadSome(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string buffer_;
  std::map<std::string, std::string> values_;
};

// The directory holding the running executable (for finding build/lib next to build/bin).
std::string ExecutableDir();
// The build tree (TESSERA_BUILD_DIR, set by CTest) or the directory two levels above this program.
std::string BuildDir();
// A name unique to this process and call, for TESSERA_SIM_STATE and socket paths.
std::string UniqueName(const std::string& prefix);
// Runs `command` with /bin/sh, waits for it, and returns its exit status (-1 when it did not exit
// normally or could not start) and everything it wrote to stdout (append 2>&1 for stderr too).
std::pair<int, std::string> RunShell(const std::string& command);
// `base` (a test's simgpu variables) plus what a tenant linked against the shim needs: the daemon's
// socket, simgpu as the real driver and, unless empty, its container.
std::vector<std::string> TenantEnv(std::vector<std::string> base, const std::string& socket,
                                   const std::string& container = "");

}  // namespace tessera::process
