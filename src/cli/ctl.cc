// `tessera ctl get|set|ls PATH [VALUE] [--force]`: the control tree (docs/contracts.md) through
// the node daemon's socket (the CTL verb; see src/daemon/ctl_door.h). The daemon decides
// everything: paths, values, and whether this user may write (an administrator of tesserad: root,
// its own user or its --admin-group). This door only frames the request and prints the answer.
//   get PATH          prints the file's text
//   ls [PATH]         prints a folder's entries: "rw  name", "ro  name", "dir name/"
//   set PATH VALUE    changes a file; --force lets memsize go below the container's usage
// Exit status: 0 done, 1 refused or no daemon (the reason on stderr), 2 bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "ipc/unix_socket.h"
#include "protocol/protocol.h"

namespace tessera::cli {
namespace {

int CtlUsage(const std::string& problem) {
  std::fprintf(stderr, "tessera ctl: %s\n(see tessera ctl --help)\n", problem.c_str());
  return 2;
}

// The characters the daemon's line protocol carries in a value (protocol/protocol.h).
bool ProtocolSafe(const std::string& text) {
  if (text.empty() || text.size() > 512) return false;
  for (char c : text) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ',' || c == ':' || c == '/' || c == '+' ||
                    c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

int RunCtl(const CtlArgs& args) {
  const std::string& op = args.op;
  const std::string path = op == "ls" && args.path.empty() ? "/" : args.path;
  const bool force = args.force;
  if (!ProtocolSafe(path)) {
    return CtlUsage("PATH \"" + path +
                    "\": the daemon's protocol carries only the characters A-Z a-z 0-9 _ . , : / "
                    "+ - (1-512 of them)");
  }
  protocol::Message request{"CTL", {{"op", op}, {"path", path}}};
  if (op == "set") {
    const std::string& value = args.value;
    if (!ProtocolSafe(value)) {
      std::fprintf(stderr,
                   "tessera ctl: set %s \"%s\": the daemon's protocol carries only the characters "
                   "A-Z a-z 0-9 _ . , : / + - (1-512 of them) in a value; every control-tree value "
                   "can be written with those (sizes as 4GiB or 4294967296)\n",
                   path.c_str(), value.c_str());
      return 2;
    }
    request.fields["value"] = value;
    if (force) request.fields.emplace("force", "1");
  }
  const char* env = std::getenv("TESSERA_SOCKET");
  const std::string socket = env != nullptr && *env != '\0' ? env : "/run/tessera/tessera.sock";
  auto reply =
      ipc::Call(socket, protocol::FormatMessage(request), nullptr, std::chrono::milliseconds(3000));
  if (!reply.ok()) {
    std::fprintf(stderr,
                 "tessera ctl: no Tessera daemon reachable at %s (%s); start tesserad or set "
                 "TESSERA_SOCKET\n",
                 socket.c_str(), reply.error().c_str());
    return 1;
  }
  if (reply->rfind("ERR ", 0) == 0) {
    std::fprintf(stderr, "tessera ctl: %s %s: %s\n", op.c_str(), path.c_str(), reply->c_str() + 4);
    return 1;
  }
  if (reply->rfind("OK ", 0) != 0) {
    std::fprintf(stderr, "tessera ctl: unexpected reply from the daemon: %s\n", reply->c_str());
    return 1;
  }
  try {
    const nlohmann::json doc = nlohmann::json::parse(reply->substr(3));
    if (op == "get") {
      std::fputs(doc.at("value").get<std::string>().c_str(), stdout);
    } else if (op == "ls") {
      for (const nlohmann::json& e : doc.at("entries")) {
        const bool dir = e.at("dir").get<bool>();
        std::printf("%-3s %s%s\n",
                    dir                            ? "dir"
                    : e.at("writable").get<bool>() ? "rw"
                                                   : "ro",
                    e.at("name").get<std::string>().c_str(), dir ? "/" : "");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "tessera ctl: the daemon's reply is not what this tessera reads: %s\n",
                 e.what());
    return 1;
  }
  return 0;
}

}  // namespace tessera::cli
