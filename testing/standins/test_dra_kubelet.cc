// TestDraKubelet: the stand-in for kubelet's plugin watcher and DRA manager (see the header).
#include "testing/standins/test_dra_kubelet.h"

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "k8s/dra/health/v1/api.grpc.pb.h"
#include "k8s/dra/health/v1alpha1/api.grpc.pb.h"
#include "k8s/dra/pluginregistration/v1/api.grpc.pb.h"
#include "k8s/dra/v1/api.grpc.pb.h"
#include "k8s/dra/v1beta1/api.grpc.pb.h"

namespace tessera::k8s {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace reg = ::pluginregistration;
using namespace std::chrono_literals;

namespace {

// kubelet's services, newest first.
const std::vector<std::string> kServices = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};

bool IsSocket(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::chrono::system_clock::time_point Deadline(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace

struct TestDraKubelet::PluginConn {
  std::string driver, socket, endpoint, service, health_service;
  std::vector<std::string> supported;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<drav1::DRAPlugin::Stub> v1;
  std::unique_ptr<drav1beta1::DRAPlugin::Stub> v1beta1;
  grpc::ClientContext* health_call = nullptr;  // the stream in progress; under the kubelet's mu_
  std::thread health;
  bool stopping = false;  // under the kubelet's mu_
};

TestDraKubelet::TestDraKubelet(Options options) : options_(std::move(options)) {}

TestDraKubelet::~TestDraKubelet() { Stop(); }

Status TestDraKubelet::Start() {
  mkdir(options_.registry_dir.c_str(), 0755);
  inotify_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_ < 0) return Status::Error(std::string("inotify_init1: ") + std::strerror(errno));
  if (inotify_add_watch(inotify_, options_.registry_dir.c_str(),
                        IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
    return Status::Error("watching " + options_.registry_dir + ": " + std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
    // The plugin watcher's first walk: sockets already there are plugins to register.
    if (DIR* d = opendir(options_.registry_dir.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        const std::string path = options_.registry_dir + "/" + name;
        if (name.empty() || name[0] == '.' || !IsSocket(path)) continue;
        desired_[path] = {std::chrono::steady_clock::now(), {}, 0ms};
      }
      closedir(d);
    }
  }
  // No driver has registered yet: the node's slices go (in the background, retried).
  if (options_.api != nullptr) initial_wipe_ = std::thread([this] { Wipe(""); });
  watcher_ = std::thread([this] { WatchLoop(); });
  reconciler_ = std::thread([this] { ReconcileLoop(); });
  return Status::Ok();
}

void TestDraKubelet::Stop() {
  std::map<std::string, std::vector<std::shared_ptr<PluginConn>>> plugins;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    plugins.swap(plugins_);
    for (auto& [driver, list] : plugins) {
      for (auto& p : list) {
        p->stopping = true;
        if (p->health_call != nullptr) p->health_call->TryCancel();
      }
    }
    desired_.clear();
    registered_.clear();
    socket_driver_.clear();
    wipe_at_.clear();
  }
  changed_.notify_all();
  for (std::thread* t : {&watcher_, &reconciler_, &initial_wipe_}) {
    if (t->joinable()) t->join();
  }
  for (auto& [driver, list] : plugins) {
    for (auto& p : list) {
      if (p->health.joinable()) p->health.join();
    }
  }
  if (inotify_ >= 0) close(inotify_);
  inotify_ = -1;
}

Status TestDraKubelet::Restart() {
  Stop();
  return Start();
}

void TestDraKubelet::WatchLoop() {
  char buf[4096] __attribute__((aligned(alignof(inotify_event))));
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    pollfd p{inotify_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(inotify_, buf, sizeof(buf));
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      const std::string name = e->len > 0 ? e->name : "";
      const std::string path = options_.registry_dir + "/" + name;
      std::lock_guard<std::mutex> lock(mu_);
      if ((e->mask & (IN_CREATE | IN_MOVED_TO)) != 0) {
        if (name.empty() || name[0] == '.') continue;  // ignored, as upstream
        if ((e->mask & IN_ISDIR) != 0) {
          inotify_add_watch(inotify_, path.c_str(),
                            IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
          continue;
        }
        if (!IsSocket(path)) continue;
        // Added, or re-created before the reconciler saw it go: a new time either way.
        desired_[path] = {std::chrono::steady_clock::now(), {}, 0ms};
      } else if ((e->mask & (IN_DELETE | IN_MOVED_FROM)) != 0) {
        desired_.erase(path);
      }
    }
  }
}

void TestDraKubelet::ReconcileLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, options_.reconcile_period, [this] { return stop_; });
      if (stop_) return;
    }
    Reconcile();
  }
}

