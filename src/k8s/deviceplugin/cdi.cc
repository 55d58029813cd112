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

std::string CdiQualifiedName(const std::string& kind, const std::string& device_name) {
  return kind + "=" + device_name;
}

namespace {

json EditsJson(const CdiEdits& edits) {
  json env = json::array();
  for (const auto& [k, v] : edits.env) env.push_back(k + "=" + v);
  json mounts = json::array();
  for (const CdiEdits::Mount& m : edits.mounts) {
    json options = {"bind", "nosuid", "nodev"};
    if (m.read_only) options.push_back("ro");
    mounts.push_back(
        {{"hostPath", m.host_path}, {"containerPath", m.container_path}, {"options", options}});
  }
  json nodes = json::array();
  for (const std::string& n : edits.device_nodes) nodes.push_back({{"path", n}});
  json container_edits = json::object();
  if (!env.empty()) container_edits["env"] = env;
  if (!mounts.empty()) container_edits["mounts"] = mounts;
  if (!nodes.empty()) container_edits["deviceNodes"] = nodes;
  json hooks = json::array();
  for (const CdiEdits::Hook& h : edits.hooks) {
    json hook = {{"hookName", h.hook_name}, {"path", h.path}, {"args", h.args}};
    if (h.timeout_seconds > 0) hook["timeout"] = h.timeout_seconds;
    hooks.push_back(hook);
  }
  if (!hooks.empty()) container_edits["hooks"] = hooks;
  return container_edits;
}

Result<std::string> WriteSpecText(const std::string& dir, const std::string& kind,
                                  const std::string& name, const std::string& text) {
  mkdir(dir.c_str(), 0755);
  std::string file = kind;
  for (char& c : file) {
    if (c == '/') c = '-';
  }
  file += "-" + name;
  const std::string path = dir + "/" + file + ".json";
  // The temporary name does not end in .json, so a runtime scanning the folder never reads half.
  const std::string tmp = dir + "/." + file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return Result<std::string>::Error("CDI spec " + tmp + ": cannot be written");
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return Result<std::string>::Error("CDI spec " + path + ": " + std::strerror(errno));
  }
  return path;
}

}  // namespace

std::string CdiSpec(const std::string& kind, const std::string& device_name,
                    const CdiEdits& edits) {
  json container_edits = EditsJson(edits);
  // The device plugin's specs have always carried both lists, empty or not.
  if (!container_edits.contains("env")) container_edits["env"] = json::array();
  if (!container_edits.contains("mounts")) container_edits["mounts"] = json::array();
  const json spec = {
      {"cdiVersion", kCdiVersion},
      {"kind", kind},
      {"devices", json::array({{{"name", device_name}, {"containerEdits", container_edits}}})}};
  return spec.dump(2);
}

std::string CdiSpec(const std::string& kind, const CdiEdits& common,
                    const std::vector<CdiDevice>& devices) {
  json list = json::array();
  for (const CdiDevice& d : devices) {
    list.push_back({{"name", d.name}, {"containerEdits", EditsJson(d.edits)}});
  }
  json spec = {{"cdiVersion", kCdiVersion}, {"kind", kind}, {"devices", list}};
  const json shared = EditsJson(common);
  if (!shared.empty()) spec["containerEdits"] = shared;
  return spec.dump(2);
}

Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& kind,
                                 const std::string& file_name, const CdiEdits& common,
                                 const std::vector<CdiDevice>& devices) {
  return WriteSpecText(dir, kind, file_name, CdiSpec(kind, common, devices));
}

Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& kind,
                                 const std::string& device_name, const CdiEdits& edits) {
  return WriteSpecText(dir, kind, device_name, CdiSpec(kind, device_name, edits));
}

}  // namespace tessera::k8s
