// Podman for tests: real containers under podman + runc (tests only). What a container sees is
// decided by a real runtime here, not by a stand-in: its own root filesystem (an image made here,
// since no registry is reachable), its own /dev/shm, mount, PID, IPC and network namespaces, CDI
// devices resolved by podman from /etc/cdi and /var/run/cdi.
//
// Policy for a test that needs it (TESSERA_REQUIRE_PODMAN): when podman cannot run a container
// here the test FAILS with what is missing, unless TESSERA_SKIP_RUNTIME_TESTS=1 is set, which
// makes it skip with the same message. CI never sets it (scripts/dev installs podman, runc and
// busybox-static), so a runtime test cannot pass there by not running.
//
// Bounds and cleanup: every container has a unique name (tessera-test-<label>-<pid>-<n>), the
// label tessera.test.owner=<pid> and podman's --timeout (killed by conmon when it passes, even if
// the test process died). Container's destructor removes it (podman rm -f, bounded); the first use
// in a process removes containers whose owner process is gone (a test killed by CTest's timeout).
//
// Images: Image::Build puts busybox-static, the files asked for and every shared library they
// load (ldd, plus the dynamic loader) into a root filesystem under BuildDir()/podman/, imports it
// once as localhost/tessera-test-<name>-<build>:<hash of the files' identities>, and reuses it
// while the files are unchanged (any process, any test). Podman settings that work on these
// hosts (no systemd, cgroup v1 or hybrid) are in Podman::Args(); docs/kubernetes.md lists them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "process/child_process.h"

namespace tessera::podman {

// "" when podman + runc run a container here (checked once per process by running one), else
// what is missing and how to install it.
std::string Problem();
// Whether TESSERA_SKIP_RUNTIME_TESTS=1 asks runtime tests to skip instead of failing.
bool SkipRequested();

// In a gtest test body or SetUp(): fails the test (or skips it, see above) when podman cannot run.
#define TESSERA_REQUIRE_PODMAN()                                                      \
  do {                                                                                \
    const std::string tessera_podman_problem = ::tessera::podman::Problem();          \
    if (!tessera_podman_problem.empty()) {                                            \
      if (::tessera::podman::SkipRequested()) {                                       \
        GTEST_SKIP() << "TESSERA_SKIP_RUNTIME_TESTS=1: " << tessera_podman_problem;   \
      }                                                                               \
      FAIL() << tessera_podman_problem                                                \
             << " (set TESSERA_SKIP_RUNTIME_TESTS=1 to skip the real-runtime tests)"; \
    }                                                                                 \
  } while (0)

// The podman program and the arguments every call of the tests passes before its verb
// (--runtime runc --cgroup-manager cgroupfs --events-backend file).
std::vector<std::string> Command();
// `--ulimit` flags every `podman run` needs here: podman's default nofile (1048576) is above what
// a process without CAP_SYS_RESOURCE may set on these hosts, so the hard limits are asked for
// (nproc at most 32768, podman's own limit).
std::vector<std::string> Ulimits();
// Removes the containers of this harness whose owner process is gone (done once per process by
// Problem(); a test killed by CTest's timeout leaves its containers to the next run).
void RemoveOrphans();
// Runs `podman <args>` (Command() first), waits at most `timeout`; returns its exit status (-1 when
// it did not finish or could not start) and stdout+stderr.
std::pair<int, std::string> RunPodman(const std::vector<std::string>& args,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(60));

// What goes into a test image.
struct ImageContents {
  std::string name;  // short name, [a-z0-9-]
  // host file -> absolute path in the image (the file's shared libraries come along).
  std::vector<std::pair<std::string, std::string>> files;
  // Host files that will be mounted into containers of this image (the shims, simgpu): their
  // shared libraries go in, the files themselves do not.
  std::vector<std::string> libraries_of;
  // Sonames never copied (libcuda.so.1, libnvidia-ml.so.1: what a node mounts, not the image).
  std::vector<std::string> without = {"libcuda.so.1", "libnvidia-ml.so.1"};
};

class Image {
 public:
  // Builds the image or finds it already built (same files, same sizes and times); returns its
  // reference, e.g. localhost/tessera-test-tenants-1a2b3c4d:5e6f... . Serialised across processes.
  static Result<std::string> Build(const ImageContents& contents);
};

// How to run one container (`podman run`).
struct RunOptions {
  std::string image;
  std::vector<std::string> command;  // argv in the container; empty: the image has none: error
  std::vector<std::string> env;      // NAME=VALUE
  struct Volume {
    std::string host, container;
    std::string options;  // podman's: "ro", "rshared", "rslave", "ro,rslave", ...
  };
  std::vector<Volume> volumes;
  std::vector<std::string> devices;  // --device: CDI names (vendor/class=name) or host nodes
  bool privileged = false;
  std::string pid;                    // --pid (e.g. "host"); "" = its own
  std::string network;                // --network; "" = none
  std::string ipc;                    // --ipc; "" = podman's default (its own, private /dev/shm)
  std::vector<std::string> extra;     // any other `podman run` flags
  std::chrono::seconds timeout{120};  // --timeout: conmon kills it after this
};

// One running container, attached: its stdout is read as the ChildProcess's (key=value lines),
// its stdin is the ChildProcess's (podman run -i), its stderr is the test's.
class Container {
 public:
  // Starts `podman run --rm -i --name tessera-test-<label>-...`. Check started().
  Container(const std::string& label, const RunOptions& options);
  ~Container();  // podman rm -f (bounded), then the podman run process is reaped
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;

  const std::string& name() const { return name_; }
  bool started() const { return process_ && process_->started(); }
  process::ChildProcess& process() { return *process_; }
  // The container's first process as the host sees it, once runc started it; nullopt on timeout.
  std::optional<pid_t> HostPid(std::chrono::milliseconds timeout);
  // podman kill --signal SIGNAL.
  Status Kill(int signal);
  // Waits for the container to exit; its exit status (128+signal when killed), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // podman rm -f now (the destructor does it too).
  void Remove();

 private:
  std::string name_, pid_file_;
  std::unique_ptr<process::ChildProcess> process_;
  bool removed_ = false;
};

// Quotes `s` for /bin/sh.
std::string ShellQuote(const std::string& s);

}  // namespace tessera::podman
