// MemoryLedger: admission never overshoots under concurrency, releases saturate, a reclaimed
// process gives back exactly what it held, a reopened ledger keeps its accounting.
#include "ledger/memory_ledger.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace tessera::ledger {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class MemoryLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-ledger-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    shm_unlink(name_.c_str());
  }
  void TearDown() override { shm_unlink(name_.c_str()); }
  std::vector<DeviceInfo> Devices() {
    return {{"GPU-a", "SimA", 8 * kGiB}, {"GPU-b", "SimB", 8 * kGiB}};
  }
  std::string name_;
};

TEST_F(MemoryLedgerTest, ConcurrentReservationsNeverExceedTheLimit) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(ledger.ok()) << ledger.error();
  auto c = ledger->UpsertContainer("tenant", {2 * kGiB, kUnlimited});
  ASSERT_TRUE(c.ok());
  std::vector<uint32_t> procs;
  for (int i = 0; i < 8; ++i) procs.push_back(*ledger->AddProcess(*c, 1000 + i));
  std::atomic<uint64_t> granted{0};
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        if (ledger->Reserve(*c, procs[t], 0, 32 * kMiB)) {
          granted.fetch_add(32 * kMiB);
          uint64_t used = ledger->Used(*c, 0);
          uint64_t seen = peak.load();
          while (used > seen && !peak.compare_exchange_weak(seen, used)) {
          }
          if (round % 3 == 0) {
            ledger->Release(*c, procs[t], 0, 32 * kMiB);
            granted.fetch_sub(32 * kMiB);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 2 * kGiB);
  EXPECT_EQ(ledger->Used(*c, 0), granted.load());
  EXPECT_EQ(ledger->Used(*c, 0), 2 * kGiB) << "the limit is reached exactly in 32 MiB steps";
  uint64_t sum = 0;
  for (uint32_t p : procs) sum += ledger->layout()->processes[p].used[0].load();
  EXPECT_EQ(sum, ledger->Used(*c, 0)) << "process shares add up to the container's use";
}

TEST_F(MemoryLedgerTest, ReclaimGivesBackExactlyWhatTheProcessHeld) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(ledger.ok());
  const uint32_t c = *ledger->UpsertContainer("tenant", {2 * kGiB, 1 * kGiB});
  const uint32_t a = *ledger->AddProcess(c, 1);
  const uint32_t b = *ledger->AddProcess(c, 2);
  ASSERT_TRUE(ledger->Reserve(c, a, 0, 1536 * kMiB));
  ASSERT_TRUE(ledger->Reserve(c, a, 1, 512 * kMiB));
  ASSERT_TRUE(ledger->Reserve(c, b, 0, 256 * kMiB));
  EXPECT_FALSE(ledger->Reserve(c, b, 0, 512 * kMiB)) << "1.75 GiB + 0.5 GiB > 2 GiB";
  const uint32_t gen = ledger->layout()->processes[a].generation.load();
  ledger->ReclaimProcess(a);
  ledger->ReclaimProcess(a);  // idempotent
  EXPECT_EQ(ledger->Used(c, 0), 256 * kMiB);
  EXPECT_EQ(ledger->Used(c, 1), 0u);
  EXPECT_EQ(ledger->layout()->processes[a].generation.load(), gen + 1);
  EXPECT_EQ(ledger->layout()->containers[c].process_count.load(), 1u);
  EXPECT_TRUE(ledger->Reserve(c, b, 0, 1792 * kMiB)) << "the freed 1.5 GiB is usable at once";
  EXPECT_FALSE(ledger->RemoveContainer(c).ok()) << "a container with processes stays";
}

