// tesserad's command line (CLI11), its environment and its config file merged into one validated
// DaemonSettings. Reads; applies nothing.
#include "config/daemon_settings.h"

#include <grp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string_view>
#include <tuple>

#include "cmdline/cmdline.h"
#include "core/bool_flag.h"
#include "core/bytes.h"
#include "core/duration.h"
#include "core/number.h"
#include "core/percent.h"

namespace tessera::config {
namespace {

// The value of `all` whose name (`name_of`) is `text`, exactly, into *out; false when none is.
template <typename E>
bool ByName(const std::string& text, std::initializer_list<E> all, std::string_view (*name_of)(E),
            E* out) {
  for (E value : all) {
    if (text == name_of(value)) {
      *out = value;
      return true;
    }
  }
  return false;
}

// --max-request-line for max_request_line, and so on.
std::string FlagOf(const std::string& key) {
  std::string flag = "--" + key;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// The group's id, or an error naming the input and the group.
Result<gid_t> LookUpGroup(const std::string& name, const std::string& input) {
  std::vector<char> buf(16384);
  group g{};
  group* found = nullptr;
  if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return Result<gid_t>::Error(input + "=\"" + name +
                                "\": no such group on this node; expected a group name from "
                                "/etc/group");
  }
  return found->gr_gid;
}

// The command line over the file's settings in `s` (the file, if any, already read into s->node).
Status ApplyFlags(const DaemonFlags& flags, DaemonSettings* s) {
  DaemonConfig& n = s->node;
  bool policy_given = false;
  if (flags.socket) n.socket = *flags.socket;
  if (flags.ledger) n.ledger = *flags.ledger;
  if (flags.context_overhead) {
    if (*flags.context_overhead == "measure") {
      n.context_overhead.reset();
    } else {
      auto parsed = ParseBytes(*flags.context_overhead, "--context-overhead");
      if (!parsed.ok()) return Status::Error(parsed.error() + " (or measure)");
      n.context_overhead = *parsed;
    }
  }
  for (const auto& [flag, value, out] : {std::tuple{"--ctl-mount", &flags.ctl_mount, &n.ctl_mount},
                                         {"--admin-group", &flags.admin_group, &n.admin_group},
                                         {"--http", &flags.http, &n.http}}) {
    if (!*value) continue;
    if ((*value)->empty()) return Status::Error(std::string(flag) + " needs a value");
    *out = **value;
  }
  if (flags.http) s->http_input = "--http";
  if (flags.container_sockets) {
    if (flags.container_sockets->empty() || (*flags.container_sockets)[0] != '/') {
      return Status::Error("--container-sockets \"" + *flags.container_sockets +
                           "\": expected an absolute directory");
    }
    n.container_sockets = *flags.container_sockets;
  }
  s->http_allow_write = flags.http_allow_write;
  n.sim = n.sim || flags.sim;
  s->ephemeral = flags.ephemeral;
  // A node-wide flag overrides the config file's per-GPU value of that setting as well.
  if (flags.policy) {
    auto p = ParseArbiterPolicy(*flags.policy, "--policy");
    if (!p.ok()) return p.status();
    n.policy = *p;
    policy_given = true;
    for (auto& [gpu, o] : n.gpus) o.policy.reset();
  }
  s->mps = flags.mps;
  if (flags.mps_gpus && *flags.mps_gpus == "none") {
    s->mps = true;
    s->mps_none = true;
  } else if (flags.mps_gpus) {
    auto list = ParseGpuIndexList(*flags.mps_gpus, "--mps-gpus");
    if (!list.ok()) return Status::Error(list.error() + "; or none (MPS allowed, on no GPU yet)");
    s->mps = true;
    s->mps_gpus = std::move(*list);
  }
  for (const auto& [flag, value, out] :
       {std::tuple{"--mps-control", &flags.mps_control, &s->mps_control},
        {"--mps-dir", &flags.mps_dir, &s->mps_dir}}) {
    if (!*value) continue;
    if ((*value)->empty() || (**value)[0] != '/') {
      return Status::Error(std::string(flag) + " \"" + **value + "\": expected an absolute path");
    }
    *out = **value;
  }
  if (flags.max_inst) {
    auto number = ParseUnsigned(*flags.max_inst, "--max-inst", 1, 256);
    if (!number.ok()) return number.status();
    n.max_inst = static_cast<int>(*number);
    for (auto& [gpu, o] : n.gpus) o.max_inst.reset();
  }
  if (flags.prio_ratio) {
    auto p = ParsePercent(*flags.prio_ratio, "--prio-ratio", 20, 99);
    if (!p.ok()) return p.status();
    n.prio_ratio = *p;
    for (auto& [gpu, o] : n.gpus) o.prio_ratio.reset();
  }
  // Milliseconds, fractions allowed (0.5 = 500 us).
  for (const auto& [flag, value, out] :
       {std::tuple{"--quota-min", &flags.quota_min, &n.quota_min},
        {"--quota-max", &flags.quota_max, &n.quota_max},
        {"--daemon-loss-timeout", &flags.daemon_loss_timeout, &n.daemon_loss_timeout}}) {
    if (!*value) continue;
    const std::string& v = **value;
    char* end = nullptr;
    const double ms = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(ms > 0) || ms > 600000) {
      return Status::Error(std::string(flag) + " \"" + v +
                           "\": expected milliseconds, e.g. 2 or 0.5 (at most 600000)");
    }
    *out = std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6));
  }
  // One GPU's policy, overriding --policy and the config file: INDEX:POLICY, e.g. 1:5.
  for (const std::string& text : flags.gpu_policy) {
    const size_t colon = text.find(':');
    auto index = ParseUnsigned(text.substr(0, colon), "--gpu-policy GPU index", 0, 15);
    auto policy = colon == std::string::npos
                      ? Result<ArbiterPolicy>::Error("no \":\"")
                      : ParseArbiterPolicy(text.substr(colon + 1), "--gpu-policy");
    if (!index.ok() || !policy.ok()) {
      return Status::Error("--gpu-policy \"" + text + "\": expected GPU:POLICY, e.g. 1:5 (" +
                           (index.ok() ? policy.error() : index.error()) + ")");
    }
    s->gpu_policies.emplace_back(static_cast<int>(*index), *policy);
  }
  if (flags.reconcile_interval) {
    auto d = ParseDuration(*flags.reconcile_interval, "--reconcile-interval",
                           std::chrono::milliseconds(100), std::chrono::seconds(10));
    if (!d.ok()) return d.status();
    n.reconcile_interval = *d;
  }
  if (flags.over_limit_action &&
      !ByName(*flags.over_limit_action,
              {OverLimitAction::kLog, OverLimitAction::kBlock, OverLimitAction::kKill},
              OverLimitActionName, &n.over_limit_action)) {
    return Status::Error("--over-limit-action \"" + *flags.over_limit_action +
                         "\": expected log, block or kill");
  }
  if (flags.unattributed_action &&
      !ByName(*flags.unattributed_action, {UnattributedAction::kReport, UnattributedAction::kKill},
              UnattributedActionName, &n.unattributed_action)) {
    return Status::Error("--unattributed-action \"" + *flags.unattributed_action +
                         "\": expected report or kill");
  }
  for (const auto& [flag, value, out] :
       {std::tuple{"--require-identity", &flags.require_identity, &n.require_identity},
        {"--allow-self-declared", &flags.allow_self_declared, &n.allow_self_declared}}) {
    if (!*value) continue;
    auto parsed = ParseBoolFlag(**value, flag);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed;
  }
  s->policy_without_mps = n.policy;
  if (s->mps && !policy_given) {
    // MPS runs clients' kernels side by side; slicing GPU time would undo that. Memory isolation
    // stays (policy 5); an explicit --policy or --gpu-policy still wins. With --mps-gpus, only
    // those GPUs (a GPU MPSGPUS adds later gets policy 5 then).
    if (s->mps_gpus.empty() && !s->mps_none) {
      n.policy = ArbiterPolicy::kNative;
    } else {
      for (int gpu : s->mps_gpus) n.gpus[gpu].policy = ArbiterPolicy::kNative;
    }
  }
  for (const auto& [key, value] : flags.socket_limits) {
    if (!value) continue;
    auto parsed = ParseSocketLimit(key, *value, FlagOf(key), &n.socket_limits);
    if (!parsed.ok()) return parsed.status();
  }
  if (Status limits = CheckSocketLimits(n.socket_limits); !limits.ok()) return limits;
  if (!n.admin_group.empty()) {
    const std::string input = flags.admin_group || s->config_path.empty()
                                  ? "--admin-group"
                                  : s->config_path + ": admin_group";
    auto gid = LookUpGroup(n.admin_group, input);
    if (!gid.ok()) return gid.status();
    s->admin_gid = *gid;
  }
  if (n.socket.empty() || n.socket[0] != '/' || n.socket.size() > 107) {
    return Status::Error("--socket \"" + n.socket +
                         "\": expected an absolute path of at most 107 bytes");
  }
  if (n.ledger.empty()) {
    n.ledger = DerivedLedgerName(n.socket);
  } else if (n.ledger[0] != '/') {
    n.ledger = "/" + n.ledger;
  }
  return Status::Ok();
}

