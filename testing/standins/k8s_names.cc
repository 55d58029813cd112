// Kubernetes' name rules for the stand-ins.
#include "testing/standins/k8s_names.h"

#include <regex>
#include <vector>

namespace tessera::k8s {

bool IsDns1123Subdomain(const std::string& s) {
  static const std::regex re(R"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)");
  return !s.empty() && s.size() <= 253 && std::regex_match(s, re);
}

bool IsQualifiedName(const std::string& value) {
  static const std::regex name_re(R"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])");
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t slash; (slash = value.find('/', start)) != std::string::npos; start = slash + 1) {
    parts.push_back(value.substr(start, slash - start));
  }
  parts.push_back(value.substr(start));
  std::string name;
  if (parts.size() == 1) {
    name = parts[0];
  } else if (parts.size() == 2) {
    if (!IsDns1123Subdomain(parts[0])) return false;
    name = parts[1];
  } else {
    return false;
  }
  return !name.empty() && name.size() <= 63 && std::regex_match(name, name_re);
}

bool IsExtendedResourceName(const std::string& name) {
  if (name.find('/') == std::string::npos || name.find("kubernetes.io/") != std::string::npos) {
    return false;
  }
  if (name.rfind("requests.", 0) == 0) return false;
  return IsQualifiedName("requests." + name);
}

}  // namespace tessera::k8s
