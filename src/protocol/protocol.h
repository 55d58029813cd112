// The tesserad wire protocol: one request line, one reply line, over the daemon's Unix socket.
//
//   request  = VERB *( " " key "=" value )        e.g. "HELLO version=1 container=web mem=2GiB"
//   reply    = "OK" *( " " key "=" value )  |  "ERR " message
// Verbs: HELLO (a captured process registers; the reply carries the ledger's descriptor and the
// connection stays open for the process's life, so its close is its death; with observer=1 it
// only reads its container's view and holds no process slot), CONTAINER (register
// or update a container's limits: `tessera run`, `tessera ctl`), STATUS (a JSON snapshot for
// `tessera smi`; the reply is "OK " followed by the JSON), CTL (the control tree: `op=ls|get|set
// path=P [value=V] [force=1]`, reply "OK " followed by JSON; see daemon/ctl_door.h), IDENTIFY
// (`id=X pid=P`, root only on the node socket: container X's processes are those in the cgroup
// of process P, its runtime container's init; see daemon/identity.h).
// Keys are [a-z_]{1,32}; values are 1-512 bytes of [A-Za-z0-9_.,:/+-]. A line breaking these rules
// is refused with a message naming the offending token. This file holds framing only, no policy.
// Both sides of the socket use it (tesserad, the shims, the CLI, the device plugin), so it may
// depend on nothing above src/core: the shims that link it build with a compiler alone.
#pragma once

#include <map>
#include <string>

#include "core/result.h"

namespace tessera::protocol {

inline constexpr int kProtocolVersion = 1;

struct Message {
  std::string verb;
  std::map<std::string, std::string> fields;

  bool Has(const std::string& key) const { return fields.count(key) != 0; }
  std::string Get(const std::string& key, const std::string& fallback = "") const {
    auto it = fields.find(key);
    return it == fields.end() ? fallback : it->second;
  }
};

Result<Message> ParseMessage(const std::string& line);
std::string FormatMessage(const Message& message);

}  // namespace tessera::protocol
