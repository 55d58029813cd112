// Test support for the device plugin's tests (tests only): a real tesserad on its own simulated
// GPUs (SimNode, testing/support/sim_node.h), pods written as the extender would place them, and
// small waits. Holds no stand-in of our
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
#include "testing/support/sim_node.h"

namespace tessera::k8s::testing {

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

constexpr uint64_t kGiB = 1ull << 30;

}  // namespace tessera::k8s::testing
