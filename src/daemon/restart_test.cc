// Crash-only restart (issue 17, item 1): a real tesserad on simgpu comes back from any previous
// death. A SIGKILLed daemon leaves a dead FUSE mount at --ctl-mount and its socket file; the next
// daemon detaches the one and replaces the other. What it cannot take over it refuses with a
// message that names the input, what was found there and what to do: a ledger of another layout
// version, a --ctl-mount that is a regular file, a socket path held by something not a socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class RestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = UniqueName("restart");
    socket_ = "/tmp/" + state_ + ".sock";
    ledger_ = "/tessera-ledger-" + state_;
    mount_ = "/tmp/" + state_ + ".ctl";
    log_ = "/tmp/" + state_ + ".log";
  }
  void TearDown() override {
    Stop();
    umount2(mount_.c_str(), MNT_DETACH);
    rmdir(mount_.c_str());
    unlink(mount_.c_str());
    tessera::ledger::MemoryLedger::Remove(ledger_);
    shm_unlink(("/tessera-sim-" + state_).c_str());
    unlink(socket_.c_str());
    unlink(log_.c_str());
  }

  // tesserad with its stderr in log_ (appended across starts).
  void Start(const std::vector<std::string>& flags) {
    std::string cmd = "exec '" + BuildDir() + "/bin/tesserad' --sim --socket '" + socket_ +
                      "' --ledger '" + ledger_ + "'";
    for (const std::string& f : flags) cmd += " '" + f + "'";
    cmd += " 2>>'" + log_ + "'";
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", cmd},
        std::vector<std::string>{"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimR:8GiB:80"});
    ASSERT_TRUE(daemon_->started());
  }
  void Stop() {
    if (!daemon_) return;
    daemon_->Kill(SIGTERM);
    daemon_->Wait(10s);
    daemon_.reset();
  }
  void KillHard() {
    daemon_->Kill(SIGKILL);
    ASSERT_EQ(daemon_->Wait(10s), 128 + SIGKILL);
    daemon_.reset();
  }
  // The exit status of a daemon that must refuse to start (nullopt if it kept running).
  std::optional<int> Refused() {
    auto status = daemon_->Wait(20s);
    if (!status) daemon_->Kill(SIGKILL);
    daemon_.reset();
    return status;
  }
  bool Serving() { return tessera::ipc::WaitUntilListening(socket_, 30s); }

  std::string state_, socket_, ledger_, mount_, log_;
  std::unique_ptr<ChildProcess> daemon_;
};

TEST_F(RestartTest, ADeadControlTreeMountIsDetachedAndMountedAgain) {
  ASSERT_EQ(mkdir(mount_.c_str(), 0755), 0);
  Start({"--ctl-mount", mount_});
  ASSERT_TRUE(Serving()) << ReadFile(log_);
  for (int i = 0; i < 500 && ReadFile(mount_ + "/version").empty(); ++i) {
    std::this_thread::sleep_for(20ms);  // listening comes before the mount
  }
  if (ReadFile(mount_ + "/version").empty()) {
    GTEST_SKIP() << "tesserad could not mount FUSE here: " << ReadFile(log_);
  }
  KillHard();
  struct stat st {};
  ASSERT_NE(stat(mount_.c_str(), &st), 0);
  ASSERT_EQ(errno, ENOTCONN) << "a SIGKILLed daemon leaves a dead mount";

  Start({"--ctl-mount", mount_});
  ASSERT_TRUE(Serving()) << ReadFile(log_);
  // The daemon listens first and mounts after: wait for the tree to appear.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (ReadFile(mount_ + "/0/policy").empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(ReadFile(mount_ + "/0/policy").find('0'), std::string::npos) << ReadFile(log_);
  EXPECT_NE(ReadFile(log_).find("detached the dead mount a previous daemon left at " + mount_),
            std::string::npos)
      << ReadFile(log_);
}

TEST_F(RestartTest, ASocketFileADeadDaemonLeftIsReplaced) {
  Start({});
  ASSERT_TRUE(Serving());
  KillHard();
  struct stat st {};
  ASSERT_EQ(lstat(socket_.c_str(), &st), 0);
  ASSERT_TRUE(S_ISSOCK(st.st_mode)) << "the dead daemon's socket file is left";
  Start({});
  EXPECT_TRUE(Serving()) << ReadFile(log_);
  auto status = tessera::ipc::Call(socket_, "STATUS", nullptr, 5s);
  ASSERT_TRUE(status.ok()) << status.error();
  EXPECT_EQ(status->rfind("OK ", 0), 0u) << *status;
}

TEST_F(RestartTest, ALedgerOfAnotherLayoutVersionIsRefusedWithWhatToDo) {
  // What an older tesserad left: its magic, version 6 and a size of its own.
  const int fd = shm_open(ledger_.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  const uint32_t header[2] = {0x4c525354, 6};
  ASSERT_EQ(pwrite(fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  close(fd);
  Start({});
  EXPECT_EQ(Refused(), 1);
  const std::string log = ReadFile(log_);
  EXPECT_NE(log.find("/dev/shm" + ledger_ + " holds layout version 6"), std::string::npos) << log;
  EXPECT_NE(
      log.find("stop every GPU process of this node, then remove it (rm -f /dev/shm" + ledger_),
      std::string::npos)
      << log;
  // Nothing was taken over or removed: the old segment is still there, as it was.
  struct stat st {};
  const int again = shm_open(ledger_.c_str(), O_RDONLY, 0);
  ASSERT_GE(again, 0);
  ASSERT_EQ(fstat(again, &st), 0);
  close(again);
  EXPECT_EQ(st.st_size, 1 << 20);
}

TEST_F(RestartTest, AControlTreeMountThatIsAFileIsNamedInTheError) {
  { std::ofstream(mount_) << "not a directory\n"; }
  Start({"--ctl-mount", mount_});
  EXPECT_NE(Refused(), 0);
  const std::string log = ReadFile(log_);
  EXPECT_NE(log.find("not a directory: " + mount_ + " is a regular file"), std::string::npos)
      << log;
  EXPECT_EQ(ReadFile(mount_), "not a directory\n") << "the file is left alone";
}

TEST_F(RestartTest, ASocketPathHeldByAFileIsRefusedAndKept) {
  { std::ofstream(socket_) << "keep me\n"; }
  Start({});
  EXPECT_NE(Refused(), 0);
  const std::string log = ReadFile(log_);
  EXPECT_NE(log.find("cannot listen on " + socket_ + ": a regular file is there"),
            std::string::npos)
      << log;
  EXPECT_EQ(ReadFile(socket_), "keep me\n");
}

}  // namespace