void TestDraKubelet::Reconcile() {
  std::vector<std::string> unregister;
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> to_register;
  std::vector<std::string> to_wipe;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    // Unregistrations first: gone from the folder, or re-created since.
    for (const auto& [socket, seen] : registered_) {
      auto d = desired_.find(socket);
      if (d == desired_.end() || d->second.seen != seen) unregister.push_back(socket);
    }
    for (const auto& [socket, d] : desired_) {
      auto r = registered_.find(socket);
      if (r != registered_.end() && r->second == d.seen) continue;
      if (now < d.retry_at) continue;  // exponential backoff after a failure
      to_register.emplace_back(socket, d.seen);
    }
    // Connection tracking: a driver none of whose plugins answers is wiped after the delay.
    for (auto& [driver, list] : plugins_) SyncWipe(driver);
    for (auto it = wipe_at_.begin(); it != wipe_at_.end();) {
      if (now >= it->second) {
        to_wipe.push_back(it->first);
        it = wipe_at_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::string& s : unregister) Unregister(s);
  for (const auto& [socket, seen] : to_register) {
    Status s = RegisterPlugin(socket, seen);
    std::lock_guard<std::mutex> lock(mu_);
    auto d = desired_.find(socket);
    if (!s.ok()) {
      refusals_.push_back(s.message());
      if (d != desired_.end()) {
        d->second.backoff = d->second.backoff == 0ms
                                ? 500ms
                                : std::min<std::chrono::milliseconds>(d->second.backoff * 2, 122s);
        d->second.retry_at = std::chrono::steady_clock::now() + d->second.backoff;
      }
    }
  }
  for (const std::string& driver : to_wipe) Wipe(driver);
}

Status TestDraKubelet::RegisterPlugin(const std::string& socket,
                                      std::chrono::steady_clock::time_point seen) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(Deadline(10s))) {
    return Status::Error("RegisterPlugin error -- dial failed at socket " + socket);
  }
  auto client = reg::Registration::NewStub(channel);
  reg::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(1s));
    grpc::Status s = client->GetInfo(&ctx, reg::InfoRequest(), &info);
    if (!s.ok()) {
      return Status::Error(
          "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket " +
          socket + ", err: " + s.error_message());
    }
  }
  auto notify = [&](bool registered, const std::string& error) -> Status {
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(5s));
    reg::RegistrationStatus st;
    st.set_plugin_registered(registered);
    st.set_error(error);
    reg::RegistrationStatusResponse r;
    grpc::Status s = client->NotifyRegistrationStatus(&ctx, st, &r);
    if (!s.ok()) return Status::Error(error + ": " + s.error_message());
    if (!error.empty()) return Status::Error(error);
    return Status::Ok();
  };
  if (info.type() != "DRAPlugin") {
    Status n = notify(false, "RegisterPlugin error -- no handler registered for plugin type: " +
                                 info.type() + " at socket " + socket);
    return n.ok() ? Status::Error("no handler for " + info.type()) : n;
  }
  std::string endpoint = info.endpoint().empty() ? socket : info.endpoint();
  std::vector<std::string> supported(info.supported_versions().begin(),
                                     info.supported_versions().end());
  // ValidatePlugin: the first of the plugin's services that kubelet knows.
  std::string chosen;
  for (const std::string& s : supported) {
    if (std::find(kServices.begin(), kServices.end(), s) != kServices.end()) {
      chosen = s;
      break;
    }
  }
  if (chosen.empty()) {
    std::string list;
    for (const std::string& s : supported) list += (list.empty() ? "" : " ") + s;
    const std::string why =
        supported.empty()
            ? "empty list of supported gRPC services (aka supported versions)"
            : "none of services supported by the plugin ([" + list +
                  "]) are supported by the kubelet ([v1.DRAPlugin v1beta1.DRAPlugin])";
    return notify(false,
                  "RegisterPlugin error -- plugin validation failed with err: invalid supported "
                  "gRPC versions of DRA driver plugin " +
                      info.name() + " at endpoint " + endpoint + ": " + why);
  }
  // Recorded as registered before the handler runs (upstream's order).
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered_[socket] = seen;
    socket_driver_[socket] = info.name();
  }
  auto p = std::make_shared<PluginConn>();
  p->driver = info.name();
  p->socket = socket;
  p->endpoint = endpoint;
  p->service = chosen;
  p->supported = supported;
  // The health service the plugin lists, v1 before v1alpha1.
  for (const char* h : {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}) {
    if (p->health_service.empty() &&
        std::find(supported.begin(), supported.end(), h) != supported.end()) {
      p->health_service = h;
    }
  }
  bool taken = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& other : plugins_[p->driver]) taken = taken || other->endpoint == endpoint;
    if (!taken) {
      p->channel = grpc::CreateChannel("unix:" + endpoint, grpc::InsecureChannelCredentials());
      p->v1 = drav1::DRAPlugin::NewStub(p->channel);
      p->v1beta1 = drav1beta1::DRAPlugin::NewStub(p->channel);
      plugins_[p->driver].push_back(p);
      ++registrations_[p->driver];
      wipe_at_.erase(p->driver);  // usable again: no wiping
      if (!p->health_service.empty()) p->health = std::thread([this, p] { HealthLoop(p); });
    }
  }
  if (taken) {
    // One plugin cannot take over another's endpoint.
    return notify(false, "RegisterPlugin error -- plugin registration failed with err: endpoint " +
                             endpoint + " already registered for DRA driver plugin " + p->driver);
  }
  changed_.notify_all();
  return notify(true, "");
}