TEST_F(MemoryLedgerTest, ReleaseSaturatesInsteadOfWrapping) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t c = *ledger->UpsertContainer("tenant", {kUnlimited, kUnlimited});
  const uint32_t p = *ledger->AddProcess(c, 1);
  ASSERT_TRUE(ledger->Reserve(c, p, 0, kMiB));
  ledger->Release(c, p, 0, 5 * kMiB);
  EXPECT_EQ(ledger->Used(c, 0), 0u);
  EXPECT_EQ(ledger->layout()->processes[p].used[0].load(), 0u);
  EXPECT_TRUE(ledger->Reserve(c, p, 0, ~uint64_t{0} - 1)) << "unlimited means unlimited";
  EXPECT_FALSE(ledger->Reserve(c, p, 0, 2)) << "but the counter never wraps";
}

TEST_F(MemoryLedgerTest, ReopenedLedgerKeepsAccountingAndChecksDevices) {
  {
    auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
    const uint32_t c = *ledger->UpsertContainer("kept", {2 * kGiB, kUnlimited});
    const uint32_t p = *ledger->AddProcess(c, 7);
    ASSERT_TRUE(ledger->Reserve(c, p, 0, 100 * kMiB));
  }
  auto again = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(again.ok()) << again.error();
  const int c = again->FindContainer("kept");
  ASSERT_GE(c, 0);
  EXPECT_EQ(again->Used(c, 0), 100 * kMiB);
  EXPECT_EQ(again->layout()->daemon_epoch.load(), 2u);
  auto fewer = MemoryLedger::CreateOrOpen(name_, {Devices()[0]});
  ASSERT_FALSE(fewer.ok());
  EXPECT_NE(fewer.error().find("created for 2 devices"), std::string::npos) << fewer.error();
}

