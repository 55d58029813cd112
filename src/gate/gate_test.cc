// The compute gate end to end: a real tesserad (its arbiter thread) on simgpu and real tenant
// processes linked against the shim, launching simgpu `spin` kernels back to back. Shares are
// read from what each tenant got done in the same wall-clock window, so a gate that lets
// launches through ungated, or an arbiter that favours one side, fails these tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "ledger/ledger_layout.h"
#include "ledger/ledger_view.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

class GateTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    shm_unlink(("/tessera-sim-" + state_).c_str());
  }

  void StartDaemon(const std::vector<std::string>& args) {
    if (state_.empty()) {
      state_ = UniqueName("gate");
      socket_ = "/tmp/" + state_ + ".sock";
    }
    std::vector<std::string> argv = {BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                     "--ephemeral"};
    argv.insert(argv.end(), args.begin(), args.end());
    daemon_ = std::make_unique<ChildProcess>(argv, SimEnv());
    ASSERT_TRUE(daemon_->started());
    ASSERT_TRUE(tessera::ipc::WaitUntilListening(socket_, 5s))
        << "tesserad did not start listening on " << socket_;
  }
  std::vector<std::string> SimEnv() {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimT:8GiB:80"};
  }
  // A tenant spinning `kernel_us` kernels through `how` for `seconds` from `start_ns`; its stderr
  // goes to `stderr_path` when given.
  std::unique_ptr<ChildProcess> Spinner(const std::string& container, int kernel_us, int seconds,
                                        uint64_t start_ns, const std::string& how,
                                        const std::vector<std::string>& env,
                                        const std::string& stderr_path = "") {
    const std::string program = BuildDir() + "/tests/shim_tenant";
    std::vector<std::string> argv = {program,
                                     "spin",
                                     std::to_string(kernel_us),
                                     std::to_string(seconds),
                                     std::to_string(start_ns),
                                     how};
    if (!stderr_path.empty()) {
      std::string cmd = "exec";
      for (const std::string& a : argv) cmd += " '" + a + "'";
      argv = {"/bin/sh", "-c", cmd + " 2>'" + stderr_path + "'"};
    }
    std::vector<std::string> full = TenantEnv(SimEnv(), socket_, container);
    full.insert(full.end(), env.begin(), env.end());
    auto child = std::make_unique<ChildProcess>(argv, full);
    EXPECT_TRUE(child->started());
    return child;
  }
  static double Kernels(ChildProcess& c) {
    auto v = c.WaitForKey("kernels", 60s);
    EXPECT_TRUE(v.has_value());
    // Printed on success too: how close a run came to a bound is what a flaky one is judged by.
    auto late = c.values().find("late_ms");
    std::printf("[ kernels  ] %s (started %s ms late)\n", v ? v->c_str() : "none",
                late == c.values().end() ? "?" : late->second.c_str());
    return v ? std::stod(*v) : 0;
  }
  static double LongestLaunchMs(ChildProcess& c) {
    c.DrainOutput(10s);
    auto it = c.values().find("longest_launch_ms");
    EXPECT_NE(it, c.values().end());
    return it == c.values().end() ? 1e9 : std::stod(it->second);
  }
  static uint64_t SoonNs() { return MonotonicNs() + 300'000'000; }

  // Kernels of 1 ms per second that one tenant alone gets through the gate on this machine: the
  // yardstick for the busy-ness bounds below (1000 on an idle machine). A slow or loaded machine
  // (a sanitizer build, a shared CI runner) lowers the yardstick instead of failing the tests; a
  // gate that stalls at hand-offs still falls far below it. Measured once per test binary, before
  // the first test's own tenants start, under policy 1 on a daemon and simulated GPU of its own:
  // the test's policy may cap a lone tenant (1/16 of the GPU under policy 3, which made the
  // yardstick 68 kernels/s whenever a policy 3 test came first).
  double SoloRate() {
    static double rate = 0;
    if (rate == 0) {
      rate = MeasureSoloRate();
      std::printf("[ solo     ] %.0f kernels/s\n", rate);
    }
    return rate;
  }
  double MeasureSoloRate() {
    const std::string state = state_, socket = socket_;
    std::unique_ptr<ChildProcess> daemon = std::move(daemon_);
    state_ = UniqueName("gate-solo");
    socket_ = "/tmp/" + state_ + ".sock";
    double rate = 1;
    StartDaemon({"--policy", "1"});
    if (daemon_) {
      auto solo = Spinner("solo", 1000, 2, SoonNs(), "stream", {});
      rate = std::clamp(Kernels(*solo) / 2.0, 1.0, 1000.0);
      EXPECT_EQ(solo->Wait(30s), 0);
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    shm_unlink(("/tessera-sim-" + state_).c_str());
    state_ = state;
    socket_ = socket;
    daemon_ = std::move(daemon);
    return rate;
  }
  // Starts a busy-ness measurement: the yardstick (measured now if not yet) and the CPU time so
  // far. Called before the test's tenants start.
  void BusyWindow() {
    SoloRate();
    window_ = ReadCpu();
  }
  // Whether `kernels` of 1 ms in `seconds` kept the device at least `fraction` busy against the
  // yardstick. Below it, the yardstick is measured again and the lower rate counts: the host may
  // have slowed since the first measurement (CI saw 64 % of a rate measured 20 s earlier), while a
  // gate that stalls stays below both. Still below, the check is not judged when the hypervisor
  // took more than 3 % of the CPU since BusyWindow() (CI saw 65 % with a yardstick re-measured
  // right after at 926 kernels/s; on this virtual machine steal comes in bursts, and the
  // benchmark flags its rounds the same way); it says so on stdout.
  bool KeptBusy(double kernels, double seconds, double fraction) {
    if (kernels > fraction * seconds * SoloRate()) return true;
    const double steal = StealPctSince(window_);
    const double now = MeasureSoloRate();
    std::printf("[ solo     ] %.0f kernels/s, measured again\n", now);
    if (kernels > fraction * seconds * std::min(SoloRate(), now)) return true;
    if (steal > 3.0) {
      std::printf(
          "[ steal    ] %.1f %% of the CPU went to the hypervisor during the run: "
          "%.0f kernels of 1 ms in %.0f s not judged\n",
          steal, kernels, seconds);
      return true;
    }
    return false;
  }
  struct CpuTimes {
    uint64_t steal = 0, total = 0;
  };
  static CpuTimes ReadCpu() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    in >> cpu;
    CpuTimes t;
    uint64_t v = 0;
    for (int i = 0; i < 8 && in >> v; ++i) {  // user nice system idle iowait irq softirq steal
      t.total += v;
      if (i == 7) t.steal = v;
    }
    return t;
  }
  static double StealPctSince(const CpuTimes& from) {
    const CpuTimes now = ReadCpu();
    if (now.total <= from.total) return 0;
    return 100.0 * static_cast<double>(now.steal - from.steal) /
           static_cast<double>(now.total - from.total);
  }

  std::string state_, socket_;
  std::unique_ptr<ChildProcess> daemon_;
  CpuTimes window_;
};

