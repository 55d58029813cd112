// DevicePluginServer: gRPC servers per resource, kubelet registration and restarts, the API
// server's watches, and the reconciler (see the header).
#include "k8s/deviceplugin/plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "k8s/deviceplugin/pod_cgroup.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::k8s {

namespace pb = ::v1beta1;
using namespace std::chrono_literals;

namespace {

void Log(const std::string& line) {
  std::fprintf(stderr, "tessera-device-plugin: %s\n", line.c_str());
}

}  // namespace

std::string SocketNameOf(const std::string& resource) {
  std::string name = resource;
  const size_t slash = name.find('/');
  std::string vendor = name.substr(0, slash);
  vendor = vendor.substr(0, vendor.find('.'));  // tessera.io -> tessera, aliyun.com -> aliyun
  return vendor + "-" + name.substr(slash + 1) + ".sock";
}

// The pods bound to this node: a Reflector's cache, in kubelet's admission order.
class DevicePluginServer::NodePods : public PodSource {
 public:
  NodePods(ApiClient* api, const std::string& node, std::function<void()> changed)
      : api_(api), selector_("spec.nodeName=" + node), changed_(std::move(changed)) {
    ListOptions o;
    o.field_selector = selector_;
    reflector_ = std::make_unique<Reflector>(
        api, "/api/v1/pods", o,
        Reflector::Handlers{[this](const std::vector<Json>& items) { Replace(items); },
                            [this](const WatchEvent& e) { OnEvent(e); }});
  }
  void Start() { reflector_->Start(); }
  void Stop() { reflector_->Stop(); }
  bool WaitSynced(std::chrono::milliseconds t) { return reflector_->WaitSynced(t); }
  bool Synced() {
    std::lock_guard<std::mutex> lock(mu_);
    return synced_;
  }

  std::vector<NodePod> Pods() const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<NodePod> out;
    for (const auto& [uid, p] : by_uid_) out.push_back(p);
    std::sort(out.begin(), out.end(),
              [](const NodePod& a, const NodePod& b) { return a.order < b.order; });
    return out;
  }

  Status Refresh() override {
    ListOptions o;
    o.field_selector = selector_;
    auto list = api_->ListPods("", o);
    if (!list.ok()) return list.status();
    std::vector<Json> items;
    for (const Json& p : (*list)["items"]) items.push_back(p);
    Replace(items);
    return Status::Ok();
  }

 private:
  // A (re)list: pods already known keep their place; new ones follow, by creation time, which is
  // how kubelet orders a batch of pods it receives together.
  void Replace(const std::vector<Json>& items) {
    std::vector<PodView> fresh;
    std::map<std::string, NodePod> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Json& item : items) {
        auto view = PodFromJson(item);
        if (!view.ok()) continue;
        auto known = by_uid_.find(view->uid);
        if (known != by_uid_.end()) {
          next[view->uid] = {*view, known->second.order};
        } else {
          fresh.push_back(*view);
        }
      }
      std::sort(fresh.begin(), fresh.end(), [](const PodView& a, const PodView& b) {
        if (a.creation_timestamp != b.creation_timestamp)
          return a.creation_timestamp < b.creation_timestamp;
        return a.Key() < b.Key();
      });
      for (PodView& v : fresh) next[v.uid] = {v, next_order_++};
      by_uid_.swap(next);
      synced_ = true;
    }
    changed_();
  }
  void OnEvent(const WatchEvent& e) {
    auto view = PodFromJson(e.object);
    if (!view.ok()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (e.type == "DELETED") {
        by_uid_.erase(view->uid);
      } else {
        auto it = by_uid_.find(view->uid);
        if (it == by_uid_.end()) {
          by_uid_[view->uid] = {*view, next_order_++};  // bound here just now
        } else {
          it->second.view = *view;
        }
      }
    }
    changed_();
  }

  ApiClient* api_;
  std::string selector_;
  std::function<void()> changed_;
  std::unique_ptr<Reflector> reflector_;
  mutable std::mutex mu_;
  std::map<std::string, NodePod> by_uid_;
  uint64_t next_order_ = 1;
  bool synced_ = false;
};

