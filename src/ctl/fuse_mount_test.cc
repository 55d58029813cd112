// Tests of the control tree's FUSE door through the kernel: a real mount in a unique temporary
// directory, read and written with plain open/read/write syscalls, by `sh` in a child process, and
// by a child that dropped root. Skips with the reason only where FUSE cannot mount at all.
//
// Must not: leave a mount or directory behind on success, or share paths between test runs.
#include "ctl/fuse_mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "process/child_process.h"

namespace tessera::ctl {
namespace {

// The daemon's side for these tests: one GPU with two containers. Setters run on the FUSE
// thread while the test reads, hence the lock.
class TestNode : public NodeControl {
 public:
  TestNode() {
    state_.version = "tessera fuse-test";
    state_.default_memsize = GiB(2);
    GpuState gpu;
    gpu.index = 0;
    gpu.policy = ArbiterPolicy::kWeightedPreemptive;
    gpu.max_inst = 4;
    gpu.prio_ratio = *Percent::FromInt(50);
    gpu.free_weight = 1;
    gpu.memory_free = GiB(8);
    gpu.containers.push_back(ContainerState{"web", 2, false, GiB(4), GiB(1), {{42, GiB(1)}}});
    gpu.containers.push_back(ContainerState{"batch", 1, false, std::nullopt, Bytes(0), {}});
    state_.gpus.push_back(gpu);
  }

  NodeSnapshot Snapshot() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_;
  }
  Status SetDefaultMemsize(Bytes memsize) override {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.default_memsize = memsize;
    return Status::Ok();
  }
  Status SetPolicy(int /*gpu*/, ArbiterPolicy policy) override {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.gpus[0].policy = policy;
    return Status::Ok();
  }
  Status SetMaxInst(int /*gpu*/, int max_inst) override {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.gpus[0].free_weight += max_inst - state_.gpus[0].max_inst;
    state_.gpus[0].max_inst = max_inst;
    return Status::Ok();
  }
  Status SetPrioRatio(int /*gpu*/, Percent prio_ratio) override {
    std::lock_guard<std::mutex> lock(mutex_);
    state_.gpus[0].prio_ratio = prio_ratio;
    return Status::Ok();
  }
  Status SetWeight(int, std::string_view, int) override {
    return Status::Error("weights are not changed in this test");
  }
  Status SetMemsize(int /*gpu*/, std::string_view container, Bytes memsize, bool) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ContainerState& c : state_.gpus[0].containers) {
      if (c.id == container) {
        c.memsize = memsize;
      }
    }
    return Status::Ok();
  }
  Status SetHighPriority(int, std::string_view container, bool high_priority) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ContainerState& c : state_.gpus[0].containers) {
      if (c.id == container) {
        c.high_priority = high_priority;
      }
    }
    return Status::Ok();
  }

 private:
  mutable std::mutex mutex_;
  NodeSnapshot state_;
};

// Whether `dir` is a mount point now (listed in /proc/self/mountinfo).
bool IsMountPoint(const std::string& dir) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line;
  const std::string needle = " " + dir + " ";
  while (std::getline(mountinfo, line)) {
    if (line.find(needle) != std::string::npos) {
      return true;
    }
  }
  return false;
}

int OpenDescriptorCount() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) {
      ++count;
    }
    closedir(dir);
  }
  return count;
}

// Reads a whole file with open/read; on failure returns "" and sets *error to errno.
std::string ReadFile(const std::string& path, int* error = nullptr) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = errno;
    return "";
  }
  std::string text;
  char buffer[7];  // small on purpose: reads come in several pieces
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
    text.append(buffer, static_cast<size_t>(n));
  }
  if (n < 0 && error) *error = errno;
  close(fd);
  return text;
}

// Writes `text` in one write() as `echo` does (O_TRUNC); returns 0 or the errno of the failure.
int WriteFile(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  const ssize_t n = write(fd, text.data(), text.size());
  const int error = n < 0 ? errno : (static_cast<size_t>(n) == text.size() ? 0 : EIO);
  close(fd);
  return error;
}

