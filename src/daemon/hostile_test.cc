// Hostile tenants (issue 17, items 0 and 2): shared memory is untrusted input, and a tenant holds
// no more of it than its role needs. A process registers with a real tesserad on simgpu the way
// the shim does (HELLO over the socket, the ledger's descriptors back), maps what it was given,
// tries to write where it may not, scribbles on everything it may, and disconnects. tesserad must
// stay up, keep every other container's books exact, and a tesserad restarted on that ledger must
// start clean. What a tenant cannot write at all (the node view, the node segment) is also
// corrupted through the daemon's own node segment, as a crash mid-write or a tool run as the
// daemon's user could leave it.
//
// The hostile process here is this test itself: what it writes is exactly what ten lines of
// Python with mmap could write, and it needs no shim to do it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "ledger/ledger_layout.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"
#include "protocol/protocol.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;
namespace ledger = tessera::ledger;
namespace ipc = tessera::ipc;

constexpr uint64_t kGiB = 1ull << 30;

// A registered process that is not the shim: it holds the connection and maps what it was given
// as every tenant does: the node view read-only, its container's segment and the exchange
// writable (ledger_layout.h).
struct RawTenant {
  int fd = -1;
  int node_fd = -1;                         // kept, to try every way of writing through it
  int container_fd = -1, exchange_fd = -1;  // kept, to try resizing them
  const ledger::LedgerLayout* layout = nullptr;
  ledger::ContainerSegment* own = nullptr;
  ledger::Exchange* exchange = nullptr;
  uint32_t container = 0, process = 0;

  ~RawTenant() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
    for (int* kept : {&node_fd, &container_fd, &exchange_fd}) {
      if (*kept >= 0) close(*kept);
      *kept = -1;
    }
    if (layout != nullptr) munmap(const_cast<ledger::LedgerLayout*>(layout), sizeof(*layout));
    if (own != nullptr) munmap(own, sizeof(*own));
    if (exchange != nullptr) munmap(exchange, sizeof(*exchange));
    layout = nullptr;
    own = nullptr;
    exchange = nullptr;
  }
};

// Tries to store `value` into `word`, a word of the tenant's read-only node mapping, every way a
// process can: a writable mapping of the descriptor it was given, the same file reopened for
// writing through /proc/self/fd (which root may: the permission is checked on the file, not on
// the descriptor), write(2) through that, making its mapping writable, and /proc/self/mem (which
// writes through a private mapping's protection). Returns the ways that worked (none, when the
// tenant is held to its authority).
std::vector<std::string> TryToWrite(const RawTenant& t, const std::atomic<uint64_t>* word,
                                    uint64_t value) {
  std::vector<std::string> worked;
  const size_t offset =
      reinterpret_cast<const char*>(word) - reinterpret_cast<const char*>(t.layout);
  void* writable =
      mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, t.node_fd, 0);
  if (writable != MAP_FAILED) {
    std::memcpy(static_cast<char*>(writable) + offset, &value, sizeof(value));
    munmap(writable, sizeof(ledger::LedgerLayout));
    worked.push_back("mmap PROT_WRITE");
  }
  const int reopened =
      open(("/proc/self/fd/" + std::to_string(t.node_fd)).c_str(), O_RDWR | O_CLOEXEC);
  if (reopened >= 0) {
    void* again = mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED,
                       reopened, 0);
    if (again != MAP_FAILED) {
      std::memcpy(static_cast<char*>(again) + offset, &value, sizeof(value));
      munmap(again, sizeof(ledger::LedgerLayout));
      worked.push_back("/proc/self/fd reopened O_RDWR, mmap PROT_WRITE");
    }
    if (pwrite(reopened, &value, sizeof(value), static_cast<off_t>(offset)) ==
        static_cast<ssize_t>(sizeof(value))) {
      worked.push_back("/proc/self/fd reopened O_RDWR, pwrite");
    }
    close(reopened);
  }
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(word) & ~uintptr_t{4095});
  if (mprotect(page, 4096, PROT_READ | PROT_WRITE) == 0) {
    worked.push_back("mprotect");
    mprotect(page, 4096, PROT_READ);
  }
  const int mem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  if (mem >= 0) {
    if (pwrite(mem, &value, sizeof(value), static_cast<off_t>(reinterpret_cast<uintptr_t>(word))) ==
        static_cast<ssize_t>(sizeof(value))) {
      worked.push_back("/proc/self/mem");
    }
    close(mem);
  }
  return worked;
}

