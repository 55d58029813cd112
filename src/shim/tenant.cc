// Tenant implementation: environment validation, daemon registration, fork handling. Messages go
// to stderr once, prefixed "tessera:", and name the variable, the value and the fix.
#include "shim/tenant.h"

#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/env_config.h"
#include "ipc/unix_socket.h"
#include "protocol/protocol.h"

namespace tessera::shim {
namespace {

TenantState g_tenant;
std::mutex g_init_mu;
std::string g_socket_path;
std::string g_hello;              // the HELLO request, kept to re-register after fork
bool g_restrict_devices = false;  // TESSERA_VISIBLE_DEVICES was given
bool g_observer = false;          // the NVML shim's registration (NVML is never renumbered)

void AfterForkInChild() {
  // The inherited connection belongs to the parent's registration: drop our copy (the parent
  // keeps the connection open) and register as a new process before the next charge.
  TenantState& t = g_tenant;
  if (t.socket_fd >= 0) close(t.socket_fd);
  t.socket_fd = -1;
  if (t.mode.load() == Mode::kEnforcing) t.needs_registration.store(true);
}

void StartDaemonWatcher();

// Sends HELLO and maps the ledger. Fills container/process on success.
bool Register(std::string* error) {
  auto fd = ipc::Connect(g_socket_path, std::chrono::milliseconds(2000));
  if (!fd.ok()) {
    *error = fd.error();
    return false;
  }
  // Our own pid, as our pid namespace numbers it (a forked child sends its own).
  const std::string hello = g_hello + " local_pid=" + std::to_string(getpid());
  if (Status s = ipc::SendLine(*fd, hello); !s.ok()) {
    close(*fd);
    *error = s.message();
    return false;
  }
  std::string buffer;
  std::vector<int> fds;  // node (read-only), container, exchange: ledger_layout.h
  auto reply = ipc::RecvLine(*fd, &buffer, &fds, std::chrono::milliseconds(5000));
  auto close_fds = [&fds] {
    for (int f : fds) close(f);
    fds.clear();
  };
  if (!reply.ok() || reply->rfind("ERR ", 0) == 0 || fds.size() != 3) {
    *error = !reply.ok()                    ? reply.error()
             : reply->rfind("ERR ", 0) == 0 ? reply->substr(4)
                                            : "the daemon sent " + std::to_string(fds.size()) +
                                                  " ledger descriptors, not 3 (tesserad and the "
                                                  "shim are different versions)";
    close_fds();
    close(*fd);
    return false;
  }
  auto message = protocol::ParseMessage(*reply);
  if (!message.ok()) {
    *error = message.error();
    close_fds();
    close(*fd);
    return false;
  }
  TenantState& t = g_tenant;
  // strtoul, not stoul: nothing in the shim may throw into the host program.
  const auto container =
      static_cast<uint32_t>(std::strtoul(message->Get("container", "0").c_str(), nullptr, 10));
  ledger::TenantDescriptors descriptors;
  descriptors.node = fds[0];
  descriptors.container = fds[1];
  descriptors.exchange = fds[2];
  if (t.ledger == nullptr) {
    auto ledger = ledger::TenantLedger::MapFds(descriptors, container);
    if (!ledger.ok()) {
      *error = ledger.error();
      close_fds();
      close(*fd);
      return false;
    }
    t.ledger = new ledger::TenantLedger(std::move(*ledger));
  } else {
    // A forked child has its parent's mappings: registered in another container, it maps that
    // container's segment in place of the parent's (and a restarted daemon's view and exchange
    // in place of the ones its parent was given); the same files are left as they are.
    if (Status s = t.ledger->Remap(descriptors, container); !s.ok()) {
      *error = s.message();
      close_fds();
      close(*fd);
      return false;
    }
  }
  close_fds();
  t.container = container;
  t.process =
      static_cast<uint32_t>(std::strtoul(message->Get("process", "0").c_str(), nullptr, 10));
  t.generation =
      static_cast<uint32_t>(std::strtoul(message->Get("generation", "0").c_str(), nullptr, 10));
  // The devices this process may see, in its ordinal order, as the daemon resolved them; the real
  // driver is told the same through CUDA_VISIBLE_DEVICES (by UUID) before its cuInit. A MIG device
  // ("MIG-" UUID) is one the driver enumerates only as the first MIG device of the list (CUDA
  // 11/12 give a process one MIG device), so later ones are left out here too, and the driver is
  // always told the list when it holds one: ordinals and ledger devices then agree.
  const std::string visible = message->Get("visible");
  int count = 0;
  std::string uuids;
  bool mig_listed = false;
  for (size_t pos = 0; !visible.empty() && pos <= visible.size() && count < ledger::kMaxDevices;) {
    size_t comma = visible.find(',', pos);
    if (comma == std::string::npos) comma = visible.size();
    const int p = std::atoi(visible.substr(pos, comma - pos).c_str());
    pos = comma + 1;
    if (p < 0 || p >= t.ledger->device_count()) continue;
    const std::string uuid(
        t.ledger->layout()->devices[p].uuid,
        strnlen(t.ledger->layout()->devices[p].uuid, sizeof(t.ledger->layout()->devices[p].uuid)));
    if (uuid.rfind("MIG-", 0) == 0) {
      if (mig_listed) continue;
      mig_listed = true;
    }
    t.physical[count++] = p;
    uuids += (uuids.empty() ? "" : ",") + uuid;
  }
  t.visible_count = count;
  t.context_bytes = std::strtoull(message->Get("context_bytes", "0").c_str(), nullptr, 10);
  if (g_restrict_devices || (mig_listed && !g_observer)) {
    setenv("CUDA_VISIBLE_DEVICES", uuids.c_str(), 1);
  }
  t.socket_fd = *fd;
  if (message->Get("process") != "none") {
    StartDaemonWatcher();
    if (t.on_registered != nullptr) t.on_registered();
  }
  return true;
}

// ---- Re-attaching after a daemon restart
// ----------------------------------------------------------- One result of a resume attempt.
enum class ResumeResult { kAttached, kRetry, kRefused };

ResumeResult TryResume(const char* socket_path, std::string* error) {
  TenantState& t = g_tenant;
  auto fd = ipc::Connect(socket_path, std::chrono::milliseconds(500));
  if (!fd.ok()) {
    *error = fd.error();
    return ResumeResult::kRetry;
  }
  const std::string resume = "HELLO version=" + std::to_string(protocol::kProtocolVersion) +
                             " resume=" + std::to_string(t.process) +
                             " generation=" + std::to_string(t.generation);
  std::string buffer;
  std::vector<int> fds;
  Status sent = ipc::SendLine(*fd, resume);
  auto reply = sent.ok() ? ipc::RecvLine(*fd, &buffer, &fds, std::chrono::milliseconds(2000))
                         : Result<std::string>(sent);
  // The new daemon's node view (and whatever segment it had to replace) mapped in place of the
  // old: until then this process reads the old daemon's view, whose heartbeat has stopped.
  if (reply.ok() && reply->rfind("ERR ", 0) != 0 && fds.size() == 3 && t.ledger != nullptr) {
    ledger::TenantDescriptors descriptors;
    descriptors.node = fds[0];
    descriptors.container = fds[1];
    descriptors.exchange = fds[2];
    if (Status s = t.ledger->Remap(descriptors, t.container); !s.ok()) {
      std::fprintf(stderr, "tessera: re-attaching: %s; this process goes on ungated\n",
                   s.message().c_str());
    }
  }
  for (int f : fds) close(f);
  if (!reply.ok()) {
    close(*fd);
    *error = reply.error();
    return ResumeResult::kRetry;
  }
  if (reply->rfind("ERR ", 0) == 0) {
    close(*fd);
    *error = reply->substr(4);
    return ResumeResult::kRefused;
  }
  t.socket_fd = *fd;
  return ResumeResult::kAttached;
}

// Waits for the daemon connection to end (the daemon never writes unprompted, so any event on it
// is its end), then re-attaches to the daemon that takes over the socket: every 20 ms for the
// first 2 s (a restart takes about that), then every 250 ms, until one answers. Promptly, because
// until then this process reads the old daemon's view: a holder keeps running on its last grant
// and is charged for it by the new daemon, which then makes it wait while the others catch up (a
// 250 ms retry let a holder run 220 ms alone and then wait 900 ms in the chaos soak), and a
// waiter waits for a grant that can no longer come. A refusal (the slot is no longer this
// process's) ends the watch: the ledger mapping stays, so limits keep holding, but the new daemon
// learns of this process's exit only by its once-a-second sweep. `arg`: the socket path, a copy of
// its own (never freed: the thread runs while the process exits, after static strings are
// destroyed).
void* WatchDaemon(void* arg) {
  const char* socket_path = static_cast<const char*>(arg);
  TenantState& t = g_tenant;
  int tries = 0;
  for (;;) {
    if (t.socket_fd >= 0) {
      pollfd p{t.socket_fd, POLLRDHUP, 0};
      if (poll(&p, 1, -1) <= 0) continue;  // EINTR
      close(t.socket_fd);
      t.socket_fd = -1;
      tries = 0;
    }
    std::string error;
    switch (TryResume(socket_path, &error)) {
      case ResumeResult::kAttached:
        std::fprintf(stderr, "tessera: re-attached to the Tessera daemon at %s (process slot %u)\n",
                     socket_path, t.process);
        continue;
      case ResumeResult::kRefused:
        std::fprintf(stderr, "tessera: cannot re-attach to the Tessera daemon at %s: %s\n",
                     socket_path, error.c_str());
        return nullptr;
      case ResumeResult::kRetry:
        break;
    }
    timespec ts{0, ++tries <= 100 ? 20'000'000L : 250'000'000L};
    nanosleep(&ts, nullptr);
  }
}

void StartDaemonWatcher() {
  static pid_t watching = 0;  // the process whose watcher runs (a forked child starts its own)
  if (watching == getpid()) return;
  watching = getpid();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  char* path = strdup(g_socket_path.c_str());
  if (path == nullptr || pthread_create(&thread, &attr, WatchDaemon, path) != 0) {
    free(path);
    std::fprintf(stderr,
                 "tessera: cannot start the daemon watcher thread; after a daemon restart "
                 "this process is found dead only by the daemon's sweep\n");
  }
  pthread_attr_destroy(&attr);
}

}  // namespace

TenantState& Tenant() { return g_tenant; }

CUresult InitialiseTenant(bool observer) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  TenantState& t = g_tenant;
  switch (t.mode.load()) {
    case Mode::kPassThrough:
    case Mode::kEnforcing:
      return CUDA_SUCCESS;
    case Mode::kFailed:
      return t.init_error;
    case Mode::kUninitialised:
      break;
  }
  auto fail = [&](CUresult r) {
    t.init_error = r;
    t.mode.store(Mode::kFailed);
    return r;
  };
  auto config = LoadTenantConfig(ProcessEnvironment());
  if (!config.ok()) {
    std::fprintf(stderr, "tessera: %s\n", config.error().c_str());
    return fail(CUDA_ERROR_INVALID_VALUE);
  }
  if (access(kManagedContainerMarker, F_OK) == 0) {
    // A container Tessera manages: nothing in the environment turns the shim off.
    const size_t before = config->notes.size();
    ApplyManagedContainer(&*config);
    for (size_t i = before; i < config->notes.size(); ++i) {
      std::fprintf(stderr, "tessera: %s\n", config->notes[i].c_str());
    }
  }
  if (config->disable.value) {
    t.mode.store(Mode::kPassThrough);
    return CUDA_SUCCESS;
  }
  g_socket_path = config->socket_path.value;
  protocol::Message hello{"HELLO", {{"version", std::to_string(protocol::kProtocolVersion)}}};
  if (config->container_id.is_set()) hello.fields["container"] = config->container_id.value;
  if (observer) hello.fields["observer"] = "1";
  g_observer = observer;
  if (config->visible_devices.is_set() && !config->visible_devices.value.all) {
    hello.fields["visible"] = config->visible_devices.value.ToString();
    g_restrict_devices = !observer;  // NVML is never renumbered, only the driver
  }
  // The container's compute settings, taken when this HELLO creates it (a container registered by
  // `tessera run` already has them).
  if (config->core_limit.is_set())
    hello.fields["core"] = std::to_string(config->core_limit.value.value());
  if (config->weight.is_set()) hello.fields["weight"] = std::to_string(config->weight.value);
  if (config->high_prio.is_set()) hello.fields["high_prio"] = config->high_prio.value ? "1" : "0";
  if (config->mem_limits.is_set()) {
    std::string list;
    for (const Bytes& b : config->mem_limits.value) {
      list += (list.empty() ? "" : ",") + std::to_string(b.count());
    }
    hello.fields["mem"] = list;
  }
  g_hello = protocol::FormatMessage(hello);
  std::string error;
  if (!Register(&error)) {
    if (error.find("TESSERA_VISIBLE_DEVICES") != std::string::npos) {
      std::fprintf(stderr, "tessera: %s\n", error.c_str());
      return fail(CUDA_ERROR_INVALID_VALUE);
    }
    if (config->fail_open.value) {
      std::fprintf(stderr,
                   "tessera: WARNING: no Tessera daemon at %s (%s); running UNISOLATED because "
                   "TESSERA_FAIL_OPEN=1\n",
                   g_socket_path.c_str(), error.c_str());
      t.mode.store(Mode::kPassThrough);
      return CUDA_SUCCESS;
    }
    std::fprintf(stderr,
                 "tessera: cannot register with the Tessera daemon at %s: %s. Start tesserad "
                 "(or run under `tessera run`), point TESSERA_SOCKET at it, or set "
                 "TESSERA_FAIL_OPEN=1 to run without isolation\n",
                 g_socket_path.c_str(), error.c_str());
    return fail(CUDA_ERROR_NOT_INITIALIZED);
  }
  static std::once_flag atfork;
  if (!observer) {
    std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, AfterForkInChild); });
  }
  t.mode.store(Mode::kEnforcing, std::memory_order_release);
  return CUDA_SUCCESS;
}

bool RegisterForkedChild() {
  TenantState& t = g_tenant;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!t.needs_registration.load()) return true;
  std::string error;
  if (!Register(&error)) {
    std::fprintf(stderr, "tessera: forked process %d cannot register with %s: %s\n", getpid(),
                 g_socket_path.c_str(), error.c_str());
    return false;
  }
  t.needs_registration.store(false, std::memory_order_release);
  return true;
}

}  // namespace tessera::shim
