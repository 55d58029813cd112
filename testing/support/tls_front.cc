// TlsFront: a self-signed certificate for 127.0.0.1 and a byte pump per connection.
#include "testing/support/tls_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::k8s::testing {

namespace {

std::string OpenSslError(const std::string& what) {
  char buf[256];
  ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
  return what + ": " + buf;
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

TlsFront::TlsFront(int backend_port) : backend_port_(backend_port) {}

TlsFront::~TlsFront() { Stop(); }

Status TlsFront::Start() {
  // An EC P-256 key and a certificate for 127.0.0.1, valid for a day, signed by itself.
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (key == nullptr) return Status::Error(OpenSslError("EVP_EC_gen"));
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_version(cert, 2);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("tessera-test-apiserver"), -1,
                             -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, cert, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] :
       {std::pair<int, const char*>{NID_subject_alt_name, "IP:127.0.0.1"},
        {NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,digitalSignature,keyCertSign"},
        {NID_ext_key_usage, "serverAuth"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    if (ext == nullptr) {
      X509_free(cert);
      EVP_PKEY_free(key);
      return Status::Error(OpenSslError("certificate extension"));
    }
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert, key, EVP_sha256()) == 0) {
    X509_free(cert);
    EVP_PKEY_free(key);
    return Status::Error(OpenSslError("X509_sign"));
  }
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* pem = nullptr;
  const long len = BIO_get_mem_data(bio, &pem);
  cert_pem_.assign(pem, static_cast<size_t>(len));
  BIO_free(bio);

  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  const bool ok = ctx != nullptr && SSL_CTX_use_certificate(ctx, cert) == 1 &&
                  SSL_CTX_use_PrivateKey(ctx, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!ok) {
    if (ctx != nullptr) SSL_CTX_free(ctx);
    return Status::Error(OpenSslError("SSL_CTX"));
  }
  ctx_ = ctx;

  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t addr_len = sizeof(addr);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) {
    return Status::Error(std::string("TlsFront: listening on 127.0.0.1: ") + std::strerror(errno));
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void TlsFront::Stop() {
  if (stop_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : workers_) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  if (ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
  ctx_ = nullptr;
}

void TlsFront::AcceptLoop() {
  while (!stop_.load()) {
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_.push_back(client);
    workers_.emplace_back([this, client] { Serve(client); });
  }
}

void TlsFront::Serve(int client) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ctx_));
  SSL_set_fd(ssl, client);
  int backend = -1;
  if (SSL_accept(ssl) == 1) {
    handshakes_.fetch_add(1);
    backend = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(backend_port_));
    if (backend >= 0 && connect(backend, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      char buf[16384];
      while (!stop_.load()) {
        pollfd fds[2] = {{client, POLLIN, 0}, {backend, POLLIN, 0}};
        if (SSL_pending(ssl) == 0 && poll(fds, 2, 200) <= 0) continue;
        if (SSL_pending(ssl) > 0 || (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const int n = SSL_read(ssl, buf, sizeof(buf));
          if (n <= 0) {
            const int err = SSL_get_error(ssl, n);
            if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) continue;
            break;
          }
          if (!WriteAll(backend, buf, static_cast<size_t>(n))) break;
        }
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
          const ssize_t n = recv(backend, buf, sizeof(buf), 0);
          if (n <= 0) break;
          if (SSL_write(ssl, buf, static_cast<int>(n)) <= 0) break;
        }
      }
    }
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  if (backend >= 0) close(backend);
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(open_, client);
  close(client);
}

}  // namespace tessera::k8s::testing
