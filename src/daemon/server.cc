// Server implementation: epoll over the listening socket and every client connection.
#include "daemon/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "daemon/ctl_door.h"
#include "ipc/unix_socket.h"
#include "ledger/ledger_layout.h"

namespace tessera::daemon {
namespace {

// Writes `folder`/container (the container's id, read-only for all), replacing it atomically.
void WriteContainerMarker(const std::string& folder, const std::string& id) {
  const std::string path = folder + "/" + kContainerMarkerName;
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (fd < 0) return;
  const std::string text = id + "\n";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fchmod(fd, 0444);
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) unlink(tmp.c_str());
}

}  // namespace

Status Server::Run(const std::atomic<bool>& stop) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return Status::Error(std::string("epoll_create1: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd_, &ev);
  epoll_event events[64];
  auto next_sweep = std::chrono::steady_clock::now();
  while (!stop.load()) {
    // Processes registered with an earlier daemon (before a restart) have no connection here:
    // their deaths are found by a sweep once a second instead of by a close.
    if (std::chrono::steady_clock::now() >= next_sweep) {
      registry_->ReclaimDeadProcesses();
      registry_->Repair();
      SyncContainerSockets(ep);
      if (identities_ != nullptr) SweepIdentities(*identities_, *registry_);
      next_sweep = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    const int n = epoll_wait(ep, events, 64, 100);
    if (n < 0 && errno != EINTR) {
      close(ep);
      return Status::Error(std::string("epoll_wait: ") + std::strerror(errno));
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        Accept(ep, fd, std::nullopt);
        continue;
      }
      if (auto l = container_listeners_.find(fd); l != container_listeners_.end()) {
        Accept(ep, fd, l->second);
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      if ((events[i].events & (EPOLLHUP | EPOLLERR)) != 0 && (events[i].events & EPOLLIN) == 0) {
        Close(ep, fd);
      } else if (!Readable(ep, fd, it->second)) {
        Close(ep, fd);
      }
    }
  }
  // Stopping is not the processes' death: they keep running with their memory, and re-attach
  // to the next daemon (HELLO resume) or are found by its sweep. Their connections close without
  // reclaiming anything (a SIGTERM used to hand every live tenant's bytes back).
  for (auto& [fd, conn] : connections_) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
  }
  connections_.clear();
  while (!container_listeners_.empty())
    CloseContainerSocket(ep, container_listeners_.begin()->first, /*container_gone=*/false);
  close(ep);
  return Status::Ok();
}

void Server::Accept(int ep, int listen_fd, const std::optional<std::string>& scope) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    Connection conn;
    conn.scope = scope;
    if (scope && identities_ != nullptr) {
      // The peer as the kernel saw it at connect(): a process of the container, or refused.
      auto peer = ipc::PeerOf(fd);
      conn.refusal =
          peer.ok() ? AdmitToContainerSocket(*identities_, require_identity_, *scope, peer->pid)
                    : "cannot read the caller's credentials: " + peer.error();
    }
    connections_[fd] = std::move(conn);
  }
}

void Server::SyncContainerSockets(int ep) {
  if (container_socket_dir_.empty()) return;
  const std::set<std::string> wanted = registry_->WithLedger([](const ledger::MemoryLedger& l) {
    std::set<std::string> ids;
    for (int c = 0; c < ledger::kMaxContainers; ++c) {
      const ledger::LedgerBook::Container& slot = l.book().containers[c];
      if (slot.state.load() == ledger::kLive &&
          (slot.flags.load() & ledger::kContainerRegistered) != 0) {
        ids.insert(slot.id);
      }
    }
    return ids;
  });
  std::set<std::string> have;
  for (auto it = container_listeners_.begin(); it != container_listeners_.end();) {
    const int fd = it->first;
    const bool gone = wanted.count(it->second) == 0;
    if (!gone) have.insert(it->second);
    ++it;
    if (gone) CloseContainerSocket(ep, fd, /*container_gone=*/true);
  }
  for (const std::string& id : wanted) {
    if (have.count(id) != 0) continue;
    // A folder per container, kept across daemon restarts, so a pod's bind mount of the folder
    // sees the socket a restarted daemon opens anew (a mount of the socket file would keep the
    // old, unlinked one).
    const std::string folder = container_socket_dir_ + "/" + id;
    mkdir(folder.c_str(), 0711);
    chmod(folder.c_str(), 0711);  // one made by an earlier tesserad, 0755
    WriteContainerMarker(folder, id);
    const std::string path = folder + "/" + kContainerSocketName;
    auto fd = ipc::Listen(path);
    if (!fd.ok()) {
      std::fprintf(stderr, "tesserad: container %s: cannot open its socket: %s\n", id.c_str(),
                   fd.error().c_str());
      continue;
    }
    // Any user of the pod that mounts the folder may connect (it runs as whoever it runs as);
    // the folder above is root's alone, and who the caller is, the identity check decides.
    chmod(path.c_str(), 0666);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = *fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, *fd, &ev);
    container_listeners_[*fd] = id;
  }
}