class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = UniqueName("hostile");
    socket_ = "/tmp/" + state_ + ".sock";
    ledger_name_ = "/tessera-ledger-" + state_;
    log_ = "/tmp/" + state_ + ".err";
  }
  std::string DaemonLog() const {
    std::ifstream in(log_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }
  void TearDown() override {
    StopDaemon();
    ledger::MemoryLedger::Remove(ledger_name_);
    shm_unlink(("/tessera-sim-" + state_).c_str());
    unlink(socket_.c_str());
    if (!HasFailure()) unlink(log_.c_str());
  }

  // tesserad's stderr is appended to log_ (DaemonLog()), across restarts.
  void StartDaemon() {
    const std::string cmd = "exec '" + BuildDir() + "/bin/tesserad' --sim --socket '" + socket_ +
                            "' --ledger '" + ledger_name_ + "' 2>>'" + log_ + "'";
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", cmd},
        std::vector<std::string>{"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimH:16GiB:80"});
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(ipc::WaitUntilListening(socket_, 30s)) << "tesserad did not listen";
  }
  void StopDaemon() {
    if (!daemon_) return;
    daemon_->Kill(SIGTERM);
    daemon_->Wait(10s);
    daemon_.reset();
  }
  bool DaemonRunning() { return daemon_ && !daemon_->Wait(0ms).has_value(); }

  // HELLO as the shim sends it; the reply's descriptors are the ledger's segments.
  void Register(RawTenant* t, const std::string& container, const std::string& mem) {
    auto fd = ipc::Connect(socket_, 5s);
    ASSERT_TRUE(fd.ok()) << fd.status().message();
    t->fd = *fd;
    ASSERT_TRUE(ipc::SendLine(
                    t->fd, "HELLO version=" + std::to_string(tessera::protocol::kProtocolVersion) +
                               " container=" + container + " mem=" + mem)
                    .ok());
    std::string buffer;
    std::vector<int> fds;
    auto line = ipc::RecvLine(t->fd, &buffer, &fds, 5s);
    ASSERT_TRUE(line.ok()) << line.status().message();
    auto reply = tessera::protocol::ParseMessage(*line);
    ASSERT_TRUE(reply.ok() && reply->verb == "OK") << *line;
    ASSERT_EQ(fds.size(), 3u) << "node, container, exchange";
    t->node_fd = fds[0];
    void* node = mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ, MAP_SHARED, fds[0], 0);
    void* own = mmap(nullptr, sizeof(ledger::ContainerSegment), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fds[1], 0);
    void* exchange =
        mmap(nullptr, sizeof(ledger::Exchange), PROT_READ | PROT_WRITE, MAP_SHARED, fds[2], 0);
    t->container_fd = fds[1];
    t->exchange_fd = fds[2];
    ASSERT_NE(node, MAP_FAILED);
    ASSERT_NE(own, MAP_FAILED);
    ASSERT_NE(exchange, MAP_FAILED);
    t->layout = static_cast<const ledger::LedgerLayout*>(node);
    t->own = static_cast<ledger::ContainerSegment*>(own);
    t->exchange = static_cast<ledger::Exchange*>(exchange);
    t->container = static_cast<uint32_t>(std::stoul(reply->Get("container")));
    t->process = static_cast<uint32_t>(std::stoul(reply->Get("process")));
    ASSERT_EQ(t->own->index, t->container) << "the writable segment is its own container's";
  }

  // Reserves `bytes` on device 0 as the shim's fast path does.
  static void Charge(RawTenant& t, uint64_t bytes) {
    t.own->counters.used[0].fetch_add(bytes);
    t.own->processes[t.process].used[0].fetch_add(bytes);
  }

  // The node segment as the daemon's own user can open it by name (not a tenant: see the file
  // comment); null when it cannot be mapped.
  ledger::LedgerLayout* DaemonsNodeSegment() {
    const int fd = shm_open(ledger_name_.c_str(), O_RDWR, 0);
    if (fd < 0) return nullptr;
    void* mem =
        mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return mem == MAP_FAILED ? nullptr : static_cast<ledger::LedgerLayout*>(mem);
  }

  // Container `id`'s bytes in use on device 0 and its limit there, as the daemon's books (STATUS)
  // have them; {-1, -1} when it is not there.
  std::pair<int64_t, int64_t> BooksOf(const std::string& id) {
    const std::string status = Status();
    if (status.rfind("OK ", 0) != 0) return {-1, -1};
    const auto json = nlohmann::json::parse(status.substr(3), nullptr, false);
    if (json.is_discarded()) return {-1, -1};
    for (const auto& c : json.value("containers", nlohmann::json::array())) {
      if (c.value("id", "") != id) continue;
      const auto& limit = c["limit_bytes"][0];
      return {c["used_bytes"][0].get<int64_t>(), limit.is_null() ? -1 : limit.get<int64_t>()};
    }
    return {-1, -1};
  }

  // A victim holding 1 GiB and a hostile tenant holding 512 MiB, each in a container of its own
  // with a 2 GiB limit.
  void RegisterBoth(RawTenant* victim, RawTenant* hostile) {
    Register(victim, "victim", std::to_string(2 * kGiB));
    Register(hostile, "hostile", std::to_string(2 * kGiB));
    Charge(*victim, kGiB);
    Charge(*hostile, 512ull << 20);
  }

  // STATUS from the daemon: it answers, so it is alive and serving.
  std::string Status() {
    auto reply = ipc::Call(socket_, "STATUS", nullptr, 5s);
    return reply.ok() ? *reply : "(no reply: " + reply.status().message() + ")";
  }

  std::string state_, socket_, ledger_name_, log_;
  std::unique_ptr<ChildProcess> daemon_;
};

