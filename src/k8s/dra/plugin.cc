// DraPluginServer: gRPC services, registration, the pool and the reconciler (see the header).
#include "k8s/dra/plugin.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "k8s/dra/health/v1/api.grpc.pb.h"
#include "k8s/dra/health/v1alpha1/api.grpc.pb.h"
#include "k8s/dra/pluginregistration/v1/api.grpc.pb.h"
#include "k8s/dra/v1/api.grpc.pb.h"
#include "k8s/dra/v1beta1/api.grpc.pb.h"

namespace tessera::k8s::dra {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace healthv1 = ::v1;
namespace healthv1alpha1 = ::v1alpha1;
namespace reg = ::pluginregistration;
using namespace std::chrono_literals;

namespace {

void Log(const std::string& line) {
  std::fprintf(stderr, "tessera-dra-plugin: %s\n", line.c_str());
}

bool SocketExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

void PrepareAll(ClaimPreparer* preparer, const drav1::NodePrepareResourcesRequest& req,
                drav1::NodePrepareResourcesResponse* out) {
  for (const auto& c : req.claims()) {
    auto& entry = (*out->mutable_claims())[c.uid()];
    if (c.uid().empty() || c.namespace_().empty() || c.name().empty()) {
      entry.set_error("claim {namespace=\"" + c.namespace_() + "\", uid=\"" + c.uid() +
                      "\", name=\"" + c.name() + "\"}: kubelet must give all three");
      continue;
    }
    auto devices = preparer->Prepare({c.namespace_(), c.uid(), c.name()});
    if (!devices.ok()) {
      entry.set_error(devices.error());
      Log("NodePrepareResources: " + devices.error());
      continue;
    }
    for (const PreparedDevice& d : *devices) {
      auto* dev = entry.add_devices();
      dev->add_request_names(d.request.substr(0, d.request.find('/')));
      dev->set_pool_name(d.pool);
      dev->set_device_name(d.device);
      for (const std::string& id : d.cdi_ids) dev->add_cdi_device_ids(id);
      if (d.share_id) dev->set_share_id(*d.share_id);
    }
  }
}

void UnprepareAll(ClaimPreparer* preparer, const drav1::NodeUnprepareResourcesRequest& req,
                  drav1::NodeUnprepareResourcesResponse* out) {
  for (const auto& c : req.claims()) {
    auto& entry = (*out->mutable_claims())[c.uid()];
    Status s = preparer->Unprepare({c.namespace_(), c.uid(), c.name()});
    if (!s.ok()) {
      entry.set_error(s.message());
      Log("NodeUnprepareResources: " + s.message());
    }
  }
}

}  // namespace

// Every service on the plugin's two sockets.
class DraPluginServer::Services {
 public:
  explicit Services(DraPluginServer* owner)
      : registration(owner), v1(owner), v1beta1(owner), health(owner), health_alpha(owner) {}

  class Registration final : public reg::Registration::Service {
   public:
    explicit Registration(DraPluginServer* o) : owner_(o) {}
    grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*,
                         reg::PluginInfo* info) override {
      info->set_type("DRAPlugin");
      info->set_name(kDriverName);
      info->set_endpoint(owner_->endpoint());
      for (const char* s : kSupportedServices) info->add_supported_versions(s);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* s,
                                          reg::RegistrationStatusResponse*) override {
      {
        std::lock_guard<std::mutex> lock(owner_->mu_);
        owner_->registered_ = s->plugin_registered();
      }
      if (!s->plugin_registered()) {
        Log("kubelet did not register the plugin: " + s->error());
        return grpc::Status(grpc::StatusCode::UNKNOWN,
                            "failed registration process: " + s->error());
      }
      Log("registered with kubelet");
      return grpc::Status::OK;
    }

   private:
    DraPluginServer* owner_;
  };

  // DRAPlugin of v1 or v1beta1 (one set of messages).
  template <typename Base>
  class Node final : public Base {
   public:
    explicit Node(DraPluginServer* o) : owner_(o) {}
    grpc::Status NodePrepareResources(grpc::ServerContext*,
                                      const drav1::NodePrepareResourcesRequest* req,
                                      drav1::NodePrepareResourcesResponse* out) override {
      PrepareAll(owner_->preparer_.get(), *req, out);
      return grpc::Status::OK;
    }
    grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                        const drav1::NodeUnprepareResourcesRequest* req,
                                        drav1::NodeUnprepareResourcesResponse* out) override {
      UnprepareAll(owner_->preparer_.get(), *req, out);
      return grpc::Status::OK;
    }

