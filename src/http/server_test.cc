// Tests for HttpServer over real TCP sockets on loopback: cpp-httplib's client for well-formed
// requests (its SSLClient for HTTPS, with the certificates deploy/kubernetes/extender-certs.sh
// makes), and a raw socket for what no well-behaved client sends (partial, stalled, dribbled,
// pipelined, oversized or malformed requests, handshakes that never come). Routing, keep-alive,
// limits, timeouts, Stop(), TLS with client certificates, and legitimate clients served on time
// while slow clients from another address hold more connections than the server serves. Every
// wait has a deadline.
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "testing/support/http_attack.h"

namespace tessera::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A TCP connection that sends exactly the bytes it is given and collects what comes back.
class RawClient {
 public:
  explicit RawClient(uint16_t port, const char* source_ip = nullptr) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (source_ip != nullptr) {
      sockaddr_in source{};
      source.sin_family = AF_INET;
      inet_pton(AF_INET, source_ip, &source.sin_addr);
      bind(fd_, reinterpret_cast<sockaddr*>(&source), sizeof(source));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { close(fd_); }
  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Everything received until `text` appears `count` times, the server closes, or `timeout`.
  const std::string& ReadUntil(std::string_view text, int count = 1,
                               std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = Clock::now() + timeout;
    while (Count(text) < count && ReadSome(deadline)) {
    }
    return received_;
  }

  // True when the server closes the connection before `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (ReadSome(deadline)) {
    }
    return closed_;
  }

  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }
  const std::string& received() const { return received_; }

 private:
  int Count(std::string_view text) const {
    int n = 0;
    for (size_t at = received_.find(text); at != std::string::npos;
         at = received_.find(text, at + 1)) {
      ++n;
    }
    return n;
  }

  bool ReadSome(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || closed_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[4096];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    received_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string received_;
};

bool StartsWith(const std::string& text, std::string_view prefix) {
  return text.rfind(prefix, 0) == 0;
}

// Echoes what it saw: method, path, one query value, the body and the peer address.
Response Echo(const Request& request) {
  if (request.path == "/missing") {
    return Response::Text(404, "no route for " + request.path);
  }
  if (request.path == "/throw") {
    throw std::runtime_error("boom");
  }
  if (request.path == "/bad-header") {
    Response r;
    r.headers.emplace_back("X-Split", "a\r\nSet-Cookie: b");
    return r;
  }
  if (request.path == "/own-length") {
    Response r;
    r.headers.emplace_back("Content-Length", "3");
    return r;
  }
  if (request.path == "/whoami") {
    return Response::Text(200, "subject=" + request.client_subject);
  }
  Response response;
  response.body = request.method + " " + request.path +
                  " q=" + (request.query.count("q") ? request.query.at("q") : "-") +
                  " body=" + request.body + " peer=" + request.peer;
  response.headers.emplace_back("X-Echo", request.Header("x-echo-me").value_or("yes"));
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

std::unique_ptr<httplib::Client> ClientOf(const HttpServer& server) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
  client->set_keep_alive(true);
  client->set_read_timeout(5, 0);
  client->set_connection_timeout(5, 0);
  return client;
}

TEST(HttpServer, AnswersARequestOverTcp) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));
  auto client = ClientOf(*server);
  client->set_url_encode(false);  // the target goes out exactly as written
  auto response = client->Get("/hello%20there?q=x%2By", {{"X-Echo-Me", "seen"}});
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("X-Echo"), "seen");
  EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_TRUE(StartsWith(response->body, "GET /hello there q=x+y body= peer=127.0.0.1:"))
      << response->body;
}

