// The attack tests' clients (see http_attack.h): raw sockets and poll, nothing of the servers'.
#include "testing/support/http_attack.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessera::testing {

using Clock = std::chrono::steady_clock;

SlowClients::SlowClients(uint16_t port, std::string source_ip, int count, Kind kind,
                         std::chrono::milliseconds trickle)
    : port_(port), source_ip_(std::move(source_ip)), count_(count), kind_(kind), trickle_(trickle) {
  thread_ = std::thread([this] { Run(); });
}

SlowClients::~SlowClients() {
  stop_ = true;
  thread_.join();
}

bool SlowClients::WaitOpen(std::chrono::milliseconds timeout) const {
  const auto end = Clock::now() + timeout;
  while (open_now_ + static_cast<int64_t>(closed_) < count_) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int SlowClients::Connect() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in source{};
  source.sin_family = AF_INET;
  inet_pton(AF_INET, source_ip_.c_str(), &source.sin_addr);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(port_);
  target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Non-blocking: a server whose backlog is full makes a blocking connect wait for SYN retries.
  if (bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0 &&
       errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  ++opened_;
  return fd;
}

void SlowClients::Run() {
  struct Conn {
    int fd;
    bool connected;
  };
  std::vector<Conn> conns;
  Clock::time_point window = Clock::now();
  int reopened_in_window = 0;
  Clock::time_point next_trickle = Clock::now() + trickle_;
  bool first_round = true;
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    if (now - window >= std::chrono::seconds(1)) {
      window = now;
      reopened_in_window = 0;
    }
    while (static_cast<int>(conns.size()) < count_ &&
           (first_round || reopened_in_window < count_)) {
      const int fd = Connect();
      if (fd < 0) break;
      conns.push_back({fd, false});
      if (!first_round) ++reopened_in_window;
    }
    if (static_cast<int>(conns.size()) >= count_) first_round = false;
    std::vector<pollfd> polled;
    int connected = 0;
    for (const Conn& c : conns) {
      polled.push_back({c.fd, static_cast<short>(c.connected ? POLLIN : POLLOUT), 0});
      connected += c.connected;
    }
    open_now_ = connected;
    (void)poll(polled.data(), polled.size(), 10);
    std::vector<Conn> kept;
    for (size_t i = 0; i < polled.size(); ++i) {
      Conn c = conns[i];
      bool gone = false;
      if (!c.connected && polled[i].revents != 0) {
        int error = 0;
        socklen_t length = sizeof(error);
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &length);
        gone = error != 0 || (polled[i].revents & (POLLERR | POLLHUP)) != 0;
        if (!gone) {
          c.connected = true;
          if (kind_ == Kind::kPartialHead) {
            static const char kHead[] = "POST /filter HTTP/1.1\r\nHost: t\r\nX-Slow: ";
            (void)!send(c.fd, kHead, sizeof(kHead) - 1, MSG_NOSIGNAL);
          }
        }
      } else if (c.connected && polled[i].revents != 0) {
        char sink[4096];
        const ssize_t n = recv(c.fd, sink, sizeof(sink), 0);
        gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
      }
      if (gone) {
        ++closed_;
        close(c.fd);
      } else {
        kept.push_back(c);
      }
    }
    conns.swap(kept);
    if (kind_ == Kind::kPartialHead && Clock::now() >= next_trickle) {
      next_trickle = Clock::now() + trickle_;
      for (const Conn& c : conns) {
        if (c.connected) (void)!send(c.fd, "a", 1, MSG_NOSIGNAL);
      }
    }
  }
  for (const Conn& c : conns) close(c.fd);
  open_now_ = 0;
}

void Latencies::Add(double call_ms, bool ok, const std::string& failure) {
  ms.push_back(call_ms);
  if (!ok) {
    if (failed == 0) first_failure = failure;
    ++failed;
  }
}

double Latencies::Quantile(double q) const {
  if (ms.empty()) return 0;
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t k =
      std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[k];
}

double Latencies::Max() const { return ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()); }

std::string Latencies::Format() const {
  char text[160];
  std::snprintf(text, sizeof(text), "%zu calls, p50 %.2f ms, p99 %.2f ms, max %.2f ms, %d failed",
                ms.size(), Quantile(0.5), Quantile(0.99), Max(), failed);
  return failed > 0 ? std::string(text) + " (first: " + first_failure + ")" : std::string(text);
}

Result<TlsFiles> MakeTlsFiles(const std::string& dir) {
  const std::string script =
      std::string(TESSERA_SOURCE_DIR) + "/deploy/kubernetes/extender-certs.sh";
  const std::string command = "bash '" + script + "' '" + dir + "' >'" + dir + ".log' 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(dir + ".log");
    std::stringstream text;
    text << log.rdbuf();
    return Result<TlsFiles>::Error(script + " " + dir + " failed: " + text.str());
  }
  TlsFiles f;
  f.ca = dir + "/ca.crt";
  f.cert = dir + "/tls.crt";
  f.key = dir + "/tls.key";
  f.client_cert = dir + "/client.crt";
  f.client_key = dir + "/client.key";
  return f;
}

uint64_t ResidentBytes(int pid) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status")
                                : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

}  // namespace tessera::testing
