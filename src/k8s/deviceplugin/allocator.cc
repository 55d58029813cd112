// Allocator: finding the pod of an Allocate, checking its assignment, registering the container
// and answering kubelet (see the header for the design).
#include "k8s/deviceplugin/allocator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/text.h"
#include "k8s/deviceplugin/cdi.h"
#include "k8s/fit.h"
#include "k8s/quantity.h"
#include "mig/profiles.h"
#include "mps/mps.h"

namespace tessera::k8s {
namespace {

bool Pending(const PodView& p) { return !p.deleting && (p.phase.empty() || p.phase == "Pending"); }

std::string Describe(const AllocationRecord& r) {
  std::string gpus;
  for (const AllocatedGpu& g : r.gpus) {
    gpus += (gpus.empty() ? "" : ", ") + g.uuid + " " + FormatBytes(g.mem);
  }
  std::string out = "container " + r.container + " on " + gpus;
  if (r.core) out += ", " + std::to_string(r.core->value()) + "% of GPU time";
  if (r.weight != 1) out += ", weight " + std::to_string(r.weight);
  if (r.high_priority) out += ", high priority";
  if (r.registered) out += " (tesserad container " + r.id + ")";
  return out;
}

}  // namespace

Allocator::Allocator(AllocatorConfig config, const TesseradClient* tesserad, PodSource* pods,
                     EventSink* events)
    : config_(std::move(config)), tesserad_(tesserad), pods_(pods), events_(events) {}

Status Allocator::Load() {
  auto loaded = LoadCheckpoint(config_.checkpoint_path);
  if (!loaded.ok()) return loaded.status();
  std::lock_guard<std::mutex> lock(mu_);
  checkpoint_ = std::move(*loaded);
  return Status::Ok();
}

void Allocator::SetMode(NodeMode mode, ResourceNames names) {
  std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
  names_ = names;
  ServeModes();
}

void Allocator::ServeModes() {
  served_.clear();
  for (const std::string& r : ServedResources(mode_, names_)) served_.insert(r);
  for (const NodeGpu& g : node_gpus_) {
    if (!g.mode) continue;
    for (const std::string& r : ServedResources(*g.mode, names_)) served_.insert(r);
  }
}

NodeMode Allocator::ModeOf(const std::string& uuid) const {
  for (const NodeGpu& g : node_gpus_) {
    if (g.uuid == uuid && g.mode) return *g.mode;
  }
  return mode_;
}

NodeMode Allocator::ModeOf(const AllocationRecord& record) const {
  return record.gpus.empty() ? mode_ : ModeOf(record.gpus.front().uuid);
}

Result<NodeMode> Allocator::ModeOfGpus(const std::vector<AssignedGpu>& gpus) const {
  if (gpus.empty()) return mode_;
  const NodeMode first = ModeOf(gpus.front().uuid);
  for (const AssignedGpu& g : gpus) {
    const NodeMode m = ModeOf(g.uuid);
    if (m != first) {
      return Result<NodeMode>::Error(
          std::string(kAssignmentAnnotation) + " gives it " + gpus.front().uuid + " (mode " +
          std::string(NodeModeName(first)) + ") and " + g.uuid + " (mode " +
          std::string(NodeModeName(m)) + ") on node " + config_.node +
          "; a container's GPUs must be in one mode (labels " + kScheduleLabel + " and " +
          kGpuScheduleLabelPrefix + "<index>)");
    }
  }
  return first;
}

void Allocator::UpdateNodeGpus(
    const std::function<std::vector<NodeGpu>(const TenantsByGpu&)>& resolve) {
  std::lock_guard<std::mutex> lock(mu_);
  TenantsByGpu tenants;
  for (const AllocationRecord& r : checkpoint_.records) {
    for (const AllocatedGpu& g : r.gpus) {
      tenants[g.index].pods.insert(r.ns + "/" + r.pod);
      if (r.mode) tenants[g.index].mode = r.mode;
    }
  }
  node_gpus_ = resolve(tenants);
  ServeModes();
}

NodeMode Allocator::mode() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_;
}

