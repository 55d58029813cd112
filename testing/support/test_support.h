// Test support for the device plugin's tests (tests only): a real tesserad on its own simulated
// GPUs, pods written as the extender would place them, and small waits. Holds no stand-in of our
// own components: tesserad, simgpu and the shims are the real ones.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "k8s/objects.h"
#include "process/child_process.h"
#include "testing/support/cgroup_container.h"

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
  TesseradStatus Status();  // fails the test when tesserad does not answer
  std::string Uuid(int gpu);
  // A scratch folder of the test, removed at the end.
  std::string Scratch(const std::string& leaf);

 private:
  std::string name_, gpus_, socket_, container_sockets_, ledger_;
  std::string sim_state_;  // TESSERA_SIM_STATE: a name, or a file outside /dev/shm under --mps
  std::vector<std::string> daemon_args_;
  std::unique_ptr<process::ChildProcess> daemon_;
  std::unique_ptr<TesseradClient> client_;
};

// A container of a pod: its name and limits.
struct ContainerSpec {
  std::string name;
  std::map<std::string, std::string> limits;
  bool init = false;
};
// One GPU of a container's assignment.
struct GpuShare {
  std::string uuid;
  uint64_t mem_bytes;
  int core_percent;
};

// A pod's JSON as a user writes it.
Json PodJson(const std::string& ns, const std::string& name,
             const std::vector<ContainerSpec>& containers,
             const std::map<std::string, std::string>& annotations = {});
// The tessera.io/assignment text the extender writes for `containers` on `node`.
std::string AssignmentJson(const std::string& node, uint64_t seq,
                           const std::map<std::string, std::vector<GpuShare>>& containers);

// A cgroup hierarchy tests may write (testing/support/cgroup_container.h).
using ::tessera::testing::WritableCgroupRoot;

// Polls `done` every 20 ms until it is true or `timeout` passes.
bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout);

constexpr uint64_t kGiB = 1ull << 30;

}  // namespace tessera::k8s::testing
