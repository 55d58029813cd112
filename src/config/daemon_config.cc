// Loading DaemonConfig: the YAML tree from config/yaml.h checked key by key with the value parsers
// of src/core. Reads the one file it is given; applies nothing.
#include "config/daemon_config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "config/yaml.h"
#include "core/bool_flag.h"
#include "core/duration.h"
#include "core/host_port.h"
#include "core/number.h"
#include "core/path.h"
#include "core/text.h"

namespace tessera::config {
namespace {

using std::chrono::nanoseconds;

constexpr size_t kMaxLedgerNameBytes = 200;
constexpr size_t kMaxGroupNameBytes = 32;

// Loads one document into a DaemonConfig; stops at the first error.
class Loader {
 public:
  explicit Loader(std::string_view file_name) : file_(file_name) {}

  Result<DaemonConfig> Run(const YamlNode& root) {
    if (root.kind == YamlNode::Kind::kNull) {
      return config_;  // an empty file: every default
    }
    if (root.kind != YamlNode::Kind::kMapping) {
      return Fail(root.mark, "the file must be a mapping of keys such as \"policy: 2\", not a " +
                                 std::string(YamlKindName(root.kind)));
    }
    for (const YamlEntry& entry : root.entries) {
      if (Status status = LoadKey(entry); !status.ok()) {
        return status;
      }
    }
    if (config_.quota_min > config_.quota_max) {
      const Mark mark = quota_min_mark_.line != 0 ? quota_min_mark_ : quota_max_mark_;
      return Fail(mark, "quota_min=\"" + FormatDuration(config_.quota_min) +
                            "\" is larger than quota_max=\"" + FormatDuration(config_.quota_max) +
                            "\"" + (quota_max_mark_.line == 0 ? " (its default)" : "") +
                            "; expected quota_min <= quota_max");
    }
    return config_;
  }

 private:
  Status Fail(Mark mark, std::string_view message) const {
    return Status::Error(std::string(file_) + ":" + std::to_string(mark.line) + ":" +
                         std::to_string(mark.column) + ": " + std::string(message));
  }

  // The scalar text of `value` for the key `name`, or an error when it is not a scalar.
  Result<std::string> Scalar(const YamlNode& value, std::string_view name) const {
    if (value.kind == YamlNode::Kind::kScalar) {
      return value.scalar;
    }
    if (value.kind == YamlNode::Kind::kNull) {
      return Fail(value.mark, std::string(name) + " has no value; remove the key to keep its "
                                                  "default");
    }
    return Fail(value.mark, std::string(name) + ": expected a single value, not a " +
                                std::string(YamlKindName(value.kind)));
  }

  // Parses the scalar of `value` with `parse`; a parse error gets the value's position.
  template <typename T, typename Parse>
  Status Read(const YamlNode& value, std::string_view name, Parse parse, T* out) {
    Result<std::string> text = Scalar(value, name);
    if (!text.ok()) {
      return text.status();
    }
    auto parsed = parse(*text, name);
    if (!parsed.ok()) {
      return Fail(value.mark, parsed.error());
    }
    *out = std::move(parsed).value();
    return Status::Ok();
  }

  Status LoadKey(const YamlEntry& entry) {
    const std::string& key = entry.key;
    const YamlNode& v = entry.value;
    if (key == "socket") return Read(v, key, ParseSocketPath, &config_.socket);
    if (key == "sim") return Read(v, key, ParseBoolFlag, &config_.sim);
    if (key == "ledger") return Read(v, key, ParseLedgerName, &config_.ledger);
    if (key == "allow_self_declared") {
      return Read(v, key, ParseBoolFlag, &config_.allow_self_declared);
    }
    if (key == "context_overhead") {
      return Read(v, key, ParseContextOverhead, &config_.context_overhead);
    }
    if (key == "policy") return Read(v, key, ParseArbiterPolicy, &config_.policy);
    if (key == "max_inst") return Read(v, key, ParseMaxInst, &config_.max_inst);
    if (key == "prio_ratio") return Read(v, key, ParsePrioRatio, &config_.prio_ratio);
    if (key == "quota_min") {
      quota_min_mark_ = v.mark;
      return Read(v, key, ParseQuota, &config_.quota_min);
    }
    if (key == "quota_max") {
      quota_max_mark_ = v.mark;
      return Read(v, key, ParseQuota, &config_.quota_max);
    }
    if (key == "default_memsize") return Read(v, key, ParseBytes, &config_.default_memsize);
    if (key == "http") return Read(v, key, ParseHttp, &config_.http);
    if (key == "ctl_mount") return Read(v, key, ParseDirectoryPath, &config_.ctl_mount);
    if (key == "container_sockets") {
      return Read(v, key, ParseDirectoryPath, &config_.container_sockets);
    }
    if (key == "ctl_group") return Read(v, key, ParseGroupName, &config_.ctl_group);
    if (key == "reconcile_interval") {
      return Read(v, key, ParseReconcileInterval, &config_.reconcile_interval);
    }
    if (key == "over_limit_action") {
      return Read(v, key, ParseOverLimitAction, &config_.over_limit_action);
    }
    if (key == "daemon_loss_timeout") {
      return Read(v, key, ParseDaemonLossTimeout, &config_.daemon_loss_timeout);
    }
    if (key == "gpus") return LoadGpus(v);
    return Fail(entry.key_mark,
                "unknown key " + QuoteValue(key) +
                    "; allowed keys: socket, sim, ledger, allow_self_declared, context_overhead, "
                    "policy, max_inst, prio_ratio, quota_min, quota_max, default_memsize, http, "
                    "ctl_mount, ctl_group, container_sockets, reconcile_interval, over_limit_action, "
                    "daemon_loss_timeout, gpus");
  }

