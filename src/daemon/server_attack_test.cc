// Attacks on tesserad's own Unix-socket doors by a tenant and by a local user, against a real
// tesserad on simgpu with container sockets, two containers registered as the device plugin
// registers them (victim, tenant), and a neighbour (victim) measured throughout:
//   - a tenant that sends requests and never reads the replies (the daemon must drop it, not wait);
//   - a tenant that takes connections and process slots by the thousand (per-container limits);
//   - connections that stay idle, send half a line, or an endless one (timeouts, a bounded line);
//   - connections up to the open-files limit (no busy loop failing to accept);
//   - a local user who can reach the node socket driving CONTAINER and CTL writes (peer
//     credentials decide, not reachability).
// The neighbour's round trips (HELLO on its container socket, STATUS on the node socket) are
// timed while nothing happens and during each attack, in the same run; each test prints the p99s.
//
// The attacker is this test process itself (raw sockets: what a few lines of Python in a pod could
// send), or a child of it with another uid where the attack is about who the peer is.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "process/child_process.h"
#include "protocol/protocol.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;
namespace ipc = tessera::ipc;

constexpr uint64_t kGiB = 1ull << 30;
// `tessera run` preloads the shim into its command; in a sanitizer build the ASan runtime is then
// not first in the command's library list (harmless here: the tenant is built with it too).
const std::string kAsanOptions = "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1";
// The uid and gid an unprivileged local user has here (nobody, nogroup).
constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

std::string Hello() {
  return "HELLO version=" + std::to_string(tessera::protocol::kProtocolVersion);
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The `q` quantile (0..1) of `samples`, 0 when there are none.
double Quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t i = std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()));
  return samples[i];
}

// One HELLO on `socket` as the shim sends it (on a container socket it names no container), the
// reply and its descriptors read; the registration ends with the connection. Returns the reply,
// or an error when none came within `timeout`.
tessera::Result<std::string> HelloRoundTrip(const std::string& socket,
                                            std::chrono::milliseconds timeout) {
  auto fd = ipc::Connect(socket, timeout);
  if (!fd.ok()) return fd.status();
  tessera::Status sent = ipc::SendLine(*fd, Hello());
  std::string buffer;
  std::vector<int> fds;
  auto reply =
      sent.ok() ? ipc::RecvLine(*fd, &buffer, &fds, timeout) : tessera::Result<std::string>(sent);
  for (int f : fds) close(f);
  close(*fd);
  return reply;
}

// A connection the attacker holds: connected, non-blocking, nothing read unless the test says.
int RawConnect(const std::string& socket) {
  auto fd = ipc::Connect(socket, 300ms);
  if (!fd.ok()) return -1;
  fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) | O_NONBLOCK);
  return *fd;
}

// Whether the daemon closed `fd`: reads (and discards) what is there until EOF, for up to
// `within`. False when the connection is still open at the end.
bool ClosedByDaemon(int fd, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  char buf[65536];
  // Looks at least once, however late the caller was scheduled: a connection the daemon closed
  // long before is closed, not "kept" because the deadline had passed before the first look.
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset
    if (Clock::now() >= deadline) return false;
    if (n < 0) std::this_thread::sleep_for(10ms);
  }
}

// CPU seconds (user + system) thread `pid` of process `pid` (its main thread: tesserad's event
// loop) has used.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = all.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(all.substr(paren + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt: fields 3-13
  unsigned long long utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The neighbour: times its HELLO on its own container socket and STATUS on the node socket, in a
// loop on a thread of its own, into the current phase's samples.
class Neighbour {
 public:
  Neighbour(std::string container_socket, std::string node_socket)
      : container_socket_(std::move(container_socket)), node_socket_(std::move(node_socket)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Neighbour() {
    stop_.store(true);
    thread_.join();
  }
  // Starts a new phase named `name`; samples go there from now on.
  void Phase(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    Samples s;
    s.name = name;
    phases_.push_back(std::move(s));
  }
  struct Samples {
    std::string name;
    std::vector<double> hello_ms, status_ms;
    int failures = 0;
    std::string first_failure;
  };
  Samples Get(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Samples& s : phases_)
      if (s.name == name) return s;
    return {};
  }

