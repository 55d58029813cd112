// Loading TenantConfig from an Environment. Reads only through the Environment it is handed;
// the only other I/O is ProcessEnvironment's getenv.
#include "core/env_config.h"

#include <cstdlib>
#include <functional>

#include "core/bool_flag.h"
#include "core/container_id.h"
#include "core/number.h"
#include "core/path.h"
#include "core/text.h"

namespace tessera {
namespace {

// The largest whole number of GiB that fits in Bytes.
constexpr uint64_t kMaxGiB = Bytes::Max().count() / kBytesPerGiB;

template <typename T>
using Parser = std::function<Result<T>(std::string_view text, std::string_view name)>;

// Reads `name` and, if set, its `alias` (empty: none); validates both with `parse`; stores the
// winner (the Tessera variable) in `out`. Unset both: `out` keeps its default.
template <typename T>
Status Load(const Environment& environment, std::string_view name, std::string_view alias,
            const Parser<T>& parse, Setting<T>* out, std::vector<std::string>* notes) {
  const std::optional<std::string> primary = environment.Get(name);
  const std::optional<std::string> secondary =
      alias.empty() ? std::nullopt : environment.Get(alias);
  std::optional<Result<T>> primary_value;
  if (primary.has_value()) {
    primary_value.emplace(parse(*primary, name));
    if (!primary_value->ok()) {
      return primary_value->status();
    }
  }
  std::optional<Result<T>> secondary_value;
  if (secondary.has_value()) {
    secondary_value.emplace(parse(*secondary, alias));
    if (!secondary_value->ok()) {
      return secondary_value->status();
    }
  }
  if (primary_value.has_value()) {
    *out = Setting<T>{.value = std::move(*primary_value).value(), .source = name, .raw = *primary};
    if (secondary.has_value() && *secondary != *primary) {
      notes->push_back(std::string(name) + "=" + QuoteValue(*primary) + " overrides " +
                       std::string(alias) + "=" + QuoteValue(*secondary));
    }
  } else if (secondary_value.has_value()) {
    *out = Setting<T>{
        .value = std::move(*secondary_value).value(), .source = alias, .raw = *secondary};
  }
  return Status::Ok();
}

Result<std::string> ParseContainer(std::string_view text, std::string_view name) {
  return ParseContainerId(text, name);
}

// TESSERA_MEM_LIMIT: sizes; a 0 entry would make every allocation fail, so it is refused.
Result<std::vector<Bytes>> ParseMemLimit(std::string_view text, std::string_view name) {
  Result<std::vector<Bytes>> limits = ParseBytesList(text, name);
  if (!limits.ok()) {
    return limits;
  }
  for (size_t i = 0; i < limits->size(); ++i) {
    if ((*limits)[i].is_zero()) {
      const std::string item = limits->size() == 1 ? "a limit" : "item " + std::to_string(i + 1);
      return Result<std::vector<Bytes>>::Error(InputError(
          name, text,
          item + " of 0 bytes would make every allocation fail; unset " + std::string(name) +
              " for the daemon's default, or set TESSERA_DISABLE=1 to turn Tessera off",
          "a size above 0 such as 512MiB, 2GiB or 1.5GiB, or a comma list of them"));
    }
  }
  return limits;
}

// ALIYUN_COM_GPU_MEM_CONTAINER: whole GiB per device, as cGPU writes it; 0 is isolation off.
Result<std::vector<Bytes>> ParseAliyunMemContainer(std::string_view text, std::string_view name) {
  static constexpr std::string_view kExpected =
      "a whole number of GiB or a comma list of them (one per device), such as 4 or 4,8; 0 turns "
      "memory isolation off";
  auto fail = [&](const std::string& reason) {
    return Result<std::vector<Bytes>>::Error(InputError(name, text, reason, kExpected));
  };
  if (TrimSpaces(text).empty()) {
    return fail("empty value");
  }
  size_t items = 1;
  for (char c : text) {
    items += (c == ',') ? 1 : 0;
  }
  if (items > kMaxBytesListItems) {
    return fail(std::to_string(items) + " items; at most " + std::to_string(kMaxBytesListItems) +
                " are allowed");
  }
  std::vector<Bytes> limits;
  std::string_view rest = text;
  for (size_t n = 1; n <= items; ++n) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimSpaces(rest.substr(0, comma));
    rest = (comma == std::string_view::npos) ? std::string_view() : rest.substr(comma + 1);
    const std::string label = items == 1
                                  ? std::string("the value")
                                  : "item " + std::to_string(n) + " (" + QuoteValue(item) + ")";
    uint64_t gib = 0;
    switch (ParseDigits(item, &gib)) {
      case DigitsError::kNone:
        break;
      case DigitsError::kEmpty:
        return fail("item " + std::to_string(n) + " is empty");
      case DigitsError::kNotDigits:
        return fail(label + " is not a whole number of GiB");
      case DigitsError::kOverflow:
        gib = UINT64_MAX;
        break;
    }
    if (gib > kMaxGiB) {
      return fail(label + " is too large");
    }
    limits.push_back(GiB(gib));
  }
  return limits;
}

// ALIYUN_COM_GPU_MEM_DEV: a device's total memory in whole GiB.
Result<Bytes> ParseAliyunMemDev(std::string_view text, std::string_view name) {
  Result<uint64_t> gib =
      ParseUnsigned(text, name, 1, kMaxGiB, "a whole number of GiB from 1, such as 16");
  if (!gib.ok()) {
    return gib.status();
  }
  return GiB(*gib);
}

Result<Percent> ParseCoreLimit(std::string_view text, std::string_view name) {
  return ParsePercent(text, name, 1, 100);
}

Result<uint32_t> ParseWeight(std::string_view text, std::string_view name) {
  Result<uint64_t> weight = ParseUnsigned(text, name, 1, kMaxWeight);
  if (!weight.ok()) {
    return weight.status();
  }
  return static_cast<uint32_t>(*weight);
}

Result<bool> ParseFlag(std::string_view text, std::string_view name) {
  return ParseBoolFlag(text, name);
}

Result<DeviceSelector> ParseDevices(std::string_view text, std::string_view name) {
  return ParseDeviceSelector(text, name);
}

}  // namespace

