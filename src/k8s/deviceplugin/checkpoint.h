// The device plugin's own checkpoint (kubelet keeps its own and never calls Allocate again for a
// running pod after a restart, so what the plugin decided must outlive the plugin): one record per
// container it allocated (pod, container, the device IDs kubelet gave per resource, the GPUs and
// caps, its tesserad container id and CDI file) and the pods whose allocation it refused. Written
// atomically (a temporary file renamed over the old one) after every change. JSON on disk; no
// policy here.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"
#include "k8s/annotations.h"

namespace tessera::k8s {

struct AllocatedGpu {
  std::string uuid;
  int index = 0;  // tesserad's index of the GPU
  Bytes mem;
  Percent core;

  bool operator==(const AllocatedGpu&) const = default;
};

struct AllocationRecord {
  std::string id;  // the tesserad container id, also the CDI device name
  std::string pod_uid, ns, pod, container;
  bool init = false;
  std::map<std::string, std::vector<std::string>> devices;  // resource -> kubelet's device IDs
  std::vector<AllocatedGpu> gpus;
  std::optional<Percent> core;  // the GPU-time cap registered (nullopt: none)
  uint32_t weight = 1;
  bool high_priority = false;
  bool registered = false;  // registered with tesserad (isolating modes)
  std::string cdi_file;     // the CDI spec written for it, if any
  std::string mps_root;     // mps nodes: tesserad's MPS folder when it was registered
  // The mode its GPUs were in when it was set up (nullopt in checkpoints from before modes were
  // recorded): after a restart, a GPU with tenants is served in their mode until they are gone.
  std::optional<NodeMode> mode;
  // Other pods that were waiting with the same request when this one was chosen by kubelet's
  // admission order; the reconciler checks the choice against the processes' cgroups.
  std::vector<std::string> also_waiting;

  bool operator==(const AllocationRecord&) const = default;
};

struct Checkpoint {
  std::vector<AllocationRecord> records;
  std::map<std::string, std::string> rejected;  // pod uid -> why its allocation was refused

  AllocationRecord* Find(const std::string& pod_uid, const std::string& container);
  const AllocationRecord* FindId(const std::string& id) const;
  bool operator==(const Checkpoint&) const = default;
};

// A missing file is an empty checkpoint; a file that does not parse is an error naming it.
Result<Checkpoint> LoadCheckpoint(const std::string& path);
Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint);

}  // namespace tessera::k8s
