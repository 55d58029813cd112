// MPSGPUS on tesserad's node socket: which GPUs run an MPS control daemon, changed while tesserad
// runs, for the device plugin, which serves each GPU in the mode its label asks
// (tessera.io/gpu.schedule.<index>, docs/kubernetes.md "A mode per GPU"). A GPU joining the set
// gets its control daemon started (and policy 5, as --mps gives); a GPU leaving it has its daemon
// stopped (and its policy back); the other GPUs' daemons and tenants are not touched.
//
// A GPU changes only with nothing running on it: starting MPS under tenants that are no MPS
// clients, or stopping it under live MPS clients, is refused, naming the GPU, the containers with
// processes or memory on it and their pids, and NVML's other processes there. The GPUs that can
// change do; the reply says what runs after. No Kubernetes, no JSON.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/arbiter_policy.h"
#include "core/result.h"
#include "daemon/compute.h"
#include "daemon/reconciler.h"
#include "daemon/registry.h"
#include "ledger/memory_ledger.h"
#include "mps/mps.h"
#include "protocol/protocol.h"

namespace tessera::daemon {

struct MpsGpusContext {
  std::vector<ledger::DeviceInfo> devices;  // tesserad's devices, by index
  Registry* registry = nullptr;
  ComputeService* compute = nullptr;         // may be null: policies are left alone
  mps::MpsSupervisor* supervisor = nullptr;  // null: this tesserad runs no MPS (refused)
  ProcessLister processes;                   // NVML's processes of a device; unset: none
  std::function<bool(int32_t)> exempt;       // tesserad's own (control daemons, MPS servers)
  bool set_policy = false;                   // policy 5 while a GPU runs MPS
  std::set<int> own_policy;  // GPUs whose policy was given (--gpu-policy): kept as they are
  ArbiterPolicy policy_without_mps = ArbiterPolicy::kFair;  // for a GPU that leaves, started so
};

// "0-3,5" or "none": the GPUs a MPSGPUS request names; refused by name when malformed.
Result<std::set<int>> ParseMpsGpuList(const std::string& text, int device_count);

// "0-3,5", or "none" for the empty set: the form ParseMpsGpuList reads.
std::string FormatMpsGpuList(const std::set<int>& gpus);

// Serialises the requests and keeps the policies the GPUs had before they ran MPS.
class MpsGpuSwitch {
 public:
  explicit MpsGpuSwitch(MpsGpusContext context) : context_(std::move(context)) {}

  // MPSGPUS gpus=<list|none>: the set of GPUs that must run MPS. OK with mps=<the GPUs that run it
  // now>, started= and stopped= (those changed, "none" if none); ERR naming every GPU that could
  // not change and why, ending with what runs now, when one could not.
  Result<protocol::Message> Apply(const protocol::Message& request);

  // The GPUs whose control daemons run now.
  std::set<int> Running() const;

 private:
  // Why GPU `index` cannot change now ("" when it can): the containers with memory there or
  // processes allowed on it, and NVML's processes on it that are not tesserad's own.
  std::string Occupants(int index) const;

  MpsGpusContext context_;
  std::map<int, arbiter::ArbiterConfig> before_;  // config of a GPU before it joined
};

}  // namespace tessera::daemon
