// kube-scheduler's side of a replay through a tessera-extender: pods created, scheduled through the
// HTTP verbs, marked unschedulable, deleted; and the waits for the extender to catch up.
#include "testing/standins/scheduler_replay.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "k8s/annotations.h"
#include "placement/mig.h"
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
  if (r.mig()) {
    std::string profile(pl::MigProfileName(r.mig_profile));
    std::replace(profile.begin(), profile.end(), '+', '.');
    limits["tessera.io/mig-" + profile] = "1";
  } else if (r.gpu_count > 0) {
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
                                                 int port, const pl::Cluster& cluster,
                                                 MigReplay mig)
    : api_(api),
      app_(app),
      driver_(port),
      http_(std::make_unique<httplib::Client>(api.url())),
      mig_(mig) {
  http_->set_keep_alive(true);
  for (int n = 0; n < cluster.node_count(); ++n) {
    const std::string& name = cluster.spec(n).name;
    recut_nodes_ = recut_nodes_ || (mig_.nodes != nullptr && cluster.spec(n).mig_relayout);
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
        if (mig_.nodes != nullptr && g.uuid.rfind("MIG-", 0) == 0) {
          auto m = MigAssignment(cluster, g.uuid);
          if (!m.ok()) return m.status();
          if (m->node != a.node) {
            return Result<std::optional<pl::Assignment>>::Error("MIG device " + g.uuid +
                                                                " is not on node " + r.node);
          }
          a = *m;
          continue;
        }
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
  // The extender notes on its clock when it first sees a pod waiting (a reservation waits for
  // it, placement/reservation.h): it sees the condition at the replay's instant of the failure,
  // before the replay's clock moves on.
  return AwaitExtender(live_pods_, waiting_, allocated_);
}

void ExtenderReplayScheduler::Placed(const pl::Cluster& cluster, int pod, const pl::Request&,
                                     const pl::Assignment&) {
  allocated_ = cluster.gpu_milli_allocated();
  pending_.erase(pod);
  if (is_waiting_[static_cast<size_t>(pod)] != 0) {
    is_waiting_[static_cast<size_t>(pod)] = 0;
    --waiting_;
  }
}

Status ExtenderReplayScheduler::Leave(const pl::Cluster& cluster, int pod, const pl::Request&,
                                      const pl::Assignment&) {
  allocated_ = cluster.gpu_milli_allocated();
  if (!api_.DeletePod("default", PodName(pod))) {
    return Status::Error("replay pod " + PodName(pod) + ": not on the API server to delete");
  }
  --live_pods_;
  return Status::Ok();
}

Status ExtenderReplayScheduler::AwaitExtender(size_t pods, size_t waiting, int64_t allocated) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  StateStats s;
  // On a replay with re-cuts, also every Node as the API server has it (the requests, answers
  // and inventories written since).
  auto nodes_seen = [&] {
    if (mig_.nodes == nullptr) return true;
    for (const std::string& name : node_names_) {
      const auto node = api_.GetNode(name);
      if (!node) continue;
      const std::string rv = (*node)["metadata"].value("resourceVersion", "");
      if (app_.state().CommitView(name).resource_version != rv) return false;
    }
    return true;
  };
  while (std::chrono::steady_clock::now() < deadline) {
    s = app_.state().Stats();
    if (s.pods == pods && s.pods_waiting == waiting && s.gpu_milli_allocated == allocated &&
        nodes_seen()) {
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

Result<pl::Assignment> ExtenderReplayScheduler::MigAssignment(const pl::Cluster& cluster,
                                                              const std::string& uuid) const {
  const auto device = mig_.nodes->Find(uuid);
  if (!device) return Result<pl::Assignment>::Error("assigned unknown MIG device " + uuid);
  pl::Assignment a{device->node, uint32_t{1} << device->gpu, -1, -1};
  // The node cuts a GPU as `tessera mig apply` places the counts (mig::Place), which may put the
  // instances at other start slots than the engine's layout of the same mix (MigLayoutsOf): the
  // replay's picture holds the engine's, and an instance is the one of the same profile and rank
  // (by start slot) there. Which mixes fit, and what an instance counts, are the same.
  const mig::Layout& now = mig_.nodes->LayoutOf(device->node, device->gpu);
  const pl::MigGpu& seen = cluster.mig_gpus(device->node)[static_cast<size_t>(device->gpu)];
  const mig::Layout* target = &seen.layout;
  if (seen.layout.Counts() != now.Counts()) {
    const std::vector<mig::Layout>& layouts = pl::MigLayoutsOf(*cluster.mig_model(device->node));
    target = nullptr;
    for (size_t k = 0; k < layouts.size() && target == nullptr; ++k) {
      if (layouts[k].Counts() == now.Counts()) {
        a.mig_layout = static_cast<int>(k);
        target = &layouts[k];
      }
    }
    if (target == nullptr) {
      return Result<pl::Assignment>::Error("GPU " + std::to_string(device->gpu) + " of node " +
                                           cluster.spec(device->node).name + " was cut into " +
                                           mig::SliceMap(now) + ", a mix the engine does not list");
    }
  }
  const mig::MigProfile* profile = nullptr;
  int rank = 0;
  for (const mig::PlacedInstance& p : now.instances) {
    if (p.start == device->start) profile = p.profile;
  }
  for (const mig::PlacedInstance& p : now.instances) {
    if (p.profile == profile && p.start < device->start) ++rank;
  }
  for (const mig::PlacedInstance& p : target->instances) {
    if (p.profile == profile && rank-- == 0) a.mig_start = p.start;
  }
  return a;
}

double ExtenderReplayScheduler::NextEvent(double now) const {
  if (mig_.nodes == nullptr) return std::numeric_limits<double>::infinity();
  double next = mig_.nodes->NextEvent(now);
  if (recut_nodes_ && waiting_ > 0) {
    const double p = mig_.recut_poll_s;
    double tick = std::floor(now / p + 1) * p;
    if (tick <= now) tick += p;
    next = std::min(next, tick);
  }
  return next;
}

Result<bool> ExtenderReplayScheduler::Advance(double now) {
  if (mig_.clock != nullptr) {
    mig_.clock->AdvanceTo(Nanos(static_cast<int64_t>(std::llround(now * 1e9))));
  }
  if (mig_.nodes == nullptr) return false;
  // The nodes' reconciles first, then the extender's pass of that instant.
  auto changed = mig_.nodes->Advance(now);
  if (!changed.ok()) return changed.status();
  bool any = *changed;
  const double p = mig_.recut_poll_s;
  const double tick = std::floor(now / p) * p;
  if (recut_nodes_ && waiting_ > 0 && tick > last_pass_) {
    last_pass_ = tick;
    if (Status s = AwaitExtender(live_pods_, waiting_, allocated_); !s.ok()) return s;
    const ExtenderApp::RecutPass pass = app_.RecutOnce();
    ++recut_passes_;
    recuts_written_ += pass.written;
    recuts_not_written_ += pass.not_written;
    any = any || pass.written > 0;
  }
  return any;
}

Result<MigExtenderRun> ReplayMigThroughExtender(const pl::Cluster& cluster,
                                                std::span<const pl::Request> pods,
                                                std::span<const pl::PodTimes> times,
                                                std::shared_ptr<const pl::TargetWorkload> workload,
                                                pl::ReplayOptions options,
                                                MigNodeOptions node_options,
                                                double recut_interval_s, double recut_poll_s) {
  k8s::TestApiServer api;
  if (Status s = api.Start(0); !s.ok()) return s;
  MigNodeStandin nodes(api, node_options);
  for (int n = 0; n < cluster.node_count(); ++n) {
    if (Status s = nodes.AddNode(cluster, n); !s.ok()) return s;
  }
  ManualClock clock;
  AppConfig config;
  config.api.server = api.url();
  config.listen_host = "127.0.0.1";
  config.listen_port = 0;
  config.quiet = true;
  config.state.workload = std::move(workload);
  config.state.clock = &clock;
  config.state.mig_recut_interval =
      std::chrono::milliseconds(static_cast<int64_t>(std::llround(recut_interval_s * 1000)));
  config.recut_poll = std::chrono::milliseconds(0);  // RecutOnce on the replay's clock
  ExtenderApp app(config);
  if (Status s = app.Start(); !s.ok()) return s;
  if (!app.WaitReady(std::chrono::seconds(30))) {
    return Status::Error("the extender did not list Nodes and Pods within 30 s");
  }
  ExtenderReplayScheduler scheduler(api, app, app.port(), cluster, {&nodes, &clock, recut_poll_s});
  options.skip_known_failures = false;  // every attempt through the verbs
  auto r = pl::ReplayWith(cluster, pods, times, scheduler, options);
  app.Stop();
  api.Stop();
  if (!r.ok()) return r.status();
  return MigExtenderRun{std::move(*r), nodes.counts(), scheduler.recuts_written(),
                        scheduler.recuts_not_written(), scheduler.rounds()};
}

}  // namespace tessera::extender::testing