// Events on pods and on the node, shown by kubectl describe.
class DevicePluginServer::ApiEvents : public EventSink {
 public:
  ApiEvents(ApiClient* api, std::string node) : api_(api), node_(std::move(node)) {}
  void PodEvent(const PodView& pod, const std::string& reason, const std::string& message,
                bool warning) override {
    EventSpec e;
    e.kind = "Pod";
    e.ns = pod.ns;
    e.name = pod.name;
    e.uid = pod.uid;
    e.reason = reason;
    e.message = message;
    e.warning = warning;
    e.component = "tessera-device-plugin";
    e.host = node_;
    if (auto r = api_->CreateEvent(e); !r.ok())
      Log("event on pod " + pod.Key() + ": " + r.error().message);
  }
  void NodeEvent(const std::string& uid, const std::string& reason, const std::string& message) {
    EventSpec e;
    e.kind = "Node";
    e.name = node_;
    e.uid = uid;
    e.reason = reason;
    e.message = message;
    e.component = "tessera-device-plugin";
    e.host = node_;
    if (auto r = api_->CreateEvent(e); !r.ok())
      Log("event on node " + node_ + ": " + r.error().message);
  }

 private:
  ApiClient* api_;
  std::string node_;
};

// One extended resource's gRPC server on its own socket.
class DevicePluginServer::ResourceServer final : public pb::DevicePlugin::Service {
 public:
  ResourceServer(DevicePluginServer* owner, std::string resource, std::string socket)
      : owner_(owner), resource_(std::move(resource)), socket_(std::move(socket)) {}
  ~ResourceServer() override { Stop(); }

