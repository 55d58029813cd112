// CgroupContainer: a cgroup and an init process per test container.
#include "testing/support/cgroup_container.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace tessera::testing {

std::string WritableCgroupRoot() {
  for (const char* root : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    const std::string probe = std::string(root) + "/tessera-probe-" + std::to_string(getpid());
    if (mkdir(probe.c_str(), 0755) != 0) continue;
    struct stat st {};
    const bool cgroup = stat((probe + "/cgroup.procs").c_str(), &st) == 0;
    rmdir(probe.c_str());
    if (cgroup) return root;
  }
  return "";
}

CgroupContainer::CgroupContainer(const std::string& name) {
  const std::string root = WritableCgroupRoot();
  if (root.empty()) return;
  path_ = root + "/" + process::UniqueName("tessera-test") + "-" + name;
  if (mkdir(path_.c_str(), 0755) != 0) {
    path_.clear();
    return;
  }
  init_ = std::make_unique<process::ChildProcess>(Wrap({"/bin/sleep", "600"}),
                                                  std::vector<std::string>{});
  // The init is in the group once its shell has written itself there and exec'd sleep.
  for (int i = 0; i < 200; ++i) {
    std::ifstream procs(path_ + "/cgroup.procs");
    pid_t pid = 0;
    while (procs >> pid) {
      if (pid == init_->pid()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

CgroupContainer::~CgroupContainer() {
  if (path_.empty()) return;
  for (int round = 0; round < 100; ++round) {
    std::ifstream procs(path_ + "/cgroup.procs");
    pid_t pid = 0;
    bool any = false;
    while (procs >> pid) {
      kill(pid, SIGKILL);
      any = true;
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  init_.reset();
  rmdir(path_.c_str());
}

std::vector<std::string> CgroupContainer::Wrap(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"/bin/sh", "-c",
                                  "echo $$ > '" + path_ + "/cgroup.procs' && exec \"$@\"", "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace tessera::testing
