// Server: tesserad's event loop. Accepts connections on the Unix socket, reads one request line at
// a time, hands it to the Registry, writes the reply (with the ledger descriptor for HELLO), and
// reports a registered connection's close to the Registry at once: that close is how the daemon
// learns a process died, SIGKILL included. Once a second it also sweeps for dead processes that
// registered with an earlier daemon (they have no connection to this one). Single-threaded
// (epoll); holds no policy. The CTL verb goes to the control tree (daemon/ctl_door.h).
//
// Who may do what on the node socket is decided by the peer's credentials (SO_PEERCRED, read at
// accept), never by who can reach the socket: CONTAINER and control-tree writes need an
// administrator (daemon/ctl_door.h: root, the daemon's own user, or the admin group); anyone who
// can connect may register a process (HELLO), read STATUS and read the tree.
//
// No client can stall or starve the loop (docs/security.md, "The node daemon"): every socket is
// non-blocking; a reply the client does not take at once waits in that connection's own backlog
// (the kernel's send buffer of a connection is one reply of the longest kind, so a client that
// does not read holds little kernel memory either), and a client whose backlog passes
// ServerOptions::max_reply_backlog, or is not empty again within request_timeout, is dropped; a
// request line is at most max_request_line bytes and must arrive whole within request_timeout of
// its first byte; a connection that has registered no process and sends nothing for idle_timeout is
// closed; each turn of the loop reads at most 4 KiB and answers at most a few dozen requests per
// connection, so one client's pipeline cannot hold the others back; connections are limited per
// container socket (and per user on the node socket, root and the daemon's user aside), and in all
// to what the open-files limit leaves room for; at that limit the loop stops accepting for a moment
// instead of failing to accept in a busy loop. Refusals and drops are logged at most
// refusal_log_rate lines a second (RateLimitedLog).
//
// Container sockets (`tesserad --container-sockets DIR`): for every container an operator
// registered (CONTAINER), the server also listens on a socket for that container's pods to use as
// TESSERA_SOCKET: DIR/<id>/tessera.sock, in a folder of its own that a pod
// mounts (the folder outlives a daemon restart; the socket in it is opened anew). A connection
// accepted there belongs to that container: HELLO
// registers into it only (a HELLO naming another container is refused), CTL sees the
// container-scoped, read-only view of the tree (ControlTree::ScopedTo), and CONTAINER and STATUS
// (node-wide) are refused. The sockets follow the containers: created within a second of a
// registration (at once for one made on this server), removed when the container goes (with its
// folder; at the daemon's exit only the socket goes).
//
// Identity (daemon/identity.h): with an IdentityBook, a connection on a container's socket is
// checked at accept() against the container's recorded identity (the peer's cgroup, by its
// SO_PEERCRED pid) and a stranger's requests are refused; HELLO on any socket registers a process
// of an identified container into that container only; IDENTIFY (node socket, root) records one.
// The container-sockets folder is root's alone (0700): a pod reaches its own folder through its
// bind mount, and no one else reaches any.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "ctl/control_tree.h"
#include "daemon/ctl_door.h"
#include "daemon/identity.h"
#include "daemon/rate_limited_log.h"
#include "daemon/registry.h"
#include "ipc/unix_socket.h"

namespace tessera::daemon {

// The file name of a container's socket in its folder under --container-sockets.
inline constexpr char kContainerSocketName[] = "tessera.sock";
// A file beside it holding the container's id: a process that sees it (at
// /run/tessera/container in a pod, kManagedContainerMarker in core/env_config.h) is in a container
// Tessera manages, where the shim cannot be turned off.
inline constexpr char kContainerMarkerName[] = "container";
// The folder under --container-sockets where container identities are kept over a restart (a
// name no container id can have).
inline constexpr char kIdentityStoreName[] = "+identity";

// The bounds that keep one client from stalling or starving the loop. The defaults are
// tesserad's; each is a flag and a config key (docs/contracts.md), validated in the ranges below.
struct ServerOptions {
  // Who administers the daemon (CONTAINER and CTL writes on the node socket).
  Administrators admins;
  // Empty for no container sockets.
  std::string container_socket_dir;
  // The longest request line, its '\n' included: 1 KiB to 64 KiB (the protocol's longest
  // message). Legitimate requests are a few hundred bytes.
  size_t max_request_line = 8 * 1024;
  // Reply bytes held for one client that is not reading them (beyond what the kernel's socket
  // buffer took): 64 KiB (one reply of the longest kind) to 16 MiB. Passing it drops the client.
  size_t max_reply_backlog = 256 * 1024;
  // A request line must arrive whole within this of its first byte, and replies held back must
  // all be taken within it of the first: 100 ms to 60 s.
  std::chrono::milliseconds request_timeout{5000};
  // A connection that registered no process (HELLO) and sends nothing for this long is closed:
  // 1 s to 1 h. A registered process's connection is its life, never timed out.
  std::chrono::milliseconds idle_timeout{60000};
  // Connections at once on one container's socket, and on the node socket per user (root and the
  // daemon's own user aside): 1 to 65536.
  int container_max_connections = 256;
  // Refusal and drop lines logged a second, at most: 1 to 10000.
  int refusal_log_rate = 10;
};

class Server {
 public:
  // `tree` (may be null: CTL is refused) and `registry` must outlive the server.
  Server(Registry* registry, int listen_fd, const ctl::ControlTree* tree = nullptr,
         ServerOptions options = {});
  // Runs until `stop` becomes true (checked at least every 100 ms), or a MIGCUT succeeded
  // (restart_requested()).
  Status Run(const std::atomic<bool>& stop);
  // MIGCUT (mig_recut.h), the administrator's: cuts a MIG GPU again. Unset: refused. After one
  // succeeds every later request is refused and Run returns: the caller restarts tesserad.
  using MigCutter = std::function<Result<protocol::Message>(const protocol::Message&)>;
  void set_mig_cutter(MigCutter cutter) { mig_cutter_ = std::move(cutter); }
  bool restart_requested() const { return restart_requested_; }
  // MPSGPUS (mps_gpus.h), the administrator's: the GPUs that run MPS. Unset: refused.
  using MpsGpusSetter = std::function<Result<protocol::Message>(const protocol::Message&)>;
  void set_mps_gpus_setter(MpsGpusSetter setter) { mps_gpus_setter_ = std::move(setter); }
  // Facts of the node added to every successful CONTAINER reply (MPS mode: mps_root=DIR).
  void set_container_reply_fields(std::map<std::string, std::string> fields) {
    container_reply_fields_ = std::move(fields);
  }
  // The most connections held at once: the open-files limit (RLIMIT_NOFILE, read at
  // construction) less room for the daemon's own descriptors.
  size_t max_connections() const { return max_connections_; }
  // The identity book (must outlive the server); with `require`, a container's socket serves no
  // process before the container's identity is recorded.
  void set_identities(IdentityBook* book, bool require) {
    identities_ = book;
    require_identity_ = require;
  }

