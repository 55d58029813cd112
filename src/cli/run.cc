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
#include "core/bytes.h"
#include "core/container_id.h"
#include "core/device_selector.h"
#include "core/percent.h"
#include "ipc/unix_socket.h"
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

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "tessera run: %s\nusage: tessera run [--mem SIZE[,SIZE..]] [--core PCT] "
               "[--weight N] [--high-prio] [--devices LIST] [--container ID] [--sim] -- CMD...\n",
               problem.c_str());
  return 2;
}

bool Reachable(const std::string& socket) {
  auto fd = ipc::Connect(socket, 200ms);
  if (!fd.ok()) return false;
  close(*fd);
  return true;
}

}  // namespace

int RunRun(const std::vector<std::string>& args) {
  std::string mem, core, weight, devices, container;
  bool high_prio = false;
  bool sim = std::getenv("TESSERA_SIM_GPUS") != nullptr;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    auto take = [&](std::string* out) {
      if (i + 1 >= args.size() || args[i + 1] == "--") return false;
      *out = args[++i];
      return true;
    };
    if (a == "--mem") {
      if (!take(&mem)) return Usage("--mem needs a size such as 2GiB or 3GiB,4GiB");
    } else if (a == "--core") {
      if (!take(&core)) return Usage("--core needs a percentage 1-100");
    } else if (a == "--weight") {
      if (!take(&weight)) return Usage("--weight needs a positive integer");
    } else if (a == "--devices") {
      if (!take(&devices)) return Usage("--devices needs indices or UUIDs");
    } else if (a == "--container") {
      if (!take(&container)) return Usage("--container needs an id");
    } else if (a == "--high-prio") {
      high_prio = true;
    } else if (a == "--sim") {
      sim = true;
    } else {
      return Usage("unknown option \"" + a + "\"");
    }
  }
  if (i + 1 >= args.size()) return Usage("no command given after --");
  const std::vector<std::string> command(args.begin() + static_cast<long>(i) + 1, args.end());

  std::string mem_bytes;
  if (!mem.empty()) {
    auto limits = ParseBytesList(mem, "--mem");
    if (!limits.ok()) return Usage(limits.error());
    for (const Bytes& b : *limits) {
      mem_bytes += (mem_bytes.empty() ? "" : ",") + std::to_string(b.count());
    }
  }
  if (!core.empty()) {
    auto p = ParsePercent(core, "--core", 1, 100);
    if (!p.ok()) return Usage(p.error());
  }
  if (!weight.empty()) {
    char* end = nullptr;
    const unsigned long w = std::strtoul(weight.c_str(), &end, 10);
    if (*end != '\0' || w < 1 || w > 256 || weight[0] == '-') {
      return Usage("--weight \"" + weight + "\": expected an integer from 1 to 256");
    }
  }
  if (!devices.empty()) {
    auto d = ParseDeviceSelector(devices, "--devices");
    if (!d.ok()) return Usage(d.error());
  }
  if (container.empty()) container = "run-" + std::to_string(getpid());
  if (auto id = ParseContainerId(container, "--container"); !id.ok()) return Usage(id.error());

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
  if (sim) {
    env.push_back("TESSERA_REAL_LIBCUDA=" + lib + "/libtessera-simgpu.so");
    env.push_back("TESSERA_REAL_NVML=" + lib + "/libtessera-simgpu.so");
  }
  // Run the command as a child: stdin, stdout and stderr are the caller's own.
  const pid_t pid = fork();
  if (pid == 0) {
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