   private:
    DraPluginServer* owner_;
  };

  // Streams every device's health: at once, on every change, and every 20 s.
  template <typename Base>
  class Health final : public Base {
   public:
    explicit Health(DraPluginServer* o) : owner_(o) {}
    grpc::Status NodeWatchResources(
        grpc::ServerContext* ctx, const healthv1::NodeWatchResourcesRequest*,
        grpc::ServerWriter<healthv1::NodeWatchResourcesResponse>* writer) override {
      uint64_t sent = 0;
      auto last = std::chrono::steady_clock::now();
      while (!ctx->IsCancelled() && !owner_->stop_.load()) {
        healthv1::NodeWatchResourcesResponse response;
        {
          std::unique_lock<std::mutex> lock(owner_->mu_);
          owner_->wake_.wait_for(
              lock, 250ms, [&] { return owner_->stop_.load() || owner_->health_version_ != sent; });
          if (owner_->stop_.load()) break;
          if (owner_->health_version_ == sent && std::chrono::steady_clock::now() - last < 20s)
            continue;
          sent = owner_->health_version_;
          const bool reachable = owner_->tesserad_seen_.has_value();
          const auto now = static_cast<int64_t>(std::time(nullptr));
          for (const PublishedDevice& d :
               PoolDevices(owner_->mode_.value_or(NodeMode::kCoreMem), owner_->gpus_)) {
            auto* h = response.add_devices();
            h->mutable_device()->set_pool_name(owner_->options_.node);
            h->mutable_device()->set_device_name(d.name);
            const bool healthy = reachable && d.gpu.healthy;
            h->set_health(healthy ? healthv1::HEALTHY : healthv1::UNHEALTHY);
            h->set_last_updated_time(now);
            h->set_health_check_timeout_seconds(60);
            if (!healthy) {
              h->set_message(!reachable ? owner_->tesserad_error_.substr(0, 1024)
                                        : "tesserad no longer manages GPU " + d.gpu.uuid);
            }
          }
        }
        last = std::chrono::steady_clock::now();
        if (!writer->Write(response)) break;
      }
      return grpc::Status::OK;
    }

   private:
    DraPluginServer* owner_;
  };

  Registration registration;
  Node<drav1::DRAPlugin::Service> v1;
  Node<drav1beta1::DRAPlugin::Service> v1beta1;
  Health<healthv1::DRAResourceHealth::Service> health;
  Health<healthv1alpha1::DRAResourceHealth::Service> health_alpha;
};

DraPluginServer::DraPluginServer(DraPluginOptions options, ApiClient* api)
    : options_(std::move(options)),
      api_(api),
      tesserad_(options_.tesserad_socket),
      mig_lister_(options_.nvml_library) {}

DraPluginServer::~DraPluginServer() { Stop(); }

std::string DraPluginServer::endpoint() const {
  return options_.plugins_dir + "/" + kDriverName + "/dra.sock";
}

std::string DraPluginServer::registration_socket() const {
  return options_.registry_dir + "/" + kDriverName + "-reg.sock";
}

std::optional<bool> DraPluginServer::registered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

