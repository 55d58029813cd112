// The OCI runtime's state of a container, as a hook reads it on its standard input (OCI runtime
// spec, "State": ociVersion, id, status, pid, bundle, annotations): parsing and checking the
// fields tessera-oci-hook uses. No I/O.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "core/result.h"

namespace tessera::ocihook {

// The most a state document may hold (it is a few hundred bytes; annotations can add some).
inline constexpr size_t kMaxStateBytes = 1024 * 1024;

struct OciState {
  std::string id;      // the runtime's container id
  std::string status;  // creating, created, running, stopped
  pid_t pid = 0;       // the container's init process, as the runtime's pid namespace numbers it
};

// Parses an OCI state document. `pid` must be present and positive (createRuntime, prestart,
// createContainer and startContainer hooks always see it), `id` a non-empty string.
Result<OciState> ParseOciState(std::string_view text);

// `id` as a protocol value: the runtime's id when it is 1-128 bytes of [A-Za-z0-9_.-], else ""
// (it is only a label in tesserad's log).
std::string RuntimeIdLabel(const std::string& id);

}  // namespace tessera::ocihook
