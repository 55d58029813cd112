// CDI (Container Device Interface) specs for the device plugin's `--cdi` mode: one spec file per
// container under /var/run/cdi, kind "tessera.io/container", device name = the container's id,
// holding what the container needs (environment, the shims, /etc/ld.so.preload, its socket
// folder, and the OCI createRuntime hook that tells tesserad which runtime container it is).
// cdiVersion 0.5.0 and only fields that version knows, so podman 4.x and containerd 1.7
// (enable_cdi) read it. Writes files atomically; no policy.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace tessera::k8s {

inline constexpr char kCdiKind[] = "tessera.io/container";
inline constexpr char kCdiVersion[] = "0.5.0";

struct CdiEdits {
  std::vector<std::pair<std::string, std::string>> env;
  struct Mount {
    std::string host_path, container_path;
    bool read_only = true;
  };
  std::vector<Mount> mounts;
  std::vector<std::string> device_nodes;  // host paths, e.g. /dev/nvidia0
  // OCI hooks the runtime runs (CDI containerEdits.hooks): hookName createRuntime, prestart,
  // createContainer, startContainer, poststart or poststop; args include argv[0].
  struct Hook {
    std::string hook_name, path;
    std::vector<std::string> args;
    int timeout_seconds = 0;  // 0: none given
  };
  std::vector<Hook> hooks;
};

// The spec's JSON text.
std::string CdiSpec(const std::string& device_name, const CdiEdits& edits);
// "tessera.io/container=<name>".
std::string CdiQualifiedName(const std::string& device_name);
// Writes the spec for `device_name` to `dir`/tessera.io-container-<name>.json; returns the path.
Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& device_name,
                                 const CdiEdits& edits);

}  // namespace tessera::k8s