// Policy 3 (fixed percentage) at 30/70 through every launch path: the legacy default stream, a
// per-thread default stream (_ptsz), an explicit stream via cuLaunchKernelEx, graph launches, and
// an explicit stream while a capture the tenant never ends runs on another (still gated).
class GateHowTest : public GateTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(GateHowTest, FixedPercentageSplitsTheGpuThirtySeventy) {
  StartDaemon({"--policy", "3"});
  BusyWindow();
  const uint64_t start = SoonNs();
  auto a = Spinner("thirty", 1000, 2, start, GetParam(), {"TESSERA_CORE_LIMIT=30"});
  auto b = Spinner("seventy", 1000, 2, start, GetParam(), {"TESSERA_CORE_LIMIT=70"});
  const double ka = Kernels(*a), kb = Kernels(*b);
  ASSERT_GT(ka + kb, 0);
  const double share = 100.0 * ka / (ka + kb);
  EXPECT_NEAR(share, 30.0, 4.0) << ka << " vs " << kb << " kernels of 1 ms";
  // Capped at 30 + 70: together they keep the device busy most of the 2 s (the benchmark measures
  // how busy; this only catches a gate that stalls).
  EXPECT_TRUE(KeptBusy(ka + kb, 2, 0.75)) << ka + kb << " kernels of 1 ms in 2 s";
  EXPECT_EQ(a->Wait(30s), 0);
  EXPECT_EQ(b->Wait(30s), 0);
}
INSTANTIATE_TEST_SUITE_P(Paths, GateHowTest,
                         ::testing::Values("legacy", "ptsz", "ex", "graph", "capturing"));

