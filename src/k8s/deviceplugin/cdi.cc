// CDI spec writer.
#include "k8s/deviceplugin/cdi.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera::k8s {

using nlohmann::json;

std::string CdiQualifiedName(const std::string& device_name) {
  return std::string(kCdiKind) + "=" + device_name;
}

std::string CdiSpec(const std::string& device_name, const CdiEdits& edits) {
  json env = json::array();
  for (const auto& [k, v] : edits.env) env.push_back(k + "=" + v);
  json mounts = json::array();
  for (const CdiEdits::Mount& m : edits.mounts) {
    json options = {"bind", "nosuid", "nodev"};
    if (m.read_only) options.push_back("ro");
    mounts.push_back({{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  json nodes = json::array();
  for (const std::string& n : edits.device_nodes) nodes.push_back({{"path", n}});
  json container_edits = {{"env", env}, {"mounts", mounts}};
  if (!nodes.empty()) container_edits["deviceNodes"] = nodes;
  json hooks = json::array();
  for (const CdiEdits::Hook& h : edits.hooks) {
    json hook = {{"hookName", h.hook_name}, {"path", h.path}, {"args", h.args}};
    if (h.timeout_seconds > 0) hook["timeout"] = h.timeout_seconds;
    hooks.push_back(hook);
  }
  if (!hooks.empty()) container_edits["hooks"] = hooks;
  const json spec = {{"cdiVersion", kCdiVersion},
                     {"kind", kCdiKind},
                     {"devices", json::array({{{"name", device_name}, {"containerEdits", container_edits}}})}};
  return spec.dump(2);
}

Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& device_name,
                                 const CdiEdits& edits) {
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/tessera.io-container-" + device_name + ".json";
  // The temporary name does not end in .json, so a runtime scanning the folder never reads half.
  const std::string tmp = dir + "/.tessera.io-container-" + device_name + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << CdiSpec(device_name, edits);
    if (!out) return Result<std::string>::Error("CDI spec " + tmp + ": cannot be written");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return Result<std::string>::Error("CDI spec " + path + ": " + std::strerror(errno));
  }
  return path;
}

}  // namespace tessera::k8s
