// Hostile tenants (issue 17, item 0): shared memory is untrusted input. A process registers with a
// real tesserad on simgpu the way the shim does (HELLO over the socket, the ledger's descriptor
// back), maps the ledger, scribbles on its own slots and disconnects. tesserad must stay up, keep
// every other container's books exact, and a tesserad restarted on that ledger must start clean.
//
// The hostile process here is this test itself: what it writes is exactly what ten lines of
// Python with mmap could write, and it needs no shim to do it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/protocol.h"
#include "ipc/unix_socket.h"
#include "ledger/ledger_layout.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;
namespace ledger = tessera::ledger;
namespace ipc = tessera::ipc;

constexpr uint64_t kGiB = 1ull << 30;

// A registered process that is not the shim: it holds the connection and a writable mapping of
// the ledger, as every tenant does.
struct RawTenant {
  int fd = -1;
  ledger::LedgerLayout* layout = nullptr;
  uint32_t container = 0, process = 0;

  ~RawTenant() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
    if (layout != nullptr) munmap(layout, sizeof(ledger::LedgerLayout));
    layout = nullptr;
  }
};

class HostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = UniqueName("hostile");
    socket_ = "/tmp/" + state_ + ".sock";
    ledger_name_ = "/tessera-ledger-" + state_;
  }
  void TearDown() override {
    StopDaemon();
    shm_unlink(ledger_name_.c_str());
    shm_unlink(("/tessera-sim-" + state_).c_str());
    unlink(socket_.c_str());
  }

  void StartDaemon() {
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                 "--ledger", ledger_name_},
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

  // HELLO as the shim sends it; the reply's descriptor is the ledger.
  void Register(RawTenant* t, const std::string& container, const std::string& mem) {
    auto fd = ipc::Connect(socket_, 5s);
    ASSERT_TRUE(fd.ok()) << fd.status().message();
    t->fd = *fd;
    ASSERT_TRUE(ipc::SendLine(t->fd, "HELLO version=" +
                                         std::to_string(tessera::protocol::kProtocolVersion) +
                                         " container=" + container + " mem=" + mem)
                    .ok());
    std::string buffer;
    int ledger_fd = -1;
    auto line = ipc::RecvLine(t->fd, &buffer, &ledger_fd, 5s);
    ASSERT_TRUE(line.ok()) << line.status().message();
    auto reply = tessera::protocol::ParseMessage(*line);
    ASSERT_TRUE(reply.ok() && reply->verb == "OK") << *line;
    ASSERT_GE(ledger_fd, 0);
    void* mem_map = mmap(nullptr, sizeof(ledger::LedgerLayout), PROT_READ | PROT_WRITE,
                         MAP_SHARED, ledger_fd, 0);
    close(ledger_fd);
    ASSERT_NE(mem_map, MAP_FAILED);
    t->layout = static_cast<ledger::LedgerLayout*>(mem_map);
    t->container = static_cast<uint32_t>(std::stoul(reply->Get("container")));
    t->process = static_cast<uint32_t>(std::stoul(reply->Get("process")));
  }

  // Reserves `bytes` on device 0 as the shim's fast path does.
  static void Charge(RawTenant& t, uint64_t bytes) {
    t.layout->containers[t.container].used[0].fetch_add(bytes);
    t.layout->processes[t.process].used[0].fetch_add(bytes);
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

  std::string state_, socket_, ledger_name_;
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
// a disconnect. tesserad reclaims the slot through its own record of the slot's container, logs
// the rewrite, and a restarted tesserad finds nothing corrupt left.
TEST_F(HostileTest, OutOfRangeContainerIndexThenDisconnectLeavesTheDaemonUp) {
  StartDaemon();
  RawTenant victim, hostile;
  ASSERT_NO_FATAL_FAILURE(RegisterBoth(&victim, &hostile));

  hostile.layout->processes[hostile.process].container.store(0x7fffffff);
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
  EXPECT_EQ(victim.layout->containers[victim.container].used[0].load(), kGiB);

  // And a restart on the same ledger is clean: it starts, serves, and keeps the victim's books.
  StopDaemon();
  StartDaemon();
  EXPECT_NE(Status().find("\"victim\""), std::string::npos) << Status();
  EXPECT_EQ(victim.layout->containers[victim.container].used[0].load(), kGiB);
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

  ledger::LedgerLayout* l = hostile.layout;
  l->processes[hostile.process].container.store(0xdeadbeef);
  l->processes[hostile.process].state.store(77);  // neither free nor live
  // A container slot of nobody's, marked live with an id that is not one.
  ledger::ContainerSlot& junk = l->containers[ledger::kMaxContainers - 1];
  std::memset(junk.id, 'x', sizeof(junk.id));  // no terminating NUL
  junk.state.store(ledger::kLive);
  junk.process_count.store(5);
  hostile.Close();

  for (int restart = 0; restart < 3; ++restart) {
    StartDaemon();
    EXPECT_TRUE(Eventually([&] { return Status().rfind("OK ", 0) == 0; }, 5s)) << Status();
    EXPECT_NE(Status().find("\"victim\""), std::string::npos) << Status();
    EXPECT_EQ(Status().find("xxxxxxxx"), std::string::npos) << Status();
    EXPECT_EQ(victim.layout->containers[victim.container].used[0].load(), kGiB);
    EXPECT_EQ(victim.layout->containers[ledger::kMaxContainers - 1].state.load(), ledger::kFree);
    daemon_->Kill(SIGKILL);
    daemon_->Wait(10s);
    daemon_.reset();
  }
}

}  // namespace
