// MPS mode. The supervisor runs against a STAND-IN for nvidia-cuda-mps-control
// (mps_control_standin: it daemonises, keeps the pid file and records every start and command
// with its environment; it runs nothing on a GPU, since the real program needs an NVIDIA driver).
// Checked: one daemon per GPU started with its own directories and CUDA_VISIBLE_DEVICES, a killed
// daemon started again, `quit` on stop, failures named; and end to end, tesserad --mps with
// tessera run handing a container its MPS environment while the ledger still enforces its cap.
#include "mps/mps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace tessera::mps {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Exited: no such process, or a zombie its (init) parent has not reaped yet.
bool Gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() &&
         (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

std::string Standin() { return process::BuildDir() + "/tests/mps_control_standin"; }

TEST(MpsClientEnvironment, CarriesThePipeTheCoreShareAndTheMemory) {
  const MpsPaths paths = PathsFor("/run/tessera/mps", "GPU-1234");
  EXPECT_EQ(paths.pipe_dir, "/run/tessera/mps/GPU-1234/pipe");
  EXPECT_EQ(paths.log_dir, "/run/tessera/mps/GPU-1234/log");
  auto env = MpsClientEnvironment(paths, Percent::FromInt(30), Bytes(2 * kBytesPerGiB + 123));
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_EQ(*env,
            (std::vector<std::string>{"CUDA_MPS_PIPE_DIRECTORY=/run/tessera/mps/GPU-1234/pipe",
                                      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
                                      "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M"}));
  auto bare = MpsClientEnvironment(paths, std::nullopt, std::nullopt);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->size(), 1u);
  auto tiny = MpsClientEnvironment(paths, std::nullopt, Bytes(4096));
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(
      tiny.error(),
      "memory=\"4KiB\": MPS limits pinned device memory in whole MiB; expected at least 1MiB");
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = "/tmp/" + process::UniqueName("mps");
    options_.control = Standin();
    options_.root = root_;
    options_.check_interval = 100ms;
    options_.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_ += line + "\n";
    };
  }
  void TearDown() override {
    unsetenv("TESSERA_MPS_STANDIN_FAIL");
    std::filesystem::remove_all(root_);
  }
  std::string Log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  std::string ControlLog(const std::string& uuid) {
    return ReadFile(PathsFor(root_, uuid).log_dir + "/control.log");
  }

  std::string root_;
  MpsOptions options_;
  std::mutex mu_;
  std::string log_;
};

TEST_F(SupervisorTest, StartsOneDaemonPerGpuWithItsOwnDirectories) {
  auto s = MpsSupervisor::Start(options_, {{0, "GPU-aaaa"}, {1, "GPU-bbbb"}});
  ASSERT_TRUE(s.ok()) << s.error();
  for (size_t i = 0; i < 2; ++i) {
    const std::string uuid = i == 0 ? "GPU-aaaa" : "GPU-bbbb";
    const pid_t pid = (*s)->pid(i);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(kill(pid, 0), 0);
    const MpsPaths p = PathsFor(root_, uuid);
    EXPECT_EQ(ControlLog(uuid), "start pid=" + std::to_string(pid) + " CUDA_VISIBLE_DEVICES=" +
                                    uuid + " CUDA_MPS_PIPE_DIRECTORY=" + p.pipe_dir +
                                    " CUDA_MPS_LOG_DIRECTORY=" + p.log_dir + "\n");
    // Its /dev/shm is the GPU's own folder, not the host's (which holds tesserad's ledger).
    const std::string shared = "/tessera-mps-standin." + std::to_string(pid);
    EXPECT_EQ(access((p.shm_dir + shared).c_str(), F_OK), 0) << p.shm_dir + shared;
    EXPECT_NE(access(("/dev/shm" + shared).c_str(), F_OK), 0) << "it wrote the host's /dev/shm";
    EXPECT_THAT(Log(), HasSubstr("MPS control daemon for GPU " + std::to_string(i) + " (" + uuid +
                                 ") runs as pid " + std::to_string(pid)));
  }
  EXPECT_NE((*s)->pid(0), (*s)->pid(1));
  const pid_t first = (*s)->pid(0);
  (*s)->Stop();
  EXPECT_THAT(ControlLog("GPU-aaaa"),
              HasSubstr("command quit\nexit pid=" + std::to_string(first) + "\n"));
  EXPECT_TRUE(Gone(first)) << "the daemon is gone after Stop";
}