TEST(HttpServer, KeepsAConnectionAliveAcrossRequests) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = ClientOf(*server);
  std::string first_peer;
  for (int i = 0; i < 3; ++i) {
    const std::string body = "n" + std::to_string(i);
    auto response = client->Put("/x", body, "text/plain");
    ASSERT_TRUE(response) << httplib::to_string(response.error());
    EXPECT_NE(response->body.find("body=" + body), std::string::npos) << response->body;
    // The same client port every time: one connection carried all three.
    const std::string peer = response->body.substr(response->body.find("peer="));
    if (i == 0) first_peer = peer;
    EXPECT_EQ(peer, first_peer);
  }
  // Two pipelined requests in one write are answered in order.
  RawClient raw(server->port());
  ASSERT_TRUE(raw.Send("GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string& both = raw.ReadUntil("HTTP/1.1 200", 2);
  ASSERT_NE(both.find("GET /b "), std::string::npos) << both;
  EXPECT_LT(both.find("GET /a "), both.find("GET /b "));
  // Connection: close is honoured.
  ASSERT_TRUE(raw.Send("GET /c HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  EXPECT_NE(raw.ReadUntil("GET /c ").find("Connection: close"), std::string::npos);
  EXPECT_TRUE(raw.ClosedWithin(2000ms));
}

TEST(HttpServer, ClosesHttp10ConnectionsAfterTheResponse) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient client(server->port());
  ASSERT_TRUE(client.Send("GET /old HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(StartsWith(client.ReadUntil("GET /old"), "HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, PassesHandlerStatusesAndTurnsExceptionsInto500) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = ClientOf(*server);
  auto missing = client->Get("/missing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, "no route for /missing\n");
  auto thrown = client->Get("/throw");
  ASSERT_TRUE(thrown);
  EXPECT_EQ(thrown->status, 500);
  EXPECT_NE(thrown->body.find("boom"), std::string::npos) << thrown->body;
  // A header that would split the response, or one the server owns: 500, not a broken response.
  for (const char* path : {"/bad-header", "/own-length"}) {
    auto bad = client->Get(path);
    ASSERT_TRUE(bad) << path;
    EXPECT_EQ(bad->status, 500) << path;
    EXPECT_FALSE(bad->has_header("X-Split")) << path;
  }
  // The server is still serving.
  auto again = ClientOf(*server)->Get("/ok");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(HttpServer, AnswersHeadWithoutABody) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = ClientOf(*server);
  // /missing answers the same body whatever the method.
  auto get = client->Get("/missing");
  ASSERT_TRUE(get);
  auto head = client->Head("/missing");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 404);
  EXPECT_TRUE(head->body.empty());
  // The length of the body it would have, and no body on the wire: the next response on the same
  // connection reads cleanly.
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(get->body.size()));
  auto after = client->Get("/after");
  ASSERT_TRUE(after) << httplib::to_string(after.error());
  EXPECT_TRUE(StartsWith(after->body, "GET /after ")) << after->body;
}

TEST(HttpServer, RejectsALargeBodyWith413AndCloses) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient client(server->port());
  // Refused from the header alone: the body is never sent.
  ASSERT_TRUE(client.Send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n"));
  const std::string& response = client.ReadUntil("1048576", 1, 2000ms);
  EXPECT_TRUE(StartsWith(response, "HTTP/1.1 413 ")) << response;
  EXPECT_NE(response.find("Content-Length 2000000 bytes is larger than the limit of 1048576"),
            std::string::npos)
      << response;
  EXPECT_NE(response.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, ReadsChunkedBodiesUpToTheLimit) {
  HttpServer::Options options;
  options.max_body_bytes = 1000;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient small(server->port());
  ASSERT_TRUE(small.Send(
      "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  EXPECT_NE(small.ReadUntil("body=").find("body=hello peer="), std::string::npos)
      << small.received();
  RawClient large(server->port());
  const std::string chunk = "258\r\n" + std::string(600, 'x') + "\r\n";  // 0x258 = 600
  ASSERT_TRUE(large.Send("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" +
                         chunk + chunk + "0\r\n\r\n"));
  const std::string& refused = large.ReadUntil("limit of 1000");
  EXPECT_TRUE(StartsWith(refused, "HTTP/1.1 413 ")) << refused;
  EXPECT_TRUE(large.ClosedWithin(2000ms));
}

TEST(HttpServer, RejectsAnOversizedHeadWith431) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient client(server->port());
  // Refused once the head passes 8 KiB, without waiting for its end.
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(10000, 'x')));
  const std::string& response = client.ReadUntil("8192 bytes", 1, 2000ms);
  EXPECT_TRUE(StartsWith(response, "HTTP/1.1 431 ")) << response;
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, ARequestWithoutLengthHasNoBody) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient client(server->port());
  // Neither Content-Length nor Transfer-Encoding: no body (RFC 9112 6.3), answered at once, and
  // the connection stays usable.
  const auto start = Clock::now();
  ASSERT_TRUE(
      client.Send("POST /empty HTTP/1.1\r\nHost: t\r\n\r\n"
                  "PUT /next HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string& both = client.ReadUntil("PUT /next ", 1, 2000ms);
  EXPECT_NE(both.find("POST /empty q=- body= peer="), std::string::npos) << both;
  EXPECT_NE(both.find("PUT /next q=- body= peer="), std::string::npos) << both;
  EXPECT_LT(Clock::now() - start, 1000ms);
}

TEST(HttpServer, RefusesMalformedRequestsWith400) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  for (const std::string& request :
       {std::string("GET / HTTP/9.9\r\nHost: t\r\n\r\n"), std::string("GET\r\n\r\n"),
        std::string("BREW /pot HTTP/1.1\r\nHost: t\r\n\r\n")}) {
    RawClient client(server->port());
    ASSERT_TRUE(client.Send(request));
    const std::string& response = client.ReadUntil("\r\n\r\n");
    EXPECT_TRUE(StartsWith(response, "HTTP/1.1 400 ")) << request.substr(0, 40) << response;
    EXPECT_TRUE(client.ClosedWithin(2000ms)) << request.substr(0, 40);
  }
}

TEST(HttpServer, ServesTwoClientsConcurrently) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient first(server->port());
  RawClient second(server->port());
  // Both half-send a request; then each completes it in the opposite order.
  ASSERT_TRUE(first.Send("GET /first HTTP/1.1\r\nHo"));
  ASSERT_TRUE(second.Send("GET /second HTTP/1.1\r\nHo"));
  ASSERT_TRUE(second.Send("st: t\r\n\r\n"));
  EXPECT_NE(second.ReadUntil("/second", 1, 2000ms).find("GET /second"), std::string::npos);
  ASSERT_TRUE(first.Send("st: t\r\n\r\n"));
  EXPECT_NE(first.ReadUntil("/first", 1, 2000ms).find("GET /first"), std::string::npos);
}

TEST(HttpServer, ASlowClientDoesNotBlockAFastOne) {
  HttpServer::Options options;
  options.read_timeout = 5000ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient slow(server->port());
  ASSERT_TRUE(slow.Send("GET /slow HTTP/1.1\r\n"));  // and then nothing for a while
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    auto fast = ClientOf(*server);
    fast->set_keep_alive(false);
    auto response = fast->Get("/fast");
    ASSERT_TRUE(response) << "request " << i;
    ASSERT_EQ(response->status, 200) << "request " << i;
  }
  EXPECT_LT(Clock::now() - start, 2000ms);
  // The slow one can still finish its request.
  ASSERT_TRUE(slow.Send("Host: t\r\n\r\n"));
  EXPECT_NE(slow.ReadUntil("/slow").find("GET /slow"), std::string::npos);
}

