// Unix-domain socket helpers: bounded connect, line framing with SCM_RIGHTS, SO_PEERCRED.
#include "ipc/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace tessera::ipc {
namespace {

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Result<sockaddr_un>::Error("socket path \"" + path + "\" must have 1 to " +
                                      std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool WaitFor(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

}  // namespace

Result<int> Connect(const std::string& path, std::chrono::milliseconds timeout) {
  auto addr = Address(path);
  if (!addr.ok()) return addr.status();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Result<int>::Error(Errno("socket"));
  // A Unix socket whose listener's backlog is full refuses a non-blocking connect with EAGAIN and
  // stays unconnected (it is not in progress, as a TCP connect would be): try again until the
  // listener makes room or the time is up.
  while (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN && std::chrono::steady_clock::now() < deadline) {
      timespec pause{0, 2'000'000};
      nanosleep(&pause, nullptr);
      continue;
    }
    if (errno == EAGAIN) {
      close(fd);
      return Result<int>::Error("cannot connect to " + path +
                                ": timed out (the daemon is not accepting connections)");
    }
    if (errno != EINPROGRESS) {
      const std::string message = Errno("cannot connect to " + path);
      close(fd);
      return Result<int>::Error(message);
    }
    int err = 0;
    socklen_t len = sizeof(err);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !WaitFor(fd, POLLOUT, left) ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      close(fd);
      return Result<int>::Error("cannot connect to " + path + ": " +
                                (err != 0 ? std::strerror(err) : "timed out"));
    }
    break;
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool WaitUntilListening(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto fd = Connect(path, std::chrono::milliseconds(100));
    if (fd.ok()) {
      close(*fd);
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    timespec pause{0, 10'000'000};
    nanosleep(&pause, nullptr);
  }
}

Result<int> Listen(const std::string& path) {
  auto addr = Address(path);
  if (!addr.ok()) return addr.status();
  auto probe = Connect(path, std::chrono::milliseconds(200));
  if (probe.ok()) {
    close(*probe);
    return Result<int>::Error("another daemon is already listening on " + path);
  }
  // A socket file nobody listens on is a dead daemon's: replace it. Anything else at the path is
  // somebody's file, never removed here.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      const char* found = S_ISDIR(st.st_mode)   ? "a directory"
                          : S_ISREG(st.st_mode) ? "a regular file"
                          : S_ISLNK(st.st_mode) ? "a symbolic link"
                                                : "something other than a socket";
      return Result<int>::Error("cannot listen on " + path + ": " + found +
                                " is there; expected a socket path (nothing there, or a socket a "
                                "dead daemon left)");
    }
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Result<int>::Error(Errno("socket"));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      listen(fd, 128) != 0) {
    const std::string message = Errno("cannot listen on " + path);
    close(fd);
    return Result<int>::Error(message);
  }
  return fd;
}

Status SendLine(int fd, const std::string& line, const std::vector<int>& pass_fds,
                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (pass_fds.size() > kMaxPassedFds) return Status::Error("too many descriptors to pass");
  std::string data = line + "\n";
  if (data.size() > kMaxMessage) return Status::Error("message too long");
  size_t sent = 0;
  bool fds_pending = !pass_fds.empty();
  while (sent < data.size()) {
    iovec iov{data.data() + sent, data.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    if (fds_pending) {
      const size_t bytes = sizeof(int) * pass_fds.size();
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(bytes);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(bytes);
      std::memcpy(CMSG_DATA(c), pass_fds.data(), bytes);
    }
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || !WaitFor(fd, POLLOUT, left)) {
          return Status::Error("send: the peer took no data for " +
                               std::to_string(timeout.count()) + " ms");
        }
        continue;
      }
      return Status::Error(Errno("send"));
    }
    fds_pending = false;
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SendLine(int fd, const std::string& line, int pass_fd, std::chrono::milliseconds timeout) {
  return SendLine(fd, line, pass_fd >= 0 ? std::vector<int>{pass_fd} : std::vector<int>{}, timeout);
}

Result<std::string> RecvLine(int fd, std::string* buffer, std::vector<int>* received_fds,
                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const size_t nl = buffer->find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer->substr(0, nl);
      buffer->erase(0, nl + 1);
      return line;
    }
    if (buffer->size() > kMaxMessage) return Result<std::string>::Error("message too long");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !WaitFor(fd, POLLIN, left)) {
      return Result<std::string>::Error("timed out waiting for a reply");
    }
    char data[4096];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Result<std::string>::Error(Errno("receive"));
    }
    if (n == 0) return Result<std::string>::Error("connection closed");
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int got = -1;
        std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (received_fds != nullptr) {
          received_fds->push_back(got);
        } else {
          close(got);
        }
      }
    }
    buffer->append(data, static_cast<size_t>(n));
  }
}

Result<std::string> RecvLine(int fd, std::string* buffer, int* received_fd,
                             std::chrono::milliseconds timeout) {
  std::vector<int> fds;
  auto line = RecvLine(fd, buffer, received_fd != nullptr ? &fds : nullptr, timeout);
  if (received_fd != nullptr) {
    *received_fd = fds.empty() ? -1 : fds.front();
    for (size_t i = 1; i < fds.size(); ++i) close(fds[i]);
  }
  return line;
}

Result<std::string> Call(const std::string& path, const std::string& request, int* received_fd,
                         std::chrono::milliseconds timeout) {
  auto fd = Connect(path, timeout);
  if (!fd.ok()) return fd.status();
  Status sent = SendLine(*fd, request);
  if (!sent.ok()) {
    close(*fd);
    return sent;
  }
  std::string buffer;
  auto reply = RecvLine(*fd, &buffer, received_fd, timeout);
  close(*fd);
  return reply;
}

Result<PeerCredentials> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Result<PeerCredentials>::Error(Errno("SO_PEERCRED"));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

}  // namespace tessera::ipc
