// Loading DaemonConfig: yaml-cpp's tree of the file checked key by key with the value parsers of
// src/core. Reads the one file it is given; applies nothing.
#include "config/daemon_config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

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

// A position in the file for messages, both 1-based (yaml-cpp's marks count from 0).
struct Position {
  int line = 1;
  int column = 1;
};

Position PositionOf(const YAML::Mark& mark) {
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1};
}

// yaml-cpp's message with control bytes (it quotes the offending character raw) as \xNN, so the
// error stays one printable line.
std::string Printable(const std::string& message) {
  std::string out;
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// "a mapping", "a sequence", ... for messages.
std::string KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Scalar:
      return "a single value";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined node";
}

// Where each document of a stream starts; nothing else of the events is kept.
struct DocumentStarts : YAML::EventHandler {
  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  std::vector<YAML::Mark> marks;
};

// Loads one document into a DaemonConfig; stops at the first error. yaml-cpp reads the YAML (any
// style: block or flow, quoted or block scalars, anchors and aliases, tags, comments); this class
// holds the schema: which keys exist, what each value may be, and where a problem is.
class Loader {
 public:
  explicit Loader(std::string_view file_name) : file_(file_name) {}

  Result<DaemonConfig> Run(std::string_view text) {
    const std::string input(text);
    YAML::Node root;
    try {
      // How many documents first, by events: YAML::LoadAll never returns on some bad input
      // (yaml-cpp 0.7 reads a stream starting with ',' as empty documents that consume nothing,
      // forever), so at most two are asked for.
      std::istringstream stream(input);
      YAML::Parser parser(stream);
      DocumentStarts starts;
      if (!parser.HandleNextDocument(starts)) {
        return config_;  // an empty file, or only comments: every default
      }
      if (parser.HandleNextDocument(starts)) {
        const YAML::Mark second =
            starts.marks.size() > 1 ? starts.marks[1] : YAML::Mark::null_mark();
        if (starts.marks.size() < 2 || second.pos <= starts.marks[0].pos) {
          return Fail(PositionOf(second), "not valid YAML: nothing can be read from here");
        }
        return Fail(PositionOf(second),
                    "a second YAML document starts here; a config file holds one");
      }
      root = YAML::Load(input);
    } catch (const YAML::Exception& e) {
      return Fail(PositionOf(e.mark), "not valid YAML: " + Printable(e.msg));
    }
    if (root.IsNull()) {
      return config_;  // a document with no content ("---" alone): every default
    }
    if (!root.IsMap()) {
      return Fail(
          PositionOf(root.Mark()),
          "the file must be a mapping of keys such as \"policy: 2\", not " + KindName(root));
    }
    std::set<std::string> seen;
    for (const auto& entry : root) {
      Result<std::string> key = Key(entry.first, "", &seen);
      if (!key.ok()) return key.status();
      if (Status status = LoadKey(*key, PositionOf(entry.first.Mark()), entry.second);
          !status.ok()) {
        return status;
      }
    }
    if (config_.quota_min > config_.quota_max) {
      const Position at = quota_min_at_ ? *quota_min_at_ : *quota_max_at_;
      return Fail(at, "quota_min=\"" + FormatDuration(config_.quota_min) +
                          "\" is larger than quota_max=\"" + FormatDuration(config_.quota_max) +
                          "\"" + (quota_max_at_ ? "" : " (its default)") +
                          "; expected quota_min <= quota_max");
    }
    if (Status limits = CheckSocketLimits(config_.socket_limits); !limits.ok()) {
      return Fail(limits_at_.value_or(Position{}), limits.message());
    }
    return config_;
  }

 private:
  Status Fail(Position at, std::string_view message) const {
    return Status::Error(std::string(file_) + ":" + std::to_string(at.line) + ":" +
                         std::to_string(at.column) + ": " + std::string(message));
  }