TEST_F(SupervisorTest, AKilledDaemonIsStartedAgain) {
  auto s = MpsSupervisor::Start(options_, {{0, "GPU-aaaa"}});
  ASSERT_TRUE(s.ok()) << s.error();
  const pid_t old = (*s)->pid(0);
  ASSERT_GT(old, 0);
  ASSERT_EQ(kill(old, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  pid_t now = 0;
  while (std::chrono::steady_clock::now() - killed < 10s) {
    now = (*s)->pid(0);
    if (now > 0 && now != old) break;
    std::this_thread::sleep_for(10ms);
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  std::printf("restarted after %lld ms (checks every 100 ms)\n",
              static_cast<long long>(took.count()));
  ASSERT_GT(now, 0);
  EXPECT_NE(now, old);
  EXPECT_EQ(kill(now, 0), 0);
  EXPECT_EQ((*s)->restarts(0), 1);
  EXPECT_LT(took, 5s);
  EXPECT_THAT(Log(), HasSubstr("MPS control daemon for GPU 0 (GPU-aaaa, pid " +
                               std::to_string(old) + ") is gone; starting another (restart 1)"));
  EXPECT_THAT(ControlLog("GPU-aaaa"), HasSubstr("start pid=" + std::to_string(now)));
}

TEST_F(SupervisorTest, FailuresAreNamed) {
  options_.control = "/nonexistent/nvidia-cuda-mps-control";
  auto missing = MpsSupervisor::Start(options_, {{0, "GPU-aaaa"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(),
            "--mps-control=\"/nonexistent/nvidia-cuda-mps-control\": not an executable file; "
            "expected the absolute path of nvidia-cuda-mps-control");
  options_.control = Standin();
  setenv("TESSERA_MPS_STANDIN_FAIL", "1", 1);
  auto failing = MpsSupervisor::Start(options_, {{3, "GPU-cccc"}});
  ASSERT_FALSE(failing.ok());
  EXPECT_THAT(failing.error(),
              HasSubstr("MPS for GPU 3 (GPU-cccc): `" + Standin() +
                        " -d` exited with status 1; see " + root_ + "/GPU-cccc/log/control.log"));
}

// ---- tesserad --mps and tessera run -------------------------------------------------------------

class MpsNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    state_ = process::UniqueName("mpsnode");
    root_ = "/tmp/" + state_ + "-mps";
    socket_ = "/tmp/" + state_ + ".sock";
    log_ = "/tmp/" + state_ + ".err";
    const std::string cmd = "exec '" + process::BuildDir() + "/bin/tesserad' --sim --ephemeral " +
                            "--socket '" + socket_ + "' --mps --mps-control '" + Standin() +
                            "' --mps-dir '" + root_ + "' 2>'" + log_ + "'";
    daemon_ = std::make_unique<process::ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", cmd}, Env());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(ipc::WaitUntilListening(socket_, 10s)) << "tesserad did not start:\n"
                                                       << ReadFile(log_);
  }
  void TearDown() override {
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(20s);
    }
    unlink(("/tmp/" + state_ + ".sim").c_str());
    unlink(log_.c_str());
    std::filesystem::remove_all(root_);
  }
  std::vector<std::string> Env() const {
    // Outside /dev/shm: the MPS clients' /dev/shm is their server's (mps::EnterServerShm), and
    // the simulated GPUs, like real ones, must be reachable from there too.
    return {"TESSERA_SIM_STATE=/tmp/" + state_ + ".sim", "TESSERA_SIM_GPUS=SimA:8GiB,SimB:8GiB"};
  }
  std::pair<int, std::string> Tessera(const std::string& args) const {
    std::string cmd;
    for (const std::string& e : Env()) cmd += e + " ";
    // tessera run preloads the shim; in the sanitizer build its ASan runtime then does not come
    // first in the commands it runs (env), so that check is off, as in shim_test.
    return process::RunShell(cmd + "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 " +
                             "TESSERA_SOCKET='" + socket_ + "' '" + process::BuildDir() +
                             "/bin/tessera' " + args + " 2>&1 </dev/null");
  }
  // GPU `i`'s UUID as tesserad reports it.
  std::string Uuid(int i) const {
    const auto [status, json] = Tessera("smi --json");
    size_t pos = 0;
    for (int k = 0; k <= i; ++k) pos = json.find("\"uuid\":\"", pos) + 8;
    return json.substr(pos, json.find('"', pos) - pos);
  }

  std::string state_, root_, socket_, log_;
  std::unique_ptr<process::ChildProcess> daemon_;
};

TEST_F(MpsNodeTest, TesseradRunsADaemonPerGpuAndTesseraRunGivesTheContainerItsLimits) {
  const std::string uuid1 = Uuid(1);
  ASSERT_EQ(uuid1.rfind("GPU-", 0), 0u) << uuid1;
  const MpsPaths p1 = PathsFor(root_, uuid1);
  EXPECT_THAT(
      ReadFile(p1.log_dir + "/control.log"),
      HasSubstr("CUDA_VISIBLE_DEVICES=" + uuid1 + " CUDA_MPS_PIPE_DIRECTORY=" + p1.pipe_dir));
  // The GPUs run policy 5 (memory isolation only) unless told otherwise: MPS shares the SMs.
  const auto [smi_status, table] = Tessera("smi");
  EXPECT_THAT(table, HasSubstr("5 native"));

  const auto [status, env] = Tessera("run --sim --core 30 --mem 2GiB --devices 1 -- env");
  ASSERT_EQ(status, 0) << env;
  EXPECT_THAT(env, HasSubstr("CUDA_MPS_PIPE_DIRECTORY=" + p1.pipe_dir + "\n"));
  EXPECT_THAT(env, HasSubstr("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\n"));
  EXPECT_THAT(env, HasSubstr("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M\n"));

  // The command meets its GPU's server in the server's /dev/shm (the stand-in keeps a file there),
  // not in the host's, where tesserad's ledger is.
  const auto [shm_status, shm] = Tessera(
      "run --sim --devices 1 -- sh -c 'ls /dev/shm; echo ledgers=$(ls /dev/shm | grep -c "
      "tessera-ledger)'");
  ASSERT_EQ(shm_status, 0) << shm;
  EXPECT_THAT(shm, HasSubstr("tessera-mps-standin."));
  EXPECT_THAT(shm, HasSubstr("ledgers=0\n"));

  const auto [refused, why] = Tessera("run --sim --devices 0,1 -- true");
  EXPECT_EQ(refused, 2);
  EXPECT_THAT(why, HasSubstr("--devices=\"0,1\": an MPS node gives a container one GPU"));

  // The ledger keeps enforcing on top of MPS: the container stops at its cap.
  const auto [run_status, out] =
      Tessera("run --sim --mem 1GiB --devices 0 -- '" + process::BuildDir() +
              "/tests/shim_tenant' alloc-until-oom 64");
  EXPECT_EQ(run_status, 0) << out;
  EXPECT_THAT(out, HasSubstr("allocated=1073741824\nfailure=2\n"));
}

TEST_F(MpsNodeTest, TesseradStartsADeadControlDaemonAgainAndQuitsThemOnStop) {
  const std::string uuid0 = Uuid(0);
  const MpsPaths p0 = PathsFor(root_, uuid0);
  const std::string pid_file = p0.pipe_dir + "/" + kPidFileName;
  const pid_t old = std::stoi(ReadFile(pid_file));
  ASSERT_EQ(kill(old, SIGKILL), 0);
  // tesserad checks every second; allow for a loaded machine.
  const auto killed = std::chrono::steady_clock::now();
  bool restarted = false;
  while (!restarted && std::chrono::steady_clock::now() - killed < 15s) {
    std::this_thread::sleep_for(50ms);
    const std::string text = ReadFile(pid_file);
    restarted = !text.empty() && std::stoi(text) != old && kill(std::stoi(text), 0) == 0;
  }
  ASSERT_TRUE(restarted) << ReadFile(log_);
  EXPECT_THAT(ReadFile(log_), HasSubstr("(" + uuid0 + ", pid " + std::to_string(old) +
                                        ") is gone; starting another (restart 1)"));
  const pid_t now = std::stoi(ReadFile(pid_file));
  daemon_->Kill(SIGTERM);
  EXPECT_EQ(daemon_->Wait(20s), 0);
  daemon_.reset();
  EXPECT_THAT(ReadFile(p0.log_dir + "/control.log"),
              HasSubstr("command quit\nexit pid=" + std::to_string(now) + "\n"));
}

}  // namespace
}  // namespace tessera::mps