void Allocator::SetNodeGpus(std::vector<NodeGpu> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  node_gpus_ = std::move(gpus);
  ServeModes();
}

bool Allocator::Serves(const std::string& resource) const {
  if (served_.count(resource) != 0) return true;
  return mode_ == NodeMode::kMig && MigProfileOfResource(resource, "").ok();
}

Status Allocator::Save() const { return SaveCheckpoint(config_.checkpoint_path, checkpoint_); }

std::string Allocator::ContainerId(const PodView& pod, const std::string& container) {
  return MakeContainerId(kContainerIdPrefix, pod.name, container, pod.uid + "/" + container);
}

std::map<std::string, uint64_t> Allocator::Steps(const ContainerView& c) const {
  std::map<std::string, uint64_t> steps;
  for (const auto& [name, quantity] : c.limits) {
    if (!Serves(name)) continue;
    auto q = ParseWholeQuantity(quantity, name);
    if (q.ok() && *q > 0) steps[name] = static_cast<uint64_t>(*q);
  }
  return steps;
}

std::optional<Allocator::Match> Allocator::Attribute(const std::string& resource, size_t n,
                                                     const std::vector<NodePod>& pods) const {
  struct Candidate {
    const NodePod* pod;
    int container;
    bool started;
  };
  std::vector<Candidate> matching;
  for (const NodePod& np : pods) {
    const PodView& p = np.view;
    if (!Pending(p) || checkpoint_.rejected.count(p.uid) != 0) continue;
    // kubelet goes through the containers in order, so the calls for one resource do too: the
    // pod's next container for `resource` is the first whose step for it is not served yet.
    // (Each resource on its own: kubelet leaves out a resource it has no plugin for.)
    bool started = false;
    int next = -1;
    for (size_t i = 0; i < p.containers.size(); ++i) {
      const AllocationRecord* rec = nullptr;
      for (const AllocationRecord& r : checkpoint_.records) {
        if (r.pod_uid == p.uid && r.container == p.containers[i].name) rec = &r;
      }
      started = started || (rec != nullptr && !rec->devices.empty());
      const std::map<std::string, uint64_t> steps = Steps(p.containers[i]);
      if (next < 0 && steps.count(resource) != 0 &&
          (rec == nullptr || rec->devices.count(resource) == 0)) {
        next = static_cast<int>(i);
      }
    }
    if (next < 0) continue;
    if (Steps(p.containers[static_cast<size_t>(next)]).at(resource) != n) continue;
    matching.push_back({&np, next, started});
  }
  if (matching.empty()) return std::nullopt;
  // A pod under way first (kubelet finishes a pod before the next), then kubelet's order.
  std::stable_sort(matching.begin(), matching.end(), [](const Candidate& a, const Candidate& b) {
    if (a.started != b.started) return a.started;
    return a.pod->order < b.pod->order;
  });
  Match m;
  m.pod = matching[0].pod;
  m.container = matching[0].container;
  if (!matching[0].started) {
    for (size_t i = 1; i < matching.size(); ++i) {
      if (!matching[i].started) m.also.push_back(matching[i].pod->view.Key());
    }
  }
  return m;
}

std::string Allocator::Waiting(const std::vector<NodePod>& pods) const {
  std::vector<std::string> lines;
  for (const NodePod& np : pods) {
    const PodView& p = np.view;
    if (!Pending(p)) continue;
    std::string steps;
    for (const ContainerView& c : p.containers) {
      for (const auto& [name, q] : Steps(c)) {
        steps += (steps.empty() ? "" : " ") + c.name + ":" + name + "=" + std::to_string(q);
      }
    }
    if (steps.empty()) continue;
    auto rejected = checkpoint_.rejected.find(p.uid);
    lines.push_back(p.Key() + " (" + steps + ")" +
                    (rejected != checkpoint_.rejected.end() ? " refused already" : ""));
  }
  return lines.empty() ? "none" : Join(lines, "; ");
}

