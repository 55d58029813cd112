// Test support: SimNode's test-failing calls, pods as the extender places them.
#include "testing/support/test_support.h"

#include <gtest/gtest.h>

namespace tessera::k8s::testing {

using namespace std::chrono_literals;

TesseradStatus SimNode::Status() {
  auto s = TryStatus();
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? *s : TesseradStatus{};
}

std::string SimNode::Uuid(int gpu) {
  const TesseradStatus s = Status();
  return static_cast<size_t>(gpu) < s.gpus.size() ? s.gpus[static_cast<size_t>(gpu)].uuid : "";
}

Json PodJson(const std::string& ns, const std::string& name,
             const std::vector<ContainerSpec>& containers,
             const std::map<std::string, std::string>& annotations) {
  Json init = Json::array(), app = Json::array();
  for (const ContainerSpec& c : containers) {
    Json limits = Json::object();
    for (const auto& [k, v] : c.limits) limits[k] = v;
    Json ctr = {{"name", c.name}, {"image", "cuda-app"}, {"resources", {{"limits", limits}}}};
    (c.init ? init : app).push_back(ctr);
  }
  Json meta = {{"name", name}, {"namespace", ns}};
  if (!annotations.empty()) meta["annotations"] = annotations;
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", meta},
              {"spec", {{"containers", app}, {"schedulerName", "tessera"}}}};
  if (!init.empty()) pod["spec"]["initContainers"] = init;
  return pod;
}

std::string AssignmentJson(const std::string& node, uint64_t seq,
                           const std::map<std::string, std::vector<GpuShare>>& containers) {
  Assignment a;
  a.node = node;
  a.seq = seq;
  for (const auto& [name, gpus] : containers) {
    ContainerAssignment c;
    c.name = name;
    for (const GpuShare& g : gpus) {
      c.gpus.push_back({g.uuid, Bytes(g.mem_bytes), *Percent::FromInt(g.core_percent)});
    }
    a.containers.push_back(c);
  }
  return WriteAssignment(a);
}

}  // namespace tessera::k8s::testing
