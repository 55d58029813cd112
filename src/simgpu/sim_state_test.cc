// The simulated machine's configuration parsers (TESSERA_SIM_GPUS, TESSERA_SIM_STATE) and the
// liveness check the reaper relies on. Every rejection names the variable and the value.
#include "simgpu/sim_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
  EXPECT_EQ((*gpus)[1].sm_count, 80u);
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
  EXPECT_EQ((*gpus)[1].sm_count, 80u);
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

}  // namespace
}  // namespace tessera::sim
