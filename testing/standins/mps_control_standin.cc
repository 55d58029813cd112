// A STAND-IN for nvidia-cuda-mps-control, for the tests only: the real program needs an NVIDIA
// driver and cannot be installed here. It runs nothing on any GPU; it only does what the
// supervisor relies on (daemonise with -d, keep a pid file in the pipe directory, stop on `quit`)
// and records every start and every command with the environment it was given, in
// $CUDA_MPS_LOG_DIRECTORY/control.log, one line each:
//   start pid=P CUDA_VISIBLE_DEVICES=U CUDA_MPS_PIPE_DIRECTORY=D CUDA_MPS_LOG_DIRECTORY=L
//   command <line>                       (read on stdin when run without -d)
//   exit pid=P                           (the daemon, on SIGTERM)
// Like the real server, which keeps what it shares with its clients in /dev/shm, the daemon
// creates /dev/shm/tessera-mps-standin.P while it runs, so a test can see which /dev/shm it got.
// With TESSERA_MPS_STANDIN_FAIL=1 in its environment, -d fails (exit 1) to test that path.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

void Record(const std::string& line) {
  std::ofstream log(Env("CUDA_MPS_LOG_DIRECTORY") + "/control.log", std::ios::app);
  log << line << "\n";
}

std::string PidFile() { return Env("CUDA_MPS_PIPE_DIRECTORY") + "/nvidia-cuda-mps-control.pid"; }

volatile sig_atomic_t g_stop = 0;
void OnTerm(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  const std::string arg = argc > 1 ? argv[1] : "";
  if (arg == "-d") {
    if (Env("TESSERA_MPS_STANDIN_FAIL") == "1") return 1;
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child > 0) {
      // The foreground part returns once the daemon is up, as the real one does.
      for (int i = 0; i < 500; ++i) {
        if (access(PidFile().c_str(), F_OK) == 0) return 0;
        usleep(10000);
      }
      return 1;
    }
    setsid();
    signal(SIGTERM, OnTerm);
    const std::string me = std::to_string(getpid());
    Record("start pid=" + me + " CUDA_VISIBLE_DEVICES=" + Env("CUDA_VISIBLE_DEVICES") +
           " CUDA_MPS_PIPE_DIRECTORY=" + Env("CUDA_MPS_PIPE_DIRECTORY") +
           " CUDA_MPS_LOG_DIRECTORY=" + Env("CUDA_MPS_LOG_DIRECTORY"));
    const std::string shared = "/dev/shm/tessera-mps-standin." + me;
    { std::ofstream(shared) << me << "\n"; }
    {
      std::ofstream pid(PidFile() + ".tmp");
      pid << me << "\n";
    }
    rename((PidFile() + ".tmp").c_str(), PidFile().c_str());
    while (!g_stop) pause();
    unlink(PidFile().c_str());
    unlink(shared.c_str());
    Record("exit pid=" + me);
    return 0;
  }
  if (!arg.empty()) {
    std::fprintf(stderr, "mps_control_standin: unknown argument %s\n", arg.c_str());
    return 2;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    Record("command " + line);
    if (line == "quit") {
      std::ifstream in(PidFile());
      long pid = 0;
      if (in >> pid && pid > 0) kill(static_cast<pid_t>(pid), SIGTERM);
    }
  }
  return 0;
}
