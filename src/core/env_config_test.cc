// Tests for LoadTenantConfig: every variable of docs/contracts.md, its cGPU alias, precedence,
// empty values, and one test per rejection. The real process environment is never modified.
#include "core/env_config.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kUuid = "GPU-8a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";

TenantConfig Load(const MapEnvironment& environment) {
  Result<TenantConfig> result = LoadTenantConfig(environment);
  EXPECT_TRUE(result.ok()) << result.error();
  return result.ok() ? *result : TenantConfig();
}

TEST(MapEnvironmentTest, DistinguishesUnsetFromEmpty) {
  MapEnvironment environment = {{"A", "1"}, {"EMPTY", ""}};
  EXPECT_EQ(environment.Get("A"), "1");
  EXPECT_EQ(environment.Get("EMPTY"), "");
  EXPECT_EQ(environment.Get("B"), std::nullopt);
  environment.Set("B", "2");
  environment.Set("A", "3");
  EXPECT_EQ(environment.Get("B"), "2");
  EXPECT_EQ(environment.Get("A"), "3");
  environment.Unset("A");
  environment.Unset("NEVER_SET");
  EXPECT_EQ(environment.Get("A"), std::nullopt);
}

TEST(ProcessEnvironmentTest, ReadsTheProcessEnvironment) {
  ProcessEnvironment environment;
  EXPECT_EQ(environment.Get("TESSERA_TEST_VARIABLE_THAT_IS_NEVER_SET_7f3a"), std::nullopt);
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): read-only test
  if (path != nullptr) {
    EXPECT_EQ(environment.Get("PATH"), std::string(path));
  }
}

TEST(LoadTenantConfigTest, EmptyEnvironmentGivesTheDefaults) {
  const TenantConfig config = Load(MapEnvironment());
  EXPECT_FALSE(config.container_id.is_set());
  EXPECT_EQ(config.container_id.value, "");
  EXPECT_EQ(config.socket_path.value, "/run/tessera/tessera.sock");
  EXPECT_FALSE(config.socket_path.is_set());
  EXPECT_TRUE(config.mem_limits.value.empty());
  EXPECT_EQ(config.MemLimitFor(0), std::nullopt);
  EXPECT_EQ(config.core_limit.value, Percent::Full());
  EXPECT_EQ(config.weight.value, 1u);
  EXPECT_FALSE(config.high_prio.value);
  EXPECT_TRUE(config.visible_devices.value.all);
  EXPECT_FALSE(config.disable.value);
  EXPECT_FALSE(config.fail_open.value);
  EXPECT_EQ(config.real_libcuda.value, "");
  EXPECT_EQ(config.real_nvml.value, "");
  EXPECT_FALSE(config.platform_device_memory.is_set());
  EXPECT_TRUE(config.notes.empty());
}

TEST(LoadTenantConfigTest, ReadsEveryTesseraVariableAndRecordsItsSource) {
  const TenantConfig config = Load({
      {"TESSERA_CONTAINER", "web-1"},
      {"TESSERA_SOCKET", "/tmp/t.sock"},
      {"TESSERA_MEM_LIMIT", "3GiB,4GiB"},
      {"TESSERA_CORE_LIMIT", "30"},
      {"TESSERA_WEIGHT", "4"},
      {"TESSERA_HIGH_PRIO", "1"},
      {"TESSERA_VISIBLE_DEVICES", "1,3"},
      {"TESSERA_DISABLE", "0"},
      {"TESSERA_FAIL_OPEN", "1"},
      {"TESSERA_REAL_LIBCUDA", "/usr/lib/libcuda.so.1"},
      {"TESSERA_REAL_NVML", "/usr/lib/libnvidia-ml.so.1"},
  });
  EXPECT_EQ(config.container_id.value, "web-1");
  EXPECT_EQ(config.container_id.source, "TESSERA_CONTAINER");
  EXPECT_EQ(config.socket_path.value, "/tmp/t.sock");
  EXPECT_EQ(config.socket_path.source, "TESSERA_SOCKET");
  EXPECT_EQ(config.mem_limits.value, (std::vector<Bytes>{GiB(3), GiB(4)}));
  EXPECT_EQ(config.mem_limits.source, "TESSERA_MEM_LIMIT");
  EXPECT_EQ(config.mem_limits.raw, "3GiB,4GiB");
  EXPECT_EQ(config.core_limit.value, *Percent::FromInt(30));
  EXPECT_EQ(config.core_limit.source, "TESSERA_CORE_LIMIT");
  EXPECT_EQ(config.weight.value, 4u);
  EXPECT_EQ(config.weight.source, "TESSERA_WEIGHT");
  EXPECT_TRUE(config.high_prio.value);
  EXPECT_EQ(config.high_prio.source, "TESSERA_HIGH_PRIO");
  EXPECT_EQ(config.visible_devices.value.ToString(), "1,3");
  EXPECT_EQ(config.visible_devices.source, "TESSERA_VISIBLE_DEVICES");
  EXPECT_FALSE(config.disable.value);
  EXPECT_EQ(config.disable.source, "TESSERA_DISABLE");
  EXPECT_TRUE(config.fail_open.value);
  EXPECT_EQ(config.real_libcuda.value, "/usr/lib/libcuda.so.1");
  EXPECT_EQ(config.real_nvml.value, "/usr/lib/libnvidia-ml.so.1");
  EXPECT_TRUE(config.notes.empty());
}