// Runs `body` in a forked child as uid/gid 65534 with `groups` as its supplementary groups and
// returns its exit code (or -1 when it did not finish in 10 s: it is then killed).
template <typename Body>
int RunAsNobody(const std::vector<gid_t>& groups, Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
      _exit(100);
    }
    _exit(body());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `sh -c script` and returns its exit status (nullopt when it did not end in 10 s).
std::optional<int> Shell(const std::string& script) {
  process::ChildProcess child({"/bin/sh", "-c", script}, {});
  child.CloseStdin();
  return child.Wait(std::chrono::seconds(10));
}

class FuseMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseMount::Available()) {
      auto refused = FuseMount::Mount(ControlTree(&node_), FuseMountOptions{"/tmp", {}, {}, true});
      ASSERT_FALSE(refused.ok());
      EXPECT_NE(refused.error().find("libfuse3"), std::string::npos) << refused.error();
      GTEST_SKIP() << refused.error();
    }
    char pattern[] = "/tmp/tessera-ctl-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr) << std::strerror(errno);
    dir_ = pattern;
    chmod(dir_.c_str(), 0755);  // so that the child that drops root can reach the mount
  }
  void TearDown() override {
    mount_.reset();
    if (!dir_.empty()) {
      EXPECT_FALSE(IsMountPoint(dir_)) << dir_ << " is still mounted";
      rmdir(dir_.c_str());
    }
  }

  // Mounts the full tree at dir_, or skips the test with the reason when FUSE cannot mount here.
  void Mount(std::optional<gid_t> writer_group = std::nullopt) {
    MountTree(ControlTree(&node_), writer_group);
  }
  void MountTree(const ControlTree& tree, std::optional<gid_t> writer_group = std::nullopt) {
    FuseMountOptions options;
    options.mount_point = dir_;
    options.writer_group = writer_group;
    options.log = [this](std::string_view line) {
      std::lock_guard<std::mutex> lock(log_mutex_);
      log_.emplace_back(line);
    };
    auto mounted = FuseMount::Mount(tree, options);
    if (!mounted.ok() && access("/dev/fuse", R_OK | W_OK) != 0) {
      GTEST_SKIP() << "cannot mount FUSE here: " << mounted.error();
    }
    ASSERT_TRUE(mounted.ok()) << mounted.error();
    mount_ = std::move(mounted).value();
    ASSERT_TRUE(IsMountPoint(dir_));
  }
  std::vector<std::string> Log() {
    std::lock_guard<std::mutex> lock(log_mutex_);
    return log_;
  }
  std::string Path(const std::string& relative) const { return dir_ + "/" + relative; }

  TestNode node_;
  std::string dir_;
  std::unique_ptr<FuseMount> mount_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

TEST_F(FuseMountTest, FilesReadThroughTheKernel) {
  Mount();
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_EQ(ReadFile(Path("version")), "tessera fuse-test\n");
  EXPECT_EQ(ReadFile(Path("default_memsize")), "2147483648\n");
  EXPECT_EQ(ReadFile(Path("0/policy")), "2\n");
  EXPECT_EQ(ReadFile(Path("0/free_weight")), "1\n");
  EXPECT_EQ(ReadFile(Path("0/web/meminfo")), "Free: 3221225472\nPID: 42 Mem: 1073741824\n");
  EXPECT_EQ(ReadFile(Path("0/batch/memsize")), "unlimited\n");
  int error = 0;
  ReadFile(Path("0/nope"), &error);
  EXPECT_EQ(error, ENOENT);

  // `cat` in another process sees the same.
  process::ChildProcess cat({"/bin/sh", "-c", "echo policy=$(cat '" + Path("0/policy") + "')"}, {});
  EXPECT_EQ(cat.WaitForKey("policy", std::chrono::seconds(10)), std::optional<std::string>("2"));
  EXPECT_EQ(cat.Wait(std::chrono::seconds(10)), std::optional<int>(0));
}