TEST_F(GateTest, WeightedPreemptiveFollowsOneToTwo) {
  StartDaemon({"--policy", "2"});
  const uint64_t start = SoonNs();
  auto a = Spinner("one", 1000, 2, start, "stream", {"TESSERA_WEIGHT=1"});
  auto b = Spinner("two", 1000, 2, start, "stream", {"TESSERA_WEIGHT=2"});
  const double ka = Kernels(*a), kb = Kernels(*b);
  ASSERT_GT(ka, 0);
  EXPECT_NEAR(kb / ka, 2.0, 0.25) << ka << " vs " << kb;
}

TEST_F(GateTest, PreemptiveSharesEquallyAndKeepsTheGpuBusy) {
  StartDaemon({"--policy", "1"});
  BusyWindow();
  const uint64_t start = SoonNs();
  auto a = Spinner("left", 1000, 2, start, "stream", {});
  auto b = Spinner("right", 1000, 2, start, "stream", {});
  const double ka = Kernels(*a), kb = Kernels(*b);
  EXPECT_NEAR(100.0 * ka / (ka + kb), 50.0, 4.0);
  EXPECT_TRUE(KeptBusy(ka + kb, 2, 0.8)) << "a work-conserving policy keeps the device busy";
}

TEST_F(GateTest, AKilledHolderLosesTheTokenAtOnce) {
  StartDaemon({"--policy", "1"});
  BusyWindow();
  const uint64_t start = SoonNs();
  auto victim = Spinner("victim", 1000, 30, start, "stream", {});
  auto other = Spinner("other", 1000, 3, start, "stream", {});
  ASSERT_EQ(victim->WaitForKey("ready", 30s), "1");
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 800ms);
  victim->Kill(SIGKILL);
  EXPECT_EQ(victim->Wait(10s), 128 + SIGKILL);
  const double k = Kernels(*other);
  // About 0.8 s shared, then 2.2 s alone: well over what sharing all along would give (1.5 s).
  EXPECT_TRUE(KeptBusy(k, 3, 0.73)) << k << " kernels of 1 ms in 3 s";
  EXPECT_LT(LongestLaunchMs(*other), 100) << "no launch waited more than a few quotas";
}

TEST_F(GateTest, AStoppedHolderLosesTheTokenWithinAQuota) {
  StartDaemon({"--policy", "1"});
  BusyWindow();
  const uint64_t start = SoonNs();
  auto hung = Spinner("hung", 1000, 30, start, "stream", {});
  auto other = Spinner("other", 1000, 3, start, "stream", {});
  ASSERT_EQ(hung->WaitForKey("ready", 30s), "1");
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 800ms);
  hung->Kill(SIGSTOP);
  const double k = Kernels(*other);
  EXPECT_TRUE(KeptBusy(k, 3, 0.67)) << k << " kernels of 1 ms in 3 s";
  EXPECT_LT(LongestLaunchMs(*other), 300) << "a stopped holder held everyone up";
  hung->Kill(SIGKILL);
}