Result<AllocationRecord> Allocator::Plan(const PodView& pod, const ContainerView& container,
                                         const TesseradStatus& status) const {
  const std::string who = "pod " + pod.Key() + " container " + container.name;
  auto fail = [&](const std::string& why) {
    return Result<AllocationRecord>::Error(who + ": " + why);
  };
  auto req = GpuRequestOf(container);
  if (!req.ok()) return fail(req.error());
  const std::string* annotation = pod.Annotation(kAssignmentAnnotation);
  // The container's mode: that of the GPUs its assignment names (the node's while it names none).
  NodeMode mode = mode_;
  if (annotation != nullptr) {
    if (auto peek = ParseAssignment(*annotation); peek.ok()) {
      if (const ContainerAssignment* c = peek->Find(container.name)) {
        auto m = ModeOfGpus(c->gpus);
        if (!m.ok()) return fail(m.error());
        mode = *m;
      }
    }
  }
  // The one fit rule (k8s/fit.h), on this node's shape as tesserad and the mode say it is.
  const placement::NodeShape shape = Shape(status, mode);
  if (const placement::FitResult fit = ShapeFitOf(*req, shape);
      fit != placement::FitResult::kFits) {
    return fail(ShapeRefusal(fit, *req, mode, shape) + " (node " + config_.node + ")");
  }
  if (annotation == nullptr) {
    return fail(std::string("the pod has no ") + kAssignmentAnnotation +
                " annotation, so it was not placed by tessera-extender (is kube-scheduler "
                "configured with the extender, and does the pod use that scheduler?); the device "
                "plugin hands out no GPU without a placement");
  }
  auto assignment = ParseAssignment(*annotation);
  if (!assignment.ok()) return fail(assignment.error());
  if (assignment->node != config_.node) {
    return fail(std::string(kAssignmentAnnotation) + " node=\"" + assignment->node +
                "\", but the pod is bound to node " + config_.node);
  }
  const ContainerAssignment* mine = assignment->Find(container.name);
  if (mine == nullptr) {
    std::vector<std::string> listed;
    for (const ContainerAssignment& c : assignment->containers) listed.push_back(c.name);
    return fail(std::string(kAssignmentAnnotation) + " has no entry for this container (it lists " +
                (listed.empty() ? "none" : Join(listed)) + ")");
  }
  if (mine->gpus.size() != req->Gpus()) {
    return fail(
        std::string(kAssignmentAnnotation) + " gives it " + std::to_string(mine->gpus.size()) +
        " GPU(s), but it asks for " + std::to_string(req->Gpus()) +
        (req->count != 0 ? " (" + std::string(GpuResourceName(GpuResource::kCount, req->ack)) + ")"
                         : " (one, when no gpu-count is asked)"));
  }
  AllocationRecord rec;
  rec.id = ContainerId(pod, container.name);
  rec.pod_uid = pod.uid;
  rec.ns = pod.ns;
  rec.pod = pod.name;
  rec.container = container.name;
  rec.init = container.init;
  rec.mode = mode;
  const bool whole = !req->mig() && (req->core >= 100 || (req->core == 0 && req->mem_gib == 0));
  uint64_t total = 0;
  uint32_t max_weight = 256;
  for (const AssignedGpu& g : mine->gpus) {
    const TesseradGpu* gpu = status.Gpu(g.uuid);
    if (gpu == nullptr) {
      std::vector<std::string> have;
      for (const TesseradGpu& h : status.gpus) have.push_back(h.uuid);
      return fail(std::string(kAssignmentAnnotation) + " names GPU " + g.uuid + ", which node " +
                  config_.node +
                  " does not have (its GPUs: " + (have.empty() ? "none" : Join(have)) + ")");
    }
    if (g.mem > gpu->total) {
      return fail(std::string(kAssignmentAnnotation) +
                  " mem_bytes=" + std::to_string(g.mem.count()) + " on " + g.uuid +
                  " is more than that GPU's " + std::to_string(gpu->total.count()) + " bytes");
    }
    if (mode == NodeMode::kExclusive && (g.mem != gpu->total || g.core.value() != 100)) {
      return fail("node " + config_.node + " is exclusive (whole GPUs only), but " +
                  kAssignmentAnnotation + " gives it " + FormatBytes(g.mem) + " and " +
                  std::to_string(g.core.value()) + "% of " + g.uuid);
    }
    if (mode == NodeMode::kMig) {
      if (Status s = CheckMigDevice(g, *req); !s.ok()) return fail(s.message());
    }
    if (whole) {
      // A whole GPU's cap is what the fit rule gives it (the extender writes the same).
      const Bytes cap = WholeGpuCap(*req, mode, gpu->total);
      if (g.mem > cap || g.mem.count() + 2 * kBytesPerMiB < cap.count()) {
        return fail(
            std::string(kAssignmentAnnotation) + " mem_bytes=" + std::to_string(g.mem.count()) +
            " on " + g.uuid + ", but a whole GPU" +
            (req->mem_gib != 0
                 ? " asked with " + std::string(GpuResourceName(GpuResource::kMem, req->ack)) +
                       "=" + std::to_string(req->mem_gib)
                 : std::string()) +
            " on a " + std::string(NodeModeName(mode)) + " node is capped at " +
            std::to_string(cap.count()) + " bytes");
      }
    }
    if (g.core != mine->gpus[0].core) {
      return fail(std::string(kAssignmentAnnotation) + " gives it core_percent " +
                  std::to_string(mine->gpus[0].core.value()) + " and " +
                  std::to_string(g.core.value()) +
                  " on different GPUs; tesserad applies one share per container on all its GPUs");
    }
    if (req->core != 0 && g.core.value() != static_cast<int>(req->core)) {
      return fail(std::string(kAssignmentAnnotation) + " core_percent=" +
                  std::to_string(g.core.value()) + " on " + g.uuid + ", but the container asks " +
                  std::string(GpuResourceName(GpuResource::kCore, req->ack)) + "=" +
                  std::to_string(req->core));
    }
    total += g.mem.count();
    max_weight = std::min(max_weight, gpu->max_inst);
    rec.gpus.push_back({g.uuid, gpu->index, g.mem, g.core});
  }
  if (req->mem_gib != 0 && !whole) {
    const uint64_t asked = req->mem_gib * kBytesPerGiB;
    const uint64_t slack = rec.gpus.size() * 2 * kBytesPerMiB;  // rounding to the 2 MiB granule
    if (total > asked || total + slack < asked) {
      return fail(std::string(kAssignmentAnnotation) + " caps its memory at " +
                  std::to_string(total) + " bytes in all, but it asks " +
                  std::string(GpuResourceName(GpuResource::kMem, req->ack)) + "=" +
                  std::to_string(req->mem_gib) + " (" + std::to_string(asked) + " bytes)");
    }
  }
  auto user = ParseUserAnnotations(pod.annotations, max_weight);
  if (!user.ok()) return fail(user.error());
  rec.weight = user->weight.value_or(1);
  rec.high_priority = user->high_priority.value_or(false);
  if ((mode == NodeMode::kCoreMem || mode == NodeMode::kMps) && rec.gpus[0].core.value() < 100) {
    rec.core = rec.gpus[0].core;
  }
  if (mode == NodeMode::kMps) {
    // MPS takes its memory limit in whole MiB: refused here rather than at the container's start.
    auto env = mps::MpsClientEnvironment({kContainerMpsPipeDir, "", ""}, rec.core, rec.gpus[0].mem);
    if (!env.ok()) return fail(std::string(kAssignmentAnnotation) + ": " + env.error());
  }
  return rec;
}

