// CDI (Container Device Interface) specs: one spec file per device under /var/run/cdi holding what
// a container needs (environment, the shims, /etc/ld.so.preload, its socket folder, and for the
// device plugin the OCI createRuntime hook that tells tesserad which runtime container it is). The
// device plugin's `--cdi` mode writes kind "tessera.io/container", one device per container (its
// id); the DRA plugin kind "gpu.tessera.io/claim", one device per ResourceClaim (its UID).
// cdiVersion 0.5.0 and only fields that version knows, so podman 4.x and containerd 1.7
// (enable_cdi) read them. Writes files atomically; no policy.
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

// The spec's JSON text, for one device `device_name` of `kind`.
std::string CdiSpec(const std::string& kind, const std::string& device_name, const CdiEdits& edits);
// "<kind>=<name>", e.g. "tessera.io/container=k8s.web.app-1a2b3c".
std::string CdiQualifiedName(const std::string& kind, const std::string& device_name);
// Writes the spec to `dir`/<kind with '/' as '-'>-<name>.json; returns the path.
Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& kind,
                                 const std::string& device_name, const CdiEdits& edits);

// A spec whose `common` edits are applied once to a container that uses any of its `devices` (as
// the CDI library applies a spec's own containerEdits), each device adding its own edits (which
// must not be empty: the CDI library refuses such a device).
struct CdiDevice {
  std::string name;
  CdiEdits edits;
};
std::string CdiSpec(const std::string& kind, const CdiEdits& common,
                    const std::vector<CdiDevice>& devices);
// Writes it to `dir`/<kind with '/' as '-'>-<file_name>.json; returns the path.
Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& kind,
                                 const std::string& file_name, const CdiEdits& common,
                                 const std::vector<CdiDevice>& devices);

// The device plugin's kind (kCdiKind).
inline std::string CdiSpec(const std::string& device_name, const CdiEdits& edits) {
  return CdiSpec(kCdiKind, device_name, edits);
}
inline std::string CdiQualifiedName(const std::string& device_name) {
  return CdiQualifiedName(kCdiKind, device_name);
}
inline Result<std::string> WriteCdiSpec(const std::string& dir, const std::string& device_name,
                                        const CdiEdits& edits) {
  return WriteCdiSpec(dir, kCdiKind, device_name, edits);
}

}  // namespace tessera::k8s