TEST_F(FuseMountTest, FoldersListAndModesShowWhatIsWritable) {
  Mount();
  if (IsSkipped() || HasFatalFailure()) return;
  auto list = [](const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* entry = readdir(d)) {
        names.emplace_back(entry->d_name);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(list(dir_), (std::vector<std::string>{".", "..", "0", "default_memsize", "version"}));
  EXPECT_EQ(list(Path("0")), (std::vector<std::string>{".", "..", "batch", "free_weight",
                                                       "max_inst", "policy", "prio_ratio", "web"}));
  EXPECT_EQ(list(Path("0/web")), (std::vector<std::string>{".", "..", "highprio", "id", "meminfo",
                                                           "memsize", "weight"}));

  struct stat st;
  ASSERT_EQ(stat(Path("0").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0555u);
  ASSERT_EQ(stat(Path("0/policy").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  EXPECT_EQ(st.st_size, 2);  // "2\n"
  ASSERT_EQ(stat(Path("0/free_weight").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  ASSERT_EQ(stat(Path("0/web/meminfo").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  EXPECT_NE(stat(Path("0/ghost").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(FuseMountTest, WritesChangeTheNodeAndBadWritesFailWithEinval) {
  Mount();
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_EQ(WriteFile(Path("0/policy"), "4\n"), 0);
  EXPECT_EQ(node_.Snapshot().gpus[0].policy, ArbiterPolicy::kWeak);
  EXPECT_EQ(ReadFile(Path("0/policy")), "4\n");
  EXPECT_EQ(WriteFile(Path("0/web/memsize"), "3GiB"), 0);
  EXPECT_EQ(node_.Snapshot().gpus[0].containers[0].memsize, GiB(3));

  // From a shell in a child process, as an operator would.
  EXPECT_EQ(Shell("echo 2 > '" + Path("0/policy") + "'"), std::optional<int>(0));
  EXPECT_EQ(node_.Snapshot().gpus[0].policy, ArbiterPolicy::kWeightedPreemptive);

  // Refused writes: EINVAL, the reason in the log, nothing changed.
  const NodeSnapshot before = node_.Snapshot();
  EXPECT_EQ(WriteFile(Path("0/policy"), "7\n"), EINVAL);
  EXPECT_EQ(WriteFile(Path("0/prio_ratio"), "19"), EINVAL);
  EXPECT_EQ(WriteFile(Path("0/web/memsize"), "1MiB"), EINVAL);  // below its usage of 1GiB
  EXPECT_EQ(WriteFile(Path("0/web/highprio"), "2"), EINVAL);
  EXPECT_EQ(WriteFile(Path("0/max_inst"), std::string(4000, '9')), EINVAL);
  // coreutils' echo in a child process names the errno it got.
  process::ChildProcess echo({"/bin/sh", "-c",
                              "error=$(/bin/echo 3abc 2>&1 >'" + Path("0/policy") +
                                  "'); echo status=$?; echo error=$error"},
                             {});
  EXPECT_EQ(echo.WaitForKey("status", std::chrono::seconds(10)), std::optional<std::string>("1"));
  const std::optional<std::string> error = echo.WaitForKey("error", std::chrono::seconds(10));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("Invalid argument"), std::string::npos) << *error;
  EXPECT_EQ(node_.Snapshot(), before);
  const std::vector<std::string> log = Log();
  ASSERT_GE(log.size(), 6u);
  EXPECT_EQ(log[0].rfind("0/policy=\"7\\x0a\": unknown policy", 0), 0u) << log[0];
  EXPECT_NE(log[1].find("from 20 to 99"), std::string::npos) << log[1];
  EXPECT_NE(log[2].find("below what the container uses"), std::string::npos) << log[2];

  // Read-only files and new files cannot be opened for writing at all.
  EXPECT_EQ(WriteFile(Path("0/free_weight"), "3"), EACCES);
  EXPECT_EQ(WriteFile(Path("version"), "x"), EACCES);
  const int created = open(Path("0/new").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  EXPECT_LT(created, 0);
  if (created >= 0) close(created);
  EXPECT_EQ(node_.Snapshot(), before);
}

TEST_F(FuseMountTest, OnlyRootAndTheWriterGroupMayWrite) {
  const gid_t writers = 4242;
  Mount(writers);
  if (IsSkipped() || HasFatalFailure()) return;
  struct stat st;
  ASSERT_EQ(stat(Path("0/policy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0664u);
  EXPECT_EQ(st.st_gid, writers);

  const std::string policy = Path("0/policy");
  // Not in the group: may read, may not write.
  EXPECT_EQ(RunAsNobody({}, [&] { return ReadFile(policy) == "2\n" ? 0 : 1; }), 0);
  EXPECT_EQ(RunAsNobody({}, [&] { return WriteFile(policy, "1\n"); }), EACCES);
  EXPECT_EQ(node_.Snapshot().gpus[0].policy, ArbiterPolicy::kWeightedPreemptive);
  // In the group through a supplementary group: may write.
  EXPECT_EQ(RunAsNobody({writers}, [&] { return WriteFile(policy, "1\n"); }), 0);
  EXPECT_EQ(node_.Snapshot().gpus[0].policy, ArbiterPolicy::kPreemptive);
  bool logged = false;
  for (const std::string& line : Log()) {
    logged = logged || line.find("uid 65534 is neither root nor in") != std::string::npos;
  }
  EXPECT_TRUE(logged);
}

TEST_F(FuseMountTest, ScopedViewIsReadOnlyThroughTheKernel) {
  MountTree(ControlTree(&node_).ScopedTo("batch"));
  if (IsSkipped() || HasFatalFailure()) return;
  struct stat st;
  ASSERT_EQ(stat(Path("0/batch/memsize").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  EXPECT_EQ(ReadFile(Path("0/batch/id")), "batch\n");
  int error = 0;
  ReadFile(Path("0/web/id"), &error);
  EXPECT_EQ(error, ENOENT);
  ReadFile(Path("0/policy"), &error);
  EXPECT_EQ(error, ENOENT);
  EXPECT_EQ(WriteFile(Path("0/batch/memsize"), "1GiB"), EACCES);
  EXPECT_EQ(node_.Snapshot().gpus[0].containers[1].memsize, std::nullopt);
}

TEST_F(FuseMountTest, StopUnmountsAndReleasesEverything) {
  const int descriptors = OpenDescriptorCount();
  Mount();
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_EQ(ReadFile(Path("0/policy")), "2\n");
  mount_->Stop();
  EXPECT_FALSE(IsMountPoint(dir_));
  mount_->Stop();  // twice is fine
  mount_.reset();
  EXPECT_EQ(OpenDescriptorCount(), descriptors);

  // Destruction alone unmounts too.
  Mount();
  ASSERT_NE(mount_, nullptr);
  EXPECT_TRUE(IsMountPoint(dir_));
  mount_.reset();
  EXPECT_FALSE(IsMountPoint(dir_));
  EXPECT_EQ(OpenDescriptorCount(), descriptors);
}

TEST_F(FuseMountTest, StopDoesNotWaitForProcessesStillUsingTheMount) {
  Mount();
  if (IsSkipped() || HasFatalFailure()) return;
  const int held = open(Path("0/policy").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0) << std::strerror(errno);
  const auto start = std::chrono::steady_clock::now();
  mount_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(IsMountPoint(dir_));
  char buffer[8];
  EXPECT_LT(read(held, buffer, sizeof(buffer)), 0);  // the connection is gone
  close(held);
}

TEST(FuseMountErrorsTest, MountingAMissingDirectoryFailsClearly) {
  TestNode node;
  auto mounted = FuseMount::Mount(ControlTree(&node),
                                  FuseMountOptions{"/nonexistent/tessera-ctl", {}, {}, true});
  ASSERT_FALSE(mounted.ok());
  EXPECT_NE(mounted.error().find("/nonexistent/tessera-ctl"), std::string::npos) << mounted.error();
}

}  // namespace
}  // namespace tessera::ctl