TEST(LoadTenantConfigTest, ReadsEveryCgpuAliasAndRecordsItsSource) {
  const TenantConfig config = Load({
      {"CGPU_DISABLE", "true"},
      {"ALIYUN_COM_GPU_MEM_DEV", "16"},
      {"ALIYUN_COM_GPU_MEM_CONTAINER", "4"},
      {"ALIYUN_COM_GPU_VISIBLE_DEVICES", std::string(kUuid) + ",2"},
      {"ALIYUN_COM_GPU_SCHD_WEIGHT", "2"},
      {"ALIYUN_COM_GPU_HIGH_PRIO", "1"},
  });
  EXPECT_TRUE(config.disable.value);
  EXPECT_EQ(config.disable.source, "CGPU_DISABLE");
  EXPECT_EQ(config.platform_device_memory.value, GiB(16));
  EXPECT_EQ(config.platform_device_memory.source, "ALIYUN_COM_GPU_MEM_DEV");
  EXPECT_EQ(config.mem_limits.value, std::vector<Bytes>{GiB(4)});
  EXPECT_EQ(config.mem_limits.source, "ALIYUN_COM_GPU_MEM_CONTAINER");
  EXPECT_EQ(config.MemLimitFor(0), GiB(4));
  ASSERT_EQ(config.visible_devices.value.devices.size(), 2u);
  EXPECT_EQ(config.visible_devices.value.devices[0].uuid, kUuid);
  EXPECT_EQ(config.visible_devices.source, "ALIYUN_COM_GPU_VISIBLE_DEVICES");
  EXPECT_EQ(config.weight.value, 2u);
  EXPECT_EQ(config.weight.source, "ALIYUN_COM_GPU_SCHD_WEIGHT");
  EXPECT_TRUE(config.high_prio.value);
  EXPECT_EQ(config.high_prio.source, "ALIYUN_COM_GPU_HIGH_PRIO");
}

// --- Precedence: a Tessera variable wins over its alias; both are validated. ---

TEST(LoadTenantConfigTest, TesseraVariablesWinOverTheirAliasesWithANote) {
  const TenantConfig config = Load({
      {"TESSERA_MEM_LIMIT", "2GiB"},
      {"ALIYUN_COM_GPU_MEM_CONTAINER", "4"},
      {"TESSERA_WEIGHT", "4"},
      {"ALIYUN_COM_GPU_SCHD_WEIGHT", "2"},
      {"TESSERA_HIGH_PRIO", "0"},
      {"ALIYUN_COM_GPU_HIGH_PRIO", "1"},
      {"TESSERA_VISIBLE_DEVICES", "0"},
      {"ALIYUN_COM_GPU_VISIBLE_DEVICES", "1"},
      {"TESSERA_DISABLE", "0"},
      {"CGPU_DISABLE", "true"},
  });
  EXPECT_EQ(config.mem_limits.value, std::vector<Bytes>{GiB(2)});
  EXPECT_EQ(config.mem_limits.source, "TESSERA_MEM_LIMIT");
  EXPECT_EQ(config.weight.value, 4u);
  EXPECT_EQ(config.weight.source, "TESSERA_WEIGHT");
  EXPECT_FALSE(config.high_prio.value);
  EXPECT_EQ(config.high_prio.source, "TESSERA_HIGH_PRIO");
  EXPECT_EQ(config.visible_devices.value.ToString(), "0");
  EXPECT_EQ(config.visible_devices.source, "TESSERA_VISIBLE_DEVICES");
  EXPECT_FALSE(config.disable.value);
  EXPECT_EQ(config.disable.source, "TESSERA_DISABLE");
  ASSERT_EQ(config.notes.size(), 5u);
  const std::string all_notes =
      config.notes[0] + config.notes[1] + config.notes[2] + config.notes[3] + config.notes[4];
  for (std::string_view note :
       {"TESSERA_MEM_LIMIT=\"2GiB\" overrides ALIYUN_COM_GPU_MEM_CONTAINER=\"4\"",
        "TESSERA_WEIGHT=\"4\" overrides ALIYUN_COM_GPU_SCHD_WEIGHT=\"2\"",
        "TESSERA_HIGH_PRIO=\"0\" overrides ALIYUN_COM_GPU_HIGH_PRIO=\"1\"",
        "TESSERA_VISIBLE_DEVICES=\"0\" overrides ALIYUN_COM_GPU_VISIBLE_DEVICES=\"1\"",
        "TESSERA_DISABLE=\"0\" overrides CGPU_DISABLE=\"true\""}) {
    EXPECT_NE(all_notes.find(note), std::string::npos) << note;
  }
}

