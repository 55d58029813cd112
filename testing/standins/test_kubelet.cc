// TestKubelet: the stand-in for kubelet's devicemanager (see the header).
#include "testing/standins/test_kubelet.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"

namespace tessera::k8s {

namespace pb = ::v1beta1;
using namespace std::chrono_literals;

class TestKubelet::RegistrationService final : public pb::Registration::Service {
 public:
  explicit RegistrationService(TestKubelet* kubelet) : kubelet_(kubelet) {}
  grpc::Status Register(grpc::ServerContext*, const pb::RegisterRequest* request,
                        pb::Empty*) override {
    Status s = kubelet_->Register(request->version(), request->endpoint(), request->resource_name());
    if (!s.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, s.message());
    return grpc::Status::OK;
  }

 private:
  TestKubelet* kubelet_;
};

struct TestKubelet::Endpoint {
  std::string resource;
  std::string socket;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::DevicePlugin::Stub> stub;
  pb::DevicePluginOptions options;
  grpc::ClientContext watch_context;
  std::thread watcher;
};

TestKubelet::TestKubelet(std::string plugin_dir) : dir_(std::move(plugin_dir)) {}

TestKubelet::~TestKubelet() { Stop(); }

Status TestKubelet::Start() {
  mkdir(dir_.c_str(), 0755);
  const std::string sock = dir_ + "/kubelet.sock";
  unlink(sock.c_str());
  service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + sock, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  std::lock_guard<std::mutex> lock(mu_);
  server_ = builder.BuildAndStart();
  if (!server_) return Status::Error("test kubelet: cannot serve " + sock);
  return Status::Ok();
}

void TestKubelet::Stop() {
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard<std::mutex> lock(mu_);
    server = std::move(server_);
  }
  if (server) {
    server->Shutdown(std::chrono::system_clock::now() + 2s);
    server->Wait();
  }
  std::vector<std::thread> dialers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dialers.swap(dialers_);
  }
  for (std::thread& t : dialers) t.join();  // each finds the server gone, or installs its endpoint
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endpoints.swap(endpoints_);
  }
  for (auto& [resource, e] : endpoints) {
    e->watch_context.TryCancel();
    if (e->watcher.joinable()) e->watcher.join();
  }
}

Status TestKubelet::Restart() {
  Stop();
  // kubelet's CleanupPluginDirectory: every socket but its checkpoint goes.
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || name == "kubelet_internal_checkpoint") continue;
      const std::string path = dir_ + "/" + name;
      struct stat st {};
      if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
    }
    closedir(d);
  }
  return Start();
}

Status TestKubelet::Register(const std::string& version, const std::string& endpoint,
                             const std::string& resource) {
  auto refuse = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    refusals_.push_back(why);
    return Status::Error(why);
  };
  if (version != "v1beta1") {
    return refuse("Register: version \"" + version + "\" is not supported; expected v1beta1");
  }
  const size_t slash = resource.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == resource.size() ||
      resource.rfind("kubernetes.io/", 0) == 0 || resource.find("/", slash + 1) != std::string::npos) {
    return refuse("Register: \"" + resource + "\" is not an extended resource name");
  }
  if (endpoint.empty() || endpoint.find('/') != std::string::npos) {
    return refuse("Register: endpoint \"" + endpoint + "\" must be a file name in " + dir_);
  }
  auto e = std::make_shared<Endpoint>();
  e->resource = resource;
  e->socket = dir_ + "/" + endpoint;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PluginState& st = states_[resource];
    st.endpoint = endpoint;
    ++st.registrations;
    st.connected = false;
    st.devices.clear();
  }
  // As kubelet: the registration returns, then kubelet dials the plugin on its own.
  std::lock_guard<std::mutex> lock(mu_);
  dialers_.emplace_back([this, e] { Watch(e); });
  return Status::Ok();
}