TEST(HttpServer, TimesOutAStalledRequestWith408) {
  HttpServer::Options options;
  options.read_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient stalled(server->port());
  ASSERT_TRUE(stalled.Send("GET /stalled HTTP/1.1\r\nHost:"));
  const auto start = Clock::now();
  const std::string& response = stalled.ReadUntil("\r\n\r\n", 1, 3000ms);
  EXPECT_TRUE(StartsWith(response, "HTTP/1.1 408 ")) << response;
  EXPECT_NE(response.find("did not arrive within 300 ms"), std::string::npos) << response;
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_TRUE(stalled.ClosedWithin(2000ms));
  // Dribbling a byte at a time does not extend the bound.
  RawClient dribble(server->port());
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
  options.idle_timeout = 200ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_TRUE(StartsWith(client.ReadUntil("GET / "), "HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

TEST(HttpServer, AnswersAClientThatShutsDownItsWritingSide) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  RawClient client(server->port());
  ASSERT_TRUE(client.Send("GET /bye HTTP/1.1\r\nHost: t\r\n\r\n"));
  client.ShutdownWrite();
  EXPECT_NE(client.ReadUntil("/bye").find("GET /bye"), std::string::npos);
  EXPECT_TRUE(client.ClosedWithin(2000ms));
}

// Beyond max_connections, a new connection makes room by closing one that is not being answered:
// one of the address holding the most. A client with one connection is served.
TEST(HttpServer, MakesRoomByClosingAConnectionOfTheClientHoldingTheMost) {
  HttpServer::Options options;
  options.max_connections = 4;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  // 127.0.0.1 holds one kept-alive connection; 127.0.0.2 holds three idle ones.
  RawClient mine(server->port());
  ASSERT_TRUE(mine.Send("GET /mine HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(StartsWith(mine.ReadUntil("GET /mine"), "HTTP/1.1 200 OK\r\n"));
  // Each answered once, one after another: in the book, idle, the first the longest.
  std::vector<std::unique_ptr<RawClient>> hoarded;
  for (int i = 0; i < 3; ++i) {
    hoarded.push_back(std::make_unique<RawClient>(server->port(), "127.0.0.2"));
    ASSERT_TRUE(hoarded.back()->Send("GET /h HTTP/1.1\r\nHost: t\r\n\r\n"));
    ASSERT_TRUE(StartsWith(hoarded.back()->ReadUntil("GET /h"), "HTTP/1.1 200 OK\r\n"));
    std::this_thread::sleep_for(5ms);
  }
  // A fifth connection, from a third address: served, and the oldest of 127.0.0.2's is closed.
  RawClient fresh(server->port(), "127.0.0.3");
  ASSERT_TRUE(fresh.Send("GET /fresh HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_TRUE(StartsWith(fresh.ReadUntil("GET /fresh"), "HTTP/1.1 200 OK\r\n")) << fresh.received();
  EXPECT_TRUE(hoarded[0]->ClosedWithin(2000ms));
  EXPECT_FALSE(hoarded[1]->ClosedWithin(0ms));
  // The one connection of 127.0.0.1 is still open and served.
  ASSERT_TRUE(mine.Send("GET /again HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_NE(mine.ReadUntil("GET /again").find("GET /again"), std::string::npos) << mine.received();
}

// Only when every connection is being answered does a new client get 503.
TEST(HttpServer, RefusesWith503WhenEveryConnectionIsBeingAnswered) {
  std::mutex mu;
  std::condition_variable cv;
  int inside = 0;
  bool release = false;
  HttpServer::Options options;
  options.max_connections = 2;
  auto server = StartServer(options, [&](const Request& request) {
    if (request.path == "/block") {
      std::unique_lock<std::mutex> lock(mu);
      ++inside;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return Echo(request);
  });
  ASSERT_TRUE(server);
  RawClient a(server->port());
  RawClient b(server->port());
  ASSERT_TRUE(a.Send("GET /block HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(b.Send("GET /block HTTP/1.1\r\nHost: t\r\n\r\n"));
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return inside == 2; }));
  }
  RawClient c(server->port());
  ASSERT_TRUE(c.Send("GET /c HTTP/1.1\r\nHost: t\r\n\r\n"));
  const std::string& refused = c.ReadUntil("try again later");
  EXPECT_TRUE(StartsWith(refused, "HTTP/1.1 503 ")) << refused;
  EXPECT_NE(refused.find("serves 2 at once"), std::string::npos) << refused;
  EXPECT_TRUE(c.ClosedWithin(2000ms));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(StartsWith(a.ReadUntil("GET /block"), "HTTP/1.1 200 OK\r\n"));
  EXPECT_TRUE(StartsWith(b.ReadUntil("GET /block"), "HTTP/1.1 200 OK\r\n"));
  auto d = ClientOf(*server);
  auto response = d->Get("/d");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
}

TEST(HttpServer, TheHeadHasItsOwnDeadline) {
  HttpServer::Options options;
  options.header_timeout = 300ms;
  options.read_timeout = 5000ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient stalled(server->port());
  const auto start = Clock::now();
  ASSERT_TRUE(stalled.Send("POST /x HTTP/1.1\r\nHost: t\r\n"));
  const std::string& response = stalled.ReadUntil("\r\n\r\n", 1, 3000ms);
  EXPECT_TRUE(StartsWith(response, "HTTP/1.1 408 ")) << response;
  EXPECT_NE(response.find("the request head did not arrive within 300 ms"), std::string::npos)
      << response;
  EXPECT_LT(Clock::now() - start, 2000ms);
  // A head in time with a body sent slowly has read_timeout for all of it.
  RawClient slow_body(server->port());
  ASSERT_TRUE(slow_body.Send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab"));
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(slow_body.Send("cd"));
  EXPECT_NE(slow_body.ReadUntil("body=").find("body=abcd"), std::string::npos)
      << slow_body.received();
}

TEST(HttpServer, StopsPromptlyWithOpenConnections) {
  HttpServer::Options options;
  options.read_timeout = 60000ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient idle(server->port());
  RawClient partial(server->port());
  ASSERT_TRUE(partial.Send("GET / HTTP/1.1\r\n"));
  auto keep_alive = ClientOf(*server);
  ASSERT_TRUE(keep_alive->Get("/kept"));
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  server->Stop();
  EXPECT_LT(Clock::now() - start, 500ms);
  EXPECT_TRUE(idle.ClosedWithin(1000ms));
  EXPECT_TRUE(partial.ClosedWithin(1000ms));
  server->Stop();  // idempotent
  EXPECT_FALSE(server->Start().ok());
  RawClient late(server->port());
  EXPECT_FALSE(late.connected()) << "still accepting after Stop()";
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
  ASSERT_FALSE(second.ok()) << "two servers on one port (SO_REUSEPORT?)";
  EXPECT_NE(second.error().find("http=" + taken + ": cannot bind"), std::string::npos)
      << second.error();
}

// 200 keep-alive clients, all connected at once, keep getting answers within 100 ms while ten
// slowloris clients hold connections open by sending one header byte every 20 ms.
TEST(HttpServer, ServesManyKeepAliveClientsBesideSlowlorisClients) {
  HttpServer::Options options;
  options.max_connections = 256;
  options.read_timeout = 10000ms;  // longer than the test: the slowloris clients are never cut
  auto server = StartServer(options);
  ASSERT_TRUE(server);

  constexpr int kSlowloris = 10;
  std::vector<std::unique_ptr<RawClient>> slowloris;
  for (int i = 0; i < kSlowloris; ++i) {
    slowloris.push_back(std::make_unique<RawClient>(server->port()));
    ASSERT_TRUE(slowloris.back()->Send("GET /slow HTTP/1.1\r\nHost: t\r\nX-Trickle: "));
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done) {
      for (auto& s : slowloris) (void)s->Send("a");
      std::this_thread::sleep_for(20ms);
    }
  });

  constexpr int kClients = 200, kThreads = 8, kRounds = 5;
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(ClientOf(*server));
  std::mutex mu;
  std::vector<double> latencies_ms;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> mine;
      std::vector<std::string> failed;
      for (int round = 0; round < kRounds; ++round) {
        for (int c = t; c < kClients; c += kThreads) {
          const auto start = Clock::now();
          auto response = clients[c]->Get("/fast?q=" + std::to_string(c));
          mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
          if (!response || response->status != 200 ||
              response->body.find(" q=" + std::to_string(c) + " ") == std::string::npos) {
            failed.push_back("client " + std::to_string(c) + " round " + std::to_string(round) +
                             ": " +
                             (response ? std::to_string(response->status)
                                       : httplib::to_string(response.error())));
          }
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
      failures.insert(failures.end(), failed.begin(), failed.end());
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  trickle.join();

  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
  ASSERT_EQ(latencies_ms.size(), static_cast<size_t>(kClients * kRounds));
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const double p50 = latencies_ms[latencies_ms.size() / 2];
  const double p99 = latencies_ms[latencies_ms.size() * 99 / 100];
  const double max = latencies_ms.back();
  std::printf(
      "%d keep-alive clients x %d requests beside %d slowloris clients: p50 %.2f ms, "
      "p99 %.2f ms, max %.2f ms\n",
      kClients, kRounds, kSlowloris, p50, p99, max);
  // A sanitizer build on a shared 2-core machine is several times slower at everything.
  EXPECT_LT(max, testing::UnderAddressSanitizer() ? 1000.0 : 100.0)
      << "p50 " << p50 << " ms, p99 " << p99 << " ms";
  // The slowloris clients were held open all along, not turned away.
  for (auto& s : slowloris) EXPECT_FALSE(s->ClosedWithin(0ms));
}

// A fresh directory under the test's temporary folder.
std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/tessera-http-test-" + std::to_string(getpid()) + "-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

HttpServer::Options TlsOptions(const testing::TlsFiles& files) {
  HttpServer::Options options;
  options.tls = HttpServer::TlsOptions{files.cert, files.key, files.ca};
  return options;
}

// An HTTPS client of 127.0.0.1:port that checks the server against `ca` and presents `cert`.
std::unique_ptr<httplib::SSLClient> TlsClient(uint16_t port, const std::string& ca,
                                              const std::string& cert = "",
                                              const std::string& key = "") {
  auto client = cert.empty() ? std::make_unique<httplib::SSLClient>("127.0.0.1", port)
                             : std::make_unique<httplib::SSLClient>("127.0.0.1", port, cert, key);
  client->set_ca_cert_path(ca.c_str());
  client->enable_server_certificate_verification(true);
  client->set_read_timeout(5, 0);
  client->set_connection_timeout(5, 0);
  return client;
}

TEST(HttpServer, ServesHttpsOnlyToClientsWithACertificateOfItsCa) {
  auto files = testing::MakeTlsFiles(TempDir("tls"));
  ASSERT_TRUE(files.ok()) << files.error();
  auto other = testing::MakeTlsFiles(TempDir("tls-other"));  // another CA altogether
  ASSERT_TRUE(other.ok()) << other.error();
  std::vector<std::string> logged;
  std::mutex log_mu;
  HttpServer::Options options = TlsOptions(*files);
  options.log = [&](std::string_view line) {
    std::lock_guard<std::mutex> lock(log_mu);
    logged.emplace_back(line);
  };
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  EXPECT_TRUE(server->tls());
  // The client certificate of its CA: served, and the handler learns whose it is.
  auto good = TlsClient(server->port(), files->ca, files->client_cert, files->client_key);
  auto response = good->Get("/whoami");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "subject=CN=tessera-scheduler\n");
  // No certificate; a certificate of another CA; the server's own certificate (not one for a
  // client): the handshake fails, no request is served.
  for (auto& client : {TlsClient(server->port(), files->ca),
                       TlsClient(server->port(), files->ca, other->client_cert, other->client_key),
                       TlsClient(server->port(), files->ca, files->cert, files->key)}) {
    auto refused = client->Get("/whoami");
    EXPECT_FALSE(refused) << refused->status << " " << refused->body;
  }
  // Plain HTTP to the HTTPS port gets no HTTP answer.
  RawClient plain(server->port());
  ASSERT_TRUE(plain.Send("GET /whoami HTTP/1.1\r\nHost: t\r\n\r\n"));
  EXPECT_TRUE(plain.ClosedWithin(2000ms));
  EXPECT_EQ(plain.received().find("subject="), std::string::npos) << plain.received();
  // The certificate client is served on, over the same kept-alive connection.
  response = good->Get("/whoami");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  std::lock_guard<std::mutex> lock(log_mu);
  ASSERT_FALSE(logged.empty());
  EXPECT_NE(logged[0].find("was refused: TLS handshake failed"), std::string::npos) << logged[0];
}

TEST(HttpServer, AStalledTlsHandshakeIsCutAtTheHeaderTimeout) {
  auto files = testing::MakeTlsFiles(TempDir("tls-stall"));
  ASSERT_TRUE(files.ok()) << files.error();
  HttpServer::Options options = TlsOptions(*files);
  options.header_timeout = 300ms;
  auto server = StartServer(options);
  ASSERT_TRUE(server);
  RawClient silent(server->port());
  const auto start = Clock::now();
  EXPECT_TRUE(silent.ClosedWithin(3000ms));
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_LT(Clock::now() - start, 2000ms);
}

TEST(HttpServer, ReadsChangedCertificatesForNewConnections) {
  const std::string dir = TempDir("tls-rotate");
  auto first = testing::MakeTlsFiles(dir);
  ASSERT_TRUE(first.ok()) << first.error();
  const std::string old_copy = TempDir("tls-rotate-old");
  for (const char* f : {"ca.crt", "client.crt", "client.key"}) {
    std::filesystem::copy_file(dir + "/" + f, old_copy + "/" + f);
  }
  auto server = StartServer(TlsOptions(*first));
  ASSERT_TRUE(server);
  ASSERT_TRUE(
      TlsClient(server->port(), first->ca, first->client_cert, first->client_key)->Get("/"));
  // Everything made again in place (a new CA): new connections use the new files.
  std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(testing::MakeTlsFiles(dir).ok());
  const auto deadline = Clock::now() + 5s;
  bool rotated = false;
  while (!rotated && Clock::now() < deadline) {
    auto client =
        TlsClient(server->port(), dir + "/ca.crt", dir + "/client.crt", dir + "/client.key");
    auto response = client->Get("/whoami");
    rotated = response && response->status == 200;
    if (!rotated) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(rotated);
  auto stale = TlsClient(server->port(), old_copy + "/ca.crt", old_copy + "/client.crt",
                         old_copy + "/client.key");
  EXPECT_FALSE(stale->Get("/whoami"));
}

TEST(HttpServer, CreateNamesABadTlsFile) {
  auto files = testing::MakeTlsFiles(TempDir("tls-bad"));
  ASSERT_TRUE(files.ok()) << files.error();
  auto other = testing::MakeTlsFiles(TempDir("tls-bad-other"));
  ASSERT_TRUE(other.ok()) << other.error();
  HttpServer::Options options = TlsOptions(*files);
  options.tls->cert_file = "/nonexistent/tls.crt";
  auto missing = HttpServer::Create("127.0.0.1:0", "--listen", Echo, options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("certificate file \"/nonexistent/tls.crt\": not a readable PEM"),
            std::string::npos)
      << missing.error();
  options = TlsOptions(*files);
  options.tls->key_file = other->key;
  auto mismatched = HttpServer::Create("127.0.0.1:0", "--listen", Echo, options);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.error().find("is not the key of certificate file"), std::string::npos)
      << mismatched.error();
  options = TlsOptions(*files);
  options.tls->client_ca_file = files->key;  // a key where CAs belong
  auto no_ca = HttpServer::Create("127.0.0.1:0", "--listen", Echo, options);
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.error().find("client CA file"), std::string::npos) << no_ca.error();
}

// The legitimate client's calls over `duration` (and at least 10), each on a connection of its
// own (the hard case: it needs a free slot every time) or all on one kept-alive connection.
testing::Latencies CallRepeatedly(const std::function<std::unique_ptr<httplib::ClientImpl>()>& make,
                                  std::chrono::milliseconds duration, bool fresh_connections) {
  testing::Latencies out;
  std::unique_ptr<httplib::ClientImpl> kept = make();
  const auto end = Clock::now() + duration;
  int i = 0;
  while (Clock::now() < end || i < 10) {
    std::unique_ptr<httplib::ClientImpl> fresh;
    httplib::ClientImpl* client = kept.get();
    if (fresh_connections) {
      fresh = make();
      client = fresh.get();
    }
    const std::string q = std::to_string(i++);
    const auto start = Clock::now();
    auto response = client->Get(("/legit?q=" + q).c_str());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const bool ok = response && response->status == 200 &&
                    response->body.find(" q=" + q + " ") != std::string::npos;
    out.Add(ms, ok,
            response ? "HTTP " + std::to_string(response->status) + ": " + response->body
                     : httplib::to_string(response.error()));
    std::this_thread::sleep_for(10ms);
  }
  return out;
}

// More slow connections than the server serves, from other addresses, silent and slowloris
// alike, held for the whole attack and reopened when closed: a legitimate client from 127.0.0.1
// is served throughout, over plain HTTP and over TLS, on fresh and on kept-alive connections.
TEST(HttpServer, ALegitimateClientIsServedWhileSlowClientsHoldMoreThanEveryConnection) {
  auto files = testing::MakeTlsFiles(TempDir("tls-slow"));
  ASSERT_TRUE(files.ok()) << files.error();
  for (const bool tls : {false, true}) {
    HttpServer::Options options = tls ? TlsOptions(*files) : HttpServer::Options();
    options.max_connections = 32;
    options.idle_timeout = 10000ms;  // longer than the attack: no timeout rescues the client
    options.header_timeout = 10000ms;
    auto server = StartServer(options);
    ASSERT_TRUE(server);
    const uint16_t port = server->port();
    auto make_any = [&]() -> std::unique_ptr<httplib::ClientImpl> {
      std::unique_ptr<httplib::ClientImpl> client;
      if (tls) {
        client = TlsClient(port, files->ca, files->client_cert, files->client_key);
      } else {
        client = std::make_unique<httplib::ClientImpl>("127.0.0.1", port);
      }
      client->set_keep_alive(true);
      client->set_read_timeout(5, 0);
      client->set_connection_timeout(5, 0);
      return client;
    };
    const char* mode = tls ? "https" : "http";
    const testing::Latencies quiet_fresh = CallRepeatedly(make_any, 1000ms, true);
    const testing::Latencies quiet_kept = CallRepeatedly(make_any, 1000ms, false);
    testing::Latencies attack_fresh, attack_kept;
    uint64_t closed = 0;
    {
      testing::SlowClients silent(port, "127.0.0.2", 48, testing::SlowClients::Kind::kSilent);
      testing::SlowClients loris(port, "127.0.0.3", 48, testing::SlowClients::Kind::kPartialHead,
                                 50ms);
      ASSERT_TRUE(silent.WaitOpen(5000ms));
      ASSERT_TRUE(loris.WaitOpen(5000ms));
      attack_fresh = CallRepeatedly(make_any, 2000ms, true);
      attack_kept = CallRepeatedly(make_any, 2000ms, false);
      closed = silent.closed_by_server() + loris.closed_by_server();
    }
    std::printf("%s, quiet: fresh connections %s; kept-alive %s\n", mode,
                quiet_fresh.Format().c_str(), quiet_kept.Format().c_str());
    std::printf(
        "%s, 96 slow connections from 2 other addresses, 32 served at once (%llu closed "
        "to make room): fresh connections %s; kept-alive %s\n",
        mode, static_cast<unsigned long long>(closed), attack_fresh.Format().c_str(),
        attack_kept.Format().c_str());
    EXPECT_EQ(quiet_fresh.failed + quiet_kept.failed, 0) << mode;
    EXPECT_EQ(attack_fresh.failed, 0) << mode << ": " << attack_fresh.first_failure;
    EXPECT_EQ(attack_kept.failed, 0) << mode << ": " << attack_kept.first_failure;
    // Loose (half the 10 s that kube-scheduler and Prometheus wait by default): what is measured
    // is that it is served, not how fast a loaded machine, or a sanitizer build, is.
    EXPECT_LT(attack_fresh.Max(), 5000.0) << mode;
    EXPECT_LT(attack_kept.Max(), 5000.0) << mode;
    EXPECT_GT(closed, 0u) << mode << ": the attack never filled the server";
  }
}

// A large request's memory goes back to the system once it is answered: the handler here turns
// the body into many small allocations, as a JSON parser does, and keeps one small thing (as a
// server keeps a metric's label or a cache entry), which pins the top of the allocator's heap so
// that freeing alone returns nothing.
TEST(HttpServer, HandsMemoryBackAfterALargeRequest) {
  if (testing::UnderAddressSanitizer()) {
    GTEST_SKIP() << "ASan's allocator holds freed memory in quarantine: measured in plain builds";
  }
  HttpServer::Options options;
  options.max_body_bytes = 16 << 20;
  std::mutex kept_mu;
  std::vector<std::unique_ptr<std::string>> kept;
  auto server = StartServer(options, [&](const Request& request) {
    std::list<std::string> pieces;
    for (size_t at = 0; at + 16 <= request.body.size(); at += 16) {
      pieces.emplace_back(request.body.substr(at, 16) + std::string(24, 'p'));
    }
    std::lock_guard<std::mutex> lock(kept_mu);
    kept.push_back(std::make_unique<std::string>(48, 'k'));
    return Response::Text(200, "pieces=" + std::to_string(pieces.size()));
  });
  ASSERT_TRUE(server);
  auto post = [&](size_t bytes) {
    auto client = ClientOf(*server);
    client->set_read_timeout(60, 0);  // a million allocations take a while under a sanitizer
    std::string body(bytes, 'b');
    auto response = client->Post("/big", body, "text/plain");
    return response ? response->status : 0;
  };
  ASSERT_EQ(post(1024), 200);
  const uint64_t before = testing::ResidentBytes();
  uint64_t peak = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(post(15 << 20), 200);
    peak = std::max(peak, testing::ResidentBytes());
  }
  std::this_thread::sleep_for(100ms);
  const uint64_t after = testing::ResidentBytes();
  std::printf("resident: %llu MiB before, %llu MiB after three 15 MiB requests\n",
              static_cast<unsigned long long>(before >> 20),
              static_cast<unsigned long long>(after >> 20));
  EXPECT_LT(after, before + (48 << 20)) << "peak " << (peak >> 20) << " MiB";
}

}  // namespace
}  // namespace tessera::http
