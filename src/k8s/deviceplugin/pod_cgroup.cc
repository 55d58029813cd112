// Pod UIDs from cgroup paths.
#include "k8s/deviceplugin/pod_cgroup.h"

#include <cctype>
#include <fstream>
#include <sstream>

namespace tessera::k8s {

std::optional<std::string> PodUidFromCgroup(const std::string& text) {
  size_t pos = 0;
  while ((pos = text.find("pod", pos)) != std::string::npos) {
    const size_t start = pos + 3;
    pos = start;
    // The word must begin at a path component or after the systemd slice's "-".
    if (start < 4 || (text[start - 4] != '/' && text[start - 4] != '-')) continue;
    if (start + 36 > text.size()) continue;
    std::string uid = text.substr(start, 36);
    bool ok = true;
    for (size_t i = 0; i < uid.size(); ++i) {
      char& c = uid[i];
      if (c == '_') c = '-';
      const bool dash_place = i == 8 || i == 13 || i == 18 || i == 23;
      ok = ok && (dash_place ? c == '-' : std::isxdigit(static_cast<unsigned char>(c)) != 0);
    }
    const char after = start + 36 < text.size() ? text[start + 36] : '\n';
    if (ok && (after == '/' || after == '.' || after == '\n')) return uid;
  }
  return std::nullopt;
}

std::optional<std::string> PodUidOfProcess(const std::string& proc_root, pid_t pid) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/cgroup");
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return PodUidFromCgroup(s.str());
}

}  // namespace tessera::k8s
