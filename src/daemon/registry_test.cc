// Registry: HELLO and CONTAINER requests against a real ledger segment, including every refusal.
#include "daemon/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace tessera::daemon {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "/tessera-registry-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ledger::MemoryLedger::Remove(name_);
  }
  void TearDown() override { ledger::MemoryLedger::Remove(name_); }
  Registry Make(bool self_declared = true) {
    auto ledger = ledger::MemoryLedger::CreateOrOpen(
        name_, {{"GPU-aaaaaaaa-0000-4000-8000-000000000000", "A", 8 * kGiB},
                {"GPU-bbbbbbbb-0000-4000-8000-000000000000", "B", 4 * kGiB}});
    EXPECT_TRUE(ledger.ok());
    return Registry(std::move(*ledger), {self_declared, 0});
  }
  static protocol::Message Parse(const std::string& line) { return *protocol::ParseMessage(line); }
  std::string name_;
};

// The "attached" flag of every process in the registry's STATUS snapshot, in slot order.
std::vector<bool> Attached(const Registry& registry) {
  std::vector<bool> out;
  const nlohmann::json status = nlohmann::json::parse(registry.StatusJson());
  for (const auto& c : status.at("containers")) {
    for (const auto& p : c.at("processes")) out.push_back(p.at("attached").get<bool>());
  }
  return out;
}

TEST_F(RegistryTest, SelfDeclaredContainerGetsItsLimitsOnItsVisibleDevices) {
  Registry r = Make();
  uint32_t slot = 0;
  auto reply = r.Hello(Parse("HELLO version=1 container=web mem=1073741824 visible=1"), 42, &slot);
  ASSERT_TRUE(reply.ok()) << reply.error();
  EXPECT_EQ(reply->Get("visible"), "1");
  const int c = r.ledger().FindContainer("web");
  ASSERT_GE(c, 0);
  EXPECT_EQ(r.ledger().Limit(c, 1), kGiB) << "the first visible device is the node's device 1";
  EXPECT_EQ(r.ledger().Limit(c, 0), ledger::kUnlimited);
  EXPECT_EQ(r.ledger().layout()->processes[slot].host_pid.load(), 42);
  EXPECT_EQ(r.ledger().layout()->processes[slot].local_pid.load(), 42) << "defaults to host pid";
  r.Disconnected(slot, static_cast<uint32_t>(std::stoul(reply->Get("generation"))));
  EXPECT_EQ(r.ledger().layout()->processes[slot].state.load(), ledger::kFree);
}

// A process that died without its close being seen yet is reclaimed by the sweep, and its slot
// can go to a newcomer before the close arrives: that late close must not take the newcomer's.
TEST_F(RegistryTest, ALateCloseDoesNotReclaimTheSlotsNextOwner) {
  Registry r = Make();
  uint32_t slot = 0;
  const pid_t gone = 0x3ffffff0;  // no such process
  auto first = r.Hello(Parse("HELLO version=1 container=web mem=1073741824"), gone, &slot);
  ASSERT_TRUE(first.ok()) << first.error();
  const auto generation = static_cast<uint32_t>(std::stoul(first->Get("generation")));
  ASSERT_TRUE(r.ledger().process(slot).used[0].load() == 0);
  EXPECT_EQ(r.ReclaimDeadProcesses(), 1);
  uint32_t next = 0;
  ASSERT_TRUE(r.Hello(Parse("HELLO version=1 container=web mem=1073741824"), getpid(), &next).ok());
  ASSERT_EQ(next, slot) << "the freed slot is the first free one";
  const int c = r.ledger().FindContainer("web");
  ASSERT_GE(c, 0);
  ASSERT_TRUE(r.ledger().layout()->processes[next].state.load() == ledger::kLive);
  r.Disconnected(slot, generation);  // the first process's close, late
  EXPECT_EQ(r.ledger().layout()->processes[next].state.load(), ledger::kLive);
  EXPECT_EQ(r.ledger().layout()->processes[next].host_pid.load(), getpid());
  EXPECT_EQ(r.ledger().FindContainer("web"), c) << "the container keeps its live process";
}

