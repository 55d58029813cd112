// Tests for HttpServer over real TCP sockets on loopback: routing, keep-alive, concurrent and slow
// clients, limits, timeouts, and Stop(). Every wait has a deadline.
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace tessera::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking TCP client with deadlines, enough to speak HTTP/1.1 by hand.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads one response (head + Content-Length body). Empty on timeout or close before one arrived.
  std::string ReadResponse(std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const size_t at = buffer_.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) {
          length = std::stoul(buffer_.substr(at + 16));
        }
        if (buffer_.size() >= head_end + 4 + length) {
          std::string response = buffer_.substr(0, head_end + 4 + length);
          buffer_.erase(0, head_end + 4 + length);
          return response;
        }
      }
      if (!ReadSome(deadline)) return {};
    }
  }

  // True when the server closes the connection before `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (ReadSome(deadline)) {
    }
    return closed_;
  }

  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }

 private:
  bool ReadSome(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[4096];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string buffer_;
};

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

std::string StatusLine(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

// Echoes what it saw: method, path, one query value, the body and the peer address.
Response Echo(const Request& request) {
  if (request.path == "/missing") {
    return Response::Text(404, "no route for " + request.path);
  }
  if (request.path == "/throw") {
    throw std::runtime_error("boom");
  }
  Response response;
  response.body = request.method + " " + request.path + " q=" +
                  (request.query.count("q") ? request.query.at("q") : "-") + " body=" +
                  request.body + " peer=" + request.peer;
  response.headers.emplace_back("X-Echo", "yes");
  return response;
}

std::unique_ptr<HttpServer> StartServer(HttpServer::Options options = {},
                                        HttpServer::Handler handler = Echo) {
  auto server = HttpServer::Create("127.0.0.1:0", "--http", std::move(handler), options);
  EXPECT_TRUE(server.ok()) << server.error();
  if (!server.ok()) return nullptr;
  EXPECT_NE((*server)->port(), 0);
  EXPECT_TRUE((*server)->Start().ok());
  return std::move(*server);
}

TEST(HttpServer, AnswersARequestOverTcp) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));
  Client client(server->port());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send("GET /hello%20there?q=x%2By HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string response = client.ReadResponse();
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 200 OK");
  EXPECT_NE(response.find("X-Echo: yes\r\n"), std::string::npos) << response;
  EXPECT_EQ(Body(response).rfind("GET /hello there q=x+y body= peer=127.0.0.1:", 0), 0u)
      << Body(response);
}

