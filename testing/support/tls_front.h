// TlsFront: HTTPS in front of a plain-HTTP stand-in (tests only). A pod reaches its cluster's API
// server over TLS, verified with the service account's ca.crt; the stand-in API server speaks
// plain HTTP. TlsFront makes a self-signed certificate for 127.0.0.1 (written out as the CA a
// client trusts), accepts TLS on a port of its own and passes the bytes both ways to the plain
// port, so whatever the stand-in answers (watches included) reaches the client unchanged. It
// holds no HTTP logic and never decides anything.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"

namespace tessera::k8s::testing {

class TlsFront {
 public:
  // Forwards to 127.0.0.1:`backend_port`.
  explicit TlsFront(int backend_port);
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  // Makes the certificate and listens on 127.0.0.1 (a free port).
  Status Start();
  void Stop();
  int port() const { return port_; }
  // The certificate, PEM: what a client puts in its CA bundle (ca.crt).
  const std::string& ca_pem() const { return cert_pem_; }
  // Connections accepted so far (each TLS handshake that completed).
  int handshakes() const { return handshakes_.load(); }

 private:
  void AcceptLoop();
  void Serve(int client);

  int backend_port_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::string cert_pem_;
  void* ctx_ = nullptr;  // SSL_CTX
  std::atomic<bool> stop_{false};
  std::atomic<int> handshakes_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> open_;  // client sockets being served (shut down by Stop)
  std::vector<std::thread> workers_;
};

}  // namespace tessera::k8s::testing
