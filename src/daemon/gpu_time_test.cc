// GPU time as it ran, end to end: a real tesserad on simgpu and real tenants through the shim,
// under each policy and beside a high-priority tenant. The daemon's per-container figures (STATUS's
// achieved_percent over its 1 s window and gpu_seconds, which /metrics, smi and the demo show as
// they are) must equal the device time the container's kernels occupied within 1 point over 1 s.
// The truth is simgpu's own: each process's busy time, placed where its kernels ran on the device
// clock (SimProcess::busy, 50 ms buckets), read from the simulated machine's shared state.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "process/child_process.h"
#include "simgpu/sim_state.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntil(uint64_t t) {
  const uint64_t now = NowNs();
  if (t > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t - now));
}

struct TenantSpec {
  std::string container;
  std::string how;  // shim_tenant spin HOW
  int kernel_us = 1000;
  std::vector<std::string> env;
};

struct Scenario {
  std::string name;
  std::vector<std::string> daemon_flags;
  std::vector<TenantSpec> tenants;
};

// One STATUS snapshot: the instant its figures run to (gpu_time_until_ns) and each container's
// figures on GPU 0.
struct Snapshot {
  uint64_t at = 0;
  std::map<std::string, double> achieved_percent, gpu_seconds;
};

class GpuTimeTest : public ::testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override {
    state_ = UniqueName("gputime");
    socket_ = "/tmp/" + state_ + ".sock";
  }
  void TearDown() override {
    tenants_.clear();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    shm_unlink(("/tessera-sim-" + state_).c_str());
  }
  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimTime:8GiB:80"};
  }

  Snapshot Status() {
    Snapshot s;
    auto reply = tessera::ipc::Call(socket_, "STATUS", nullptr, 2s);
    EXPECT_TRUE(reply.ok() && reply->rfind("OK ", 0) == 0);
    if (!reply.ok() || reply->rfind("OK ", 0) != 0) return s;
    const nlohmann::json doc = nlohmann::json::parse(reply->substr(3));
    s.at = doc.at("devices").at(0).at("gpu_time_until_ns").get<uint64_t>();
    for (const nlohmann::json& c : doc.at("containers")) {
      const nlohmann::json& compute = c.at("compute").at(0);
      const std::string id = c.at("id").get<std::string>();
      s.achieved_percent[id] = compute.at("achieved_percent").get<double>();
      s.gpu_seconds[id] = compute.at("gpu_seconds").get<double>();
    }
    return s;
  }

  // The device time simgpu booked for process `pid` on GPU 0 within [from, to), as the least and
  // the most it can have been: whole 50 ms buckets are exact, and of an edge bucket partly inside
  // the window at least what does not fit in the part outside and at most what fits inside (the
  // snapshots land within a few ms of a boundary).
  struct Range {
    double least = 0, most = 0;
  };
  Range DeviceTime(tessera::sim::SimState* sim, int pid, uint64_t from, uint64_t to) {
    constexpr uint64_t kBucket = tessera::sim::kProcessBucketNs;
    Range r;
    for (const tessera::sim::SimProcess& p : sim->layout()->processes) {
      if (p.state.load() != tessera::sim::kSlotLive || p.pid.load() != pid) continue;
      for (uint64_t k = from / kBucket; k <= (to - 1) / kBucket; ++k) {
        const tessera::sim::BusyBucket& b = p.busy[0][k % tessera::sim::kProcessBuckets];
        if (b.epoch.load() != k) continue;
        const double busy = static_cast<double>(b.busy_ns.load());
        const uint64_t lo = std::max(from, k * kBucket), hi = std::min(to, (k + 1) * kBucket);
        const double inside = static_cast<double>(hi - lo);
        const double outside = static_cast<double>(kBucket) - inside;
        r.least += std::max(0.0, busy - outside);
        r.most += std::min(busy, inside);
      }
    }
    return r;
  }
  // Whether `figure` (percent of `seconds`) is within `points` of the device's `range`.
  static ::testing::AssertionResult Within(double figure, Range range, double seconds,
                                           double points) {
    const double least = 100.0 * range.least / 1e9 / seconds,
                 most = 100.0 * range.most / 1e9 / seconds;
    if (figure >= least - points && figure <= most + points) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << figure << " is more than " << points
                                         << " points from the device's " << least << ".." << most;
  }

  std::string state_, socket_;
  std::unique_ptr<ChildProcess> daemon_;
  std::vector<std::unique_ptr<ChildProcess>> tenants_;
};