// The libraries tesserad loads, from the environment (docs/contracts.md), when not simulated.
void ApplyEnvironment(const Environment& env, DaemonSettings* s) {
  auto path = [&env](const char* name, const char* fallback) {
    const char* value = env(name);
    return std::string(value != nullptr && *value != '\0' ? value : fallback);
  };
  if (s->node.sim) return;
  s->nvml_library = path("TESSERA_REAL_NVML", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  s->cuda_library = path("TESSERA_REAL_LIBCUDA", "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
}

}  // namespace

Result<std::set<int>> ParseGpuIndexList(const std::string& text, const char* flag) {
  using Out = Result<std::set<int>>;
  const std::string allowed = "expected GPU indices 0-" + std::to_string(kMaxConfigGpuIndex) +
                              " and ranges, comma-separated, e.g. 0-3 or 0,2,5-7";
  std::set<int> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const size_t dash = item.find('-');
    const bool plain =
        item.find_first_not_of("0123456789-") == std::string::npos && item.size() <= 7;
    auto first = !plain ? Result<uint64_t>::Error("")
                        : ParseUnsigned(item.substr(0, dash), flag, 0, kMaxConfigGpuIndex);
    auto last = dash == std::string::npos
                    ? first
                    : ParseUnsigned(item.substr(dash + 1), flag, 0, kMaxConfigGpuIndex);
    if (!first.ok() || !last.ok() || *last < *first) {
      return Out::Error(std::string(flag) + " \"" + text + "\": \"" + item +
                        "\" is no GPU index or range; " + allowed);
    }
    for (uint64_t i = *first; i <= *last; ++i) out.insert(static_cast<int>(i));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

std::optional<int> ParseDaemonCommandLine(int argc, char** argv, const std::string& version,
                                          DaemonFlags* flags) {
  CLI::App app{
      "tesserad: the Tessera node daemon. Keeps the node's GPU memory ledger, arbitrates "
      "GPU time, serves the control tree (socket, FUSE, HTTP) and /metrics.",
      "tesserad"};
  app.set_version_flag("--version", version);
  app.footer("Flags given on the command line override --config's keys, whatever their order.");
  auto option = [&app](const char* name, std::optional<std::string>* out, const char* type,
                       const char* help) { app.add_option(name, *out, help)->type_name(type); };
  option("--config", &flags->config, "FILE", "YAML config file (deploy/tesserad.yaml)");
  option("--socket", &flags->socket, "PATH", "the Unix socket (default /run/tessera/tessera.sock)");
  app.add_flag("--sim", flags->sim, "use the simulated GPU (libtessera-simgpu.so)");
  option("--allow-self-declared", &flags->allow_self_declared, "true|false",
         "accept limits processes declare themselves (default true)");
  option("--ledger", &flags->ledger, "NAME",
         "shared-memory ledger (default: from the socket path)");
  app.add_flag("--ephemeral", flags->ephemeral, "remove the ledger at exit");
  option("--context-overhead", &flags->context_overhead, "SIZE|measure",
         "GPU memory charged per process for its context (default measure)");
  option("--policy", &flags->policy, "0-5|NAME", "arbiter policy of every GPU (default 0 fair)");
  option("--max-inst", &flags->max_inst, "1-256", "slots and weight units per GPU (default 16)");
  option("--prio-ratio", &flags->prio_ratio, "20-99", "high-priority lane cap, percent (50)");
  option("--quota-min", &flags->quota_min, "MS", "shortest compute grant, ms (default 2)");
  option("--quota-max", &flags->quota_max, "MS", "longest compute grant, ms (default 20)");
  option("--daemon-loss-timeout", &flags->daemon_loss_timeout, "MS",
         "processes run ungated after this long without the arbiter (default 2000)");
  app.add_option("--gpu-policy", flags->gpu_policy, "one GPU's policy; repeatable")
      ->type_name("GPU:POLICY")
      ->allow_extra_args(false);  // one value per --gpu-policy
  option("--ctl-mount", &flags->ctl_mount, "DIR", "mount the control tree here with FUSE");
  option("--admin-group,--ctl-group", &flags->admin_group, "NAME",
         "group that administers the daemon besides root and its own user: control-tree writes "
         "and CONTAINER on the node socket");
  option("--http", &flags->http, "HOST:PORT", "serve /v1/ctl, /v1/state and /metrics here");
  app.add_flag("--http-allow-write", flags->http_allow_write, "serve PUT /v1/ctl/ over HTTP");
  option("--reconcile-interval", &flags->reconcile_interval, "100ms-10s",
         "how often NVML's view is compared with the ledger (default 1s)");
  option("--over-limit-action", &flags->over_limit_action, "log|block|kill",
         "what to do about a container over its limit (default log)");
  option("--unattributed-action", &flags->unattributed_action, "report|kill",
         "what to do about a process on a GPU that belongs to no container (default report)");
  option("--container-sockets", &flags->container_sockets, "DIR",
         "one socket per registered container in DIR");
  option("--require-identity", &flags->require_identity, "true|false",
         "a container's socket serves only processes identified as its own (default false)");
  option("--mps-gpus", &flags->mps_gpus, "LIST|none",
         "MPS on these GPUs only at start, e.g. 0-3 or 0,2,5-7 (device indices), or none; "
         "implies --mps; the device plugin changes the set (MPSGPUS) as GPUs' labels ask");
  app.add_flag("--mps", flags->mps,
               "MPS mode: run and supervise one nvidia-cuda-mps-control per GPU (policy 5 unless "
               "--policy is given)");
  option("--mps-control", &flags->mps_control, "PATH",
         "the MPS control program (default /usr/bin/nvidia-cuda-mps-control)");
  option("--mps-dir", &flags->mps_dir, "DIR",
         "MPS pipe and log directories go under DIR (default /run/tessera/mps)");
  const std::map<std::string, std::pair<const char*, const char*>> limit_help = {
      {"max_request_line", {"SIZE", "longest request line (default 8KiB)"}},
      {"max_reply_backlog", {"SIZE", "reply bytes held for a client not reading (256KiB)"}},
      {"request_timeout", {"DURATION", "a request must arrive whole, a reply be taken (5s)"}},
      {"idle_timeout", {"DURATION", "close a connection with no process after (60s)"}},
      {"container_max_connections", {"N", "connections per container socket (256)"}},
      {"container_max_processes", {"N", "registered processes per container (128)"}},
      {"refusal_log_rate", {"N", "refusal lines logged a second, at most (10)"}}};
  for (const char* key : kSocketLimitKeys) {
    const auto& [type, help] = limit_help.at(key);
    app.add_option(FlagOf(key), flags->socket_limits[key], help)->type_name(type);
  }
  return cmdline::Parse(app, argc, argv);
}

Environment ProcessEnvironment() {
  return [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
}

DaemonSetup ResolveDaemonSettings(const DaemonFlags& flags, const Environment& env) {
  DaemonSetup setup;
  DaemonSettings s;
  // The file first, so every flag on the command line overrides it whatever their order.
  if (flags.config) {
    s.config_path = *flags.config;
    auto loaded = LoadDaemonConfig(s.config_path);
    if (!loaded.ok()) {
      setup.settings = loaded.status();
      return setup;
    }
    s.node = std::move(*loaded);
    if (!s.node.http.empty()) s.http_input = s.config_path + ": http";
    setup.loaded_config = true;
  }
  // TESSERA_SIM_GPUS set means simulated GPUs, whatever the file says (the flag can only add).
  s.node.sim = s.node.sim || env("TESSERA_SIM_GPUS") != nullptr;
  if (Status applied = ApplyFlags(flags, &s); !applied.ok()) {
    setup.usage_error = true;
    setup.settings = applied;
    return setup;
  }
  ApplyEnvironment(env, &s);
  setup.settings = std::move(s);
  return setup;
}

std::string DerivedLedgerName(const std::string& socket_path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : socket_path) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/tessera-ledger-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace tessera::config
