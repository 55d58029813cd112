// libFuzzer target for every parser in src/core: sizes, size lists, percentages, whole numbers,
// device lists, container ids, policies, flags, and LoadTenantConfig over an environment built
// from the input's NAME=VALUE lines.
//
// Besides "no crash, no sanitizer report" it checks invariants the rest of Tessera relies on:
// accepted values are in range and round-trip through their printed form, and every rejection is
// one line that starts with the input's name. It must not touch the real process environment.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/arbiter_policy.h"
#include "core/bool_flag.h"
#include "core/bytes.h"
#include "core/container_id.h"
#include "core/device_selector.h"
#include "core/env_config.h"
#include "core/number.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "FUZZ_INPUT";

#define FUZZ_CHECK(condition)                                                                      \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      (void)std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                                \
    }                                                                                              \
  } while (false)

// A rejection is one non-empty line that starts with `NAME=`.
template <typename T>
void CheckRejection(const Result<T>& result, std::string_view name) {
  if (result.ok()) {
    return;
  }
  const std::string& message = result.error();
  FUZZ_CHECK(!message.empty());
  FUZZ_CHECK(message.rfind(std::string(name) + "=\"", 0) == 0);
  FUZZ_CHECK(message.find('\n') == std::string::npos);
  FUZZ_CHECK(message.find('\0') == std::string::npos);
}

void FuzzBytes(std::string_view input) {
  Result<Bytes> size = ParseBytes(input, kName);
  CheckRejection(size, kName);
  if (size.ok()) {
    // FormatBytes is exact, so the printed form reads back to the same value.
    Result<Bytes> again = ParseBytes(FormatBytes(*size), kName);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(*again == *size);
  }
  Result<std::vector<Bytes>> list = ParseBytesList(input, kName);
  CheckRejection(list, kName);
  if (list.ok()) {
    FUZZ_CHECK(!list->empty() && list->size() <= kMaxBytesListItems);
  }
  if (input.find(',') == std::string_view::npos) {
    // A one-item list means the same as a single size.
    FUZZ_CHECK(list.ok() == size.ok());
    if (list.ok()) {
      FUZZ_CHECK(list->size() == 1 && (*list)[0] == *size);
    }
  }
}

void FuzzNumbers(std::string_view input) {
  Result<Percent> core = ParsePercent(input, kName, 1, 100);
  CheckRejection(core, kName);
  if (core.ok()) {
    FUZZ_CHECK(core->value() >= 1 && core->value() <= 100);
  }
  Result<uint64_t> number = ParseUnsigned(input, kName, 1, 100);
  CheckRejection(number, kName);
  FUZZ_CHECK(number.ok() == core.ok());
  if (number.ok()) {
    FUZZ_CHECK(static_cast<int>(*number) == core->value());
  }
}

void FuzzDevices(std::string_view input) {
  Result<DeviceSelector> selector = ParseDeviceSelector(input, kName);
  CheckRejection(selector, kName);
  if (!selector.ok()) {
    return;
  }
  std::set<int> indices;
  if (selector->all) {
    FUZZ_CHECK(selector->devices.empty());
  }
  if (!selector->all) {
    FUZZ_CHECK(!selector->devices.empty());
  }
  for (const DeviceRef& device : selector->devices) {
    if (device.by_index()) {
      FUZZ_CHECK(device.index <= kMaxDeviceIndex && device.uuid.empty());
      FUZZ_CHECK(indices.insert(device.index).second);
    } else {
      FUZZ_CHECK(!device.uuid.empty());
    }
  }
  Result<DeviceSelector> again = ParseDeviceSelector(selector->ToString(), kName);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *selector);

  const std::vector<std::string> node = {
      "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111",
      "GPU-aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa", "MIG-bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"};
  Result<std::vector<int>> physical = ResolveDeviceSelector(*selector, node, kName);
  CheckRejection(physical, kName);
  if (physical.ok()) {
    FUZZ_CHECK(physical->size() == (selector->all ? node.size() : selector->devices.size()));
    std::set<int> distinct;
    for (int index : *physical) {
      FUZZ_CHECK(index >= 0 && static_cast<size_t>(index) < node.size());
      FUZZ_CHECK(distinct.insert(index).second);
    }
  }
}

void FuzzWords(std::string_view input) {
  Result<std::string> id = ParseContainerId(input, kName);
  CheckRejection(id, kName);
  FUZZ_CHECK(id.ok() == IsValidContainerId(input));
  if (id.ok()) {
    FUZZ_CHECK(*id == input);
  }

  Result<ArbiterPolicy> policy = ParseArbiterPolicy(input, kName);
  CheckRejection(policy, kName);
  if (policy.ok()) {
    Result<ArbiterPolicy> again = ParseArbiterPolicy(ArbiterPolicyName(*policy), kName);
    FUZZ_CHECK(again.ok() && *again == *policy);
    FUZZ_CHECK(ArbiterPolicyFromNumber(static_cast<int>(*policy)) == *policy);
  }

  Result<bool> flag = ParseBoolFlag(input, kName);
  CheckRejection(flag, kName);
}

// Every line "NAME=VALUE" of the input becomes a variable (a line without '=' is a variable set
// to the empty string); later lines override earlier ones.
void FuzzEnvironment(std::string_view input) {
  MapEnvironment environment;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    const std::string_view line = input.substr(0, end);
    input = (end == std::string_view::npos) ? std::string_view() : input.substr(end + 1);
    const size_t equals = line.find('=');
    environment.Set(line.substr(0, equals), equals == std::string_view::npos
                                                ? std::string_view()
                                                : line.substr(equals + 1));
  }
  Result<TenantConfig> config = LoadTenantConfig(environment);
  if (!config.ok()) {
    // The message starts with the name of a variable that is set.
    const std::string& message = config.error();
    const size_t equals = message.find("=\"");
    FUZZ_CHECK(equals != std::string::npos && equals > 0);
    const std::string name = message.substr(0, equals);
    FUZZ_CHECK(environment.Get(name).has_value());
    CheckRejection(config, name);
    return;
  }
  FUZZ_CHECK(config->weight.value >= 1 && config->weight.value <= kMaxWeight);
  FUZZ_CHECK(config->core_limit.value.value() >= 1 && config->core_limit.value.value() <= 100);
  FUZZ_CHECK(!config->socket_path.value.empty() && config->socket_path.value[0] == '/');
  FUZZ_CHECK(config->socket_path.value.size() <= kMaxSocketPathBytes);
  FUZZ_CHECK(config->mem_limits.value.size() <= kMaxBytesListItems);
  FUZZ_CHECK(config->mem_limits.is_set() == !config->mem_limits.value.empty());
  if (config->container_id.is_set()) {
    FUZZ_CHECK(IsValidContainerId(config->container_id.value));
  }
  for (size_t ordinal = 0; ordinal < 20; ++ordinal) {
    const std::optional<Bytes> limit = config->MemLimitFor(ordinal);
    if (config->mem_limits.source == kEnvMemLimit) {
      FUZZ_CHECK(limit.has_value());
    }
    if (limit.has_value()) {
      FUZZ_CHECK(!limit->is_zero());
    }
  }
  FUZZ_CHECK(!DescribeTenantConfig(*config).empty());
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tessera::FuzzBytes(input);
  tessera::FuzzNumbers(input);
  tessera::FuzzDevices(input);
  tessera::FuzzWords(input);
  tessera::FuzzEnvironment(input);
  return 0;
}