 private:
  void Loop() {
    while (!stop_.load()) {
      // A round trip counts in the phase it started in (one the daemon stalls ends later).
      size_t phase = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        phase = phases_.size();
      }
      auto t0 = Clock::now();
      auto hello = HelloRoundTrip(container_socket_, 3000ms);
      auto t1 = Clock::now();
      auto status = ipc::Call(node_socket_, "STATUS", nullptr, 3000ms);
      auto t2 = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (phase > 0) {
          Samples& s = phases_[phase - 1];
          s.hello_ms.push_back(Millis(t1 - t0));
          s.status_ms.push_back(Millis(t2 - t1));
          const bool hello_ok = hello.ok() && hello->rfind("OK", 0) == 0;
          const bool status_ok = status.ok() && status->rfind("OK", 0) == 0;
          if (!hello_ok || !status_ok) {
            if (s.failures++ == 0) {
              s.first_failure =
                  !hello_ok ? "HELLO: " + (hello.ok() ? *hello : hello.error())
                            : "STATUS: " + (status.ok() ? status->substr(0, 200) : status.error());
            }
          }
        }
      }
      std::this_thread::sleep_for(5ms);
    }
  }

  std::string container_socket_, node_socket_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Samples> phases_;
  std::thread thread_;
};

class ServerAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = UniqueName("attack");
    socket_ = "/tmp/" + state_ + ".sock";
    ledger_name_ = "/tessera-ledger-" + state_;
    dir_ = "/tmp/" + state_ + "-containers";
    log_ = "/tmp/" + state_ + ".err";
  }
  void TearDown() override {
    neighbour_.reset();
    for (int fd : held_) close(fd);
    held_.clear();
    tenants_.clear();
    StopDaemon();
    shm_unlink(("/tessera-sim-" + state_).c_str());
    shm_unlink(("/tessera-sim-" + state_ + "-user").c_str());
    unlink(socket_.c_str());
    for (const char* id : {"victim", "tenant"}) rmdir((dir_ + "/" + id).c_str());
    rmdir(dir_.c_str());
    if (!HasFailure()) unlink(log_.c_str());
  }

  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimH:8GiB:80"};
  }

  // tesserad with container sockets and `flags`, its stderr appended to log_; `shell_prefix` runs
  // before it in the same shell (a ulimit).
  void StartDaemon(const std::string& flags = "", const std::string& shell_prefix = "",
                   bool self_declared = false) {
    const std::string cmd = shell_prefix + "exec " + daemon_runner_ + " '" + BuildDir() +
                            "/bin/tesserad' --sim --socket '" + socket_ + "' --ledger '" +
                            ledger_name_ + "' --ephemeral " +
                            "--allow-self-declared=" + (self_declared ? "true" : "false") +
                            " --container-sockets '" + dir_ + "' " + flags + " 2>>'" + log_ + "'";
    daemon_ =
        std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", cmd}, SimEnv());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(ipc::WaitUntilListening(socket_, 30s)) << "tesserad did not listen: " << Log();
  }
  void StopDaemon() {
    if (!daemon_) return;
    daemon_->Kill(SIGTERM);
    daemon_->Wait(10s);
    daemon_.reset();
  }
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }
  // Marks the start of an attack for ExpectLogRateLimited.
  void MarkLog() {
    log_mark_ = LogLines();
    log_mark_at_ = Clock::now();
  }
  // The daemon's log since MarkLog() is rate-limited: at most refusal_log_rate (10) lines a second
  // and a burst of as many, one note a second of what was left out, and a few other lines.
  void ExpectLogRateLimited() {
    const size_t lines = LogLines() - log_mark_;
    const double seconds = std::chrono::duration<double>(Clock::now() - log_mark_at_).count();
    const auto allowed = static_cast<size_t>(11 * (seconds + 1)) + 10;
    std::printf("%zu log lines in %.1f s of attack (at most %zu allowed)\n", lines, seconds,
                allowed);
    EXPECT_LE(lines, allowed) << "refusals are logged a line each:\n" << Log().substr(0, 2000);
  }
  size_t LogLines() const {
    const std::string all = Log();
    return static_cast<size_t>(std::count(all.begin(), all.end(), '\n'));
  }
  std::string ContainerSocket(const std::string& id) const {
    return dir_ + "/" + id + "/tessera.sock";
  }

  // The two containers as the device plugin registers them (victim 2 GiB, tenant 1 GiB), and
  // their sockets listening.
  void RegisterContainers() {
    for (const auto& [id, mem] : {std::pair{"victim", 2 * kGiB}, std::pair{"tenant", kGiB}}) {
      auto reply = ipc::Call(
          socket_, "CONTAINER id=" + std::string(id) + " mem=" + std::to_string(mem), nullptr, 5s);
      ASSERT_TRUE(reply.ok() && reply->rfind("OK", 0) == 0)
          << (reply.ok() ? *reply : reply.error());
      ASSERT_TRUE(ipc::WaitUntilListening(ContainerSocket(id), 5s)) << id << "'s socket";
    }
  }

  // Starts the neighbour and times it quietly for `quiet` before the attack.
  void StartNeighbour(std::chrono::milliseconds quiet = 1500ms) {
    neighbour_ = std::make_unique<Neighbour>(ContainerSocket("victim"), socket_);
    neighbour_->Phase("quiet");
    std::this_thread::sleep_for(quiet);
  }

  // Every neighbour round trip of phase `attack` was answered, and its p99 stayed within its
  // normal latency (the quiet phase's p99, plus a margin for a 2-core machine under load).
  void ExpectNeighbourServed(const std::string& attack) {
    const Neighbour::Samples quiet = neighbour_->Get("quiet");
    const Neighbour::Samples under = neighbour_->Get(attack);
    const double qh = Quantile(quiet.hello_ms, 0.99), qs = Quantile(quiet.status_ms, 0.99);
    const double ah = Quantile(under.hello_ms, 0.99), as = Quantile(under.status_ms, 0.99);
    std::printf(
        "neighbour p99 (%s): HELLO %.2f ms quiet, %.2f ms under attack (%zu samples); STATUS "
        "%.2f ms quiet, %.2f ms under attack; %d failed\n",
        attack.c_str(), qh, ah, under.hello_ms.size(), qs, as, under.failures);
    EXPECT_EQ(quiet.failures, 0) << quiet.first_failure;
    EXPECT_EQ(under.failures, 0) << "the neighbour was not served during " << attack << ": "
                                 << under.first_failure;
    EXPECT_GE(under.hello_ms.size(), 10u) << "the neighbour hardly got a turn";
    // Normal latency: the quiet p99 three times over, or 50 ms more, whichever is larger.
    EXPECT_LE(ah, std::max(3 * qh, qh + 50)) << "HELLO p99 during " << attack;
    EXPECT_LE(as, std::max(3 * qs, qs + 50)) << "STATUS p99 during " << attack;
  }

  // The used bytes of `id` on GPU 0 in the daemon's STATUS; -1 when absent or no answer.
  int64_t UsedBy(const std::string& id) {
    auto status = ipc::Call(socket_, "STATUS", nullptr, 3s);
    if (!status.ok() || status->rfind("OK ", 0) != 0) return -1;
    const auto json = nlohmann::json::parse(status->substr(3), nullptr, false);
    for (const auto& c : json.value("containers", nlohmann::json::array())) {
      if (c.value("id", "") == id) return c["used_bytes"][0].get<int64_t>();
    }
    return -1;
  }

  std::string state_, socket_, ledger_name_, dir_, log_;
  size_t log_mark_ = 0;
  Clock::time_point log_mark_at_;
  std::string daemon_runner_;  // a command tesserad runs under (setpriv, to run as a user)
  std::unique_ptr<ChildProcess> daemon_;
  std::unique_ptr<Neighbour> neighbour_;
  // A HELLO on a new connection to `socket`, held open (a registered process keeps its
  // connection): the reply, or an error when the connection or the exchange failed.
  tessera::Result<std::string> HelloOnNewConnection(const std::string& socket) {
    auto fd = ipc::Connect(socket, 1000ms);
    if (!fd.ok()) return tessera::Result<std::string>::Error(fd.error());
    held_.push_back(*fd);
    std::string buffer;
    std::vector<int> fds;
    auto reply = ipc::SendLine(*fd, Hello()).ok()
                     ? ipc::RecvLine(*fd, &buffer, &fds, 2000ms)
                     : tessera::Result<std::string>::Error("send failed");
    for (int f : fds) close(f);
    return reply;
  }

  std::vector<int> held_;  // the attacker's connections, closed at the end
  std::vector<std::unique_ptr<ChildProcess>> tenants_;
};