// A high-priority launch goes through its open lane (GateDevice::lane_open) without waiting for
// the arbiter: the arbiter publishes the lane's may_run bit set with it, so the launch passes the
// usual one-load check and rings the arbiter, which revokes the best-effort holder at its next
// step; no process writes another container's bits (issue 17). Here the daemon is stopped
// (SIGSTOP, its heartbeat well within the loss timeout) while a best-effort tenant holds the
// token: no high-priority launch waits, and the lane's kernels run beside the holder's, which the
// stopped arbiter cannot revoke (about half the device each). A lane the launcher had to wait for
// would get nothing until the daemon came back.
TEST_F(GateTest, AHighPriorityLaunchGoesThroughItsOpenLaneWithoutTheArbiter) {
  const std::string ledger_name = "/" + UniqueName("gate-ledger");
  StartDaemon({"--policy", "1", "--daemon-loss-timeout", "20000", "--ledger", ledger_name});
  // The arbiter's words are in the daemon's node view (ledger_layout.h).
  const void* map = tessera::ledger::MapDaemonView(ledger_name);
  ASSERT_NE(map, nullptr) << ledger_name;
  const auto& gd = static_cast<const tessera::ledger::LedgerLayout*>(map)->gate.devices[0];
  BusyWindow();
  const uint64_t start = MonotonicNs() + 1'000'000'000;
  auto be = Spinner("be", 1000, 3, start, "stream", {});
  auto hp = Spinner("hp", 1000, 1, start + 1'000'000'000, "stream", {"TESSERA_HIGH_PRIO=1"});
  ASSERT_EQ(be->WaitForKey("ready", 30s), "1");
  // The arbiter has published hp's lane (its process registered) before it stops.
  auto lane_published = [&] {
    for (const auto& word : gd.lane_open) {
      if (word.load() != 0) return true;
    }
    return false;
  };
  for (int i = 0; i < 2000 && !lane_published(); ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(lane_published()) << "hp's lane never opened";
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 500ms);
  daemon_->Kill(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 2500ms);
  daemon_->Kill(SIGCONT);
  EXPECT_TRUE(KeptBusy(Kernels(*hp), 1, 0.35))
      << "the high-priority tenant waited for the stopped arbiter";
  EXPECT_LT(LongestLaunchMs(*hp), 100) << "a high-priority launch waited for the token";
  Kernels(*be);
  munmap(const_cast<void*>(map), sizeof(tessera::ledger::LedgerLayout));
  tessera::ledger::MemoryLedger::Remove(ledger_name);
}

TEST_F(GateTest, ADaemonLossUngatesWaitersAndGatingResumesWhenItReturns) {
  StartDaemon({"--policy", "3", "--daemon-loss-timeout", "300"});
  const uint64_t start = SoonNs();
  const std::string err_a = "/tmp/" + state_ + "-a.err", err_b = "/tmp/" + state_ + "-b.err";
  auto a = Spinner("thirty", 1000, 4, start, "stream", {"TESSERA_CORE_LIMIT=30"}, err_a);
  auto b = Spinner("seventy", 1000, 4, start, "stream", {"TESSERA_CORE_LIMIT=70"}, err_b);
  ASSERT_EQ(a->WaitForKey("ready", 30s), "1");
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 1s);
  daemon_->Kill(SIGKILL);
  EXPECT_EQ(daemon_->Wait(10s), 128 + SIGKILL);
  std::this_thread::sleep_for(1s);
  StartDaemon({"--policy", "3", "--daemon-loss-timeout", "300"});
  Kernels(*a);
  Kernels(*b);
  // Nobody waited for the lost daemon much longer than the configured bound (300 ms; the 1 s
  // margin is for a loaded 2-core or sanitizer-built machine: CI saw 803 ms under ASan while other
  // builds ran). A waiter that fell back only at the default 2 s bound, or hung, is far above it.
  EXPECT_LT(LongestLaunchMs(*a), 1300);
  EXPECT_LT(LongestLaunchMs(*b), 1300);
  EXPECT_EQ(a->Wait(30s), 0);
  EXPECT_EQ(b->Wait(30s), 0);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string both = read(err_a) + read(err_b);
  EXPECT_NE(both.find("UNGATED"), std::string::npos) << both;
  EXPECT_NE(both.find("gating resumes"), std::string::npos) << both;
  unlink(err_a.c_str());
  unlink(err_b.c_str());
}

