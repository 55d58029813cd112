// TestKubelet: the stand-in for kubelet's device manager (see the header for what it copies).
#include "testing/standins/test_kubelet.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"
#include "k8s/quantity.h"
#include "testing/standins/k8s_names.h"

namespace tessera::k8s {

namespace pb = ::v1beta1;
using namespace std::chrono_literals;

class TestKubelet::RegistrationService final : public pb::Registration::Service {
 public:
  explicit RegistrationService(TestKubelet* kubelet) : kubelet_(kubelet) {}
  grpc::Status Register(grpc::ServerContext*, const pb::RegisterRequest* request,
                        pb::Empty*) override {
    Status s =
        kubelet_->Register(request->version(), request->endpoint(), request->resource_name());
    if (!s.ok()) return grpc::Status(grpc::StatusCode::UNKNOWN, s.message());
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

TestKubelet::TestKubelet(std::string plugin_dir, uint64_t seed)
    : dir_(std::move(plugin_dir)),
      seed_(seed != 0 ? seed
                      : static_cast<uint64_t>(
                            std::chrono::steady_clock::now().time_since_epoch().count())),
      rng_(seed_) {}

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
    server->Wait();  // a Register in progress has finished (and installed its endpoint) here
  }
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints;
  std::vector<std::shared_ptr<Endpoint>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endpoints.swap(endpoints_);
    retired.swap(retired_);
  }
  for (auto& [resource, e] : endpoints) retired.push_back(e);
  for (auto& e : retired) {
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

void TestKubelet::FailRegistrations(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_registrations_ = n;
}

Status TestKubelet::Register(const std::string& version, const std::string& endpoint,
                             const std::string& resource) {
  auto refuse = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    refusals_.push_back(why);
    return Status::Error(why);
  };
  if (version != "v1beta1") {
    return refuse("Register: version \"" + version +
                  "\" is not supported; expected one of [v1beta1]");
  }
  if (!IsExtendedResourceName(resource)) {
    return refuse("Register: invalid name of device plugin socket: the ResourceName \"" + resource +
                  "\" is invalid");
  }
  if (endpoint.empty() || endpoint.find('/') != std::string::npos) {
    return refuse("Register: endpoint \"" + endpoint + "\" must be a file name in " + dir_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_registrations_ > 0) {
      --fail_registrations_;
      refusals_.push_back("failed to dial device plugin: context deadline exceeded");
      return Status::Error("failed to dial device plugin: context deadline exceeded");
    }
  }
  // connectClient, inside the Register call: dial (blocking, 10 s), then the options.
  auto e = std::make_shared<Endpoint>();
  e->resource = resource;
  e->socket = dir_ + "/" + endpoint;
  e->channel = grpc::CreateChannel("unix:" + e->socket, grpc::InsecureChannelCredentials());
  if (!e->channel->WaitForConnected(std::chrono::system_clock::now() + 10s)) {
    return refuse("failed to dial device plugin: context deadline exceeded (" + e->socket + ")");
  }
  e->stub = pb::DevicePlugin::NewStub(e->channel);
  grpc::ClientContext options_context;
  options_context.set_deadline(std::chrono::system_clock::now() + 30s);
  pb::Empty empty;
  grpc::Status s = e->stub->GetDevicePluginOptions(&options_context, empty, &e->options);
  if (!s.ok()) return refuse("failed to get device plugin options: " + s.error_message());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (server_ == nullptr) return Status::Error("kubelet is stopping");
    PluginState& st = states_[resource];
    st.endpoint = endpoint;
    ++st.registrations;
    st.connected = false;
    st.devices.clear();
    st.pre_start_required = e->options.pre_start_required();
    st.preferred_allocation = e->options.get_preferred_allocation_available();
  }
  StartWatch(e);
  return Status::Ok();
}

void TestKubelet::StartWatch(std::shared_ptr<Endpoint> e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto previous = endpoints_.find(e->resource);
    if (previous != endpoints_.end()) {
      previous->second->watch_context.TryCancel();
      retired_.push_back(previous->second);
    }
    endpoints_[e->resource] = e;
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

std::vector<TestKubelet::PreferredCall> TestKubelet::PreferredCalls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return preferred_calls_;
}

template <typename T>
std::vector<T> TestKubelet::MapOrder(std::vector<T> items) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shuffle(items.begin(), items.end(), rng_);
  return items;
}

