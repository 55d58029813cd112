// HttpServer on cpp-httplib: cpp-httplib parses requests and writes responses; this file gives
// every connection a thread and a Stream with deadlines and a byte budget (over TLS through
// OpenSSL when asked), keeps the book of open connections that decides which one makes room for a
// new one, and turns what the library reports (a refused head, a body too large) into one-line
// answers. Holds no routes and no policy: everything a request means is the handler's.
//
// How it hooks into cpp-httplib 0.11: the library accepts on its own thread and hands each socket
// to Server::process_and_close_socket, a virtual function; Impl overrides it with a keep-alive
// loop of its own that calls the library's Server::process_request once per request over a
// Connection (an httplib::Stream). The library's own loop polls each idle connection every 10 ms,
// gives a request no deadline as a whole (each byte restarts its read timeout) and serves
// connections from a fixed pool of threads; its SSLServer does the same over TLS, with a blocking
// handshake. None of that suits a port that changes a node's policy or binds pods, so the TLS
// session is ours too: a non-blocking OpenSSL session under the same deadlines.
#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "core/text.h"

namespace tessera::http {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The largest request head (request line, header fields, blank line): 431 beyond.
constexpr size_t kMaxHeadBytes = 8 * 1024;
// What a chunked body's framing may add to the body's bytes before a request counts as too large.
constexpr size_t kChunkAllowance = 64 * 1024;
// Requests one connection may carry before it is closed (advertised in Keep-Alive: max=N).
constexpr size_t kMaxRequestsPerConnection = 10000;
// Connections in the book (served, and closed to make room but not yet ended) beyond which a new
// one is closed at once: a multiple of max_connections.
constexpr size_t kBookFactor = 4;
// How long a connection beyond max_connections may take to send the request it gets 503 for.
constexpr milliseconds kRefusalTimeout{1000};
// Bytes read from the socket at a time.
constexpr size_t kReadChunk = 16 * 1024;
// Response bytes buffered before they are sent (a response is sent whole once it is written).
constexpr size_t kWriteChunk = 64 * 1024;
// After a request of more bytes than this, the allocator's free memory goes back to the system.
constexpr size_t kTrimAfterBytes = 1024 * 1024;
// How often the TLS files are looked at for a change.
constexpr milliseconds kTlsRecheck{1000};
// At most one log line per this long; the ones left out are counted in the next.
constexpr milliseconds kLogInterval{1000};

// cpp-httplib adds these to every request's headers; they are not what the client sent.
bool IsSyntheticHeader(const std::string& name) {
  return name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" ||
         name == "LOCAL_PORT";
}

// Header names a handler may not set: the server writes them.
bool IsServerHeader(std::string_view name) {
  for (std::string_view reserved :
       {"Content-Length", "Content-Type", "Connection", "Transfer-Encoding", "Keep-Alive"}) {
    if (EqualsIgnoreCase(name, reserved)) return true;
  }
  return false;
}

bool HasLineBreakOrNul(std::string_view text) {
  return text.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
}

// "ADDRESS:PORT" of one end of a socket; IPv6 addresses in brackets.
void SocketName(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  char text[INET6_ADDRSTRLEN] = {};
  *port = 0;
  if (r == 0 && address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    *port = ntohs(v4->sin_port);
  } else if (r == 0 && address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    *port = ntohs(v6->sin6_port);
  }
  *ip = text;
}

// The OpenSSL errors queued on this thread, as one line; the queue is left empty.
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof(text));
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "no reason given" : out;
}

// Options::log, at most one line per kLogInterval; the lines left out are counted in the next.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::function<void(std::string_view)> sink) : sink_(std::move(sink)) {}

  void operator()(const std::string& line) {
    if (!sink_) return;
    std::string out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Clock::time_point now = Clock::now();
      if (now < next_) {
        ++left_out_;
        return;
      }
      next_ = now + kLogInterval;
      out = line;
      if (left_out_ > 0) {
        out += " (" + std::to_string(left_out_) + " more such lines left out since the last)";
      }
      left_out_ = 0;
    }
    sink_(out);
  }

 private:
  std::function<void(std::string_view)> sink_;
  std::mutex mu_;
  Clock::time_point next_{};
  uint64_t left_out_ = 0;
};