Status DraPluginServer::Start() {
  options_.preparer.node = options_.node;
  preparer_ = std::make_unique<ClaimPreparer>(options_.preparer, &tesserad_, api_);
  if (Status s = preparer_->Load(); !s.ok()) return s;
  auto node = api_->GetNode(options_.node);
  if (!node.ok()) {
    return Status::Error("node " + options_.node + ": " + node.error().message +
                         " (is --node-name, or NODE_NAME from the downward API, right?)");
  }
  ApplyNode(*node);
  publisher_ = std::make_unique<SlicePublisher>(api_, kDriverName, options_.node,
                                                (*node)["metadata"].value("uid", ""));
  node_watch_ = NodeReflector(api_, options_.node, [this](const Json& n) { ApplyNode(n); });
  node_watch_->Start();
  Reconcile();  // the GPUs before kubelet can call
  services_ = std::make_unique<Services>(this);
  if (Status s = Serve(); !s.ok()) return s;
  publisher_->Start();  // the pool once the plugin can prepare what is allocated from it
  loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status DraPluginServer::Serve() {
  for (std::unique_ptr<grpc::Server>* s : {&server_, &registration_}) {
    if (*s) {
      (*s)->Shutdown(std::chrono::system_clock::now() + 1s);
      (*s)->Wait();
      s->reset();
    }
  }
  const std::string dir = options_.plugins_dir + "/" + kDriverName;
  mkdir(options_.plugins_dir.c_str(), 0750);
  mkdir(dir.c_str(), 0750);
  mkdir(options_.registry_dir.c_str(), 0750);
  // The plugin's own services first, so kubelet finds them when it reads the registration.
  unlink(endpoint().c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + endpoint(), grpc::InsecureServerCredentials());
  builder.RegisterService(&services_->v1);
  builder.RegisterService(&services_->v1beta1);
  builder.RegisterService(&services_->health);
  builder.RegisterService(&services_->health_alpha);
  server_ = builder.BuildAndStart();
  if (!server_) return Status::Error("cannot serve the DRA plugin on " + endpoint());
  unlink(registration_socket().c_str());
  grpc::ServerBuilder reg_builder;
  reg_builder.AddListeningPort("unix:" + registration_socket(), grpc::InsecureServerCredentials());
  reg_builder.RegisterService(&services_->registration);
  registration_ = reg_builder.BuildAndStart();
  if (!registration_)
    return Status::Error("cannot serve the registration on " + registration_socket());
  Log("serving " + std::string(kDriverName) + " on " + endpoint() + ", registration on " +
      registration_socket());
  return Status::Ok();
}

void DraPluginServer::Stop() {
  if (stop_.exchange(true)) return;
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
  for (std::unique_ptr<grpc::Server>* s : {&registration_, &server_}) {
    if (*s) {
      (*s)->Shutdown(std::chrono::system_clock::now() + 2s);
      (*s)->Wait();
      s->reset();
    }
  }
  unlink(registration_socket().c_str());
  unlink(endpoint().c_str());
  if (publisher_) publisher_->Stop();
  if (node_watch_) node_watch_->Stop();
}

void DraPluginServer::ApplyNode(const Json& node) {
  auto view = NodeFromJson(node);
  if (!view.ok()) return;
  auto mode = NodeModeFromLabels(view->labels, options_.default_mode);
  std::lock_guard<std::mutex> lock(mu_);
  if (!mode.ok()) {
    if (bad_label_ != mode.error()) {
      Log("node " + options_.node + ": " + mode.error() + "; the pool stays as it is");
      bad_label_ = mode.error();
    }
    return;
  }
  bad_label_.clear();
  if (mode_ != *mode) {
    if (mode_)
      Log("node mode " + std::string(NodeModeName(*mode_)) + " -> " +
          std::string(NodeModeName(*mode)));
    mode_ = *mode;
    ++health_version_;
    wake_.notify_all();
  }
}

void DraPluginServer::Reconcile() {
  auto status = tesserad_.Status();
  const auto now = std::chrono::steady_clock::now();
  std::optional<NodeMode> mode;
  std::vector<NodeGpu> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mode = mode_;
    gpus = gpus_;
  }
  if (!mode) return;
  if (status.ok()) {
    gpus.clear();
    for (const TesseradGpu& g : status->gpus) {
      gpus.push_back({g.index, g.uuid, g.name, g.total, g.max_inst, true});
    }
    if (*mode == NodeMode::kMig) {
      std::vector<std::string> notes;
      auto parts = mig_lister_.List(&notes);
      for (const std::string& n : notes) Log(n);
      if (!parts.ok()) {
        Log(parts.error());
      } else {
        for (NodeGpu& g : gpus) {
          auto it = parts->find(g.uuid);
          if (it != parts->end()) g.mig = it->second;
        }
      }
    }
    preparer_->SetNode(*mode, gpus);
    for (const std::string& line : preparer_->Resync()) Log(line);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool was_seen = tesserad_seen_.has_value();
    if (status.ok()) {
      if (!was_seen && !gpus_.empty()) Log("tesserad is back at " + options_.tesserad_socket);
      tesserad_seen_ = now;
      tesserad_error_.clear();
      if (gpus != gpus_ || !was_seen) ++health_version_;
      gpus_ = gpus;
    } else if (was_seen && now - *tesserad_seen_ > options_.unhealthy_after) {
      tesserad_seen_.reset();
      tesserad_error_ = status.error();
      Log(status.error() + "; the node's devices are unhealthy until it answers");
      ++health_version_;
    } else if (!was_seen) {
      tesserad_error_ = status.error();
    }
    gpus = gpus_;
  }
  wake_.notify_all();
  if (publisher_) publisher_->Set(PoolSlices(*mode, gpus, options_.pool));
}

void DraPluginServer::Loop() {
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, options_.reconcile_interval, [&] { return stop_.load(); });
    }
    if (stop_.load()) break;
    Reconcile();
    if (!SocketExists(endpoint()) || !SocketExists(registration_socket())) {
      Log("a socket of the plugin was removed; serving it anew");
      if (Status s = Serve(); !s.ok()) Log(s.message());
    }
  }
}

}  // namespace tessera::k8s::dra
