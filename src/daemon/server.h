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
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "core/result.h"
#include "ctl/control_tree.h"
#include "daemon/registry.h"

namespace tessera::daemon {

// The file name of a container's socket in its folder under --container-sockets.
inline constexpr char kContainerSocketName[] = "tessera.sock";

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

 private:
  struct Connection {
    std::string buffer;
    std::optional<std::string> scope;  // accepted on this container's socket
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
};

}  // namespace tessera::daemon
