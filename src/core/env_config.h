// The environment contract of a captured process (docs/contracts.md): reading and validating
// every TESSERA_* variable and its Alibaba cGPU alias into a TenantConfig.
//
// The environment is an interface so that tests never touch the real one: ProcessEnvironment
// reads the process environment (getenv), MapEnvironment holds a map. LoadTenantConfig reads
// only through the Environment it is handed and does no other I/O.
//
// Rules (the same for every variable):
// - Every variable that is set is validated, aliases included, even when the Tessera variable
//   that overrides it is set too: a broken setting never hides behind another.
// - A Tessera variable wins over its cGPU alias. When both are set and differ, a note says so.
// - A variable set to the empty string is an error, not "unset": Tessera cannot tell a forgotten
//   value from a deliberate one, and nothing may become unlimited by accident
//   (docs/contracts.md). Unset the variable instead.
// - Errors are one line naming the variable, its value and what is allowed. The first error found
//   is returned, in the order the fields of TenantConfig are declared.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bytes.h"
#include "core/device_selector.h"
#include "core/path.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera {

// Tessera's variables.
inline constexpr std::string_view kEnvContainer = "TESSERA_CONTAINER";
inline constexpr std::string_view kEnvSocket = "TESSERA_SOCKET";
inline constexpr std::string_view kEnvMemLimit = "TESSERA_MEM_LIMIT";
inline constexpr std::string_view kEnvCoreLimit = "TESSERA_CORE_LIMIT";
inline constexpr std::string_view kEnvWeight = "TESSERA_WEIGHT";
inline constexpr std::string_view kEnvHighPrio = "TESSERA_HIGH_PRIO";
inline constexpr std::string_view kEnvVisibleDevices = "TESSERA_VISIBLE_DEVICES";
inline constexpr std::string_view kEnvDisable = "TESSERA_DISABLE";
inline constexpr std::string_view kEnvFailOpen = "TESSERA_FAIL_OPEN";
inline constexpr std::string_view kEnvRealLibcuda = "TESSERA_REAL_LIBCUDA";
inline constexpr std::string_view kEnvRealNvml = "TESSERA_REAL_NVML";

// Alibaba cGPU's variables, read as aliases.
inline constexpr std::string_view kEnvCgpuDisable = "CGPU_DISABLE";
inline constexpr std::string_view kEnvAliyunMemDev = "ALIYUN_COM_GPU_MEM_DEV";
inline constexpr std::string_view kEnvAliyunMemContainer = "ALIYUN_COM_GPU_MEM_CONTAINER";
inline constexpr std::string_view kEnvAliyunVisibleDevices = "ALIYUN_COM_GPU_VISIBLE_DEVICES";
inline constexpr std::string_view kEnvAliyunSchdWeight = "ALIYUN_COM_GPU_SCHD_WEIGHT";
inline constexpr std::string_view kEnvAliyunHighPrio = "ALIYUN_COM_GPU_HIGH_PRIO";

inline constexpr std::string_view kDefaultSocketPath = "/run/tessera/tessera.sock";
// A file tesserad keeps beside each container's socket (its folder is what a pod mounts at
// /run/tessera): a process that sees it runs in a container Tessera manages.
inline constexpr char kManagedContainerMarker[] = "/run/tessera/container";
// The daemon bounds weights by its max_inst; this is the widest bound it may use.
inline constexpr uint64_t kMaxWeight = 1024;

// Where a process's settings come from. Implementations must be safe to call from one thread at a
// time; ProcessEnvironment is as thread-safe as getenv (i.e. not against a concurrent setenv).
class Environment {
 public:
  virtual ~Environment() = default;
  // The value of variable `name`; nullopt when it is unset, "" when it is set but empty.
  virtual std::optional<std::string> Get(std::string_view name) const = 0;
};

// The real process environment, through getenv.
class ProcessEnvironment final : public Environment {
 public:
  std::optional<std::string> Get(std::string_view name) const override;
};

// A fixed set of variables, for tests, the CLI (building a child's environment) and fuzzing.
class MapEnvironment final : public Environment {
 public:
  MapEnvironment() = default;
  MapEnvironment(std::initializer_list<std::pair<const std::string, std::string>> variables)
      : variables_(variables.begin(), variables.end()) {}