// What identifies a file's content for "has it changed": kubelet updates a Secret's files by
// swapping a symlink, which gives them a new inode and mtime.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool exists = false;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::string& path) {
  FileStamp s;
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return s;
  s.dev = st.st_dev;
  s.ino = st.st_ino;
  s.size = st.st_size;
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  s.exists = true;
  return s;
}

using SslCtx = std::shared_ptr<SSL_CTX>;

// Refuses to ask for a passphrase: an encrypted key fails to load instead of reading a terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The server's TLS setup from its files, read again when they change (see server.h).
class TlsContext {
 public:
  static Result<std::unique_ptr<TlsContext>> Load(const HttpServer::TlsOptions& options) {
    auto ctx = Build(options);
    if (!ctx.ok()) return ctx.status();
    auto out = std::unique_ptr<TlsContext>(new TlsContext(options));
    out->ctx_ = std::move(*ctx);
    out->stamps_ = out->Stamps();
    out->next_check_ = Clock::now() + kTlsRecheck;
    return out;
  }

  bool verifies_clients() const { return !options_.client_ca_file.empty(); }

  // The context for a new connection, from the files as they are now when they changed.
  SslCtx Current(RateLimitedLog& log) {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    if (now < next_check_) return ctx_;
    next_check_ = now + kTlsRecheck;
    std::vector<FileStamp> stamps = Stamps();
    if (stamps == stamps_ || stamps == failed_) return ctx_;
    auto ctx = Build(options_);
    if (!ctx.ok()) {
      failed_ = stamps;  // said once per version of the files
      log("http: the TLS files changed but do not load; still serving with the ones loaded "
          "before: " +
          ctx.error());
      return ctx_;
    }
    ctx_ = std::move(*ctx);
    stamps_ = std::move(stamps);
    failed_.clear();
    return ctx_;
  }

 private:
  explicit TlsContext(HttpServer::TlsOptions options) : options_(std::move(options)) {}

  std::vector<FileStamp> Stamps() const {
    return {StampOf(options_.cert_file), StampOf(options_.key_file),
            StampOf(options_.client_ca_file)};
  }

  static Result<SslCtx> Build(const HttpServer::TlsOptions& o) {
    using R = Result<SslCtx>;
    ERR_clear_error();
    SslCtx ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
    if (!ctx) return R::Error("cannot set up TLS: " + OpenSslErrors());
    SSL_CTX* c = ctx.get();
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    uint64_t flags =
        SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    flags |= SSL_OP_IGNORE_UNEXPECTED_EOF;  // a client that closes without close_notify is done
#endif
    SSL_CTX_set_options(c, flags);
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(c, NoPassphrase);
    if (o.cert_file.empty() || o.key_file.empty()) {
      return R::Error("TLS needs both a certificate file and a private key file");
    }
    if (SSL_CTX_use_certificate_chain_file(c, o.cert_file.c_str()) != 1) {
      return R::Error("certificate file " + QuoteValue(o.cert_file) +
                      ": not a readable PEM certificate: " + OpenSslErrors());
    }
    if (SSL_CTX_use_PrivateKey_file(c, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH) {
        return R::Error("private key file " + QuoteValue(o.key_file) +
                        ": not a readable, unencrypted PEM private key: " + OpenSslErrors());
      }
      ERR_clear_error();
    }
    if (ERR_peek_error() != 0 || SSL_CTX_check_private_key(c) != 1) {
      ERR_clear_error();
      return R::Error("private key file " + QuoteValue(o.key_file) +
                      " is not the key of certificate file " + QuoteValue(o.cert_file));
    }
    static const unsigned char kSessionContext[] = "tessera-http";
    SSL_CTX_set_session_id_context(c, kSessionContext, sizeof(kSessionContext) - 1);
    if (!o.client_ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(c, o.client_ca_file.c_str(), nullptr) != 1) {
        return R::Error("client CA file " + QuoteValue(o.client_ca_file) +
                        ": not readable PEM certificates: " + OpenSslErrors());
      }
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.client_ca_file.c_str());
      if (names == nullptr) {
        return R::Error("client CA file " + QuoteValue(o.client_ca_file) +
                        ": holds no CA certificate: " + OpenSslErrors());
      }
      SSL_CTX_set_client_CA_list(c, names);  // the client picks its certificate by these
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    return ctx;
  }

  const HttpServer::TlsOptions options_;
  std::mutex mu_;
  SslCtx ctx_;
  std::vector<FileStamp> stamps_;  // of the files ctx_ was built from
  std::vector<FileStamp> failed_;  // of files that did not load (not tried again until changed)
  Clock::time_point next_check_;
};

