// MemoryLedger and TenantLedger: admission never overshoots under concurrency, releases saturate, a
// reclaimed process gives back exactly what it held, a reopened ledger keeps its accounting, and a
// tenant's mappings reach only what it was given.
#include "ledger/memory_ledger.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "ledger/tenant_ledger.h"

namespace tessera::ledger {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

class MemoryLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-ledger-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    MemoryLedger::Remove(name_);
  }
  void TearDown() override { MemoryLedger::Remove(name_); }
  // The node segment as a process with the daemon's rights maps it by name (no tenant is given
  // it); unmap with munmap(l, sizeof(LedgerLayout)).
  LedgerLayout* NodeSegment() {
    const int fd = shm_open(name_.c_str(), O_RDWR, 0);
    if (fd < 0) return nullptr;
    void* mem = mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return mem == MAP_FAILED ? nullptr : static_cast<LedgerLayout*>(mem);
  }
  std::vector<DeviceInfo> Devices() {
    return {{"GPU-a", "SimA", 8 * kGiB}, {"GPU-b", "SimB", 8 * kGiB}};
  }
  std::string name_;
};

// A process of container `c` as the shim maps it: the descriptors the daemon opens for it, mapped
// as a TenantLedger (the descriptors are closed again).
Result<TenantLedger> MapTenant(const MemoryLedger& daemon, uint32_t c) {
  auto fds = daemon.OpenForTenant(c);
  if (!fds.ok()) return fds.status();
  auto mapped = TenantLedger::MapFds(*fds, c);
  for (int fd : {fds->node, fds->container, fds->exchange}) close(fd);
  return mapped;
}