// A tenant sends ~60 KiB of STATUS on its own container socket and never reads the replies. The
// daemon must not wait on it: the neighbour is served at its normal latency, a neighbour process
// SIGKILLed meanwhile has its memory back within a second, the tenant is dropped, and its
// thousands of refusals are logged rate-limited, not a line each.
TEST_F(ServerAttackTest, ATenantThatNeverReadsItsRepliesIsDroppedNotWaitedOn) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  tenants_.push_back(std::make_unique<ChildProcess>(
      std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "hold", std::to_string(kGiB)},
      TenantEnv(SimEnv(), ContainerSocket("victim"))));
  ASSERT_TRUE(tenants_.back()->WaitForKey("ready", 20s).has_value()) << Log();
  ASSERT_EQ(UsedBy("victim"), static_cast<int64_t>(kGiB));
  StartNeighbour();
  MarkLog();

  neighbour_->Phase("never-reading");
  const int attacker = RawConnect(ContainerSocket("tenant"));
  ASSERT_GE(attacker, 0);
  std::string flood;
  while (flood.size() < 60 * 1024) flood += "STATUS\n";
  size_t sent = 0;
  const auto send_until = Clock::now() + 2s;
  while (sent < flood.size() && Clock::now() < send_until) {
    const ssize_t n = send(attacker, flood.data() + sent, flood.size() - sent, MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;  // dropped already
    if (n < 0) std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(500ms);
  // The victim's process is killed mid-attack: its bytes must come back at once.
  tenants_.back()->Kill(SIGKILL);
  tenants_.back()->Wait(5s);
  const auto killed_at = Clock::now();
  bool reclaimed = false;
  while (!reclaimed && Clock::now() - killed_at < 1s) {
    reclaimed = UsedBy("victim") == 0;
    if (!reclaimed) std::this_thread::sleep_for(20ms);
  }
  std::this_thread::sleep_for(1500ms);
  const Neighbour::Samples under = neighbour_->Get("never-reading");
  neighbour_->Phase("after");
  EXPECT_TRUE(reclaimed) << "a killed process's 1 GiB stayed charged during the attack";
  ExpectNeighbourServed("never-reading");
  EXPECT_TRUE(ClosedByDaemon(attacker, 3s)) << "a tenant that never reads was kept";
  close(attacker);
  std::printf("%zu bytes of requests sent\n", sent);
  ExpectLogRateLimited();
}

// A tenant opens 1100 connections on its own socket and sends HELLO on each: it gets no more
// than its container's share of connections and process slots, and a neighbour's real process
// still registers (cuInit succeeds) and is served throughout.
TEST_F(ServerAttackTest, ATenantCannotTakeEveryProcessSlot) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  StartNeighbour();
  neighbour_->Phase("hello-flood");
  MarkLog();
  int registered = 0, refused = 0;
  for (int i = 0; i < 1100; ++i) {
    auto reply = HelloOnNewConnection(ContainerSocket("tenant"));
    if (reply.ok() && reply->rfind("OK", 0) == 0) {
      ++registered;
    } else {
      ++refused;
    }
  }
  std::printf("1100 HELLOs: %d registered, %d refused\n", registered, refused);
  EXPECT_LE(registered, 128) << "one container took " << registered << " process slots";
  ChildProcess joined({BuildDir() + "/tests/shim_tenant", "hold", std::to_string(64 << 20)},
                      TenantEnv(SimEnv(), ContainerSocket("victim")));
  auto ready = joined.WaitForKey("ready", 20s);
  EXPECT_TRUE(ready.has_value()) << "the neighbour's cuInit failed: "
                                 << joined.values().count("init_error");
  std::this_thread::sleep_for(500ms);
  neighbour_->Phase("after");
  ExpectNeighbourServed("hello-flood");
  ExpectLogRateLimited();
}

