// Server: tesserad's event loop. Accepts connections on the Unix socket, reads one request line at
// a time, hands it to the Registry, writes the reply (with the ledger descriptor for HELLO), and
// reports a registered connection's close to the Registry at once: that close is how the daemon
// learns a process died, SIGKILL included. Once a second it also sweeps for dead processes that
// registered with an earlier daemon (they have no connection to this one). Single-threaded
// (epoll); holds no policy. The CTL verb goes to the control tree (daemon/ctl_door.h); a write is
// allowed when the peer (SO_PEERCRED) is root or in the writer group.
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

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/result.h"
#include "ctl/control_tree.h"
#include "daemon/identity.h"
#include "daemon/registry.h"

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

class Server {
 public:
  // `tree` (may be null: CTL is refused) and `registry` must outlive the server. Members of
  // `writer_group` (besides root) may write the control tree through CTL.
  // `container_socket_dir`: empty for no container sockets.
  Server(Registry* registry, int listen_fd, const ctl::ControlTree* tree = nullptr,
         std::optional<gid_t> writer_group = std::nullopt, std::string container_socket_dir = "")
      : registry_(registry),
        listen_fd_(listen_fd),
        tree_(tree),
        writer_group_(writer_group),
        container_socket_dir_(std::move(container_socket_dir)) {}
  // Runs until `stop` becomes true (checked at least every 100 ms).
  Status Run(const std::atomic<bool>& stop);
  // Facts of the node added to every successful CONTAINER reply (MPS mode: mps_root=DIR).
  void set_container_reply_fields(std::map<std::string, std::string> fields) {
    container_reply_fields_ = std::move(fields);
  }
  // The identity book (must outlive the server); with `require`, a container's socket serves no
  // process before the container's identity is recorded.
  void set_identities(IdentityBook* book, bool require) {
    identities_ = book;
    require_identity_ = require;
  }

 private:
  struct Connection {
    std::string buffer;
    std::optional<std::string> scope;  // accepted on this container's socket
    std::string refusal;               // the peer is not the container's: every request gets it
    bool registered = false;
    uint32_t process_slot = 0;
    uint32_t generation = 0;  // the slot's generation at registration
  };
  void Accept(int epoll_fd, int listen_fd, const std::optional<std::string>& scope);
  // Opens sockets for new operator-registered containers and closes those of containers gone.
  void SyncContainerSockets(int epoll_fd);
  // Closes and unlinks a container's socket; removes its folder too when the container is gone.
  void CloseContainerSocket(int epoll_fd, int listen_fd, bool container_gone);
  // Returns false when the connection must be closed.
  bool Readable(int epoll_fd, int fd, Connection& conn);
  void Close(int epoll_fd, int fd);

  Registry* registry_;
  int listen_fd_;
  const ctl::ControlTree* tree_;
  std::optional<gid_t> writer_group_;
  std::string container_socket_dir_;
  std::map<int, std::string> container_listeners_;  // listening fd -> container id
  std::map<int, Connection> connections_;
  std::map<std::string, std::string> container_reply_fields_;
  IdentityBook* identities_ = nullptr;
  bool require_identity_ = false;
};

}  // namespace tessera::daemon