 private:
  using Clock = std::chrono::steady_clock;
  // A reply not yet (wholly) taken by the kernel, with the descriptors it carries.
  struct Reply {
    std::string bytes;
    std::vector<int> fds;  // sent with the first byte, then closed
    size_t sent = 0;
  };
  struct Connection {
    std::optional<std::string> scope;  // accepted on this container's socket
    ipc::PeerCredentials peer;         // SO_PEERCRED at accept
    std::string door;                  // the connection limit it counts against; "" for none
    std::string in;                    // received bytes not yet answered
    Clock::time_point line_started;    // when the first byte of the unfinished line came
    Clock::time_point last_request;    // accepted, or the last request answered
    std::deque<Reply> out;             // replies the client has not taken yet
    size_t out_bytes = 0;
    Clock::time_point out_since;  // when `out` last went from empty to not
    bool writing = false;         // EPOLLOUT armed
    uint64_t turn = 0;            // the loop's turn in which it was last answered
    std::string refusal;          // the peer is not the container's: every request gets it
    bool registered = false;
    uint32_t process_slot = 0;
    uint32_t generation = 0;  // the slot's generation at registration
  };
  struct Listener {
    std::optional<std::string> scope;  // the container, for a container socket
    std::optional<Clock::time_point> paused_until;
  };

  // Accepts what is pending on a listener, a bounded number per turn.
  void Accept(int epoll_fd, int listen_fd);
  // Whether a new connection may be kept: the limits, by door and in all. Returns the refusal
  // (sent to the client before it is closed), or nullopt to keep it. Any further check of who
  // the peer is belongs here too.
  std::optional<std::string> Admit(const Listener& listener, const ipc::PeerCredentials& peer,
                                   std::string* door) const;
  // Opens sockets for new operator-registered containers and closes those of containers gone.
  void SyncContainerSockets(int epoll_fd);
  // Closes and unlinks a container's socket; removes its folder too when the container is gone.
  void CloseContainerSocket(int epoll_fd, int listen_fd, bool container_gone);
  // Reads what the client sent (one read per turn) and answers the requests it completes, up to
  // a few dozen per turn. Returns false when the connection must be closed.
  bool Readable(int epoll_fd, int fd, Connection& conn);
  // Answers complete lines waiting in conn.in, up to the per-turn count; false: close it.
  bool Answer(int epoll_fd, int fd, Connection& conn);
  // The reply to one request line (and descriptors to pass with it).
  std::string Handle(int epoll_fd, int fd, Connection& conn, const std::string& line,
                     std::vector<int>* pass_fds);
  // Sends `reply` or queues what the kernel does not take. False: the client is dropped.
  bool Send(int epoll_fd, int fd, Connection& conn, std::string reply, std::vector<int> fds);
  // Sends queued replies (EPOLLOUT). False: the connection must be closed.
  bool Flush(int epoll_fd, int fd, Connection& conn);
  // Arms or disarms EPOLLOUT to match whether replies are queued.
  void WatchWritable(int epoll_fd, int fd, Connection& conn);
  // Closes connections past their timeouts; resumes paused listeners.
  void Expire(int epoll_fd, Clock::time_point now);
  void Close(int epoll_fd, int fd);
  void Refused(const std::string& line) { log_.Log(line); }

  Registry* registry_;
  int listen_fd_;
  const ctl::ControlTree* tree_;
  ServerOptions options_;
  size_t max_connections_ = 0;
  std::map<int, Listener> listeners_;  // the node socket and every container socket
  std::unordered_map<int, Connection> connections_;
  std::unordered_map<std::string, int> door_connections_;  // Connection::door -> open count
  std::set<int> backlogged_;  // connections with complete lines left for the next turn
  uint64_t turn_ = 0;         // turns of the loop so far
  std::map<std::string, std::string> container_reply_fields_;
  MigCutter mig_cutter_;
  MpsGpusSetter mps_gpus_setter_;
  bool restart_requested_ = false;
  RateLimitedLog log_;
  IdentityBook* identities_ = nullptr;
  bool require_identity_ = false;
};

}  // namespace tessera::daemon
