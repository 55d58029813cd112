// Wiring a tessera-extender together: client, informers, state, binder, server. No decisions.
#include "k8s/extender/extender_app.h"

#include <cstdio>

#include "k8s/extender/recut_writer.h"

namespace tessera::extender {

namespace {

std::string NameOf(const k8s::Json& object) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  return meta->value("name", "");
}

std::string UidOf(const k8s::Json& object) {
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  return meta->value("uid", "");
}

}  // namespace

ExtenderApp::ExtenderApp(AppConfig config) : config_(std::move(config)) {
  client_ = std::make_unique<k8s::ApiClient>(config_.api);
  state_ = std::make_unique<ClusterState>(config_.state);
  binder_ = std::make_unique<ApiBinder>(*client_, *state_);
  DoorOptions door;
  door.scheduler_names = config_.scheduler_names;
  door.lookup = [client = client_.get()](const std::string& ns, const std::string& name) {
    return client->GetPod(ns, name);
  };
  server_ = std::make_unique<ExtenderServer>(*state_, binder_.get(), std::move(door));
}

ExtenderApp::~ExtenderApp() { Stop(); }

Status ExtenderApp::Start() {
  ListenOptions listen;
  listen.host = config_.listen_host;
  listen.port = config_.listen_port;
  listen.tls = config_.tls;
  listen.metrics_host = config_.metrics_host;
  listen.metrics_port = config_.metrics_port;
  listen.max_body_bytes = config_.max_body_bytes;
  if (!config_.quiet) {
    listen.log = [](std::string_view line) {
      std::fprintf(stderr, "tessera-extender: %.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  if (Status s = server_->Listen(listen); !s.ok()) return s;
  if (Status s = server_->Serve(); !s.ok()) return s;
  const bool quiet = config_.quiet;
  auto report = [quiet](const char* what, const Status& s) {
    if (!s.ok() && !quiet)
      std::fprintf(stderr, "tessera-extender: %s: %s\n", what, s.message().c_str());
  };
  k8s::Reflector::Handlers node_handlers;
  node_handlers.on_replace = [this](const std::vector<k8s::Json>& items) {
    state_->ReplaceNodes(items);
  };
  node_handlers.on_event = [this, report](const k8s::WatchEvent& e) {
    if (e.type == "DELETED") {
      state_->RemoveNode(NameOf(e.object));
    } else if (e.type == "ADDED" || e.type == "MODIFIED") {
      report("node", state_->UpsertNode(e.object));
    }
  };
  k8s::Reflector::Handlers pod_handlers;
  pod_handlers.on_replace = [this](const std::vector<k8s::Json>& items) {
    state_->ReplacePods(items);
  };
  pod_handlers.on_event = [this, report](const k8s::WatchEvent& e) {
    if (e.type == "DELETED") {
      state_->RemovePod(UidOf(e.object));
    } else if (e.type == "ADDED" || e.type == "MODIFIED") {
      report("pod", state_->UpsertPod(e.object));
    }
  };
  nodes_ = std::make_unique<k8s::Reflector>(client_.get(), "/api/v1/nodes", k8s::ListOptions{},
                                            node_handlers);
  pods_ = std::make_unique<k8s::Reflector>(client_.get(), "/api/v1/pods", k8s::ListOptions{},
                                           pod_handlers);
  // Nodes first, then pods (ClusterState::ReplaceNodes says why); ready after both.
  nodes_->Start();
  sync_ = std::thread([this] { Sync(); });
  if (config_.recut_poll.count() > 0) recut_ = std::thread([this] { RecutLoop(); });
  return Status::Ok();
}

void ExtenderApp::Sync() {
  while (!stop_ && !nodes_->WaitSynced(std::chrono::milliseconds(200))) {
  }
  if (stop_) return;
  pods_->Start();
  while (!stop_ && !pods_->WaitSynced(std::chrono::milliseconds(200))) {
  }
  if (!stop_) server_->SetReady(true);
}

void ExtenderApp::RecutLoop() {
  std::unique_lock lock(recut_mu_);
  while (!stop_) {
    recut_wake_.wait_for(lock, config_.recut_poll, [this] { return stop_.load(); });
    if (stop_) return;
    if (!server_->ready()) continue;
    lock.unlock();
    RecutOnce();
    lock.lock();
  }
}

ExtenderApp::RecutPass ExtenderApp::RecutOnce() {
  RecutPass pass;
  for (const MigRecut& r : state_->PlanMigRecuts()) {
    const RecutWriteOutcome out = WriteMigRecut(*client_, r);
    ++(out.written ? pass.written : pass.not_written);
    if (!out.written) state_->UnplanMigRecut(r.gpu);
    if (config_.quiet) continue;
    if (out.written) {
      std::fprintf(stderr,
                   "tessera-extender: asked node %s to cut %s into %s for pod %s "
                   "(request %llu)\n",
                   r.node.c_str(), r.gpu.c_str(), r.layout.c_str(), r.pod.c_str(),
                   static_cast<unsigned long long>(out.id));
    } else {
      std::fprintf(stderr, "tessera-extender: MIG re-cut of %s on %s not asked: %s\n",
                   r.gpu.c_str(), r.node.c_str(), out.reason.c_str());
    }
  }
  return pass;
}

bool ExtenderApp::WaitReady(std::chrono::milliseconds timeout) const {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!server_->ready()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void ExtenderApp::Stop() {
  {
    std::lock_guard lock(recut_mu_);
    stop_ = true;
  }
  recut_wake_.notify_all();
  if (sync_.joinable()) sync_.join();
  if (recut_.joinable()) recut_.join();
  if (pods_) pods_->Stop();
  if (nodes_) nodes_->Stop();
  server_->Stop();
}

}  // namespace tessera::extender