placement::NodeShape Allocator::Shape(const TesseradStatus& status, NodeMode mode) const {
  const mig::GpuModel* mig_model = nullptr;
  std::set<std::string> mig_gpus;
  for (const NodeGpu& g : node_gpus_) {
    if (!g.mig) continue;
    mig_gpus.insert(g.mig->gpu);
    if (mig_model == nullptr) {
      if (auto m = mig::FindGpuModel(g.mig->model, "model"); m.ok()) mig_model = *m;
    }
  }
  int in_mode = 0;
  for (const TesseradGpu& g : status.gpus) in_mode += ModeOf(g.uuid) == mode ? 1 : 0;
  const int gpus = mode == NodeMode::kMig ? static_cast<int>(mig_gpus.size()) : in_mode;
  return NodeShapeOf(mode, gpus, status.gpus.empty() ? Bytes(0) : status.gpus.front().total,
                     mig_model);
}

Status Allocator::CheckMigDevice(const AssignedGpu& g, const GpuRequest& req) const {
  const NodeGpu* device = nullptr;
  std::vector<std::string> listed;
  for (const NodeGpu& n : node_gpus_) {
    if (!n.mig) continue;
    listed.push_back(n.uuid + " (" + n.mig->profile + ")");
    if (n.uuid == g.uuid) device = &n;
  }
  if (device == nullptr) {
    return Status::Error(std::string(kAssignmentAnnotation) + " names " + g.uuid +
                         ", which is no MIG device of node " + config_.node +
                         " (its MIG devices: " + (listed.empty() ? "none" : Join(listed, ", ")) +
                         ")");
  }
  if (device->mig->profile != req.mig_profile) {
    return Status::Error(std::string(kAssignmentAnnotation) + " gives it " + g.uuid + ", a " +
                         device->mig->profile + " instance, but it asks " +
                         MigResourceName(req.mig_profile));
  }
  if (g.core.value() != 100) {
    return Status::Error(std::string(kAssignmentAnnotation) +
                         " core_percent=" + std::to_string(g.core.value()) + " on MIG device " +
                         g.uuid + "; expected 100: a MIG instance is its container's alone");
  }
  return Status::Ok();
}

