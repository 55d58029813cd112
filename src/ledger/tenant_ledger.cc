// TenantLedger: mapping the segments a process was sent, and mapping a new daemon's (or another
// container's) in place of them. The fast path is inline in the header; nothing here creates,
// names or repairs a segment (memory_ledger.cc does, in tesserad).
#include "ledger/tenant_ledger.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace tessera::ledger {

TenantLedger::TenantLedger(TenantLedger&& other) noexcept { *this = std::move(other); }

TenantLedger& TenantLedger::operator=(TenantLedger&& other) noexcept {
  if (this != &other) {
    Unmap();
    layout_ = std::exchange(other.layout_, nullptr);
    own_ = std::exchange(other.own_, nullptr);
    exchange_ = std::exchange(other.exchange_, nullptr);
    container_ = other.container_;
    node_file_ = other.node_file_;
    own_file_ = other.own_file_;
    exchange_file_ = other.exchange_file_;
  }
  return *this;
}

TenantLedger::~TenantLedger() { Unmap(); }

void TenantLedger::Unmap() {
  if (layout_ != nullptr) munmap(layout_, sizeof(LedgerLayout));
  if (own_ != nullptr) munmap(own_, sizeof(ContainerSegment));
  if (exchange_ != nullptr) munmap(exchange_, sizeof(Exchange));
  layout_ = nullptr;
  own_ = nullptr;
  exchange_ = nullptr;
}

namespace {

// Maps a segment a process was sent: exactly `size` bytes, with `prot`.
Result<void*> MapReceived(int fd, size_t size, int prot, const char* what) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size) {
    return Result<void*>::Error(std::string("ledger: the daemon's ") + what + " has size " +
                                std::to_string(st.st_size) + ", this library expects " +
                                std::to_string(size) +
                                " (tesserad and the shim are different versions)");
  }
  void* mem = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    return Result<void*>::Error(std::string("ledger: cannot map the daemon's ") + what + ": " +
                                std::strerror(errno));
  }
  return mem;
}

}  // namespace

TenantLedger::FileId TenantLedger::FileOf(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return {};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

namespace {

// Maps the segment `fd` names at *at: in place of the mapping there when there is one (pointers
// into it stay valid; a thread reading it sees the old or the new, never a hole), else anywhere.
// `invalid` says why the new mapping is not what was expected (empty: it is).
template <typename T, typename Check>
Status MapAt(T** at, int fd, int prot, const char* what, Check invalid) {
  auto mem = MapReceived(fd, sizeof(T), prot, what);
  if (!mem.ok()) return mem.status();
  auto* fresh = static_cast<T*>(*mem);
  if (const std::string why = invalid(*fresh); !why.empty()) {
    munmap(fresh, sizeof(T));
    return Status::Error("ledger: the daemon's " + std::string(what) + " " + why);
  }
  if (*at == nullptr) {
    *at = fresh;
    return Status::Ok();
  }
  if (mremap(fresh, sizeof(T), sizeof(T), MREMAP_MAYMOVE | MREMAP_FIXED, *at) == MAP_FAILED) {
    const std::string why = std::strerror(errno);
    munmap(fresh, sizeof(T));
    return Status::Error("ledger: cannot map the daemon's " + std::string(what) +
                         " in place: " + why);
  }
  return Status::Ok();
}

}  // namespace

Result<TenantLedger> TenantLedger::MapFds(const TenantDescriptors& fds, uint32_t container) {
  TenantLedger ledger;
  if (Status s = ledger.Remap(fds, container); !s.ok()) return s;
  return ledger;
}

Status TenantLedger::Remap(const TenantDescriptors& fds, uint32_t container) {
  if (container >= static_cast<uint32_t>(kMaxContainers)) {
    return Status::Error("ledger: container slot " + std::to_string(container) +
                         " is out of range");
  }
  const std::string other_version = "has another layout version (tesserad and the shim differ)";
  if (const FileId file = FileOf(fds.node); layout_ == nullptr || !(file == node_file_)) {
    Status s = MapAt(&layout_, fds.node, PROT_READ, "node view", [&](const LedgerLayout& l) {
      return l.magic == kLedgerMagic && l.version == kLedgerVersion ? "" : other_version;
    });
    if (!s.ok()) return s;
    node_file_ = file;
  }
  if (const FileId file = FileOf(fds.exchange); exchange_ == nullptr || !(file == exchange_file_)) {
    Status s = MapAt(
        &exchange_, fds.exchange, PROT_READ | PROT_WRITE, "exchange segment",
        [&](const Exchange& x) {
          return x.magic == kExchangeMagic && x.version == kLedgerVersion ? "" : other_version;
        });
    if (!s.ok()) return s;
    exchange_file_ = file;
  }
  if (const FileId file = FileOf(fds.container);
      own_ == nullptr || !(file == own_file_) || own_->index != container) {
    Status s = MapAt(&own_, fds.container, PROT_READ | PROT_WRITE, "container segment",
                     [&](const ContainerSegment& seg) {
                       if (seg.magic != kContainerMagic || seg.version != kLedgerVersion) {
                         return other_version;
                       }
                       return seg.index == container
                                  ? std::string()
                                  : "is not container slot " + std::to_string(container) + "'s";
                     });
    if (!s.ok()) return s;
    own_file_ = file;
  }
  container_ = container;
  return Status::Ok();
}

}  // namespace tessera::ledger