// Eight containers, each staying under its own limit (container_max_processes), flood their
// sockets with HELLOs together: they would hold all 1024 of the node's process slots. Each is owed
// an equal part of the slots, and the slots others are still owed are kept for them: a ninth
// container's real process then registers.
TEST_F(ServerAttackTest, NeighboursTogetherCannotTakeEveryProcessSlot) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  std::vector<std::string> attackers = {"tenant"};
  for (int i = 2; i <= 8; ++i) {
    const std::string id = "tenant" + std::to_string(i);
    auto reply =
        ipc::Call(socket_, "CONTAINER id=" + id + " mem=" + std::to_string(kGiB), nullptr, 5s);
    ASSERT_TRUE(reply.ok() && reply->rfind("OK", 0) == 0) << (reply.ok() ? *reply : reply.error());
    ASSERT_TRUE(ipc::WaitUntilListening(ContainerSocket(id), 5s)) << id << "'s socket";
    attackers.push_back(id);
  }
  MarkLog();
  int registered = 0;
  std::string refusal;
  for (const std::string& id : attackers) {
    for (int i = 0; i < 128; ++i) {
      auto reply = HelloOnNewConnection(ContainerSocket(id));
      if (reply.ok() && reply->rfind("OK", 0) == 0) {
        ++registered;
      } else if (refusal.empty() && reply.ok()) {
        refusal = *reply;
      }
    }
  }
  std::printf("8 containers x 128 HELLOs: %d registered; first refusal: %s\n", registered,
              refusal.c_str());
  // Nine containers and one to come: each is owed 1024 / 10 = 102 slots.
  EXPECT_LE(registered, 1024 - 102) << "the neighbours left victim less than its part";
  EXPECT_NE(refusal.find("keeps them for containers with fewer than 102 processes"),
            std::string::npos)
      << refusal;
  ChildProcess joined({BuildDir() + "/tests/shim_tenant", "hold", std::to_string(64 << 20)},
                      TenantEnv(SimEnv(), ContainerSocket("victim")));
  auto ready = joined.WaitForKey("ready", 20s);
  EXPECT_TRUE(ready.has_value()) << "victim's cuInit failed: "
                                 << joined.values().count("init_error");
}

