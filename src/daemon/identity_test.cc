// Container identity (daemon/identity.h) over a /proc of the test's own: the kernel's files as a
// host with a cgroup v1 pids and memory hierarchy and cgroup v2 beside them writes them.
//   tesserad (self)   pids:/              memory:/system/tesserad  0::/
//   100 web's init    pids:/kubepods/podA/web  memory:/kubepods/podA/web  0::/
//   101 web's child   pids:/kubepods/podA/web/sub (a group the container made)
//   200 a host user   pids:/user.slice    memory:/user.slice
//   201 a sibling     pids:/kubepods/podA/web-2 (a prefix of web's path, not below it)
//   300 in tesserad's cgroups, in a pid namespace of its own
//   400 in tesserad's cgroups and pid namespace
#include "daemon/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "process/child_process.h"

namespace tessera::daemon {
namespace {

using ::testing::HasSubstr;

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = "/tmp/" + process::UniqueName("identity-test");
    proc_ = root_ + "/proc";
    store_ = root_ + "/store";
    mkdir(root_.c_str(), 0700);
    mkdir(proc_.c_str(), 0700);
    Process("self", {"8:pids:/", "4:memory:/system/tesserad", "0::/"}, "1");
    Process("100", {"8:pids:/kubepods/podA/web", "4:memory:/kubepods/podA/web", "0::/"}, "2");
    Process("101", {"8:pids:/kubepods/podA/web/sub", "4:memory:/kubepods/podA/web", "0::/"}, "2");
    Process("200", {"8:pids:/user.slice", "4:memory:/user.slice", "0::/"}, "1");
    Process("201", {"8:pids:/kubepods/podA/web-2", "4:memory:/kubepods/podA/web-2", "0::/"}, "3");
    Process("300", {"8:pids:/", "4:memory:/system/tesserad", "0::/"}, "4");
    Process("400", {"8:pids:/", "4:memory:/system/tesserad", "0::/"}, "1");
  }
  void TearDown() override { process::RunShell("rm -rf '" + root_ + "'"); }

  // A process of the fake /proc: its cgroup file, its stat (start time 5000), and its pid
  // namespace (one file per namespace name, hard-linked so that equal names share an inode).
  void Process(const std::string& leaf, const std::vector<std::string>& cgroups,
               const std::string& pid_ns, uint64_t start = 5000) {
    const std::string dir = proc_ + "/" + leaf;
    mkdir(dir.c_str(), 0700);
    mkdir((dir + "/ns").c_str(), 0700);
    std::ofstream cg(dir + "/cgroup");
    for (const std::string& line : cgroups) cg << line << "\n";
    SetStart(leaf, start);
    const std::string ns = root_ + "/pidns-" + pid_ns;
    std::ofstream(ns, std::ios::app).close();
    unlink((dir + "/ns/pid").c_str());
    ASSERT_EQ(link(ns.c_str(), (dir + "/ns/pid").c_str()), 0);
    std::ofstream(dir + "/ns/mnt").close();
  }
  void SetStart(const std::string& leaf, uint64_t start) {
    std::ofstream stat(proc_ + "/" + leaf + "/stat", std::ios::trunc);
    stat << leaf << " (a (b) c) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " << start
         << " 1000 10\n";
  }

  std::string root_, proc_, store_;
};

TEST_F(IdentityTest, ParsesTheKernelsCgroupFileAndRefusesAnythingElse) {
  auto entries = ParseProcCgroup("12:pids:/a/b\n1:name=systemd:/x:y\n0::/\n");
  ASSERT_TRUE(entries.ok()) << entries.error();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0], (CgroupEntry{"12:pids", "/a/b"}));
  EXPECT_EQ((*entries)[1], (CgroupEntry{"1:name=systemd", "/x:y"})) << "a path may hold ':'";
  EXPECT_EQ((*entries)[2], (CgroupEntry{"0:", "/"}));
  for (const char* bad :
       {"", "\n", "pids:/a\n", "x:pids:/a\n", "1:pids:a\n", "1:pids:\n", "12345678901:pids:/a\n"}) {
    EXPECT_FALSE(ParseProcCgroup(bad).ok()) << bad;
  }
  std::string many;
  for (int i = 0; i < 65; ++i) many += std::to_string(i) + ":c:/\n";
  EXPECT_THAT(ParseProcCgroup(many).error(), HasSubstr("more than 64"));
}

TEST_F(IdentityTest, WithinMeansTheGroupOrBelowItNotAPrefix) {
  EXPECT_TRUE(CgroupWithin("/a/b", "/a/b"));
  EXPECT_TRUE(CgroupWithin("/a/b/c", "/a/b"));
  EXPECT_FALSE(CgroupWithin("/a/bc", "/a/b"));
  EXPECT_FALSE(CgroupWithin("/a", "/a/b"));
  EXPECT_TRUE(CgroupWithin("/anything", "/"));
}