// Where a connection is; every step but kHandler may be closed to make room for a new one.
enum class Step { kHandshake, kIdle, kRequest, kHandler, kWriting };

std::string_view StepName(Step step) {
  switch (step) {
    case Step::kHandshake:
      return "in its TLS handshake";
    case Step::kIdle:
      return "waiting for a request";
    case Step::kRequest:
      return "sending its request";
    case Step::kHandler:
      return "being answered";
    case Step::kWriting:
      return "taking its response";
  }
  return "?";
}

// One open connection in the server's book.
struct Slot {
  int fd = -1;
  std::string ip;
  Step step = Step::kHandshake;
  Clock::time_point since;  // when it entered `step`
  bool evicted = false;     // closed to make room: its thread is ending it
};
using Slots = std::list<Slot>;

// One client connection as cpp-httplib reads and writes it, over TCP or TLS: reads wait until the
// current deadline (or Stop), stop at the request's byte budget, and never block past either;
// writes are buffered and sent in one go by Flush(), before the next read and at the end of each
// response. Remembers why a read failed, for the error handler.
class Connection : public httplib::Stream {
 public:
  Connection(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}
  ~Connection() override {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The TLS handshake on `ctx`, until `deadline`. False (why() says why) when it fails.
  bool StartTls(SSL_CTX* ctx, Clock::time_point deadline, milliseconds bound) {
    ERR_clear_error();
    ssl_ = SSL_new(ctx);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
      why_ = "cannot start a TLS session: " + OpenSslErrors();
      return false;
    }
    for (;;) {
      ERR_clear_error();
      const int r = SSL_accept(ssl_);
      if (r == 1) break;
      const int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        if (Wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) continue;
        why_ = timed_out_ ? "the TLS handshake did not finish within " +
                                std::to_string(bound.count()) + " ms"
                          : std::string("the server stopped");
        return false;
      }
      if (e == SSL_ERROR_SSL) {
        const long verify = SSL_get_verify_result(ssl_);
        why_ = "TLS handshake failed: " + OpenSslErrors();
        if (verify != X509_V_OK) {
          why_ +=
              std::string(" (client certificate: ") + X509_verify_cert_error_string(verify) + ")";
        }
      } else {
        why_ = "the client closed the connection during the TLS handshake";
      }
      broken_ = true;
      return false;
    }
    if (X509* cert = SSL_get_peer_certificate(ssl_)) {
      if (SSL_get_verify_result(ssl_) == X509_V_OK) {
        BIO* bio = BIO_new(BIO_s_mem());
        if (bio != nullptr) {
          X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
          char* data = nullptr;
          const long n = BIO_get_mem_data(bio, &data);
          if (n > 0) client_subject_.assign(data, static_cast<size_t>(n));
          BIO_free(bio);
        }
      }
      X509_free(cert);
    }
    return true;
  }

  // Sends TLS's close_notify (when the session is whole), then closes the socket.
  void Close() {
    if (ssl_ != nullptr && !broken_) {
      ERR_clear_error();
      SSL_shutdown(ssl_);  // non-blocking: one try
    }
    ERR_clear_error();
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
  }

  // Starts a request whose first byte has come: its head must be in by `head_deadline`
  // (`head_bound` after the first byte) and carry at most kMaxHeadBytes, all of it by
  // `end` (`bound`), and its response be taken by the client within `write_timeout` of being sent.
  void BeginRequest(Clock::time_point head_deadline, milliseconds head_bound, Clock::time_point end,
                    milliseconds bound, milliseconds write_timeout) {
    deadline_ = head_deadline;
    deadline_bound_ = head_bound;
    end_ = end;
    end_bound_ = bound;
    budget_ = kMaxHeadBytes;
    write_timeout_ = write_timeout;
    request_bytes_ = 0;
    in_head_ = true;
    body_ends_at_budget_ = false;
    timed_out_ = over_budget_ = false;
  }

  // The head is in: the body may bring `body_bytes` more, by the request's end. With `ends_there`
  // the body is exactly that long and reading past it finds its end (a request without
  // Content-Length or Transfer-Encoding has no body, RFC 9112 6.3; cpp-httplib 0.11 would read a
  // PUT's or a POST's until the client closes).
  void BeginBody(size_t body_bytes, bool ends_there) {
    in_head_ = false;
    deadline_ = end_;
    deadline_bound_ = end_bound_;
    budget_ = request_bytes_ + body_bytes;
    body_ends_at_budget_ = ends_there;
  }

  // Waits until `deadline` for the first byte of the next request (or the client's close). False
  // on the deadline or Stop.
  bool WaitForRequest(Clock::time_point deadline) {
    timed_out_ = false;
    if (in_pos_ < in_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
    return Wait(POLLIN, deadline);
  }

  // Sends the buffered response bytes. False when the client did not take them in time.
  bool Flush() {
    const Clock::time_point deadline = Clock::now() + write_timeout_;
    size_t done = 0;
    while (done < out_.size() && !broken_) {
      short want = 0;
      const ssize_t n = WriteSome(out_.data() + done, out_.size() - done, &want);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && want != 0) {
        if (!Wait(want, deadline)) broken_ = true;
      } else {
        broken_ = true;
      }
    }
    out_.clear();
    if (out_.capacity() > 4 * kWriteChunk) std::string().swap(out_);  // after a large response
    return !broken_;
  }

  bool timed_out() const { return timed_out_; }
  bool over_budget() const { return over_budget_; }
  bool in_head() const { return in_head_; }
  // The bound, in ms, of the deadline a read waited for (the head's or the request's).
  int64_t bound_ms() const { return deadline_bound_.count(); }
  // The request read so far was large (its memory is worth handing back).
  bool large() const { return request_bytes_ > kTrimAfterBytes; }
  const std::string& why() const { return why_; }
  const std::string& client_subject() const { return client_subject_; }

  bool refusing = false;    // over max_connections: its request gets 503
  bool must_close = false;  // an error response said Connection: close
  Slots::iterator slot;     // its entry in the server's book

  // httplib::Stream.
  using httplib::Stream::write;
  bool is_readable() const override {
    return in_pos_ < in_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }
  bool is_writable() const override { return !broken_; }
  ssize_t read(char* ptr, size_t size) override {
    if (body_ends_at_budget_ && request_bytes_ == budget_) return 0;  // the end of the body
    if (in_pos_ == in_.size()) {
      if (!Flush() || !Fill()) return -1;
      if (in_.empty()) return 0;  // the client closed its side
    }
    size_t n = std::min(size, in_.size() - in_pos_);
    if (request_bytes_ + n > budget_) {
      over_budget_ = true;
      n = budget_ - request_bytes_;
      if (n == 0) return -1;
    }
    std::memcpy(ptr, in_.data() + in_pos_, n);
    in_pos_ += n;
    request_bytes_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (broken_) return -1;
    out_.append(ptr, size);
    if (out_.size() >= kWriteChunk && !Flush()) return -1;
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    SocketName(fd_, true, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    SocketName(fd_, false, &ip, &port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Waits until the socket has `events`, `deadline` passes (timed_out_) or Stop() is called.
  bool Wait(short events, Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
      if (n < 0 && errno != EINTR) return false;
      if (n > 0 && fds[1].revents != 0) return false;  // Stop()
      if (n > 0 && fds[0].revents != 0) return true;   // ready, or an error recv/send will see
    }
  }

  // Up to `size` bytes from the client: >0 read, 0 the client closed, -1 none yet (*want: the
  // poll event to wait for), -2 failed.
  ssize_t ReadSome(char* buffer, size_t size, short* want) {
    if (ssl_ == nullptr) {
      for (;;) {
        const ssize_t n = recv(fd_, buffer, size, 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -2;
        *want = POLLIN;
        return -1;
      }
    }
    ERR_clear_error();
    const int n = SSL_read(ssl_, buffer, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    return SslOutcome(n, want);
  }

  // Up to `size` bytes to the client, as ReadSome.
  ssize_t WriteSome(const char* buffer, size_t size, short* want) {
    if (ssl_ == nullptr) {
      for (;;) {
        const ssize_t n = send(fd_, buffer, size, MSG_NOSIGNAL);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -2;
        *want = POLLOUT;
        return -1;
      }
    }
    ERR_clear_error();
    const int n = SSL_write(ssl_, buffer, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) return n;
    return SslOutcome(n, want);
  }

  ssize_t SslOutcome(int result, short* want) {
    switch (SSL_get_error(ssl_, result)) {
      case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        return -1;
      case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        return -1;
      case SSL_ERROR_ZERO_RETURN:
        return 0;
      default:
        ERR_clear_error();
        broken_ = true;  // no close_notify on a broken session
        return -2;
    }
  }

  // Reads what the client has into the buffer, waiting until the deadline. On a close by the
  // client the buffer is left empty and true is returned.
  bool Fill() {
    in_.resize(kReadChunk);
    in_pos_ = 0;
    for (;;) {
      short want = 0;
      const ssize_t n = ReadSome(in_.data(), in_.size(), &want);
      if (n >= 0) {
        in_.resize(static_cast<size_t>(n));
        return true;
      }
      if (n == -2 || !Wait(want, deadline_)) {
        in_.clear();
        return false;
      }
    }
  }

  int fd_;
  int stop_fd_;
  SSL* ssl_ = nullptr;
  Clock::time_point deadline_;  // of the current read: the head's, then the request's
  milliseconds deadline_bound_{0};
  Clock::time_point end_;  // the whole request's
  milliseconds end_bound_{0};
  milliseconds write_timeout_{0};
  size_t budget_ = 0;
  size_t request_bytes_ = 0;  // delivered to the library for the current request
  std::string in_;            // received, from in_pos_ on not yet delivered
  size_t in_pos_ = 0;
  std::string out_;  // written by the library, not yet sent
  bool in_head_ = true;
  bool body_ends_at_budget_ = false;
  bool timed_out_ = false;
  bool over_budget_ = false;
  bool broken_ = false;
  std::string why_;             // why StartTls failed
  std::string client_subject_;  // of a verified client certificate
};

// The connection the calling thread serves (cpp-httplib's handlers get no per-connection state).
thread_local Connection* t_connection = nullptr;

// One thread per connection. cpp-httplib's own ThreadPool has a fixed number of threads that a
// connection holds for as long as it is open, so a few idle keep-alive or slow clients would stall
// everyone else. A thread whose connection is not to be served (Impl::Admit) ends at once. Each
// blocks SIGPIPE:
// OpenSSL writes with write(2), and a client gone mid-response must not end the process (the
// signal stays pending on the thread and goes with it).
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {  // join the finished ones
      if (it->done) {
        it->thread.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    auto& entry = threads_.emplace_back();
    entry.thread = std::thread([this, &entry, fn = std::move(fn)] {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
      fn();
      std::lock_guard<std::mutex> done_lock(mu_);
      entry.done = true;
    });
  }

  void shutdown() override {
    for (;;) {
      std::list<Entry> joining;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (threads_.empty()) return;
        joining.splice(joining.end(), threads_);  // the entries stay where their threads see them
      }
      for (Entry& entry : joining) entry.thread.join();
    }
  }

 private:
  struct Entry {
    std::thread thread;
    bool done = false;  // under mu_: fn returned; the thread is about to end
  };
  std::mutex mu_;
  std::list<Entry> threads_;
};

}  // namespace

class HttpServer::Impl : public httplib::Server {
 public:
  Impl(HttpServer::Handler handler, HttpServer::Options options, int stop_fd,
       std::unique_ptr<TlsContext> tls)
      : handler_(std::move(handler)),
        options_(options),
        stop_fd_(stop_fd),
        tls_(std::move(tls)),
        log_(options_.log) {
    new_task_queue = [] { return new ThreadPerConnection(); };
    // SO_REUSEADDR only: the library's default also sets SO_REUSEPORT, with which a second
    // daemon could bind the same port and take half of its connections.
    set_socket_options([](socket_t fd) {
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    });
    set_payload_max_length(options_.max_body_bytes);
    set_keep_alive_max_count(kMaxRequestsPerConnection);
    set_keep_alive_timeout(std::max<time_t>(1, (options_.idle_timeout.count() + 999) / 1000));
    set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      return Early(request, response);
    });
    set_error_handler(
        HandlerWithResponse([this](const httplib::Request& request, httplib::Response& response) {
          return Explain(request, response);
        }));
    const auto route = [this](const httplib::Request& request, httplib::Response& response) {
      Serve(request, response);
    };
    const std::string any = "[\\s\\S]*";  // every path, a decoded line break included
    Get(any, route);
    Post(any, route);
    Put(any, route);
    Patch(any, route);
    Delete(any, route);
    Options(any, route);
  }

  ~Impl() override {
    if (svr_sock_ != INVALID_SOCKET) close(svr_sock_);  // bound, never served
    close(stop_fd_);
  }

  // Binds (port 0: the kernel's choice) and returns the port, or an error naming `where`.
  Result<uint16_t> Bind(const HostPort& address, const std::string& where) {
    errno = 0;
    const int port = address.port == 0
                         ? bind_to_any_port(address.host)
                         : (bind_to_port(address.host, address.port) ? address.port : -1);
    if (port <= 0) {
      return Result<uint16_t>::Error(
          where + ": cannot bind: " + (errno != 0 ? std::strerror(errno) : "unknown error"));
    }
    // The library listens with a backlog of 5, too few for a burst of scrapers and clients.
    ::listen(svr_sock_, 128);
    return static_cast<uint16_t>(port);
  }

  Status Start() {
    if (started_ || stopping_) {
      return Status::Error("this HTTP server was started or stopped already");
    }
    started_ = true;
    thread_ = std::thread([this] {
      listen_after_bind();
      listen_returned_ = true;
    });
    // stop() only acts on a running server: wait until the accept loop runs.
    for (int i = 0; i < 5000 && !is_running() && !listen_returned_; ++i) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return is_running() ? Status::Ok() : Status::Error("the HTTP server did not start");
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));  // wakes every connection's wait
    stop();                                       // closes the listening socket: accept ends
    if (thread_.joinable()) thread_.join();       // and the task queue joins the connections
  }

  bool tls() const { return tls_ != nullptr; }

 private:
  bool process_and_close_socket(socket_t sock) override {
    fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
    fcntl(sock, F_SETFD, FD_CLOEXEC);  // the library accepts without SOCK_CLOEXEC
    const int one = 1;
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::string ip;
    int port = 0;
    SocketName(sock, true, &ip, &port);
    Connection connection(sock, stop_fd_);
    if (Admit(sock, ip, &connection.slot, &connection.refusing)) {
      t_connection = &connection;
      ServeConnection(connection, ip + ":" + std::to_string(port));
      t_connection = nullptr;
      Release(connection.slot);  // before the socket closes: eviction shuts down by descriptor
    }
    connection.Close();
    return true;
  }

  // Requests on one connection until it ends (see server.h for the deadlines).
  void ServeConnection(Connection& connection, const std::string& peer) {
    const milliseconds head_timeout = std::min(options_.header_timeout, options_.read_timeout);
    const milliseconds request_timeout =
        connection.refusing ? kRefusalTimeout : options_.read_timeout;
    const milliseconds head_bound = std::min(head_timeout, request_timeout);
    if (tls_ != nullptr) {
      const SslCtx ctx = tls_->Current(log_);
      if (!connection.StartTls(ctx.get(), Clock::now() + head_bound, head_bound)) {
        if (!stopping_ && !Evicted(connection.slot)) {
          log_("http: a client at " + peer + " was refused: " + connection.why());
        }
        return;
      }
    }
    Clock::time_point wait_until =
        Clock::now() + (connection.refusing ? kRefusalTimeout : options_.idle_timeout);
    for (size_t served = 0; served < kMaxRequestsPerConnection && !stopping_; ++served) {
      SetStep(connection.slot, Step::kIdle);
      if (!connection.WaitForRequest(wait_until)) break;  // idle past the deadline, or Stop()
      SetStep(connection.slot, Step::kRequest);
      const Clock::time_point start = Clock::now();
      connection.BeginRequest(start + head_bound, head_bound, start + request_timeout,
                              request_timeout, options_.read_timeout);
      const bool last = connection.refusing || served + 1 == kMaxRequestsPerConnection;
      bool closed = false;
      const bool ok = process_request(connection, last, closed, nullptr);
      const bool flushed = connection.Flush();
      if (connection.large()) malloc_trim(0);  // what a large body and its parsing took
      if (!flushed || !ok || closed || last || connection.must_close) break;
      wait_until = Clock::now() + options_.idle_timeout;
    }
  }

  // Enters a new connection in the book, closing another to make room when the book is full (see
  // server.h). False when this one is not to be served at all; *refusing when it is to get 503.
  bool Admit(int fd, const std::string& ip, Slots::iterator* slot, bool* refusing) {
    std::string note;
    {
      std::lock_guard<std::mutex> lock(slots_mu_);
      // Connections closed to make room stay in the book until their threads end them, within
      // milliseconds; only if those pile up are new ones not served at all.
      if (slots_.size() >= kBookFactor * options_.max_connections) return false;
      const Clock::time_point now = Clock::now();
      *slot = slots_.insert(slots_.end(), Slot{fd, ip, Step::kHandshake, now, false});
      ++per_ip_[ip];
      if (++live_ > options_.max_connections) {
        Slot* victim = nullptr;
        size_t victim_count = 0;
        for (Slot& s : slots_) {
          if (&s == &**slot || s.evicted || s.step == Step::kHandler) continue;
          const size_t count = per_ip_[s.ip];
          if (victim == nullptr || count > victim_count ||
              (count == victim_count && s.since < victim->since)) {
            victim = &s;
            victim_count = count;
          }
        }
        if (victim == nullptr) {
          *refusing = true;
        } else {
          victim->evicted = true;
          --live_;
          if (--per_ip_[victim->ip] == 0) per_ip_.erase(victim->ip);
          ::shutdown(victim->fd, SHUT_RDWR);  // its thread wakes, finds it closed and ends it
          note = "http: " + std::to_string(options_.max_connections) +
                 " connections open; closed one of the " + std::to_string(victim_count) + " from " +
                 victim->ip + ", " + std::string(StepName(victim->step)) + " for " +
                 std::to_string(
                     std::chrono::duration_cast<milliseconds>(now - victim->since).count()) +
                 " ms, to serve a new one from " + ip;
        }
      }
    }
    if (!note.empty()) log_(note);
    return true;
  }

  void SetStep(Slots::iterator slot, Step step) {
    std::lock_guard<std::mutex> lock(slots_mu_);
    slot->step = step;
    slot->since = Clock::now();
  }

  bool Evicted(Slots::iterator slot) {
    std::lock_guard<std::mutex> lock(slots_mu_);
    return slot->evicted;
  }

  void Release(Slots::iterator slot) {
    std::lock_guard<std::mutex> lock(slots_mu_);
    if (!slot->evicted) {
      --live_;
      if (--per_ip_[slot->ip] == 0) per_ip_.erase(slot->ip);
    }
    slots_.erase(slot);
  }

  // Before the body is read: a refused connection's 503 and a body declared too large.
  HandlerResponse Early(const httplib::Request& request, httplib::Response& response) {
    Connection* connection = t_connection;
    if (connection != nullptr) {
      const bool framed =
          request.has_header("Content-Length") || request.has_header("Transfer-Encoding");
      connection->BeginBody(framed ? options_.max_body_bytes + kChunkAllowance : 0, !framed);
    }
    if (connection != nullptr && connection->refusing) {
      return Refuse(response, 503,
                    "too many connections: this server serves " +
                        std::to_string(options_.max_connections) + " at once; try again later");
    }
    if (request.has_header("Content-Length")) {
      const uint64_t length = request.get_header_value<uint64_t>("Content-Length");
      if (length > options_.max_body_bytes) {
        return Refuse(response, 413,
                      "Content-Length " + std::to_string(length) +
                          " bytes is larger than the limit of " +
                          std::to_string(options_.max_body_bytes));
      }
    }
    const std::string& m = request.method;
    if (m != "GET" && m != "HEAD" && m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE" &&
        m != "OPTIONS") {
      Serve(request, response);  // TRACE, CONNECT: no body; the handler says what it serves
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  }

  // A response the library made (status set, no body) gets a line saying why; an error the
  // request caused closes the connection.
  HandlerResponse Explain(const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return HandlerResponse::Unhandled;  // the handler's own
    Connection* connection = t_connection;
    std::string why;
    if (connection != nullptr && connection->timed_out()) {
      response.status = 408;
      why = std::string(connection->in_head() ? "the request head" : "the request") +
            " did not arrive within " + std::to_string(connection->bound_ms()) + " ms";
    } else if (connection != nullptr && connection->over_budget() && connection->in_head()) {
      response.status = 431;
      why = "the request head is larger than the limit of " + std::to_string(kMaxHeadBytes) +
            " bytes";
    } else if (response.status == 413 || (connection != nullptr && connection->over_budget())) {
      response.status = 413;
      why = "the request is larger than the limit of " + std::to_string(options_.max_body_bytes) +
            " body bytes";
    } else if (response.status == 414) {
      why = "the request target is too long";
    } else if (response.status == 400) {
      why = "malformed HTTP request";
    } else {
      why = "the request was refused (HTTP " + std::to_string(response.status) + ")";
    }
    return Refuse(response, response.status, why);
  }

  HandlerResponse Refuse(httplib::Response& response, int status, const std::string& why) {
    response.status = status;
    response.set_header("Connection", "close");
    response.set_content(why + "\n", "text/plain; charset=utf-8");
    if (t_connection != nullptr) t_connection->must_close = true;
    return HandlerResponse::Handled;
  }

  // A request for the handler: ours in, ours out.
  void Serve(const httplib::Request& in, httplib::Response& out) {
    if (in.body.size() > options_.max_body_bytes) {  // a chunked body past the limit
      Refuse(out, 413,
             "the body is larger than the limit of " + std::to_string(options_.max_body_bytes) +
                 " bytes");
      return;
    }
    Connection* connection = t_connection;
    Request request;
    request.method = in.method;
    request.path = in.path;
    for (const auto& [key, value] : in.params) request.query[key] = value;
    for (const auto& [name, value] : in.headers) {
      if (!IsSyntheticHeader(name)) request.headers.emplace_back(name, value);
    }
    // The library reads nothing of a request's body after routing it (no logger is set): the
    // body moves instead of being copied, so a large one is held once.
    request.body = std::move(const_cast<httplib::Request&>(in).body);
    const bool v6 = in.remote_addr.find(':') != std::string::npos;
    request.peer =
        (v6 ? "[" + in.remote_addr + "]" : in.remote_addr) + ":" + std::to_string(in.remote_port);
    if (connection != nullptr) {
      request.client_subject = connection->client_subject();
      SetStep(connection->slot, Step::kHandler);
    }
    Response response;
    try {
      response = handler_(request);
    } catch (const std::exception& e) {
      response = Response::Text(500, std::string("the handler failed: ") + e.what());
    } catch (...) {
      response = Response::Text(500, "the handler failed");
    }
    if (connection != nullptr) SetStep(connection->slot, Step::kWriting);
    for (const auto& [name, value] : response.headers) {
      if (name.empty() || IsServerHeader(name) || HasLineBreakOrNul(name) ||
          HasLineBreakOrNul(value)) {
        response = Response::Text(500, "the handler set the header " + QuoteValue(name) +
                                           ", which a response may not carry");
        break;
      }
    }
    if (HasLineBreakOrNul(response.content_type)) {
      response = Response::Text(500, "the handler set a Content-Type with a line break");
    }
    out.status = response.status;
    for (const auto& [name, value] : response.headers) out.set_header(name, value);
    out.set_content(std::move(response.body), response.content_type);
  }

  HttpServer::Handler handler_;
  HttpServer::Options options_;
  int stop_fd_;  // eventfd written by Stop()
  std::unique_ptr<TlsContext> tls_;
  RateLimitedLog log_;
  std::thread thread_;
  bool started_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> listen_returned_{false};
  // The book of open connections (see Admit).
  std::mutex slots_mu_;
  Slots slots_;
  std::map<std::string, size_t> per_ip_;  // connections not evicted, by client address
  size_t live_ = 0;                       // connections not evicted
};