Result<std::vector<TestKubelet::ContainerAllocation>> TestKubelet::Admit(const Json& pod_json) {
  using Out = Result<std::vector<ContainerAllocation>>;
  auto pod = PodFromJson(pod_json);
  if (!pod.ok()) return pod.status();
  std::vector<ContainerAllocation> out;
  // devicesToReuse: what plain init containers leave to the containers after them.
  std::map<std::string, std::set<std::string>> reusable;
  auto release = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [container, resources] : pod_devices_[pod->uid]) {
      for (auto& [resource, ids] : resources) {
        for (const std::string& id : ids) allocated_[resource].erase(id);
      }
    }
    pod_devices_.erase(pod->uid);
  };
  auto fail = [&](const std::string& why) {
    release();
    return Out::Error("UnexpectedAdmissionError: Allocate failed due to " + why +
                      ", which is unexpected");
  };
  for (const ContainerView& c : pod->containers) {
    ContainerAllocation alloc;
    alloc.name = c.name;
    alloc.init = c.init;
    alloc.restartable = c.restartable;
    std::vector<std::string> resources;
    for (const auto& [resource, quantity] : c.limits) resources.push_back(resource);
    std::map<std::string, pb::ContainerAllocateResponse> responses;
    for (const std::string& resource : MapOrder(resources)) {
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
      if (!e) continue;  // not a device-plugin resource: kubelet leaves it alone
      auto required = ParseWholeQuantity(c.limits.at(resource), resource);
      if (!required.ok()) return fail(required.error());
      size_t needed = static_cast<size_t>(*required);
      std::vector<std::string> chosen;
      // devicesToAllocate: devices of earlier init containers first (a set: any order).
      for (const std::string& id : MapOrder(
               std::vector<std::string>(reusable[resource].begin(), reusable[resource].end()))) {
        if (needed == 0) break;
        chosen.push_back(id);
        --needed;
      }
      if (needed > 0) {
        std::vector<std::string> available;
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [id, health] : st.devices) {
            if (health == "Healthy" && allocated_[resource].count(id) == 0 &&
                std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
              available.push_back(id);
            }
          }
        }
        if (available.size() < needed) {
          return fail("requested number of devices unavailable for " + resource + ". Requested: " +
                      std::to_string(needed) + ", Available: " + std::to_string(available.size()));
        }
        available = MapOrder(available);
        if (st.preferred_allocation) {
          // available ∪ allocated, must-include = allocated, size = the whole request.
          pb::PreferredAllocationRequest req;
          auto* cr = req.add_container_requests();
          for (const std::string& id : MapOrder(chosen)) cr->add_available_deviceids(id);
          for (const std::string& id : available) cr->add_available_deviceids(id);
          for (const std::string& id : chosen) cr->add_must_include_deviceids(id);
          cr->set_allocation_size(static_cast<int32_t>(*required));
          pb::PreferredAllocationResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + 30s);
          grpc::Status s = e->stub->GetPreferredAllocation(&ctx, req, &resp);
          PreferredCall call;
          call.resource = resource;
          call.available.assign(cr->available_deviceids().begin(), cr->available_deviceids().end());
          call.must_include = chosen;
          call.size = static_cast<int>(*required);
          if (!s.ok()) {
            {
              std::lock_guard<std::mutex> lock(mu_);
              preferred_calls_.push_back(call);
            }
            return fail("device plugin GetPreferredAllocation rpc failed with err: " +
                        s.error_message());
          }
          if (resp.container_responses_size() > 0) {
            const auto& ids = resp.container_responses(0).deviceids();
            call.answer.assign(ids.begin(), ids.end());
          }
          {
            std::lock_guard<std::mutex> lock(mu_);
            preferred_calls_.push_back(call);
          }
          // preferred ∩ available, then the rest of available.
          for (const std::string& id : call.answer) {
            if (needed == 0) break;
            if (std::find(available.begin(), available.end(), id) != available.end() &&
                std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
              chosen.push_back(id);
              --needed;
            }
          }
        }
        for (const std::string& id : available) {
          if (needed == 0) break;
          if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
            chosen.push_back(id);
            --needed;
          }
        }
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
      alloc.allocate_order.push_back(resource);
      if (!s.ok()) return fail(s.error_message());
      if (resp.container_responses_size() == 0) {
        return fail("no containers return in allocation response " + resp.ShortDebugString());
      }
      responses[resource] = resp.container_responses(0);
      std::vector<std::string> sorted = chosen;
      std::sort(sorted.begin(), sorted.end());
      alloc.device_ids[resource] = sorted;
    }
    // A plain init container leaves its devices to the containers after it; what an app container
    // or a native sidecar took stays its own.
    for (const auto& [resource, ids] : alloc.device_ids) {
      for (const std::string& id : ids) {
        if (c.init && !c.restartable) {
          reusable[resource].insert(id);
        } else {
          reusable[resource].erase(id);
        }
      }
    }
    // deviceRunContainerOptions: the responses in map order; the first setting of a key wins.
    std::vector<std::string> merged;
    for (const auto& [resource, r] : responses) merged.push_back(resource);
    for (const std::string& resource : MapOrder(merged)) {
      const pb::ContainerAllocateResponse& r = responses.at(resource);
      for (const auto& [k, v] : r.envs()) alloc.envs.emplace(k, v);
      for (const auto& [k, v] : r.annotations()) alloc.annotations.emplace(k, v);
      for (const pb::Mount& m : r.mounts()) {
        const bool dup = std::any_of(alloc.mounts.begin(), alloc.mounts.end(), [&](const Mount& x) {
          return x.container_path == m.container_path();
        });
        if (!dup) alloc.mounts.push_back({m.container_path(), m.host_path(), m.read_only()});
      }
      for (const pb::DeviceSpec& d : r.devices()) {
        const bool dup = std::any_of(
            alloc.devices.begin(), alloc.devices.end(),
            [&](const DeviceNode& x) { return x.container_path == d.container_path(); });
        if (!dup) alloc.devices.push_back({d.container_path(), d.host_path(), d.permissions()});
      }
      for (const pb::CDIDevice& d : r.cdi_devices()) {
        if (std::find(alloc.cdi_devices.begin(), alloc.cdi_devices.end(), d.name()) ==
            alloc.cdi_devices.end()) {
          alloc.cdi_devices.push_back(d.name());
        }
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
  std::vector<std::string> order;
  for (const auto& [resource, ids] : resources) order.push_back(resource);
  for (const std::string& resource : MapOrder(order)) {
    std::shared_ptr<Endpoint> e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = endpoints_.find(resource);
      if (it != endpoints_.end()) e = it->second;
    }
    if (!e)
      return Status::Error("endpoint not found in cache for a registered resource: " + resource);
    if (!e->options.pre_start_required()) continue;
    pb::PreStartContainerRequest req;
    for (const std::string& id : resources.at(resource)) req.add_devices_ids(id);
    pb::PreStartContainerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    grpc::Status s = e->stub->PreStartContainer(&ctx, req, &resp);
    if (!s.ok()) {
      return Status::Error("device plugin PreStartContainer rpc failed with err: " +
                           s.error_message());
    }
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