  Status Start() {
    unlink(socket_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (!server_) return Status::Error("cannot serve " + resource_ + " on " + socket_);
    return Status::Ok();
  }
  void Stop() {
    if (!server_) return;
    stopping_.store(true);
    owner_->wake_.notify_all();
    server_->Shutdown(std::chrono::system_clock::now() + 2s);
    server_->Wait();
    server_.reset();
    unlink(socket_.c_str());
  }
  bool SocketExists() const {
    struct stat st {};
    return stat(socket_.c_str(), &st) == 0;
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const pb::Empty*,
                                      pb::DevicePluginOptions* out) override {
    out->set_pre_start_required(true);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const pb::Empty*,
                            grpc::ServerWriter<pb::ListAndWatchResponse>* writer) override {
    uint64_t sent = 0;
    while (!ctx->IsCancelled() && !stopping_.load() && !owner_->stop_.load()) {
      uint64_t version = 0;
      std::vector<Device> devices;
      {
        std::unique_lock<std::mutex> lock(owner_->mu_);
        owner_->wake_.wait_for(lock, 1s, [&] {
          return owner_->devices_version_ != sent || stopping_.load() || owner_->stop_.load();
        });
        if (stopping_.load() || owner_->stop_.load()) break;
        if (owner_->devices_version_ == sent) continue;
      }
      devices = owner_->DevicesFor(resource_, &version);
      pb::ListAndWatchResponse response;
      for (const Device& d : devices) {
        pb::Device* out = response.add_devices();
        out->set_id(d.id);
        out->set_health(d.healthy ? "Healthy" : "Unhealthy");
      }
      if (!writer->Write(response)) break;
      sent = version;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const pb::PreferredAllocationRequest* req,
                                      pb::PreferredAllocationResponse* out) override {
    for (const pb::ContainerPreferredAllocationRequest& c : req->container_requests()) {
      const std::vector<std::string> available(c.available_deviceids().begin(),
                                               c.available_deviceids().end());
      const std::vector<std::string> must(c.must_include_deviceids().begin(),
                                          c.must_include_deviceids().end());
      const size_t size = static_cast<size_t>(std::max(c.allocation_size(), 0));
      auto* r = out->add_container_responses();
      for (const std::string& id : owner_->allocator_->Prefer(resource_, available, must, size)) {
        r->add_deviceids(id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const pb::AllocateRequest* req,
                        pb::AllocateResponse* out) override {
    for (const pb::ContainerAllocateRequest& c : req->container_requests()) {
      const std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
      auto answer = owner_->allocator_->Allocate(resource_, ids);
      if (!answer.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, answer.error());
      pb::ContainerAllocateResponse* r = out->add_container_responses();
      for (const auto& [k, v] : answer->envs) (*r->mutable_envs())[k] = v;
      for (const ContainerResponse::Mount& m : answer->mounts) {
        pb::Mount* mount = r->add_mounts();
        mount->set_container_path(m.container_path);
        mount->set_host_path(m.host_path);
        mount->set_read_only(m.read_only);
      }
      for (const std::string& name : answer->cdi_devices) r->add_cdi_devices()->set_name(name);
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const pb::PreStartContainerRequest* req,
                                 pb::PreStartContainerResponse*) override {
    const std::vector<std::string> ids(req->devices_ids().begin(), req->devices_ids().end());
    Status s = owner_->allocator_->PreStart(resource_, ids);
    if (!s.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, s.message());
    return grpc::Status::OK;
  }

 private:
  DevicePluginServer* owner_;
  std::string resource_;
  std::string socket_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> stopping_{false};
};

DevicePluginServer::DevicePluginServer(PluginOptions options, ApiClient* api)
    : options_(std::move(options)),
      api_(api),
      tesserad_(options_.tesserad_socket),
      mig_lister_(options_.nvml_library) {}

DevicePluginServer::~DevicePluginServer() { Stop(); }

Status DevicePluginServer::Start() {
  pods_ = std::make_unique<NodePods>(api_, options_.node, [this] {
    reconcile_now_.store(true);
    wake_.notify_all();
  });
  events_ = std::make_unique<ApiEvents>(api_, options_.node);
  allocator_ =
      std::make_unique<Allocator>(options_.allocator, &tesserad_, pods_.get(), events_.get());
  if (Status s = allocator_->Load(); !s.ok()) return s;
  auto node = api_->GetNode(options_.node);
  if (!node.ok()) {
    return Status::Error("node " + options_.node + ": " + node.error().message +
                         " (is --node-name, or NODE_NAME from the downward API, right?)");
  }
  ApplyNode(*node);
  node_watch_ = NodeReflector(api_, options_.node, [this](const Json& n) { ApplyNode(n); });
  node_watch_->Start();
  pods_->Start();
  pods_->WaitSynced(10s);
  Reconcile();
  reconciler_ = std::thread([this] { ReconcileLoop(); });
  kubelet_watcher_ = std::thread([this] { KubeletLoop(); });
  return Status::Ok();
}

void DevicePluginServer::Stop() {
  if (stop_.exchange(true)) return;
  wake_.notify_all();
  if (reconciler_.joinable()) reconciler_.join();
  if (kubelet_watcher_.joinable()) kubelet_watcher_.join();
  {
    std::lock_guard<std::mutex> lock(serve_mu_);
    servers_.clear();  // each stops and removes its socket
  }
  if (node_watch_) node_watch_->Stop();
  if (pods_) pods_->Stop();
}

std::vector<std::string> DevicePluginServer::ServedResources() const {
  std::lock_guard<std::mutex> lock(serve_mu_);
  std::vector<std::string> out;
  for (const auto& [r, s] : servers_) out.push_back(r);
  return out;
}

std::optional<NodeMode> DevicePluginServer::mode() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mode_;
}

void DevicePluginServer::ApplyNode(const Json& node) {
  auto view = NodeFromJson(node);
  if (!view.ok()) return;
  auto mode = NodeModeFromLabels(view->labels, options_.default_mode);
  auto own = GpuModesFromLabels(view->labels);
  bool changed = false, own_changed = false;
  std::optional<NodeMode> now;
  std::string own_refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    node_ = node;
    if (!own.ok()) {
      if (own.error() != bad_gpu_label_) {
        bad_gpu_label_ = own.error();
        own_refused = own.error() + "; every GPU keeps the mode it has";
        Log(own_refused);
      }
    } else {
      bad_gpu_label_.clear();
      own_changed = *own != wanted_modes_;
      wanted_modes_ = *own;
    }
    if (!mode.ok()) {
      if (mode.error() != bad_label_) {
        bad_label_ = mode.error();
        Log(mode.error() + (mode_ ? "; the node stays in mode " + std::string(NodeModeName(*mode_))
                                  : std::string("; no GPU resource is served until it is fixed")));
      } else {
        mode = Result<NodeMode>::Error("");  // said already
      }
    } else {
      bad_label_.clear();
      changed = !mode_ || *mode_ != *mode;
      if (changed && own_modes_ && mode_) {
        // A GPU served in the node's old mode keeps it until ResolveModes has looked at its
        // tenants.
        for (NodeGpu& g : gpus_) {
          if (!g.mode) g.mode = *mode_;
        }
      }
      mode_ = *mode;
      if (changed) ++devices_version_;
    }
    now = mode_;
  }
  if (changed || own_changed) reconcile_now_.store(true);  // GPUs' modes; a mig node's MIG devices
  if (!own_refused.empty()) events_->NodeEvent(view->uid, "TesseraBadLabel", own_refused);
  if (!mode.ok()) {
    if (!mode.error().empty()) {
      events_->NodeEvent(
          view->uid, "TesseraBadLabel",
          mode.error() + (now ? "; the node stays in mode " + std::string(NodeModeName(*now))
                              : std::string("; no GPU resource is served until it is fixed")));
    }
  } else if (changed) {
    Log("node " + options_.node + " is in mode " + std::string(NodeModeName(*mode)));
    allocator_->SetMode(*mode, options_.names);
  }
  if (changed || own_changed) wake_.notify_all();  // the kubelet loop serves the modes' resources
}

std::vector<NodeGpu> DevicePluginServer::ResolveModes(std::vector<NodeGpu> gpus,
                                                      const Allocator::TenantsByGpu& tenants,
                                                      const std::optional<std::set<int>>& mps,
                                                      std::vector<std::string>* changed,
                                                      std::vector<std::string>* held) {
  if (!mode_ || *mode_ == NodeMode::kMig) {
    // A mig node's devices are its MIG instances: GPUs' own modes are not served there.
    if (mode_ && !wanted_modes_.empty() && held_.count(-1) == 0) {
      held->push_back(std::string("node ") + options_.node + " is in mode mig: the labels " +
                      kGpuScheduleLabelPrefix + "<index> are not served on a mig node");
      held_[-1] = NodeMode::kMig;
    }
    for (NodeGpu& g : gpus) g.mode.reset();
    applied_modes_.clear();
    own_modes_ = false;
    mps_wanted_.clear();
    return gpus;
  }
  std::set<int> mps_wanted;
  if (wanted_modes_.empty() || *mode_ != NodeMode::kMig) held_.erase(-1);
  const bool whole_node = wanted_modes_.empty() && !own_modes_;
  bool own = false;
  for (NodeGpu& g : gpus) {
    auto w = wanted_modes_.find(g.index);
    const NodeMode target = w != wanted_modes_.end() ? w->second : *mode_;
    auto a = applied_modes_.find(g.index);
    auto t = tenants.find(g.index);
    // A GPU seen for the first time (the plugin just started) is in its tenants' mode, if any.
    NodeMode current = a != applied_modes_.end()              ? a->second
                       : t != tenants.end() && t->second.mode ? *t->second.mode
                                                              : target;
    if (current != target && !whole_node && t != tenants.end() && !t->second.pods.empty()) {
      auto h = held_.find(g.index);
      if (h == held_.end() || h->second != target) {
        std::string pods;
        for (const std::string& p : t->second.pods) pods += (pods.empty() ? "" : ", ") + p;
        held->push_back("GPU " + std::to_string(g.index) + " (" + g.uuid + ") of node " +
                        options_.node + " stays in mode " + std::string(NodeModeName(current)) +
                        ", not " + std::string(NodeModeName(target)) + ": pods run on it (" + pods +
                        "); it changes when they are gone");
        held_[g.index] = target;
      }
    } else {
      if (current != target && !whole_node) {
        changed->push_back("GPU " + std::to_string(g.index) + " (" + g.uuid + ") of node " +
                           options_.node + " is in mode " + std::string(NodeModeName(target)));
      }
      current = target;
      held_.erase(g.index);
    }
    if (current == NodeMode::kMps) mps_wanted.insert(g.index);
    // In or out of mps only as tesserad's MPS follows (SyncMps asks it): until then the GPU keeps
    // the mode it was served in (a GPU new to the plugin: the node's, where that is not mps).
    const bool runs = mps && mps->count(g.index) != 0;
    if (mps && (current == NodeMode::kMps) != runs) {
      NodeMode keep = NodeMode::kMps;
      if (a != applied_modes_.end() && (a->second == NodeMode::kMps) == runs) {
        keep = a->second;
      } else if (runs) {
        keep = t != tenants.end() && !t->second.pods.empty() ? current : NodeMode::kMps;
      } else if (a != applied_modes_.end() && a->second != NodeMode::kMps) {
        keep = a->second;
      } else if (*mode_ != NodeMode::kMps) {
        keep = *mode_;
      }
      current = keep;
    }
    applied_modes_[g.index] = current;
    g.mode = current != *mode_ ? std::optional<NodeMode>(current) : std::nullopt;
    own = own || g.mode.has_value();
  }
  own_modes_ = own;
  mps_wanted_ = std::move(mps_wanted);
  return gpus;
}

bool DevicePluginServer::SyncMps(const TesseradStatus& status) {
  std::set<int> wanted, running;
  std::string uid;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wanted = mps_wanted_;
    if (auto view = NodeFromJson(node_); view.ok()) uid = view->uid;
  }
  for (const TesseradGpu& g : status.gpus) {
    if (g.mps) running.insert(g.index);
  }
  if (wanted == running) {
    std::lock_guard<std::mutex> lock(mu_);
    mps_refused_.clear();
    return false;
  }
  std::string refused;
  bool changed = false;
  if (status.mps_root.empty()) {
    refused = "tesserad at " + options_.tesserad_socket +
              " runs no MPS control daemons: GPUs labelled mps stay in the mode they have until "
              "it does (start it with --mps-gpus none, --mps-control and --mps-dir)";
  } else if (!mps_refused_.empty() && wanted == mps_asked_ &&
             std::chrono::steady_clock::now() - mps_asked_at_ < std::chrono::seconds(3)) {
    return false;  // refused a moment ago: asked again shortly
  } else {
    mps_asked_ = wanted;
    mps_asked_at_ = std::chrono::steady_clock::now();
    auto set = tesserad_.SetMpsGpus(wanted);
    changed = !set.ok() || *set != running;
    if (!set.ok()) refused = set.error() + "; those GPUs stay in the mode they have";
  }
  if (refused.empty()) return changed;
  bool say = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    say = refused != mps_refused_;
    mps_refused_ = refused;
  }
  if (say) {
    Log(refused);
    events_->NodeEvent(uid, "TesseraModeChangeHeld", refused);
  }
  return changed;
}

void DevicePluginServer::SetGpus(std::vector<NodeGpu> gpus, std::optional<std::set<int>> mps) {
  std::vector<std::string> changed, held;
  bool differ = false;
  std::string uid;
  allocator_->UpdateNodeGpus([&](const Allocator::TenantsByGpu& tenants) {
    std::lock_guard<std::mutex> lock(mu_);
    gpus = ResolveModes(std::move(gpus), tenants, mps, &changed, &held);
    if (gpus != gpus_) {
      gpus_ = gpus;
      ++devices_version_;
      differ = true;
    }
    if (!held.empty()) {
      if (auto view = NodeFromJson(node_); view.ok()) uid = view->uid;
    }
    return gpus_;
  });
  for (const std::string& line : changed) Log(line);
  for (const std::string& line : held) {
    Log(line);
    events_->NodeEvent(uid, "TesseraModeChangeHeld", line);
  }
  if (differ) wake_.notify_all();
}

void DevicePluginServer::AddMigParts(std::vector<NodeGpu>* gpus) {
  std::string key;
  for (const NodeGpu& g : *gpus) key += g.uuid + ",";
  if (key != mig_key_) {
    std::vector<std::string> notes;
    auto listed = mig_lister_.List(&notes);
    for (const std::string& n : notes) Log(n);
    if (!listed.ok()) {
      Log(listed.error() + "; no MIG instance is served until NVML answers");
      mig_parts_.clear();
    } else {
      mig_parts_ = std::move(*listed);
      mig_key_ = key;
    }
  }
  for (NodeGpu& g : *gpus) {
    auto it = mig_parts_.find(g.uuid);
    if (it != mig_parts_.end()) g.mig = it->second;
  }
}

void DevicePluginServer::HandleMigRecut() {
  Json node;
  std::vector<NodeGpu> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    node = node_;
    gpus = gpus_;
  }
  auto view = NodeFromJson(node);
  if (!view.ok()) return;
  auto asked = view->annotations.find(kMigRecutAnnotation);
  if (asked == view->annotations.end() || asked->second == recut_answered_) return;
  // Answered already (by this plugin before a restart)?
  uint64_t answered = 0;
  if (auto it = view->annotations.find(kMigRecutStatusAnnotation); it != view->annotations.end()) {
    if (auto st = ParseMigRecutStatus(it->second); st.ok()) answered = st->id;
  }
  MigRecutStatus status;
  auto request = ParseMigRecutRequest(asked->second);
  if (!request.ok()) {
    status.state = MigRecutState::kFailed;
    status.reason = request.error();
  } else if (request->id <= answered) {
    recut_answered_ = asked->second;
    return;
  } else {
    status.id = request->id;
    status.gpu = request->gpu;
    status.state = MigRecutState::kRefused;
    const std::string& gpu = request->gpu;
    std::set<int> indices;  // tesserad's indices of the GPU's MIG devices
    for (const NodeGpu& g : gpus) {
      if (g.mig && g.mig->gpu == gpu) indices.insert(g.index);
    }
    const auto label = view->labels.find(kMigRecutLabel);
    const auto now = std::chrono::steady_clock::now();
    const auto last = recut_at_.find(gpu);
    if (label == view->labels.end() || label->second != "true") {
      status.reason = "node " + options_.node + " is not labelled " + kMigRecutLabel +
                      "=true: its GPUs are cut by hand only";
    } else if (indices.empty()) {
      status.reason = "node " + options_.node + " serves no MIG device of GPU " + gpu;
    } else if (last != recut_at_.end() && now - last->second < options_.mig_recut_interval) {
      status.reason =
          "GPU " + gpu + " was cut " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(now - last->second).count()) +
          "s ago; at most once per " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(options_.mig_recut_interval)
                  .count()) +
          "s (--mig-recut-interval)";
    } else {
      // Never under a pod: every container set up on one of the GPU's MIG devices.
      std::set<std::string> pods;
      for (const AllocationRecord& r : allocator_->Snapshot().records) {
        for (const AllocatedGpu& g : r.gpus) {
          if (indices.count(g.index) != 0) pods.insert(r.ns + "/" + r.pod);
        }
      }
      if (!pods.empty()) {
        std::string names;
        for (const std::string& p : pods) names += (names.empty() ? "" : ", ") + p;
        status.reason = "GPU " + gpu + " runs pod(s) " + names + ": a GPU is never cut under a pod";
      } else {
        auto cut = tesserad_.CutMigGpu(gpu, request->layout);
        if (cut.ok()) {
          status.state = MigRecutState::kApplied;
          status.reason = "GPU " + gpu + " cut into " + request->layout + " (" +
                          std::to_string(*cut) + " MIG devices); tesserad restarts to manage them";
          recut_at_[gpu] = now;
        } else {
          status.reason = cut.error();
        }
      }
    }
  }
  const std::string line = std::string("MIG re-cut request ") + std::to_string(status.id) + ": " +
                           std::string(MigRecutStateName(status.state)) + ": " + status.reason;
  Log(line);
  auto patched = api_->PatchNodeAnnotations(
      options_.node, {{kMigRecutStatusAnnotation, WriteMigRecutStatus(status)}});
  if (!patched.ok()) {
    Log("answering the MIG re-cut request on node " + options_.node + ": " +
        patched.error().message);
    if (status.state != MigRecutState::kApplied) return;  // asked again next time
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    node_ = *patched;
  }
  recut_answered_ = asked->second;
  if (status.state != MigRecutState::kApplied) {
    events_->NodeEvent(view->uid, "TesseraMigRecutRefused", line);
  }
}