  Status LoadGpus(const YamlNode& gpus) {
    if (gpus.kind == YamlNode::Kind::kNull) {
      return Status::Ok();  // "gpus:" with nothing under it: no overrides
    }
    if (gpus.kind != YamlNode::Kind::kMapping) {
      return Fail(gpus.mark, "gpus: expected a mapping from GPU index to overrides, such as "
                             "\"0: {policy: 2}\" written as a block, not a " +
                                 std::string(YamlKindName(gpus.kind)));
    }
    for (const YamlEntry& gpu : gpus.entries) {
      auto index = ParseUnsigned(gpu.key, "gpus key", 0, kMaxConfigGpuIndex,
                                 "a GPU index from 0 to " + std::to_string(kMaxConfigGpuIndex));
      if (!index.ok()) {
        return Fail(gpu.key_mark, index.error());
      }
      const int i = static_cast<int>(*index);
      if (config_.gpus.count(i) != 0) {
        return Fail(gpu.key_mark, "gpus: GPU " + std::to_string(i) + " appears twice (as \"" +
                                      gpu.key + "\" and another spelling of the same index)");
      }
      const std::string prefix = "gpus." + std::to_string(i);
      if (gpu.value.kind != YamlNode::Kind::kMapping) {
        return Fail(gpu.value.mark, prefix + ": expected a mapping of policy, max_inst and "
                                             "prio_ratio, not a " +
                                        std::string(YamlKindName(gpu.value.kind)));
      }
      GpuOverrides overrides;
      for (const YamlEntry& entry : gpu.value.entries) {
        const std::string name = prefix + "." + entry.key;
        Status status = Status::Ok();
        if (entry.key == "policy") {
          ArbiterPolicy policy{};
          status = Read(entry.value, name, ParseArbiterPolicy, &policy);
          overrides.policy = policy;
        } else if (entry.key == "max_inst") {
          int max_inst = 0;
          status = Read(entry.value, name, ParseMaxInst, &max_inst);
          overrides.max_inst = max_inst;
        } else if (entry.key == "prio_ratio") {
          Percent ratio;
          status = Read(entry.value, name, ParsePrioRatio, &ratio);
          overrides.prio_ratio = ratio;
        } else {
          return Fail(entry.key_mark, "unknown key " + QuoteValue(entry.key) + " in " + prefix +
                                          "; allowed keys: policy, max_inst, prio_ratio");
        }
        if (!status.ok()) {
          return status;
        }
      }
      config_.gpus[i] = overrides;
    }
    return Status::Ok();
  }

  // The reason a ledger or group name is refused for its first character outside
  // [A-Za-z0-9_.-], or nullopt when every character is allowed.
  static std::optional<std::string> FirstBadNameCharacter(std::string_view name) {
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == '-';
      if (!ok) {
        return std::string("character ") + QuoteValue(std::string_view(&c, 1)) + " is not allowed";
      }
    }
    return std::nullopt;
  }

  static Result<std::string> ParseLedgerName(std::string_view text, std::string_view name) {
    constexpr std::string_view kExpected =
        "a shared-memory name of letters, digits, '_', '.' and '-' (up to 200), with an optional "
        "leading '/', such as tessera-ledger";
    auto fail = [&](std::string_view reason) {
      return Result<std::string>::Error(InputError(name, text, reason, kExpected));
    };
    std::string_view body = text;
    if (!body.empty() && body.front() == '/') {
      body.remove_prefix(1);
    }
    if (body.empty()) {
      return fail("empty name");
    }
    if (body.size() > kMaxLedgerNameBytes) {
      return fail("too long");
    }
    if (body == "." || body == "..") {
      return fail("not a name");
    }
    if (auto bad = FirstBadNameCharacter(body)) {
      return fail(*bad);
    }
    return std::string(text);
  }

