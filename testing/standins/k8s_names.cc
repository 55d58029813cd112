// Kubernetes' name rules for the stand-ins.
#include "testing/standins/k8s_names.h"

#include <vector>

namespace tessera::k8s {

namespace {

bool Lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool Alnum(char c) { return Lower(c) || (c >= 'A' && c <= 'Z'); }

}  // namespace

// By hand rather than std::regex: the stand-in API server checks every annotation key of every
// write, and it runs on the extender benchmark's path.
bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('.', start);
    if (end == std::string::npos) end = s.size();
    if (end == start || !Lower(s[start]) || !Lower(s[end - 1])) return false;
    for (size_t i = start; i < end; ++i) {
      if (!Lower(s[i]) && s[i] != '-') return false;
    }
    start = end + 1;
  }
  return true;
}

bool IsQualifiedName(const std::string& value) {
  const size_t slash = value.find('/');
  std::string name = value;
  if (slash != std::string::npos) {
    if (value.find('/', slash + 1) != std::string::npos) return false;
    if (!IsDns1123Subdomain(value.substr(0, slash))) return false;
    name = value.substr(slash + 1);
  }
  if (name.empty() || name.size() > 63 || !Alnum(name.front()) || !Alnum(name.back())) return false;
  for (char c : name) {
    if (!Alnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool IsExtendedResourceName(const std::string& name) {
  if (name.find('/') == std::string::npos || name.find("kubernetes.io/") != std::string::npos) {
    return false;
  }
  if (name.rfind("requests.", 0) == 0) return false;
  return IsQualifiedName("requests." + name);
}

}  // namespace tessera::k8s