void Server::CloseContainerSocket(int ep, int listen_fd, bool container_gone) {
  auto it = container_listeners_.find(listen_fd);
  if (it == container_listeners_.end()) return;
  const std::string folder = container_socket_dir_ + "/" + it->second;
  unlink((folder + "/" + kContainerSocketName).c_str());
  if (container_gone) {
    unlink((folder + "/" + kContainerMarkerName).c_str());
    rmdir(folder.c_str());
  }
  epoll_ctl(ep, EPOLL_CTL_DEL, listen_fd, nullptr);
  close(listen_fd);
  container_listeners_.erase(it);
}

bool Server::Readable(int epoll_fd, int fd, Connection& conn) {
  char data[4096];
  for (;;) {
    const ssize_t n = recv(fd, data, sizeof(data), 0);
    if (n == 0) return false;  // closed: for a registered process, its death
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return false;
    }
    conn.buffer.append(data, static_cast<size_t>(n));
    if (conn.buffer.size() > ipc::kMaxMessage) return false;
  }
  size_t nl;
  while ((nl = conn.buffer.find('\n')) != std::string::npos) {
    const std::string line = conn.buffer.substr(0, nl);
    conn.buffer.erase(0, nl + 1);
    auto request = protocol::ParseMessage(line);
    std::string reply;
    std::vector<int> pass_fds;  // closed after the reply is sent
    if (request.ok() && conn.scope && request->verb == "HELLO") {
      // A container socket registers into its own container only.
      const std::string named = request->Get("container", *conn.scope);
      if (named == *conn.scope) request->fields["container"] = *conn.scope;
    }
    if (!conn.refusal.empty()) {
      reply = "ERR " + conn.refusal;
    } else if (!request.ok()) {
      reply = "ERR " + request.error();
    } else if (conn.scope && request->verb == "HELLO" && request->Get("container") != *conn.scope) {
      reply = "ERR this socket belongs to container " + *conn.scope +
              "; HELLO container=" + request->Get("container") + " is not allowed on it";
    } else if (conn.scope && (request->verb == "CONTAINER" || request->verb == "STATUS" ||
                              request->verb == "IDENTIFY")) {
      reply = "ERR " + request->verb + " is node-wide and not served on container " + *conn.scope +
              "'s socket; use the node socket, or CTL for this container's view";
    } else if (request->verb == "HELLO") {
      if (conn.registered) {
        reply = "ERR this connection already registered a process";
      } else {
        auto peer = ipc::PeerOf(fd);
        uint32_t slot = 0;
        // A process of an identified container registers into that container only.
        const std::string refused =
            peer.ok() && identities_ != nullptr && !request->Has("resume")
                ? AdmitHello(*identities_,
                             request->Get("container", "proc-" + std::to_string(peer->pid)),
                             peer->pid)
                : "";
        auto hello = !refused.empty() ? Result<protocol::Message>::Error(refused)
                     : peer.ok()      ? registry_->Hello(*request, peer->pid, &slot)
                                      : Result<protocol::Message>(peer.status());
        if (hello.ok()) {
          // A process of the container that owns this socket: its cgroup is the container's.
          if (conn.scope && identities_ != nullptr && slot != kNoProcess) {
            identities_->NoteRegistrant(*conn.scope, peer->pid);
          }
          conn.registered = true;
          conn.process_slot = slot;
          conn.generation = static_cast<uint32_t>(
              std::strtoul(hello->Get("generation", "0").c_str(), nullptr, 10));
          // The ledger as this process may map it: the node view read-only, its own
          // container's segment, the exchange (ledger_layout.h).
          const auto c = static_cast<uint32_t>(
              std::strtoul(hello->Get("container", "0").c_str(), nullptr, 10));
          auto fds = registry_->ledger().OpenForTenant(c % ledger::kMaxContainers);
          if (fds.ok()) {
            reply = protocol::FormatMessage(*hello);
            pass_fds = {fds->node, fds->container, fds->exchange};
          } else {
            reply = "ERR " + fds.error();
          }
        } else {
          reply = "ERR " + hello.error();
        }
      }
    } else if (request->verb == "CONTAINER") {
      // identify=1: the container runtime will identify the container's processes (IDENTIFY);
      // none is served before it has.
      protocol::Message update = *request;
      const std::optional<std::string> identify =
          update.Has("identify") ? std::optional(update.Get("identify")) : std::nullopt;
      update.fields.erase("identify");
      auto set = identify && *identify != "0" && *identify != "1"
                     ? Result<protocol::Message>::Error("CONTAINER identify=" + *identify +
                                                        ": expected 0 or 1")
                     : registry_->SetContainer(update);
      if (set.ok())
        set->fields.insert(container_reply_fields_.begin(), container_reply_fields_.end());
      reply = set.ok() ? protocol::FormatMessage(*set) : "ERR " + set.error();
      if (set.ok() && identify && identities_ != nullptr) {
        identities_->Expect(request->Get("id"), *identify == "1");
      }
      if (set.ok()) SyncContainerSockets(epoll_fd);
    } else if (request->verb == "IDENTIFY") {
      auto peer = ipc::PeerOf(fd);
      auto identified = identities_ == nullptr ? Result<protocol::Message>::Error(
                                                     "this tesserad keeps no "
                                                     "container identities")
                        : peer.ok() ? Identify(*identities_, *registry_, *request, peer->uid)
                                    : Result<protocol::Message>(peer.status());
      reply = identified.ok() ? protocol::FormatMessage(*identified) : "ERR " + identified.error();
    } else if (request->verb == "STATUS") {
      reply = "OK " + registry_->StatusJson();
    } else if (request->verb == "CTL") {
      if (tree_ == nullptr) {
        reply = "ERR this tesserad serves no control tree";
      } else {
        auto peer = ipc::PeerOf(fd);
        const bool may_write = !conn.scope && peer.ok() && PeerMayWrite(*peer, writer_group_);
        const ctl::ControlTree view = conn.scope ? tree_->ScopedTo(*conn.scope) : *tree_;
        auto answer = HandleCtl(view, *request, may_write);
        reply = answer.ok() ? "OK " + *answer : "ERR " + answer.error();
      }
    } else {
      reply = "ERR unknown verb " + request->verb +
              "; expected HELLO, CONTAINER, STATUS, CTL or IDENTIFY";
    }
    if (!reply.empty() && reply.rfind("ERR ", 0) == 0) {
      std::fprintf(stderr, "tesserad: refused \"%s\": %s\n", line.substr(0, 200).c_str(),
                   reply.c_str() + 4);
    }
    for (char& c : reply) {
      if (c == '\n' || c == '\r') c = ' ';  // one reply, one line (JSON escapes its own)
    }
    const bool sent = ipc::SendLine(fd, reply, pass_fds).ok();
    for (int passed : pass_fds) close(passed);
    if (!sent || !conn.refusal.empty()) return false;
  }
  return true;
}

void Server::Close(int ep, int fd) {
  auto it = connections_.find(fd);
  if (it != connections_.end() && it->second.registered) {
    registry_->Disconnected(it->second.process_slot, it->second.generation);
  }
  connections_.erase(fd);
  epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
}

}  // namespace tessera::daemon
