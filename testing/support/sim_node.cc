// SimNode: a real tesserad on its own simgpu state (testing/support/sim_node.h).
#include "testing/support/sim_node.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "ipc/unix_socket.h"
#include "ledger/memory_ledger.h"

namespace tessera::k8s::testing {

using namespace std::chrono_literals;

SimNode::SimNode(const std::string& gpus, std::vector<std::string> daemon_args)
    : name_(process::UniqueName("k8snode")), gpus_(gpus), daemon_args_(std::move(daemon_args)) {
  socket_ = "/tmp/" + name_ + ".sock";
  container_sockets_ = "/tmp/" + name_ + "-containers";
  ledger_ = "tessera-ledger-" + name_;
  // An MPS client's /dev/shm is its GPU's server's, not the host's (mps::EnterServerShm): the
  // simulated GPUs are kept where every mount namespace reaches them, as a real GPU's devices are.
  const bool mps =
      std::find(daemon_args_.begin(), daemon_args_.end(), "--mps") != daemon_args_.end() ||
      std::find(daemon_args_.begin(), daemon_args_.end(), "--mps-gpus") != daemon_args_.end();
  sim_state_ = mps ? "/tmp/" + name_ + ".sim" : name_;
  client_ = std::make_unique<TesseradClient>(socket_);
}

SimNode::~SimNode() {
  Stop();
  tessera::ledger::MemoryLedger::Remove("/" + ledger_);  // every segment of it
  shm_unlink(("/tessera-sim-" + name_).c_str());
  unlink(("/tmp/" + name_ + ".sim").c_str());
  std::system(("rm -rf '" + container_sockets_ + "' /tmp/" + name_ + "-scratch-*").c_str());
}

std::vector<std::string> SimNode::SimEnv() const {
  return {"TESSERA_SIM_STATE=" + sim_state_, "TESSERA_SIM_GPUS=" + gpus_};
}

bool SimNode::Start() {
  std::vector<std::string> argv = {process::BuildDir() + "/bin/tesserad",
                                   "--sim",
                                   "--socket",
                                   socket_,
                                   "--ledger",
                                   ledger_,
                                   "--container-sockets",
                                   container_sockets_};
  argv.insert(argv.end(), daemon_args_.begin(), daemon_args_.end());
  if (!log_.empty()) {
    // The shell only redirects and is replaced by tesserad (its pid is tesserad's).
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$@\" 2>>\"$0\"", log_});
  }
  daemon_ = std::make_unique<process::ChildProcess>(argv, SimEnv());
  return daemon_->started() && ipc::WaitUntilListening(socket_, 10s);
}

void SimNode::Stop() {
  if (!daemon_) return;
  daemon_->Kill(SIGTERM);
  daemon_->Wait(10s);
  daemon_.reset();
}

std::string SimNode::Scratch(const std::string& leaf) {
  const std::string dir = "/tmp/" + name_ + "-scratch-" + leaf;
  std::system(("mkdir -p '" + dir + "'").c_str());
  return dir;
}

Result<TesseradStatus> SimNode::TryStatus() { return client_->Status(); }

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

}  // namespace tessera::k8s::testing