TEST_P(GpuTimeTest, EachContainersFiguresAreTheDeviceTimeItsKernelsOccupied) {
  const Scenario& scenario = GetParam();
  std::vector<std::string> argv = {BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                   "--ephemeral"};
  argv.insert(argv.end(), scenario.daemon_flags.begin(), scenario.daemon_flags.end());
  daemon_ = std::make_unique<ChildProcess>(argv, SimEnv());
  ASSERT_TRUE(daemon_->started());
  ASSERT_TRUE(tessera::ipc::WaitUntilListening(socket_, 5s));
  constexpr int kSeconds = 4;
  const uint64_t start = NowNs() + 300'000'000;
  for (const TenantSpec& t : scenario.tenants) {
    std::vector<std::string> env = TenantEnv(SimEnv(), socket_, t.container);
    env.insert(env.end(), t.env.begin(), t.env.end());
    tenants_.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "spin",
                                 std::to_string(t.kernel_us), std::to_string(kSeconds),
                                 std::to_string(start), t.how},
        env));
    ASSERT_TRUE(tenants_.back()->started());
  }
  for (auto& t : tenants_) ASSERT_EQ(t->WaitForKey("ready", 30s), "1");

  // Two snapshots a second apart, whose figures run to about a bucket boundary of simgpu's busy
  // time, after the window has filled (1.5 s in).
  constexpr uint64_t kBucket = tessera::sim::kProcessBucketNs;
  const uint64_t first = (start + 1'500'000'000) / kBucket * kBucket + kBucket;
  const uint64_t lag = [&] {
    const Snapshot probe = Status();
    const uint64_t now = NowNs();
    return now > probe.at ? now - probe.at : 0;  // how far behind now the figures run
  }();
  SleepUntil(first + lag);
  const Snapshot a = Status();
  SleepUntil(first + 1'000'000'000 + lag);
  const Snapshot b = Status();
  std::vector<int> pids;
  for (auto& t : tenants_) pids.push_back(t->pid());
  // The truth: what simgpu booked for each tenant's process, read once every kernel that ran in
  // the window has been booked (they are booked when queued, so a few ms later is enough).
  SleepUntil(NowNs() + 100'000'000);
  ASSERT_EQ(setenv("TESSERA_SIM_STATE", state_.c_str(), 1), 0);
  auto sim = tessera::sim::SimState::Attach();
  ASSERT_TRUE(sim.ok()) << sim.error();
  const std::unique_ptr<tessera::sim::SimState> view(*sim);  // this test's view, freed with it
  for (size_t i = 0; i < scenario.tenants.size(); ++i) {
    const std::string& id = scenario.tenants[i].container;
    ASSERT_TRUE(b.achieved_percent.count(id)) << id << " is not in STATUS";
    // achieved_percent: the second its snapshot runs to, against what the device ran in it.
    const uint64_t from = a.at, to = b.at;
    const Range ran = DeviceTime(*sim, pids[i], to - 1'000'000'000, to);
    EXPECT_TRUE(Within(b.achieved_percent.at(id), ran, 1.0, 1.0))
        << scenario.name << ": " << id << " achieved_percent vs the device's time in its second";
    // gpu_seconds: its increase between the snapshots, against the device's time between them.
    const double seconds = static_cast<double>(to - from) / 1e9;
    const Range device = DeviceTime(*sim, pids[i], from, to);
    const double counted_s = b.gpu_seconds.at(id) - a.gpu_seconds.at(id);
    EXPECT_TRUE(Within(100.0 * counted_s / seconds, device, seconds, 1.0))
        << scenario.name << ": " << id << " gpu_seconds' increase vs the device's time";
    std::printf(
        "[ %-9s ] %-8s achieved %5.1f%% ran %.1f-%.1f%%; gpu_seconds +%.3f s, device %.3f-%.3f s "
        "over %.3f s\n",
        scenario.name.c_str(), id.c_str(), b.achieved_percent.at(id), ran.least / 1e7,
        ran.most / 1e7, counted_s, device.least / 1e9, device.most / 1e9, seconds);
  }
  for (auto& t : tenants_) EXPECT_EQ(t->Wait(30s), 0);
}

std::vector<Scenario> Scenarios() {
  const std::vector<std::string> thirty = {"TESSERA_CORE_LIMIT=30"};
  const std::vector<std::string> seventy = {"TESSERA_CORE_LIMIT=70"};
  const std::vector<std::string> high = {"TESSERA_HIGH_PRIO=1"};
  return {
      // Fixed percentages, back-to-back kernels on a stream.
      {"fixed",
       {"--policy", "3"},
       {{"a30", "stream", 1000, thirty}, {"b70", "stream", 1000, seventy}}},
      // Preemptive, two tenants that synchronise after every kernel (the token changes hands at
      // their tails, each next kernel queued behind the last).
      {"sync", {"--policy", "1"}, {{"s1", "sync", 1000, {}}, {"s4", "sync", 4000, {}}}},
      // Weighted 1:2, graphs of four kernels against single launches.
      {"weighted",
       {"--policy", "2"},
       {{"w1", "graph", 1000, {"TESSERA_WEIGHT=1"}}, {"w2", "stream", 1000, {"TESSERA_WEIGHT=2"}}}},
      // Fair slots, two of four used: the idle slots stay idle.
      {"fair",
       {"--policy", "0", "--max-inst", "4"},
       {{"f1", "stream", 1000, {}}, {"f2", "legacy", 1000, {}}}},
      // Weak: tenants overlap by design.
      {"weak", {"--policy", "4"}, {{"k1", "stream", 1000, {}}, {"k2", "stream", 1000, {}}}},
      // The high-priority lane: a 0.5 ms request every 20 ms beside two saturating tenants, whose
      // kernels it queues behind (it must not be charged for them, nor they for it).
      {"lane",
       {"--policy", "1"},
       {{"hp", "sporadic", 500, high}, {"be1", "stream", 1000, {}}, {"be2", "sync", 4000, {}}}},
      // `tessera demo`'s tenants: 1 ms and 4 ms kernels, each synchronised, at 30 and 70 %, and a
      // high-priority 0.5 ms request every 20 ms; the per-second line it prints is this figure.
      {"demo",
       {"--policy", "3"},
       {{"service", "sync", 1000, thirty},
        {"trainer", "sync", 4000, seventy},
        {"alerts", "sporadic", 500, {"TESSERA_HIGH_PRIO=1", "TESSERA_CORE_LIMIT=100"}}}},
      // The demo's tenants on a host that runs every thread 1 ms late after each synchronisation
      // (simgpu's TESSERA_SIM_SYNC_DELAY): a gate's calibration, the host time its first event
      // is seen complete, is then 1 ms late, and so would be every end measured from it.
      {"late",
       {"--policy", "3"},
       {{"service", "sync", 1000, {"TESSERA_CORE_LIMIT=30", "TESSERA_SIM_SYNC_DELAY=1ms"}},
        {"trainer", "sync", 4000, {"TESSERA_CORE_LIMIT=70", "TESSERA_SIM_SYNC_DELAY=1ms"}},
        {"alerts",
         "sporadic",
         500,
         {"TESSERA_HIGH_PRIO=1", "TESSERA_CORE_LIMIT=100", "TESSERA_SIM_SYNC_DELAY=1ms"}}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Policies, GpuTimeTest, ::testing::ValuesIn(Scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

}  // namespace