// A process of an earlier daemon re-attaches with its slot and generation; anyone else is refused
// and nothing changes.
TEST_F(RegistryTest, ResumeReattachesOnlyTheSlotsOwnProcess) {
  Registry r = Make();
  uint32_t slot = 0;
  auto first = r.Hello(Parse("HELLO version=1 container=web"), getpid(), &slot);
  ASSERT_TRUE(first.ok()) << first.error();
  const std::string generation = first->Get("generation");
  // The daemon restarts: a new registry over the same ledger segment knows no connection.
  Registry again = Make();
  EXPECT_EQ(Attached(again), std::vector<bool>{false});
  const std::string resume =
      "HELLO version=1 resume=" + std::to_string(slot) + " generation=" + generation;
  uint32_t got = 99;
  for (const auto& [line, pid] : std::vector<std::pair<std::string, pid_t>>{
           {resume, getpid() + 1},  // another process
           {"HELLO version=1 resume=" + std::to_string(slot) +
                " generation=" + std::to_string(std::stoul(generation) + 1),
            getpid()},  // a later occupant's generation
           {"HELLO version=1 resume=x generation=1", getpid()},
           {"HELLO version=1 resume=999999 generation=1", getpid()},
           {"HELLO version=9 resume=0 generation=1", getpid()}}) {
    auto refused = again.Hello(Parse(line), pid, &got);
    EXPECT_FALSE(refused.ok()) << line;
    EXPECT_EQ(got, 99u) << line;
  }
  auto ok = again.Hello(Parse(resume), getpid(), &got);
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(got, slot);
  EXPECT_EQ(ok->Get("process"), std::to_string(slot));
  EXPECT_EQ(ok->Get("generation"), generation);
  EXPECT_EQ(Attached(again), std::vector<bool>{true});
  EXPECT_FALSE(again.Hello(Parse(resume), getpid(), &got).ok()) << "attached twice";
  again.Disconnected(slot, static_cast<uint32_t>(std::stoul(generation)));
  EXPECT_NE(again.ledger().layout()->processes[slot].state.load(), ledger::kLive)
      << "the re-attached connection's close is the process's death again";
}

TEST_F(RegistryTest, RegisteredLimitsWinOverDeclaredOnes) {
  Registry r = Make();
  ASSERT_TRUE(r.SetContainer(Parse("CONTAINER id=web mem=2147483648")).ok());
  uint32_t slot = 0;
  ASSERT_TRUE(r.Hello(Parse("HELLO version=1 container=web mem=9999999999"), 7, &slot).ok());
  EXPECT_EQ(r.ledger().Limit(r.ledger().FindContainer("web"), 0), 2 * kGiB);
  EXPECT_EQ(r.ledger().Limit(r.ledger().FindContainer("web"), 1), 2 * kGiB) << "list repeats";
}

TEST_F(RegistryTest, ObserversHoldNoProcessSlot) {
  Registry r = Make();
  uint32_t slot = 0;
  auto reply = r.Hello(Parse("HELLO version=1 container=web observer=1"), 9, &slot);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->Get("process"), "none");
  EXPECT_EQ(slot, kNoProcess);
  r.Disconnected(slot, 0);  // must be harmless
}

TEST_F(RegistryTest, RefusalsNameTheirInput) {
  Registry strict = Make(/*self_declared=*/false);
  uint32_t slot = 0;
  auto refused = strict.Hello(Parse("HELLO version=1 container=stranger"), 1, &slot);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error(), HasSubstr("--allow-self-declared=false"));

  Registry r = Make();
  struct Case {
    const char* line;
    const char* says;
  } cases[] = {
      {"HELLO version=2", "this tesserad speaks version 1"},
      {"HELLO", "version=(missing)"},
      {"HELLO version=1 container=..", "container"},
      {"HELLO version=1 visible=7", "TESSERA_VISIBLE_DEVICES=\"7\""},
      {"HELLO version=1 visible=GPU-cccccccc-0000-4000-8000-000000000000",
       "TESSERA_VISIBLE_DEVICES"},
      {"HELLO version=1 mem=lots", "mem=\"lots\""},
      {"HELLO version=1 mem=1,2,3", "3 limits for 2 devices"},
      {"HELLO version=1 local_pid=-4", "local_pid=-4"},
      {"HELLO version=1 local_pid=12x", "local_pid=12x"},
  };
  for (const Case& c : cases) {
    auto reply = r.Hello(Parse(c.line), 1, &slot);
    ASSERT_FALSE(reply.ok()) << c.line;
    EXPECT_THAT(reply.error(), HasSubstr(c.says)) << c.line;
  }
  auto bad_id = r.SetContainer(Parse("CONTAINER id=a/b"));
  ASSERT_FALSE(bad_id.ok());
  EXPECT_THAT(bad_id.error(), HasSubstr("a/b"));
  EXPECT_FALSE(r.SetContainer(Parse("CONTAINER mem=1")).ok()) << "an id is required";
}

