// Server: tesserad's event loop. Accepts connections on the Unix socket, reads one request line at
// a time, hands it to the Registry, writes the reply (with the ledger descriptor for HELLO), and
// reports a registered connection's close to the Registry at once: that close is how the daemon
// learns a process died, SIGKILL included. Once a second it also sweeps for dead processes that
// registered with an earlier daemon (they have no connection to this one). Single-threaded
// (epoll); holds no policy. The CTL verb goes to the control tree (daemon/ctl_door.h); a write is
// allowed when the peer (SO_PEERCRED) is root or in the writer group.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>

#include "core/result.h"
#include "ctl/control_tree.h"
#include "daemon/registry.h"

namespace tessera::daemon {

class Server {
 public:
  // `tree` (may be null: CTL is refused) and `registry` must outlive the server. Members of
  // `writer_group` (besides root) may write the control tree through CTL.
  Server(Registry* registry, int listen_fd, const ctl::ControlTree* tree = nullptr,
         std::optional<gid_t> writer_group = std::nullopt)
      : registry_(registry), listen_fd_(listen_fd), tree_(tree), writer_group_(writer_group) {}
  // Runs until `stop` becomes true (checked at least every 100 ms).
  Status Run(const std::atomic<bool>& stop);

 private:
  struct Connection {
    std::string buffer;
    bool registered = false;
    uint32_t process_slot = 0;
    uint32_t generation = 0;  // the slot's generation at registration
  };
  void Accept(int epoll_fd);
  // Returns false when the connection must be closed.
  bool Readable(int fd, Connection& conn);
  void Close(int epoll_fd, int fd);

  Registry* registry_;
  int listen_fd_;
  const ctl::ControlTree* tree_;
  std::optional<gid_t> writer_group_;
  std::map<int, Connection> connections_;
};

}  // namespace tessera::daemon
