// A container's kernel identity without a runtime (tests only): a cgroup of its own in a hierarchy
// this process may write, and a first process in it standing for the container's init, which is
// what a runtime gives every container and what tesserad identifies containers by. Processes
// started through Wrap() move themselves into the group before they exec, as runc's init does.
// The tests that need a real runtime's container use testing/support/podman.h instead.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "process/child_process.h"

namespace tessera::testing {

// A cgroup hierarchy this process may create groups in and move processes into (cgroup v1 pids,
// the v2 unified mount, or the v2 root); "" when there is none (no root, or a read-only
// /sys/fs/cgroup).
std::string WritableCgroupRoot();

class CgroupContainer {
 public:
  // Creates ROOT/tessera-test-<unique>-`name` and starts its init (sleep). Check ok().
  explicit CgroupContainer(const std::string& name);
  // Kills every process still in the group, then removes it.
  ~CgroupContainer();
  CgroupContainer(const CgroupContainer&) = delete;
  CgroupContainer& operator=(const CgroupContainer&) = delete;

  bool ok() const { return init_ != nullptr && init_->started(); }
  const std::string& path() const { return path_; }
  pid_t init_pid() const { return init_ ? init_->pid() : -1; }
  // `argv` run inside the group: /bin/sh joins it, then execs argv[0].
  std::vector<std::string> Wrap(const std::vector<std::string>& argv) const;

 private:
  std::string path_;
  std::unique_ptr<process::ChildProcess> init_;
};

}  // namespace tessera::testing