void TestDraKubelet::Unregister(const std::string& socket) {
  std::shared_ptr<PluginConn> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered_.erase(socket);
    auto d = socket_driver_.find(socket);
    if (d == socket_driver_.end()) return;
    const std::string driver = d->second;
    socket_driver_.erase(d);
    auto& list = plugins_[driver];
    for (auto it = list.begin(); it != list.end(); ++it) {
      if ((*it)->socket == socket) {
        gone = *it;
        list.erase(it);
        break;
      }
    }
    if (gone) {
      gone->stopping = true;
      if (gone->health_call != nullptr) gone->health_call->TryCancel();
    }
    SyncWipe(driver);
  }
  if (gone && gone->health.joinable()) gone->health.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (gone) health_[gone->driver].clear();
}

void TestDraKubelet::SyncWipe(const std::string& driver) {
  bool usable = false;
  for (const auto& p : plugins_[driver]) {
    const auto state = p->channel->GetState(false);
    usable = usable || (state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_SHUTDOWN &&
                        IsSocket(p->endpoint));
  }
  if (usable) {
    wipe_at_.erase(driver);
  } else if (wipe_at_.count(driver) == 0 && registrations_.count(driver) != 0) {
    wipe_at_[driver] = std::chrono::steady_clock::now() + options_.wiping_delay;
  }
}