// Waits up to `within` for `pred`.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// The attack of the issue: an out-of-range container index in the tenant's own process slot, then
// a disconnect. A tenant can no longer write it (the node view is sealed against writing, by
// every route); written through the daemon's own node segment instead (no tenant is given it),
// tesserad reclaims the slot through its own record of the slot's container, logs the rewrite, and
// a restarted tesserad finds nothing corrupt left.
TEST_F(HostileTest, OutOfRangeContainerIndexThenDisconnectLeavesTheDaemonUp) {
  StartDaemon();
  RawTenant victim, hostile;
  ASSERT_NO_FATAL_FAILURE(RegisterBoth(&victim, &hostile));

  const auto* slot = &hostile.layout->processes[hostile.process];
  // The container index and host pid share one 64-bit word; writing it is the attack.
  const auto* word = reinterpret_cast<const std::atomic<uint64_t>*>(&slot->host_pid);
  const uint64_t attack = (uint64_t{0x7fffffff} << 32) | static_cast<uint32_t>(slot->host_pid);
  EXPECT_EQ(TryToWrite(hostile, word, attack), std::vector<std::string>{})
      << "a tenant wrote its process slot";
  EXPECT_EQ(slot->container.load(), hostile.container);
  ledger::LedgerLayout* daemons = DaemonsNodeSegment();
  ASSERT_NE(daemons, nullptr);
  daemons->processes[hostile.process].container.store(0x7fffffff);
  munmap(daemons, sizeof(ledger::LedgerLayout));
  hostile.Close();

  // The daemon is still serving, and the hostile container's bytes are gone (self-declared, so
  // the container went with its last process), the victim's intact.
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string status = Status();
        return status.rfind("OK ", 0) == 0 && status.find("\"hostile\"") == std::string::npos;
      },
      5s))
      << Status();
  EXPECT_TRUE(DaemonRunning());
  EXPECT_EQ(victim.own->counters.used[0].load(), kGiB);

  // And a restart on the same ledger is clean: it starts, serves, and keeps the victim's books.
  StopDaemon();
  StartDaemon();
  EXPECT_NE(Status().find("\"victim\""), std::string::npos) << Status();
  EXPECT_EQ(victim.own->counters.used[0].load(), kGiB);
  EXPECT_EQ(BooksOf("victim").first, static_cast<int64_t>(kGiB));
}

