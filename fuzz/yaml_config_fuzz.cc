// libFuzzer target for the config file readers: the YAML-subset parser and the DaemonConfig
// loader on top of it. Invariants: no crash, no unbounded recursion; every error starts with
// "f.yaml:LINE:COL: " with LINE and COL >= 1; every node of a parsed tree has a position.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/daemon_config.h"
#include "config/yaml.h"

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

void CheckMarks(const tessera::config::YamlNode& node) {
  if (node.mark.line < 1 || node.mark.column < 1) std::abort();
  for (const auto& entry : node.entries) {
    if (entry.key_mark.line < 1 || entry.key_mark.column < 1) std::abort();
    CheckMarks(entry.value);
  }
  for (const auto& item : node.items) CheckMarks(item);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tree = tessera::config::ParseYaml(text, "f.yaml");
  if (tree.ok()) {
    CheckMarks(*tree);
  } else if (!HasPosition(tree.error())) {
    std::abort();
  }
  auto config = tessera::config::ParseDaemonConfig(text, "f.yaml");
  if (!config.ok() && !HasPosition(config.error())) std::abort();
  if (config.ok() && !tree.ok()) std::abort();
  return 0;
}