// Connections that never send, that send half a line and stop, one that sends an endless line and
// one that takes its replies a byte at a time: the endless one is closed at the line bound, the
// others at their timeouts, a registered process's quiet connection is kept, and the neighbour is
// served meanwhile.
TEST_F(ServerAttackTest, IdleHalfSentAndEndlessConnectionsAreClosed) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("--idle-timeout 1s --request-timeout 1s"));
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  StartNeighbour();
  neighbour_->Phase("slow-connections");
  MarkLog();
  // A registered process of the tenant: quiet from now on, and never closed for it.
  auto process = ipc::Connect(ContainerSocket("tenant"), 1s);
  ASSERT_TRUE(process.ok());
  held_.push_back(*process);
  ASSERT_TRUE(ipc::SendLine(*process, Hello()).ok());
  std::string buffer;
  std::vector<int> fds;
  auto hello = ipc::RecvLine(*process, &buffer, &fds, 3s);
  for (int f : fds) close(f);
  ASSERT_TRUE(hello.ok() && hello->rfind("OK", 0) == 0) << (hello.ok() ? *hello : hello.error());

  std::vector<int> idle, partial;
  const std::string half(4000, 'A');
  for (int i = 0; i < 50; ++i) {
    const int a = RawConnect(ContainerSocket("tenant"));
    const int b = RawConnect(ContainerSocket("tenant"));
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    idle.push_back(a);
    partial.push_back(b);
    ASSERT_EQ(send(b, half.data(), half.size(), MSG_NOSIGNAL), static_cast<ssize_t>(half.size()));
  }
  // And one that asks for many replies and takes them a byte at a time, to keep them held.
  const int trickle = RawConnect(ContainerSocket("tenant"));
  ASSERT_GE(trickle, 0);
  std::string requests;
  for (int i = 0; i < 1500; ++i) requests += "STATUS\n";
  ASSERT_EQ(send(trickle, requests.data(), requests.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(requests.size()));
  const int endless = RawConnect(ContainerSocket("tenant"));
  ASSERT_GE(endless, 0);
  const std::string chunk(16 * 1024, 'B');
  size_t endless_sent = 0;
  bool endless_closed = false;
  const auto started = Clock::now();
  while (endless_sent < 1024 * 1024 && Clock::now() - started < 2s) {
    const ssize_t n = send(endless, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) endless_sent += static_cast<size_t>(n);
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      endless_closed = true;
      break;
    }
    if (n < 0) std::this_thread::sleep_for(2ms);
  }
  if (!endless_closed) endless_closed = ClosedByDaemon(endless, 500ms);
  std::printf("the endless line was %s after %zu bytes\n", endless_closed ? "closed" : "kept",
              endless_sent);
  EXPECT_TRUE(endless_closed) << "a line without end was buffered (" << endless_sent << " bytes)";
  EXPECT_LE(endless_sent, 1024u * 1024u);
  close(endless);
  // Timeouts of 1 s, checked at least every 100 ms: all closed within 2.5 s of starting.
  int idle_closed = 0, partial_closed = 0;
  const auto all_closed_by = started + 2500ms;
  const auto closed_in_time = [&](int fd) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(all_closed_by - Clock::now());
    return ClosedByDaemon(fd, std::max(left, 1ms));
  };
  for (int fd : idle) idle_closed += closed_in_time(fd);
  for (int fd : partial) partial_closed += closed_in_time(fd);
  while (Clock::now() < all_closed_by) {
    char byte;
    (void)recv(trickle, &byte, 1, MSG_DONTWAIT);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ClosedByDaemon(trickle, 500ms)) << "a client taking its replies a byte at a time "
                                                 "held them past --request-timeout";
  close(trickle);
  for (int fd : idle) close(fd);
  for (int fd : partial) close(fd);
  EXPECT_EQ(idle_closed, 50) << "idle connections kept past --idle-timeout";
  EXPECT_EQ(partial_closed, 50) << "half-sent requests kept past --request-timeout";
  EXPECT_FALSE(ClosedByDaemon(*process, 500ms)) << "a registered process's connection was closed";
  neighbour_->Phase("after");
  ExpectNeighbourServed("slow-connections");
  ExpectLogRateLimited();
}