// Least authority (issue 17 item 2): through shared memory a tenant cannot raise its limit, change
// a neighbour's usage or limit, or take the compute token out of turn. It tries each, then
// scribbles over everything it may write (its own container's segment, the exchange); the
// neighbour's books, its own limit and the token are what the daemon made them. On layout 7 (one
// writable segment per tenant) every one of these writes succeeded.
TEST_F(HostileTest, ATenantCannotRaiseItsLimitTouchANeighbourOrTakeTheToken) {
  StartDaemon();
  RawTenant victim, hostile;
  ASSERT_NO_FATAL_FAILURE(RegisterBoth(&victim, &hostile));
  const uint32_t h = hostile.container, v = victim.container;
  const ledger::GateDevice& gate = hostile.layout->gate.devices[0];

  // Its own limit, the neighbour's limit, and its bit in the token word.
  EXPECT_EQ(TryToWrite(hostile, &hostile.layout->containers[h].limit[0], ledger::kUnlimited),
            std::vector<std::string>{})
      << "a tenant raised its own limit";
  EXPECT_EQ(TryToWrite(hostile, &hostile.layout->containers[v].limit[0], 1),
            std::vector<std::string>{})
      << "a tenant lowered a neighbour's limit";
  const uint64_t mine = gate.may_run[h / 64].load() | (uint64_t{1} << (h % 64));
  EXPECT_EQ(TryToWrite(hostile, &gate.may_run[h / 64], mine), std::vector<std::string>{})
      << "a tenant set its own may_run bit";
  // The neighbour's counters are in no segment it was given: it scribbles over all it has.
  std::memset(static_cast<void*>(hostile.own), 0xff, sizeof(ledger::ContainerSegment));
  std::memset(static_cast<void*>(hostile.exchange), 0xff, sizeof(ledger::Exchange));

  EXPECT_EQ(hostile.layout->containers[h].limit[0].load(), 2 * kGiB);
  EXPECT_EQ(hostile.layout->containers[v].limit[0].load(), 2 * kGiB);
  EXPECT_EQ(BooksOf("victim"),
            std::make_pair(static_cast<int64_t>(kGiB), static_cast<int64_t>(2 * kGiB)));
  EXPECT_EQ(victim.own->counters.used[0].load(), kGiB);
  EXPECT_EQ(victim.own->processes[victim.process].used[0].load(), kGiB);
  // The arbiter's bits are its own: the hostile container, with no work reported, has none.
  EXPECT_EQ((gate.may_run[h / 64].load() >> (h % 64)) & 1, 0u);
  hostile.Close();
  ASSERT_TRUE(Eventually([&] { return Status().find("\"hostile\"") == std::string::npos; }, 5s))
      << Status();
  EXPECT_TRUE(DaemonRunning());
  EXPECT_EQ(BooksOf("victim").first, static_cast<int64_t>(kGiB));
}