TEST_F(RegistryTest, StatusIsValidJsonOfContainersAndProcesses) {
  Registry r = Make();
  uint32_t slot = 0;
  ASSERT_TRUE(
      r.Hello(Parse("HELLO version=1 container=web mem=1073741824 local_pid=5"), 77, &slot).ok());
  const nlohmann::json status = nlohmann::json::parse(r.StatusJson());
  ASSERT_EQ(status.at("devices").size(), 2u);
  EXPECT_EQ(status.at("devices")[1].at("name"), "B");
  ASSERT_EQ(status.at("containers").size(), 1u);
  const nlohmann::json& web = status.at("containers")[0];
  EXPECT_EQ(web.at("id"), "web");
  EXPECT_EQ(web.at("limit_bytes"), nlohmann::json::array({1073741824, 1073741824}));
  ASSERT_EQ(web.at("processes").size(), 1u);
  EXPECT_EQ(web.at("processes")[0].at("pid"), 77);
  EXPECT_EQ(web.at("processes")[0].at("attached"), true);
}

// CONTAINER remove=1 (the device plugin's release): a container without processes goes at once; one
// with processes keeps them and goes with its last one; bad removals change nothing.
TEST_F(RegistryTest, RemoveUnregistersAndFreesWhenNoProcessIsLeft) {
  Registry r = Make();
  const auto parse = Parse;
  ASSERT_TRUE(r.SetContainer(parse("CONTAINER id=idle mem=1073741824")).ok());
  ASSERT_TRUE(r.SetContainer(parse("CONTAINER id=busy mem=1073741824")).ok());
  uint32_t slot = 0;
  auto hello = r.Hello(parse("HELLO version=1 container=busy"), 42, &slot);
  ASSERT_TRUE(hello.ok()) << hello.error();

  auto idle = r.SetContainer(parse("CONTAINER id=idle remove=1"));
  ASSERT_TRUE(idle.ok()) << idle.error();
  EXPECT_EQ(idle->Get("processes"), "0");
  EXPECT_LT(r.ledger().FindContainer("idle"), 0);

  auto busy = r.SetContainer(parse("CONTAINER id=busy remove=1"));
  ASSERT_TRUE(busy.ok()) << busy.error();
  EXPECT_EQ(busy->Get("processes"), "1");
  const int c = r.ledger().FindContainer("busy");
  ASSERT_GE(c, 0) << "a container goes only with its last process";
  EXPECT_EQ(r.ledger().book().containers[c].flags.load() & ledger::kContainerRegistered, 0u);
  r.Disconnected(slot, static_cast<uint32_t>(std::stoul(hello->Get("generation"))));
  EXPECT_LT(r.ledger().FindContainer("busy"), 0);

  auto unknown = r.SetContainer(parse("CONTAINER id=ghost remove=1"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.error(), HasSubstr("CONTAINER id=ghost remove=1: no such container"));
  ASSERT_TRUE(r.SetContainer(parse("CONTAINER id=kept mem=1073741824")).ok());
  auto extra = r.SetContainer(parse("CONTAINER id=kept remove=1 mem=5"));
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(extra.error(), HasSubstr("a removal takes only id="));
  auto bad = r.SetContainer(parse("CONTAINER id=kept remove=yes"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error(), HasSubstr("remove=yes: expected 1"));
  EXPECT_GE(r.ledger().FindContainer("kept"), 0);
}

}  // namespace
}  // namespace tessera::daemon
