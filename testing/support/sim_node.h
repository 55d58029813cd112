// SimNode: a real tesserad on simulated GPUs of its own (the tests, and the demo's cluster act;
// nothing here ships). simgpu stands in for the driver; tesserad is the real program
// (build/bin/tesserad); and small waits. No gtest here: Status() and Uuid(), which fail the calling
// test, are defined in test_support.cc.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "process/child_process.h"

namespace tessera::k8s::testing {

// A tesserad on simulated GPUs of its own (TESSERA_SIM_STATE), with container sockets and a
// ledger that outlives a restart of the daemon (Restart()).
class SimNode {
 public:
  // `gpus`: TESSERA_SIM_GPUS, e.g. "SimA:16GiB:80,SimA:16GiB:80". `daemon_args` are added.
  explicit SimNode(const std::string& gpus, std::vector<std::string> daemon_args = {});
  ~SimNode();
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  // Where tesserad's stderr goes (appended), from the next Start(); unset: inherited.
  void LogTo(std::string path) { log_ = std::move(path); }
  bool Start();
  void Stop();
  bool Restart() {
    Stop();
    return Start();
  }
  const std::string& name() const { return name_; }
  const std::string& socket() const { return socket_; }
  const std::string& container_sockets() const { return container_sockets_; }
  std::vector<std::string> SimEnv() const;
  TesseradClient& client() { return *client_; }
  // tesserad's status, or why it did not answer.
  Result<TesseradStatus> TryStatus();
  // Defined in test_support.cc (tests only): a test failure when tesserad does not answer.
  TesseradStatus Status();
  std::string Uuid(int gpu);
  // A scratch folder of this node, removed with it.
  std::string Scratch(const std::string& leaf);

 private:
  std::string name_, gpus_, socket_, container_sockets_, ledger_;
  std::string sim_state_;  // TESSERA_SIM_STATE: a name, or a file outside /dev/shm under --mps
  std::vector<std::string> daemon_args_;
  std::string log_;
  std::unique_ptr<process::ChildProcess> daemon_;
  std::unique_ptr<TesseradClient> client_;
};

// Polls `done` every 20 ms until it is true or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

}  // namespace tessera::k8s::testing