Status Allocator::Register(AllocationRecord* rec) const {
  auto status = tesserad_->Status();
  if (!status.ok()) return status.status();
  IsolatedContainer c;
  c.id = rec->id;
  std::vector<int> indices;
  for (const AllocatedGpu& g : rec->gpus) {
    c.uuids.push_back(g.uuid);
    c.limits.push_back(g.mem);
    indices.push_back(g.index);
  }
  c.core = rec->core;
  c.weight = rec->weight;
  c.high_priority = rec->high_priority;
  c.identify = config_.cdi && !config_.oci_hook.empty();
  const bool mps = ModeOf(*rec) == NodeMode::kMps;
  auto root = RegisterIsolated(*tesserad_, c, indices, status->gpus.size(), mps, config_.node);
  if (!root.ok()) {
    rec->registered = false;
    return Status::Error(root.error() +
                         (mps ? "; the container gets no GPU without MPS on an mps node" : ""));
  }
  rec->registered = true;
  rec->mps_root = *root;
  return Status::Ok();
}

// The node's side of a container's edits; the OCI hook only with CDI (a response of mounts and
// environment has no hooks).
static NodeMounts MountsOf(const AllocatorConfig& config) {
  NodeMounts m;
  m.container_socket_dir = config.container_socket_dir;
  m.shim_dir = config.shim_dir;
  m.preload_file = config.preload_file;
  m.sim_library = config.sim_library;
  m.sim_state = config.sim_state;
  m.sim_env = config.sim_env;
  if (config.cdi) {
    m.oci_hook = config.oci_hook;
    m.tesserad_socket = config.tesserad_socket;
  }
  return m;
}

CdiEdits Allocator::Edits(const AllocationRecord& rec) const {
  IsolatedContainer c;
  c.id = rec.id;
  for (const AllocatedGpu& g : rec.gpus) {
    c.uuids.push_back(g.uuid);
    c.limits.push_back(g.mem);
  }
  c.core = rec.core;
  c.weight = rec.weight;
  c.high_priority = rec.high_priority;
  c.mps_root = rec.mps_root;
  return IsolatedContainerEdits(MountsOf(config_), c, rec.registered);
}