TEST_F(IdentityTest, AContainersProcessesAreThoseInItsCgroupAndNoOneElse) {
  IdentityBook book(proc_, store_);
  EXPECT_EQ(book.Check("web", 101), IdentityBook::Verdict::kUnrecorded);
  auto recorded = book.Record("web", 100, "abc123");
  ASSERT_TRUE(recorded.ok()) << recorded.error();
  // Only the hierarchies that tell it from tesserad: pids and memory, not v2's "/".
  EXPECT_EQ(recorded->Describe(), "cgroup 8:pids:/kubepods/podA/web, 4:memory:/kubepods/podA/web");
  EXPECT_EQ(book.Check("web", 100), IdentityBook::Verdict::kMember);
  EXPECT_EQ(book.Check("web", 101), IdentityBook::Verdict::kMember) << "a sub-group is its own";
  EXPECT_EQ(book.Check("web", 200), IdentityBook::Verdict::kStranger);
  EXPECT_EQ(book.Check("web", 201), IdentityBook::Verdict::kStranger) << "web-2 is not below web";
  EXPECT_EQ(book.Check("web", 999), IdentityBook::Verdict::kStranger) << "no such process";
  EXPECT_EQ(book.ContainerOf(101), "web");
  EXPECT_EQ(book.ContainerOf(200), std::nullopt);
  EXPECT_EQ(book.ContainersOf({100, 101, 200, 999}),
            (std::map<int32_t, std::string>{{100, "web"}, {101, "web"}}));
  EXPECT_EQ(book.Identified(), std::set<std::string>{"web"});
  // A process in tesserad's own cgroups but a pid namespace of its own: by pid namespace.
  auto by_ns = book.Record("ns", 300, "");
  ASSERT_TRUE(by_ns.ok()) << by_ns.error();
  EXPECT_TRUE(by_ns->cgroups.empty());
  EXPECT_EQ(book.Check("ns", 300), IdentityBook::Verdict::kMember);
  EXPECT_EQ(book.Check("ns", 400), IdentityBook::Verdict::kStranger);
  // Nothing tells this one from tesserad: refused.
  auto same = book.Record("same", 400, "");
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(same.error(), HasSubstr("in tesserad's own cgroups and pid namespace"));
  EXPECT_FALSE(book.Record("gone", 999, "").ok());
}

TEST_F(IdentityTest, TheServersChecksSayWhoIsRefusedAndWhy) {
  IdentityBook book(proc_, store_);
  ASSERT_TRUE(book.Record("web", 100, "").ok());
  EXPECT_EQ(AdmitToContainerSocket(book, false, "web", 101), "");
  EXPECT_THAT(AdmitToContainerSocket(book, false, "web", 200),
              HasSubstr("pid 200 is not a process of container web"));
  // Not identified: served, unless identity is required (node-wide or by the container).
  EXPECT_EQ(AdmitToContainerSocket(book, false, "db", 200), "");
  EXPECT_THAT(AdmitToContainerSocket(book, true, "db", 200),
              HasSubstr("container db has no recorded identity yet"));
  book.Expect("db", true);
  EXPECT_THAT(AdmitToContainerSocket(book, false, "db", 200), HasSubstr("no recorded identity"));
  EXPECT_THAT(AdmitHello(book, "db", 200), HasSubstr("has not done so yet"));
  // HELLO on any socket: web's process registers into web only.
  EXPECT_EQ(AdmitHello(book, "web", 101), "");
  EXPECT_THAT(AdmitHello(book, "other", 101),
              HasSubstr("pid 101 is a process of container web (by its cgroup"));
  EXPECT_THAT(AdmitHello(book, "web", 200), HasSubstr("pid 200 is not a process of container web"));
  EXPECT_EQ(AdmitHello(book, "run-1", 200), "") << "tessera run's containers are not identified";
  book.RetainExpected({"web"});
  EXPECT_FALSE(book.Expected("db"));
}

