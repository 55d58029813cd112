// The node side of MIG re-cuts on the replay's clock (mig_node_standin.h): inventories published,
// requests answered, GPUs cut, as the device plugin and tesserad do them.
#include "testing/standins/mig_node_standin.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "core/bytes.h"
#include "k8s/annotations.h"
#include "placement/mig.h"
#include "testing/support/test_objects.h"

namespace tessera::extender::testing {

namespace pl = tessera::placement;

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

std::string Annotation(const k8s::Json& object, const char* key) {
  const k8s::Json& meta = object.value("metadata", k8s::Json::object());
  const k8s::Json& ann = meta.value("annotations", k8s::Json::object());
  auto it = ann.find(key);
  return it != ann.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

MigNodeStandin::MigNodeStandin(k8s::TestApiServer& api, MigNodeOptions options)
    : api_(api), options_(options) {
  k8s::ClientConfig config;
  config.server = api.url();
  config.user_agent = "tessera-device-plugin (stand-in)";
  client_ = std::make_unique<k8s::ApiClient>(config);
}

MigNodeStandin::~MigNodeStandin() = default;

std::string MigNodeStandin::Inventory(const Node& n) const {
  k8s::GpuInventory inv;
  inv.mode = k8s::NodeMode::kMig;
  for (const Gpu& g : n.gpus) {
    for (size_t i = 0; i < g.devices.size(); ++i) {
      const mig::PlacedInstance& p = g.layout.instances[i];
      k8s::InventoryGpu d;
      d.index = static_cast<int>(inv.gpus.size());
      d.uuid = g.devices[i];
      d.model = "NVIDIA " + std::string(n.model->name) + " MIG " + std::string(p.profile->name);
      d.memory = Bytes(static_cast<uint64_t>(n.gpu_mib) * kBytesPerMiB /
                       static_cast<uint64_t>(n.model->memory_slices) *
                       static_cast<uint64_t>(p.profile->memory_slices));
      d.mig = k8s::InventoryMig{g.uuid, std::string(n.model->name), std::string(p.profile->name),
                                p.start};
      inv.gpus.push_back(d);
    }
  }
  return k8s::WriteGpuInventory(inv);
}

Status MigNodeStandin::AddNode(const pl::Cluster& cluster, int node) {
  const pl::NodeSpec& spec = cluster.spec(node);
  const mig::GpuModel* model = cluster.mig_model(node);
  if (spec.mode != pl::NodeMode::kMig || model == nullptr) {
    return Status::Error("node " + spec.name + " is not a mig node");
  }
  if (nodes_.size() <= static_cast<size_t>(node)) nodes_.resize(static_cast<size_t>(node) + 1);
  Node& n = nodes_[static_cast<size_t>(node)];
  n.name = spec.name;
  n.model = model;
  n.gpu_mib = cluster.models().model(spec.model).memory_mib;
  const std::span<const pl::MigGpu> gpus = cluster.mig_gpus(node);
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (gpus[g].layout.instances.empty()) {
      return Status::Error("node " + spec.name + ", GPU " + std::to_string(g) +
                           ": not cut; the extender sees a GPU only through its MIG devices, so "
                           "a node needs a first cut (dynamic followed by counts)");
    }
    Gpu gpu;
    gpu.uuid = GpuUuid(spec.name, static_cast<int>(g));
    gpu.layout = gpus[g].layout;
    for (const mig::PlacedInstance& p : gpu.layout.instances) {
      gpu.devices.push_back(MigUuid(spec.name, static_cast<int>(g), p.start));
      where_[gpu.devices.back()] = {node, static_cast<int>(g), p.start};
    }
    n.gpus.push_back(std::move(gpu));
  }
  std::map<std::string, std::string> labels = {{"tessera.io/gpu.schedule", "mig"}};
  if (spec.mig_relayout) labels[k8s::kMigRecutLabel] = "true";
  k8s::Json object = testing::Node(spec.name, {}, "mig", std::to_string(spec.cpu_milli) + "m",
                                   std::to_string(spec.memory_mib) + "Mi", labels);
  object["metadata"]["annotations"][k8s::kInventoryAnnotation] = Inventory(n);
  object["metadata"].erase("uid");
  object["metadata"].erase("resourceVersion");
  api_.CreateNode(object);
  return Status::Ok();
}

std::optional<MigNodeStandin::Device> MigNodeStandin::Find(const std::string& uuid) const {
  auto it = where_.find(uuid);
  if (it == where_.end()) return std::nullopt;
  return it->second;
}

const mig::Layout& MigNodeStandin::LayoutOf(int node, int gpu) const {
  return nodes_[static_cast<size_t>(node)].gpus[static_cast<size_t>(gpu)].layout;
}

bool MigNodeStandin::Pending(const Node& n) const {
  if (n.name.empty()) return false;
  if (n.publish_at >= 0) return true;
  const auto object = api_.GetNode(n.name);
  if (!object) return false;
  const std::string asked = Annotation(*object, k8s::kMigRecutAnnotation);
  return !asked.empty() && asked != n.answered;
}

double MigNodeStandin::NextEvent(double now) const {
  bool any = false;
  for (const Node& n : nodes_) any = any || Pending(n);
  if (!any) return kNever;
  const double r = options_.reconcile_s;
  double next = std::floor(now / r + 1) * r;
  if (next <= now) next += r;
  return next;
}

Result<bool> MigNodeStandin::Advance(double now) {
  const double r = options_.reconcile_s;
  bool changed = false;
  // The reconciles due in (last_, now]: only those of nodes with something to do change anything,
  // and only the last one matters for a request written since the one before (it is answered
  // once), so the instants without work are skipped.
  double at = std::floor(now / r) * r;
  if (at <= last_) return false;
  last_ = at;
  for (Node& n : nodes_) {
    if (n.name.empty() || !Pending(n)) continue;
    auto c = Reconcile(n, at);
    if (!c.ok()) return c.status();
    changed = changed || *c;
  }
  return changed;
}

Result<bool> MigNodeStandin::Reconcile(Node& n, double at) {
  bool changed = false;
  // The inventory first (the plugin's order): the devices of a finished cut.
  if (n.publish_at >= 0 && at >= n.publish_at) {
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      Gpu& gpu = n.gpus[g];
      if (!gpu.devices.empty()) continue;
      for (const mig::PlacedInstance& p : gpu.layout.instances) {
        // New UUIDs, as NVML gives the new instances.
        ++generation_;
        gpu.devices.push_back(
            "MIG-" + GpuUuid(n.name + "/cut-" + std::to_string(generation_), p.start).substr(4));
        where_[gpu.devices.back()] = {static_cast<int>(&n - nodes_.data()), static_cast<int>(g),
                                      p.start};
      }
    }
    n.publish_at = -1;
    auto patched =
        client_->PatchNodeAnnotations(n.name, {{k8s::kInventoryAnnotation, Inventory(n)}});
    if (!patched.ok())
      return Status::Error("publishing the inventory of " + n.name + ": " +
                           patched.error().message);
    changed = true;
  }
  auto object = client_->GetNode(n.name);
  if (!object.ok()) return Status::Error("reading node " + n.name + ": " + object.error().message);
  auto answered = Answer(n, *object, at);
  if (!answered.ok()) return answered.status();
  return changed || *answered;
}