  // The text of a mapping key, refused when it is not a single value or appeared before in the
  // same mapping (`where` names the mapping in messages: "" at the top, "gpus", "gpus.0").
  Result<std::string> Key(const YAML::Node& key, const std::string& where,
                          std::set<std::string>* seen) const {
    const std::string in = where.empty() ? "" : " in " + where;
    if (!key.IsScalar()) {
      return Fail(PositionOf(key.Mark()),
                  "a key" + in + " must be a name such as policy, not " + KindName(key));
    }
    if (!seen->insert(key.Scalar()).second) {
      return Fail(PositionOf(key.Mark()),
                  "duplicate key " + QuoteValue(key.Scalar()) + in + "; each key may appear once");
    }
    return key.Scalar();
  }

  // The text of `value` for the key `name` (at `key_at`), or an error when it is not a single
  // value. A block scalar's final line break (`key: |`) is not part of the value.
  Result<std::string> Scalar(const YAML::Node& value, std::string_view name,
                             Position key_at) const {
    if (value.IsScalar()) {
      std::string text = value.Scalar();
      while (!text.empty() && text.back() == '\n') text.pop_back();
      return text;
    }
    if (value.IsNull()) {
      return Fail(key_at, std::string(name) + " has no value; remove the key to keep its default");
    }
    return Fail(PositionOf(value.Mark()),
                std::string(name) + ": expected a single value, not " + KindName(value));
  }

  // Parses the scalar of `value` with `parse`; a parse error gets the value's position.
  template <typename T, typename Parse>
  Status Read(const YAML::Node& value, std::string_view name, Position key_at, Parse parse,
              T* out) {
    Result<std::string> text = Scalar(value, name, key_at);
    if (!text.ok()) {
      return text.status();
    }
    auto parsed = parse(*text, name);
    if (!parsed.ok()) {
      return Fail(PositionOf(value.Mark()), parsed.error());
    }
    *out = std::move(parsed).value();
    return Status::Ok();
  }

  Status LoadKey(const std::string& key, Position at, const YAML::Node& v) {
    if (key == "socket") return Read(v, key, at, ParseSocketPath, &config_.socket);
    if (key == "sim") return Read(v, key, at, ParseBoolFlag, &config_.sim);
    if (key == "ledger") return Read(v, key, at, ParseLedgerName, &config_.ledger);
    if (key == "allow_self_declared") {
      return Read(v, key, at, ParseBoolFlag, &config_.allow_self_declared);
    }
    if (key == "context_overhead") {
      return Read(v, key, at, ParseContextOverhead, &config_.context_overhead);
    }
    if (key == "policy") return Read(v, key, at, ParseArbiterPolicy, &config_.policy);
    if (key == "max_inst") return Read(v, key, at, ParseMaxInst, &config_.max_inst);
    if (key == "prio_ratio") return Read(v, key, at, ParsePrioRatio, &config_.prio_ratio);
    if (key == "quota_min") {
      quota_min_at_ = PositionOf(v.Mark());
      return Read(v, key, at, ParseQuota, &config_.quota_min);
    }
    if (key == "quota_max") {
      quota_max_at_ = PositionOf(v.Mark());
      return Read(v, key, at, ParseQuota, &config_.quota_max);
    }
    if (key == "default_memsize") return Read(v, key, at, ParseBytes, &config_.default_memsize);
    if (key == "http") return Read(v, key, at, ParseHttp, &config_.http);
    if (key == "ctl_mount") return Read(v, key, at, ParseDirectoryPath, &config_.ctl_mount);
    if (key == "container_sockets") {
      return Read(v, key, at, ParseDirectoryPath, &config_.container_sockets);
    }
    if (key == "admin_group" || key == "ctl_group") {
      // Two spellings of one setting: the second one given would silently win.
      if (!admin_group_key_.empty()) {
        return Fail(at, key + " and " + admin_group_key_ +
                            " are two names of one setting (the admin group); give one");
      }
      admin_group_key_ = key;
      return Read(v, key, at, ParseGroupName, &config_.admin_group);
    }
    for (const char* limit : kSocketLimitKeys) {
      if (key != limit) continue;
      Result<std::string> text = Scalar(v, key, at);
      if (!text.ok()) return text.status();
      auto parsed = ParseSocketLimit(key, *text, key, &config_.socket_limits);
      if (!parsed.ok()) return Fail(PositionOf(v.Mark()), parsed.error());
      if (key == "container_max_connections" || key == "container_max_processes") {
        limits_at_ = PositionOf(v.Mark());
      }
      return Status::Ok();
    }
    if (key == "reconcile_interval") {
      return Read(v, key, at, ParseReconcileInterval, &config_.reconcile_interval);
    }
    if (key == "over_limit_action") {
      return Read(v, key, at, ParseOverLimitAction, &config_.over_limit_action);
    }
    if (key == "unattributed_action") {
      return Read(v, key, at, ParseUnattributedAction, &config_.unattributed_action);
    }
    if (key == "require_identity") {
      return Read(v, key, at, ParseBoolFlag, &config_.require_identity);
    }
    if (key == "daemon_loss_timeout") {
      return Read(v, key, at, ParseDaemonLossTimeout, &config_.daemon_loss_timeout);
    }
    if (key == "gpus") return LoadGpus(v);
    return Fail(at,
                "unknown key " + QuoteValue(key) +
                    "; allowed keys: socket, sim, ledger, allow_self_declared, context_overhead, "
                    "policy, max_inst, prio_ratio, quota_min, quota_max, default_memsize, http, "
                    "ctl_mount, admin_group (or ctl_group), container_sockets, "
                    "reconcile_interval, over_limit_action, unattributed_action, "
                    "require_identity, daemon_loss_timeout, max_request_line, max_reply_backlog, "
                    "request_timeout, idle_timeout, container_max_connections, "
                    "container_max_processes, refusal_log_rate, gpus");
  }

