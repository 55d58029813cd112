// Server implementation: epoll over the listening socket and every client connection.
#include "daemon/server.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "daemon/ctl_door.h"
#include "ipc/unix_socket.h"

namespace tessera::daemon {

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
        Accept(ep);
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      if ((events[i].events & (EPOLLHUP | EPOLLERR)) != 0 && (events[i].events & EPOLLIN) == 0) {
        Close(ep, fd);
      } else if (!Readable(fd, it->second)) {
        Close(ep, fd);
      }
    }
  }
  for (auto it = connections_.begin(); it != connections_.end();) {
    const int fd = it->first;
    ++it;
    Close(ep, fd);
  }
  close(ep);
  return Status::Ok();
}

void Server::Accept(int ep) {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    connections_[fd] = Connection{};
  }
}

bool Server::Readable(int fd, Connection& conn) {
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
    auto request = ParseMessage(line);
    std::string reply;
    int pass_fd = -1;
    if (!request.ok()) {
      reply = "ERR " + request.error();
    } else if (request->verb == "HELLO") {
      if (conn.registered) {
        reply = "ERR this connection already registered a process";
      } else {
        auto peer = ipc::PeerOf(fd);
        uint32_t slot = 0;
        auto hello = peer.ok() ? registry_->Hello(*request, peer->pid, &slot)
                               : Result<Message>(peer.status());
        if (hello.ok()) {
          conn.registered = true;
          conn.process_slot = slot;
          conn.generation = static_cast<uint32_t>(
              std::strtoul(hello->Get("generation", "0").c_str(), nullptr, 10));
          reply = FormatMessage(*hello);
          pass_fd = registry_->ledger().fd();
        } else {
          reply = "ERR " + hello.error();
        }
      }
    } else if (request->verb == "CONTAINER") {
      auto set = registry_->SetContainer(*request);
      reply = set.ok() ? FormatMessage(*set) : "ERR " + set.error();
    } else if (request->verb == "STATUS") {
      reply = "OK " + registry_->StatusJson();
    } else if (request->verb == "CTL") {
      if (tree_ == nullptr) {
        reply = "ERR this tesserad serves no control tree";
      } else {
        auto peer = ipc::PeerOf(fd);
        const bool may_write = peer.ok() && PeerMayWrite(*peer, writer_group_);
        auto answer = HandleCtl(*tree_, *request, may_write);
        reply = answer.ok() ? "OK " + *answer : "ERR " + answer.error();
      }
    } else {
      reply = "ERR unknown verb " + request->verb + "; expected HELLO, CONTAINER, STATUS or CTL";
    }
    if (!reply.empty() && reply.rfind("ERR ", 0) == 0) {
      std::fprintf(stderr, "tesserad: refused \"%s\": %s\n", line.substr(0, 200).c_str(),
                   reply.c_str() + 4);
    }
    for (char& c : reply) {
      if (c == '\n' || c == '\r') c = ' ';  // one reply, one line (JSON escapes its own)
    }
    if (!ipc::SendLine(fd, reply, pass_fd).ok()) return false;
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