TEST(LoadTenantConfigTest, EqualValuesInBothVariablesNeedNoNote) {
  const TenantConfig config = Load({{"TESSERA_WEIGHT", "3"}, {"ALIYUN_COM_GPU_SCHD_WEIGHT", "3"}});
  EXPECT_EQ(config.weight.source, "TESSERA_WEIGHT");
  EXPECT_TRUE(config.notes.empty());
}

TEST(LoadTenantConfigTest, AnInvalidAliasIsAnErrorEvenWhenOverridden) {
  const MapEnvironment environment = {{"TESSERA_WEIGHT", "3"},
                                      {"ALIYUN_COM_GPU_SCHD_WEIGHT", "heavy"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), "ALIYUN_COM_GPU_SCHD_WEIGHT", "heavy",
                         {"not a number"}));
  const MapEnvironment memory = {{"TESSERA_MEM_LIMIT", "2GiB"},
                                 {"ALIYUN_COM_GPU_MEM_CONTAINER", "2GiB"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(memory), "ALIYUN_COM_GPU_MEM_CONTAINER", "2GiB",
                         {"not a whole number of GiB"}));
  const MapEnvironment disable = {{"TESSERA_DISABLE", "1"}, {"CGPU_DISABLE", ""}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(disable), "CGPU_DISABLE", "", {"empty value"}));
}

TEST(LoadTenantConfigTest, AnInvalidTesseraVariableIsReportedBeforeItsAlias) {
  const MapEnvironment environment = {{"TESSERA_WEIGHT", "0"}, {"ALIYUN_COM_GPU_SCHD_WEIGHT", "x"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), "TESSERA_WEIGHT", "0",
                         {"0 is out of range; expected a whole number from 1 to 1024"}));
}

// --- Memory limits. ---

TEST(LoadTenantConfigTest, AShortMemLimitListRepeatsItsLastEntry) {
  const TenantConfig config = Load({{"TESSERA_MEM_LIMIT", "3GiB,4GiB"}});
  EXPECT_EQ(config.MemLimitFor(0), GiB(3));
  EXPECT_EQ(config.MemLimitFor(1), GiB(4));
  EXPECT_EQ(config.MemLimitFor(2), GiB(4));
  EXPECT_EQ(config.MemLimitFor(63), GiB(4));
}

TEST(LoadTenantConfigTest, MemLimitAcceptsSizesAndBareGiB) {
  EXPECT_EQ(Load({{"TESSERA_MEM_LIMIT", "2"}}).MemLimitFor(0), GiB(2));
  EXPECT_EQ(Load({{"TESSERA_MEM_LIMIT", "1536MiB"}}).MemLimitFor(5), MiB(1536));
  EXPECT_EQ(Load({{"TESSERA_MEM_LIMIT", "1.5GiB"}}).MemLimitFor(0), MiB(1536));
}

