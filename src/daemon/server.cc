// Server implementation: epoll over the listening sockets and every client connection, all
// non-blocking; per-connection input and reply backlogs with their bounds and timeouts.
#include "daemon/server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "ledger/ledger_layout.h"

namespace tessera::daemon {
namespace {

// Bytes read from one connection in one turn of the loop, requests answered, connections accepted
// on one listener: small enough that one busy client cannot hold the others back for long.
constexpr size_t kReadPerTurn = 4096;
constexpr int kRequestsPerTurn = 32;
constexpr int kAcceptsPerTurn = 64;
// How long a listener rests after accept(2) failed for want of descriptors or memory.
constexpr std::chrono::milliseconds kAcceptPause{200};

// Connections the open-files limit leaves room for: the rest (half, at most 1024) is kept for the
// daemon's own descriptors (container listeners and segments, the FUSE and HTTP doors, /proc).
size_t MaxConnections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 20;
  const auto soft = static_cast<size_t>(limit.rlim_cur);
  return soft - std::min<size_t>(soft / 2, 1024);
}

void ToStderr(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

std::string Describe(const std::optional<std::string>& scope) {
  return scope ? "container " + *scope + "'s socket" : std::string("the node socket");
}

// Sends what the kernel takes of `bytes` past `sent`, never waiting (`fds` go with the first byte
// and are closed here once sent). False on an error that ends the connection.
bool Write(int fd, std::string& bytes, std::vector<int>& fds, size_t& sent) {
  while (sent < bytes.size()) {
    iovec iov{bytes.data() + sent, bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * ipc::kMaxPassedFds)];
    if (!fds.empty()) {
      const size_t n = sizeof(int) * std::min(fds.size(), ipc::kMaxPassedFds);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(n);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(n);
      std::memcpy(CMSG_DATA(c), fds.data(), n);
    }
    const ssize_t n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    for (int passed : fds) close(passed);  // the peer holds them now
    fds.clear();
    sent += static_cast<size_t>(n);
  }
  return true;
}

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

Server::Server(Registry* registry, int listen_fd, const ctl::ControlTree* tree,
               ServerOptions options)
    : registry_(registry),
      listen_fd_(listen_fd),
      tree_(tree),
      options_(std::move(options)),
      max_connections_(MaxConnections()),
      log_(options_.refusal_log_rate, ToStderr) {}

Status Server::Run(const std::atomic<bool>& stop) {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return Status::Error(std::string("epoll_create1: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd_, &ev);
  listeners_[listen_fd_] = Listener{};
  epoll_event events[256];
  auto next_sweep = Clock::now();
  auto next_expiry = Clock::now();
  while (!stop.load() && !restart_requested_) {
    const auto now = Clock::now();
    // Processes registered with an earlier daemon (before a restart) have no connection here:
    // their deaths are found by a sweep once a second instead of by a close.
    if (now >= next_sweep) {
      registry_->ReclaimDeadProcesses();
      registry_->Repair();
      SyncContainerSockets(ep);
      if (identities_ != nullptr) SweepIdentities(*identities_, *registry_);
      next_sweep = now + std::chrono::seconds(1);
    }
    if (now >= next_expiry) {
      Expire(ep, now);
      next_expiry = now + std::chrono::milliseconds(100);
    }
    log_.Flush(now);
    ++turn_;
    const int n = epoll_wait(ep, events, 256, backlogged_.empty() ? 100 : 0);
    if (n < 0 && errno != EINTR) {
      close(ep);
      return Status::Error(std::string("epoll_wait: ") + std::strerror(errno));
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (listeners_.count(fd) != 0) {
        Accept(ep, fd);
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      bool keep = true;
      if ((events[i].events & EPOLLOUT) != 0) keep = Flush(ep, fd, it->second);
      if (keep && (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        keep = Readable(ep, fd, it->second);
      }
      if (!keep) Close(ep, fd);
    }
    // Complete requests left from an earlier turn (a client that sent many at once), one turn's
    // share each, after everyone else's.
    if (!backlogged_.empty()) {
      const std::vector<int> waiting(backlogged_.begin(), backlogged_.end());
      for (int fd : waiting) {
        auto it = connections_.find(fd);
        if (it == connections_.end()) {
          backlogged_.erase(fd);
        } else if (it->second.turn != turn_ && !Answer(ep, fd, it->second)) {
          Close(ep, fd);
        }
      }
    }
  }
  // Stopping is not the processes' death: they keep running with their memory, and re-attach
  // to the next daemon (HELLO resume) or are found by its sweep. Their connections close without
  // reclaiming anything (a SIGTERM used to hand every live tenant's bytes back).
  for (auto& [fd, conn] : connections_) {
    for (Reply& r : conn.out) {
      for (int passed : r.fds) close(passed);
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
  }
  connections_.clear();
  door_connections_.clear();
  backlogged_.clear();
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    const int fd = it->first;
    const bool container = it->second.scope.has_value();
    ++it;
    if (container) CloseContainerSocket(ep, fd, /*container_gone=*/false);
  }
  listeners_.clear();
  close(ep);
  return Status::Ok();
}

void Server::Accept(int ep, int listen_fd) {
  auto found = listeners_.find(listen_fd);
  if (found == listeners_.end() || found->second.paused_until) return;
  const Listener listener = found->second;
  for (int i = 0; i < kAcceptsPerTurn; ++i) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors (or memory): the connection stays queued and the socket readable, so
      // trying again at once would only spin. That listener rests for a moment instead.
      Refused("tesserad: cannot accept on " + Describe(listener.scope) + ": " +
              std::strerror(errno) + "; not accepting there for " +
              std::to_string(kAcceptPause.count()) + " ms");
      epoll_event ev{};
      ev.events = 0;
      ev.data.fd = listen_fd;
      epoll_ctl(ep, EPOLL_CTL_MOD, listen_fd, &ev);
      found->second.paused_until = Clock::now() + kAcceptPause;
      return;
    }
    auto peer = ipc::PeerOf(fd);
    std::string door;
    std::optional<std::string> refusal =
        peer.ok() ? Admit(listener, *peer, &door) : std::optional<std::string>(peer.error());
    if (refusal) {
      // Said to the client (its first read gets it) and logged, then closed.
      const std::string line = "ERR " + *refusal + "\n";
      (void)send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      close(fd);
      Refused("tesserad: refused a connection on " + Describe(listener.scope) +
              (peer.ok()
                   ? " from pid " + std::to_string(peer->pid) + " uid " + std::to_string(peer->uid)
                   : std::string()) +
              ": " + *refusal);
      continue;
    }
    // The kernel holds at most one reply of the longest kind for a client (it doubles the value
    // set): what a client does not read waits in the backlog, where it is counted and bounded.
    const int send_buffer = static_cast<int>(ipc::kMaxMessage / 2);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(send_buffer));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    Connection conn;
    conn.scope = listener.scope;
    conn.peer = *peer;
    conn.door = door;
    conn.last_request = Clock::now();
    if (!door.empty()) ++door_connections_[door];
    if (listener.scope && identities_ != nullptr) {
      // The peer as the kernel saw it at connect(): a process of the container, or refused.
      conn.refusal =
          AdmitToContainerSocket(*identities_, require_identity_, *listener.scope, peer->pid);
    }
    connections_[fd] = std::move(conn);
  }
}

std::optional<std::string> Server::Admit(const Listener& listener, const ipc::PeerCredentials& peer,
                                         std::string* door) const {
  if (connections_.size() >= max_connections_) {
    return "tesserad holds " + std::to_string(connections_.size()) +
           " connections, the most its open-files limit leaves room for; try again later (the "
           "operator raises LimitNOFILE)";
  }
  if (listener.scope) {
    *door = "container " + *listener.scope;
  } else if (peer.uid != 0 && peer.uid != options_.admins.daemon_uid) {
    *door = "uid " + std::to_string(peer.uid) + " on the node socket";
  } else {
    return std::nullopt;  // root and the daemon's own user: bounded by the total only
  }
  auto open = door_connections_.find(*door);
  if (open != door_connections_.end() && open->second >= options_.container_max_connections) {
    return *door + " has " + std::to_string(open->second) +
           " connections open, the most one container (or user) may have " +
           "(container_max_connections " + std::to_string(options_.container_max_connections) + ")";
  }
  return std::nullopt;
}

void Server::SyncContainerSockets(int ep) {
  if (options_.container_socket_dir.empty()) return;
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
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    const int fd = it->first;
    const std::optional<std::string> scope = it->second.scope;
    ++it;
    if (!scope) continue;  // the node socket
    const bool gone = wanted.count(*scope) == 0;
    if (!gone) have.insert(*scope);
    if (gone) CloseContainerSocket(ep, fd, /*container_gone=*/true);
  }
  for (const std::string& id : wanted) {
    if (have.count(id) != 0) continue;
    // A folder per container, kept across daemon restarts, so a pod's bind mount of the folder
    // sees the socket a restarted daemon opens anew (a mount of the socket file would keep the
    // old, unlinked one).
    const std::string folder = options_.container_socket_dir + "/" + id;
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
    listeners_[*fd] = Listener{id, std::nullopt};
  }
}

void Server::CloseContainerSocket(int ep, int listen_fd, bool container_gone) {
  auto it = listeners_.find(listen_fd);
  if (it == listeners_.end() || !it->second.scope) return;
  const std::string folder = options_.container_socket_dir + "/" + *it->second.scope;
  unlink((folder + "/" + kContainerSocketName).c_str());
  if (container_gone) {
    unlink((folder + "/" + kContainerMarkerName).c_str());
    rmdir(folder.c_str());
  }
  epoll_ctl(ep, EPOLL_CTL_DEL, listen_fd, nullptr);
  close(listen_fd);
  listeners_.erase(it);
}

bool Server::Readable(int ep, int fd, Connection& conn) {
  // A connection with complete requests still waiting reads nothing more until they are answered:
  // what it sends meanwhile waits in its own socket buffer, not in the daemon's memory.
  if (backlogged_.count(fd) == 0) {
    char data[kReadPerTurn];
    ssize_t n;
    do {
      n = recv(fd, data, sizeof(data), 0);
    } while (n < 0 && errno == EINTR);
    if (n == 0) return false;  // closed: for a registered process, its death
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (conn.in.empty()) conn.line_started = Clock::now();
    conn.in.append(data, static_cast<size_t>(n));
  }
  return Answer(ep, fd, conn);
}

bool Server::Answer(int ep, int fd, Connection& conn) {
  conn.turn = turn_;
  const auto now = Clock::now();
  size_t pos = 0;
  for (int answered = 0; answered < kRequestsPerTurn; ++answered) {
    const size_t nl = conn.in.find('\n', pos);
    if (nl == std::string::npos || nl - pos + 1 > options_.max_request_line) break;
    const std::string line = conn.in.substr(pos, nl - pos);
    pos = nl + 1;
    conn.last_request = now;
    std::vector<int> pass_fds;
    std::string reply = Handle(ep, fd, conn, line, &pass_fds);
    if (!Send(ep, fd, conn, std::move(reply), std::move(pass_fds))) return false;
    if (!conn.refusal.empty()) return false;  // a stranger on a container's socket: said, closed
  }
  conn.in.erase(0, pos);
  if (pos > 0 && !conn.in.empty()) conn.line_started = now;  // the rest came with the last read
  const size_t nl = conn.in.find('\n');
  const size_t line_bytes = nl == std::string::npos ? conn.in.size() : nl + 1;
  if (line_bytes > options_.max_request_line ||
      (nl == std::string::npos && line_bytes >= options_.max_request_line)) {
    const std::string refusal = "ERR a request line is at most " +
                                std::to_string(options_.max_request_line) +
                                " bytes (max_request_line); this one is longer\n";
    if (conn.out.empty())
      (void)send(fd, refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    Refused("tesserad: closed a connection on " + Describe(conn.scope) + " from pid " +
            std::to_string(conn.peer.pid) + ": a request line longer than " +
            std::to_string(options_.max_request_line) + " bytes");
    return false;
  }
  if (nl != std::string::npos) {
    backlogged_.insert(fd);
  } else {
    backlogged_.erase(fd);
  }
  return true;
}

std::string Server::Handle(int epoll_fd, int /*fd*/, Connection& conn, const std::string& line,
                           std::vector<int>* pass_fds_out) {
  std::string reply;
  std::vector<int>& pass_fds = *pass_fds_out;  // closed once sent
  auto request = protocol::ParseMessage(line);
  if (request.ok() && conn.scope && request->verb == "HELLO") {
    // A container socket registers into its own container only.
    const std::string named = request->Get("container", *conn.scope);
    if (named == *conn.scope) request->fields["container"] = *conn.scope;
  }
  if (!conn.refusal.empty()) {
    reply = "ERR " + conn.refusal;
  } else if (restart_requested_) {
    reply = "ERR tesserad restarts to take a GPU's new MIG devices; ask again in a moment";
  } else if (!request.ok()) {
    reply = "ERR " + request.error();
  } else if (conn.scope && request->verb == "HELLO" && request->Get("container") != *conn.scope) {
    reply = "ERR this socket belongs to container " + *conn.scope +
            "; HELLO container=" + request->Get("container") + " is not allowed on it";
  } else if (conn.scope && (request->verb == "CONTAINER" || request->verb == "STATUS" ||
                            request->verb == "IDENTIFY" || request->verb == "MIGCUT" ||
                            request->verb == "MPSGPUS")) {
    reply = "ERR " + request->verb + " is node-wide and not served on container " + *conn.scope +
            "'s socket; use the node socket, or CTL for this container's view";
  } else if (request->verb == "HELLO") {
    if (conn.registered) {
      reply = "ERR this connection already registered a process";
    } else {
      uint32_t slot = 0;
      // A process of an identified container registers into that container only.
      const std::string refused =
          identities_ != nullptr && !request->Has("resume")
              ? AdmitHello(*identities_,
                           request->Get("container", "proc-" + std::to_string(conn.peer.pid)),
                           conn.peer.pid)
              : "";
      auto hello = !refused.empty() ? Result<protocol::Message>::Error(refused)
                                    : registry_->Hello(*request, conn.peer.pid, &slot);
      if (hello.ok()) {
        // A process of the container that owns this socket: its cgroup is the container's.
        if (conn.scope && identities_ != nullptr && slot != kNoProcess) {
          identities_->NoteRegistrant(*conn.scope, conn.peer.pid);
        }
        conn.registered = true;
        conn.process_slot = slot;
        conn.generation =
            static_cast<uint32_t>(std::strtoul(hello->Get("generation", "0").c_str(), nullptr, 10));
        // The ledger as this process may map it: the node view read-only, its own
        // container's segment, the exchange (ledger_layout.h).
        const auto c =
            static_cast<uint32_t>(std::strtoul(hello->Get("container", "0").c_str(), nullptr, 10));
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
  } else if (request->verb == "CONTAINER" && !PeerIsAdministrator(conn.peer, options_.admins)) {
    // Registering, changing and removing containers is the operator's (the device plugin runs
    // as root): who can reach the socket does not matter, who the peer is does.
    reply = "ERR permission denied: CONTAINER registers, changes and removes containers; " +
            WhoMayAdminister(conn.peer, options_.admins);
  } else if (request->verb == "CONTAINER") {
    // identify=1: the container runtime will identify the container's processes (IDENTIFY); none
    // is served before it has.
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
  } else if (request->verb == "MIGCUT" && !PeerIsAdministrator(conn.peer, options_.admins)) {
    reply = "ERR permission denied: MIGCUT cuts a GPU again; " +
            WhoMayAdminister(conn.peer, options_.admins);
  } else if (request->verb == "MIGCUT") {
    auto cut = mig_cutter_ ? mig_cutter_(*request)
                           : Result<protocol::Message>::Error("this tesserad cuts no MIG GPU");
    reply = cut.ok() ? protocol::FormatMessage(*cut) : "ERR " + cut.error();
    if (cut.ok()) restart_requested_ = true;
  } else if (request->verb == "MPSGPUS" && !PeerIsAdministrator(conn.peer, options_.admins)) {
    reply = "ERR permission denied: MPSGPUS starts and stops GPUs' MPS control daemons; " +
            WhoMayAdminister(conn.peer, options_.admins);
  } else if (request->verb == "MPSGPUS") {
    auto set = mps_gpus_setter_
                   ? mps_gpus_setter_(*request)
                   : Result<protocol::Message>::Error(
                         "MPSGPUS: this tesserad runs no MPS; start it with --mps-gpus none (or "
                         "--mps, --mps-gpus LIST) and --mps-control, --mps-dir");
    reply = set.ok() ? protocol::FormatMessage(*set) : "ERR " + set.error();
  } else if (request->verb == "IDENTIFY") {
    auto identified =
        identities_ == nullptr
            ? Result<protocol::Message>::Error("this tesserad keeps no container identities")
            : Identify(*identities_, *registry_, *request, conn.peer.uid);
    reply = identified.ok() ? protocol::FormatMessage(*identified) : "ERR " + identified.error();
  } else if (request->verb == "STATUS") {
    reply = "OK " + registry_->StatusJson();
  } else if (request->verb == "CTL") {
    if (tree_ == nullptr) {
      reply = "ERR this tesserad serves no control tree";
    } else {
      const bool may_write = !conn.scope && PeerIsAdministrator(conn.peer, options_.admins);
      const ctl::ControlTree view = conn.scope ? tree_->ScopedTo(*conn.scope) : *tree_;
      auto answer = HandleCtl(view, *request, may_write);
      reply = answer.ok() ? "OK " + *answer : "ERR " + answer.error();
    }
  } else {
    reply = "ERR unknown verb " + request->verb +
            "; expected HELLO, CONTAINER, STATUS, CTL, IDENTIFY, MIGCUT or MPSGPUS";
  }
  if (!reply.empty() && reply.rfind("ERR ", 0) == 0) {
    Refused("tesserad: refused \"" + line.substr(0, 200) + "\" on " + Describe(conn.scope) + ": " +
            reply.substr(4));
  }
  return reply;
}

bool Server::Send(int ep, int fd, Connection& conn, std::string reply, std::vector<int> fds) {
  for (char& c : reply) {
    if (c == '\n' || c == '\r') c = ' ';  // one reply, one line (JSON escapes its own)
  }
  reply += '\n';
  if (reply.size() > ipc::kMaxMessage) {
    for (int passed : fds) close(passed);
    Refused("tesserad: closed a connection on " + Describe(conn.scope) + ": its reply of " +
            std::to_string(reply.size()) + " bytes is longer than the protocol's " +
            std::to_string(ipc::kMaxMessage));
    return false;
  }
  Reply r{std::move(reply), std::move(fds), 0};
  if (conn.out.empty()) {
    if (!Write(fd, r.bytes, r.fds, r.sent)) {
      for (int passed : r.fds) close(passed);
      return false;
    }
    if (r.sent == r.bytes.size()) return true;
    conn.out_since = Clock::now();
  }
  conn.out_bytes += r.bytes.size() - r.sent;
  conn.out.push_back(std::move(r));
  if (conn.out_bytes > options_.max_reply_backlog) {
    Refused("tesserad: dropped a connection on " + Describe(conn.scope) + " from pid " +
            std::to_string(conn.peer.pid) + ": it does not read its replies (" +
            std::to_string(conn.out_bytes) + " bytes waiting; max_reply_backlog " +
            std::to_string(options_.max_reply_backlog) + ")");
    return false;
  }
  WatchWritable(ep, fd, conn);
  return true;
}

bool Server::Flush(int ep, int fd, Connection& conn) {
  while (!conn.out.empty()) {
    Reply& r = conn.out.front();
    const size_t before = r.sent;
    if (!Write(fd, r.bytes, r.fds, r.sent)) return false;
    conn.out_bytes -= r.sent - before;
    if (r.sent < r.bytes.size()) break;
    conn.out.pop_front();
  }
  WatchWritable(ep, fd, conn);
  return true;
}

void Server::WatchWritable(int ep, int fd, Connection& conn) {
  const bool want = !conn.out.empty();
  if (want == conn.writing) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  conn.writing = want;
}

void Server::Expire(int ep, Clock::time_point now) {
  std::vector<std::pair<int, std::string>> expired;
  for (const auto& [fd, c] : connections_) {
    if (!c.in.empty() && backlogged_.count(fd) == 0 &&
        now - c.line_started > options_.request_timeout) {
      expired.emplace_back(fd, "its request line was not finished within " +
                                   std::to_string(options_.request_timeout.count()) +
                                   " ms (request_timeout)");
    } else if (!c.out.empty() && now - c.out_since > options_.request_timeout) {
      // Not "no progress": a client reading a byte now and then would hold its backlog forever.
      expired.emplace_back(fd, "it did not take its replies within " +
                                   std::to_string(options_.request_timeout.count()) +
                                   " ms (request_timeout)");
    } else if (!c.registered && c.in.empty() && c.out.empty() &&
               now - c.last_request > options_.idle_timeout) {
      expired.emplace_back(fd, "no request for " + std::to_string(options_.idle_timeout.count()) +
                                   " ms and no process registered (idle_timeout)");
    }
  }
  for (const auto& [fd, why] : expired) {
    const Connection& c = connections_.at(fd);
    Refused("tesserad: closed a connection on " + Describe(c.scope) + " from pid " +
            std::to_string(c.peer.pid) + ": " + why);
    Close(ep, fd);
  }
  for (auto& [fd, listener] : listeners_) {
    if (!listener.paused_until || now < *listener.paused_until) continue;
    listener.paused_until.reset();
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  }
}

void Server::Close(int ep, int fd) {
  auto it = connections_.find(fd);
  if (it != connections_.end()) {
    Connection& c = it->second;
    if (c.registered) registry_->Disconnected(c.process_slot, c.generation);
    for (Reply& r : c.out) {
      for (int passed : r.fds) close(passed);
    }
    if (!c.door.empty()) {
      auto open = door_connections_.find(c.door);
      if (open != door_connections_.end() && --open->second <= 0) door_connections_.erase(open);
    }
    connections_.erase(it);
  }
  backlogged_.erase(fd);
  epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
}

}  // namespace tessera::daemon
