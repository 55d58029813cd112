// The simulated machine's configuration parsers (TESSERA_SIM_GPUS, TESSERA_SIM_STATE) and the
// liveness checks the reaper relies on (a pid's, and a slot owner's record lock, which holds
// across PID namespaces). Every rejection names the variable and the value.
#include "simgpu/sim_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tessera::sim {
namespace {

using ::testing::HasSubstr;

TEST(ParseSimGpusTest, DefaultIsOneSixteenGiBDevice) {
  for (const char* text : {static_cast<const char*>(nullptr), ""}) {
    auto gpus = ParseSimGpus(text);
    ASSERT_TRUE(gpus.ok());
    ASSERT_EQ(gpus->size(), 1u);
    EXPECT_EQ((*gpus)[0].name, "SimGPU");
    EXPECT_EQ((*gpus)[0].total_bytes, 16ull << 30);
    EXPECT_EQ((*gpus)[0].sm_count, 80u);
  }
}

TEST(ParseSimGpusTest, ParsesNamesSizesAndSmCounts) {
  auto gpus = ParseSimGpus("SimA100:40GiB:108,SimT4:16GiB,Small:1536MiB:4,Bare:2");
  ASSERT_TRUE(gpus.ok()) << gpus.error();
  ASSERT_EQ(gpus->size(), 4u);
  EXPECT_EQ((*gpus)[0].total_bytes, 40ull << 30);
  EXPECT_EQ((*gpus)[0].sm_count, 108u);
  EXPECT_EQ((*gpus)[1].sm_count, 40u) << "a name that names a T4 has a T4's SMs";
  EXPECT_EQ((*gpus)[2].sm_count, 4u);
  EXPECT_EQ((*gpus)[2].total_bytes, 1536ull << 20);
  EXPECT_EQ((*gpus)[3].total_bytes, 2ull << 30) << "a bare integer is GiB";
}

TEST(ParseSimGpusTest, RejectsBadInputNamingVariableAndValue) {
  const char* bad[] = {
      "SimA",                                 // no memory
      ":16GiB",                               // no name
      "SimA:16GiB,",                          // empty entry
      ",SimA:16GiB",                          // empty entry
      "SimA:-16GiB",                          // negative
      "SimA:lots",                            // junk size
      "SimA:16GiB:0",                         // zero SMs
      "SimA:16GiB:2000",                      // too many SMs
      "SimA:16GiB:8x",                        // junk SMs
      "SimA:16GiB:",                          // empty SMs
      "SimA:16MiB",                           // below 64 MiB
      "SimA:32TiB",                           // above 16 TiB
      "Sim/A:16GiB",                          // bad name character
      "A:1,B:1,C:1,D:1,E:1,F:1,G:1,H:1,I:1",  // nine devices
  };
  for (const char* text : bad) {
    auto gpus = ParseSimGpus(text);
    EXPECT_FALSE(gpus.ok()) << text;
    if (!gpus.ok()) {
      EXPECT_THAT(gpus.error(), HasSubstr("TESSERA_SIM_GPUS=\"" + std::string(text) + "\""));
      EXPECT_THAT(gpus.error(), HasSubstr("NAME:MEMORY[:SMS]"));
    }
  }
  EXPECT_THAT(ParseSimGpus(std::string(70, 'a').append(":1GiB").c_str()).error(),
              HasSubstr("longer than 63"));
}

// The MIG option (issue 19): `mig=MODEL` as the last field, after the optional SM count. Every
// string of the old syntax keeps its meaning (the tests above).
TEST(ParseSimGpusTest, MigOptionNamesAModel) {
  auto gpus = ParseSimGpus("SimH:80GiB:132:mig=H100-80GB,SimA:40GiB:mig=a100-40gb,Plain:8GiB");
  ASSERT_TRUE(gpus.ok()) << gpus.error();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ(mig::GpuModels()[static_cast<size_t>((*gpus)[0].mig_model)].name, "H100-80GB");
  EXPECT_EQ((*gpus)[0].sm_count, 132u);
  EXPECT_EQ(mig::GpuModels()[static_cast<size_t>((*gpus)[1].mig_model)].name, "A100-40GB");
  EXPECT_EQ((*gpus)[1].sm_count, 108u) << "mig=A100-40GB simulates an A100's 108 SMs";
  EXPECT_EQ((*gpus)[2].mig_model, -1);
}

TEST(ParseSimGpusTest, MigOptionErrorsNameTheValueAndWhatIsAllowed) {
  auto unknown = ParseSimGpus("SimV:16GiB:mig=V100");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(
      unknown.error(),
      "TESSERA_SIM_GPUS=\"SimV:16GiB:mig=V100\": device SimV: mig=\"V100\": not a "
      "MIG-capable GPU model we know; expected one of A30, A100-40GB, A100-80GB, H100-80GB, "
      "H100-94GB, H100-96GB, H200-141GB, B200; expected a comma list of "
      "NAME:MEMORY[:SMS][:mig=MODEL], e.g. SimA100:40GiB:108,SimH100:80GiB:132:mig=H100-80GB");
  auto not_last = ParseSimGpus("SimH:80GiB:mig=H100-80GB:132");
  ASSERT_FALSE(not_last.ok());
  EXPECT_THAT(not_last.error(), HasSubstr("mig=MODEL must be the last field of SimH"));
  auto junk = ParseSimGpus("SimH:80GiB:132:fast");
  ASSERT_FALSE(junk.ok());
  EXPECT_THAT(junk.error(),
              HasSubstr("field \"fast\" of SimH is neither the SM count (the third field) nor "
                        "mig=MODEL"));
  EXPECT_FALSE(ParseSimGpus("SimH:80GiB:mig=").ok());
}

TEST(SimStateObjectNameTest, ValidatesTheName) {
  EXPECT_EQ(*SimStateObjectName("demo-1.x_y"), "/tessera-sim-demo-1.x_y");
  EXPECT_EQ(*SimStateObjectName(nullptr), "/tessera-sim-uid" + std::to_string(getuid()));
  for (const char* bad : {"a/b", "has space", "../x"}) {
    auto name = SimStateObjectName(bad);
    ASSERT_FALSE(name.ok()) << bad;
    EXPECT_THAT(name.error(), HasSubstr("TESSERA_SIM_STATE=\"" + std::string(bad) + "\""));
    EXPECT_THAT(name.error(), HasSubstr("[A-Za-z0-9_.-]"));
  }
  EXPECT_FALSE(SimStateObjectName(std::string(65, 'a').c_str()).ok());
}

TEST(SimStatePathTest, ANameIsInDevShmAndAnAbsolutePathIsItself) {
  EXPECT_EQ(*SimStatePath("demo"), "/dev/shm/tessera-sim-demo");
  EXPECT_EQ(*SimStatePath("/run/tessera/sim-state"), "/run/tessera/sim-state");
  for (const char* bad : {"/run/../etc/x", "/run/x/", "/run//x", "a/b"}) {
    auto path = SimStatePath(bad);
    ASSERT_FALSE(path.ok()) << bad;
    EXPECT_THAT(path.error(), HasSubstr("TESSERA_SIM_STATE=\"" + std::string(bad) + "\""));
  }
}

TEST(ProcessAliveTest, SeesLiveDeadZombieAndReusedPids) {
  EXPECT_TRUE(ProcessAlive(getpid(), ProcessStartTicks(getpid())));
  EXPECT_FALSE(ProcessAlive(getpid(), ProcessStartTicks(getpid()) + 1)) << "pid reused";
  EXPECT_FALSE(ProcessAlive(0, 0));
  const pid_t child = fork();
  if (child == 0) _exit(0);
  // Until it is reaped the child is a zombie, which counts as dead.
  for (int i = 0; i < 1000 && ProcessAlive(child, 0); ++i) usleep(1000);
  EXPECT_FALSE(ProcessAlive(child, 0));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_FALSE(ProcessAlive(child, 0));
}

// A process in a PID namespace of its own (a container's) is pid 1 there: its slot is alive while
// it lives, named by the pid this namespace sees, and reaped once it dies.
TEST(SlotAliveTest, AnOwnerInAnotherPidNamespaceIsAliveAndNamedByTheHostsPid) {
  const std::string name = "slot-alive-" + std::to_string(getpid());
  setenv("TESSERA_SIM_STATE", name.c_str(), 1);
  setenv("TESSERA_SIM_GPUS", "SimT:1GiB", 1);
  auto state = SimState::Attach();
  ASSERT_TRUE(state.ok()) << state.error();
  static SimState* const kept = *state;  // a process's view lives as long as the process
  (void)kept;
  // Two pipes up: the owner's report and the middle's word on the owner's pid are written by two
  // processes in no fixed order, so they must not share one.
  int up[2], hold[2], pid_up[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(hold), 0);
  ASSERT_EQ(pipe(pid_up), 0);
  const pid_t middle = fork();
  if (middle == 0) {
    close(hold[1]);  // the owner sees EOF once the test closes its end
    close(up[0]);
    close(pid_up[0]);
    // unshare(CLONE_NEWPID) puts this process's next child in a new namespace, as pid 1.
    if (unshare(CLONE_NEWPID) != 0) {
      int32_t none = -1;
      (void)!write(pid_up[1], &none, sizeof(none));
      _exit(0);
    }
    const pid_t owner = fork();
    if (owner == 0) {
      auto own = SimState::Attach();  // its own descriptor, as a new process has
      const int slot = own.ok() ? (*own)->ClaimSlot() : -1;
      int32_t report[2] = {slot >= 0 && (*own)->Reserve(0, 1 << 20) ? slot : -1,
                           static_cast<int32_t>(getpid())};
      (void)!write(up[1], report, sizeof(report));
      char c;
      (void)!read(hold[0], &c, 1);  // until the test closes its end
      _exit(0);
    }
    int32_t host_pid = owner;
    (void)!write(pid_up[1], &host_pid, sizeof(host_pid));
    waitpid(owner, nullptr, 0);
    _exit(0);
  }
  close(hold[0]);
  close(up[1]);
  close(pid_up[1]);
  int32_t host_pid = 0, report[2] = {-1, 0};
  ASSERT_EQ(read(pid_up[0], &host_pid, sizeof(host_pid)), static_cast<ssize_t>(sizeof(host_pid)));
  if (host_pid == -1) {
    close(hold[1]);
    waitpid(middle, nullptr, 0);
    GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here (needs root)";
  }
  ASSERT_EQ(read(up[0], report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  const int slot = report[0];
  ASSERT_GE(slot, 0);
  EXPECT_EQ(report[1], 1) << "the owner is pid 1 in its namespace";
  EXPECT_EQ((*state)->layout()->processes[slot].pid.load(), 1);
  int32_t seen = 0;
  EXPECT_TRUE((*state)->SlotAlive(slot, &seen));
  EXPECT_EQ(seen, host_pid) << "named by the pid this namespace sees";
  EXPECT_EQ((*state)->ReapDead(), 0) << "a live container process was reaped";
  EXPECT_EQ((*state)->device(0).used_bytes.load(), 1u << 20);
  close(hold[1]);
  waitpid(middle, nullptr, 0);
  EXPECT_FALSE((*state)->SlotAlive(slot, nullptr));
  EXPECT_EQ((*state)->ReapDead(), 1);
  EXPECT_EQ((*state)->device(0).used_bytes.load(), 0u);
  unlink(SimStatePath(name.c_str())->c_str());
}

}  // namespace
}  // namespace tessera::sim
