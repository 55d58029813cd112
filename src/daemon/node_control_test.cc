// DaemonNodeControl over a real ledger segment, registry and (not started) ComputeService: what
// the snapshot shows, and the invariants each setter re-checks on its own (the tree's checks are
// control_tree_test's). Also the registry's reserved ids and default limit, and
// PeerIsAdministrator.
#include "daemon/node_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/ctl_door.h"

namespace tessera::daemon {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

class NodeControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-node-control-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ledger::MemoryLedger::Remove(name_);
    auto ledger = ledger::MemoryLedger::CreateOrOpen(
        name_, {{"GPU-aaaaaaaa-0000-4000-8000-000000000000", "A", 8 * kGiB},
                {"GPU-bbbbbbbb-0000-4000-8000-000000000000", "B", 4 * kGiB}});
    ASSERT_TRUE(ledger.ok()) << ledger.error();
    layout_ = ledger->layout();
    auto compute = ComputeService::Create(*ledger, ComputeOptions{});
    ASSERT_TRUE(compute.ok());
    compute_ = std::move(*compute);
    registry_ =
        std::make_unique<Registry>(std::move(*ledger), RegistryOptions{true, 0}, compute_.get());
    node_ = std::make_unique<DaemonNodeControl>(registry_.get(), compute_.get(), "tessera test");
  }
  void TearDown() override {
    node_.reset();
    registry_.reset();
    compute_.reset();
    ledger::MemoryLedger::Remove(name_);
  }
  Result<protocol::Message> Container(const std::string& line) {
    return registry_->SetContainer(*protocol::ParseMessage(line));
  }
  const ctl::ContainerState* Find(const ctl::NodeSnapshot& s, int gpu, const std::string& id) {
    for (const ctl::ContainerState& c : s.gpus.at(static_cast<size_t>(gpu)).containers) {
      if (c.id == id) return &c;
    }
    return nullptr;
  }

  std::string name_;
  ledger::LedgerLayout* layout_ = nullptr;
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<DaemonNodeControl> node_;
};

TEST_F(NodeControlTest, SnapshotShowsGpusContainersAndProcesses) {
  ASSERT_TRUE(Container("CONTAINER id=web mem=1073741824,none weight=3").ok());
  uint32_t p = 0;
  ASSERT_TRUE(registry_
                  ->Hello(*protocol::ParseMessage("HELLO version=1 container=web local_pid=7"),
                          getpid(), &p)
                  .ok());
  const int c = registry_->ledger().FindContainer("web");
  registry_->ledger().counters(c).used[0].store(300 << 20);
  registry_->ledger().process(p).used[0].store(300 << 20);
  const ctl::NodeSnapshot s = node_->Snapshot();
  EXPECT_EQ(s.version, "tessera test");
  EXPECT_EQ(s.default_memsize, std::nullopt);
  ASSERT_EQ(s.gpus.size(), 2u);
  EXPECT_EQ(s.gpus[0].max_inst, 16);
  EXPECT_EQ(s.gpus[0].memory_free, Bytes(8 * kGiB - (300 << 20)));
  EXPECT_EQ(s.gpus[1].memory_free, Bytes(4 * kGiB));
  const ctl::ContainerState* web0 = Find(s, 0, "web");
  const ctl::ContainerState* web1 = Find(s, 1, "web");
  ASSERT_NE(web0, nullptr);
  ASSERT_NE(web1, nullptr);
  EXPECT_EQ(web0->weight, 3);
  EXPECT_EQ(web0->memsize, Bytes(kGiB));
  EXPECT_EQ(web1->memsize, std::nullopt);  // none: unlimited
  EXPECT_EQ(web0->used, Bytes(300 << 20));
  ASSERT_EQ(web0->processes.size(), 1u);
  EXPECT_EQ(web0->processes[0].pid, 7);  // the pid its own namespace gives it
  EXPECT_EQ(web0->processes[0].used, Bytes(300 << 20));
  EXPECT_EQ(web1->processes.at(0).used, Bytes(0));
}

TEST_F(NodeControlTest, MemsizeBelowUsageNeedsForce) {
  ASSERT_TRUE(Container("CONTAINER id=web mem=1073741824").ok());
  const int c = registry_->ledger().FindContainer("web");
  registry_->ledger().counters(c).used[1].store(512 << 20);
  Status refused = node_->SetMemsize(1, "web", Bytes(256 << 20), false);
  EXPECT_THAT(refused.message(), HasSubstr("1/web/memsize=\"268435456\": below what"));
  EXPECT_EQ(layout_->containers[c].limit[1].load(), kGiB);
  EXPECT_TRUE(node_->SetMemsize(1, "web", Bytes(256 << 20), true).ok());
  EXPECT_EQ(layout_->containers[c].limit[1].load(), 256u << 20);
  EXPECT_EQ(layout_->containers[c].limit[0].load(), kGiB);  // other GPUs untouched
  EXPECT_THAT(node_->SetMemsize(0, "gone", Bytes(kGiB), false).message(),
              HasSubstr("no longer exists"));
  EXPECT_THAT(node_->SetMemsize(2, "web", Bytes(kGiB), false).message(),
              HasSubstr("GPU 2 does not exist"));
}

