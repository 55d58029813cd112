// The control tree's socket door in tesserad (the CTL verb; the FUSE door is ctl/fuse_mount.h,
// the HTTP routes daemon/http_door.h), the write permission check, and the /metrics body: they
// map requests onto ControlTree calls (or read the ledger) and its answers onto replies. They hold
// no policy: the tree decides everything about values, DaemonNodeControl about the node.
//
// clang-format off
//   CTL op=ls path=P                      -> OK {"entries":[{"name":"0","dir":true,"writable":false},..]}
//   CTL op=get path=P                     -> OK {"value":"2\n"}
//   CTL op=set path=P value=V [force=1]   -> OK {}
//   anything refused                      -> ERR reason
// clang-format on
// (the socket protocol's charset keeps V to [A-Za-z0-9_.,:/+-]; `tessera ctl` says so.)
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "ctl/control_tree.h"
#include "daemon/compute.h"
#include "daemon/registry.h"
#include "ipc/unix_socket.h"
#include "protocol/protocol.h"

namespace tessera::daemon {

// Who administers this tesserad: may write the control tree (CTL set) and register, change or
// remove containers (CONTAINER) on the node socket. Root, the daemon's own user (a private daemon
// of `tessera run`, or one a user started for themselves: they own its memory anyway), and the
// members of the admin group (tesserad --admin-group, also spelt --ctl-group).
struct Administrators {
  uid_t daemon_uid = 0;
  std::optional<gid_t> group;
};

// Whether the peer (SO_PEERCRED) is an administrator: root, the daemon's user, or a member of
// the group (its primary group, or a supplementary one read from /proc/PID/status now).
bool PeerIsAdministrator(const ipc::PeerCredentials& peer, const Administrators& admins);
// What a refusal for want of it says (after "permission denied: "): who may, and who asked.
std::string WhoMayAdminister(const ipc::PeerCredentials& peer, const Administrators& admins);

// The CTL verb: the JSON after "OK ", or the reason after "ERR ".
Result<std::string> HandleCtl(const ctl::ControlTree& tree, const protocol::Message& request,
                              bool may_write);

// The /metrics body. Families (all gauges unless noted):
//   tessera_up 1; tessera_build_info{version} 1
//   tessera_gpu_memory_total_bytes{gpu,uuid}, tessera_gpu_memory_used_bytes{gpu} (sum of
//   containers), tessera_gpu_policy{gpu} (0-5), tessera_gpu_max_inst{gpu},
//   tessera_gpu_free_weight{gpu}
//   tessera_container_memory_used_bytes{container,gpu}, tessera_container_memory_limit_bytes
//   {container,gpu} (absent when unlimited), tessera_container_compute_target_percent
//   {container,gpu} (absent under policy 5), tessera_container_compute_achieved_percent
//   {container,gpu}, tessera_container_weight{container}, tessera_container_high_priority
//   {container}, tessera_container_processes{container}; counters (docs/architecture.md lists
//   where each is written), among them tessera_container_gpu_seconds_total{container,gpu}: the
//   device time the container's kernels occupied
// Allocations the shim refused are not exported: the ledger does not count them (a counter in
// the shared layout would be the way; not done yet).
std::string RenderMetrics(const Registry& registry, const ComputeService& compute,
                          const std::string& version);

}  // namespace tessera::daemon