// Connections up to the daemon's open-files limit: it refuses what it cannot hold without
// spinning (its CPU stays low), logs rate-limited, and serves the neighbour again as soon as the
// connections are gone.
TEST_F(ServerAttackTest, TheOpenFilesLimitDoesNotMakeTheDaemonSpin) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon("", "ulimit -n 256; "));
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  // The neighbour comes afterwards: its own attempts, refused at the limit, would cost the loop
  // CPU of their own while it is measured.
  MarkLog();
  for (int i = 0; i < 400; ++i) {
    const int fd = RawConnect(ContainerSocket("tenant"));
    if (fd >= 0) held_.push_back(fd);
  }
  std::this_thread::sleep_for(300ms);
  int refused = 0;  // told why and closed at once
  for (int fd : held_) {
    char first[4] = {};
    refused += recv(fd, first, sizeof(first), MSG_DONTWAIT | MSG_PEEK) == 4 &&
               std::string(first, 4) == "ERR ";
  }
  const double cpu_before = CpuSeconds(daemon_->pid());
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(2s);
  const double busy = (CpuSeconds(daemon_->pid()) - cpu_before) /
                      std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "tesserad's event loop at the open-files limit: %.1f%% of a CPU (%zu connections made, %d "
      "of them refused)\n",
      100 * busy, held_.size(), refused);
  // Idle, the loop wakes ten times a second; spinning, it takes whatever CPU it is given (a
  // quarter of one on a loaded 2-core machine, all of one otherwise).
  EXPECT_LT(busy, 0.10) << "tesserad spins at the open-files limit";
  for (int fd : held_) close(fd);
  held_.clear();
  ExpectLogRateLimited();
  std::this_thread::sleep_for(300ms);
  StartNeighbour(1000ms);  // served again: every round trip of its first second answered
  const Neighbour::Samples after = neighbour_->Get("quiet");
  EXPECT_EQ(after.failures, 0) << after.first_failure;
  EXPECT_GE(after.hello_ms.size(), 5u);
}

