// MPS mode. The supervisor runs against a STAND-IN for nvidia-cuda-mps-control
// (mps_control_standin: it daemonises, keeps the pid file and records every start and command
// with its environment; it runs nothing on a GPU, since the real program needs an NVIDIA driver).
// Checked: one daemon per GPU started with its own directories and CUDA_VISIBLE_DEVICES, a killed
// daemon started again, `quit` on stop, failures named; and end to end, tesserad --mps with
// tessera run handing a container its MPS environment while the ledger still enforces its cap.
#include "mps/mps.h"

#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace tessera::mps {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

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

// A GPU's daemon starts and stops while the others' run on, untouched (a GPU whose mode changes).
TEST_F(SupervisorTest, gpu_modes_AddAndRemoveLeaveTheOtherGpusAlone) {
  auto s = MpsSupervisor::Start(options_, {});
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_TRUE((*s)->Gpus().empty()) << "none at start is fine";
  ASSERT_TRUE((*s)->Add({0, "GPU-aaaa"}).ok());
  ASSERT_TRUE((*s)->Add({3, "GPU-dddd"}).ok());
  const pid_t zero = (*s)->pid(0), three = (*s)->pid(1);
  ASSERT_GT(zero, 0);
  ASSERT_GT(three, 0);
  EXPECT_TRUE((*s)->Add({0, "GPU-aaaa"}).ok());
  EXPECT_EQ((*s)->pid(0), zero) << "adding a GPU that runs one starts no second daemon";
  EXPECT_TRUE((*s)->Remove(0));
  EXPECT_FALSE((*s)->Remove(0)) << "it has none any more";
  EXPECT_THAT(ControlLog("GPU-aaaa"),
              HasSubstr("command quit\nexit pid=" + std::to_string(zero) + "\n"));
  EXPECT_TRUE(Gone(zero));
  ASSERT_EQ((*s)->Gpus().size(), 1u);
  EXPECT_EQ((*s)->Gpus()[0].index, 3);
  EXPECT_EQ((*s)->pid(0), three);
  EXPECT_EQ(kill(three, 0), 0) << "GPU 3's daemon runs on";
  EXPECT_THAT(ControlLog("GPU-dddd"), Not(HasSubstr("command")));
  // A removed GPU's daemon is not started again by the watcher; the others' are.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ((*s)->Gpus().size(), 1u);
  setenv("TESSERA_MPS_STANDIN_FAIL", "1", 1);
  auto failed = (*s)->Add({5, "GPU-ffff"});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(),
              HasSubstr("MPS for GPU 5 (GPU-ffff): `" + Standin() + " -d` exited with status 1"));
  EXPECT_EQ((*s)->Gpus().size(), 1u) << "a GPU whose daemon did not start is not supervised";
  (*s)->Stop();
  EXPECT_FALSE((*s)->Add({0, "GPU-aaaa"}).ok()) << "refused after Stop";
}

// ---- tesserad --mps and tessera run -------------------------------------------------------------

class MpsNodeTest : public ::testing::Test {
 protected:
  explicit MpsNodeTest(std::string mps_flags = "--mps") : mps_flags_(std::move(mps_flags)) {}
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    state_ = process::UniqueName("mpsnode");
    root_ = "/tmp/" + state_ + "-mps";
    socket_ = "/tmp/" + state_ + ".sock";
    log_ = "/tmp/" + state_ + ".err";
    const std::string cmd = "exec '" + process::BuildDir() + "/bin/tesserad' --sim --ephemeral " +
                            "--socket '" + socket_ + "' " + mps_flags_ + " --mps-control '" +
                            Standin() + "' --mps-dir '" + root_ + "' 2>'" + log_ + "'";
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