TEST(LoadTenantConfigTest, CgpuZeroTurnsMemoryIsolationOffPerDevice) {
  const TenantConfig off = Load({{"ALIYUN_COM_GPU_MEM_CONTAINER", "0"}});
  EXPECT_TRUE(off.mem_limits.is_set());
  EXPECT_EQ(off.MemLimitFor(0), std::nullopt);
  EXPECT_EQ(off.MemLimitFor(3), std::nullopt);

  const TenantConfig mixed = Load({{"ALIYUN_COM_GPU_MEM_CONTAINER", "4, 0"}});
  EXPECT_EQ(mixed.MemLimitFor(0), GiB(4));
  EXPECT_EQ(mixed.MemLimitFor(1), std::nullopt);
  EXPECT_EQ(mixed.MemLimitFor(2), std::nullopt);

  const TenantConfig repeated = Load({{"ALIYUN_COM_GPU_MEM_CONTAINER", "0,8"}});
  EXPECT_EQ(repeated.MemLimitFor(0), std::nullopt);
  EXPECT_EQ(repeated.MemLimitFor(4), GiB(8));
}

TEST(LoadTenantConfigTest, MemLimitListMayNotBeLongerThanAnExplicitDeviceList) {
  const MapEnvironment environment = {{"TESSERA_MEM_LIMIT", "1GiB,2GiB,3GiB"},
                                      {"TESSERA_VISIBLE_DEVICES", "0,1"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), "TESSERA_MEM_LIMIT", "1GiB,2GiB,3GiB",
                         {"3 limits for 2 visible devices (TESSERA_VISIBLE_DEVICES=\"0,1\")",
                          "the last one repeats"}));
  const MapEnvironment alias = {{"ALIYUN_COM_GPU_MEM_CONTAINER", "1,2"},
                                {"ALIYUN_COM_GPU_VISIBLE_DEVICES", "3"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(alias), "ALIYUN_COM_GPU_MEM_CONTAINER", "1,2",
                         {"2 limits for 1 visible device (ALIYUN_COM_GPU_VISIBLE_DEVICES"}));
  EXPECT_TRUE(LoadTenantConfig(MapEnvironment{{"TESSERA_MEM_LIMIT", "1GiB,2GiB,3GiB"},
                                              {"TESSERA_VISIBLE_DEVICES", "0-2"}})
                  .ok());
  EXPECT_TRUE(LoadTenantConfig(MapEnvironment{{"TESSERA_MEM_LIMIT", "1GiB,2GiB,3GiB"},
                                              {"TESSERA_VISIBLE_DEVICES", "all"}})
                  .ok());
}

TEST(LoadTenantConfigTest, SocketPathAtTheSunPathLimitIsAccepted) {
  const std::string path = "/" + std::string(106, 's');
  EXPECT_EQ(Load({{"TESSERA_SOCKET", path}}).socket_path.value, path);
}

// --- Every rejection names the variable, the value and what is allowed. ---

struct Rejection {
  std::string_view variable;
  std::string value;
  std::string_view reason;
};

class RejectionTest : public ::testing::TestWithParam<Rejection> {};

TEST_P(RejectionTest, NamesTheVariableTheValueAndWhatIsAllowed) {
  const Rejection& rejection = GetParam();
  MapEnvironment environment;
  environment.Set(rejection.variable, rejection.value);
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), rejection.variable, rejection.value,
                         {rejection.reason, "; expected "}));
}

