// TesseradClient: the device plugin's side of tesserad's node socket (protocol/protocol.h): the
// node's GPUs and containers (STATUS), registering a container with its limits (CONTAINER) and
// unregistering it (CONTAINER remove=1). Knows nothing of Kubernetes; holds no policy.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::k8s {

struct TesseradGpu {
  int index = 0;
  std::string uuid;
  std::string name;
  Bytes total;
  uint32_t max_inst = 16;  // the largest sum of weights the GPU's arbiter admits
  bool mps = false;        // an MPS control daemon of tesserad's runs on it
};

struct TesseradContainer {
  std::string id;
  std::vector<std::optional<Bytes>> limits;  // per GPU index; nullopt: unlimited
  std::vector<Bytes> used;                   // per GPU index
  uint32_t core_percent = 100;
  uint32_t weight = 1;
  bool high_priority = false;
  std::vector<pid_t> pids;  // host pids of its registered processes
};

struct TesseradStatus {
  std::vector<TesseradGpu> gpus;  // in index order
  std::vector<TesseradContainer> containers;
  // tesserad runs MPS (--mps, --mps-gpus): the folder of its pipes; "" when it cannot run MPS.
  std::string mps_root;

  const TesseradContainer* Find(const std::string& id) const;
  const TesseradGpu* Gpu(const std::string& uuid) const;
};

// A container as the device plugin registers it.
struct ContainerRegistration {
  std::string id;
  std::vector<std::optional<Bytes>> limits;  // per node GPU index; nullopt: unlimited
  std::optional<Percent> core;               // nullopt: not limited
  uint32_t weight = 1;
  bool high_priority = false;
  // The container runtime will identify the container's processes (IDENTIFY, from the CDI hook):
  // tesserad serves none of them before it has.
  bool identify = false;
};

// What tesserad answers a registration with, beyond OK: facts of the node for the container.
struct RegisterReply {
  std::string mps_root;  // tesserad runs MPS control daemons under this folder (--mps); "" if not
};

class TesseradClient {
 public:
  explicit TesseradClient(std::string socket,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5));
  const std::string& socket() const { return socket_; }

  Result<TesseradStatus> Status() const;
  Result<RegisterReply> Register(const ContainerRegistration& container) const;
  // The number of processes of the container that remain (they keep their memory until they
  // exit); 0 and ok when tesserad has no such container.
  Result<uint32_t> Unregister(const std::string& id) const;
  // MPSGPUS: the GPUs (indices) that must run MPS. The GPUs whose control daemons run after, or
  // tesserad's refusal (naming each GPU it did not change and why) as the error.
  Result<std::set<int>> SetMpsGpus(const std::set<int>& gpus) const;
  // MIGCUT: cuts MIG GPU `gpu` (UUID) into `layout` ("1g.10gb=7 3g.40gb=1", as `tessera mig
  // apply` takes it); tesserad then restarts to manage the new MIG devices. Returns how many MIG
  // devices the GPU has now; tesserad's refusal as the error.
  Result<int> CutMigGpu(const std::string& gpu, const std::string& layout) const;

 private:
  Result<std::string> Call(const std::string& line) const;

  std::string socket_;
  std::chrono::milliseconds timeout_;
};

// Parses tesserad's STATUS JSON.
Result<TesseradStatus> ParseTesseradStatus(const std::string& json);

}  // namespace tessera::k8s