  std::string mps_flags_, state_, root_, socket_, log_;
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

// ---- MPSGPUS: tesserad's MPS GPUs changed while it runs ----------------------------------------

// tesserad --mps-gpus none: MPS allowed, on no GPU until MPSGPUS (the device plugin's) asks.
class MpsGpusNodeTest : public MpsNodeTest {
 protected:
  MpsGpusNodeTest() : MpsNodeTest("--mps-gpus none") {}
  std::string Call(const std::string& request) const {
    auto reply = ipc::Call(socket_, request, nullptr, 20s);
    return reply.ok() ? *reply : "unreachable: " + reply.error();
  }
  nlohmann::json Status() const {
    const std::string reply = Call("STATUS");
    return nlohmann::json::parse(reply.size() > 3 ? reply.substr(3) : "{}", nullptr, false);
  }
  bool PidFile(int gpu) const {
    return access((PathsFor(root_, Uuid(gpu)).pipe_dir + "/" + kPidFileName).c_str(), F_OK) == 0;
  }
};

TEST_F(MpsGpusNodeTest, gpu_modes_MpsGpusStartsAndStopsOneGpusControlDaemonAndSaysSoInStatus) {
  nlohmann::json st = Status();
  ASSERT_TRUE(st.is_object());
  EXPECT_EQ(st["mps_root"], root_) << "STATUS says tesserad can run MPS, and where";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(st["devices"][i]["mps"], false) << i;
    EXPECT_EQ(st["devices"][i]["policy"], 0) << i;
    EXPECT_FALSE(PidFile(i)) << "no GPU runs MPS before it is asked";
  }
  EXPECT_EQ(Call("MPSGPUS gpus=1"), "OK mps=1 started=1 stopped=none");
  EXPECT_TRUE(PidFile(1));
  EXPECT_FALSE(PidFile(0));
  st = Status();
  EXPECT_EQ(st["devices"][1]["mps"], true);
  EXPECT_EQ(st["devices"][1]["policy"], 5) << "MPS shares the SMs: policy 5 while it runs";
  EXPECT_EQ(st["devices"][0]["mps"], false);
  EXPECT_EQ(st["devices"][0]["policy"], 0);
  const pid_t one = std::stoi(ReadFile(PathsFor(root_, Uuid(1)).pipe_dir + "/" + kPidFileName));
  // tessera smi says which GPUs run MPS.
  const auto [smi_status, table] = Tessera("smi");
  EXPECT_EQ(smi_status, 0) << table;
  EXPECT_THAT(table, HasSubstr("MPS on GPUs 1"));
  // A container on GPU 1 is an MPS client of GPU 1's server.
  const auto [status, env] = Tessera("run --sim --core 30 --mem 1GiB --devices 1 -- env");
  ASSERT_EQ(status, 0) << env;
  EXPECT_THAT(env, HasSubstr("CUDA_MPS_PIPE_DIRECTORY=" + PathsFor(root_, Uuid(1)).pipe_dir));
  // The same set again changes nothing; the other way round moves both.
  EXPECT_EQ(Call("MPSGPUS gpus=1"), "OK mps=1 started=none stopped=none");
  EXPECT_EQ(Call("MPSGPUS gpus=0"), "OK mps=0 started=0 stopped=1");
  EXPECT_THAT(ReadFile(PathsFor(root_, Uuid(1)).log_dir + "/control.log"),
              HasSubstr("command quit\nexit pid=" + std::to_string(one) + "\n"));
  st = Status();
  EXPECT_EQ(st["devices"][1]["mps"], false);
  EXPECT_EQ(st["devices"][1]["policy"], 0) << "its policy back";
  EXPECT_EQ(st["devices"][0]["mps"], true);
  EXPECT_EQ(Call("MPSGPUS gpus=none"), "OK mps=none started=none stopped=0");
  EXPECT_THAT(ReadFile(log_),
              HasSubstr("tesserad: MPSGPUS gpus=none: OK mps=none started=none stopped=0"));
}

TEST_F(MpsGpusNodeTest, gpu_modes_MpsGpusRefusesBadListsByName) {
  const std::string ranges =
      "expected GPU indices 0-63 and ranges, comma-separated, e.g. 0-3 or "
      "0,2,5-7; or none";
  for (const auto& [request, why] : std::vector<std::pair<std::string, std::string>>{
           {"MPSGPUS gpus=1-",
            "ERR MPSGPUS gpus= \"1-\": \"1-\" is no GPU index or range; " + ranges},
           {"MPSGPUS gpus=3-1",
            "ERR MPSGPUS gpus= \"3-1\": \"3-1\" is no GPU index or range; " + ranges},
           {"MPSGPUS gpus=0,,1",
            "ERR MPSGPUS gpus= \"0,,1\": \"\" is no GPU index or range; " + ranges},
           {"MPSGPUS gpus=all",
            "ERR MPSGPUS gpus= \"all\": \"all\" is no GPU index or range; " + ranges},
           {"MPSGPUS gpus=99999999",
            "ERR MPSGPUS gpus= \"99999999\": \"99999999\" is no GPU "
            "index or range; " +
                ranges},
           {"MPSGPUS gpus=0-63",
            "ERR MPSGPUS gpus=\"0-63\": GPU 2 is not on this node; it has 2 "
            "GPU(s), indices 0-1"},
           {"MPSGPUS",
            "ERR MPSGPUS: gpus= missing; expected gpus=0-3,5 (device indices) or "
            "gpus=none"},
           {"MPSGPUS gpus=0 force=1", "ERR MPSGPUS force=1: unknown field; expected gpus=LIST"},
       }) {
    EXPECT_EQ(Call(request), why) << request;
  }
  EXPECT_FALSE(PidFile(0));
  EXPECT_FALSE(PidFile(1));
  EXPECT_EQ(Status()["devices"][0]["mps"], false) << "a refused request changed nothing";
}