INSTANTIATE_TEST_SUITE_P(
    EveryVariable, RejectionTest,
    ::testing::Values(
        // Empty values are errors for every variable, never "unset".
        Rejection{"TESSERA_CONTAINER", "", "empty value"},
        Rejection{"TESSERA_SOCKET", "", "empty value"},
        Rejection{"TESSERA_MEM_LIMIT", "", "empty value"},
        Rejection{"TESSERA_CORE_LIMIT", "", "empty value"},
        Rejection{"TESSERA_WEIGHT", "", "empty value"},
        Rejection{"TESSERA_HIGH_PRIO", "", "empty value"},
        Rejection{"TESSERA_VISIBLE_DEVICES", "", "empty value"},
        Rejection{"TESSERA_DISABLE", "", "empty value"},
        Rejection{"TESSERA_FAIL_OPEN", "", "empty value"},
        Rejection{"TESSERA_REAL_LIBCUDA", "", "empty value"},
        Rejection{"TESSERA_REAL_NVML", "", "empty value"},
        Rejection{"CGPU_DISABLE", "", "empty value"},
        Rejection{"ALIYUN_COM_GPU_MEM_DEV", "", "empty value"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "", "empty value"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", " ", "empty value"},
        Rejection{"ALIYUN_COM_GPU_VISIBLE_DEVICES", "", "empty value"},
        Rejection{"ALIYUN_COM_GPU_SCHD_WEIGHT", "", "empty value"},
        Rejection{"ALIYUN_COM_GPU_HIGH_PRIO", "", "empty value"},
        // TESSERA_CONTAINER
        Rejection{"TESSERA_CONTAINER", "web 1", "character 4"},
        Rejection{"TESSERA_CONTAINER", std::string(65, 'c'), "65 characters is too long"},
        Rejection{"TESSERA_CONTAINER", "..", "directory name"},
        // TESSERA_SOCKET
        Rejection{"TESSERA_SOCKET", "tessera.sock", "not an absolute path"},
        Rejection{"TESSERA_SOCKET", "/" + std::string(107, 's'), "108 bytes is too long"},
        Rejection{"TESSERA_SOCKET", std::string("/run/a\0b", 8), "contains a NUL byte"},
        // TESSERA_MEM_LIMIT
        Rejection{"TESSERA_MEM_LIMIT", "-1GiB", "negative sizes are not allowed"},
        Rejection{"TESSERA_MEM_LIMIT", "abc", "not a size"},
        Rejection{"TESSERA_MEM_LIMIT", "12x", "unknown unit"},
        Rejection{"TESSERA_MEM_LIMIT", "1.5", "a fraction needs a unit"},
        Rejection{"TESSERA_MEM_LIMIT", "17179869184GiB", "too large"},
        Rejection{"TESSERA_MEM_LIMIT", "99999999999999999999", "too large"},
        Rejection{"TESSERA_MEM_LIMIT", "3GiB,,4GiB", "item 2 is empty"},
        Rejection{"TESSERA_MEM_LIMIT", "0", "a limit of 0 bytes would make every allocation fail"},
        Rejection{"TESSERA_MEM_LIMIT", "2GiB,0B", "item 2 of 0 bytes"},
        // TESSERA_CORE_LIMIT
        Rejection{"TESSERA_CORE_LIMIT", "0", "0 is out of range"},
        Rejection{"TESSERA_CORE_LIMIT", "101", "101 is out of range"},
        Rejection{"TESSERA_CORE_LIMIT", "50%", "not a number"},
        Rejection{"TESSERA_CORE_LIMIT", "12.5", "not a whole number"},
        // TESSERA_WEIGHT / ALIYUN_COM_GPU_SCHD_WEIGHT
        Rejection{"TESSERA_WEIGHT", "0", "0 is out of range"},
        Rejection{"TESSERA_WEIGHT", "1025", "1025 is out of range"},
        Rejection{"TESSERA_WEIGHT", "-2", "negative numbers are not allowed"},
        Rejection{"ALIYUN_COM_GPU_SCHD_WEIGHT", "0", "0 is out of range"},
        Rejection{"ALIYUN_COM_GPU_SCHD_WEIGHT", "x", "not a number"},
        // Flags
        Rejection{"TESSERA_HIGH_PRIO", "2", "not a flag"},
        Rejection{"ALIYUN_COM_GPU_HIGH_PRIO", "high", "not a flag"},
        Rejection{"TESSERA_DISABLE", "maybe", "not a flag"},
        Rejection{"CGPU_DISABLE", "disabled", "not a flag"},
        Rejection{"TESSERA_FAIL_OPEN", "please", "not a flag"},
        // Device lists
        Rejection{"TESSERA_VISIBLE_DEVICES", "0,0", "a second time"},
        Rejection{"TESSERA_VISIBLE_DEVICES", "3-1", "reversed range"},
        Rejection{"TESSERA_VISIBLE_DEVICES", "64", "above the largest device index"},
        Rejection{"ALIYUN_COM_GPU_VISIBLE_DEVICES", "GPU-1", "is not a device UUID"},
        // Library paths
        Rejection{"TESSERA_REAL_LIBCUDA", "libcuda.so.1", "not an absolute path"},
        Rejection{"TESSERA_REAL_NVML", "./libnvidia-ml.so.1", "not an absolute path"},
        Rejection{"TESSERA_REAL_LIBCUDA", "/" + std::string(4095, 'l'), "longer than PATH_MAX"},
        Rejection{"TESSERA_REAL_NVML", std::string("/lib\0x", 6), "contains a NUL byte"},
        // ALIYUN_COM_GPU_MEM_CONTAINER: whole GiB only
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "2GiB", "the value is not a whole number of GiB"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "-1", "not a whole number of GiB"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "1.5", "not a whole number of GiB"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "4,x", "item 2 (\"x\") is not a whole number"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "4,,8", "item 2 is empty"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "17179869184", "the value is too large"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "99999999999999999999", "too large"},
        Rejection{"ALIYUN_COM_GPU_MEM_CONTAINER", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1",
                  "17 items; at most 16 are allowed"},
        // ALIYUN_COM_GPU_MEM_DEV
        Rejection{"ALIYUN_COM_GPU_MEM_DEV", "0", "0 is out of range"},
        Rejection{"ALIYUN_COM_GPU_MEM_DEV", "16GiB", "not a number"},
        Rejection{"ALIYUN_COM_GPU_MEM_DEV", "17179869184", "is out of range"}));

