// DaemonConfig: tesserad's settings as read from its YAML config file (deploy/tesserad.yaml is a
// commented sample with every key), and LoadDaemonConfig, which reads and validates one.
//
// The file is one YAML 1.2 document read by yaml-cpp, in any style: block or flow mappings
// (`gpus: {0: {policy: 2}}`), plain, quoted or block scalars (`|`, `>`), anchors and aliases,
// tags, comments anywhere. Every value is one scalar (a block scalar's final line break is not
// part of it); what "2ms" or "true" mean is decided by src/core's parsers, never by YAML's types.
//
// Every key is optional; an absent key keeps the default written beside its field below. Every
// key present is validated; the first problem found stops loading with one line
//   FILE:LINE:COL: KEY="value": reason; expected what
// (or, for a structural problem, FILE:LINE:COL: message; a YAML syntax error is
// FILE:LINE:COL: not valid YAML: yaml-cpp's message). Unknown and repeated keys are refused,
// naming the key and listing the allowed ones, so a misspelt setting is never silently ignored.
// A value reached through an alias is reported at its anchor.
//
// This file knows the config file's vocabulary only: it reads a file and builds a struct. It does
// not apply anything (the daemon does), and it opens no sockets and mounts nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/arbiter_policy.h"
#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::config {

// What the reconciler does when NVML shows a container above its memory limit.
enum class OverLimitAction {
  kLog,    // log it and export it as a metric
  kBlock,  // also refuse the container's further allocations until it is below its limit
  kKill,   // also kill the container's processes on that GPU
};
std::string_view OverLimitActionName(OverLimitAction action);  // "log", "block", "kill"

// What the reconciler does about a process on a managed GPU that belongs to no container (it never
// registered, and its cgroup is no identified container's).
enum class UnattributedAction {
  kReport,  // log it once (and what it holds or runs)
  kKill,    // kill it
};
std::string_view UnattributedActionName(UnattributedAction action);  // "report", "kill"

// Per-GPU overrides of the node-wide arbiter settings (the `gpus:` mapping). Unset: node-wide.
struct GpuOverrides {
  std::optional<ArbiterPolicy> policy;
  std::optional<int> max_inst;
  std::optional<Percent> prio_ratio;
};

// The bounds of tesserad's socket server and registry that keep one client from stalling or
// starving the daemon (src/daemon/server.h says what each does). Each is a config key and a flag
// of the same name (`--max-request-line` for max_request_line), read by ParseSocketLimit.
struct SocketLimits {
  // max_request_line: the longest request line, '\n' included: 1KiB to 64KiB.
  Bytes max_request_line = Bytes(8 * 1024);
  // max_reply_backlog: reply bytes held for a client not reading them, beyond the kernel's
  // socket buffer, before it is dropped: 64KiB to 16MiB.
  Bytes max_reply_backlog = Bytes(256 * 1024);
  // request_timeout: a request line must arrive whole, and a held reply be taken, within this of
  // its first byte: 100ms to 60s.
  std::chrono::nanoseconds request_timeout = std::chrono::seconds(5);
  // idle_timeout: a connection that registered no process and sends nothing for this long is
  // closed: 1s to 1h.
  std::chrono::nanoseconds idle_timeout = std::chrono::seconds(60);
  // container_max_connections: connections at once on one container's socket (and per user on the
  // node socket, root and the daemon's user aside): 1 to 65536; at least container_max_processes.
  int container_max_connections = 256;
  // container_max_processes: processes one container may have registered at once: 1 to 1024.
  int container_max_processes = 128;
  // refusal_log_rate: lines a second, at most, logged about refused requests and dropped
  // connections (the rest are counted): 1 to 10000.
  int refusal_log_rate = 10;
};

// The SocketLimits keys, in the order above.
inline constexpr const char* kSocketLimitKeys[] = {
    "max_request_line",          "max_reply_backlog",       "request_timeout", "idle_timeout",
    "container_max_connections", "container_max_processes", "refusal_log_rate"};

// Parses `text` as the value of SocketLimits key `key` (one of kSocketLimitKeys) into `limits`;
// `input_name` starts an error message (the key, or the flag). False (and no error) when `key` is
// not one of them.
Result<bool> ParseSocketLimit(std::string_view key, std::string_view text,
                              std::string_view input_name, SocketLimits* limits);