TEST_F(NodeControlTest, AWeightIsTheContainersOnEveryGpu) {
  ASSERT_TRUE(Container("CONTAINER id=web weight=2").ok());
  ASSERT_TRUE(node_->SetMaxInst(1, 4).ok());
  EXPECT_TRUE(node_->SetWeight(0, "web", 4).ok());
  EXPECT_EQ(Find(node_->Snapshot(), 1, "web")->weight, 4);
  Status refused = node_->SetWeight(0, "web", 5);
  EXPECT_THAT(refused.message(), HasSubstr("GPU 1's max_inst=4"));
  EXPECT_EQ(Find(node_->Snapshot(), 0, "web")->weight, 4);
  // max_inst may not go below the sum of the weights.
  EXPECT_THAT(node_->SetMaxInst(0, 3).message(), HasSubstr("below the sum"));
  EXPECT_EQ(compute_->Config(0).max_inst, 16);
  EXPECT_TRUE(node_->SetPolicy(0, ArbiterPolicy::kWeightedPreemptive).ok());
  EXPECT_EQ(compute_->Config(0).policy, ArbiterPolicy::kWeightedPreemptive);
  EXPECT_EQ(compute_->Config(1).policy, ArbiterPolicy::kFair);
  EXPECT_TRUE(node_->SetPrioRatio(1, *Percent::FromInt(80)).ok());
  EXPECT_EQ(compute_->Config(1).prio_ratio.value(), 80);
  EXPECT_TRUE(node_->SetHighPriority(1, "web", true).ok());
  EXPECT_TRUE(Find(node_->Snapshot(), 0, "web")->high_priority);
}

TEST_F(NodeControlTest, RegistryRefusesReservedIdsAndAppliesTheDefaultLimit) {
  for (const char* id : {"policy", "max_inst", "free_weight", "prio_ratio"}) {
    EXPECT_THAT(Container(std::string("CONTAINER id=") + id).error(), HasSubstr("reserved"));
    uint32_t p = 0;
    EXPECT_THAT(registry_
                    ->Hello(*protocol::ParseMessage(std::string("HELLO version=1 container=") + id),
                            getpid(), &p)
                    .error(),
                HasSubstr("reserved"));
  }
  EXPECT_FALSE(node_->SetDefaultMemsize(Bytes(0)).ok());
  ASSERT_TRUE(node_->SetDefaultMemsize(Bytes(3 * kGiB)).ok());
  EXPECT_EQ(node_->Snapshot().default_memsize, Bytes(3 * kGiB));
  uint32_t p = 0;
  ASSERT_TRUE(
      registry_->Hello(*protocol::ParseMessage("HELLO version=1 container=plain"), getpid(), &p)
          .ok());
  ASSERT_TRUE(registry_
                  ->Hello(*protocol::ParseMessage("HELLO version=1 container=own mem=1073741824"),
                          getpid(), &p)
                  .ok());
  const ctl::NodeSnapshot s = node_->Snapshot();
  EXPECT_EQ(Find(s, 1, "plain")->memsize, Bytes(3 * kGiB));  // declared none: the default
  EXPECT_EQ(Find(s, 1, "own")->memsize, Bytes(kGiB));        // declared its own
}

TEST(PeerIsAdministratorTest, RootTheDaemonsUserOrTheAdminGroup) {
  const Administrators root_daemon{0, std::nullopt};
  EXPECT_TRUE(PeerIsAdministrator({getpid(), 0, 0}, root_daemon));
  EXPECT_FALSE(PeerIsAdministrator({getpid(), 1000, 1000}, root_daemon));
  EXPECT_TRUE(PeerIsAdministrator({getpid(), 1000, 4242}, {0, gid_t{4242}}));
  EXPECT_FALSE(PeerIsAdministrator({getpid(), 1000, 4242}, {0, gid_t{4243}}));
  // A daemon a user runs for themselves is theirs to administer, and nobody else's.
  EXPECT_TRUE(PeerIsAdministrator({getpid(), 1000, 1000}, {1000, std::nullopt}));
  EXPECT_FALSE(PeerIsAdministrator({getpid(), 1001, 1001}, {1000, std::nullopt}));
  EXPECT_NE(WhoMayAdminister({getpid(), 1001, 1001}, {1000, std::nullopt}).find("uid 1001"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::daemon
