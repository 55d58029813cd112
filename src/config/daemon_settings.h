// DaemonSettings: everything tesserad runs with, from its one configuration path. The command line
// (CLI11), the environment and --config's YAML file (daemon_config.h) are merged and validated
// here, once: a flag given on the command line beats the environment, which beats the file, which
// beats the default. Every refusal is one line naming the input (the flag, the variable, or
// FILE:LINE:COL and the key), the value and what is allowed.
//
// This file reads the command line, the environment it is handed and one file, and looks up the
// admin group; it starts nothing, opens no device and applies nothing (tesserad's main does).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/daemon_config.h"
#include "core/arbiter_policy.h"
#include "core/result.h"

namespace tessera::config {

// The command line as given: a flag left out is nullopt (or false), so that only flags given on
// the command line override the config file.
struct DaemonFlags {
  std::optional<std::string> config, socket, ledger, context_overhead, policy, max_inst, prio_ratio,
      quota_min, quota_max, daemon_loss_timeout, ctl_mount, admin_group, http, reconcile_interval,
      over_limit_action, container_sockets, allow_self_declared, mps_control, mps_dir,
      unattributed_action, require_identity, mps_gpus;
  // The socket server's bounds, by config key (kSocketLimitKeys), as given.
  std::map<std::string, std::optional<std::string>> socket_limits;
  std::vector<std::string> gpu_policy;
  bool sim = false, ephemeral = false, http_allow_write = false, mps = false;
};

// Reads tesserad's command line into `flags` (CLI11; `version` is what --version prints). Returns
// the exit status when the program should stop here (--help, --version: 0; a malformed command
// line: 2, with the reason on stderr); nullopt to go on.
std::optional<int> ParseDaemonCommandLine(int argc, char** argv, const std::string& version,
                                          DaemonFlags* flags);

// The variables tesserad reads (docs/contracts.md): getenv, or a table in tests.
using Environment = std::function<const char*(const char*)>;
Environment ProcessEnvironment();

// What tesserad runs with: the file's settings (DaemonConfig) with the flags applied, and what only
// the command line or the environment sets.
struct DaemonSettings {
  // Every setting a config file holds, after the command line. `ledger` is the final shared-memory
  // name ("/..." always; derived from `socket` when none was given); `policy` is native (5) in MPS
  // mode unless --policy was given; `gpus` has lost every setting a node-wide flag overrode;
  // `daemon_loss_timeout` is --daemon-loss-timeout's, else the file's.
  DaemonConfig node;
  std::string config_path;            // --config; empty when none was given
  std::string http_input = "--http";  // who set node.http, for the HTTP server's errors
  bool ephemeral = false;             // --ephemeral: remove the ledger at exit
  bool http_allow_write = false;      // --http-allow-write
  // --gpu-policy INDEX:POLICY, in order; applied after the file's `gpus` (a flag wins). Whether
  // INDEX is one of the node's GPUs is known only once they are discovered.
  std::vector<std::pair<int, ArbiterPolicy>> gpu_policies;
  bool mps = false;  // --mps, or --mps-gpus
  // --mps-gpus LIST: the GPUs (device indices) that run MPS at start; empty with `mps`: every GPU,
  // unless `mps_none`. Whether each is one of the node's GPUs is known only once they are
  // discovered. Either way the set changes at runtime by MPSGPUS (the device plugin's, from the
  // GPUs' labels: docs/contracts.md).
  std::set<int> mps_gpus;
  bool mps_none = false;  // --mps-gpus none: MPS allowed, no GPU runs it at start
  // The node's policy before --mps made it 5: what a GPU that stops running MPS (MPSGPUS) gets.
  ArbiterPolicy policy_without_mps = ArbiterPolicy::kFair;
  std::string mps_control;         // --mps-control; empty: mps's default
  std::string mps_dir;             // --mps-dir; empty: mps's default
  std::optional<gid_t> admin_gid;  // node.admin_group's id on this node
  // NVML and the CUDA driver tesserad loads: with node.sim (--sim, `sim: true`, or TESSERA_SIM_GPUS
  // set) both are empty (simgpu, beside the binary); else TESSERA_REAL_NVML and
  // TESSERA_REAL_LIBCUDA, or the standard places.
  std::string nvml_library;
  std::string cuda_library;
};

// The outcome of ResolveDaemonSettings.
struct DaemonSetup {
  Result<DaemonSettings> settings = Status::Error("not resolved");
  bool loaded_config = false;  // --config's file was read and is valid
  bool usage_error = false;    // the error is the command line's (tesserad --help says more)
};

// Merges the command line, the environment and --config's file (read here) into one
// DaemonSettings and validates it; the first problem found is the error.
DaemonSetup ResolveDaemonSettings(const DaemonFlags& flags, const Environment& env);

// The ledger name of a daemon on `socket_path` when none is given: one per socket path, so daemons
// on different sockets never share accounting ("/tessera-ledger-" and 16 hex digits).
std::string DerivedLedgerName(const std::string& socket_path);

// "0-3,6": GPU indices and inclusive ranges, comma-separated, each 0 to kMaxConfigGpuIndex (63),
// at most 7 characters an item; `flag` names the input in the error (--mps-gpus, MPSGPUS gpus=).
Result<std::set<int>> ParseGpuIndexList(const std::string& text, const char* flag);

}  // namespace tessera::config