// Runs `body` in a child process with uid/gid `uid`/`gid` and supplementary `groups`; returns
// the child's exit status (the child exits 0 when `body` returns true).
template <typename Body>
int AsUser(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
      _exit(100);
    }
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The node socket made reachable by every local user (mode 0666, as an operator might to let
// users `tessera run`): a user who is not an administrator can still register processes and read
// STATUS, but CONTAINER (change, remove, create) and control-tree writes are refused by peer
// credentials; a member of the admin group and root may; `tessera run` as that user still runs its
// command, its processes declaring their own limits.
TEST_F(ServerAttackTest, TheNodeSocketsPrivilegedVerbsNeedAnAdministrator) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (setuid)";
  group* users = getgrnam("users");
  ASSERT_NE(users, nullptr) << "this test needs the group \"users\"";
  const gid_t admins = users->gr_gid;
  ASSERT_NO_FATAL_FAILURE(StartDaemon("--admin-group users", "", /*self_declared=*/true));
  ASSERT_NO_FATAL_FAILURE(RegisterContainers());
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
  const std::string node = socket_;
  auto refused = [&node](const std::string& request) {
    auto reply = ipc::Call(node, request, nullptr, 3s);
    if (!reply.ok()) return false;
    std::printf("as a user: %s -> %s\n", request.c_str(), reply->c_str());
    std::fflush(stdout);
    return reply->rfind("ERR ", 0) == 0 && reply->find("permission denied") != std::string::npos;
  };
  for (const std::string& attack :
       {std::string("CONTAINER id=victim mem=0"), std::string("CONTAINER id=victim remove=1"),
        std::string("CONTAINER id=mine mem=1073741824"),
        std::string("CTL op=set path=0/policy value=2"),
        std::string("CTL op=set path=0/victim/memsize value=1")}) {
    EXPECT_EQ(AsUser(kNobody, kNogroup, {}, [&] { return refused(attack); }), 0)
        << "a local user was allowed: " << attack;
  }
  auto victim_limit = [&] {
    auto reply = ipc::Call(socket_, "CTL op=get path=0/victim/memsize", nullptr, 3s);
    return reply.ok() ? *reply : reply.error();
  };
  EXPECT_EQ(victim_limit(), "OK {\"value\":\"" + std::to_string(2 * kGiB) + "\\n\"}");
  EXPECT_NE(UsedBy("victim"), -1) << "victim was removed";
  EXPECT_EQ(UsedBy("mine"), -1) << "a user registered a container";
  // What any local user who reaches the socket may still do.
  EXPECT_EQ(AsUser(kNobody, kNogroup, {},
                   [&] {
                     auto status = ipc::Call(node, "STATUS", nullptr, 3s);
                     auto hello = HelloRoundTrip(node, 3s);
                     return status.ok() && status->rfind("OK", 0) == 0 && hello.ok() &&
                            hello->rfind("OK", 0) == 0;
                   }),
            0);
  // An administrator by group (supplementary), and root.
  EXPECT_EQ(AsUser(kNobody, kNogroup, {admins},
                   [&] {
                     auto r = ipc::Call(node, "CONTAINER id=ops mem=1073741824", nullptr, 3s);
                     auto w = ipc::Call(node, "CTL op=set path=0/policy value=2", nullptr, 3s);
                     return r.ok() && r->rfind("OK", 0) == 0 && w.ok() && w->rfind("OK", 0) == 0;
                   }),
            0);
  EXPECT_EQ(UsedBy("ops"), 0);
  auto root = ipc::Call(socket_, "CONTAINER id=victim remove=1", nullptr, 3s);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->rfind("OK", 0), 0u) << *root;
  // `tessera run` as the user: CONTAINER is refused, the command runs, declaring its own limit.
  const std::string run = "cd /tmp && TESSERA_SOCKET='" + socket_ + "' TESSERA_SIM_STATE='" +
                          state_ + "-user' TESSERA_SIM_GPUS=SimH:8GiB:80 " + kAsanOptions +
                          " setpriv --reuid=65534 " + "--regid=65534 --clear-groups '" +
                          BuildDir() +
                          "/bin/tessera' run --sim --mem 1GiB --container users-job -- '" +
                          BuildDir() + "/tests/shim_tenant' meminfo 2>&1";
  auto [status, output] = tessera::process::RunShell(run);
  std::printf("tessera run as a user:\n%s", output.c_str());
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("total=" + std::to_string(kGiB)), std::string::npos) << output;
}

