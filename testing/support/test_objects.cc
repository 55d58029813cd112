// Builders of Node and Pod JSON for tests and benchmarks.
#include "testing/support/test_objects.h"

#include <algorithm>
#include <cstdio>

#include "mig/planner.h"

namespace tessera::extender::testing {

std::string GpuUuid(const std::string& name, int index) {
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx from a hash of the name and the index.
  uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  h ^= static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ULL;
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
                static_cast<unsigned>((h >> 16) & 0xffff), static_cast<unsigned>(h & 0xffff),
                static_cast<unsigned>(index & 0xffff),
                static_cast<unsigned long long>(h & 0xffffffffffffULL));
  return buf;
}

k8s::Json Node(const std::string& name, const std::vector<TestGpu>& gpus, const std::string& mode,
               const std::string& cpu, const std::string& memory,
               const std::map<std::string, std::string>& labels) {
  k8s::Json annotations = k8s::Json::object();
  if (mode != "none") {
    k8s::GpuInventory inv;
    inv.mode = *k8s::ParseNodeMode(mode, "test mode");
    for (size_t i = 0; i < gpus.size(); ++i) {
      k8s::InventoryGpu g;
      g.index = static_cast<int>(i);
      g.uuid = GpuUuid(name, static_cast<int>(i));
      g.model = gpus[i].model;
      g.memory = Bytes(gpus[i].memory_gib << 30);
      g.healthy = gpus[i].healthy;
      if (!gpus[i].mode.empty()) g.mode = *k8s::ParseNodeMode(gpus[i].mode, "test GPU mode");
      inv.gpus.push_back(g);
    }
    annotations[k8s::kInventoryAnnotation] = k8s::WriteGpuInventory(inv);
  }
  k8s::Json l = k8s::Json::object();
  for (const auto& [k, v] : labels) l[k] = v;
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"uid", "node-uid-" + name},
            {"resourceVersion", "1"},
            {"labels", l},
            {"annotations", annotations}}},
          {"status", {{"allocatable", {{"cpu", cpu}, {"memory", memory}, {"pods", "110"}}}}}};
}

std::string MigUuid(const std::string& name, int gpu, int start) {
  std::string uuid = GpuUuid(name, gpu * 16 + start + 1000);
  return "MIG-" + uuid.substr(4);
}

k8s::Json MigNode(const std::string& name, const std::string& mig_model, int gpus,
                  const std::vector<std::string>& layout, uint64_t gpu_gib,
                  const std::vector<std::string>& unhealthy) {
  k8s::Json node = Node(name, {}, "mig");
  const mig::GpuModel& model = **mig::FindGpuModel(mig_model);
  const mig::Layout cut = *mig::Place(model, *mig::ParseProfileCounts(model, layout));
  k8s::GpuInventory inv;
  inv.mode = k8s::NodeMode::kMig;
  for (int g = 0; g < gpus; ++g) {
    for (const mig::PlacedInstance& i : cut.instances) {
      k8s::InventoryGpu d;
      d.index = static_cast<int>(inv.gpus.size());
      d.uuid = MigUuid(name, g, i.start);
      d.model = "NVIDIA " + mig_model + " MIG " + std::string(i.profile->name);
      d.memory = Bytes((gpu_gib << 30) / static_cast<uint64_t>(model.memory_slices) *
                       static_cast<uint64_t>(i.profile->memory_slices));
      d.healthy = std::find(unhealthy.begin(), unhealthy.end(), d.uuid) == unhealthy.end();
      d.mig = k8s::InventoryMig{GpuUuid(name, g), std::string(model.name),
                                std::string(i.profile->name), i.start};
      inv.gpus.push_back(d);
    }
  }
  node["metadata"]["annotations"][k8s::kInventoryAnnotation] = k8s::WriteGpuInventory(inv);
  return node;
}

k8s::Json Pod(const std::string& name, const std::vector<TestContainer>& containers,
              const std::map<std::string, std::string>& annotations) {
  k8s::Json init = k8s::Json::array();
  k8s::Json apps = k8s::Json::array();
  for (const TestContainer& c : containers) {
    k8s::Json limits = {{"cpu", c.cpu}, {"memory", c.memory}};
    for (const auto& [k, v] : c.limits) limits[k] = v;
    k8s::Json requests = {{"cpu", c.cpu}, {"memory", c.memory}};
    for (const auto& [k, v] : c.limits) requests[k] = v;
    k8s::Json j = {{"name", c.name},
                   {"image", "busybox"},
                   {"resources", {{"limits", limits}, {"requests", requests}}}};
    (c.init ? init : apps).push_back(j);
  }
  k8s::Json a = k8s::Json::object();
  for (const auto& [k, v] : annotations) a[k] = v;
  k8s::Json spec = {{"containers", apps}, {"schedulerName", "tessera-scheduler"}};
  if (!init.empty()) spec["initContainers"] = init;
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"uid", "uid-" + name},
            {"resourceVersion", "1"},
            {"annotations", a}}},
          {"spec", spec},
          {"status", {{"phase", "Pending"}}}};
}

k8s::Json Pod(const std::string& name, const std::map<std::string, std::string>& limits,
              const std::map<std::string, std::string>& annotations) {
  TestContainer c;
  c.limits = limits;
  return Pod(name, std::vector<TestContainer>{c}, annotations);
}

k8s::Json Bound(k8s::Json pod, const std::string& node, const std::string& phase) {
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = phase;
  return pod;
}

std::string ExtenderArgsBody(const k8s::Json& pod, const std::vector<std::string>& names) {
  return "{\"Pod\":" + pod.dump() + ",\"Nodes\":null,\"NodeNames\":" + k8s::Json(names).dump() +
         "}";
}

}  // namespace tessera::extender::testing