void TestKubelet::Watch(std::shared_ptr<Endpoint> e) {
  e->channel = grpc::CreateChannel("unix:" + e->socket, grpc::InsecureChannelCredentials());
  e->stub = pb::DevicePlugin::NewStub(e->channel);
  grpc::ClientContext options_context;
  options_context.set_deadline(std::chrono::system_clock::now() + 10s);
  pb::Empty empty;
  grpc::Status s = e->stub->GetDevicePluginOptions(&options_context, empty, &e->options);
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    refusals_.push_back("GetDevicePluginOptions of " + e->resource + ": " + s.error_message());
    return;
  }
  std::shared_ptr<Endpoint> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (server_ == nullptr) return;  // stopped meanwhile
    previous = endpoints_[e->resource];
    endpoints_[e->resource] = e;
    PluginState& st = states_[e->resource];
    st.pre_start_required = e->options.pre_start_required();
    st.preferred_allocation = e->options.get_preferred_allocation_available();
  }
  if (previous) {
    previous->watch_context.TryCancel();
    if (previous->watcher.joinable()) previous->watcher.join();
  }
  Endpoint* raw = e.get();
  e->watcher = std::thread([this, raw] {
    std::unique_ptr<grpc::ClientReader<pb::ListAndWatchResponse>> reader(
        raw->stub->ListAndWatch(&raw->watch_context, pb::Empty()));
    pb::ListAndWatchResponse response;
    while (reader->Read(&response)) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = endpoints_.find(raw->resource);
      if (it == endpoints_.end() || it->second.get() != raw) break;  // replaced
      PluginState& st = states_[raw->resource];
      st.devices.clear();
      for (const pb::Device& d : response.devices()) st.devices.emplace_back(d.id(), d.health());
      st.last_message_bytes = response.ByteSizeLong();
      ++st.updates;
      st.connected = true;
      changed_.notify_all();
    }
    reader->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = endpoints_.find(raw->resource);
    if (it != endpoints_.end() && it->second.get() == raw) {
      // The plugin went away: kubelet marks its devices unhealthy until it comes back.
      PluginState& st = states_[raw->resource];
      st.connected = false;
      for (auto& d : st.devices) d.second = "Unhealthy";
      changed_.notify_all();
    }
  });
}

bool TestKubelet::WaitForResource(const std::string& resource, std::chrono::milliseconds timeout,
                                  int registrations) {
  return WaitForState(resource, timeout, [&](const PluginState& st) {
    return st.registrations >= registrations && st.connected;
  });
}

bool TestKubelet::WaitForState(const std::string& resource, std::chrono::milliseconds timeout,
                               const std::function<bool(const PluginState&)>& accept) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    auto it = states_.find(resource);
    return it != states_.end() && accept(it->second);
  });
}

std::optional<TestKubelet::PluginState> TestKubelet::Resource(const std::string& resource) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(resource);
  if (it == states_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> TestKubelet::Resources() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [r, e] : endpoints_) out.push_back(r);
  return out;
}

std::vector<std::string> TestKubelet::Refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusals_;
}