ContainerResponse Allocator::Response(const AllocationRecord& rec) const {
  ContainerResponse out;
  std::vector<std::string> uuids;
  for (const AllocatedGpu& g : rec.gpus) uuids.push_back(g.uuid);
  if (config_.cdi) {
    // Everything else is in the container's CDI spec, applied by the runtime.
    if (config_.sim_library.empty()) {
      for (const std::string& u : uuids) out.cdi_devices.push_back("nvidia.com/gpu=" + u);
    }
    if (!rec.cdi_file.empty()) out.cdi_devices.push_back(CdiQualifiedName(rec.id));
    if (out.cdi_devices.empty()) out.envs["NVIDIA_VISIBLE_DEVICES"] = Join(uuids);
    return out;
  }
  const CdiEdits edits = Edits(rec);
  for (const auto& [k, v] : edits.env) out.envs[k] = v;
  out.envs["NVIDIA_VISIBLE_DEVICES"] = Join(uuids);
  for (const CdiEdits::Mount& m : edits.mounts) {
    out.mounts.push_back({m.container_path, m.host_path, m.read_only});
  }
  return out;
}

Result<ContainerResponse> Allocator::Allocate(const std::string& resource,
                                              const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!Serves(resource)) {
    return Result<ContainerResponse>::Error("Allocate of " + resource + ": node " + config_.node +
                                            " in mode " + std::string(NodeModeName(mode_)) +
                                            " does not serve it");
  }
  if (ids.empty()) {
    return Result<ContainerResponse>::Error("Allocate of " + resource + " with no device IDs");
  }
  std::vector<NodePod> pods = pods_->Pods();
  std::optional<Match> match = Attribute(resource, ids.size(), pods);
  if (!match) {
    // kubelet may admit a pod the cache has not seen yet.
    if (Status s = pods_->Refresh(); !s.ok()) {
      std::fprintf(stderr, "tessera-device-plugin: listing pods: %s\n", s.message().c_str());
    }
    pods = pods_->Pods();
    match = Attribute(resource, ids.size(), pods);
  }
  if (!match) {
    return Result<ContainerResponse>::Error(
        "no pod bound to node " + config_.node + " is waiting for " + resource + "=" +
        std::to_string(ids.size()) +
        " at its next container asking for it; waiting here: " + Waiting(pods));
  }
  const PodView& pod = match->pod->view;
  const ContainerView& container = pod.containers[static_cast<size_t>(match->container)];
  AllocationRecord* rec = checkpoint_.Find(pod.uid, container.name);
  auto refuse = [&](const std::string& why, bool permanent) {
    if (permanent) {
      checkpoint_.rejected[pod.uid] = why;
      (void)Save();
    }
    std::fprintf(stderr, "tessera-device-plugin: %s\n", why.c_str());
    if (events_ != nullptr) events_->PodEvent(pod, "TesseraAllocateFailed", why, true);
    return Result<ContainerResponse>::Error(why);
  };
  if (rec == nullptr) {
    if (Status s = SimStateReachable(MountsOf(config_)); !s.ok()) {
      return refuse("pod " + pod.Key() + " container " + container.name + ": " + s.message(),
                    false);
    }
    auto status = tesserad_->Status();
    if (!status.ok()) {
      return refuse("pod " + pod.Key() + " container " + container.name + ": " + status.error() +
                        "; no container is set up without it",
                    true);
    }
    auto plan = Plan(pod, container, *status);
    if (!plan.ok()) return refuse(plan.error(), true);
    plan->also_waiting = match->also;
    if (!match->also.empty()) {
      std::fprintf(stderr,
                   "tessera-device-plugin: %s=%zu went to pod %s by kubelet's admission order; "
                   "also waiting with the same request: %s (checked against the processes' "
                   "cgroups once they run)\n",
                   resource.c_str(), ids.size(), pod.Key().c_str(), Join(match->also).c_str());
    }
    if (ModeIsolates(ModeOf(*plan))) {
      if (Status s = Register(&*plan); !s.ok())
        return refuse("pod " + pod.Key() + " container " + container.name + ": " + s.message(),
                      true);
    }
    if (config_.cdi && plan->registered) {
      auto written = WriteCdiSpec(config_.cdi_dir, plan->id, Edits(*plan));
      if (!written.ok()) {
        (void)tesserad_->Unregister(plan->id);
        return refuse("pod " + pod.Key() + " container " + container.name + ": " + written.error(),
                      true);
      }
      plan->cdi_file = *written;
    }
    checkpoint_.records.push_back(std::move(*plan));
    rec = &checkpoint_.records.back();
    if (events_ != nullptr) events_->PodEvent(pod, "TesseraAllocated", Describe(*rec), false);
  }
  rec->devices[resource] = ids;
  if (Status s = Save(); !s.ok()) {
    return Result<ContainerResponse>::Error("pod " + pod.Key() + ": " + s.message());
  }
  return Response(*rec);
}