// What must hold between the limits (container_max_connections >= container_max_processes: every
// registered process holds a connection). The error names both values.
Status CheckSocketLimits(const SocketLimits& limits);

// The largest GPU index `gpus:` accepts (the same bound as device selectors).
inline constexpr int kMaxConfigGpuIndex = 63;
// The largest config file LoadDaemonConfig reads.
inline constexpr size_t kMaxConfigFileBytes = 1024 * 1024;

struct DaemonConfig {
  // socket: the daemon's Unix socket; absolute, at most 107 bytes.
  std::string socket = "/run/tessera/tessera.sock";
  // sim: use the simulated GPU (libtessera-simgpu.so) instead of the real driver.
  bool sim = false;
  // ledger: the shared-memory ledger's name ([A-Za-z0-9_.-], up to 200 bytes, an optional leading
  // '/'). Empty: derived from the socket path, so daemons on different sockets never share one.
  std::string ledger;
  // allow_self_declared: accept the memory limits processes declare themselves (TESSERA_MEM_LIMIT)
  // for containers the daemon was not told about.
  bool allow_self_declared = true;
  // context_overhead: the GPU memory a CUDA context costs, charged to each process; a size, or
  // `measure` (nullopt here) to measure it at start-up.
  std::optional<Bytes> context_overhead;
  // policy: the arbiter policy of every GPU (0-5 or its name).
  ArbiterPolicy policy = ArbiterPolicy::kFair;
  // max_inst: 1-256; the GPU's slots (policy 0) and weight units.
  int max_inst = 16;
  // prio_ratio: 20-99; the high-priority lane's cap in percent of the GPU.
  Percent prio_ratio = *Percent::FromInt(50);
  // quota_min / quota_max: bounds of one compute grant; 100us to 1s, quota_min <= quota_max.
  std::chrono::nanoseconds quota_min = std::chrono::milliseconds(2);
  std::chrono::nanoseconds quota_max = std::chrono::milliseconds(20);
  // default_memsize: the memory limit of a container that declares none; 0 means its GPU's total.
  Bytes default_memsize = Bytes::Zero();
  // http: HOST:PORT of the HTTP endpoint (/metrics, /v1/ctl); empty: no HTTP endpoint.
  std::string http;
  // ctl_mount: where to mount the control tree with FUSE; empty: not mounted.
  std::string ctl_mount;
  // container_sockets: a directory for one socket per registered container; empty: none.
  std::string container_sockets;
  // admin_group (also spelt ctl_group): the group whose members administer the daemon besides
  // root and the daemon's own user: write the control tree (socket, mount) and register, change
  // or remove containers (CONTAINER). Empty: none.
  std::string admin_group;
  // reconcile_interval: how often NVML's view is compared with the ledger; 100ms to 10s.
  std::chrono::nanoseconds reconcile_interval = std::chrono::seconds(1);
  // over_limit_action: what the reconciler does about a container above its limit.
  OverLimitAction over_limit_action = OverLimitAction::kLog;
  // unattributed_action: what it does about a process on a GPU that belongs to no container.
  UnattributedAction unattributed_action = UnattributedAction::kReport;
  // require_identity: a container's socket serves only processes identified as the container's
  // (IDENTIFY, from the container runtime's hook); one without a record serves nobody.
  bool require_identity = false;
  // daemon_loss_timeout: how long a launch waiting for the compute token waits without a beat of
  // the arbiter before it runs ungated (until a beat returns); 1ms to 10m. The file form of
  // --daemon-loss-timeout.
  std::chrono::nanoseconds daemon_loss_timeout = std::chrono::seconds(2);
  // The socket server's bounds (SocketLimits), each its own top-level key.
  SocketLimits socket_limits;
  // gpus: per-GPU overrides keyed by GPU index (0 to kMaxConfigGpuIndex).
  std::map<int, GpuOverrides> gpus;
};

// Parses and validates config text; `file_name` starts every error message.
Result<DaemonConfig> ParseDaemonConfig(std::string_view text, std::string_view file_name);

// Reads the file at `path` (at most kMaxConfigFileBytes) and parses it as above. An unreadable
// file is an error naming the path and the reason.
Result<DaemonConfig> LoadDaemonConfig(const std::string& path);

}  // namespace tessera::config