void TestDraKubelet::Wipe(const std::string& driver) {
  if (options_.api == nullptr) return;
  std::string selector = "spec.nodeName=" + options_.node;
  if (!driver.empty()) selector += ",spec.driver=" + driver;
  auto delay = 1000ms;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto r = options_.api->Delete(
        WithQuery("/apis/resource.k8s.io/v1/resourceslices", {{"fieldSelector", selector}}));
    if (r.ok() || r.kind() == ApiErrorKind::kNotFound) {
      std::lock_guard<std::mutex> lock(mu_);
      ++wipes_;
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (changed_.wait_for(lock, delay, [this] { return stop_; })) return;
    delay = std::min<std::chrono::milliseconds>(delay * 2, std::chrono::minutes(5));
  }
}

void TestDraKubelet::HealthLoop(std::shared_ptr<PluginConn> p) {
  for (;;) {
    grpc::ClientContext ctx;  // one per call
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (p->stopping || stop_) return;
      p->health_call = &ctx;
    }
    auto record = [&](const auto& response) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& h = health_[p->driver];
      h.clear();  // a complete list each time
      for (const auto& d : response.devices()) {
        const char* names[] = {"UNKNOWN", "HEALTHY", "UNHEALTHY"};
        const int v = static_cast<int>(d.health());
        h[d.device().pool_name() + "/" + d.device().device_name()] = {
            names[v >= 0 && v <= 2 ? v : 0], d.message().substr(0, 1024)};
      }
      ++health_messages_[p->driver];
    };
    auto v1 = ::v1::DRAResourceHealth::NewStub(p->channel);
    auto v1alpha1 = ::v1alpha1::DRAResourceHealth::NewStub(p->channel);
    auto reader = p->health_service == "v1.DRAResourceHealth"
                      ? v1->NodeWatchResources(&ctx, ::v1::NodeWatchResourcesRequest())
                      : v1alpha1->NodeWatchResources(&ctx, ::v1::NodeWatchResourcesRequest());
    ::v1::NodeWatchResourcesResponse r;
    while (reader->Read(&r)) record(r);
    reader->Finish();
    // The stream ended: its health is forgotten; another in 5 s (upstream's period).
    std::unique_lock<std::mutex> lock(mu_);
    p->health_call = nullptr;
    health_[p->driver].clear();
    if (changed_.wait_for(lock, 5s, [&] { return p->stopping || stop_; })) return;
  }
}

std::shared_ptr<TestDraKubelet::PluginConn> TestDraKubelet::GetPlugin(
    const std::string& driver) const {
  auto it = plugins_.find(driver);
  if (it == plugins_.end() || it->second.empty()) return nullptr;
  // The newest connected one, else the newest.
  for (auto p = it->second.rbegin(); p != it->second.rend(); ++p) {
    const auto state = (*p)->channel->GetState(false);
    if (state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_SHUTDOWN) return *p;
  }
  return it->second.back();
}

std::optional<TestDraKubelet::PluginState> TestDraKubelet::Plugin(const std::string& driver) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = GetPlugin(driver);
  if (!p) return std::nullopt;
  PluginState st;
  st.driver = p->driver;
  st.socket = p->socket;
  st.endpoint = p->endpoint;
  st.supported = p->supported;
  st.service = p->service;
  st.health_service = p->health_service;
  auto r = registrations_.find(driver);
  st.registrations = r == registrations_.end() ? 0 : r->second;
  st.connected = IsSocket(p->endpoint);
  return st;
}

bool TestDraKubelet::WaitForPlugin(const std::string& driver, std::chrono::milliseconds timeout,
                                   int registrations) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] {
    auto r = registrations_.find(driver);
    return r != registrations_.end() && r->second >= registrations && GetPlugin(driver) != nullptr;
  });
}

std::vector<std::string> TestDraKubelet::Refusals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refusals_;
}