std::vector<Device> DevicePluginServer::DevicesFor(const std::string& resource,
                                                   uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  *version = devices_version_;
  if (!mode_) return {};
  return DevicesOf(resource, *mode_, gpus_);
}

Status DevicePluginServer::RegisterWithKubelet(const std::string& resource) {
  auto channel = grpc::CreateChannel("unix:" + options_.plugin_dir + "/kubelet.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::Registration::NewStub(channel);
  pb::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(SocketNameOf(resource));
  req.set_resource_name(resource);
  req.mutable_options()->set_pre_start_required(true);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  pb::Empty empty;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::Status s = stub->Register(&ctx, req, &empty);
  if (!s.ok())
    return Status::Error("registering " + resource + " with kubelet: " + s.error_message());
  registrations_.fetch_add(1);
  return Status::Ok();
}

void DevicePluginServer::Serve(const std::vector<std::string>& resources, bool restart) {
  std::lock_guard<std::mutex> lock(serve_mu_);
  for (auto it = servers_.begin(); it != servers_.end();) {
    if (std::find(resources.begin(), resources.end(), it->first) == resources.end()) {
      Log("no longer serving " + it->first);
      unregistered_.erase(it->first);
      it = servers_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& r : resources) {
    auto it = servers_.find(r);
    if (it != servers_.end() && !restart) continue;
    if (it != servers_.end()) servers_.erase(it);
    auto server =
        std::make_unique<ResourceServer>(this, r, options_.plugin_dir + "/" + SocketNameOf(r));
    if (Status s = server->Start(); !s.ok()) {
      Log(s.message());
      continue;
    }
    servers_[r] = std::move(server);
    if (Status s = RegisterWithKubelet(r); !s.ok()) {
      Log(s.message() + "; retrying");
      unregistered_.insert(r);
    } else {
      unregistered_.erase(r);
      Log("serving " + r + " on " + options_.plugin_dir + "/" + SocketNameOf(r) +
          ", registered with kubelet");
    }
  }
}

void DevicePluginServer::KubeletLoop() {
  const std::string kubelet = options_.plugin_dir + "/kubelet.sock";
  // The identity of the kubelet.sock seen last (inode and change time); 0: none yet.
  ino_t seen_ino = 0;
  int64_t seen_ctime = 0;
  auto last_retry = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    struct stat st {};
    const bool present = stat(kubelet.c_str(), &st) == 0;
    const int64_t ctime = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
    std::vector<std::string> resources;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (mode_) resources = tessera::k8s::ServedResources(*mode_, options_.names, gpus_);
    }
    if (present && (st.st_ino != seen_ino || ctime != seen_ctime)) {
      // kubelet (re)started: it removed every plugin socket; serve anew and register again.
      if (seen_ino != 0) Log("kubelet.sock was re-created: kubelet restarted; registering again");
      seen_ino = st.st_ino;
      seen_ctime = ctime;
      Serve(resources, true);
    } else if (present) {
      std::vector<std::string> lost, retry;
      {
        std::lock_guard<std::mutex> lock(serve_mu_);
        for (const auto& [r, s] : servers_) {
          if (!s->SocketExists()) lost.push_back(r);
        }
        retry.assign(unregistered_.begin(), unregistered_.end());
      }
      if (!lost.empty()) {
        Log("a plugin socket was removed; serving it anew");
        Serve(resources, true);
      } else if (!retry.empty() && std::chrono::steady_clock::now() - last_retry > 1s) {
        last_retry = std::chrono::steady_clock::now();
        for (const std::string& r : retry) {
          if (RegisterWithKubelet(r).ok()) {
            std::lock_guard<std::mutex> lock(serve_mu_);
            unregistered_.erase(r);
            Log("registered " + r + " with kubelet");
          }
        }
      } else {
        Serve(resources, false);  // a mode change: start what is new, stop what is gone
      }
    } else {
      seen_ino = 0;
    }
    std::this_thread::sleep_for(250ms);
  }
}

