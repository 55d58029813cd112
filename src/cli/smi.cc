// `tessera smi [--json]`: what the node daemon knows, per GPU and per container: memory used and
// limit, and each container's processes with what they hold. --json prints the daemon's snapshot
// as it is. Reads only; holds no policy.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json.h"
#include "core/bytes.h"
#include "ipc/unix_socket.h"

namespace tessera::cli {
namespace {

std::string Size(const JsonValue& v) {
  if (v.is_null()) return "-";
  return FormatBytes(Bytes(static_cast<uint64_t>(v.number())));
}

}  // namespace

int RunSmi(const std::vector<std::string>& args) {
  bool json = false;
  for (const std::string& a : args) {
    if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "tessera smi: unknown argument \"%s\"; usage: tessera smi [--json]\n",
                   a.c_str());
      return 2;
    }
  }
  const char* env_socket = std::getenv("TESSERA_SOCKET");
  const std::string socket =
      env_socket != nullptr && *env_socket != '\0' ? env_socket : "/run/tessera/tessera.sock";
  auto reply = ipc::Call(socket, "STATUS", nullptr, std::chrono::milliseconds(3000));
  if (!reply.ok() || reply->rfind("OK ", 0) != 0) {
    std::fprintf(stderr,
                 "tessera smi: no Tessera daemon reachable at %s (%s); start tesserad or set "
                 "TESSERA_SOCKET\n",
                 socket.c_str(), reply.ok() ? reply->c_str() : reply.error().c_str());
    return 1;
  }
  const std::string body = reply->substr(3);
  if (json) {
    std::printf("%s\n", body.c_str());
    return 0;
  }
  auto doc = JsonValue::Parse(body);
  if (!doc.ok()) {
    std::fprintf(stderr, "tessera smi: the daemon's snapshot is not valid: %s\n",
                 doc.error().c_str());
    return 1;
  }
  const auto& devices = (*doc)["devices"].array();
  std::printf("%-4s %-12s %-42s %10s\n", "GPU", "NAME", "UUID", "MEMORY");
  for (const JsonValue& d : devices) {
    std::printf("%-4d %-12s %-42s %10s\n", static_cast<int>(d["index"].number()),
                d["name"].string().c_str(), d["uuid"].string().c_str(),
                Size(d["total_bytes"]).c_str());
  }
  std::printf("\n%-20s %-4s %10s %10s %s\n", "CONTAINER", "GPU", "USED", "LIMIT", "PROCESSES");
  for (const JsonValue& c : (*doc)["containers"].array()) {
    for (size_t g = 0; g < devices.size(); ++g) {
      std::string procs;
      for (const JsonValue& p : c["processes"].array()) {
        const JsonValue& used =
            p["used_bytes"].array().size() > g ? p["used_bytes"].array()[g] : JsonValue();
        procs += (procs.empty() ? "" : ", ") +
                 std::to_string(static_cast<long>(p["pid"].number())) + " (" + Size(used) + ")";
      }
      const auto& limits = c["limit_bytes"].array();
      const auto& used = c["used_bytes"].array();
      std::printf(
          "%-20s %-4zu %10s %10s %s\n", c["id"].string().c_str(), g,
          used.size() > g ? Size(used[g]).c_str() : "-",
          limits.size() > g ? (limits[g].is_null() ? "none" : Size(limits[g]).c_str()) : "-",
          procs.empty() ? "-" : procs.c_str());
    }
  }
  return 0;
}

}  // namespace tessera::cli