std::map<std::string, std::pair<std::string, std::string>> TestDraKubelet::Health(
    const std::string& driver) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = health_.find(driver);
  return it == health_.end() ? std::map<std::string, std::pair<std::string, std::string>>{}
                             : it->second;
}

int TestDraKubelet::health_messages(const std::string& driver) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = health_messages_.find(driver);
  return it == health_messages_.end() ? 0 : it->second;
}

int TestDraKubelet::wipes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wipes_;
}

Result<std::optional<std::string>> TestDraKubelet::ClaimName(const Json& pod, const Json& pc,
                                                             bool* must_check_owner) const {
  using Out = Result<std::optional<std::string>>;
  *must_check_owner = false;
  if (pc.contains("resourceClaimName") && pc["resourceClaimName"].is_string()) {
    return std::optional<std::string>(pc["resourceClaimName"].get<std::string>());
  }
  if (pc.contains("resourceClaimTemplateName") && pc["resourceClaimTemplateName"].is_string()) {
    const Json statuses =
        pod.value("status", Json::object()).value("resourceClaimStatuses", Json::array());
    for (const Json& s : statuses) {
      if (s.value("name", "") != pc.value("name", "")) continue;
      *must_check_owner = true;
      if (!s.contains("resourceClaimName") || s["resourceClaimName"].is_null()) {
        return std::optional<std::string>();  // no claim needed
      }
      return std::optional<std::string>(s["resourceClaimName"].get<std::string>());
    }
    return Out::Error("pod \"" + pod["metadata"].value("name", "") +
                      "\": ResourceClaim not created yet");
  }
  return Out::Error("pod \"" + pod["metadata"].value("name", "") + "\", spec.resourceClaim " +
                    pc.value("name", "") +
                    ": neither ResourceClaimName nor ResourceClaimTemplateName is set");
}