  static Result<std::string> ParseGroupName(std::string_view text, std::string_view name) {
    constexpr std::string_view kExpected =
        "a group name of up to 32 letters, digits, '_', '.' or '-' not starting with '-' or a "
        "digit, such as tessera";
    auto fail = [&](std::string_view reason) {
      return Result<std::string>::Error(InputError(name, text, reason, kExpected));
    };
    if (text.empty()) {
      return fail("empty name");
    }
    if (text.size() > kMaxGroupNameBytes) {
      return fail("too long");
    }
    if (text.front() == '-' || (text.front() >= '0' && text.front() <= '9')) {
      return fail("starts with '-' or a digit");
    }
    if (auto bad = FirstBadNameCharacter(text)) {
      return fail(*bad);
    }
    return std::string(text);
  }

  static Result<std::optional<Bytes>> ParseContextOverhead(std::string_view text,
                                                           std::string_view name) {
    if (TrimSpaces(text) == "measure") {
      return std::optional<Bytes>();
    }
    auto bytes = ParseBytes(text, name);
    if (!bytes.ok()) {
      return Result<std::optional<Bytes>>::Error(bytes.error() +
                                                 ", or measure (to measure it at start-up)");
    }
    return std::optional<Bytes>(*bytes);
  }

  static Result<int> ParseMaxInst(std::string_view text, std::string_view name) {
    auto number = ParseUnsigned(text, name, 1, 256);
    if (!number.ok()) {
      return number.status();
    }
    return static_cast<int>(*number);
  }

  static Result<Percent> ParsePrioRatio(std::string_view text, std::string_view name) {
    return ParsePercent(text, name, 20, 99);
  }

  static Result<nanoseconds> ParseQuota(std::string_view text, std::string_view name) {
    return ParseDuration(text, name, std::chrono::microseconds(100), std::chrono::seconds(1));
  }

  static Result<nanoseconds> ParseReconcileInterval(std::string_view text, std::string_view name) {
    return ParseDuration(text, name, std::chrono::milliseconds(100), std::chrono::seconds(10));
  }

  static Result<nanoseconds> ParseDaemonLossTimeout(std::string_view text, std::string_view name) {
    return ParseDuration(text, name, std::chrono::seconds(1), std::chrono::hours(1));
  }

  static Result<std::string> ParseHttp(std::string_view text, std::string_view name) {
    auto address = ParseHostPort(text, name);
    if (!address.ok()) {
      return address.status();
    }
    return FormatHostPort(*address);
  }

  static Result<OverLimitAction> ParseOverLimitAction(std::string_view text,
                                                      std::string_view name) {
    const std::string_view s = TrimSpaces(text);
    for (OverLimitAction action :
         {OverLimitAction::kLog, OverLimitAction::kBlock, OverLimitAction::kKill}) {
      if (EqualsIgnoreCase(s, OverLimitActionName(action))) {
        return action;
      }
    }
    return Result<OverLimitAction>::Error(
        InputError(name, text, s.empty() ? "empty value" : "not an action", "log, block or kill"));
  }

  std::string_view file_;
  DaemonConfig config_;
  Mark quota_min_mark_;
  Mark quota_max_mark_;
};

}  // namespace

std::string_view OverLimitActionName(OverLimitAction action) {
  switch (action) {
    case OverLimitAction::kLog: return "log";
    case OverLimitAction::kBlock: return "block";
    case OverLimitAction::kKill: return "kill";
  }
  return "unknown";
}

Result<DaemonConfig> ParseDaemonConfig(std::string_view text, std::string_view file_name) {
  Result<YamlNode> root = ParseYaml(text, file_name);
  if (!root.ok()) {
    return root.status();
  }
  return Loader(file_name).Run(*root);
}

Result<DaemonConfig> LoadDaemonConfig(const std::string& path) {
  using R = Result<DaemonConfig>;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return R::Error("config file " + QuoteValue(path) + ": cannot open: " + std::strerror(errno));
  }
  std::string text;
  char chunk[65536];
  bool too_large = false;
  for (;;) {
    const size_t n = std::fread(chunk, 1, sizeof(chunk), file);
    text.append(chunk, n);
    if (text.size() > kMaxConfigFileBytes) {
      too_large = true;
      break;
    }
    if (n < sizeof(chunk)) {
      break;
    }
  }
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) {
    return R::Error("config file " + QuoteValue(path) + ": cannot read: " + std::strerror(error));
  }
  if (too_large) {
    return R::Error("config file " + QuoteValue(path) + ": larger than " +
                    std::to_string(kMaxConfigFileBytes) + " bytes; a config file is a few lines");
  }
  return ParseDaemonConfig(text, path);
}

}  // namespace tessera::config
