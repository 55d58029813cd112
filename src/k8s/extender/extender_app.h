// ExtenderApp: a whole tessera-extender in one object: the API-server client, the informers
// (a Reflector for Nodes, then one for Pods, feeding ClusterState), the binder and the HTTP
// server. The program (main.cc) runs one; tests and the openb replay run one in process against
// the test API server. Owns threads: Start() returns once it listens; it turns ready (GET
// /healthz 200, verbs served) once Nodes and then Pods have been listed; then, every recut_poll,
// the MIG re-cuts it plans are written on their nodes (recut_writer.h). A pod the verbs are asked
// about that the watch has not shown yet is read from the API server (extender_server.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/extender/binder.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/extender/extender_server.h"

namespace tessera::extender {

struct AppConfig {
  k8s::ClientConfig api;
  // The verbs' address, and TLS for it (nullopt: plain HTTP, which anyone who reaches the
  // address may drive); extender_server.h says what else ListenOptions holds.
  std::string listen_host = "127.0.0.1";
  int listen_port = 8888;  // 0: an ephemeral port (tests)
  std::optional<http::HttpServer::TlsOptions> tls;
  std::string metrics_host = "0.0.0.0";
  int metrics_port = -1;  // the read-only address; -1: none
  size_t max_body_bytes = ListenOptions().max_body_bytes;
  std::vector<std::string> scheduler_names = DoorOptions().scheduler_names;
  StateOptions state;
  bool quiet = false;  // no log line per informer event problem (or refused HTTP client)
  // How often the MIG re-cuts are planned and their requests written on the nodes
  // (ClusterState::PlanMigRecuts, recut_writer.h); 0: no loop of its own (a caller that keeps
  // its own clock, the replay, calls RecutOnce).
  std::chrono::milliseconds recut_poll{1000};
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
  int metrics_port() const { return server_->metrics_port(); }
  std::string url() const {
    return std::string(server_->tls() ? "https" : "http") +
           "://127.0.0.1:" + std::to_string(port());
  }
  ClusterState& state() { return *state_; }

  // One pass of the re-cut loop: the MIG re-cuts planned now, each written on its node (a plan
  // not written is given back). The loop runs it every recut_poll once ready.
  struct RecutPass {
    int written = 0;
    int not_written = 0;
  };
  RecutPass RecutOnce();
  ExtenderServer& server() { return *server_; }

 private:
  void Sync();
  void RecutLoop();

  AppConfig config_;
  std::unique_ptr<k8s::ApiClient> client_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<ApiBinder> binder_;
  std::unique_ptr<ExtenderServer> server_;
  std::unique_ptr<k8s::Reflector> nodes_;
  std::unique_ptr<k8s::Reflector> pods_;
  std::thread sync_;
  std::thread recut_;
  std::mutex recut_mu_;
  std::condition_variable recut_wake_;
  std::atomic<bool> stop_{false};
};

}  // namespace tessera::extender
