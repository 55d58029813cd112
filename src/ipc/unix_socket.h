// Unix-domain stream sockets between captured processes, the CLI and tesserad: connect/listen,
// one-line messages (optionally carrying a file descriptor via SCM_RIGHTS), and the peer's
// credentials from SO_PEERCRED. Messages are single lines of at most kMaxMessage bytes, ending in
// '\n'. Every blocking call takes a timeout. No policy lives here; message meaning is in
// protocol/protocol.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/result.h"

namespace tessera::ipc {

inline constexpr size_t kMaxMessage = 64 * 1024;
inline constexpr size_t kMaxPassedFds = 4;  // descriptors one message may carry

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Connects to the socket at `path` (non-blocking connect bounded by `timeout`). Returns the fd.
Result<int> Connect(const std::string& path, std::chrono::milliseconds timeout);
// Waits until something listens at `path` (a daemon starting up, or one restarting over a stale
// socket file): tries to connect every 10 ms until a connection succeeds or `timeout` passes.
bool WaitUntilListening(const std::string& path, std::chrono::milliseconds timeout);
// Binds and listens at `path`. A stale socket file (nobody listening) is replaced; a live one is
// refused. The returned fd is non-blocking and close-on-exec.
Result<int> Listen(const std::string& path);
// Sends one line (a '\n' is appended) and optionally a descriptor, or up to kMaxPassedFds. On a
// non-blocking socket whose peer is not reading, it waits for room at most `timeout` in all, then
// fails: a sender is never held by its peer for longer.
inline constexpr std::chrono::milliseconds kSendTimeout{5000};
Status SendLine(int fd, const std::string& line, int pass_fd = -1,
                std::chrono::milliseconds timeout = kSendTimeout);
Status SendLine(int fd, const std::string& line, const std::vector<int>& pass_fds,
                std::chrono::milliseconds timeout = kSendTimeout);
// Receives one line (without '\n') and, if one came with it, a descriptor (else -1). Bytes read
// past the line stay in `buffer` for the next call.
Result<std::string> RecvLine(int fd, std::string* buffer, int* received_fd,
                             std::chrono::milliseconds timeout);
// The same, appending every descriptor that came with the bytes read to `received_fds` (null:
// they are closed).
Result<std::string> RecvLine(int fd, std::string* buffer, std::vector<int>* received_fds,
                             std::chrono::milliseconds timeout);
// One request, one reply.
Result<std::string> Call(const std::string& path, const std::string& request, int* received_fd,
                         std::chrono::milliseconds timeout);
Result<PeerCredentials> PeerOf(int fd);

}  // namespace tessera::ipc
