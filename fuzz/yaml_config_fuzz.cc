// libFuzzer target for the config file's schema: ParseDaemonConfig, which hands the text to
// yaml-cpp and checks every key of the tree it gets back with src/core's parsers. Invariants: no
// crash and no exception escaping (yaml-cpp throws on bad YAML; the loader must turn every throw
// into an error); every error is one line starting "f.yaml:LINE:COL: " with LINE and COL >= 1;
// a config that loads keeps the documented ranges.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/daemon_config.h"

namespace {

bool HasPosition(const std::string& message) {
  // "f.yaml:" then digits ':' digits ": ", neither number 0.
  if (message.rfind("f.yaml:", 0) != 0) return false;
  size_t i = 7;
  for (int part = 0; part < 2; ++part) {
    const size_t start = i;
    while (i < message.size() && message[i] >= '0' && message[i] <= '9') ++i;
    if (i == start || message[start] == '0' || i >= message.size() || message[i] != ':') {
      return false;
    }
    ++i;
  }
  return i < message.size() && message[i] == ' ';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = tessera::config::ParseDaemonConfig(text, "f.yaml");
  if (!config.ok()) {
    if (!HasPosition(config.error()) || config.error().find('\n') != std::string::npos) {
      std::fprintf(stderr, "error without a one-line FILE:LINE:COL: %s\n", config.error().c_str());
      std::abort();
    }
    return 0;
  }
  const tessera::config::DaemonConfig& c = *config;
  if (c.max_inst < 1 || c.max_inst > 256 || c.quota_min > c.quota_max ||
      c.prio_ratio.value() < 20 || c.prio_ratio.value() > 99 ||
      (!c.gpus.empty() && (c.gpus.begin()->first < 0 ||
                           c.gpus.rbegin()->first > tessera::config::kMaxConfigGpuIndex))) {
    std::abort();
  }
  return 0;
}
