// HttpServer: Tessera's HTTP/1.1 endpoint (tesserad's --http: /metrics, /v1/ctl/..., /v1/state;
// the Kubernetes extender's filter/prioritize/bind), on cpp-httplib, optionally over TLS
// (OpenSSL) with client certificates. cpp-httplib reads and writes HTTP (request line, headers,
// percent-decoding, Content-Length and chunked bodies, HEAD, keep-alive, HTTP/1.0); this room adds
// what an endpoint that changes a node's GPU policy or binds pods needs and the library leaves
// open: deadlines on the handshake, the head and the whole request, a bound on a request's size
// and on the connections that no single client can use to shut others out, and a prompt Stop().
// It knows nothing of routes, metrics or the control tree: one Handler gets every request.
//
// Promises:
// - Create() binds and listens (so port() is known before Start()) and, with TLS, loads the
//   certificate, key and client CAs (an error names the file and what is wrong with it); Start()
//   starts serving; Stop() (or the destructor) stops accepting, wakes every connection, lets a
//   handler that is running finish, closes every connection and joins, promptly (it does not wait
//   for clients or timeouts).
// - Every connection is served by a thread of its own, so a client that sends slowly, stalls, or
//   never reads its response delays nobody else.
// - HTTP/1.1 connections stay open between requests unless the client says "Connection: close";
//   HTTP/1.0 ones close after the response unless the client asked for keep-alive. Requests on one
//   connection (pipelined ones too) are answered in order.
// - Deadlines, none extended by dribbling bytes: with TLS the handshake must finish within
//   Options::header_timeout of the connection opening; a request's first byte must come within
//   Options::idle_timeout of the connection opening (or the handshake, or the previous response);
//   from that byte, its head must be in within header_timeout and all of it within read_timeout
//   (the smaller of the two bounds the head). A request whose request line arrived but not the
//   rest gets 408; otherwise the connection is simply closed. A client has read_timeout to take a
//   response.
// - With TLS and Options::tls->client_ca_file, a client must present a certificate that one of
//   those CAs signed, or the handshake fails and the connection closes before any HTTP is read;
//   Request::client_subject names the certificate. Changed certificate, key or CA files (a
//   Kubernetes Secret updated in place) are read again for new connections, at most once a second;
//   a file that no longer loads leaves the last good set in use (and is logged).
// - A body above Options::max_body_bytes gets 413, decided from Content-Length before the body is
//   read (or as soon as a chunked body passes the limit). A malformed request gets 400 (a target
//   over 8 KiB: 414). After any of these the connection closes. After a request of more than
//   1 MiB, memory the allocator holds free is handed back to the system (malloc_trim).
// - At most Options::max_connections connections are served. A connection beyond that makes
//   room by closing one that is not running a handler: one of the client address with the most
//   connections, the one waiting longest in its current step first. So a client that opens many
//   idle or slow connections loses its own, and one with a single connection is served. When every
//   connection is running a handler, a new client's request gets 503 and its connection closes;
//   only if connections closed to make room pile up past four times the limit before their
//   threads end them are new ones closed at once.
// - Bodies of error responses are one line of text saying what was wrong.
//
// The handler runs on the connection's thread, so several run at once: it must be thread-safe
// (tesserad's handlers read in-memory state under the registry's lock). An exception escaping it
// becomes a 500; a response with a header it may not set becomes a 500 as well.
// Not copyable. Stop() and the destructor may be called from any thread but a handler's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/host_port.h"
#include "core/result.h"
#include "core/text.h"

namespace tessera::http {

struct Request {
  std::string method;  // as sent: "GET", "PUT", "HEAD" (answered like GET, without the body)
  std::string path;    // percent-decoded, without the query: "/v1/ctl/0/policy"
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps its last value
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  std::string body;
  std::string peer;  // "127.0.0.1:54321", "[::1]:54321"
  // Over TLS with client certificates: the verified certificate's subject, RFC 2253
  // ("CN=kube-scheduler,O=tessera"); empty otherwise.
  std::string client_subject;

  // The value of the first header named `name` (ASCII case ignored), or nullopt.
  std::optional<std::string> Header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (EqualsIgnoreCase(key, name)) return value;
    }
    return std::nullopt;
  }
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Extra header fields. Content-Length, Content-Type, Connection, Transfer-Encoding and
  // Keep-Alive are the server's; one of those, or a name or value with CR, LF or NUL, makes the
  // server answer 500 instead.
  std::vector<std::pair<std::string, std::string>> headers;

  // A response with this status and a text body ending in a newline.
  static Response Text(int status, std::string body) {
    Response r;
    r.status = status;
    r.body = std::move(body) + "\n";
    return r;
  }
};

class HttpServer {
 public:
  using Handler = std::function<Response(const Request&)>;

  // PEM files for serving HTTPS. Without client_ca_file no client certificate is asked for.
  struct TlsOptions {
    std::string cert_file;       // the server's certificate, then its chain
    std::string key_file;        // its private key
    std::string client_ca_file;  // the CAs whose client certificates are accepted
  };

  struct Options {
    std::chrono::milliseconds idle_timeout{10000};
    std::chrono::milliseconds header_timeout{5000};
    std::chrono::milliseconds read_timeout{10000};
    size_t max_connections = 128;
    size_t max_body_bytes = 1024 * 1024;
    std::optional<TlsOptions> tls;  // nullopt: plain HTTP
    // One line at a time about clients refused (a failed handshake, connections closed to make
    // room), at most one a second with a count of the ones left out. Null: not logged.
    std::function<void(std::string_view)> log;
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

  // Starts serving on a thread of its own. Fails if already started or stopped.
  Status Start();
  // Stops serving and joins every thread. Idempotent.
  void Stop();

  // The port actually bound (the kernel's choice when created with port 0).
  uint16_t port() const { return address_.port; }
  // "127.0.0.1:PORT" with the bound port.
  std::string address() const { return FormatHostPort(address_); }
  // True when serving HTTPS.
  bool tls() const;

  class Impl;  // the cpp-httplib server and the connections' bookkeeping (server.cc)

 private:
  HttpServer(std::unique_ptr<Impl> impl, HostPort address);

  std::unique_ptr<Impl> impl_;
  HostPort address_;
};

}  // namespace tessera::http