  Status LoadGpus(const YAML::Node& gpus) {
    if (gpus.IsNull()) {
      return Status::Ok();  // "gpus:" with nothing under it: no overrides
    }
    if (!gpus.IsMap()) {
      return Fail(PositionOf(gpus.Mark()),
                  "gpus: expected a mapping from GPU index to overrides, such as "
                  "\"gpus: {0: {policy: 2}}\", not " +
                      KindName(gpus));
    }
    std::set<std::string> seen_keys;
    for (const auto& gpu : gpus) {
      Result<std::string> key = Key(gpu.first, "gpus", &seen_keys);
      if (!key.ok()) return key.status();
      const Position key_at = PositionOf(gpu.first.Mark());
      auto index = ParseUnsigned(*key, "gpus key", 0, kMaxConfigGpuIndex,
                                 "a GPU index from 0 to " + std::to_string(kMaxConfigGpuIndex));
      if (!index.ok()) {
        return Fail(key_at, index.error());
      }
      const int i = static_cast<int>(*index);
      if (config_.gpus.count(i) != 0) {
        return Fail(key_at, "gpus: GPU " + std::to_string(i) + " appears twice (as \"" + *key +
                                "\" and another spelling of the same index)");
      }
      const std::string prefix = "gpus." + std::to_string(i);
      if (!gpu.second.IsMap()) {
        return Fail(gpu.second.IsNull() ? key_at : PositionOf(gpu.second.Mark()),
                    prefix + ": expected a mapping of policy, max_inst and prio_ratio, not " +
                        KindName(gpu.second));
      }
      GpuOverrides overrides;
      std::set<std::string> seen;
      for (const auto& entry : gpu.second) {
        Result<std::string> name_key = Key(entry.first, prefix, &seen);
        if (!name_key.ok()) return name_key.status();
        const Position at = PositionOf(entry.first.Mark());
        const std::string name = prefix + "." + *name_key;
        Status status = Status::Ok();
        if (*name_key == "policy") {
          ArbiterPolicy policy{};
          status = Read(entry.second, name, at, ParseArbiterPolicy, &policy);
          overrides.policy = policy;
        } else if (*name_key == "max_inst") {
          int max_inst = 0;
          status = Read(entry.second, name, at, ParseMaxInst, &max_inst);
          overrides.max_inst = max_inst;
        } else if (*name_key == "prio_ratio") {
          Percent ratio;
          status = Read(entry.second, name, at, ParsePrioRatio, &ratio);
          overrides.prio_ratio = ratio;
        } else {
          return Fail(at, "unknown key " + QuoteValue(*name_key) + " in " + prefix +
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
    return ParseDuration(text, name, std::chrono::milliseconds(1), std::chrono::minutes(10));
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

  static Result<UnattributedAction> ParseUnattributedAction(std::string_view text,
                                                            std::string_view name) {
    const std::string_view s = TrimSpaces(text);
    for (UnattributedAction action : {UnattributedAction::kReport, UnattributedAction::kKill}) {
      if (EqualsIgnoreCase(s, UnattributedActionName(action))) {
        return action;
      }
    }
    return Result<UnattributedAction>::Error(
        InputError(name, text, s.empty() ? "empty value" : "not an action", "report or kill"));
  }

  std::string_view file_;
  DaemonConfig config_;
  std::optional<Position> quota_min_at_;  // where the file set them, if it did
  std::optional<Position> quota_max_at_;
  std::optional<Position> limits_at_;  // the last of container_max_connections/_processes set
  std::string admin_group_key_;        // admin_group or ctl_group, whichever the file used
};

}  // namespace

Result<bool> ParseSocketLimit(std::string_view key, std::string_view text,
                              std::string_view input_name, SocketLimits* limits) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  auto bytes = [&](Bytes min, Bytes max, Bytes* out) -> Result<bool> {
    auto parsed = ParseBytes(text, input_name);
    if (!parsed.ok()) return parsed.status();
    if (*parsed < min || *parsed > max) {
      return Result<bool>::Error(InputError(input_name, text, "out of range",
                                            "a size from " + FormatBytes(min) + " to " +
                                                FormatBytes(max) + ", such as " +
                                                FormatBytes(*out)));
    }
    *out = *parsed;
    return true;
  };
  auto duration = [&](nanoseconds min, nanoseconds max, nanoseconds* out) -> Result<bool> {
    auto parsed = ParseDuration(text, input_name, min, max);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed;
    return true;
  };
  auto number = [&](uint64_t min, uint64_t max, int* out) -> Result<bool> {
    auto parsed = ParseUnsigned(text, input_name, min, max);
    if (!parsed.ok()) return parsed.status();
    *out = static_cast<int>(*parsed);
    return true;
  };
  if (key == "max_request_line") {
    return bytes(Bytes(1024), Bytes(64 * 1024), &limits->max_request_line);
  }
  if (key == "max_reply_backlog") {
    return bytes(Bytes(64 * 1024), Bytes(16 * 1024 * 1024), &limits->max_reply_backlog);
  }
  if (key == "request_timeout") {
    return duration(milliseconds(100), seconds(60), &limits->request_timeout);
  }
  if (key == "idle_timeout") return duration(seconds(1), seconds(3600), &limits->idle_timeout);
  if (key == "container_max_connections") {
    return number(1, 65536, &limits->container_max_connections);
  }
  if (key == "container_max_processes") return number(1, 1024, &limits->container_max_processes);
  if (key == "refusal_log_rate") return number(1, 10000, &limits->refusal_log_rate);
  return false;
}

Status CheckSocketLimits(const SocketLimits& limits) {
  if (limits.container_max_connections >= limits.container_max_processes) return Status::Ok();
  return Status::Error("container_max_connections=\"" +
                       std::to_string(limits.container_max_connections) +
                       "\" is less than container_max_processes=\"" +
                       std::to_string(limits.container_max_processes) +
                       "\"; expected at least as many connections as processes (each registered "
                       "process holds one)");
}

std::string_view OverLimitActionName(OverLimitAction action) {
  switch (action) {
    case OverLimitAction::kLog:
      return "log";
    case OverLimitAction::kBlock:
      return "block";
    case OverLimitAction::kKill:
      return "kill";
  }
  return "unknown";
}

std::string_view UnattributedActionName(UnattributedAction action) {
  switch (action) {
    case UnattributedAction::kReport:
      return "report";
    case UnattributedAction::kKill:
      return "kill";
  }
  return "unknown";
}

Result<DaemonConfig> ParseDaemonConfig(std::string_view text, std::string_view file_name) {
  return Loader(file_name).Run(text);
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