std::vector<std::string> Allocator::Prefer(const std::string& resource,
                                           const std::vector<std::string>& available,
                                           const std::vector<std::string>& must_include,
                                           size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out = must_include;
  std::vector<std::string> gpus;
  std::vector<NodePod> pods = pods_->Pods();
  std::optional<Match> match = Attribute(resource, size, pods);
  if (!match) {
    // As in Allocate: kubelet asks right after admitting a pod the cache may not have seen yet.
    if (Status s = pods_->Refresh(); !s.ok()) {
      std::fprintf(stderr, "tessera-device-plugin: listing pods: %s\n", s.message().c_str());
    }
    pods = pods_->Pods();
    match = Attribute(resource, size, pods);
  }
  if (match) {
    const PodView& pod = match->pod->view;
    if (const std::string* a = pod.Annotation(kAssignmentAnnotation)) {
      if (auto parsed = ParseAssignment(*a); parsed.ok()) {
        if (const ContainerAssignment* c =
                parsed->Find(pod.containers[static_cast<size_t>(match->container)].name)) {
          for (const AssignedGpu& g : c->gpus) gpus.push_back(g.uuid);
        }
      }
    }
  }
  auto taken = [&](const std::string& id) {
    return std::find(out.begin(), out.end(), id) != out.end();
  };
  // Round robin over the assignment's GPUs, so the IDs kubelet records (and the pod-resources
  // API reports to monitoring) name the GPUs the container runs on.
  bool added = true;
  while (out.size() < size && added) {
    added = false;
    for (const std::string& uuid : gpus) {
      for (const std::string& id : available) {
        if (out.size() < size && GpuOfDevice(id) == uuid && !taken(id)) {
          out.push_back(id);
          added = true;
          break;
        }
      }
    }
  }
  for (const std::string& id : available) {
    if (out.size() >= size) break;
    if (!taken(id)) out.push_back(id);
  }
  return out;
}

Status Allocator::PreStart(const std::string& resource, const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  bool isolates = ModeIsolates(mode_);
  for (const NodeGpu& g : node_gpus_) isolates = isolates || (g.mode && ModeIsolates(*g.mode));
  if (!isolates) return Status::Ok();
  std::set<std::string> want(ids.begin(), ids.end());
  std::vector<AllocationRecord*> recs;
  for (AllocationRecord& r : checkpoint_.records) {
    auto it = r.devices.find(resource);
    if (it != r.devices.end() &&
        std::set<std::string>(it->second.begin(), it->second.end()) == want) {
      recs.push_back(&r);
    }
  }
  if (recs.empty()) {
    return Status::Error(
        "PreStartContainer of " + resource + " [" + Join(ids) +
        "]: no allocation of these devices is recorded by the device plugin on node " +
        config_.node + " (was its checkpoint " + config_.checkpoint_path + " lost?)");
  }
  if (std::none_of(recs.begin(), recs.end(),
                   [&](const AllocationRecord* r) { return ModeIsolates(ModeOf(*r)); })) {
    return Status::Ok();
  }
  auto status = tesserad_->Status();
  if (!status.ok()) {
    return Status::Error("container of pod " + recs[0]->ns + "/" + recs[0]->pod +
                         " cannot start: " + status.error() +
                         "; without it the container would run unisolated");
  }
  for (AllocationRecord* r : recs) {
    if (r->registered && status->Find(r->id) == nullptr) {
      if (Status s = Register(r); !s.ok()) return s;
      std::fprintf(stderr, "tessera-device-plugin: registered %s again (tesserad had lost it)\n",
                   r->id.c_str());
    }
  }
  return Save();
}