Result<std::unique_ptr<HttpServer>> HttpServer::Create(std::string_view listen,
                                                       std::string_view input_name, Handler handler,
                                                       Options options) {
  using R = Result<std::unique_ptr<HttpServer>>;
  auto address = ParseHostPort(listen, input_name);
  if (!address.ok()) {
    return address.status();
  }
  if (!handler) {
    return R::Error(std::string(input_name) + ": HttpServer needs a handler");
  }
  if (options.max_connections == 0) {
    return R::Error(std::string(input_name) + ": HttpServer needs max_connections of 1 or more");
  }
  std::unique_ptr<TlsContext> tls;
  if (options.tls) {
    auto loaded = TlsContext::Load(*options.tls);
    if (!loaded.ok()) {
      return R::Error(std::string(input_name) + "=" + std::string(listen) + ": " + loaded.error());
    }
    tls = std::move(*loaded);
  }
  const int stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd < 0) {
    return R::Error(std::string(input_name) + ": eventfd: " + std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>(std::move(handler), options, stop_fd, std::move(tls));
  auto port = impl->Bind(*address, std::string(input_name) + "=" + FormatHostPort(*address));
  if (!port.ok()) {
    return port.status();
  }
  address->port = *port;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl), *address));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl, HostPort address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() { return impl_->Start(); }

void HttpServer::Stop() { impl_->Stop(); }

bool HttpServer::tls() const { return impl_->tls(); }

}  // namespace tessera::http