// A container no hook identified is learnt from the processes that registered through its own
// socket: a process in the same cgroup is taken for the container's while one of them lives;
// two containers learnt in one cgroup make it nobody's; a recorded identity wins.
TEST_F(IdentityTest, AnUnidentifiedContainerIsLearntFromItsRegisteredProcesses) {
  IdentityBook book(proc_, store_);
  auto owner = [&book](int32_t pid) -> std::optional<std::string> {
    auto found = book.ContainersOf({pid});
    if (found.empty()) return std::nullopt;
    return found.begin()->second;
  };
  book.NoteRegistrant("web", 100);
  book.NoteRegistrant("web", 400);  // in tesserad's own cgroups: nothing learnt from it
  EXPECT_EQ(owner(101), "web") << "a sub-group of the registrant's cgroup";
  EXPECT_EQ(owner(200), std::nullopt);
  EXPECT_EQ(owner(300), std::nullopt);
  EXPECT_EQ(book.Check("web", 200), IdentityBook::Verdict::kUnrecorded)
      << "learnt cgroups never decide who may register";
  EXPECT_EQ(book.ContainerOf(101), std::nullopt) << "nor whom a HELLO goes to";
  EXPECT_EQ(AdmitHello(book, "other", 101), "");
  EXPECT_TRUE(book.Identified().empty());
  book.NoteRegistrant("other", 100);
  EXPECT_EQ(owner(101), std::nullopt) << "two containers in one cgroup: nobody's";
  book.Forget("other");
  EXPECT_EQ(owner(101), "web");
  ASSERT_TRUE(book.Record("db", 201, "").ok());
  book.NoteRegistrant("db", 100);
  EXPECT_EQ(owner(101), "web") << "a recorded container learns nothing";
  SetStart("100", 7777);  // the registrant exits
  book.Prune();
  EXPECT_EQ(owner(101), std::nullopt);
}

TEST_F(IdentityTest, RecordsOutliveARestartAndGoWithTheirInitProcess) {
  {
    IdentityBook book(proc_, store_);
    ASSERT_TRUE(book.Record("web", 100, "abc").ok());
    ASSERT_TRUE(book.Record("ns", 300, "").ok());
    book.Expect("web", true);
  }
  struct stat st {};
  ASSERT_EQ(stat(store_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  {
    IdentityBook restarted(proc_, store_);
    EXPECT_TRUE(restarted.Load().empty());
    EXPECT_EQ(restarted.Check("web", 101), IdentityBook::Verdict::kMember);
    EXPECT_EQ(restarted.Check("web", 200), IdentityBook::Verdict::kStranger);
    EXPECT_TRUE(restarted.Expected("web"));
    // web's init exits (its pid is reused by a process started later): the record goes.
    SetStart("100", 9999);
    const std::vector<std::string> lines = restarted.Prune();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_THAT(lines[0], HasSubstr("container web: runtime container abc (init pid 100) has "
                                    "exited"));
    EXPECT_EQ(restarted.Check("web", 101), IdentityBook::Verdict::kUnrecorded);
    EXPECT_TRUE(restarted.Expected("web")) << "still waiting for its next runtime container";
  }
  IdentityBook again(proc_, store_);
  again.Load();
  EXPECT_EQ(again.Check("web", 101), IdentityBook::Verdict::kUnrecorded);
  EXPECT_EQ(again.Check("ns", 300), IdentityBook::Verdict::kMember);
}

TEST_F(IdentityTest, AStoredRecordIsUntrustedInput) {
  mkdir(store_.c_str(), 0700);
  const std::map<std::string, std::string> files = {
      {"junk", "not json"},
      {"array", "[]"},
      {"noexpect", R"({"records":[]})"},
      {"badpid", R"({"expected":false,"records":[{"init_pid":-1}]})"},
      {"badcg",
       R"({"expected":false,"records":[{"init_pid":100,"init_start_ticks":5000,"pid_ns":1,"mnt_ns":1,"runtime_id":"x","cgroups":[["pids","rel"]]}]})"},
      {"nothing",
       R"({"expected":false,"records":[{"init_pid":100,"init_start_ticks":5000,"pid_ns":0,"mnt_ns":1,"runtime_id":"x","cgroups":[]}]})"},
      {"..x", "{}"},
      {"good",
       R"({"expected":true,"records":[{"init_pid":100,"init_start_ticks":5000,"pid_ns":1,"mnt_ns":1,"runtime_id":"x","cgroups":[["8:pids","/kubepods/podA/web"]]}]})"},
  };
  for (const auto& [name, text] : files) std::ofstream(store_ + "/" + name) << text;
  mkdir((store_ + "/dir").c_str(), 0700);
  IdentityBook book(proc_, store_);
  const std::vector<std::string> lines = book.Load();
  EXPECT_EQ(lines.size(), 8u) << ::testing::PrintToString(lines);
  EXPECT_EQ(book.Identified(), std::set<std::string>{"good"});
  EXPECT_EQ(book.Check("good", 101), IdentityBook::Verdict::kMember);
  struct stat st {};
  EXPECT_NE(stat((store_ + "/junk").c_str(), &st), 0) << "a bad record file is removed";
}

}  // namespace
}  // namespace tessera::daemon
