// HttpServer on cpp-httplib: cpp-httplib parses requests and writes responses; this file gives
// every connection a thread and a Stream with deadlines and a byte budget, and turns what the
// library reports (a refused head, a body too large) into one-line answers. Holds no routes and
// no policy: everything a request means is the handler's.
//
// How it hooks into cpp-httplib 0.11: the library accepts on its own thread and hands each socket
// to Server::process_and_close_socket, a virtual function; Impl overrides it with a keep-alive
// loop of its own that calls the library's Server::process_request once per request over a
// Connection (an httplib::Stream). The library's own loop polls each idle connection every 10 ms,
// gives a request no deadline as a whole (each byte restarts its read timeout) and serves
// connections from a fixed pool of threads; none of that suits a port that changes a node's
// policy.
#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <thread>

#include "core/text.h"

namespace tessera::http {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The largest request head (request line, header fields, blank line): 431 beyond.
constexpr size_t kMaxHeadBytes = 8 * 1024;
// What a chunked body's framing may add to the body's bytes before a request counts as too large.
constexpr size_t kChunkAllowance = 64 * 1024;
// Requests one connection may carry before it is closed (advertised in Keep-Alive: max=N).
constexpr size_t kMaxRequestsPerConnection = 10000;
// How long a connection beyond max_connections may take to send the request it gets 503 for.
constexpr milliseconds kRefusalTimeout{1000};
// Bytes read from the socket at a time.
constexpr size_t kReadChunk = 16 * 1024;
// Response bytes buffered before they are sent (a response is sent whole once it is written).
constexpr size_t kWriteChunk = 64 * 1024;

// cpp-httplib adds these to every request's headers; they are not what the client sent.
bool IsSyntheticHeader(const std::string& name) {
  return name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" ||
         name == "LOCAL_PORT";
}

// Header names a handler may not set: the server writes them.
bool IsServerHeader(std::string_view name) {
  for (std::string_view reserved :
       {"Content-Length", "Content-Type", "Connection", "Transfer-Encoding", "Keep-Alive"}) {
    if (EqualsIgnoreCase(name, reserved)) return true;
  }
  return false;
}

bool HasLineBreakOrNul(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

// "ADDRESS:PORT" of one end of a socket; IPv6 addresses in brackets.
void SocketName(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  char text[INET6_ADDRSTRLEN] = {};
  *port = 0;
  if (r == 0 && address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    *port = ntohs(v4->sin_port);
  } else if (r == 0 && address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    *port = ntohs(v6->sin6_port);
  }
  *ip = text;
}

// One client connection as cpp-httplib reads and writes it: reads wait until the current
// request's deadline (or Stop), stop at its byte budget, and never block past either; writes are
// buffered and sent in one go by Flush(), before the next read and at the end of each response.
// Remembers why a read failed, for the error handler.
class Connection : public httplib::Stream {
 public:
  Connection(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}

  // Starts a request: it must arrive by `deadline`, its head carry at most kMaxHeadBytes, and
  // its response be taken by the client within `write_timeout` of being sent.
  void BeginRequest(Clock::time_point deadline, milliseconds write_timeout) {
    deadline_ = deadline;
    budget_ = kMaxHeadBytes;
    write_timeout_ = write_timeout;
    request_bytes_ = 0;
    in_head_ = true;
    body_ends_at_budget_ = false;
    timed_out_ = over_budget_ = false;
  }

  // The head is in: the body may bring `body_bytes` more. With `ends_there` the body is exactly
  // that long and reading past it finds its end (a request without Content-Length or
  // Transfer-Encoding has no body, RFC 9112 6.3; cpp-httplib 0.11 would read a PUT's or a
  // POST's until the client closes).
  void BeginBody(size_t body_bytes, bool ends_there) {
    in_head_ = false;
    budget_ = request_bytes_ + body_bytes;
    body_ends_at_budget_ = ends_there;
  }

  // Waits for the first byte of the next request (or the client's close). False on the
  // deadline or Stop.
  bool WaitForRequest() { return in_pos_ < in_.size() || Wait(POLLIN, deadline_); }

  // Sends the buffered response bytes. False when the client did not take them in time.
  bool Flush() {
    const Clock::time_point deadline = Clock::now() + write_timeout_;
    size_t done = 0;
    while (done < out_.size() && !broken_) {
      const ssize_t n = send(fd_, out_.data() + done, out_.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!Wait(POLLOUT, deadline)) broken_ = true;
      } else {
        broken_ = true;
      }
    }
    out_.clear();
    return !broken_;
  }

  bool timed_out() const { return timed_out_; }
  bool over_budget() const { return over_budget_; }
  bool in_head() const { return in_head_; }

  bool refusing = false;    // over max_connections: its request gets 503
  bool must_close = false;  // an error response said Connection: close

  // httplib::Stream.
  using httplib::Stream::write;
  bool is_readable() const override { return in_pos_ < in_.size(); }
  bool is_writable() const override { return !broken_; }
  ssize_t read(char* ptr, size_t size) override {
    if (body_ends_at_budget_ && request_bytes_ == budget_) return 0;  // the end of the body
    if (in_pos_ == in_.size()) {
      if (!Flush() || !Fill()) return -1;
      if (in_.empty()) return 0;  // the client closed its side
    }
    size_t n = std::min(size, in_.size() - in_pos_);
    if (request_bytes_ + n > budget_) {
      over_budget_ = true;
      n = budget_ - request_bytes_;
      if (n == 0) return -1;
    }
    std::memcpy(ptr, in_.data() + in_pos_, n);
    in_pos_ += n;
    request_bytes_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (broken_) return -1;
    out_.append(ptr, size);
    if (out_.size() >= kWriteChunk && !Flush()) return -1;
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    SocketName(fd_, true, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    SocketName(fd_, false, &ip, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Waits until the socket has `events`, `deadline` passes (timed_out_) or Stop() is called.
  bool Wait(short events, Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
      if (n < 0 && errno != EINTR) return false;
      if (n > 0 && fds[1].revents != 0) return false;  // Stop()
      if (n > 0 && fds[0].revents != 0) return true;   // ready, or an error recv/send will see
    }
  }

  // Reads what the socket has into the buffer, waiting until the deadline. On a close by the
  // client the buffer is left empty and true is returned.
  bool Fill() {
    in_.resize(kReadChunk);
    in_pos_ = 0;
    for (;;) {
      const ssize_t n = recv(fd_, in_.data(), in_.size(), 0);
      if (n >= 0) {
        in_.resize(static_cast<size_t>(n));
        return true;
      }
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLIN, deadline_)) {
        in_.clear();
        return false;
      }
    }
  }

  int fd_;
  int stop_fd_;
  Clock::time_point deadline_;
  milliseconds write_timeout_{0};
  size_t budget_ = 0;
  size_t request_bytes_ = 0;  // delivered to the library for the current request
  std::string in_;            // received, from in_pos_ on not yet delivered
  size_t in_pos_ = 0;
  std::string out_;  // written by the library, not yet sent
  bool in_head_ = true;
  bool body_ends_at_budget_ = false;
  bool timed_out_ = false;
  bool over_budget_ = false;
  bool broken_ = false;
};

// The connection the calling thread serves (cpp-httplib's handlers get no per-connection state).
thread_local Connection* t_connection = nullptr;

// One thread per connection. cpp-httplib's own ThreadPool has a fixed number of threads that a
// connection holds for as long as it is open, so a few idle keep-alive or slow clients would stall
// everyone else. The threads are bounded by Impl (twice max_connections).
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {  // join the finished ones
      if (it->done) {
        it->thread.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    auto& entry = threads_.emplace_back();
    entry.thread = std::thread([this, &entry, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> done_lock(mu_);
      entry.done = true;
    });
  }

  void shutdown() override {
    for (;;) {
      std::list<Entry> joining;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (threads_.empty()) return;
        joining.splice(joining.end(), threads_);  // the entries stay where their threads see them
      }
      for (Entry& entry : joining) entry.thread.join();
    }
  }

