// Tests for LoadDaemonConfig / ParseDaemonConfig: the sample file, defaults, every key's parsing,
// a table of YAML the old hand-written subset parser refused (flow mappings, block scalars,
// anchors, multi-line strings, tags, ...) that now loads, and a table of bad files whose errors
// must name the line, the column and the key.
#include "config/daemon_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace tessera::config {
namespace {

using namespace std::chrono_literals;

TEST(LoadDaemonConfig, LoadsTheSampleFileWithEveryKey) {
  auto loaded = LoadDaemonConfig(TESSERA_SAMPLE_CONFIG);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const DaemonConfig& c = *loaded;
  EXPECT_EQ(c.socket, "/run/tessera/tessera.sock");
  EXPECT_FALSE(c.sim);
  EXPECT_EQ(c.ledger, "tessera-ledger");
  EXPECT_TRUE(c.allow_self_declared);
  EXPECT_FALSE(c.context_overhead.has_value());
  EXPECT_EQ(c.policy, ArbiterPolicy::kFair);
  EXPECT_EQ(c.max_inst, 16);
  EXPECT_EQ(c.prio_ratio.value(), 50);
  EXPECT_EQ(c.quota_min, 2ms);
  EXPECT_EQ(c.quota_max, 20ms);
  EXPECT_EQ(c.default_memsize, Bytes::Zero());
  EXPECT_EQ(c.http, "127.0.0.1:9400");
  EXPECT_EQ(c.ctl_mount, "/run/tessera/ctl");
  EXPECT_EQ(c.container_sockets, "/run/tessera/containers");
  EXPECT_EQ(c.admin_group, "tessera");
  const SocketLimits defaults;
  EXPECT_EQ(c.socket_limits.max_request_line, defaults.max_request_line);
  EXPECT_EQ(c.socket_limits.max_reply_backlog, defaults.max_reply_backlog);
  EXPECT_EQ(c.socket_limits.request_timeout, defaults.request_timeout);
  EXPECT_EQ(c.socket_limits.idle_timeout, defaults.idle_timeout);
  EXPECT_EQ(c.socket_limits.container_max_connections, defaults.container_max_connections);
  EXPECT_EQ(c.socket_limits.container_max_processes, defaults.container_max_processes);
  EXPECT_EQ(c.socket_limits.refusal_log_rate, defaults.refusal_log_rate);
  EXPECT_EQ(c.reconcile_interval, 1s);
  EXPECT_EQ(c.over_limit_action, OverLimitAction::kLog);
  EXPECT_EQ(c.unattributed_action, UnattributedAction::kReport);
  EXPECT_FALSE(c.require_identity);
  EXPECT_EQ(c.daemon_loss_timeout, 2s);
  ASSERT_EQ(c.gpus.size(), 2u);
  EXPECT_EQ(c.gpus.at(0).policy, ArbiterPolicy::kWeightedPreemptive);
  EXPECT_EQ(c.gpus.at(0).max_inst, 8);
  EXPECT_FALSE(c.gpus.at(0).prio_ratio.has_value());
  EXPECT_EQ(c.gpus.at(1).policy, ArbiterPolicy::kNative);
  EXPECT_EQ(c.gpus.at(1).prio_ratio->value(), 80);
}

TEST(ParseDaemonConfig, AnEmptyFileGivesTheDefaults) {
  auto parsed = ParseDaemonConfig("# nothing set\n", "empty.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const DaemonConfig defaults;
  EXPECT_EQ(parsed->socket, defaults.socket);
  EXPECT_EQ(parsed->policy, defaults.policy);
  EXPECT_EQ(parsed->quota_max, defaults.quota_max);
  EXPECT_TRUE(parsed->http.empty());
  EXPECT_TRUE(parsed->gpus.empty());
}

TEST(ParseDaemonConfig, ReadsEveryKeyInItsOtherForms) {
  auto parsed = ParseDaemonConfig(
      "socket: \"/tmp/t.sock\"\n"
      "sim: yes\n"
      "ledger: /my-ledger\n"
      "allow_self_declared: off\n"
      "context_overhead: 300MiB\n"
      "policy: fixed-percentage\n"
      "max_inst: 256\n"
      "prio_ratio: 99\n"
      "quota_min: 100us\n"
      "quota_max: 1s\n"
      "default_memsize: 1.5GiB\n"
      "http: localhost:0\n"
      "ctl_mount: /mnt/ctl\n"
      "ctl_group: gpu-admins\n"
      "container_sockets: /var/run/tessera-c\n"
      "reconcile_interval: 100ms\n"
      "over_limit_action: KILL\n"
      "unattributed_action: Kill\n"
      "require_identity: yes\n"
      "daemon_loss_timeout: 90s\n"
      "max_request_line: 1KiB\n"
      "max_reply_backlog: 16MiB\n"
      "request_timeout: 100ms\n"
      "idle_timeout: 1h\n"
      "container_max_connections: 65536\n"
      "container_max_processes: 1024\n"
      "refusal_log_rate: 10000\n"
      "gpus:\n"
      "  3:\n"
      "    prio_ratio: 20\n",
      "all.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const DaemonConfig& c = *parsed;
  EXPECT_EQ(c.socket, "/tmp/t.sock");
  EXPECT_TRUE(c.sim);
  EXPECT_EQ(c.ledger, "/my-ledger");
  EXPECT_FALSE(c.allow_self_declared);
  EXPECT_EQ(c.context_overhead, MiB(300));
  EXPECT_EQ(c.policy, ArbiterPolicy::kFixedPercentage);
  EXPECT_EQ(c.max_inst, 256);
  EXPECT_EQ(c.prio_ratio.value(), 99);
  EXPECT_EQ(c.quota_min, 100us);
  EXPECT_EQ(c.quota_max, 1s);
  EXPECT_EQ(c.default_memsize, Bytes(GiB(1).count() + MiB(512).count()));
  EXPECT_EQ(c.http, "127.0.0.1:0");
  EXPECT_EQ(c.ctl_mount, "/mnt/ctl");
  EXPECT_EQ(c.admin_group, "gpu-admins");  // ctl_group is its other name
  EXPECT_EQ(c.socket_limits.max_request_line, Bytes(1024));
  EXPECT_EQ(c.socket_limits.max_reply_backlog, MiB(16));
  EXPECT_EQ(c.socket_limits.request_timeout, 100ms);
  EXPECT_EQ(c.socket_limits.idle_timeout, 1h);
  EXPECT_EQ(c.socket_limits.container_max_connections, 65536);
  EXPECT_EQ(c.socket_limits.container_max_processes, 1024);
  EXPECT_EQ(c.socket_limits.refusal_log_rate, 10000);
  EXPECT_EQ(c.container_sockets, "/var/run/tessera-c");
  EXPECT_EQ(c.reconcile_interval, 100ms);
  EXPECT_EQ(c.over_limit_action, OverLimitAction::kKill);
  EXPECT_EQ(c.unattributed_action, UnattributedAction::kKill);
  EXPECT_TRUE(c.require_identity);
  EXPECT_EQ(c.daemon_loss_timeout, 90s);
  ASSERT_EQ(c.gpus.count(3), 1u);
  EXPECT_FALSE(c.gpus.at(3).policy.has_value());
  EXPECT_EQ(c.gpus.at(3).prio_ratio->value(), 20);
}

struct BadConfig {
  const char* name;
  const char* text;
  const char* position;  // "LINE:COL" the error must start with (after the file name)
  const char* key;       // the key the message must name
  const char* fragment;  // and a piece of the reason
};

class ParseDaemonConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ParseDaemonConfigRejects, NamingLineAndKey) {
  const BadConfig& c = GetParam();
  auto parsed = ParseDaemonConfig(c.text, "/etc/tessera/tesserad.yaml");
  ASSERT_FALSE(parsed.ok()) << c.name;
  const std::string& message = parsed.error();
  const std::string head = std::string("/etc/tessera/tesserad.yaml:") + c.position + ": ";
  EXPECT_EQ(message.rfind(head, 0), 0u) << c.name << ": " << message;
  EXPECT_NE(message.find(c.key), std::string::npos) << c.name << ": " << message;
  EXPECT_NE(message.find(c.fragment), std::string::npos) << c.name << ": " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    EveryKey, ParseDaemonConfigRejects,
    ::testing::Values(
        BadConfig{"unknown_key", "sim: true\npolcy: 2\n", "2:1", "\"polcy\"",
                  "allowed keys: socket, sim, ledger"},
        BadConfig{"relative_socket", "socket: run/t.sock\n", "1:9", "socket=\"run/t.sock\"",
                  "not an absolute path"},
        BadConfig{"long_socket",
                  "socket: "
                  "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                  "1:9", "socket=", "too long for a Unix socket"},
        BadConfig{"bad_sim", "sim: maybe\n", "1:6", "sim=\"maybe\"", "not a flag"},
        BadConfig{"bad_ledger", "ledger: a/b\n", "1:9", "ledger=\"a/b\"", "\"/\" is not allowed"},
        BadConfig{"bad_self_declared", "\n\nallow_self_declared: 2\n", "3:22",
                  "allow_self_declared", "not a flag"},
        BadConfig{"bad_overhead", "context_overhead: lots\n", "1:19", "context_overhead=\"lots\"",
                  "or measure"},
        BadConfig{"bad_policy", "policy: 9\n", "1:9", "policy=\"9\"", "fair"},
        BadConfig{"max_inst_zero", "max_inst: 0\n", "1:11", "max_inst=\"0\"", "from 1 to 256"},
        BadConfig{"max_inst_big", "max_inst: 257\n", "1:11", "max_inst=\"257\"", "out of range"},
        BadConfig{"prio_ratio_low", "prio_ratio: 19\n", "1:13", "prio_ratio=\"19\"", "20 to 99"},
        BadConfig{"quota_min_low", "quota_min: 50us\n", "1:12", "quota_min=\"50us\"",
                  "from 100us to 1s"},
        BadConfig{"quota_max_high", "quota_max: 2s\n", "1:12", "quota_max=\"2s\"", "out of range"},
        BadConfig{"quota_no_unit", "quota_max: 20\n", "1:12", "quota_max=\"20\"", "missing unit"},
        BadConfig{"quota_order", "quota_min: 30ms\nquota_max: 10ms\n", "1:12", "quota_min=\"30ms\"",
                  "is larger than quota_max=\"10ms\""},
        BadConfig{"quota_min_above_default", "quota_min: 30ms\n", "1:12", "quota_min",
                  "quota_max=\"20ms\" (its default)"},
        BadConfig{"bad_memsize", "default_memsize: -1GiB\n", "1:18", "default_memsize=\"-1GiB\"",
                  "negative"},
        BadConfig{"bad_http", "http: 127.0.0.1\n", "1:7", "http=\"127.0.0.1\"",
                  "missing \":PORT\""},
        BadConfig{"bad_mount", "ctl_mount: ctl\n", "1:12", "ctl_mount=\"ctl\"",
                  "not an absolute path"},
        BadConfig{"bad_group", "ctl_group: 9x\n", "1:12", "ctl_group=\"9x\"", "starts with"},
        BadConfig{"bad_admin_group", "admin_group: a b\n", "1:14", "admin_group=\"a b\"",
                  "not allowed"},
        BadConfig{"both_group_names", "admin_group: a\nctl_group: b\n", "2:1", "ctl_group",
                  "two names of one setting"},
        BadConfig{"line_too_short", "max_request_line: 100B\n", "1:19", "max_request_line=\"100B\"",
                  "from 1KiB to 64KiB"},
        BadConfig{"backlog_below_a_reply", "max_reply_backlog: 1KiB\n", "1:20",
                  "max_reply_backlog=\"1KiB\"", "from 64KiB to 16MiB"},
        BadConfig{"request_timeout_high", "request_timeout: 2m\n", "1:18", "request_timeout",
                  "from 100ms to 1m"},
        BadConfig{"idle_timeout_no_unit", "idle_timeout: 60\n", "1:15", "idle_timeout=\"60\"",
                  "missing unit"},
        BadConfig{"connections_zero", "container_max_connections: 0\n", "1:28",
                  "container_max_connections=\"0\"", "from 1 to 65536"},
        BadConfig{"processes_big", "container_max_processes: 1025\n", "1:26",
                  "container_max_processes=\"1025\"", "out of range"},
        BadConfig{"fewer_connections_than_processes", "container_max_connections: 64\n", "1:28",
                  "container_max_connections=\"64\"", "less than container_max_processes=\"128\""},
        BadConfig{"log_rate_zero", "refusal_log_rate: 0\n", "1:19", "refusal_log_rate=\"0\"",
                  "from 1 to 10000"},
        BadConfig{"bad_interval", "reconcile_interval: 50ms\n", "1:21", "reconcile_interval",
                  "from 100ms to 10s"},
        BadConfig{"bad_action", "over_limit_action: warn\n", "1:20", "over_limit_action=\"warn\"",
                  "log, block or kill"},
        BadConfig{"bad_unattributed", "unattributed_action: block\n", "1:22",
                  "unattributed_action=\"block\"", "report or kill"},
        BadConfig{"bad_identity", "require_identity: maybe\n", "1:19", "require_identity", "maybe"},
        BadConfig{"bad_loss", "daemon_loss_timeout: 0s\n", "1:22", "daemon_loss_timeout",
                  "from 1ms to 10m"},
        BadConfig{"no_value", "policy:\n", "1:1", "policy", "has no value"},
        BadConfig{"no_value_flow", "{sim: true, policy: }\n", "1:13", "policy", "has no value"},
        BadConfig{"list_value", "policy: [1, 2]\n", "1:9", "policy", "not a sequence"},
        BadConfig{"mapping_value", "sim:\n  a: 1\n", "2:3", "sim", "not a mapping"},
        BadConfig{"top_level_list", "- a\n", "1:1", "mapping of keys", "not a sequence"},
        BadConfig{"gpus_not_mapping", "gpus: [0, 1]\n", "1:7", "gpus", "expected a mapping"},
        BadConfig{"gpu_index_text", "gpus:\n  first:\n    policy: 1\n", "2:3", "gpus key=\"first\"",
                  "GPU index from 0 to 63"},
        BadConfig{"gpu_index_big", "gpus:\n  64:\n    policy: 1\n", "2:3", "gpus key=\"64\"",
                  "out of range"},
        BadConfig{"gpu_index_twice", "gpus:\n  1:\n    policy: 1\n  01:\n    policy: 2\n", "4:3",
                  "gpus", "GPU 1 appears twice"},
        BadConfig{"gpu_not_mapping", "gpus:\n  0: 2\n", "2:6", "gpus.0", "expected a mapping"},
        BadConfig{"gpu_unknown_key", "gpus:\n  0:\n    weight: 2\n", "3:5", "\"weight\" in gpus.0",
                  "allowed keys: policy, max_inst, prio_ratio"},
        BadConfig{"gpu_bad_policy", "gpus:\n  0:\n    policy: strict\n", "3:13",
                  "gpus.0.policy=\"strict\"", "unknown policy"},
        BadConfig{"gpu_bad_max_inst", "gpus:\n  2:\n    max_inst: 1000\n", "3:15",
                  "gpus.2.max_inst=\"1000\"", "out of range"},
        BadConfig{"gpu_bad_prio", "gpus:\n  0:\n    prio_ratio: 100\n", "3:17",
                  "gpus.0.prio_ratio=\"100\"", "20 to 99"},
        BadConfig{"duplicate_key", "policy: 1\npolicy: 2\n", "2:1", "\"policy\"", "duplicate key"},
        BadConfig{"duplicate_flow_key", "gpus: {0: {policy: 1, policy: 2}}\n", "1:23",
                  "\"policy\" in gpus.0", "duplicate key"},
        // yaml-cpp's own syntax errors keep their position.
        BadConfig{"unclosed_flow", "gpus: {0: {policy: 2}\nsim: true\n", "2:1", "not valid YAML",
                  "end of map flow not found"},
        BadConfig{"unknown_anchor", "policy: *fast\n", "1:9", "not valid YAML", "anchor"},
        BadConfig{"tab_indent", "gpus:\n\t0:\n", "2:3", "not valid YAML", "illegal map value"},
        BadConfig{"second_document", "policy: 1\n---\npolicy: 2\n", "2:1", "second YAML document",
                  "holds one"},
        // yaml-cpp's LoadAll never returned on this one (found by fuzz_yaml_config).
        BadConfig{"leading_comma", ", max_inst: 8}\n", "1:1", "not valid YAML",
                  "nothing can be read"},
        BadConfig{"sequence_key", "? [a, b]\n: 1\n", "1:3", "a key", "not a sequence"},
        // Flow style and aliases are checked like any other value, at their own position.
        BadConfig{"flow_bad_policy", "gpus: {0: {policy: strict}}\n", "1:20",
                  "gpus.0.policy=\"strict\"", "unknown policy"},
        BadConfig{"flow_unknown_key", "gpus: {3: {weight: 2}}\n", "1:12", "\"weight\" in gpus.3",
                  "allowed keys: policy, max_inst, prio_ratio"},
        BadConfig{"alias_bad_value", "a: &x 300\n", "1:1", "\"a\"", "allowed keys"},
        BadConfig{"block_scalar_two_lines", "policy: |\n  2\n  3\n", "1:9", "policy=\"2\\x0a3\"",
                  "expected"},
        BadConfig{"top_level_scalar", "just text\n", "1:1", "mapping of keys",
                  "not a single value"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return std::string(info.param.name); });

// YAML 1.2 the old subset parser refused, each loading to the same settings as its block-style
// equivalent: policy 2 on GPU 0 with max_inst 8, policy 5 on GPU 1, socket /run/t/t.sock.
struct GoodConfig {
  const char* name;
  const char* text;
};

class ParseDaemonConfigAccepts : public ::testing::TestWithParam<GoodConfig> {};

TEST_P(ParseDaemonConfigAccepts, TheSameSettings) {
  const GoodConfig& c = GetParam();
  auto parsed = ParseDaemonConfig(c.text, "good.yaml");
  ASSERT_TRUE(parsed.ok()) << c.name << ": " << parsed.error();
  EXPECT_EQ(parsed->socket, "/run/t/t.sock") << c.name;
  ASSERT_EQ(parsed->gpus.size(), 2u) << c.name;
  EXPECT_EQ(parsed->gpus.at(0).policy, ArbiterPolicy::kWeightedPreemptive) << c.name;
  EXPECT_EQ(parsed->gpus.at(0).max_inst, 8) << c.name;
  EXPECT_EQ(parsed->gpus.at(1).policy, ArbiterPolicy::kNative) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Yaml12, ParseDaemonConfigAccepts,
    ::testing::Values(
        GoodConfig{"block_style",  // the reference
                   "socket: /run/t/t.sock\ngpus:\n  0:\n    policy: 2\n    max_inst: 8\n"
                   "  1:\n    policy: 5\n"},
        GoodConfig{
            "flow_mapping_top",
            "{socket: /run/t/t.sock, gpus: {0: {policy: 2, max_inst: 8}, 1: {policy: 5}}}\n"},
        GoodConfig{"flow_mapping_nested",
                   "socket: /run/t/t.sock\ngpus: {0: {policy: weighted-preemptive, max_inst: 8},\n"
                   "       1: {policy: native}}\n"},
        GoodConfig{"json", R"({"socket": "/run/t/t.sock", "gpus": {"0": {"policy": "2",
                   "max_inst": 8}, "1": {"policy": 5}}})"},
        GoodConfig{
            "literal_block_scalar",
            "socket: |\n  /run/t/t.sock\ngpus:\n  0:\n    policy: |-\n      2\n    max_inst: |\n"
            "      8\n  1: {policy: 5}\n"},
        GoodConfig{
            "folded_block_scalar",
            "socket: >\n  /run/t/t.sock\n\ngpus:\n  0:\n    policy: >-\n      weighted-preemptive\n"
            "    max_inst: 8\n  1: {policy: 5}\n"},
        GoodConfig{
            "anchor_and_alias_on_values",
            "socket: &s /run/t/t.sock\ngpus:\n  0: &weighted\n    policy: 2\n    max_inst: 8\n"
            "  1: {policy: 5}\nctl_mount: *s\n"},
        GoodConfig{"value_on_the_next_line",
                   "socket:\n  /run/t/t.sock\ngpus:\n  0:\n    policy:\n      2\n    max_inst: 8\n"
                   "  1: {policy: 5}\n"},
        GoodConfig{"multi_line_quoted_string",
                   "socket: \"/run/t/\\\n  t.sock\"\ngpus: {0: {policy: \"weighted-\\\n"
                   "  preemptive\", max_inst: 8}, 1: {policy: 5}}\n"},
        GoodConfig{"tags",
                   "socket: !!str /run/t/t.sock\ngpus:\n  !!int 0: {policy: !!int 2, "
                   "max_inst: !!int 8}\n  1: !!map {policy: 5}\n"},
        GoodConfig{"comments_anywhere",
                   "# head\nsocket: /run/t/t.sock # after a value\ngpus: { # in a flow mapping\n"
                   "  0: {policy: 2, max_inst: 8}, # between entries\n  1: {policy: 5}\n} # end\n"},
        GoodConfig{"document_markers",
                   "%YAML 1.2\n---\nsocket: /run/t/t.sock\ngpus: {0: {policy: 2, max_inst: 8}, "
                   "1: {policy: 5}}\n...\n"},
        GoodConfig{"explicit_keys",
                   "? socket\n: /run/t/t.sock\n? gpus\n: {0: {policy: 2, "
                   "max_inst: 8}, 1: {policy: 5}}\n"},
        GoodConfig{"single_quotes_and_crlf",
                   "socket: '/run/t/t.sock'\r\ngpus:\r\n  '0': {policy: '2', max_inst: '8'}\r\n"
                   "  \"1\": {policy: \"5\"}\r\n"}),
    [](const ::testing::TestParamInfo<GoodConfig>& info) { return std::string(info.param.name); });

TEST(ParseDaemonConfig, AnAliasReusesAMapping) {
  auto parsed = ParseDaemonConfig(
      "gpus:\n  0: &weighted {policy: weighted-preemptive, max_inst: 8}\n  1: *weighted\n"
      "quota_min: &q 5ms\nquota_max: *q\n",
      "alias.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  ASSERT_EQ(parsed->gpus.size(), 2u);
  for (int gpu : {0, 1}) {
    EXPECT_EQ(parsed->gpus.at(gpu).policy, ArbiterPolicy::kWeightedPreemptive) << gpu;
    EXPECT_EQ(parsed->gpus.at(gpu).max_inst, 8) << gpu;
  }
  EXPECT_EQ(parsed->quota_min, 5ms);
  EXPECT_EQ(parsed->quota_max, 5ms);
}

TEST(LoadDaemonConfig, NamesAMissingFile) {
  auto loaded = LoadDaemonConfig("/nonexistent/tessera/tesserad.yaml");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error(),
            "config file \"/nonexistent/tessera/tesserad.yaml\": cannot open: No such file or "
            "directory");
}

TEST(LoadDaemonConfig, RefusesAHugeFile) {
  const std::string path = ::testing::TempDir() + "/tessera_huge_config.yaml";
  {
    std::ofstream out(path);
    const std::string line = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 1100; ++i) out << line;
  }
  auto loaded = LoadDaemonConfig(path);
  std::remove(path.c_str());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().find("larger than 1048576 bytes"), std::string::npos) << loaded.error();
}

TEST(LoadDaemonConfig, ErrorsCarryThePathGiven) {
  const std::string path = ::testing::TempDir() + "/tessera_bad_config.yaml";
  {
    std::ofstream out(path);
    out << "# comment\nmax_inst: 0\n";
  }
  auto loaded = LoadDaemonConfig(path);
  std::remove(path.c_str());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().rfind(path + ":2:11: max_inst=\"0\"", 0), 0u) << loaded.error();
}

}  // namespace
}  // namespace tessera::config
