// HttpServer: the poll loop, accepting, reading, parsing with ParseRequest, calling the handler and
// writing responses. Holds no routes and no policy: everything a request means is the handler's.
#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <list>
#include <vector>

namespace tessera::http {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadChunk = 16 * 1024;

struct Connection {
  int fd = -1;
  std::string peer;
  std::string in;        // bytes received and not yet consumed by a parsed request
  std::string out;       // the response being written
  size_t out_done = 0;   // bytes of `out` already written
  bool close_after_write = false;
  bool peer_closed = false;        // the client shut down its side
  Clock::time_point deadline;      // when the current request (or write) must be done
};

std::string ErrnoText(int error) { return std::strerror(error); }

std::string PeerName(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "unknown";
}

// Queues `response` on `connection`; a response the handler got wrong becomes a 500.
void QueueResponse(Connection* connection, const Response& response, bool keep_alive,
                   bool head_only) {
  std::string error;
  if (!SerializeResponse(response, keep_alive, head_only, &connection->out, &error)) {
    keep_alive = false;
    const Response failure = Response::Text(500, "handler returned an invalid response: " + error);
    std::string ignored;
    (void)SerializeResponse(failure, false, head_only, &connection->out, &ignored);
  }
  connection->out_done = 0;
  connection->close_after_write = !keep_alive;
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::Create(std::string_view listen,
                                                       std::string_view input_name,
                                                       Handler handler, Options options) {
  using R = Result<std::unique_ptr<HttpServer>>;
  auto address = ParseHostPort(listen, input_name);
  if (!address.ok()) {
    return address.status();
  }
  if (!handler) {
    return R::Error(std::string(input_name) + ": HttpServer needs a handler");
  }
  const std::string where = std::string(input_name) + "=" + FormatHostPort(*address);
  sockaddr_storage storage{};
  socklen_t length = 0;
  if (address->ipv6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(address->port);
    inet_pton(AF_INET6, address->host.c_str(), &v6->sin6_addr);
    length = sizeof(sockaddr_in6);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(address->port);
    inet_pton(AF_INET, address->host.c_str(), &v4->sin_addr);
    length = sizeof(sockaddr_in);
  }
  const int fd = socket(address->ipv6 ? AF_INET6 : AF_INET,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return R::Error(where + ": cannot create a socket: " + ErrnoText(errno));
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
    const int error = errno;
    close(fd);
    return R::Error(where + ": cannot bind: " + ErrnoText(error));
  }
  if (::listen(fd, 64) != 0) {
    const int error = errno;
    close(fd);
    return R::Error(where + ": cannot listen: " + ErrnoText(error));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length);
  const uint16_t port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const int error = errno;
    close(fd);
    return R::Error(where + ": cannot create an eventfd: " + ErrnoText(error));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(fd, wake, address->host, address->ipv6, port,
                                                    std::move(handler), options));
}

HttpServer::HttpServer(int listen_fd, int wake_fd, std::string host, bool ipv6, uint16_t port,
                       Handler handler, Options options)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      host_(std::move(host)),
      ipv6_(ipv6),
      port_(port),
      handler_(std::move(handler)),
      options_(options) {}

HttpServer::~HttpServer() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

Status HttpServer::Start() {
  if (started_ || stopping_.load()) {
    return Status::Error("HttpServer on " + address() + ": Start() called twice or after Stop()");
  }
  started_ = true;
  thread_ = std::thread([this] { Serve(); });
  return Status::Ok();
}

void HttpServer::Stop() {
  stopping_.store(true);
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) {
    thread_.join();
  }
}

