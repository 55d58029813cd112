// Clients for the attack tests of the HTTP doors (src/http; tesserad's --http; tessera-extender):
// connections that hold a server's slots without ever finishing a request, each from a loopback
// source address of its own, a legitimate client's latencies summed up, and the certificates the
// docs make (deploy/kubernetes/extender-certs.sh). Test tooling: nothing here ships.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"

namespace tessera::testing {

// `count` connections from `source_ip` (any 127.x.y.z: loopback answers for all of 127/8) to
// 127.0.0.1:`port`, none of which ever finishes a request; one the server closes is opened again
// (at most `count` reopenings a second, as a patient attacker would). kSilent sends nothing: an
// idle connection, or a TLS handshake that never starts. kPartialHead sends the start of a request
// head and then one more byte of a header every `trickle` (slowloris).
class SlowClients {
 public:
  enum class Kind { kSilent, kPartialHead };

  SlowClients(uint16_t port, std::string source_ip, int count, Kind kind,
              std::chrono::milliseconds trickle = std::chrono::milliseconds(100));
  ~SlowClients();  // closes them all
  SlowClients(const SlowClients&) = delete;
  SlowClients& operator=(const SlowClients&) = delete;

  // Waits until the first `count` connections have each been established or closed by the
  // server (false after `timeout`).
  bool WaitOpen(std::chrono::milliseconds timeout) const;
  uint64_t opened() const { return opened_; }            // connections begun so far
  uint64_t closed_by_server() const { return closed_; }  // of those, closed or refused
  int open_now() const { return open_now_; }             // established now

 private:
  void Run();
  int Connect();

  const uint16_t port_;
  const std::string source_ip_;
  const int count_;
  const Kind kind_;
  const std::chrono::milliseconds trickle_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> closed_{0};
  std::atomic<int> open_now_{0};
  std::thread thread_;
};

// A legitimate client's calls during one phase of a test: how long each took, and the failures.
struct Latencies {
  std::vector<double> ms;
  int failed = 0;
  std::string first_failure;

  void Add(double call_ms, bool ok, const std::string& failure);
  double Quantile(double q) const;  // 0 when empty
  double Max() const;
  // "N calls, p50 X ms, p99 Y ms, max Z ms, F failed (first: ...)"
  std::string Format() const;
};

// Certificates as deploy/kubernetes/extender-certs.sh makes them, in `dir` (created): a CA of
// their own, the extender's server certificate (DNS tessera-extender, IP 127.0.0.1) and
// kube-scheduler's client certificate.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;
  std::string client_cert;
  std::string client_key;
};
Result<TlsFiles> MakeTlsFiles(const std::string& dir);

// The resident set of process `pid` (0: this one), in bytes, from /proc; 0 when unreadable.
uint64_t ResidentBytes(int pid = 0);

// True in an AddressSanitizer build, whose allocator keeps freed memory (its quarantine): tests of
// memory handed back measure only without it.
constexpr bool UnderAddressSanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace tessera::testing