Result<bool> MigNodeStandin::Answer(Node& n, const k8s::Json& object, double at) {
  const std::string asked = Annotation(object, k8s::kMigRecutAnnotation);
  if (asked.empty() || asked == n.answered) return false;
  uint64_t answered = 0;
  if (auto st = k8s::ParseMigRecutStatus(Annotation(object, k8s::kMigRecutStatusAnnotation));
      st.ok()) {
    answered = st->id;
  }
  k8s::MigRecutStatus status;
  status.state = k8s::MigRecutState::kRefused;
  auto request = k8s::ParseMigRecutRequest(asked);
  if (!request.ok()) {
    status.state = k8s::MigRecutState::kFailed;
    status.reason = request.error();
    ++counts_.failed;
  } else if (request->id <= answered) {
    n.answered = asked;
    return false;
  } else {
    status.id = request->id;
    status.gpu = request->gpu;
    int g = -1;
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      if (n.gpus[i].uuid == request->gpu && !n.gpus[i].devices.empty()) g = static_cast<int>(i);
    }
    const k8s::Json& labels =
        object.value("metadata", k8s::Json::object()).value("labels", k8s::Json::object());
    // The pods holding MIG devices of this node, by GPU.
    std::map<int, std::set<std::string>> holders;
    for (const k8s::Json& pod : api_.Pods()) {
      if (pod.value("spec", k8s::Json::object()).value("nodeName", "") != n.name) continue;
      auto a = k8s::ParseAssignment(Annotation(pod, k8s::kAssignmentAnnotation));
      if (!a.ok()) continue;
      for (const k8s::ContainerAssignment& c : a->containers) {
        for (const k8s::AssignedGpu& d : c.gpus) {
          if (auto dev = Find(d.uuid)) {
            holders[dev->gpu].insert("default/" + pod["metadata"].value("name", std::string()));
          }
        }
      }
    }
    std::set<std::string> later;
    for (const auto& [gpu, pods] : holders) {
      if (gpu > g) later.insert(pods.begin(), pods.end());
    }
    auto names = [](const std::set<std::string>& pods) {
      std::string out;
      for (const std::string& p : pods) out += (out.empty() ? "" : ", ") + p;
      return out;
    };
    if (labels.value(k8s::kMigRecutLabel, "") != "true") {
      status.reason = "node " + n.name + " is not labelled " + k8s::kMigRecutLabel +
                      "=true: its GPUs are cut by hand only";
      ++counts_.refused_other;
    } else if (g < 0) {
      status.reason = "node " + n.name + " serves no MIG device of GPU " + request->gpu;
      ++counts_.refused_other;
    } else if (n.gpus[static_cast<size_t>(g)].cut_at >= 0 &&
               at - n.gpus[static_cast<size_t>(g)].cut_at < options_.recut_interval_s) {
      status.reason = "GPU " + request->gpu + " was cut too recently (--mig-recut-interval)";
      ++counts_.refused_interval;
    } else if (holders.count(g) != 0) {
      status.reason = "GPU " + request->gpu + " runs pod(s) " + names(holders[g]) +
                      ": a GPU is never cut under a pod";
      ++counts_.refused_pod;
    } else if (options_.later_devices_block && !later.empty()) {
      status.reason = "MIGCUT: GPU " + request->gpu +
                      " is not cut while containers use it or a device after it: " + names(later);
      ++counts_.refused_later_device;
    } else {
      std::vector<std::string> words;
      for (size_t i = 0; i <= request->layout.size();) {
        const size_t end = std::min(request->layout.find(' ', i), request->layout.size());
        if (end > i) words.push_back(request->layout.substr(i, end - i));
        i = end + 1;
      }
      auto counts = mig::ParseProfileCounts(*n.model, words);
      auto placed =
          counts.ok() ? mig::Place(*n.model, *counts) : Result<mig::Layout>(counts.status());
      if (!placed.ok()) {
        status.state = k8s::MigRecutState::kFailed;
        status.reason = "MIGCUT layout=\"" + request->layout + "\": " + placed.error();
        ++counts_.failed;
      } else {
        Gpu& gpu = n.gpus[static_cast<size_t>(g)];
        for (const std::string& d : gpu.devices) where_.erase(d);
        gpu.devices.clear();
        gpu.layout = *placed;
        gpu.cut_at = at;
        n.publish_at = at + options_.cut_s;
        status.state = k8s::MigRecutState::kApplied;
        status.reason = "GPU " + request->gpu + " cut into " + request->layout;
        ++counts_.applied;
      }
    }
  }
  // The answer, and (a cut) the inventory without the GPU's old devices.
  k8s::ApiClient::AnnotationChanges changes = {
      {k8s::kMigRecutStatusAnnotation, k8s::WriteMigRecutStatus(status)}};
  if (status.state == k8s::MigRecutState::kApplied) {
    changes[k8s::kInventoryAnnotation] = Inventory(n);
  }
  auto patched = client_->PatchNodeAnnotations(n.name, changes);
  if (!patched.ok()) {
    return Status::Error("answering the MIG re-cut request on " + n.name + ": " +
                         patched.error().message);
  }
  n.answered = asked;
  return true;
}

}  // namespace tessera::extender::testing
