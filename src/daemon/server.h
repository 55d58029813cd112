// Server: tesserad's event loop. Accepts connections on the Unix socket, reads one request line at
// a time, hands it to the Registry, writes the reply (with the ledger descriptor for HELLO), and
// reports a registered connection's close to the Registry at once: that close is how the daemon
// learns a process died, SIGKILL included. Once a second it also sweeps for dead processes that
// registered with an earlier daemon (they have no connection to this one). Single-threaded
// (epoll); holds no policy.
#pragma once

#include <atomic>
#include <map>
#include <string>

#include "core/result.h"
#include "daemon/registry.h"

namespace tessera::daemon {

class Server {
 public:
  Server(Registry* registry, int listen_fd) : registry_(registry), listen_fd_(listen_fd) {}
  // Runs until `stop` becomes true (checked at least every 100 ms).
  Status Run(const std::atomic<bool>& stop);

 private:
  struct Connection {
    std::string buffer;
    bool registered = false;
    uint32_t process_slot = 0;
  };
  void Accept(int epoll_fd);
  // Returns false when the connection must be closed.
  bool Readable(int fd, Connection& conn);
  void Close(int epoll_fd, int fd);

  Registry* registry_;
  int listen_fd_;
  std::map<int, Connection> connections_;
};

}  // namespace tessera::daemon