// A daemon a user started for themselves (the README's first steps, `tessera run`'s private
// daemon) is theirs to administer: CONTAINER and control-tree writes from their own uid are
// accepted, so `tessera run` registers its container as it does for root.
TEST_F(ServerAttackTest, ADaemonAUserStartedIsTheirsToAdminister) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user (setpriv)";
  daemon_runner_ = "setpriv --reuid=65534 --regid=65534 --clear-groups";
  ASSERT_NO_FATAL_FAILURE(StartDaemon("", "", /*self_declared=*/false));
  const std::string as_user = "cd /tmp && TESSERA_SOCKET='" + socket_ + "' TESSERA_SIM_STATE='" +
                              state_ + "' TESSERA_SIM_GPUS=SimH:8GiB:80 " + kAsanOptions +
                              " setpriv --reuid=65534 " + "--regid=65534 --clear-groups '" +
                              BuildDir() + "/bin/tessera' ";
  auto [status, output] =
      tessera::process::RunShell(as_user + "run --sim --mem 1GiB --container own-job -- '" +
                                 BuildDir() + "/tests/shim_tenant' meminfo 2>&1");
  std::printf("tessera run against the user's own daemon:\n%s", output.c_str());
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output.find("note:"), std::string::npos) << "CONTAINER was refused: " << output;
  EXPECT_NE(output.find("total=" + std::to_string(kGiB)), std::string::npos) << output;
  auto [set_status, set_output] = tessera::process::RunShell(as_user + "ctl set 0/policy 2 2>&1");
  EXPECT_EQ(set_status, 0) << set_output;
  auto policy = ipc::Call(socket_, "CTL op=get path=0/policy", nullptr, 3s);
  ASSERT_TRUE(policy.ok()) << policy.error();
  EXPECT_EQ(*policy, "OK {\"value\":\"2\\n\"}");
}

}  // namespace