// A holder whose token is revoked publishes, before it waits for its queued kernels, when they are
// expected to end (ProcessCounters::idle_at_ns): the arbiter lets the next holder in just before
// then. Read from the daemon's ledger while two tenants trade the token under policy 1.
TEST_F(GateTest, ARevokedHolderPublishesWhenItsQueuedWorkEnds) {
  const std::string ledger_name = "/" + UniqueName("gate-ledger");
  StartDaemon({"--policy", "1", "--ledger", ledger_name});
  // The arbiter's words are in the daemon's node view (ledger_layout.h).
  const void* map = tessera::ledger::MapDaemonView(ledger_name);
  ASSERT_NE(map, nullptr) << ledger_name;
  const auto* layout = static_cast<const tessera::ledger::LedgerLayout*>(map);
  const uint64_t start = SoonNs();
  auto a = Spinner("left", 1000, 2, start, "stream", {});
  auto b = Spinner("right", 1000, 2, start, "stream", {});
  ASSERT_EQ(a->WaitForKey("ready", 30s), "1");
  ASSERT_EQ(b->WaitForKey("ready", 30s), "1");
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - MonotonicNs()) + 200ms);
  // Each switch (about every 20 ms) drains up to 4 ms of queued work: poll for 1.5 s.
  int seen = 0;
  uint64_t farthest = 0;  // the furthest ahead a published end lay
  // A process's counters are in its container's segment (ledger_layout.h), mapped on first use.
  std::map<uint32_t, const tessera::ledger::ContainerSegment*> segments;
  auto segment = [&](uint32_t c) -> const tessera::ledger::ContainerSegment* {
    auto it = segments.find(c);
    if (it != segments.end()) return it->second;
    const int seg_fd = shm_open((ledger_name + ".c" + std::to_string(c)).c_str(), O_RDONLY, 0);
    void* mem = seg_fd < 0 ? MAP_FAILED
                           : mmap(nullptr, sizeof(tessera::ledger::ContainerSegment), PROT_READ,
                                  MAP_SHARED, seg_fd, 0);
    if (seg_fd >= 0) close(seg_fd);
    const auto* seg =
        mem == MAP_FAILED ? nullptr : static_cast<const tessera::ledger::ContainerSegment*>(mem);
    segments[c] = seg;
    return seg;
  };
  for (const uint64_t until = MonotonicNs() + 1'500'000'000; MonotonicNs() < until;) {
    for (int p = 0; p < tessera::ledger::kMaxProcesses; ++p) {
      const auto& slot = layout->processes[p];
      if (slot.state.load() != tessera::ledger::kLive) continue;
      const uint32_t c = slot.container.load() % tessera::ledger::kMaxContainers;
      const tessera::ledger::ContainerSegment* seg = segment(c);
      if (seg == nullptr) continue;
      const auto& ps = seg->processes[p];
      if ((ps.busy_mask.load() & 1) == 0) continue;
      const uint64_t idle_at = ps.idle_at_ns[0].load(), now = MonotonicNs();
      const bool holds = (layout->gate.devices[0].may_run[c / 64].load() >> (c % 64)) & 1;
      if (idle_at > now && !holds) {
        ++seen;
        farthest = std::max(farthest, idle_at - now);
      }
    }
    std::this_thread::sleep_for(20us);
  }
  Kernels(*a);
  Kernels(*b);
  for (const auto& [c, seg] : segments) {
    if (seg != nullptr) {
      munmap(const_cast<tessera::ledger::ContainerSegment*>(seg),
             sizeof(tessera::ledger::ContainerSegment));
    }
  }
  munmap(const_cast<void*>(map), sizeof(tessera::ledger::LedgerLayout));
  tessera::ledger::MemoryLedger::Remove(ledger_name);
  EXPECT_GT(seen, 0) << "no revoked holder published when its drain ends";
  // What it may keep queued is bounded (4 ms here), so a sane estimate lies within that and a
  // kernel of now.
  EXPECT_LT(farthest, 10'000'000u) << "a published end lay " << farthest / 1000 << " us ahead";
}

}  // namespace
