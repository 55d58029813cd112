// MemoryLedger: admission never overshoots under concurrency, releases saturate, a reclaimed
// process gives back exactly what it held, a reopened ledger keeps its accounting.
#include "ledger/memory_ledger.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
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