TEST_F(MemoryLedgerTest, ConcurrentReservationsNeverExceedTheLimit) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(ledger.ok()) << ledger.error();
  auto c = ledger->UpsertContainer("tenant", {2 * kGiB, kUnlimited});
  ASSERT_TRUE(c.ok());
  std::vector<uint32_t> procs;
  for (int i = 0; i < 8; ++i) procs.push_back(*ledger->AddProcess(*c, 1000 + i));
  auto tenant = MapTenant(*ledger, *c);
  ASSERT_TRUE(tenant.ok()) << tenant.error();
  std::atomic<uint64_t> granted{0};
  std::atomic<uint64_t> peak{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        if (tenant->Reserve(procs[t], 0, 32 * kMiB)) {
          granted.fetch_add(32 * kMiB);
          uint64_t used = ledger->Used(*c, 0);
          uint64_t seen = peak.load();
          while (used > seen && !peak.compare_exchange_weak(seen, used)) {
          }
          if (round % 3 == 0) {
            tenant->Release(procs[t], 0, 32 * kMiB);
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
  for (uint32_t p : procs) sum += ledger->process(p).used[0].load();
  EXPECT_EQ(sum, ledger->Used(*c, 0)) << "process shares add up to the container's use";
}

TEST_F(MemoryLedgerTest, ReclaimGivesBackExactlyWhatTheProcessHeld) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(ledger.ok());
  const uint32_t c = *ledger->UpsertContainer("tenant", {2 * kGiB, 1 * kGiB});
  const uint32_t a = *ledger->AddProcess(c, 1);
  const uint32_t b = *ledger->AddProcess(c, 2);
  auto tenant = MapTenant(*ledger, c);
  ASSERT_TRUE(tenant.ok()) << tenant.error();
  ASSERT_TRUE(tenant->Reserve(a, 0, 1536 * kMiB));
  ASSERT_TRUE(tenant->Reserve(a, 1, 512 * kMiB));
  ASSERT_TRUE(tenant->Reserve(b, 0, 256 * kMiB));
  EXPECT_FALSE(tenant->Reserve(b, 0, 512 * kMiB)) << "1.75 GiB + 0.5 GiB > 2 GiB";
  const uint32_t gen = ledger->layout()->processes[a].generation.load();
  ledger->ReclaimProcess(a);
  ledger->ReclaimProcess(a);  // idempotent
  EXPECT_EQ(ledger->Used(c, 0), 256 * kMiB);
  EXPECT_EQ(ledger->Used(c, 1), 0u);
  EXPECT_EQ(ledger->layout()->processes[a].generation.load(), gen + 1);
  EXPECT_EQ(ledger->layout()->containers[c].process_count.load(), 1u);
  EXPECT_TRUE(tenant->Reserve(b, 0, 1792 * kMiB)) << "the freed 1.5 GiB is usable at once";
  EXPECT_FALSE(ledger->RemoveContainer(c).ok()) << "a container with processes stays";
}

TEST_F(MemoryLedgerTest, ReleaseSaturatesInsteadOfWrapping) {
  auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t c = *ledger->UpsertContainer("tenant", {kUnlimited, kUnlimited});
  const uint32_t p = *ledger->AddProcess(c, 1);
  auto tenant = MapTenant(*ledger, c);
  ASSERT_TRUE(tenant.ok()) << tenant.error();
  ASSERT_TRUE(tenant->Reserve(p, 0, kMiB));
  tenant->Release(p, 0, 5 * kMiB);
  EXPECT_EQ(ledger->Used(c, 0), 0u);
  EXPECT_EQ(ledger->process(p).used[0].load(), 0u);
  EXPECT_TRUE(tenant->Reserve(p, 0, ~uint64_t{0} - 1)) << "unlimited means unlimited";
  EXPECT_FALSE(tenant->Reserve(p, 0, 2)) << "but the counter never wraps";
}

TEST_F(MemoryLedgerTest, ReopenedLedgerKeepsAccountingAndChecksDevices) {
  {
    auto ledger = MemoryLedger::CreateOrOpen(name_, Devices());
    const uint32_t c = *ledger->UpsertContainer("kept", {2 * kGiB, kUnlimited});
    const uint32_t p = *ledger->AddProcess(c, 7);
    ASSERT_TRUE(MapTenant(*ledger, c)->Reserve(p, 0, 100 * kMiB));
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

// Shared memory is untrusted input (issue 17): a tenant can no longer write the node view (see the
// next test), but what lands in daemon-owned fields by other means (a kernel without the seal, a
// crash mid-write, a tool run as root) is never read back by the daemon, and Repair() puts it back.
TEST_F(MemoryLedgerTest, RepairRestoresWhatATenantRewroteAndTheBookIgnoresIt) {
  auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t a = *daemon->UpsertContainer("alpha", {kGiB, kGiB});
  const uint32_t b = *daemon->UpsertContainer("beta", {2 * kGiB, 2 * kGiB});
  const uint32_t pa = *daemon->AddProcess(a, 11);
  ASSERT_TRUE(MapTenant(*daemon, a)->Reserve(pa, 0, 64 * kMiB));
  LedgerLayout* l = daemon->layout();
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
  // The node segment (what a restarted daemon reads) is repaired the same way.
  LedgerLayout* kept = NodeSegment();
  ASSERT_NE(kept, nullptr);
  kept->containers[a].limit[1].store(1);
  const std::vector<std::string> kept_lines = daemon->Repair();
  ASSERT_EQ(kept_lines.size(), 1u) << ::testing::PrintToString(kept_lines);
  EXPECT_EQ(kept_lines[0].rfind("ledger (node segment): container slot " + std::to_string(a), 0),
            0u)
      << kept_lines[0];
  EXPECT_EQ(kept->containers[a].limit[1].load(), kGiB);
  munmap(kept, sizeof(LedgerLayout));

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
    ASSERT_TRUE(MapTenant(*daemon, a)->Reserve(pa, 0, 100 * kMiB));
    auto in_b = MapTenant(*daemon, b);
    ASSERT_TRUE(in_b.ok()) << in_b.error();
    ASSERT_TRUE(in_b->Reserve(pb, 0, 200 * kMiB));
    ASSERT_TRUE(in_b->Reserve(pc, 0, 300 * kMiB));
    LedgerLayout* l = NodeSegment();  // what a crash mid-write (or a root tool) could leave
    ASSERT_NE(l, nullptr);
    l->processes[pb].container.store(0xdeadbeef);  // out of range: dropped
    std::memset(l->containers[b].id, '/', 8);      // not an id, but pc still holds it
    l->containers[a].core_percent.store(0);        // out of range: set to 100
    ContainerSlot& junk = l->containers[kMaxContainers - 1];
    junk.state.store(kLive);  // a live slot nobody made, with no id and no process
    munmap(l, sizeof(LedgerLayout));
  }
  auto again = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(again.ok()) << again.error();
  const std::vector<std::string>& report = again->open_report();
  std::string all;
  for (const std::string& line : report) all += line + "\n";
  EXPECT_NE(all.find("process slot " + std::to_string(pb) +
                     ": container index 0xdeadbeef is out "
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

TEST_F(MemoryLedgerTest, ProcessesMapTheDaemonsDescriptors) {
  auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t c = *daemon->UpsertContainer("shared", {kGiB, kGiB});
  auto fds = daemon->OpenForTenant(c);
  ASSERT_TRUE(fds.ok()) << fds.error();
  auto process = TenantLedger::MapFds(*fds, c);
  ASSERT_TRUE(process.ok()) << process.error();
  EXPECT_EQ(process->container(), c);
  const uint32_t p = *daemon->AddProcess(c, 9);
  ASSERT_TRUE(process->Reserve(p, 1, 64 * kMiB));
  EXPECT_EQ(daemon->Used(c, 1), 64 * kMiB) << "one segment, two mappings";
  EXPECT_EQ(daemon->process(p).used[1].load(), 64 * kMiB);
  EXPECT_EQ(process->Limit(1), kGiB);
  TenantDescriptors none;
  EXPECT_FALSE(TenantLedger::MapFds(none, c).ok());
  auto wrong = TenantLedger::MapFds(*fds, c + 1);
  ASSERT_FALSE(wrong.ok()) << "a segment is checked against the container it is given for";
  EXPECT_NE(wrong.error().find("not container slot"), std::string::npos) << wrong.error();
  for (int fd : {fds->node, fds->container, fds->exchange}) close(fd);
}

// Least authority (issue 17 item 2): what a process is given maps the node view (limits,
// settings, token words) read-only by every route, and no other container's counters at all.
TEST_F(MemoryLedgerTest, ATenantCannotWriteTheNodeViewNorReachAnotherContainer) {
  auto daemon = MemoryLedger::CreateOrOpen(name_, Devices());
  const uint32_t mine = *daemon->UpsertContainer("mine", {kGiB, kGiB});
  const uint32_t theirs = *daemon->UpsertContainer("theirs", {kGiB, kGiB});
  const uint32_t pt = *daemon->AddProcess(theirs, 8);
  ASSERT_TRUE(MapTenant(*daemon, theirs)->Reserve(pt, 0, 100 * kMiB));
  auto fds = daemon->OpenForTenant(mine);
  ASSERT_TRUE(fds.ok()) << fds.error();
  // The node descriptor cannot be mapped writable, nor its read-only mapping made writable.
  errno = 0;
  EXPECT_EQ(mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fds->node, 0),
            MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  // Nor the same file reopened for writing through /proc/self/fd, which root may do whatever the
  // descriptor's mode: the view is sealed, so neither a writable mapping nor write(2) is allowed.
  const int reopened =
      open(("/proc/self/fd/" + std::to_string(fds->node)).c_str(), O_RDWR | O_CLOEXEC);
  if (reopened >= 0) {  // root: the seal must hold
    errno = 0;
    EXPECT_EQ(mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0),
              MAP_FAILED);
    EXPECT_EQ(errno, EPERM);
    const uint64_t zero = 0;
    EXPECT_EQ(pwrite(reopened, &zero, sizeof(zero), 0), -1);
    close(reopened);
  } else {
    EXPECT_EQ(errno, EACCES);
  }
  auto tenant = TenantLedger::MapFds(*fds, mine);
  ASSERT_TRUE(tenant.ok()) << tenant.error();
  errno = 0;
  EXPECT_NE(
      mprotect(const_cast<LedgerLayout*>(tenant->layout()), kPageSize, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(errno, EACCES);
  // Nor written through /proc/self/mem, which ignores a private mapping's protection.
  const int mem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  ASSERT_GE(mem, 0);
  const uint64_t raised = kUnlimited;
  const auto at = reinterpret_cast<off_t>(&tenant->layout()->containers[mine].limit[0]);
  EXPECT_NE(pwrite(mem, &raised, sizeof(raised), at), static_cast<ssize_t>(sizeof(raised)));
  close(mem);
  EXPECT_EQ(tenant->Limit(0), kGiB);
  // Its writable segment is its own container's: scribbled over entirely, the other container's
  // usage and limits are what they were.
  std::memset(static_cast<void*>(&tenant->segment()), 0xff, sizeof(ContainerSegment));
  EXPECT_EQ(daemon->Used(theirs, 0), 100 * kMiB);
  EXPECT_EQ(daemon->Limit(theirs, 0), kGiB);
  EXPECT_EQ(daemon->process(pt).used[0].load(), 100 * kMiB);
  // A container slot taken again gets a new file: a process still mapping the old one writes
  // where nobody reads.
  daemon->ReclaimProcess(pt);
  ASSERT_TRUE(daemon->RemoveContainer(theirs).ok());
  auto old_fds = daemon->OpenForTenant(mine);
  ASSERT_TRUE(old_fds.ok());
  ASSERT_TRUE(daemon->RemoveContainer(mine).ok());
  const uint32_t reused = *daemon->UpsertContainer("next", {kGiB, kGiB});
  ASSERT_EQ(reused, mine) << "the lowest free slot is taken again";
  tenant->counters().used[0].store(12345);
  EXPECT_EQ(daemon->Used(reused, 0), 0u);
  for (int fd : {fds->node, fds->container, fds->exchange, old_fds->node, old_fds->container,
                 old_fds->exchange}) {
    close(fd);
  }
}

// A restarted daemon makes a new node view; a process that re-attaches maps it in place of the
// old one (the pointers into it stay valid) and reads the new daemon's words. Its counters stay in
// the same container segment, which the new daemon took over.
TEST_F(MemoryLedgerTest, ARestartedDaemonsViewIsMappedInPlace) {
  uint32_t c = 0, p = 0;
  TenantDescriptors fds;
  std::optional<TenantLedger> tenant;
  {
    auto first = MemoryLedger::CreateOrOpen(name_, Devices());
    c = *first->UpsertContainer("kept", {kGiB, kGiB});
    p = *first->AddProcess(c, 7);
    auto opened = first->OpenForTenant(c);
    ASSERT_TRUE(opened.ok()) << opened.error();
    fds = *opened;
    auto mapped = TenantLedger::MapFds(fds, c);
    ASSERT_TRUE(mapped.ok()) << mapped.error();
    tenant.emplace(std::move(*mapped));
  }  // the first daemon is gone
  const LedgerLayout* view = tenant->layout();
  ContainerSegment* own = &tenant->segment();
  ASSERT_TRUE(tenant->Reserve(p, 0, 100 * kMiB));

  auto second = MemoryLedger::CreateOrOpen(name_, Devices());
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_TRUE(second->open_report().empty()) << second->open_report().front();
  EXPECT_EQ(second->Used(c, 0), 100 * kMiB) << "the counters were kept";
  second->SetLimit(c, 0, 3 * kGiB);
  EXPECT_EQ(tenant->Limit(0), kGiB) << "the old view is no longer written";
  auto again = second->OpenForTenant(c);
  ASSERT_TRUE(again.ok()) << again.error();
  ASSERT_TRUE(tenant->Remap(*again, c).ok());
  EXPECT_EQ(tenant->layout(), view) << "mapped in place";
  EXPECT_EQ(&tenant->segment(), own) << "the same container segment stays";
  EXPECT_EQ(tenant->Limit(0), 3 * kGiB);
  EXPECT_EQ(view->daemon_epoch.load(), 2u);
  ASSERT_TRUE(tenant->Reserve(p, 0, 50 * kMiB));
  EXPECT_EQ(second->Used(c, 0), 150 * kMiB);
  for (int fd :
       {fds.node, fds.container, fds.exchange, again->node, again->container, again->exchange}) {
    close(fd);
  }
}

}  // namespace
}  // namespace tessera::ledger
