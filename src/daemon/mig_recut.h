// MIGCUT on tesserad's node socket: cutting one idle MIG GPU of this node again, through the code
// path of `tessera mig apply` (mig::ApplyMigLayout), for the device plugin, which carries the
// extender's request (docs/contracts.md, tessera.io/mig-recut). tesserad's devices are fixed while
// it runs (the ledger's device table and each device's arbiter), so a cut GPU's new MIG devices
// are taken by tesserad restarting itself in place (same program, same arguments) once the cut is
// done: the ledger is reopened with the new device table and the tenants of other GPUs re-attach,
// as after any restart.
//
// Refused, with a reason naming the containers: any container that uses a device of the GPU or
// one after it, or has a limit above 0 there (those devices' indices move, and a container's limits
// and visible devices are by index), or that has processes and no limit on any device (it may use
// any); NVML processes on the GPU (ApplyMigLayout's own check). No Kubernetes, no JSON.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "daemon/registry.h"
#include "ledger/memory_ledger.h"
#include "protocol/protocol.h"

namespace tessera::daemon {

struct MigCutContext {
  std::string nvml_path;                    // the NVML library tesserad opened (absolute)
  std::vector<ledger::DeviceInfo> devices;  // tesserad's devices now, by index
  Registry* registry = nullptr;
};

// MIGCUT gpu=<GPU UUID> layout=<profile>:<count>[,<profile>:<count>...]. On success the reply
// fields (gpu, layout, devices: how many MIG devices the GPU now has) and, in *new_devices, the
// node's devices as NVML lists them after the cut (what tesserad manages once restarted).
Result<protocol::Message> CutMigGpu(const protocol::Message& request, const MigCutContext& context,
                                    std::vector<ledger::DeviceInfo>* new_devices);

}  // namespace tessera::daemon