 private:
  struct Entry {
    std::thread thread;
    bool done = false;  // under mu_: fn returned; the thread is about to end
  };
  std::mutex mu_;
  std::list<Entry> threads_;
};

}  // namespace

class HttpServer::Impl : public httplib::Server {
 public:
  Impl(HttpServer::Handler handler, HttpServer::Options options, int stop_fd)
      : handler_(std::move(handler)), options_(options), stop_fd_(stop_fd) {
    new_task_queue = [] { return new ThreadPerConnection(); };
    // SO_REUSEADDR only: the library's default also sets SO_REUSEPORT, with which a second
    // daemon could bind the same port and take half of its connections.
    set_socket_options([](socket_t fd) {
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    });
    set_payload_max_length(options_.max_body_bytes);
    set_keep_alive_max_count(kMaxRequestsPerConnection);
    set_keep_alive_timeout(std::max<time_t>(1, (options_.read_timeout.count() + 999) / 1000));
    set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      return Early(request, response);
    });
    set_error_handler(
        HandlerWithResponse([this](const httplib::Request& request, httplib::Response& response) {
          return Explain(request, response);
        }));
    const auto route = [this](const httplib::Request& request, httplib::Response& response) {
      Serve(request, response);
    };
    const std::string any = "[\\s\\S]*";  // every path, a decoded line break included
    Get(any, route);
    Post(any, route);
    Put(any, route);
    Patch(any, route);
    Delete(any, route);
    Options(any, route);
  }

  ~Impl() override {
    if (svr_sock_ != INVALID_SOCKET) close(svr_sock_);  // bound, never served
    close(stop_fd_);
  }

  // Binds (port 0: the kernel's choice) and returns the port, or an error naming `where`.
  Result<uint16_t> Bind(const HostPort& address, const std::string& where) {
    errno = 0;
    const int port = address.port == 0
                         ? bind_to_any_port(address.host)
                         : (bind_to_port(address.host, address.port) ? address.port : -1);
    if (port <= 0) {
      return Result<uint16_t>::Error(
          where + ": cannot bind: " + (errno != 0 ? std::strerror(errno) : "unknown error"));
    }
    // The library listens with a backlog of 5, too few for a burst of scrapers and clients.
    ::listen(svr_sock_, 128);
    return static_cast<uint16_t>(port);
  }

  Status Start() {
    if (started_ || stopping_) {
      return Status::Error("this HTTP server was started or stopped already");
    }
    started_ = true;
    thread_ = std::thread([this] {
      listen_after_bind();
      listen_returned_ = true;
    });
    // stop() only acts on a running server: wait until the accept loop runs.
    for (int i = 0; i < 5000 && !is_running() && !listen_returned_; ++i) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return is_running() ? Status::Ok() : Status::Error("the HTTP server did not start");
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));  // wakes every connection's wait
    stop();                                       // closes the listening socket: accept ends
    if (thread_.joinable()) thread_.join();       // and the task queue joins the connections
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    const size_t open = ++open_connections_;
    Connection connection(sock, stop_fd_);
    connection.refusing = open > options_.max_connections;
    if (open <= 2 * options_.max_connections) {
      fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
      fcntl(sock, F_SETFD, FD_CLOEXEC);  // the library accepts without SOCK_CLOEXEC
      const int one = 1;
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      t_connection = &connection;
      Clock::time_point deadline =
          Clock::now() + (connection.refusing ? kRefusalTimeout : options_.read_timeout);
      for (size_t served = 0; served < kMaxRequestsPerConnection && !stopping_; ++served) {
        connection.BeginRequest(deadline, options_.read_timeout);
        if (!connection.WaitForRequest()) break;  // idle past the deadline, or Stop()
        const bool last = connection.refusing || served + 1 == kMaxRequestsPerConnection;
        bool closed = false;
        const bool ok = process_request(connection, last, closed, nullptr);
        if (!connection.Flush() || !ok || closed || last || connection.must_close) break;
        deadline = Clock::now() + options_.read_timeout;
      }
      t_connection = nullptr;
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    --open_connections_;
    return true;
  }

  // Before the body is read: a refused connection's 503 and a body declared too large.
  HandlerResponse Early(const httplib::Request& request, httplib::Response& response) {
    Connection* connection = t_connection;
    if (connection != nullptr) {
      const bool framed =
          request.has_header("Content-Length") || request.has_header("Transfer-Encoding");
      connection->BeginBody(framed ? options_.max_body_bytes + kChunkAllowance : 0, !framed);
    }
    if (connection != nullptr && connection->refusing) {
      return Refuse(response, 503,
                    "too many connections: this server serves " +
                        std::to_string(options_.max_connections) + " at once; try again later");
    }
    if (request.has_header("Content-Length")) {
      const uint64_t length = request.get_header_value<uint64_t>("Content-Length");
      if (length > options_.max_body_bytes) {
        return Refuse(response, 413,
                      "Content-Length " + std::to_string(length) +
                          " bytes is larger than the limit of " +
                          std::to_string(options_.max_body_bytes));
      }
    }
    const std::string& m = request.method;
    if (m != "GET" && m != "HEAD" && m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE" &&
        m != "OPTIONS") {
      Serve(request, response);  // TRACE, CONNECT: no body; the handler says what it serves
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  }

  // A response the library made (status set, no body) gets a line saying why; an error the
  // request caused closes the connection.
  HandlerResponse Explain(const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return HandlerResponse::Unhandled;  // the handler's own
    Connection* connection = t_connection;
    std::string why;
    if (connection != nullptr && connection->timed_out()) {
      response.status = 408;
      why = "the request did not arrive within " + std::to_string(options_.read_timeout.count()) +
            " ms";
    } else if (connection != nullptr && connection->over_budget() && connection->in_head()) {
      response.status = 431;
      why = "the request head is larger than the limit of " + std::to_string(kMaxHeadBytes) +
            " bytes";
    } else if (response.status == 413 || (connection != nullptr && connection->over_budget())) {
      response.status = 413;
      why = "the request is larger than the limit of " + std::to_string(options_.max_body_bytes) +
            " body bytes";
    } else if (response.status == 414) {
      why = "the request target is too long";
    } else if (response.status == 400) {
      why = "malformed HTTP request";
    } else {
      why = "the request was refused (HTTP " + std::to_string(response.status) + ")";
    }
    return Refuse(response, response.status, why);
  }

  HandlerResponse Refuse(httplib::Response& response, int status, const std::string& why) {
    response.status = status;
    response.set_header("Connection", "close");
    response.set_content(why + "\n", "text/plain; charset=utf-8");
    if (t_connection != nullptr) t_connection->must_close = true;
    return HandlerResponse::Handled;
  }

  // A request for the handler: ours in, ours out.
  void Serve(const httplib::Request& in, httplib::Response& out) {
    if (in.body.size() > options_.max_body_bytes) {  // a chunked body past the limit
      Refuse(out, 413,
             "the body is larger than the limit of " + std::to_string(options_.max_body_bytes) +
                 " bytes");
      return;
    }
    Request request;
    request.method = in.method;
    request.path = in.path;
    for (const auto& [key, value] : in.params) request.query[key] = value;
    for (const auto& [name, value] : in.headers) {
      if (!IsSyntheticHeader(name)) request.headers.emplace_back(name, value);
    }
    request.body = in.body;
    const bool v6 = in.remote_addr.find(':') != std::string::npos;
    request.peer =
        (v6 ? "[" + in.remote_addr + "]" : in.remote_addr) + ":" + std::to_string(in.remote_port);
    Response response;
    try {
      response = handler_(request);
    } catch (const std::exception& e) {
      response = Response::Text(500, std::string("the handler failed: ") + e.what());
    } catch (...) {
      response = Response::Text(500, "the handler failed");
    }
    for (const auto& [name, value] : response.headers) {
      if (name.empty() || IsServerHeader(name) || HasLineBreakOrNul(name) ||
          HasLineBreakOrNul(value)) {
        response = Response::Text(500, "the handler set the header " + QuoteValue(name) +
                                           ", which a response may not carry");
        break;
      }
    }
    if (HasLineBreakOrNul(response.content_type)) {
      response = Response::Text(500, "the handler set a Content-Type with a line break");
    }
    out.status = response.status;
    for (const auto& [name, value] : response.headers) out.set_header(name, value);
    out.set_content(std::move(response.body), response.content_type);
  }

  HttpServer::Handler handler_;
  HttpServer::Options options_;
  int stop_fd_;  // eventfd written by Stop()
  std::thread thread_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> listen_returned_{false};
  std::atomic<size_t> open_connections_{0};
};

Result<std::unique_ptr<HttpServer>> HttpServer::Create(std::string_view listen,
                                                       std::string_view input_name, Handler handler,
                                                       Options options) {
  using R = Result<std::unique_ptr<HttpServer>>;
  auto address = ParseHostPort(listen, input_name);
  if (!address.ok()) {
    return address.status();
  }
  if (!handler) {
    return R::Error(std::string(input_name) + ": HttpServer needs a handler");
  }
  const int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0) {
    return R::Error(std::string(input_name) + ": eventfd: " + std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>(std::move(handler), options, stop_fd);
  auto port = impl->Bind(*address, std::string(input_name) + "=" + FormatHostPort(*address));
  if (!port.ok()) {
    return port.status();
  }
  address->port = *port;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), *address));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, HostPort address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() { return impl_->Start(); }

void HttpServer::Stop() { impl_->Stop(); }

}  // namespace tessera::http