void DevicePluginServer::ReconcileLoop() {
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, options_.reconcile_interval,
                     [&] { return stop_.load() || reconcile_now_.load(); });
    }
    if (stop_.load()) break;
    reconcile_now_.store(false);
    Reconcile();
  }
}

void DevicePluginServer::Reconcile() {
  // tesserad: the GPUs and their health, and the registrations it may have lost.
  auto status = tesserad_.Status();
  const auto now = std::chrono::steady_clock::now();
  std::vector<NodeGpu> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpus = gpus_;
  }
  if (status.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!tesserad_seen_ && !gpus_.empty()) Log("tesserad is back at " + options_.tesserad_socket);
      tesserad_seen_ = now;
    }
    gpus.clear();
    for (const TesseradGpu& g : status->gpus)
      gpus.push_back({g.index, g.uuid, g.name, g.total, g.max_inst, true});
    std::optional<NodeMode> mode;
    {
      std::lock_guard<std::mutex> lock(mu_);
      mode = mode_;
    }
    if (mode == NodeMode::kMig) AddMigParts(&gpus);
    auto mps_of = [](const TesseradStatus& st) {
      std::set<int> on;
      for (const TesseradGpu& g : st.gpus) {
        if (g.mps) on.insert(g.index);
      }
      return on;
    };
    SetGpus(gpus, mps_of(*status));
    // tesserad's MPS follows the modes; once it has, they are served at once, not a pass later.
    if (SyncMps(*status)) {
      if (auto again = tesserad_.Status(); again.ok()) {
        status = std::move(again);
        SetGpus(gpus, mps_of(*status));
      }
    }
    for (const std::string& line : allocator_->Resync()) Log(line);
  } else {
    bool report = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!tesserad_seen_ || now - *tesserad_seen_ > options_.unhealthy_after) {
        report = std::any_of(gpus.begin(), gpus.end(), [](const NodeGpu& g) { return g.healthy; });
        for (NodeGpu& g : gpus) g.healthy = false;
        tesserad_seen_.reset();
      }
    }
    if (report) Log(status.error() + "; the node's GPUs are unhealthy until it answers");
    SetGpus(gpus);
  }

  // Pods: release what belongs to pods gone, finished or failed; mark pods allocated.
  if (pods_->Synced()) {
    const std::vector<NodePod> pods = pods_->Pods();
    std::map<std::string, const PodView*> by_uid;
    std::set<std::string> uids;
    for (const NodePod& p : pods) {
      by_uid[p.view.uid] = &p.view;
      uids.insert(p.view.uid);
    }
    const Checkpoint cp = allocator_->Snapshot();
    std::set<std::string> gone;
    for (const AllocationRecord& r : cp.records) {
      if (gone.count(r.pod_uid) != 0) continue;
      auto it = by_uid.find(r.pod_uid);
      if (it != by_uid.end()) {
        if (it->second->Terminal() || it->second->deleting) gone.insert(r.pod_uid);
        continue;
      }
      // Not in the cache: confirm with the API server before taking anything away.
      auto pod = api_->GetPod(r.ns, r.pod);
      if (!pod.ok() && pod.kind() == ApiErrorKind::kNotFound) {
        gone.insert(r.pod_uid);
      } else if (pod.ok()) {
        auto v = PodFromJson(*pod);
        if (v.ok() && (v->uid != r.pod_uid || v->Terminal() || v->deleting ||
                       v->node_name != options_.node)) {
          gone.insert(r.pod_uid);
        }
      }
    }
    for (const std::string& line : allocator_->Release(gone)) Log(line);
    allocator_->ForgetRejected(uids);
    const std::set<std::string> complete = allocator_->CompletePods(pods);
    for (const NodePod& p : pods) {
      if (complete.count(p.view.uid) == 0 || p.view.Terminal() || p.view.deleting) continue;
      const std::string* phase = p.view.Annotation(kPhaseAnnotation);
      if (phase != nullptr && *phase == PhaseName(Phase::kAllocated)) continue;
      auto patched = api_->PatchPodAnnotations(
          p.view.ns, p.view.name, {{kPhaseAnnotation, std::string(PhaseName(Phase::kAllocated))}},
          p.view.resource_version);
      if (!patched.ok() && patched.kind() != ApiErrorKind::kConflict) {
        Log("marking pod " + p.view.Key() + " allocated: " + patched.error().message);
      }
    }
  }

  // The node's inventory, for the extender.
  std::optional<NodeMode> mode;
  Json node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mode = mode_;
    node = node_;
    gpus = gpus_;
  }
  if (mode && !gpus.empty()) {
    const GpuInventory inventory = InventoryOf(*mode, gpus);
    auto view = NodeFromJson(node);
    bool same = false;
    if (view.ok()) {
      auto it = view->annotations.find(kInventoryAnnotation);
      if (it != view->annotations.end()) {
        auto current = ParseGpuInventory(it->second);
        same = current.ok() && *current == inventory;
      }
    }
    if (!same) {
      auto patched = api_->PatchNodeAnnotations(
          options_.node, {{kInventoryAnnotation, WriteGpuInventory(inventory)}});
      if (!patched.ok()) {
        Log("publishing the GPU inventory on node " + options_.node + ": " +
            patched.error().message);
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        node_ = *patched;
      }
    }
  }

  if (mode == NodeMode::kMig) HandleMigRecut();

  // A container chosen among pods with identical requests: does it run in the pod it was given?
  if (status.ok()) {
    for (const AllocationRecord& r : allocator_->Snapshot().records) {
      if (r.also_waiting.empty() || verified_.count(r.id) != 0) continue;
      const TesseradContainer* c = status->Find(r.id);
      if (c == nullptr) continue;
      for (pid_t pid : c->pids) {
        auto uid = PodUidOfProcess(options_.proc_root, pid);
        if (!uid) continue;
        verified_.insert(r.id);
        if (*uid != r.pod_uid) {
          const std::string why =
              "container " + r.container + " was set up for pod " + r.ns + "/" + r.pod +
              " (kubelet's admission order among pods with the same request: " +
              [&] {
                std::string s;
                for (const std::string& a : r.also_waiting) s += (s.empty() ? "" : ", ") + a;
                return s;
              }() +
              "), but its process " + std::to_string(pid) + " runs in pod " + *uid +
              ": kubelet admitted them in another order; their GPUs are swapped";
          Log(why);
          PodView v;
          v.ns = r.ns;
          v.name = r.pod;
          v.uid = r.pod_uid;
          events_->PodEvent(v, "TesseraAdmissionOrder", why, true);
        } else {
          Log("checked: " + r.id + " runs in pod " + r.ns + "/" + r.pod + " as chosen");
        }
        break;
      }
    }
  }
}

}  // namespace tessera::k8s