std::optional<std::string> ProcessEnvironment::Get(std::string_view name) const {
  // getenv races only with a concurrent setenv/putenv; the Environment comment says so.
  const char* value = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr) {
    return std::nullopt;
  }
  return std::string(value);
}

void MapEnvironment::Unset(std::string_view name) {
  auto it = variables_.find(name);
  if (it != variables_.end()) {
    variables_.erase(it);
  }
}

std::optional<std::string> MapEnvironment::Get(std::string_view name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::optional<Bytes> TenantConfig::MemLimitFor(size_t ordinal) const {
  const std::vector<Bytes>& limits = mem_limits.value;
  if (limits.empty()) {
    return std::nullopt;
  }
  const Bytes limit = limits[ordinal < limits.size() ? ordinal : limits.size() - 1];
  if (limit.is_zero()) {
    return std::nullopt;
  }
  return limit;
}

Result<TenantConfig> LoadTenantConfig(const Environment& environment) {
  TenantConfig config;
  std::vector<std::string>* notes = &config.notes;
  const Environment& env = environment;
  // The two memory variables have different syntaxes, so each is loaded on its own and the
  // Tessera one is preferred below. Aggregate initialisation runs these in order.
  Setting<std::vector<Bytes>> alias_limits;
  const Status statuses[] = {
      Load<std::string>(env, kEnvContainer, {}, ParseContainer, &config.container_id, notes),
      Load<std::string>(env, kEnvSocket, {}, ParseSocketPath, &config.socket_path, notes),
      Load<std::vector<Bytes>>(env, kEnvMemLimit, {}, ParseMemLimit, &config.mem_limits, notes),
      Load<std::vector<Bytes>>(env, kEnvAliyunMemContainer, {}, ParseAliyunMemContainer,
                               &alias_limits, notes),
      Load<Percent>(env, kEnvCoreLimit, {}, ParseCoreLimit, &config.core_limit, notes),
      Load<uint32_t>(env, kEnvWeight, kEnvAliyunSchdWeight, ParseWeight, &config.weight, notes),
      Load<bool>(env, kEnvHighPrio, kEnvAliyunHighPrio, ParseFlag, &config.high_prio, notes),
      Load<DeviceSelector>(env, kEnvVisibleDevices, kEnvAliyunVisibleDevices, ParseDevices,
                           &config.visible_devices, notes),
      Load<bool>(env, kEnvDisable, kEnvCgpuDisable, ParseFlag, &config.disable, notes),
      Load<bool>(env, kEnvFailOpen, {}, ParseFlag, &config.fail_open, notes),
      Load<std::string>(env, kEnvRealLibcuda, {}, ParseLibraryPath, &config.real_libcuda, notes),
      Load<std::string>(env, kEnvRealNvml, {}, ParseLibraryPath, &config.real_nvml, notes),
      Load<Bytes>(env, kEnvAliyunMemDev, {}, ParseAliyunMemDev, &config.platform_device_memory,
                  notes),
  };
  for (const Status& status : statuses) {
    if (!status.ok()) {
      return status;
    }
  }
  if (!config.mem_limits.is_set()) {
    config.mem_limits = std::move(alias_limits);
  } else if (alias_limits.is_set()) {
    notes->push_back(std::string(kEnvMemLimit) + "=" + QuoteValue(config.mem_limits.raw) +
                     " overrides " + std::string(kEnvAliyunMemContainer) + "=" +
                     QuoteValue(alias_limits.raw));
  }

  // A per-device list longer than an explicit device list names devices the tenant cannot see.
  const Setting<std::vector<Bytes>>& limits = config.mem_limits;
  const Setting<DeviceSelector>& devices = config.visible_devices;
  if (limits.is_set() && !devices.value.all && limits.value.size() > devices.value.devices.size()) {
    return Result<TenantConfig>::Error(
        InputError(limits.source, limits.raw,
                   std::to_string(limits.value.size()) + " limits for " +
                       std::to_string(devices.value.devices.size()) + " visible device" +
                       (devices.value.devices.size() == 1 ? "" : "s") + " (" +
                       std::string(devices.source) + "=" + QuoteValue(devices.raw) + ")",
                   "at most one limit per visible device; the last one repeats for the rest"));
  }
  return config;
}

void ApplyManagedContainer(TenantConfig* config) {
  auto ignored = [config](const auto& setting, const std::string& why) {
    config->notes.push_back(std::string(setting.source) + "=" + QuoteValue(setting.raw) +
                            " is ignored in a container Tessera manages (" +
                            kManagedContainerMarker + " exists): " + why);
  };
  if (config->disable.is_set() && config->disable.value) {
    ignored(config->disable, "the shim stays on");
  }
  config->disable = {};
  if (config->fail_open.is_set() && config->fail_open.value) {
    ignored(config->fail_open, "without its daemon the process gets no GPU");
  }
  config->fail_open = {};
  if (config->socket_path.is_set() && config->socket_path.value != kDefaultSocketPath) {
    ignored(config->socket_path,
            "the container's own socket " + std::string(kDefaultSocketPath) + " is used");
  }
  config->socket_path = {.value = std::string(kDefaultSocketPath), .source = {}, .raw = {}};
}

std::string DescribeTenantConfig(const TenantConfig& config) {
  std::string out;
  auto row = [&out](std::string_view label, const std::string& value, std::string_view source) {
    std::string line(label);
    line.resize(24, ' ');
    line += value.empty() ? std::string("-") : value;
    line += "  (";
    line += source.empty() ? std::string_view("default") : source;
    line += ")\n";
    out += line;
  };
  auto flag = [](bool on) { return std::string(on ? "yes" : "no"); };

  row("container", config.container_id.value, config.container_id.source);
  row("socket", config.socket_path.value, config.socket_path.source);
  std::string limits;
  for (const Bytes& limit : config.mem_limits.value) {
    if (!limits.empty()) {
      limits += ",";
    }
    limits += limit.is_zero() ? std::string("unlimited") : FormatBytes(limit);
  }
  row("memory limit", limits.empty() ? std::string("daemon default") : limits,
      config.mem_limits.source);
  row("core limit", std::to_string(config.core_limit.value.value()) + "%",
      config.core_limit.source);
  row("weight", std::to_string(config.weight.value), config.weight.source);
  row("high priority", flag(config.high_prio.value), config.high_prio.source);
  row("visible devices", config.visible_devices.value.ToString(), config.visible_devices.source);
  row("disabled", flag(config.disable.value), config.disable.source);
  row("fail open", flag(config.fail_open.value), config.fail_open.source);
  row("real libcuda", config.real_libcuda.value.empty() ? "auto-detect" : config.real_libcuda.value,
      config.real_libcuda.source);
  row("real nvml", config.real_nvml.value.empty() ? "auto-detect" : config.real_nvml.value,
      config.real_nvml.source);
  if (config.platform_device_memory.is_set()) {
    row("platform device memory", FormatBytes(config.platform_device_memory.value),
        config.platform_device_memory.source);
  }
  for (const std::string& note : config.notes) {
    out += "note: " + note + "\n";
  }
  return out;
}

}  // namespace tessera