// Nor through what it may write: a process holds a writable descriptor of its container's segment
// and of the exchange, and a file shrunk under a mapping makes every access past the new end fault
// (SIGBUS), the daemon's included. The exchange, which every process maps, cannot be resized at all
// (sealed); its own container's segment it may cut, and then the daemon reads zeros past the cut
// in its arbiter, reconciler and reclaim, says so, makes the container a new segment, and serves
// on; the neighbour's books are intact and the container's next process counts from zero.
TEST_F(HostileTest, ShrinkingWhatItMayWriteCannotTakeTheDaemonDown) {
  StartDaemon();
  RawTenant victim, hostile;
  ASSERT_NO_FATAL_FAILURE(RegisterBoth(&victim, &hostile));
  errno = 0;
  EXPECT_NE(ftruncate(hostile.exchange_fd, 0), 0) << "a tenant shrank the exchange";
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(hostile.exchange_fd, 1 << 20), 0) << "a tenant grew the exchange";
  ASSERT_EQ(ftruncate(hostile.container_fd, 0), 0) << "its own segment: it may";
  // The sweep (once a second) reports the cut and replaces the segment; the arbiter and STATUS
  // have gone over the lost pages meanwhile.
  ASSERT_TRUE(
      Eventually([&] { return DaemonLog().find("was cut short") != std::string::npos; }, 5s))
      << DaemonLog();
  EXPECT_NE(DaemonLog().find("(hostile): its segment was cut short by one of its own processes"),
            std::string::npos)
      << DaemonLog();
  EXPECT_TRUE(DaemonRunning());
  EXPECT_EQ(BooksOf("victim"),
            std::make_pair(static_cast<int64_t>(kGiB), static_cast<int64_t>(2 * kGiB)));
  RawTenant next;
  ASSERT_NO_FATAL_FAILURE(Register(&next, "hostile", std::to_string(2 * kGiB)));
  Charge(next, 256ull << 20);
  EXPECT_EQ(BooksOf("hostile").first, static_cast<int64_t>(256ull << 20));
  // The cut one leaves (its reclaim reads zeros), the daemon serves on and restarts clean.
  hostile.Close();
  next.Close();
  ASSERT_TRUE(Eventually([&] { return Status().find("\"hostile\"") == std::string::npos; }, 5s))
      << Status();
  EXPECT_TRUE(DaemonRunning());
  StopDaemon();
  StartDaemon();
  EXPECT_EQ(BooksOf("victim").first, static_cast<int64_t>(kGiB));
}

// The same attack left in the ledger for the next daemon: the hostile process rewrites its slot
// while no daemon runs (the daemon was killed), then exits. Every restart must come up; the
// corrupt slot is dropped and logged, and the victim's books are what remains true.
TEST_F(HostileTest, ACorruptLedgerIsRepairedAtStartNotACrashLoop) {
  StartDaemon();
  RawTenant victim, hostile;
  ASSERT_NO_FATAL_FAILURE(RegisterBoth(&victim, &hostile));
  daemon_->Kill(SIGKILL);
  daemon_->Wait(10s);
  daemon_.reset();

  ledger::LedgerLayout* l = DaemonsNodeSegment();  // what a crash mid-write could leave
  ASSERT_NE(l, nullptr);
  l->processes[hostile.process].container.store(0xdeadbeef);
  l->processes[hostile.process].state.store(77);  // neither free nor live
  // A container slot of nobody's, marked live with an id that is not one.
  ledger::ContainerSlot& junk = l->containers[ledger::kMaxContainers - 1];
  std::memset(junk.id, 'x', sizeof(junk.id));  // no terminating NUL
  junk.state.store(ledger::kLive);
  junk.process_count.store(5);
  munmap(l, sizeof(ledger::LedgerLayout));
  hostile.Close();

  for (int restart = 0; restart < 3; ++restart) {
    StartDaemon();
    EXPECT_TRUE(Eventually([&] { return Status().rfind("OK ", 0) == 0; }, 5s)) << Status();
    EXPECT_NE(Status().find("\"victim\""), std::string::npos) << Status();
    EXPECT_EQ(Status().find("xxxxxxxx"), std::string::npos) << Status();
    EXPECT_EQ(victim.own->counters.used[0].load(), kGiB);
    EXPECT_EQ(victim.layout->containers[ledger::kMaxContainers - 1].state.load(), ledger::kFree);
    daemon_->Kill(SIGKILL);
    daemon_->Wait(10s);
    daemon_.reset();
  }
}

}  // namespace
