// Test helpers: v1.Node and v1.Pod JSON as the API server serves them, for the extender's tests
// and benchmark. Builders only; no assertions, no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/objects.h"

namespace tessera::extender::testing {

struct TestGpu {
  std::string model = "SimGPU";
  uint64_t memory_gib = 16;
  bool healthy = true;
  std::string mode{};  // the GPU's own mode in the inventory ("mps"); empty: the node's
};

// A node with `gpus` in `mode` (nullopt: no inventory annotation), allocatable `cpu` and
// `memory`, and `labels`. GPU UUIDs are derived from the node name and index, so they are stable.
k8s::Json Node(const std::string& name, const std::vector<TestGpu>& gpus,
               const std::string& mode = "core_mem", const std::string& cpu = "32",
               const std::string& memory = "128Gi",
               const std::map<std::string, std::string>& labels = {});
// The UUID Node gives GPU `index` of node `name`.
std::string GpuUuid(const std::string& name, int index);

// A mig node of `gpus` GPUs of MIG model `mig_model` ("H100-80GB") with `gpu_gib` each, every GPU
// cut into `layout` (profile counts as `tessera mig plan` takes them, e.g. {"3g.40gb=1",
// "1g.10gb=2"}), its MIG devices listed as the device plugin lists them (an instance's memory its
// memory slices' share of the GPU's). `unhealthy`: MIG UUIDs listed as unhealthy.
k8s::Json MigNode(const std::string& name, const std::string& mig_model, int gpus,
                  const std::vector<std::string>& layout, uint64_t gpu_gib = 80,
                  const std::vector<std::string>& unhealthy = {});
// The UUID MigNode gives the MIG device at memory slice `start` of GPU `gpu` of node `name`.
std::string MigUuid(const std::string& name, int gpu, int start);

struct TestContainer {
  std::string name = "app";
  std::map<std::string, std::string> limits;  // e.g. {"tessera.io/gpu-core", "30"}
  std::string cpu = "1";
  std::string memory = "1Gi";
  bool init = false;
};

// A pending pod (no nodeName) in namespace "default" with uid "uid-<name>".
k8s::Json Pod(const std::string& name, const std::vector<TestContainer>& containers,
              const std::map<std::string, std::string>& annotations = {});
// One container asking `limits`.
k8s::Json Pod(const std::string& name, const std::map<std::string, std::string>& limits,
              const std::map<std::string, std::string>& annotations = {});

// `pod` bound to `node` with phase `phase` and resourceVersion `rv`.
k8s::Json Bound(k8s::Json pod, const std::string& node, const std::string& phase = "Running");

// ExtenderArgs with NodeNames as kube-scheduler sends it: Go's encoding/json writes a struct's
// fields in their declared order (Pod, Nodes, NodeNames) with no spaces, and Nodes is null for a
// nodeCacheCapable extender. (A Json object's dump() would sort the keys instead.)
std::string ExtenderArgsBody(const k8s::Json& pod, const std::vector<std::string>& names);

}  // namespace tessera::extender::testing