Status TestDraKubelet::PrepareResources(const Json& pod) {
  auto fail = [](const std::string& why) {
    return Status::Error("prepare dynamic resources: " + why);
  };
  const std::string ns = pod["metadata"].value("namespace", "default");
  const std::string pod_name = pod["metadata"].value("name", "");
  const std::string pod_uid = pod["metadata"].value("uid", "");
  struct Info {
    Json claim;
    std::set<std::string> drivers;
  };
  std::vector<Info> infos;
  // A validation pass without changing the cache.
  for (const Json& pc : pod.value("spec", Json::object()).value("resourceClaims", Json::array())) {
    bool check_owner = false;
    auto name = ClaimName(pod, pc, &check_owner);
    if (!name.ok()) return fail(name.error());
    if (!*name) continue;
    auto claim = options_.api->Get("/apis/resource.k8s.io/v1/namespaces/" + ns +
                                   "/resourceclaims/" + **name);
    if (!claim.ok()) return fail("fetch ResourceClaim " + **name + ": " + claim.error().message);
    if (check_owner) {
      bool owned = false;
      for (const Json& o : (*claim)["metadata"].value("ownerReferences", Json::array())) {
        owned = owned || (o.value("uid", "") == pod_uid && o.value("controller", false));
      }
      if (!owned)
        return fail("ResourceClaim " + **name + " was not created for pod " + pod_name +
                    " (pod is not owner)");
    }
    bool reserved = false;
    const Json status = claim->value("status", Json::object());
    for (const Json& r : status.value("reservedFor", Json::array())) {
      reserved = reserved || (r.value("resource", "") == "pods" && r.value("uid", "") == pod_uid);
    }
    if (!reserved) {
      return fail("pod " + pod_name + " (" + pod_uid + ") is not allowed to use ResourceClaim " +
                  **name + " (" + (*claim)["metadata"].value("uid", "") + ")");
    }
    if (!status.contains("allocation") || status["allocation"].is_null()) {
      return fail("ResourceClaim " + **name + ": unallocated ResourceClaim");
    }
    Info info{*claim, {}};
    for (const Json& r :
         status["allocation"].value("devices", Json::object()).value("results", Json::array())) {
      info.drivers.insert(r.value("driver", ""));
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& d : info.drivers) {
      if (GetPlugin(d) == nullptr) return fail("DRA driver " + d + " is not registered");
    }
    infos.push_back(std::move(info));
  }
  // The cache, then a batch per driver.
  std::map<std::string, std::vector<std::string>> batches;  // driver -> claim keys
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Info& i : infos) {
      const std::string key = ns + "/" + i.claim["metadata"].value("name", "");
      ClaimInfo& c = claims_[key];
      const std::string uid = i.claim["metadata"].value("uid", "");
      if (!c.uid.empty() && c.uid != uid) {
        return fail("old ResourceClaim with same name " + c.name + " and different UID " + c.uid +
                    " still exists (previous pod force-deleted?!)");
      }
      c.uid = uid;
      c.ns = ns;
      c.name = i.claim["metadata"].value("name", "");
      c.drivers = i.drivers;
      c.pods.insert(pod_uid);
      if (c.prepared) continue;
      for (const std::string& d : i.drivers) batches[d].push_back(key);
    }
  }
  for (const auto& [driver, keys] : batches) {
    std::shared_ptr<PluginConn> p;
    std::vector<ClaimInfo> claims;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = GetPlugin(driver);
      for (const std::string& k : keys) claims.push_back(claims_[k]);
    }
    if (!p) return fail("DRA driver " + driver + " is not registered");
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(options_.call_timeout));
    // v1beta1's messages are v1's without the share ID (our protos share them).
    drav1::NodePrepareResourcesRequest req;
    for (const ClaimInfo& c : claims) {
      auto* pc = req.add_claims();
      pc->set_namespace_(c.ns);
      pc->set_uid(c.uid);
      pc->set_name(c.name);
    }
    drav1::NodePrepareResourcesResponse response;
    const grpc::Status s = p->service == "v1.DRAPlugin"
                               ? p->v1->NodePrepareResources(&ctx, req, &response)
                               : p->v1beta1->NodePrepareResources(&ctx, req, &response);
    if (!s.ok()) return fail("NodePrepareResources: " + s.error_message());
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [uid, result] : response.claims()) {
      auto c = std::find_if(claims.begin(), claims.end(),
                            [&](const ClaimInfo& x) { return x.uid == uid; });
      if (c == claims.end())
        return fail("NodePrepareResources returned result for unknown claim UID " + uid);
      if (!result.error().empty()) {
        return fail("NodePrepareResources failed for ResourceClaim " + c->name + ": " +
                    result.error());
      }
      ClaimInfo& info = claims_[c->ns + "/" + c->name];
      for (const auto& d : result.devices()) {
        ClaimInfo::Device dev;
        dev.driver = driver;
        dev.requests.assign(d.request_names().begin(), d.request_names().end());
        dev.pool = d.pool_name();
        dev.device = d.device_name();
        if (d.has_share_id() && p->service == "v1.DRAPlugin") dev.share_id = d.share_id();
        dev.cdi.assign(d.cdi_device_ids().begin(), d.cdi_device_ids().end());
        info.devices.push_back(std::move(dev));
      }
    }
    const size_t unfinished = claims.size() - static_cast<size_t>(response.claims_size());
    if (unfinished != 0)
      return fail("NodePrepareResources skipped " + std::to_string(unfinished) + " ResourceClaims");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [driver, keys] : batches) {
    for (const std::string& k : keys) claims_[k].prepared = true;
  }
  return Status::Ok();
}