  void Set(std::string_view name, std::string_view value) {
    variables_.insert_or_assign(std::string(name), std::string(value));
  }
  void Unset(std::string_view name);
  std::optional<std::string> Get(std::string_view name) const override;

 private:
  std::map<std::string, std::string, std::less<>> variables_;
};

// One setting: its value and the variable that supplied it.
template <typename T>
struct Setting {
  T value{};
  // The variable that supplied `value` (one of the kEnv* names), or empty when no variable was
  // set and `value` is the default.
  std::string_view source;
  // The variable's text as it was set (empty when `source` is).
  std::string raw;

  bool is_set() const { return !source.empty(); }
};

struct TenantConfig {
  // TESSERA_CONTAINER; empty when unset (the daemon then picks an id).
  Setting<std::string> container_id;
  // TESSERA_SOCKET: absolute, at most kMaxSocketPathBytes bytes.
  Setting<std::string> socket_path{
      .value = std::string(kDefaultSocketPath), .source = {}, .raw = {}};
  // TESSERA_MEM_LIMIT, else ALIYUN_COM_GPU_MEM_CONTAINER: one limit per visible device, the last
  // repeating (see MemLimitFor). Empty when neither is set: the daemon's default_memsize applies.
  // Only the cGPU alias may hold 0 entries, which turn memory isolation off for that device.
  Setting<std::vector<Bytes>> mem_limits;
  // TESSERA_CORE_LIMIT (1-100): a hard cap on the share of GPU time. Unset: 100.
  Setting<Percent> core_limit{.value = Percent::Full(), .source = {}, .raw = {}};
  // TESSERA_WEIGHT, else ALIYUN_COM_GPU_SCHD_WEIGHT: 1 to kMaxWeight. Unset: 1.
  Setting<uint32_t> weight{.value = 1, .source = {}, .raw = {}};
  // TESSERA_HIGH_PRIO, else ALIYUN_COM_GPU_HIGH_PRIO. Unset: false.
  Setting<bool> high_prio;
  // TESSERA_VISIBLE_DEVICES, else ALIYUN_COM_GPU_VISIBLE_DEVICES. Unset: all.
  Setting<DeviceSelector> visible_devices{.value = DeviceSelector::All(), .source = {}, .raw = {}};
  // TESSERA_DISABLE, else CGPU_DISABLE: pass everything through untouched.
  Setting<bool> disable;
  // TESSERA_FAIL_OPEN: run unisolated (with a warning) when no daemon is reachable.
  Setting<bool> fail_open;
  // TESSERA_REAL_LIBCUDA / TESSERA_REAL_NVML: absolute paths; empty when unset (auto-detect).
  Setting<std::string> real_libcuda;
  Setting<std::string> real_nvml;
  // ALIYUN_COM_GPU_MEM_DEV: a device's total memory as the platform told the container (whole
  // GiB); recorded for diagnostics and reporting, never used as a limit.
  Setting<Bytes> platform_device_memory;

  // Human-readable remarks, e.g. that a Tessera variable overrode a different alias value.
  std::vector<std::string> notes;

  // The memory limit of the tenant's device `ordinal` (its position among the visible devices,
  // i.e. the CUDA ordinal the tenant sees, not the physical index): the matching entry of
  // mem_limits, or its last entry when the list is shorter. nullopt when no limit comes from the
  // environment: mem_limits is empty, or the entry is a cGPU 0 (isolation off).
  std::optional<Bytes> MemLimitFor(size_t ordinal) const;
};

// Reads and validates every variable of docs/contracts.md (rules at the top of this file).
Result<TenantConfig> LoadTenantConfig(const Environment& environment);

// In a container Tessera manages (kManagedContainerMarker exists) the shim cannot be turned off
// or pointed elsewhere: TESSERA_DISABLE / CGPU_DISABLE and TESSERA_FAIL_OPEN are ignored and
// TESSERA_SOCKET is the container's own socket (kDefaultSocketPath). Adds a note for each
// setting it overrode (the shim prints them).
void ApplyManagedContainer(TenantConfig* config);

// A multi-line table of every setting, its value and its source ("default" when unset), followed
// by the notes; for `tessera` diagnostics.
std::string DescribeTenantConfig(const TenantConfig& config);

}  // namespace tessera