// MPS does not start under tenants that are no MPS clients, nor stop under its clients; the
// reply names the GPU, the containers and their processes. The GPUs that can change do.
TEST_F(MpsGpusNodeTest, gpu_modes_MpsGpusRefusesToChangeAGpuWithTenantsNamingThem) {
  ASSERT_EQ(Call("MPSGPUS gpus=0").rfind("OK", 0), 0u);
  // As the device plugin registers them: a limit on the container's own GPU, 0 on the others. An
  // MPS client holds memory on GPU 0; a tenant that is no MPS client on GPU 1; a container with
  // nothing running yet is no tenant.
  ASSERT_EQ(Call("CONTAINER id=mps-client mem=1073741824,0").rfind("OK", 0), 0u);
  ASSERT_EQ(Call("CONTAINER id=plain mem=0,1073741824").rfind("OK", 0), 0u);
  ASSERT_EQ(Call("CONTAINER id=idle mem=0,1073741824").rfind("OK", 0), 0u);
  auto tenant = [&](const std::string& container) {
    std::vector<std::string> env = process::TenantEnv(Env(), socket_, container);
    env.push_back("TESSERA_REAL_NVML=" + process::BuildDir() + "/lib/libtessera-simgpu.so");
    const int gpu = container == "mps-client" ? 0 : 1;
    env.push_back("TESSERA_VISIBLE_DEVICES=" + Uuid(gpu));
    if (gpu == 0) env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + PathsFor(root_, Uuid(0)).pipe_dir);
    auto child = std::make_unique<process::ChildProcess>(
        std::vector<std::string>{process::BuildDir() + "/tests/shim_tenant", "hold", "1048576"},
        env);
    EXPECT_TRUE(child->WaitForKey("ready", 30s).has_value()) << container;
    return child;
  };
  auto client = tenant("mps-client");
  auto plain = tenant("plain");
  const std::string reply = Call("MPSGPUS gpus=1");
  EXPECT_EQ(reply, "ERR MPSGPUS gpus=1: GPU 0 (" + Uuid(0) +
                       ") does not stop MPS under its MPS clients: containers mps-client (pids " +
                       std::to_string(client->pid()) + "); GPU 1 (" + Uuid(1) +
                       ") does not start MPS under tenants that are no MPS clients: containers "
                       "plain (pids " +
                       std::to_string(plain->pid()) + "); MPS runs on GPUs 0 now");
  EXPECT_TRUE(PidFile(0)) << "GPU 0's daemon runs on under its client";
  EXPECT_FALSE(PidFile(1));
  // Only what can change does: GPU 0 stays, GPU 1 is left as it is when asked alone.
  EXPECT_THAT(Call("MPSGPUS gpus=0,1"), HasSubstr("containers plain"));
  EXPECT_TRUE(PidFile(0));
  // Gone, both: the GPUs change.
  client->Kill(SIGKILL);
  plain->Kill(SIGKILL);
  client->Wait(10s);
  plain->Wait(10s);
  const auto freed = std::chrono::steady_clock::now();
  std::string now;
  while (std::chrono::steady_clock::now() - freed < 10s) {
    now = Call("MPSGPUS gpus=1");
    if (now.rfind("OK", 0) == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(now, "OK mps=1 started=1 stopped=0");
}

// Only an administrator (root, tesserad's own user, the admin group) changes the MPS GPUs.
TEST_F(MpsGpusNodeTest, gpu_modes_MpsGpusNeedsAnAdministrator) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (setuid)";
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
  const pid_t child = fork();
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    auto reply = ipc::Call(socket_, "MPSGPUS gpus=0", nullptr, 5s);
    _exit(reply.ok() && reply->rfind("ERR permission denied: MPSGPUS starts and stops GPUs' MPS "
                                     "control daemons; ",
                                     0) == 0
              ? 0
              : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "nobody changed the MPS GPUs";
  EXPECT_FALSE(PidFile(0));
  EXPECT_EQ(Call("MPSGPUS gpus=0"), "OK mps=0 started=0 stopped=none") << "root may";
}

// A tesserad without MPS refuses the verb and says how to allow it.
class NoMpsNodeTest : public MpsNodeTest {
 protected:
  NoMpsNodeTest() : MpsNodeTest("") {}
};

TEST_F(NoMpsNodeTest, gpu_modes_MpsGpusOnATesseradWithoutMpsIsRefused) {
  auto reply = ipc::Call(socket_, "MPSGPUS gpus=0", nullptr, 5s);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(*reply,
            "ERR MPSGPUS: this tesserad runs no MPS; start it with --mps-gpus none (or --mps, "
            "--mps-gpus LIST) and --mps-control, --mps-dir");
  auto status = ipc::Call(socket_, "STATUS", nullptr, 5s);
  ASSERT_TRUE(status.ok());
  EXPECT_THAT(*status, Not(HasSubstr("mps")));
}

}  // namespace
}  // namespace tessera::mps