TEST(HttpServer, KeepsAConnectionAliveAcrossRequests) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  for (int i = 0; i < 3; ++i) {
    const std::string body = "n" + std::to_string(i);
    ASSERT_TRUE(client.Send("PUT /x HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body));
    const std::string response = client.ReadResponse();
    EXPECT_NE(response.find("Connection: keep-alive"), std::string::npos) << response;
    EXPECT_NE(Body(response).find("body=" + body), std::string::npos) << response;
  }
  // Two pipelined requests in one write are answered in order.
  ASSERT_TRUE(client.Send("GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_NE(Body(client.ReadResponse()).find("GET /a "), std::string::npos);
  EXPECT_NE(Body(client.ReadResponse()).find("GET /b "), std::string::npos);
  // Connection: close is honoured.
  ASSERT_TRUE(client.Send("GET /c HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  EXPECT_NE(client.ReadResponse().find("Connection: close"), std::string::npos);
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, ClosesHttp10ConnectionsAfterTheResponse) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET /old HTTP/1.0\r\n\r\n"));
  EXPECT_EQ(StatusLine(client.ReadResponse()), "HTTP/1.1 200 OK");
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, PassesHandlerStatusesAndTurnsExceptionsInto500) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET /missing HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string missing = client.ReadResponse();
  EXPECT_EQ(StatusLine(missing), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(Body(missing), "no route for /missing\n");
  ASSERT_TRUE(client.Send("GET /throw HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string thrown = client.ReadResponse();
  EXPECT_EQ(StatusLine(thrown), "HTTP/1.1 500 Internal Server Error");
  EXPECT_NE(Body(thrown).find("boom"), std::string::npos);
  // The server is still serving.
  Client again(server->port());
  ASSERT_TRUE(again.Send("GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_EQ(StatusLine(again.ReadResponse()), "HTTP/1.1 200 OK");
}

TEST(HttpServer, AnswersHeadWithoutABody) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("HEAD /x HTTP/1.1\r\nHost: t\r\n\r\nGET /y HTTP/1.1\r\nHost: t\r\n\r\n"));
  // The HEAD response announces its length but sends no body, so the bytes after its head are
  // the GET's response. (ReadResponse reads Content-Length bytes after the head.)
  const std::string head = client.ReadResponse();
  EXPECT_EQ(StatusLine(head), "HTTP/1.1 200 OK");
  EXPECT_EQ(Body(head).rfind("HTTP/1.1 200 OK", 0), 0u) << head;
}

TEST(HttpServer, RejectsALargeBodyWith413AndCloses) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n"));
  const std::string response = client.ReadResponse();
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 413 Content Too Large");
  EXPECT_NE(Body(response).find("2000000 bytes is larger than the limit of 1048576"),
            std::string::npos)
      << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, RejectsAnOversizedHeadWith431) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(10000, 'x')));
  EXPECT_EQ(StatusLine(client.ReadResponse()), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, RejectsChunkedBodies) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send(
      "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  const std::string response = client.ReadResponse();
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 411 Length Required");
  EXPECT_NE(Body(response).find("Content-Length"), std::string::npos);
}

TEST(HttpServer, ServesTwoClientsConcurrently) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client first(server->port());
  Client second(server->port());
  // Both half-send a request; then each completes it in the opposite order.
  ASSERT_TRUE(first.Send("GET /first HTTP/1.1\r\nHo"));
  ASSERT_TRUE(second.Send("GET /second HTTP/1.1\r\nHo"));
  ASSERT_TRUE(second.Send("st: t\r\n\r\n"));
  EXPECT_NE(Body(second.ReadResponse(2000ms)).find("/second"), std::string::npos);
  ASSERT_TRUE(first.Send("st: t\r\n\r\n"));
  EXPECT_NE(Body(first.ReadResponse(2000ms)).find("/first"), std::string::npos);
}

TEST(HttpServer, ASlowClientDoesNotBlockAFastOne) {
  HttpServer::Options options;
  options.read_timeout = 5000ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  Client slow(server->port());
  ASSERT_TRUE(slow.Send("GET /slow HTTP/1.1\r\n"));  // and then nothing for a while
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    Client fast(server->port());
    ASSERT_TRUE(fast.Send("GET /fast HTTP/1.1\r\nHost: t\r\n\r\n"));
    ASSERT_EQ(StatusLine(fast.ReadResponse(1000ms)), "HTTP/1.1 200 OK") << "request " << i;
  }
  EXPECT_LT(Clock::now() - start, 2000ms);
  // The slow one can still finish its request.
  ASSERT_TRUE(slow.Send("Host: t\r\n\r\n"));
  EXPECT_NE(Body(slow.ReadResponse()).find("/slow"), std::string::npos);
}

TEST(HttpServer, TimesOutAStalledRequestWith408) {
  HttpServer::Options options;
  options.read_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  Client stalled(server->port());
  ASSERT_TRUE(stalled.Send("GET /stalled HTTP/1.1\r\nHost:"));
  const auto start = Clock::now();
  const std::string response = stalled.ReadResponse(3000ms);
  EXPECT_EQ(StatusLine(response), "HTTP/1.1 408 Request Timeout");
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_TRUE(stalled.ClosedWithin(2000ms));
  // Dribbling a byte at a time does not extend the bound.
  Client dribble(server->port());
  const auto dribble_start = Clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    if (!dribble.Send("X")) break;
    closed = dribble.ClosedWithin(50ms);
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - dribble_start, 1500ms);
}

TEST(HttpServer, ClosesIdleKeepAliveConnections) {
  HttpServer::Options options;
  options.read_timeout = 200ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_EQ(StatusLine(client.ReadResponse()), "HTTP/1.1 200 OK");
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, AnswersAClientThatShutsDownItsWritingSide) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET /bye HTTP/1.1\r\nHost: t\r\n\r\n"));
  client.ShutdownWrite();
  EXPECT_NE(Body(client.ReadResponse()).find("/bye"), std::string::npos);
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, RefusesConnectionsBeyondTheLimitWith503) {
  HttpServer::Options options;
  options.max_connections = 2;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  Client a(server->port());
  Client b(server->port());
  ASSERT_TRUE(a.Send("GET /a HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(b.Send("GET /b HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_EQ(StatusLine(a.ReadResponse()), "HTTP/1.1 200 OK");
  ASSERT_EQ(StatusLine(b.ReadResponse()), "HTTP/1.1 200 OK");
  Client c(server->port());
  EXPECT_EQ(StatusLine(c.ReadResponse()), "HTTP/1.1 503 Service Unavailable");
}

TEST(HttpServer, StopsPromptlyWithOpenConnections) {
  HttpServer::Options options;
  options.read_timeout = 60000ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  Client idle(server->port());
  Client partial(server->port());
  ASSERT_TRUE(partial.Send("GET / HTTP/1.1\r\n"));
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, 500ms);
  EXPECT_TRUE(idle.ClosedWithin(1000ms));
  server->Stop();  // idempotent
  EXPECT_FALSE(server->Start().ok());
}

TEST(HttpServer, CreateNamesTheAddressInErrors) {
  auto bad = HttpServer::Create("127.0.0.1", "--http", Echo);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("--http=\"127.0.0.1\": missing \":PORT\""), std::string::npos)
      << bad.error();
  auto first = HttpServer::Create("127.0.0.1:0", "--http", Echo);
  ASSERT_TRUE(first.ok()) << first.error();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = HttpServer::Create(taken, "http", Echo);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("http=" + taken + ": cannot bind"), std::string::npos)
      << second.error();
}

}  // namespace
}  // namespace tessera::http
