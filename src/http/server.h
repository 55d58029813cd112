// HttpServer: a small HTTP/1.1 server for tesserad's --http endpoint (/metrics, /v1/ctl/...).
//
// One server listens on one address and serves every connection from a single thread of its own
// with poll(2) and non-blocking sockets, so a client that sends slowly, or never reads its
// response, delays nobody else. Each request goes to one Handler; routing is the handler's job.
//
// Promises:
// - Create() binds and listens (so port() is known before Start()); Start() starts the thread;
//   Stop() (or the destructor) wakes the thread, closes every connection and joins, promptly
//   (it does not wait for clients or timeouts).
// - HTTP/1.1 connections stay open between requests unless the client says "Connection: close";
//   HTTP/1.0 ones close after the response unless the client asked for keep-alive. Requests on one
//   connection are answered in order, one at a time.
// - A malformed request gets its 4xx/5xx with a one-line text body and the connection is closed.
// - A connection must deliver each complete request within Options::read_timeout of opening or
//   of the end of the previous response; otherwise it gets 408 (if a request had begun) or is
//   simply closed (if idle). A client has the same time to read its response. Dribbling bytes
//   does not extend the bound.
// - At most Options::max_connections are open; further clients get 503 and are closed.
//
// The handler runs on the server thread: it must be quick and must not block (tesserad's handlers
// read in-memory state). An exception escaping it becomes a 500; the server keeps running.
// Not copyable. Stop() and the destructor may be called from any thread but the server's own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "core/host_port.h"
#include "core/result.h"
#include "http/message.h"

namespace tessera::http {

class HttpServer {
 public:
  using Handler = std::function<Response(const Request&)>;

  struct Options {
    std::chrono::milliseconds read_timeout{10000};
    size_t max_connections = 64;
    ParseLimits limits;
  };

  // Binds and listens on `listen` ("HOST:PORT", see core/host_port.h; port 0 picks a free one).
  // `input_name` names where the address came from in errors ("--http", "http" in a config file).
  static Result<std::unique_ptr<HttpServer>> Create(std::string_view listen,
                                                    std::string_view input_name, Handler handler,
                                                    Options options);
  static Result<std::unique_ptr<HttpServer>> Create(std::string_view listen,
                                                    std::string_view input_name, Handler handler) {
    return Create(listen, input_name, std::move(handler), Options());
  }

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Starts serving on a new thread. Fails if already started or stopped.
  Status Start();
  // Stops serving and joins the thread. Idempotent.
  void Stop();

  // The port actually bound (the kernel's choice when created with port 0).
  uint16_t port() const { return port_; }
  // "127.0.0.1:PORT" with the bound port.
  std::string address() const { return FormatHostPort(HostPort{host_, ipv6_, port_}); }

 private:
  HttpServer(int listen_fd, int wake_fd, std::string host, bool ipv6, uint16_t port,
             Handler handler, Options options);
  void Serve();

  int listen_fd_;
  int wake_fd_;  // eventfd: Stop() writes to it to wake poll()
  std::string host_;
  bool ipv6_;
  uint16_t port_;
  Handler handler_;
  Options options_;
  std::thread thread_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
};

}  // namespace tessera::http
