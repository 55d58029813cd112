// OCI state parsing.
#include "ocihook/oci_state.h"

#include <nlohmann/json.hpp>

namespace tessera::ocihook {

Result<OciState> ParseOciState(std::string_view text) {
  using R = Result<OciState>;
  if (text.size() > kMaxStateBytes) {
    return R::Error("the OCI state on stdin is " + std::to_string(text.size()) +
                    " bytes; expected at most " + std::to_string(kMaxStateBytes));
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return R::Error("the OCI state on stdin is not a JSON object");
  }
  OciState out;
  auto id = j.find("id");
  if (id == j.end() || !id->is_string() || id->get<std::string>().empty()) {
    return R::Error("the OCI state has no \"id\" string");
  }
  out.id = id->get<std::string>();
  auto status = j.find("status");
  if (status != j.end() && status->is_string()) out.status = status->get<std::string>();
  auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<int64_t>() <= 0 ||
      pid->get<int64_t>() > 0x3fffffff) {
    return R::Error("the OCI state of container " + RuntimeIdLabel(out.id) +
                    " has no positive \"pid\" (status \"" + out.status +
                    "\"); run tessera-oci-hook as a createRuntime hook, when the container's "
                    "init process exists");
  }
  out.pid = static_cast<pid_t>(pid->get<int64_t>());
  return out;
}

std::string RuntimeIdLabel(const std::string& id) {
  if (id.empty() || id.size() > 128) return "";
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return "";
  }
  return id;
}

}  // namespace tessera::ocihook