void HttpServer::Serve() {
  std::list<Connection> connections;
  std::vector<pollfd> fds;
  std::vector<Connection*> order;  // connection of fds[i + 2]

  auto close_connection = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    return connections.erase(it);
  };

  // Parses and answers buffered requests while nothing is waiting to be written.
  auto process = [&](Connection& c) {
    while (c.out.empty() && !c.close_after_write) {
      ParseResult parsed = ParseRequest(c.in, options_.limits);
      if (parsed.kind == ParseResult::Kind::kNeedMore) {
        return;
      }
      if (parsed.kind == ParseResult::Kind::kError) {
        QueueResponse(&c, Response::Text(parsed.status, parsed.error), false, false);
        c.in.clear();
        c.deadline = Clock::now() + options_.read_timeout;
        return;
      }
      parsed.request.peer = c.peer;
      c.in.erase(0, parsed.consumed);
      Response response;
      try {
        response = handler_(parsed.request);
      } catch (const std::exception& e) {
        response = Response::Text(500, std::string("handler failed: ") + e.what());
      } catch (...) {
        response = Response::Text(500, "handler failed");
      }
      QueueResponse(&c, response, parsed.request.keep_alive, parsed.request.method == "HEAD");
      c.deadline = Clock::now() + options_.read_timeout;
    }
  };

  while (!stopping_.load()) {
    fds.clear();
    order.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    auto now = Clock::now();
    Clock::time_point earliest = now + std::chrono::hours(1);
    for (Connection& c : connections) {
      short events = 0;
      if (!c.out.empty()) {
        events = POLLOUT;
      } else if (!c.close_after_write && !c.peer_closed) {
        events = POLLIN;
      }
      fds.push_back({c.fd, events, 0});
      order.push_back(&c);
      earliest = std::min(earliest, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(earliest - now);
    const int timeout_ms =
        static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(wait.count() + 1, 60000)));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      break;
    }
    if (stopping_.load()) {
      break;
    }

    // New connections.
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_storage peer{};
        socklen_t peer_length = sizeof(peer);
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          break;  // EAGAIN, or a transient error (EMFILE, ECONNABORTED): try on the next round
        }
        Connection c;
        c.fd = fd;
        c.peer = PeerName(peer);
        c.deadline = Clock::now() + options_.read_timeout;
        if (connections.size() >= options_.max_connections) {
          QueueResponse(&c, Response::Text(503, "too many connections; try again later"), false,
                        false);
        }
        connections.push_back(std::move(c));
      }
    }

    // Existing connections (only those polled this round: new ones are at the end of the list).
    now = Clock::now();
    for (size_t i = 0; i < order.size(); ++i) {
      Connection& c = *order[i];
      const short revents = fds[i + 2].revents;
      if (revents & (POLLIN | POLLHUP | POLLERR)) {
        if (c.out.empty()) {
          char chunk[kReadChunk];
          for (;;) {
            const ssize_t n = recv(c.fd, chunk, sizeof(chunk), 0);
            if (n > 0) {
              c.in.append(chunk, static_cast<size_t>(n));
              // Never buffer much more than one largest request: the parser decides with that.
              if (c.in.size() > options_.limits.max_head_bytes + options_.limits.max_body_bytes) {
                break;
              }
              continue;
            }
            if (n == 0) {
              c.peer_closed = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
              c.peer_closed = true;
              c.in.clear();
            }
            break;
          }
          process(c);
        } else if (revents & (POLLHUP | POLLERR)) {
          c.peer_closed = true;
          c.out.clear();
          c.close_after_write = true;
        }
      }
      if ((revents & POLLOUT) && !c.out.empty()) {
        while (c.out_done < c.out.size()) {
          const ssize_t n = send(c.fd, c.out.data() + c.out_done, c.out.size() - c.out_done,
                                 MSG_NOSIGNAL);
          if (n > 0) {
            c.out_done += static_cast<size_t>(n);
            continue;
          }
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            break;
          }
          c.out.clear();  // the client is gone
          c.close_after_write = true;
          break;
        }
        if (c.out_done >= c.out.size()) {
          c.out.clear();
          c.out_done = 0;
          if (!c.close_after_write) {
            c.deadline = Clock::now() + options_.read_timeout;
            process(c);  // a pipelined request may already be buffered
          }
        }
      }
    }

    // Close finished, abandoned and timed-out connections.
    now = Clock::now();
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = *it;
      const bool written = c.out.empty();
      if (written && c.close_after_write) {
        it = close_connection(it);
        continue;
      }
      if (written && c.peer_closed) {
        it = close_connection(it);  // nothing more can arrive; a partial request is dropped
        continue;
      }
      if (now >= c.deadline) {
        if (written && !c.in.empty()) {
          // A request had begun but did not finish in time: say so, then close.
          QueueResponse(&c, Response::Text(408, "request not received within " +
                                                    std::to_string(options_.read_timeout.count()) +
                                                    " ms"),
                        false, false);
          c.in.clear();
          c.deadline = now + options_.read_timeout;
          // Try to write it right away; a client that is not reading is closed next time.
          const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          (void)n;
          it = close_connection(it);
          continue;
        }
        it = close_connection(it);  // idle keep-alive, or a client not reading its response
        continue;
      }
      ++it;
    }
  }
  for (auto it = connections.begin(); it != connections.end();) {
    it = close_connection(it);
  }
}

}  // namespace tessera::http