Result<std::vector<std::string>> TestDraKubelet::CdiDevices(const Json& pod,
                                                            const std::string& container) const {
  using Out = Result<std::vector<std::string>>;
  const std::string ns = pod["metadata"].value("namespace", "default");
  const Json spec = pod.value("spec", Json::object());
  std::optional<Json> c;
  for (const char* list : {"initContainers", "containers"}) {
    for (const Json& x : spec.value(list, Json::array())) {
      if (x.value("name", "") == container) c = x;
    }
  }
  if (!c) return Out::Error("pod has no container " + container);
  std::vector<std::string> out;
  for (const Json& ref : c->value("resources", Json::object()).value("claims", Json::array())) {
    for (const Json& pc : spec.value("resourceClaims", Json::array())) {
      if (pc.value("name", "") != ref.value("name", "")) continue;
      bool check = false;
      auto name = ClaimName(pod, pc, &check);
      if (!name.ok()) return name.status();
      if (!*name) continue;
      std::lock_guard<std::mutex> lock(mu_);
      auto it = claims_.find(ns + "/" + **name);
      if (it == claims_.end()) {
        return Out::Error("internal error: unable to get claim info for ResourceClaim " + **name +
                          " in namespace " + ns);
      }
      const std::string request = ref.value("request", "");
      for (const ClaimInfo::Device& d : it->second.devices) {
        if (request.empty() || d.requests.empty() ||
            std::find(d.requests.begin(), d.requests.end(), request) != d.requests.end()) {
          out.insert(out.end(), d.cdi.begin(), d.cdi.end());
        }
      }
    }
  }
  return out;
}

Status TestDraKubelet::UnprepareResources(const Json& pod) {
  auto fail = [](const std::string& why) {
    return Status::Error("unprepare dynamic resources: " + why);
  };
  const std::string pod_uid = pod["metadata"].value("uid", "");
  std::map<std::string, std::vector<ClaimInfo>> batches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, c] : claims_) {
      if (c.pods.count(pod_uid) == 0) continue;
      if (c.pods.size() > 1) {
        c.pods.erase(pod_uid);
        continue;
      }
      for (const std::string& d : c.drivers) batches[d].push_back(c);
    }
  }
  for (const auto& [driver, claims] : batches) {
    std::shared_ptr<PluginConn> p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = GetPlugin(driver);
    }
    if (!p) return fail("DRA driver " + driver + " is not registered");
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(options_.call_timeout));
    drav1::NodeUnprepareResourcesRequest req;
    for (const ClaimInfo& c : claims) {
      auto* pc = req.add_claims();
      pc->set_namespace_(c.ns);
      pc->set_uid(c.uid);
      pc->set_name(c.name);
    }
    drav1::NodeUnprepareResourcesResponse r;
    const grpc::Status s = p->service == "v1.DRAPlugin"
                               ? p->v1->NodeUnprepareResources(&ctx, req, &r)
                               : p->v1beta1->NodeUnprepareResources(&ctx, req, &r);
    std::map<std::string, std::string> errors;
    for (const auto& [uid, e] : r.claims()) errors[uid] = e.error();
    const size_t answered = static_cast<size_t>(r.claims_size());
    if (!s.ok()) return fail("NodeUnprepareResources: " + s.error_message());
    for (const auto& [uid, e] : errors) {
      auto c = std::find_if(claims.begin(), claims.end(),
                            [&](const ClaimInfo& x) { return x.uid == uid; });
      if (c == claims.end())
        return fail("NodeUnprepareResources returned result for unknown claim UID " + uid);
      if (!e.empty())
        return fail("NodeUnprepareResources failed for ResourceClaim " + c->name + ": " + e);
    }
    if (answered != claims.size()) {
      return fail("NodeUnprepareResources skipped " + std::to_string(claims.size() - answered) +
                  " ResourceClaims");
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const ClaimInfo& c : claims) claims_.erase(c.ns + "/" + c.name);
  }
  return Status::Ok();
}

std::map<std::string, std::set<std::string>> TestDraKubelet::PreparedClaims() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [key, c] : claims_) {
    if (c.prepared) out[key] = c.pods;
  }
  return out;
}

}  // namespace tessera::k8s
