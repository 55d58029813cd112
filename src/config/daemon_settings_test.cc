// Tests for tesserad's one configuration path (ResolveDaemonSettings): the command line through
// CLI11, the environment from a table and a config file on disk; the precedence flag >
// environment > file > default, and every refusal naming the input, the value and what is allowed.
#include "config/daemon_settings.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::config {
namespace {

using namespace std::chrono_literals;

using Env = std::map<std::string, std::string>;

Environment TableEnvironment(const Env& table) {
  return [table](const char* name) -> const char* {
    auto it = table.find(name);
    return it == table.end() ? nullptr : it->second.c_str();
  };
}

// tesserad's command line `args` (without the program's name) and environment `env`.
DaemonSetup Resolve(const std::vector<std::string>& args, const Env& env = {}) {
  std::vector<std::string> words = {"tesserad"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  DaemonFlags flags;
  const std::optional<int> exit_status =
      ParseDaemonCommandLine(static_cast<int>(argv.size()), argv.data(), "tesserad test", &flags);
  EXPECT_FALSE(exit_status.has_value()) << "the command line stopped with " << *exit_status;
  return ResolveDaemonSettings(flags, TableEnvironment(env));
}

// A config file holding `text`, removed when the test ends.
class ConfigFile {
 public:
  explicit ConfigFile(const std::string& text) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = ::testing::TempDir() + "tesserad-settings-" + std::to_string(getpid()) + "-" +
            test->name() + ".yaml";
    std::ofstream(path_) << text;
  }
  ~ConfigFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ResolveDaemonSettings, NothingGivenIsEveryDefault) {
  DaemonSetup setup = Resolve({});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_FALSE(setup.loaded_config);
  const DaemonSettings& s = *setup.settings;
  const DaemonConfig defaults;
  EXPECT_EQ(s.node.socket, "/run/tessera/tessera.sock");
  EXPECT_EQ(s.node.ledger, DerivedLedgerName("/run/tessera/tessera.sock"));
  EXPECT_EQ(s.node.ledger.rfind("/tessera-ledger-", 0), 0u) << s.node.ledger;
  EXPECT_EQ(s.node.ledger.size(), std::string("/tessera-ledger-").size() + 16);
  EXPECT_FALSE(s.node.sim);
  EXPECT_FALSE(s.node.context_overhead.has_value());  // measure
  EXPECT_EQ(s.node.policy, ArbiterPolicy::kFair);
  EXPECT_EQ(s.node.max_inst, 16);
  EXPECT_EQ(s.node.prio_ratio.value(), 50);
  EXPECT_EQ(s.node.quota_min, 2ms);
  EXPECT_EQ(s.node.quota_max, 20ms);
  EXPECT_EQ(s.node.daemon_loss_timeout, 2s);
  EXPECT_EQ(s.node.reconcile_interval, 1s);
  EXPECT_EQ(s.node.socket_limits.max_request_line, defaults.socket_limits.max_request_line);
  EXPECT_TRUE(s.node.http.empty());
  EXPECT_EQ(s.http_input, "--http");
  EXPECT_FALSE(s.ephemeral);
  EXPECT_FALSE(s.http_allow_write);
  EXPECT_FALSE(s.mps);
  EXPECT_TRUE(s.mps_control.empty());
  EXPECT_TRUE(s.gpu_policies.empty());
  EXPECT_FALSE(s.admin_gid.has_value());
  EXPECT_EQ(s.nvml_library, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  EXPECT_EQ(s.cuda_library, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
}

TEST(ResolveDaemonSettings, AFlagBeatsTheFileWhichBeatsTheDefault) {
  ConfigFile file(
      "socket: /tmp/from-file.sock\n"
      "ledger: file-ledger\n"
      "policy: 2\n"
      "max_inst: 10\n"
      "prio_ratio: 60\n"
      "quota_max: 30ms\n"
      "daemon_loss_timeout: 5s\n"
      "http: 127.0.0.1:0\n"
      "reconcile_interval: 2s\n"
      "over_limit_action: block\n"
      "container_max_processes: 64\n"
      "gpus: {0: {policy: 1, max_inst: 8, prio_ratio: 70}}\n");
  // Flags after --config or before it: the order does not matter.
  DaemonSetup setup = Resolve({"--max-inst", "12", "--config", file.path(), "--ledger", "flagged",
                               "--daemon-loss-timeout", "300", "--over-limit-action", "kill",
                               "--container-max-processes", "32"});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_TRUE(setup.loaded_config);
  const DaemonSettings& s = *setup.settings;
  EXPECT_EQ(s.config_path, file.path());
  EXPECT_EQ(s.node.socket, "/tmp/from-file.sock");               // file over default
  EXPECT_EQ(s.node.ledger, "/flagged");                          // flag over file
  EXPECT_EQ(s.node.policy, ArbiterPolicy::kWeightedPreemptive);  // file
  EXPECT_EQ(s.node.max_inst, 12);                                // flag
  EXPECT_EQ(s.node.prio_ratio.value(), 60);
  EXPECT_EQ(s.node.quota_min, 2ms);  // default
  EXPECT_EQ(s.node.quota_max, 30ms);
  EXPECT_EQ(s.node.daemon_loss_timeout, 300ms);  // flag over the file's 5s
  EXPECT_EQ(s.node.reconcile_interval, 2s);
  EXPECT_EQ(s.node.over_limit_action, OverLimitAction::kKill);
  EXPECT_EQ(s.node.socket_limits.container_max_processes, 32);
  EXPECT_EQ(s.node.http, "127.0.0.1:0");
  EXPECT_EQ(s.http_input, file.path() + ": http");
  // A node-wide flag takes its setting away from the file's per-GPU overrides too.
  ASSERT_EQ(s.node.gpus.count(0), 1u);
  EXPECT_EQ(s.node.gpus.at(0).policy, ArbiterPolicy::kPreemptive);
  EXPECT_FALSE(s.node.gpus.at(0).max_inst.has_value());
  EXPECT_EQ(s.node.gpus.at(0).prio_ratio->value(), 70);

  // Without the flags the file's values stand, daemon_loss_timeout among them.
  setup = Resolve({"--config", file.path(), "--http", "127.0.0.1:9", "--policy", "fair"});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_EQ(setup.settings->node.daemon_loss_timeout, 5s);
  EXPECT_EQ(setup.settings->node.max_inst, 10);
  EXPECT_EQ(setup.settings->node.http, "127.0.0.1:9");
  EXPECT_EQ(setup.settings->http_input, "--http");
  EXPECT_EQ(setup.settings->node.policy, ArbiterPolicy::kFair);
  EXPECT_FALSE(setup.settings->node.gpus.at(0).policy.has_value());
  EXPECT_EQ(setup.settings->node.gpus.at(0).max_inst, 8);
}

TEST(ResolveDaemonSettings, TheEnvironmentBeatsTheFile) {
  ConfigFile file("sim: false\n");
  // TESSERA_SIM_GPUS set means simulated GPUs, whatever the file says; no real library is named.
  DaemonSetup setup = Resolve({"--config", file.path()}, {{"TESSERA_SIM_GPUS", "SimA:8GiB"}});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_TRUE(setup.settings->node.sim);
  EXPECT_TRUE(setup.settings->nvml_library.empty());
  EXPECT_TRUE(setup.settings->cuda_library.empty());
  // The real libraries' places; an empty variable is the default.
  setup = Resolve(
      {}, {{"TESSERA_REAL_NVML", "/opt/nvidia/libnvidia-ml.so.1"}, {"TESSERA_REAL_LIBCUDA", ""}});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_FALSE(setup.settings->node.sim);
  EXPECT_EQ(setup.settings->nvml_library, "/opt/nvidia/libnvidia-ml.so.1");
  EXPECT_EQ(setup.settings->cuda_library, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  // --sim, or the file's sim, simulate too.
  setup = Resolve({"--sim"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_TRUE(setup.settings->node.sim);
  ConfigFile simulated("sim: true\n");
  setup = Resolve({"--config", simulated.path()});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_TRUE(setup.settings->node.sim);
}

TEST(ResolveDaemonSettings, CommandLineOnlySettings) {
  DaemonSetup setup =
      Resolve({"--ephemeral", "--http-allow-write", "--gpu-policy", "1:5", "--gpu-policy",
               "0:weighted-preemptive", "--context-overhead", "300MiB", "--mps", "--mps-control",
               "/opt/mps-control", "--mps-dir", "/tmp/mps", "--socket", "/tmp/a.sock"});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  const DaemonSettings& s = *setup.settings;
  EXPECT_TRUE(s.ephemeral);
  EXPECT_TRUE(s.http_allow_write);
  ASSERT_EQ(s.gpu_policies.size(), 2u);
  EXPECT_EQ(s.gpu_policies[0], std::make_pair(1, ArbiterPolicy::kNative));
  EXPECT_EQ(s.gpu_policies[1].first, 0);
  EXPECT_EQ(s.node.context_overhead, Bytes(300ull << 20));
  EXPECT_TRUE(s.mps);
  EXPECT_EQ(s.mps_control, "/opt/mps-control");
  EXPECT_EQ(s.mps_dir, "/tmp/mps");
  EXPECT_EQ(s.node.ledger, DerivedLedgerName("/tmp/a.sock"));
  EXPECT_NE(s.node.ledger, DerivedLedgerName("/tmp/b.sock"));
  // MPS mode runs policy 5 unless --policy says otherwise (the file's policy does not).
  EXPECT_EQ(s.node.policy, ArbiterPolicy::kNative);
  ConfigFile file("policy: 2\n");
  setup = Resolve({"--mps", "--config", file.path()});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_EQ(setup.settings->node.policy, ArbiterPolicy::kNative);
  setup = Resolve({"--mps", "--policy", "2"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_EQ(setup.settings->node.policy, ArbiterPolicy::kWeightedPreemptive);
  setup = Resolve({"--context-overhead", "measure"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_FALSE(setup.settings->node.context_overhead.has_value());
}

TEST(ResolveDaemonSettings, TheAdminGroupIsLookedUp) {
  group* root = getgrgid(0);
  ASSERT_NE(root, nullptr);
  DaemonSetup setup = Resolve({"--admin-group", root->gr_name});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  EXPECT_EQ(setup.settings->admin_gid, 0u);
  // A group the file names that the node lacks is refused naming the file and its key.
  ConfigFile file("admin_group: tessera-no-such-group\n");
  setup = Resolve({"--config", file.path()});
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_TRUE(setup.loaded_config);
  EXPECT_EQ(setup.settings.error(), file.path() +
                                        ": admin_group=\"tessera-no-such-group\": no such group "
                                        "on this node; expected a group name from /etc/group");
}

struct BadFlags {
  std::string name;
  std::vector<std::string> args;
  std::string message;  // the whole message, or the part of it that must appear
  bool whole = false;
};

class RefusedFlags : public ::testing::TestWithParam<BadFlags> {};

// --mps-gpus: MPS on some GPUs only (a node whose GPUs have modes of their own); policy 5 on
// those GPUs alone, unless --policy says otherwise.
TEST(ResolveDaemonSettings, gpu_modes_MpsGpusRunsMpsOnTheListedGpusOnly) {
  DaemonSetup setup = Resolve({"--mps-gpus", "0-3,6"});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  const DaemonSettings& s = *setup.settings;
  EXPECT_TRUE(s.mps);
  EXPECT_EQ(s.mps_gpus, (std::set<int>{0, 1, 2, 3, 6}));
  EXPECT_EQ(s.node.policy, ArbiterPolicy::kFair) << "the other GPUs keep the node's policy";
  for (int gpu : {0, 1, 2, 3, 6}) {
    ASSERT_TRUE(s.node.gpus.count(gpu)) << gpu;
    EXPECT_EQ(s.node.gpus.at(gpu).policy, ArbiterPolicy::kNative) << gpu;
  }
  EXPECT_EQ(s.node.gpus.count(4), 0u);
  setup = Resolve({"--mps-gpus", "2", "--policy", "2"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_EQ(setup.settings->mps_gpus, (std::set<int>{2}));
  EXPECT_EQ(setup.settings->node.gpus.count(2), 0u) << "--policy wins";
  setup = Resolve({"--mps"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_TRUE(setup.settings->mps_gpus.empty()) << "--mps alone: every GPU";
  const std::string allowed =
      "is no GPU index or range; expected GPU indices 0-63 and ranges, comma-separated, e.g. 0-3 "
      "or 0,2,5-7";
  for (const char* bad : {"", "3-1", "0-64", "a", "1,,2", "-1", "1-", " 1", "1;2", "0x1",
                          "99999999999999999999999"}) {
    setup = Resolve({"--mps-gpus", bad});
    ASSERT_FALSE(setup.settings.ok()) << bad;
    EXPECT_TRUE(setup.usage_error) << bad;
    EXPECT_NE(setup.settings.error().find(std::string("--mps-gpus \"") + bad + "\": \""),
              std::string::npos)
        << setup.settings.error();
    EXPECT_NE(setup.settings.error().find(allowed), std::string::npos) << setup.settings.error();
  }
}

// --mps-gpus none: MPS allowed (the control program and folder known) on no GPU yet: the device
// plugin asks for GPUs as their labels say (MPSGPUS). No GPU's policy changes at start.
TEST(ResolveDaemonSettings, gpu_modes_MpsGpusNoneAllowsMpsOnNoGpuYet) {
  DaemonSetup setup = Resolve(
      {"--mps-gpus", "none", "--mps-control", "/opt/mps-control", "--mps-dir", "/run/tessera/mps"});
  ASSERT_TRUE(setup.settings.ok()) << setup.settings.error();
  const DaemonSettings& s = *setup.settings;
  EXPECT_TRUE(s.mps);
  EXPECT_TRUE(s.mps_none);
  EXPECT_TRUE(s.mps_gpus.empty());
  EXPECT_EQ(s.mps_control, "/opt/mps-control");
  EXPECT_EQ(s.node.policy, ArbiterPolicy::kFair) << "no GPU runs MPS yet";
  EXPECT_TRUE(s.node.gpus.empty());
  EXPECT_EQ(s.policy_without_mps, ArbiterPolicy::kFair);
  setup = Resolve({"--mps", "--policy", "2"});
  ASSERT_TRUE(setup.settings.ok());
  EXPECT_EQ(setup.settings->policy_without_mps, ArbiterPolicy::kWeightedPreemptive) << "--policy's";
  setup = Resolve({"--mps-gpus", "None"});
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_NE(setup.settings.error().find("; or none (MPS allowed, on no GPU yet)"),
            std::string::npos)
      << setup.settings.error();
}

TEST_P(RefusedFlags, NameTheFlagTheValueAndWhatIsAllowed) {
  DaemonSetup setup = Resolve(GetParam().args);
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_TRUE(setup.usage_error);
  if (GetParam().whole) {
    EXPECT_EQ(setup.settings.error(), GetParam().message);
  } else {
    EXPECT_NE(setup.settings.error().find(GetParam().message), std::string::npos)
        << setup.settings.error();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Flags, RefusedFlags,
    ::testing::Values(
        BadFlags{"ctl_mount_empty", {"--ctl-mount", ""}, "--ctl-mount needs a value", true},
        BadFlags{"admin_group_empty", {"--ctl-group", ""}, "--admin-group needs a value", true},
        BadFlags{"http_empty", {"--http", ""}, "--http needs a value", true},
        BadFlags{"container_sockets_relative",
                 {"--container-sockets", "run/c"},
                 "--container-sockets \"run/c\": expected an absolute directory",
                 true},
        BadFlags{"policy", {"--policy", "9"}, "--policy=\"9\""},
        BadFlags{"mps_dir_relative",
                 {"--mps-dir", "mps"},
                 "--mps-dir \"mps\": expected an absolute path",
                 true},
        BadFlags{"mps_control_empty",
                 {"--mps-control", ""},
                 "--mps-control \"\": expected an absolute path",
                 true},
        BadFlags{"max_inst", {"--max-inst", "0"}, "--max-inst=\"0\""},
        BadFlags{"prio_ratio", {"--prio-ratio", "10"}, "--prio-ratio=\"10\""},
        BadFlags{"quota_min",
                 {"--quota-min", "2ms"},
                 "--quota-min \"2ms\": expected milliseconds, e.g. 2 or 0.5 (at most 600000)",
                 true},
        BadFlags{"quota_max_big",
                 {"--quota-max", "600001"},
                 "--quota-max \"600001\": expected milliseconds, e.g. 2 or 0.5 (at most 600000)",
                 true},
        BadFlags{"loss_timeout_zero",
                 {"--daemon-loss-timeout", "0"},
                 "--daemon-loss-timeout \"0\": expected milliseconds, e.g. 2 or 0.5 (at most "
                 "600000)",
                 true},
        BadFlags{"gpu_policy_no_colon",
                 {"--gpu-policy", "1"},
                 "--gpu-policy \"1\": expected GPU:POLICY, e.g. 1:5 (no \":\")",
                 true},
        BadFlags{"gpu_policy_index", {"--gpu-policy", "16:1"}, "--gpu-policy \"16:1\""},
        BadFlags{"reconcile_interval",
                 {"--reconcile-interval", "50ms"},
                 "--reconcile-interval=\"50ms\""},
        BadFlags{"over_limit_action",
                 {"--over-limit-action", "warn"},
                 "--over-limit-action \"warn\": expected log, block or kill",
                 true},
        BadFlags{"unattributed_action",
                 {"--unattributed-action", "block"},
                 "--unattributed-action \"block\": expected report or kill",
                 true},
        BadFlags{
            "require_identity", {"--require-identity", "maybe"}, "--require-identity=\"maybe\""},
        BadFlags{
            "allow_self_declared", {"--allow-self-declared", "2"}, "--allow-self-declared=\"2\""},
        BadFlags{"max_request_line", {"--max-request-line", "100"}, "--max-request-line=\"100\""},
        BadFlags{"idle_timeout", {"--idle-timeout", "0s"}, "--idle-timeout=\"0s\""},
        BadFlags{"fewer_connections",
                 {"--container-max-connections", "64"},
                 "container_max_connections=\"64\" is less than container_max_processes=\"128\""},
        BadFlags{"admin_group_unknown",
                 {"--admin-group", "tessera-no-such-group"},
                 "--admin-group=\"tessera-no-such-group\": no such group on this node; expected a "
                 "group name from /etc/group",
                 true},
        BadFlags{"socket_relative",
                 {"--socket", "tessera.sock"},
                 "--socket \"tessera.sock\": expected an absolute path of at most 107 bytes",
                 true},
        BadFlags{
            "context_overhead", {"--context-overhead", "lots"}, "--context-overhead=\"lots\""}),
    [](const ::testing::TestParamInfo<BadFlags>& info) { return info.param.name; });

TEST(ResolveDaemonSettings, AFlagErrorAfterAGoodFileStillReportsTheFileLoaded) {
  ConfigFile file("max_inst: 8\n");
  DaemonSetup setup = Resolve({"--config", file.path(), "--max-inst=0"});
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_TRUE(setup.loaded_config);
  EXPECT_TRUE(setup.usage_error);
  EXPECT_NE(setup.settings.error().find("--max-inst=\"0\""), std::string::npos);
}

TEST(ResolveDaemonSettings, AFileErrorNamesTheFileAndIsNotTheCommandLines) {
  ConfigFile file("sim: true\nmax_inst: 16\npolicy: 9\n");
  DaemonSetup setup = Resolve({"--config", file.path(), "--max-inst", "4"});
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_FALSE(setup.loaded_config);
  EXPECT_FALSE(setup.usage_error);
  EXPECT_EQ(setup.settings.error().rfind(file.path() + ":3:9: policy=\"9\"", 0), 0u)
      << setup.settings.error();
  setup = Resolve({"--config", "/nonexistent/tesserad.yaml"});
  ASSERT_FALSE(setup.settings.ok());
  EXPECT_FALSE(setup.usage_error);
  EXPECT_NE(setup.settings.error().find("\"/nonexistent/tesserad.yaml\": cannot open"),
            std::string::npos)
      << setup.settings.error();
}

TEST(ParseDaemonCommandLine, HelpVersionAndMalformedLinesStopWithTheirStatus) {
  auto run = [](std::vector<std::string> words) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    DaemonFlags flags;
    return ParseDaemonCommandLine(static_cast<int>(argv.size()), argv.data(), "tesserad 1", &flags);
  };
  EXPECT_EQ(run({"tesserad", "--help"}), 0);
  EXPECT_EQ(run({"tesserad", "--version"}), 0);
  EXPECT_EQ(run({"tesserad", "--no-such-flag"}), 2);
  EXPECT_EQ(run({"tesserad", "--max-inst"}), 2);                  // a value is missing
  EXPECT_EQ(run({"tesserad", "--gpu-policy", "0:1", "1:2"}), 2);  // one value per --gpu-policy
  EXPECT_EQ(run({"tesserad", "--sim"}), std::nullopt);
}

}  // namespace
}  // namespace tessera::config