Result<std::vector<TestKubelet::ContainerAllocation>> TestKubelet::Admit(const Json& pod_json) {
  auto pod = PodFromJson(pod_json);
  if (!pod.ok()) return pod.status();
  std::vector<ContainerAllocation> out;
  std::map<std::string, std::vector<std::string>> reusable;  // init containers' devices
  auto release = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [container, resources] : pod_devices_[pod->uid]) {
      for (auto& [resource, ids] : resources) {
        for (const std::string& id : ids) allocated_[resource].erase(id);
      }
    }
    pod_devices_.erase(pod->uid);
  };
  for (const ContainerView& c : pod->containers) {
    ContainerAllocation alloc;
    alloc.name = c.name;
    alloc.init = c.init;
    for (const auto& [resource, quantity] : c.limits) {
      std::shared_ptr<Endpoint> e;
      PluginState st;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = endpoints_.find(resource);
        if (it != endpoints_.end()) {
          e = it->second;
          st = states_[resource];
        }
      }
      if (!e) {
        // kubelet drops extended resources no plugin advertises before it admits a pod.
        continue;
      }
      auto needed = ParseQuantity(quantity, resource);
      if (!needed.ok()) {
        release();
        return needed.status();
      }
      std::vector<std::string> chosen;
      std::vector<std::string> available;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [id, health] : st.devices) {
          if (health == "Healthy" && allocated_[resource].count(id) == 0) available.push_back(id);
        }
      }
      std::vector<std::string>& reuse = reusable[resource];
      while (chosen.size() < *needed && !reuse.empty()) {
        chosen.push_back(reuse.back());
        reuse.pop_back();
      }
      const size_t fresh = *needed - chosen.size();
      if (fresh > available.size()) {
        release();
        return Result<std::vector<ContainerAllocation>>::Error(
            "UnexpectedAdmissionError: Allocate failed due to requested number of devices "
            "unavailable for " + resource + ". Requested: " + std::to_string(*needed) +
            ", Available: " + std::to_string(available.size() + chosen.size()));
      }
      if (fresh > 0 && st.preferred_allocation) {
        pb::PreferredAllocationRequest req;
        auto* cr = req.add_container_requests();
        for (const std::string& id : available) cr->add_available_deviceids(id);
        for (const std::string& id : chosen) cr->add_must_include_deviceids(id);
        cr->set_allocation_size(static_cast<int32_t>(*needed));
        pb::PreferredAllocationResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 10s);
        grpc::Status s = e->stub->GetPreferredAllocation(&ctx, req, &resp);
        // As kubelet: a failed or unusable preference is ignored, never fatal.
        if (s.ok() && resp.container_responses_size() == 1) {
          std::vector<std::string> preferred(resp.container_responses(0).deviceids().begin(),
                                             resp.container_responses(0).deviceids().end());
          std::set<std::string> avail(available.begin(), available.end());
          std::vector<std::string> picked = chosen;
          for (const std::string& id : preferred) {
            if (avail.count(id) != 0 &&
                std::find(picked.begin(), picked.end(), id) == picked.end() &&
                picked.size() < *needed) {
              picked.push_back(id);
            }
          }
          if (picked.size() == *needed) chosen = picked;
        }
      }
      for (const std::string& id : available) {
        if (chosen.size() >= *needed) break;
        if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const std::string& id : chosen) allocated_[resource].insert(id);
        pod_devices_[pod->uid][c.name][resource] = chosen;
      }
      pb::AllocateRequest req;
      auto* cr = req.add_container_requests();
      for (const std::string& id : chosen) cr->add_devices_ids(id);
      pb::AllocateResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 30s);
      grpc::Status s = e->stub->Allocate(&ctx, req, &resp);
      if (!s.ok()) {
        release();
        return Result<std::vector<ContainerAllocation>>::Error(
            "UnexpectedAdmissionError: Allocate failed due to " + s.error_message() +
            ", which is unexpected");
      }
      if (resp.container_responses_size() != 1) {
        release();
        return Result<std::vector<ContainerAllocation>>::Error(
            "UnexpectedAdmissionError: Allocate of " + resource + " answered " +
            std::to_string(resp.container_responses_size()) + " containers for 1");
      }
      const pb::ContainerAllocateResponse& r = resp.container_responses(0);
      alloc.device_ids[resource] = chosen;
      for (const auto& [k, v] : r.envs()) alloc.envs.emplace(k, v);
      for (const auto& [k, v] : r.annotations()) alloc.annotations.emplace(k, v);
      for (const pb::Mount& m : r.mounts()) {
        const bool dup = std::any_of(alloc.mounts.begin(), alloc.mounts.end(), [&](const Mount& x) {
          return x.container_path == m.container_path();
        });
        if (!dup) alloc.mounts.push_back({m.container_path(), m.host_path(), m.read_only()});
      }
      for (const pb::DeviceSpec& d : r.devices()) {
        const bool dup = std::any_of(alloc.devices.begin(), alloc.devices.end(), [&](const DeviceNode& x) {
          return x.container_path == d.container_path();
        });
        if (!dup) alloc.devices.push_back({d.container_path(), d.host_path(), d.permissions()});
      }
      for (const pb::CDIDevice& d : r.cdi_devices()) {
        if (std::find(alloc.cdi_devices.begin(), alloc.cdi_devices.end(), d.name()) ==
            alloc.cdi_devices.end()) {
          alloc.cdi_devices.push_back(d.name());
        }
      }
      if (c.init) {
        for (const std::string& id : chosen) reusable[resource].push_back(id);
      }
    }
    out.push_back(std::move(alloc));
  }
  return out;
}

Status TestKubelet::PreStart(const std::string& pod_uid, const std::string& container) {
  std::map<std::string, std::vector<std::string>> resources;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = pod_devices_.find(pod_uid);
    if (p == pod_devices_.end()) return Status::Error("pod " + pod_uid + " was not admitted");
    auto c = p->second.find(container);
    if (c != p->second.end()) resources = c->second;
  }
  for (const auto& [resource, ids] : resources) {
    std::shared_ptr<Endpoint> e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = endpoints_.find(resource);
      if (it != endpoints_.end()) e = it->second;
    }
    if (!e) return Status::Error("PreStartContainer: no plugin serves " + resource);
    if (!e->options.pre_start_required()) continue;
    pb::PreStartContainerRequest req;
    for (const std::string& id : ids) req.add_devices_ids(id);
    pb::PreStartContainerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    grpc::Status s = e->stub->PreStartContainer(&ctx, req, &resp);
    if (!s.ok()) return Status::Error("PreStartContainer of " + resource + ": " + s.error_message());
  }
  return Status::Ok();
}

void TestKubelet::RemovePod(const std::string& pod_uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = pod_devices_.find(pod_uid);
  if (p == pod_devices_.end()) return;
  for (auto& [container, resources] : p->second) {
    for (auto& [resource, ids] : resources) {
      for (const std::string& id : ids) allocated_[resource].erase(id);
    }
  }
  pod_devices_.erase(p);
}

}  // namespace tessera::k8s
