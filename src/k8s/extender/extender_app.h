// ExtenderApp: a whole tessera-extender in one object: the API-server client, the informers
// (a Reflector for Nodes, then one for Pods, feeding ClusterState), the binder and the HTTP
// server. The program (main.cc) runs one; tests and the openb replay run one in process against
// the test API server. Owns threads: Start() returns once it listens; it turns ready (GET
// /healthz 200, verbs served) once Nodes and then Pods have been listed.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/extender/binder.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/extender/extender_server.h"

namespace tessera::extender {

struct AppConfig {
  k8s::ClientConfig api;
  std::string listen_host = "0.0.0.0";
  int listen_port = 8888;  // 0: an ephemeral port (tests)
  StateOptions state;
  bool quiet = false;  // no log line per informer event problem
};

class ExtenderApp {
 public:
  explicit ExtenderApp(AppConfig config);
  ~ExtenderApp();
  ExtenderApp(const ExtenderApp&) = delete;
  ExtenderApp& operator=(const ExtenderApp&) = delete;

  // Listens, starts the informers and serves; fails when the address cannot be bound.
  Status Start();
  void Stop();
  // Waits until Nodes and Pods have been listed (false on timeout).
  bool WaitReady(std::chrono::milliseconds timeout) const;

  int port() const { return server_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  ClusterState& state() { return *state_; }
  ExtenderServer& server() { return *server_; }

 private:
  void Sync();

  AppConfig config_;
  std::unique_ptr<k8s::ApiClient> client_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<ApiBinder> binder_;
  std::unique_ptr<ExtenderServer> server_;
  std::unique_ptr<k8s::Reflector> nodes_;
  std::unique_ptr<k8s::Reflector> pods_;
  std::thread serve_;
  std::thread sync_;
  std::atomic<bool> stop_{false};
};

}  // namespace tessera::extender