// Shared memory is untrusted input (issue 17): what a tenant writes into daemon-owned fields is
// never read back by the daemon, and Repair() puts it back.
TEST_F(MemoryLedgerTest, RepairRestoresWhatATenantRewroteAndTheBookIgnoresIt) {
  auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t a = *daemon->UpsertContainer("alpha", {kGiB, kGiB});
  const uint32_t b = *daemon->UpsertContainer("beta", {2 * kGiB, 2 * kGiB});
  const uint32_t pa = *daemon->AddProcess(a, 11);
  ASSERT_TRUE(daemon->Reserve(a, pa, 0, 64 * kMiB));
  auto tenant = MemoryLedger::MapFd(daemon->fd());  // the tenant's own writable mapping
  LedgerLayout* l = tenant->layout();
  l->processes[pa].container.store(0x7fffffff);
  l->processes[pa].host_pid.store(1);
  l->containers[a].limit[0].store(kUnlimited);
  std::memset(l->containers[b].id, 'z', sizeof(l->containers[b].id));
  l->containers[b].weight.store(9999);
  l->device_count.store(16);

  // The daemon's view is untouched.
  EXPECT_EQ(daemon->book().processes[pa].container.load(), a);
  EXPECT_EQ(daemon->book().processes[pa].host_pid.load(), 11);
  EXPECT_EQ(daemon->book().containers[a].limit[0].load(), kGiB);
  EXPECT_EQ(daemon->ContainerId(b), "beta");
  EXPECT_EQ(daemon->device_count(), 2);
  EXPECT_EQ(daemon->FindContainer("beta"), static_cast<int>(b));

  const std::vector<std::string> lines = daemon->Repair();
  ASSERT_EQ(lines.size(), 4u) << ::testing::PrintToString(lines);
  EXPECT_NE(lines[0].find("process slot " + std::to_string(pa)), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("container 2147483647"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("(alpha)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("(beta)"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("weight 9999"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("device table"), std::string::npos) << lines[3];
  EXPECT_EQ(l->processes[pa].container.load(), a);
  EXPECT_EQ(l->containers[a].limit[0].load(), kGiB);
  EXPECT_STREQ(l->containers[b].id, "beta");
  EXPECT_EQ(l->device_count.load(), 2u);
  EXPECT_TRUE(daemon->Repair().empty()) << "a repaired segment agrees with the book";

  // A rewritten container index cannot misdirect the reclaim: the bytes leave alpha.
  l->processes[pa].container.store(b);
  daemon->ReclaimProcess(pa);
  EXPECT_EQ(daemon->Used(a, 0), 0u);
  EXPECT_EQ(daemon->Used(b, 0), 0u);
}

TEST_F(MemoryLedgerTest, AReopenedSegmentIsValidatedSlotBySlot) {
  uint32_t a, b, pa, pb, pc;
  {
    auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
    a = *daemon->UpsertContainer("alpha", {kGiB, kGiB});
    b = *daemon->UpsertContainer("beta", {kGiB, kGiB});
    pa = *daemon->AddProcess(a, 11);
    pb = *daemon->AddProcess(b, 12);
    pc = *daemon->AddProcess(b, 13);
    ASSERT_TRUE(daemon->Reserve(a, pa, 0, 100 * kMiB));
    ASSERT_TRUE(daemon->Reserve(b, pb, 0, 200 * kMiB));
    ASSERT_TRUE(daemon->Reserve(b, pc, 0, 300 * kMiB));
    LedgerLayout* l = daemon->layout();  // what tenants wrote while no daemon ran
    l->processes[pb].container.store(0xdeadbeef);  // out of range: dropped
    std::memset(l->containers[b].id, '/', 8);      // not an id, but pc still holds it
    l->containers[a].core_percent.store(0);        // out of range: set to 100
    ContainerSlot& junk = l->containers[kMaxContainers - 1];
    junk.state.store(kLive);  // a live slot nobody made, with no id and no process
  }
  auto again = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(again.ok()) << again.error();
  const std::vector<std::string>& report = again->open_report();
  std::string all;
  for (const std::string& line : report) all += line + "\n";
  EXPECT_NE(all.find("process slot " + std::to_string(pb) + ": container index 0xdeadbeef is out "
                     "of range; dropped"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("keep it as recovered-" + std::to_string(b)), std::string::npos) << all;
  EXPECT_NE(all.find("core_percent 0 is outside 1-100; set to 100"), std::string::npos) << all;
  EXPECT_NE(all.find("container slot 255: id \"\" is not a container id and no process holds it"),
            std::string::npos)
      << all;
  // What remains true: alpha untouched; beta rebuilt from its one valid process.
  EXPECT_EQ(again->Used(a, 0), 100 * kMiB);
  EXPECT_EQ(again->Used(b, 0), 300 * kMiB);
  EXPECT_EQ(again->ContainerId(b), "recovered-" + std::to_string(b));
  EXPECT_EQ(again->book().containers[b].process_count.load(), 1u);
  EXPECT_EQ(again->book().processes[pb].state.load(), kFree);
  EXPECT_EQ(again->book().containers[kMaxContainers - 1].state.load(), kFree);
  EXPECT_EQ(again->book().containers[a].core_percent.load(), 100u);
  EXPECT_TRUE(again->Repair().empty()) << "the reopened segment is published from the book";
  auto clean = MemoryLedger::CreateOrOpen(name_, Devices());
  EXPECT_TRUE(clean->open_report().empty()) << clean->open_report().front();
}

TEST_F(MemoryLedgerTest, ProcessesMapTheDaemonsDescriptor) {
  auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t c = *daemon->UpsertContainer("shared", {kGiB, kGiB});
  auto process = MemoryLedger::MapFd(daemon->fd());
  ASSERT_TRUE(process.ok()) << process.error();
  const uint32_t p = *daemon->AddProcess(c, 9);
  ASSERT_TRUE(process->Reserve(c, p, 1, 64 * kMiB));
  EXPECT_EQ(daemon->Used(c, 1), 64 * kMiB) << "one segment, two mappings";
  EXPECT_FALSE(MemoryLedger::MapFd(-1).ok());
}

}  // namespace
}  // namespace tessera::ledger
