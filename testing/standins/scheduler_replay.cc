// kube-scheduler's side of a replay through a tessera-extender: pods created, scheduled through the
// HTTP verbs, marked unschedulable, deleted; and the waits for the extender to catch up.
#include "testing/standins/scheduler_replay.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "k8s/annotations.h"
#include "testing/support/test_objects.h"

namespace tessera::extender::testing {

namespace pl = tessera::placement;

k8s::Json NodeFor(const pl::NodeSpec& spec, const pl::ModelTable& models) {
  std::vector<TestGpu> gpus;
  for (int g = 0; g < spec.gpu_count; ++g) {
    const auto& m = models.model(spec.model);
    gpus.push_back({m.name, static_cast<uint64_t>(m.memory_mib) / 1024, true});
  }
  k8s::Json node =
      Node(spec.name, gpus, spec.gpu_count > 0 ? "core_mem" : "none",
           std::to_string(spec.cpu_milli) + "m", std::to_string(spec.memory_mib) + "Mi");
  // Memory sizes that are not whole GiB: write the exact bytes.
  if (spec.gpu_count > 0) {
    auto inv = k8s::ParseGpuInventory(
        node["metadata"]["annotations"][k8s::kInventoryAnnotation].get<std::string>());
    for (auto& g : inv->gpus) {
      g.memory = Bytes(static_cast<uint64_t>(models.model(spec.model).memory_mib) << 20);
    }
    node["metadata"]["annotations"][k8s::kInventoryAnnotation] = k8s::WriteGpuInventory(*inv);
  }
  node["metadata"].erase("uid");
  node["metadata"].erase("resourceVersion");
  return node;
}

k8s::Json PodFor(const std::string& name, const pl::Request& r) {
  std::map<std::string, std::string> limits;
  if (r.gpu_count > 0) {
    limits["tessera.io/gpu-count"] = std::to_string(r.gpu_count);
    if (!r.whole_gpus()) limits["tessera.io/gpu-core"] = std::to_string(r.gpu_milli / 10);
  }
  TestContainer c;
  c.limits = limits;
  c.cpu = std::to_string(r.cpu_milli) + "m";
  c.memory = std::to_string(r.memory_mib) + "Mi";
  k8s::Json pod = Pod(name, std::vector{c});
  pod["metadata"].erase("uid");
  pod["metadata"].erase("resourceVersion");
  return pod;
}

ExtenderReplayScheduler::ExtenderReplayScheduler(k8s::TestApiServer& api, ExtenderApp& app,
                                                 int port, const pl::Cluster& cluster)
    : api_(api), app_(app), driver_(port), http_(std::make_unique<httplib::Client>(api.url())) {
  http_->set_keep_alive(true);
  for (int n = 0; n < cluster.node_count(); ++n) {
    const std::string& name = cluster.spec(n).name;
    node_names_.push_back(name);
    node_index_[name] = n;
    for (int g = 0; g < cluster.spec(n).gpu_count; ++g) gpu_index_[GpuUuid(name, g)] = g;
  }
}

ExtenderReplayScheduler::~ExtenderReplayScheduler() = default;

std::string ExtenderReplayScheduler::PodName(int pod) {
  // Zero-padded: name order is arrival order, which breaks ties of creation time the same way.
  std::string digits = std::to_string(pod);
  return "replay-" + std::string(digits.size() < 8 ? 8 - digits.size() : 0, '0') + digits;
}

Status ExtenderReplayScheduler::Arrive(int pod, const pl::Request& request, double) {
  pending_[pod] = api_.CreatePod(PodFor(PodName(pod), request));
  ++live_pods_;
  if (static_cast<size_t>(pod) >= is_waiting_.size()) is_waiting_.resize(pod + 1, 0);
  return Status::Ok();
}

Result<std::optional<pl::Assignment>> ExtenderReplayScheduler::Attempt(const pl::Cluster& cluster,
                                                                       int pod, const pl::Request&,
                                                                       const pl::Reservations*) {
  // What kube-scheduler's cache would show: every earlier write seen.
  if (Status s = AwaitExtender(live_pods_, waiting_, cluster.gpu_milli_allocated()); !s.ok()) {
    return s;
  }
  auto it = pending_.find(pod);
  if (it == pending_.end()) {
    return Result<std::optional<pl::Assignment>>::Error("replay pod " + std::to_string(pod) +
                                                        " was never created");
  }
  ++rounds_;
  const ScheduleResult r = driver_.Schedule(it->second, node_names_);
  if (!r.error.empty()) return Result<std::optional<pl::Assignment>>::Error(r.error);
  if (!r.bound) return std::optional<pl::Assignment>();
  auto node = node_index_.find(r.node);
  if (node == node_index_.end()) {
    return Result<std::optional<pl::Assignment>>::Error("bound to unknown node " + r.node);
  }
  pl::Assignment a{node->second, 0};
  const auto bound = api_.GetPod("default", PodName(pod));
  if (!bound) return Result<std::optional<pl::Assignment>>::Error("bound pod vanished");
  const k8s::Json& annotations = (*bound)["metadata"].value("annotations", k8s::Json::object());
  if (auto text = annotations.find(k8s::kAssignmentAnnotation); text != annotations.end()) {
    auto assignment = k8s::ParseAssignment(text->get<std::string>());
    if (!assignment.ok()) return assignment.status();
    for (const k8s::ContainerAssignment& c : assignment->containers) {
      for (const k8s::AssignedGpu& g : c.gpus) {
        auto gi = gpu_index_.find(g.uuid);
        if (gi == gpu_index_.end()) {
          return Result<std::optional<pl::Assignment>>::Error("assigned unknown GPU " + g.uuid);
        }
        a.gpus |= uint32_t{1} << gi->second;
      }
    }
  }
  return std::optional<pl::Assignment>(a);
}

Status ExtenderReplayScheduler::MarkWaiting(int pod, const pl::Request&) {
  // kube-scheduler's condition after a failed attempt (a merge patch of the status).
  const k8s::Json patch = {
      {"status",
       {{"conditions", k8s::Json::array({{{"type", "PodScheduled"},
                                          {"status", "False"},
                                          {"reason", "Unschedulable"},
                                          {"message", "0/" + std::to_string(node_names_.size()) +
                                                          " nodes are available"}}})}}}};
  auto res = http_->Patch("/api/v1/namespaces/default/pods/" + PodName(pod) + "/status",
                          patch.dump(), "application/merge-patch+json");
  if (!res || res->status != 200) {
    return Status::Error("status of " + PodName(pod) + ": HTTP " +
                         std::to_string(res ? res->status : 0));
  }
  is_waiting_[static_cast<size_t>(pod)] = 1;
  ++waiting_;
  return Status::Ok();
}

void ExtenderReplayScheduler::Placed(const pl::Cluster&, int pod, const pl::Request&,
                                     const pl::Assignment&) {
  pending_.erase(pod);
  if (is_waiting_[static_cast<size_t>(pod)] != 0) {
    is_waiting_[static_cast<size_t>(pod)] = 0;
    --waiting_;
  }
}

Status ExtenderReplayScheduler::Leave(const pl::Cluster&, int pod, const pl::Request&,
                                      const pl::Assignment&) {
  if (!api_.DeletePod("default", PodName(pod))) {
    return Status::Error("replay pod " + PodName(pod) + ": not on the API server to delete");
  }
  --live_pods_;
  return Status::Ok();
}

Status ExtenderReplayScheduler::AwaitExtender(size_t pods, size_t waiting, int64_t allocated) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  StateStats s;
  while (std::chrono::steady_clock::now() < deadline) {
    s = app_.state().Stats();
    if (s.pods == pods && s.pods_waiting == waiting && s.gpu_milli_allocated == allocated) {
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status::Error("the extender did not catch up within 5 s: " + std::to_string(s.pods) +
                       " pods (want " + std::to_string(pods) + "), " +
                       std::to_string(s.pods_waiting) + " waiting (want " +
                       std::to_string(waiting) + "), " + std::to_string(s.gpu_milli_allocated) +
                       " GPU milli allocated (want " + std::to_string(allocated) + ")");
}

}  // namespace tessera::extender::testing