TEST(LoadTenantConfigTest, ReturnsTheFirstErrorInFieldOrder) {
  const MapEnvironment environment = {{"TESSERA_CONTAINER", "a b"}, {"TESSERA_CORE_LIMIT", "0"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), "TESSERA_CONTAINER", "a b"));
}

TEST(LoadTenantConfigTest, ValidatesEverythingEvenWhenDisabled) {
  const MapEnvironment environment = {{"TESSERA_DISABLE", "1"}, {"TESSERA_MEM_LIMIT", "lots"}};
  EXPECT_TRUE(IsRejected(LoadTenantConfig(environment), "TESSERA_MEM_LIMIT", "lots"));
}

TEST(LoadTenantConfigTest, DescribeListsValuesAndSources) {
  const TenantConfig config = Load({{"TESSERA_MEM_LIMIT", "1536MiB,2GiB"},
                                    {"ALIYUN_COM_GPU_MEM_CONTAINER", "4"},
                                    {"ALIYUN_COM_GPU_MEM_DEV", "16"}});
  const std::string text = DescribeTenantConfig(config);
  EXPECT_NE(text.find("1.5GiB,2GiB  (TESSERA_MEM_LIMIT)"), std::string::npos) << text;
  EXPECT_NE(text.find("/run/tessera/tessera.sock  (default)"), std::string::npos) << text;
  EXPECT_NE(text.find("16GiB  (ALIYUN_COM_GPU_MEM_DEV)"), std::string::npos) << text;
  EXPECT_NE(text.find("note: TESSERA_MEM_LIMIT=\"1536MiB,2GiB\" overrides"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// In a container Tessera manages, nothing in the environment turns the shim off or points it
// away from the container's own socket; each setting overridden is named in a note.
TEST(ApplyManagedContainerTest, TheShimCannotBeTurnedOffOrPointedElsewhere) {
  for (const char* disable : {"TESSERA_DISABLE", "CGPU_DISABLE"}) {
    MapEnvironment env{{disable, "1"},
                       {"TESSERA_FAIL_OPEN", "1"},
                       {"TESSERA_SOCKET", "/tmp/elsewhere.sock"},
                       {"TESSERA_CONTAINER", "web"}};
    auto config = LoadTenantConfig(env);
    ASSERT_TRUE(config.ok()) << config.error();
    ASSERT_TRUE(config->disable.value);
    ApplyManagedContainer(&*config);
    EXPECT_FALSE(config->disable.value);
    EXPECT_FALSE(config->fail_open.value);
    EXPECT_EQ(config->socket_path.value, kDefaultSocketPath);
    EXPECT_EQ(config->container_id.value, "web") << "what the daemon checks itself is left alone";
    ASSERT_EQ(config->notes.size(), 3u);
    EXPECT_EQ(config->notes[0], std::string(disable) +
                                    "=\"1\" is ignored in a container Tessera manages "
                                    "(/run/tessera/container exists): the shim stays on");
    EXPECT_NE(config->notes[1].find("TESSERA_FAIL_OPEN=\"1\" is ignored"), std::string::npos);
    EXPECT_NE(config->notes[2].find("TESSERA_SOCKET=\"/tmp/elsewhere.sock\" is ignored"),
              std::string::npos);
  }
  // Settings that change nothing are not noted.
  MapEnvironment quiet{{"TESSERA_DISABLE", "0"}, {"TESSERA_SOCKET", "/run/tessera/tessera.sock"}};
  auto config = LoadTenantConfig(quiet);
  ASSERT_TRUE(config.ok());
  ApplyManagedContainer(&*config);
  EXPECT_TRUE(config->notes.empty());
}

}  // namespace
}  // namespace tessera
