// `tessera run [--mem SIZE[,SIZE..]] [--core PCT] [--weight N] [--high-prio] [--devices LIST]
//  [--container ID] [--sim] -- CMD...`: registers the container with the node daemon (starting a
// private one for the run when none is reachable) and runs CMD captured by the shim. Validates
// every flag with the same parsers as the environment loader; holds no policy.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/run_mps.h"
#include "core/bytes.h"
#include "core/container_id.h"
#include "core/device_selector.h"
#include "core/number.h"
#include "core/percent.h"
#include "ipc/unix_socket.h"
#include "mps/mps.h"
#include "process/child_process.h"
#include "protocol/protocol.h"

namespace tessera::cli {
namespace {

using namespace std::chrono_literals;

pid_t g_child = -1;

// `tessera run` stands in for its command: signals it receives go to the command.
void Forward(int signal) {
  if (g_child > 0) kill(g_child, signal);
}

int RunUsage(const std::string& problem) {
  std::fprintf(stderr, "tessera run: %s\n(see tessera run --help)\n", problem.c_str());
  return 2;
}

bool Reachable(const std::string& socket) {
  auto fd = ipc::Connect(socket, 200ms);
  if (!fd.ok()) return false;
  close(*fd);
  return true;
}

}  // namespace

int RunRun(const RunArgs& args) {
  const std::string& mem = args.mem;
  const std::string& core = args.core;
  const std::string& weight = args.weight;
  const std::string& devices = args.devices;
  std::string container = args.container;
  const bool high_prio = args.high_prio;
  const bool sim = args.sim || std::getenv("TESSERA_SIM_GPUS") != nullptr;
  const std::vector<std::string>& command = args.command;

  std::string mem_bytes;
  if (!mem.empty()) {
    auto limits = ParseBytesList(mem, "--mem");
    if (!limits.ok()) return RunUsage(limits.error());
    for (const Bytes& b : *limits) {
      mem_bytes += (mem_bytes.empty() ? "" : ",") + std::to_string(b.count());
    }
  }
  if (!core.empty()) {
    auto p = ParsePercent(core, "--core", 1, 100);
    if (!p.ok()) return RunUsage(p.error());
  }
  if (!weight.empty()) {
    auto w = ParseUnsigned(weight, "--weight", 1, 256);
    if (!w.ok()) return RunUsage(w.error());
  }
  if (!devices.empty()) {
    auto d = ParseDeviceSelector(devices, "--devices");
    if (!d.ok()) return RunUsage(d.error());
  }
  if (container.empty()) container = "run-" + std::to_string(getpid());
  if (auto id = ParseContainerId(container, "--container"); !id.ok()) return RunUsage(id.error());

  const std::string bin = ExecutableDir();
  const std::string lib = bin + "/../lib";
  const char* env_socket = std::getenv("TESSERA_SOCKET");
  std::string socket =
      env_socket != nullptr && *env_socket != '\0' ? env_socket : "/run/tessera/tessera.sock";
  std::unique_ptr<process::ChildProcess> private_daemon;
  if (!Reachable(socket)) {
    socket = "/tmp/tessera-run-" + std::to_string(getpid()) + ".sock";
    std::vector<std::string> argv = {bin + "/tesserad", "--socket", socket, "--ephemeral"};
    if (sim) argv.push_back("--sim");
    private_daemon = std::make_unique<process::ChildProcess>(argv, std::vector<std::string>{});
    bool up = false;
    for (int tries = 0; tries < 300 && !up; ++tries) {
      up = Reachable(socket);
      if (!up) std::this_thread::sleep_for(10ms);
    }
    if (!up) {
      std::fprintf(stderr,
                   "tessera run: no daemon reachable and a private tesserad did not "
                   "start (see its error above)\n");
      return 1;
    }
  }
  protocol::Message request{"CONTAINER", {{"id", container}}};
  if (!mem_bytes.empty()) request.fields["mem"] = mem_bytes;
  if (!core.empty())
    request.fields["core"] = std::to_string((*ParsePercent(core, "--core", 1, 100)).value());
  if (!weight.empty()) request.fields["weight"] = weight;
  if (high_prio) request.fields["high_prio"] = "1";
  auto reply = ipc::Call(socket, protocol::FormatMessage(request), nullptr, 5s);
  if (reply.ok() && reply->rfind("ERR permission denied", 0) == 0) {
    // Registering containers is for tesserad's administrators; anyone else's command still runs,
    // its processes declaring the container and its limits themselves (the variables below), if
    // the daemon accepts self-declared containers (--allow-self-declared, the default).
    std::fprintf(stderr,
                 "tessera run: note: not an administrator of the daemon at %s, so container %s is "
                 "not registered; its processes declare their own limits\n",
                 socket.c_str(), container.c_str());
    reply = std::string("OK");
  }
  if (!reply.ok() || reply->rfind("OK", 0) != 0) {
    std::fprintf(stderr, "tessera run: the daemon at %s refused container %s: %s\n", socket.c_str(),
                 container.c_str(), reply.ok() ? reply->c_str() : reply.error().c_str());
    return 1;
  }

  std::vector<std::string> env = {"TESSERA_SOCKET=" + socket, "TESSERA_CONTAINER=" + container};
  const char* preload = std::getenv("LD_PRELOAD");
  env.push_back("LD_PRELOAD=" + lib + "/tessera/libcuda.so.1" +
                (preload != nullptr && *preload != '\0' ? std::string(":") + preload : ""));
  if (!mem.empty()) env.push_back("TESSERA_MEM_LIMIT=" + mem);
  if (!core.empty()) env.push_back("TESSERA_CORE_LIMIT=" + core);
  if (!weight.empty()) env.push_back("TESSERA_WEIGHT=" + weight);
  if (high_prio) env.push_back("TESSERA_HIGH_PRIO=1");
  if (!devices.empty()) env.push_back("TESSERA_VISIBLE_DEVICES=" + devices);
  std::string mps_shm;  // an MPS node: the /dev/shm the command shares with its GPU's server
  if (auto fields = protocol::ParseMessage(*reply); fields.ok() && fields->Has("mps_root")) {
    auto mps = MpsRunEnvironment(socket, fields->Get("mps_root"), devices, core, mem, &mps_shm);
    if (!mps.ok()) return RunUsage(mps.error());
    env.insert(env.end(), mps->begin(), mps->end());
  }
  if (sim) {
    env.push_back("TESSERA_REAL_LIBCUDA=" + lib + "/libtessera-simgpu.so");
    env.push_back("TESSERA_REAL_NVML=" + lib + "/libtessera-simgpu.so");
  }
  // Run the command as a child: stdin, stdout and stderr are the caller's own.
  const pid_t pid = fork();
  if (pid == 0) {
    if (!mps_shm.empty()) {
      if (const int err = mps::EnterServerShm(mps_shm.c_str()); err != 0) {
        std::fprintf(stderr,
                     "tessera run: cannot give the command its GPU's MPS /dev/shm (%s on /dev/shm "
                     "in a mount namespace of its own: %s); on an MPS node tessera run needs root "
                     "(CAP_SYS_ADMIN)\n",
                     mps_shm.c_str(), std::strerror(err));
        _exit(126);
      }
    }
    for (const std::string& kv : env) {
      const size_t eq = kv.find('=');
      setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "tessera run: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  struct sigaction sa {};
  sa.sa_handler = Forward;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (private_daemon) {
    private_daemon->Kill(SIGTERM);
    private_daemon->Wait(10s);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tessera::cli
