// DaemonSettings into the options of tesserad's parts (settings_wiring.h). Translates only.
#include "daemon/settings_wiring.h"

#include <chrono>

namespace tessera::daemon {

ComputeOptions ComputeOptionsFor(const config::DaemonConfig& node) {
  ComputeOptions options;
  options.defaults.policy = node.policy;
  options.defaults.max_inst = node.max_inst;
  options.defaults.prio_ratio = node.prio_ratio;
  options.defaults.quota_min = node.quota_min;
  options.defaults.quota_max = node.quota_max;
  options.loss_timeout_ns = static_cast<uint64_t>(node.daemon_loss_timeout.count());
  return options;
}

ServerOptions ServerOptionsFor(const config::DaemonSettings& settings, uid_t daemon_user) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const config::SocketLimits& limits = settings.node.socket_limits;
  ServerOptions options;
  options.admins = {daemon_user, settings.admin_gid};
  options.container_socket_dir = settings.node.container_sockets;
  options.max_request_line = limits.max_request_line.count();
  options.max_reply_backlog = limits.max_reply_backlog.count();
  options.request_timeout = duration_cast<milliseconds>(limits.request_timeout);
  options.idle_timeout = duration_cast<milliseconds>(limits.idle_timeout);
  options.container_max_connections = limits.container_max_connections;
  options.refusal_log_rate = limits.refusal_log_rate;
  return options;
}

GpuSetup ConfigureGpus(const config::DaemonSettings& settings, ComputeService* compute) {
  GpuSetup setup;
  const std::string& file = settings.config_path;
  for (const auto& [gpu, o] : settings.node.gpus) {
    const std::string key = file + ": gpus." + std::to_string(gpu) + ": ";
    if (gpu >= compute->device_count()) {
      setup.notes.push_back("note: " + key + "this node has " +
                            std::to_string(compute->device_count()) + " GPU(s); ignored");
      continue;
    }
    arbiter::ArbiterConfig config = compute->Config(gpu);
    if (o.policy) config.policy = *o.policy;
    if (o.max_inst) config.max_inst = *o.max_inst;
    if (o.prio_ratio) config.prio_ratio = *o.prio_ratio;
    if (Status s = compute->Configure(gpu, config); !s.ok()) {
      setup.status = Status::Error(key + s.message());
      return setup;
    }
  }
  for (const auto& [index, policy] : settings.gpu_policies) {
    const std::string flag = "--gpu-policy " + std::to_string(index) + ": ";
    setup.usage_error = true;
    if (index >= compute->device_count()) {
      setup.status = Status::Error(flag + "this node has " +
                                   std::to_string(compute->device_count()) + " GPU(s)");
      return setup;
    }
    arbiter::ArbiterConfig config = compute->Config(index);
    config.policy = policy;
    if (Status s = compute->Configure(index, config); !s.ok()) {
      setup.status = Status::Error(flag + s.message());
      return setup;
    }
  }
  setup.usage_error = false;
  return setup;
}

ReconcilerOptions ReconcilerOptionsFor(const config::DaemonConfig& node) {
  ReconcilerOptions options;
  options.interval = node.reconcile_interval;
  options.action = node.over_limit_action;
  options.unattributed = node.unattributed_action;
  return options;
}

}  // namespace tessera::daemon