Checkpoint Allocator::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checkpoint_;
}

std::set<std::string> Allocator::CompletePods(const std::vector<NodePod>& pods) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> out;
  for (const NodePod& np : pods) {
    bool any = false, all = true;
    for (const ContainerView& c : np.view.containers) {
      const std::map<std::string, uint64_t> steps = Steps(c);
      const AllocationRecord* rec = nullptr;
      for (const AllocationRecord& r : checkpoint_.records) {
        if (r.pod_uid == np.view.uid && r.container == c.name) rec = &r;
      }
      for (const auto& [name, q] : steps) {
        any = true;
        all = all && rec != nullptr && rec->devices.count(name) != 0;
      }
    }
    if (any && all) out.insert(np.view.uid);
  }
  return out;
}

std::vector<std::string> Allocator::Release(const std::set<std::string>& gone) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  bool changed = false;
  for (auto it = checkpoint_.records.begin(); it != checkpoint_.records.end();) {
    if (gone.count(it->pod_uid) == 0) {
      ++it;
      continue;
    }
    std::string line = "released " + it->ns + "/" + it->pod + " container " + it->container;
    if (it->registered) {
      auto left = tesserad_->Unregister(it->id);
      if (!left.ok()) {
        // Said once; the reconciler tries again every round until tesserad answers.
        if (release_failing_.insert(it->id).second) {
          lines.push_back("cannot release " + it->id + " yet (trying again): " + left.error());
        }
        ++it;
        continue;
      }
      release_failing_.erase(it->id);
      line += " (tesserad container " + it->id +
              (*left != 0 ? ", " + std::to_string(*left) + " process(es) still exiting" : "") + ")";
    }
    if (!it->cdi_file.empty()) unlink(it->cdi_file.c_str());
    lines.push_back(line);
    it = checkpoint_.records.erase(it);
    changed = true;
  }
  for (const std::string& uid : gone) changed = checkpoint_.rejected.erase(uid) != 0 || changed;
  if (changed) (void)Save();
  return lines;
}

std::vector<std::string> Allocator::Resync() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  auto read = tesserad_->Status();
  if (!read.ok()) return lines;  // the reconciler's own read reports tesserad's absence
  const TesseradStatus& status = *read;
  for (AllocationRecord& r : checkpoint_.records) {
    if (r.registered && status.Find(r.id) == nullptr) {
      Status s = Register(&r);
      lines.push_back(s.ok() ? "registered " + r.id + " again (tesserad had lost it)"
                             : "cannot register " + r.id + " again: " + s.message());
    }
  }
  for (const TesseradContainer& c : status.containers) {
    if (c.id.rfind(kContainerIdPrefix, 0) != 0 || checkpoint_.FindId(c.id) != nullptr) continue;
    auto left = tesserad_->Unregister(c.id);
    lines.push_back(left.ok() ? "unregistered " + c.id + ", which no pod of this node owns"
                              : "cannot unregister " + c.id + ": " + left.error());
  }
  return lines;
}

void Allocator::ForgetRejected(const std::set<std::string>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = false;
  for (auto it = checkpoint_.rejected.begin(); it != checkpoint_.rejected.end();) {
    if (live.count(it->first) == 0) {
      it = checkpoint_.rejected.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  if (changed) (void)Save();
}

}  // namespace tessera::k8s
