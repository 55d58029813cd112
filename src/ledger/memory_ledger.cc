// MemoryLedger: creating, reopening and mapping the segments, and the daemon's slot management.
// Only tesserad calls the mutating functions here, under its registry's lock, so slot allocation
// needs no cross-process lock: processes only ever touch counters. Every decision here reads the
// daemon's book, never a daemon-owned field back from the segment (memory_ledger.h).
#include "ledger/memory_ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

// Linux 5.1's seal; older C libraries do not name it.
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace tessera::ledger {
namespace {

// When a reopened segment was recorded for other GPUs than `devices` (a hardware change: its
// processes' device indices mean other GPUs now), what it was recorded for; else empty. The count
// alone is not trusted (a tenant can write it): the recorded UUIDs must differ too.
std::string OtherDevices(const LedgerLayout& layout, const std::vector<DeviceInfo>& devices) {
  const uint32_t had = layout.device_count.load();
  if (had == devices.size()) return "";
  std::string recorded;
  const uint32_t shown = had < static_cast<uint32_t>(kMaxDevices) ? had : kMaxDevices;
  bool same = true;
  for (uint32_t d = 0; d < shown; ++d) {
    const LedgerDevice& dev = layout.devices[d];
    const std::string uuid(dev.uuid, strnlen(dev.uuid, sizeof(dev.uuid)));
    recorded += (d ? "," : "") + uuid;
    if (d >= devices.size() || uuid != devices[d].uuid) same = false;
  }
  if (same && had <= static_cast<uint32_t>(kMaxDevices)) return "";  // a count rewritten
  return std::to_string(had) + " devices (" + recorded + "), this node has " +
         std::to_string(devices.size());
}

}  // namespace

MemoryLedger::MemoryLedger(MemoryLedger&& other) noexcept { *this = std::move(other); }

MemoryLedger& MemoryLedger::operator=(MemoryLedger&& other) noexcept {
  if (this != &other) {
    Unmap();
    layout_ = std::exchange(other.layout_, nullptr);
    store_ = std::exchange(other.store_, nullptr);
    view_fd_ = std::exchange(other.view_fd_, -1);
    exchange_fd_ = std::exchange(other.exchange_fd_, -1);
    guard_ = std::move(other.guard_);
    segments_ = std::exchange(other.segments_, nullptr);
    exchange_ = std::exchange(other.exchange_, nullptr);
    name_ = std::move(other.name_);
    book_ = std::move(other.book_);
    open_report_ = std::move(other.open_report_);
  }
  return *this;
}

MemoryLedger::~MemoryLedger() { Unmap(); }

void MemoryLedger::Unmap() {
  if (layout_ != nullptr) munmap(layout_, sizeof(LedgerLayout));
  if (store_ != nullptr) munmap(store_, sizeof(LedgerLayout));
  if (view_fd_ >= 0) close(view_fd_);
  if (exchange_fd_ >= 0) close(exchange_fd_);
  store_ = nullptr;
  view_fd_ = -1;
  exchange_fd_ = -1;
  guard_.reset();  // before its range is unmapped
  if (segments_ != nullptr) munmap(segments_, sizeof(ContainerSegment) * kMaxContainers);
  if (exchange_ != nullptr) munmap(exchange_, sizeof(Exchange));
  layout_ = nullptr;
  segments_ = nullptr;
  exchange_ = nullptr;
}

std::string MemoryLedger::ContainerSegmentName(uint32_t c) const {
  return name_ + ".c" + std::to_string(c);
}

void MemoryLedger::Remove(const std::string& shm_name) {
  shm_unlink(shm_name.c_str());
  for (int c = 0; c < kMaxContainers; ++c)
    shm_unlink((shm_name + ".c" + std::to_string(c)).c_str());
}

namespace {

// Opens (creating when asked) a segment file of exactly `size` bytes and maps it shared at `at`
// (nullptr: anywhere). Sets *created when the file was new or empty.
Result<void*> MapSegmentFile(const std::string& name, size_t size, int flags, void* at,
                             bool* created) {
  const int fd = shm_open(name.c_str(), flags | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Result<void*>::Error("cannot open shared memory " + name + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Result<void*>::Error("cannot stat " + name + ": " + std::strerror(errno));
  }
  *created = st.st_size == 0;
  if (!*created && static_cast<size_t>(st.st_size) != size) {
    close(fd);
    return Result<void*>::Error("/dev/shm" + name + " has " + std::to_string(st.st_size) +
                                " bytes, layout version " + std::to_string(kLedgerVersion) +
                                " has " + std::to_string(size));
  }
  if (*created && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return Result<void*>::Error("cannot size " + name + ": " + std::strerror(errno));
  }
  void* mem = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    return Result<void*>::Error("cannot map " + name + ": " + std::strerror(errno));
  }
  return mem;
}

}  // namespace

Status MemoryLedger::MapContainerSegment(uint32_t c, bool fresh) {
  const std::string name = ContainerSegmentName(c);
  ContainerSegment* at = &segments_[c];
  if (!fresh) {
    bool created = false;
    auto mem = MapSegmentFile(name, sizeof(ContainerSegment), 0, at, &created);
    if (mem.ok() && at->magic == kContainerMagic && at->version == kLedgerVersion &&
        at->size == sizeof(ContainerSegment) && at->index == c) {
      return Status::Ok();
    }
    open_report_.push_back(
        "ledger: container slot " + std::to_string(c) + ": its segment " +
        (mem.ok() ? "/dev/shm" + name + " is not one this daemon wrote" : mem.error()) +
        "; a new one is made and its counters start from zero");
  }
  // A new file, never the old one: a process that outlived its registration may still map it.
  shm_unlink(name.c_str());
  bool created = false;
  auto mem = MapSegmentFile(name, sizeof(ContainerSegment), O_CREAT | O_EXCL, at, &created);
  if (!mem.ok()) {
    // Leave zeros in the slot's place (a private anonymous page), never a stale mapping.
    mmap(at, sizeof(ContainerSegment), PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return Status::Error("ledger: " + mem.error());
  }
  at->magic = kContainerMagic;
  at->version = kLedgerVersion;
  at->size = sizeof(ContainerSegment);
  at->index = c;
  return Status::Ok();
}

Result<MemoryLedger> MemoryLedger::CreateOrOpen(const std::string& shm_name,
                                                const std::vector<DeviceInfo>& devices) {
  if (devices.size() > static_cast<size_t>(kMaxDevices)) {
    return Result<MemoryLedger>::Error("ledger: " + std::to_string(devices.size()) +
                                       " devices; at most " + std::to_string(kMaxDevices));
  }
  const size_t size = sizeof(LedgerLayout);
  int fd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Result<MemoryLedger>::Error("ledger: cannot open shared memory " + shm_name + ": " +
                                       std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Result<MemoryLedger>::Error("ledger: cannot stat " + shm_name);
  }
  const bool fresh = st.st_size == 0;
  // What to do about a segment this daemon cannot take over: its tenants may still be running
  // against it, so it is never removed or rewritten here.
  const std::string what_to_do =
      "; its tenants may still be running: stop every GPU process of this node, then remove it "
      "(rm -f /dev/shm" +
      shm_name + " /dev/shm" + shm_name + ".*) and start tesserad again";
  if (!fresh && static_cast<size_t>(st.st_size) != size) {
    uint32_t header[2] = {0, 0};  // magic, version, if the segment is big enough to hold them
    const bool read = pread(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
    close(fd);
    const std::string found =
        read && header[0] == kLedgerMagic
            ? "layout version " + std::to_string(header[1]) + " (" + std::to_string(st.st_size) +
                  " bytes)"
            : "something that is not a Tessera ledger (" + std::to_string(st.st_size) + " bytes)";
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " holds " + found +
                                       ", this tesserad writes layout version " +
                                       std::to_string(kLedgerVersion) + " (" +
                                       std::to_string(size) + " bytes)" + what_to_do);
  }
  if (fresh && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return Result<MemoryLedger>::Error("ledger: cannot size " + shm_name + ": " +
                                       std::strerror(errno));
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    return Result<MemoryLedger>::Error("ledger: cannot map " + shm_name + ": " +
                                       std::strerror(errno));
  }
  MemoryLedger ledger;
  ledger.name_ = shm_name;
  ledger.store_ = static_cast<LedgerLayout*>(mem);
  LedgerLayout* layout = ledger.store_;
  if (fresh) {
    layout->magic = kLedgerMagic;
    layout->version = kLedgerVersion;
    layout->size = size;
  } else if (layout->magic != kLedgerMagic || layout->version != kLedgerVersion ||
             layout->size != size) {
    const std::string found = layout->magic == kLedgerMagic
                                  ? "layout version " + std::to_string(layout->version)
                                  : "something that is not a Tessera ledger";
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " holds " + found +
                                       ", this tesserad writes layout version " +
                                       std::to_string(kLedgerVersion) + what_to_do);
  } else if (const std::string other = OtherDevices(*layout, devices); !other.empty()) {
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " was created for " + other +
                                       what_to_do);
  }
  // Every container's segment has its place in one reservation; a free slot's place holds
  // private zeros until a container takes it.
  void* reserved = mmap(nullptr, sizeof(ContainerSegment) * kMaxContainers, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    return Result<MemoryLedger>::Error(std::string("ledger: cannot reserve container segments: ") +
                                       std::strerror(errno));
  }
  ledger.segments_ = static_cast<ContainerSegment*>(reserved);
  // A tenant may shrink its own container's segment file: the daemon then reads zeros past the
  // cut instead of faulting (segment_guard.h).
  ledger.guard_ =
      std::make_unique<SegmentGuard>(reserved, sizeof(ContainerSegment), kMaxContainers);
  if (!ledger.guard_->ok()) {
    return Result<MemoryLedger>::Error("ledger: every segment guard of this process is taken (" +
                                       std::to_string(kMaxGuards) + " ledgers open)");
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    LedgerDevice& dev = layout->devices[d];
    std::snprintf(dev.uuid, sizeof(dev.uuid), "%s", devices[d].uuid.c_str());
    std::snprintf(dev.name, sizeof(dev.name), "%s", devices[d].name.c_str());
    dev.total_bytes = devices[d].total_bytes;
  }
  layout->device_count.store(static_cast<uint32_t>(devices.size()));
  layout->daemon_pid.store(static_cast<uint32_t>(getpid()));
  layout->daemon_epoch.fetch_add(1);
  // The node segment's gate words belong to no one (the arbiter writes the view's).
  std::memset(static_cast<void*>(&layout->gate), 0, sizeof(layout->gate));
  ledger.book_ = std::make_unique<LedgerBook>();
  ledger.book_->device_count = static_cast<uint32_t>(devices.size());
  std::memcpy(ledger.book_->devices, layout->devices, sizeof(layout->devices));
  if (Status s = ledger.MakeView(); !s.ok()) return s;
  ledger.AdoptSegment(fresh);
  for (uint32_t c = 0; c < static_cast<uint32_t>(kMaxContainers); ++c) ledger.PublishContainer(c);
  for (uint32_t p = 0; p < static_cast<uint32_t>(kMaxProcesses); ++p) ledger.PublishProcess(p);
  // Segments of free slots a previous daemon left: nobody may map them again.
  for (int c = 0; c < kMaxContainers; ++c) {
    if (ledger.book_->containers[c].state.load() != kLive) {
      shm_unlink(ledger.ContainerSegmentName(static_cast<uint32_t>(c)).c_str());
    }
  }
  return ledger;
}

void MemoryLedger::RecordDevicesForRestart(const std::vector<DeviceInfo>& devices) {
  const size_t n = std::min(devices.size(), static_cast<size_t>(kMaxDevices));
  for (size_t d = 0; d < n; ++d) {
    LedgerDevice& dev = store_->devices[d];
    std::snprintf(dev.uuid, sizeof(dev.uuid), "%s", devices[d].uuid.c_str());
    std::snprintf(dev.name, sizeof(dev.name), "%s", devices[d].name.c_str());
    dev.total_bytes = devices[d].total_bytes;
  }
  store_->device_count.store(static_cast<uint32_t>(n));
}

namespace {

// A memfd of `size` bytes labelled `label` (shown as /proc/PID/fd/N -> "/memfd:LABEL (deleted)"),
// mapped shared and writable here, then sealed with `seals`, or where the kernel refuses them with
// `fallback` (*why says what was refused; empty when `seals` held).
struct SealedMemory {
  int fd = -1;
  void* mem = nullptr;
};
Result<SealedMemory> MakeSealedMemory(const std::string& label, size_t size, int seals,
                                      int fallback, std::string* why) {
  const int fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    return Result<SealedMemory>::Error("cannot create " + label + ": " + std::strerror(errno));
  }
  void* mem = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0) {
    mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (mem == MAP_FAILED) {
    const std::string error = std::strerror(errno);
    close(fd);
    return Result<SealedMemory>::Error("cannot size or map " + label + ": " + error);
  }
  why->clear();
  if (fcntl(fd, F_ADD_SEALS, seals) != 0) {
    *why = std::strerror(errno);
    if (fcntl(fd, F_ADD_SEALS, fallback) != 0) {
      const std::string error = std::strerror(errno);
      munmap(mem, size);
      close(fd);
      return Result<SealedMemory>::Error("cannot seal " + label + ": " + error);
    }
  }
  return SealedMemory{fd, mem};
}

// Neither shrunk (a mapping past the end faults) nor grown, by anyone, ever.
constexpr int kFixedSize = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

Status MemoryLedger::MakeView() {
  const std::string base = name_.substr(name_.rfind('/') + 1);
  // The view: sealed against every writable mapping made from now on, so this daemon's, made in
  // MakeSealedMemory, is the only one there will ever be. Linux before 5.1 knows no
  // F_SEAL_FUTURE_WRITE; there the view is still sent read-only, but a process with the right to
  // reopen it (root) could write it.
  std::string why;
  auto view = MakeSealedMemory("tessera-view:" + base, sizeof(LedgerLayout),
                               kFixedSize | F_SEAL_FUTURE_WRITE, kFixedSize, &why);
  if (!view.ok()) return Status::Error("ledger: " + view.error());
  if (!why.empty()) {
    open_report_.push_back(
        "ledger: the node view cannot be sealed against writing on this kernel "
        "(F_SEAL_FUTURE_WRITE: " +
        why +
        "; Linux 5.1 or later has it): it is sent read-only, but a "
        "tenant process running as root could reopen it writable and rewrite limits until the next "
        "repair (docs/security.md)");
  }
  view_fd_ = view->fd;
  layout_ = static_cast<LedgerLayout*>(view->mem);
  layout_->magic = kLedgerMagic;
  layout_->version = kLedgerVersion;
  layout_->size = sizeof(LedgerLayout);
  std::memcpy(layout_->devices, store_->devices, sizeof(layout_->devices));
  layout_->device_count.store(store_->device_count.load());
  layout_->daemon_pid.store(store_->daemon_pid.load());
  layout_->daemon_epoch.store(store_->daemon_epoch.load());
  // The exchange: every process maps it writable, so it must not be resizable (a process that
  // shrank it would make every other process's doorbell, and the daemon's, fault). Its words are
  // instants every reader bounds and a doorbell: a new daemon starts a new one.
  auto exchange =
      MakeSealedMemory("tessera-exchange:" + base, sizeof(Exchange), kFixedSize, kFixedSize, &why);
  if (!exchange.ok()) return Status::Error("ledger: " + exchange.error());
  exchange_fd_ = exchange->fd;
  exchange_ = static_cast<Exchange*>(exchange->mem);
  exchange_->magic = kExchangeMagic;
  exchange_->version = kLedgerVersion;
  exchange_->size = sizeof(Exchange);
  return Status::Ok();
}

Result<TenantDescriptors> MemoryLedger::OpenForTenant(uint32_t c) const {
  TenantDescriptors fds;
  // A descriptor of its own, read-only (the seal is what holds; this is one more lock).
  fds.node = open(("/proc/self/fd/" + std::to_string(view_fd_)).c_str(), O_RDONLY | O_CLOEXEC);
  if (fds.node < 0) fds.node = fcntl(view_fd_, F_DUPFD_CLOEXEC, 0);
  fds.container = shm_open(ContainerSegmentName(c).c_str(), O_RDWR | O_CLOEXEC, 0);
  fds.exchange = fcntl(exchange_fd_, F_DUPFD_CLOEXEC, 0);
  if (fds.node < 0 || fds.container < 0 || fds.exchange < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {fds.node, fds.container, fds.exchange}) {
      if (fd >= 0) close(fd);
    }
    return Result<TenantDescriptors>::Error("ledger: cannot open the segments of container slot " +
                                            std::to_string(c) + " for a process: " + why);
  }
  return fds;
}

int MemoryLedger::FindContainer(const std::string& id) const {
  for (int c = 0; c < kMaxContainers; ++c) {
    const LedgerBook::Container& slot = book_->containers[c];
    if (slot.state.load() == kLive && id == slot.id) return c;
  }
  return -1;
}

std::string MemoryLedger::ContainerId(uint32_t c) const {
  const LedgerBook::Container& slot = book_->containers[c % kMaxContainers];
  return slot.state.load() == kLive ? std::string(slot.id) : std::string();
}

Result<uint32_t> MemoryLedger::UpsertContainer(const std::string& id,
                                               const std::vector<uint64_t>& limits) {
  if (id.empty() || id.size() >= sizeof(ContainerSlot::id)) {
    return Result<uint32_t>::Error("ledger: container id \"" + id + "\" has a bad length");
  }
  int c = FindContainer(id);
  if (c < 0) {
    for (int i = 0; i < kMaxContainers && c < 0; ++i) {
      if (book_->containers[i].state.load() == kFree) c = i;
    }
    if (c < 0) {
      return Result<uint32_t>::Error("ledger: all " + std::to_string(kMaxContainers) +
                                     " container slots are in use");
    }
    // A new segment for the new container: its counters start at zero, and nobody still mapping
    // the previous one (a process that outlived its registration) can write them.
    if (Status s = MapContainerSegment(static_cast<uint32_t>(c), /*fresh=*/true); !s.ok()) {
      return Result<uint32_t>::Error(s.message());
    }
    LedgerBook::Container& entry = book_->containers[c];
    std::snprintf(entry.id, sizeof(entry.id), "%s", id.c_str());
    for (int d = 0; d < kMaxDevices; ++d) {
      entry.unseen[d].store(0);
      entry.unseen_gpu_ns[d].store(0);
      entry.gate_gpu_ns[d].store(0);
    }
    entry.flags.store(0);
    entry.core_percent.store(100);
    entry.weight.store(1);
    entry.high_priority.store(0);
    entry.process_count.store(0);
  }
  LedgerBook::Container& entry = book_->containers[c];
  for (int d = 0; d < kMaxDevices; ++d) {
    entry.limit[d].store(static_cast<size_t>(d) < limits.size() ? limits[d] : kUnlimited);
  }
  entry.state.store(kLive, std::memory_order_release);
  PublishContainer(static_cast<uint32_t>(c));
  return static_cast<uint32_t>(c);
}

Status MemoryLedger::RemoveContainer(uint32_t c) {
  LedgerBook::Container& entry = book_->containers[c];
  if (entry.process_count.load() != 0) {
    return Status::Error(std::string("ledger: container ") + entry.id + " still has processes");
  }
  entry.state.store(kFree, std::memory_order_release);
  entry.generation.fetch_add(1);
  PublishContainer(c);
  // The file goes (its mapping stays readable here until the slot is taken again).
  shm_unlink(ContainerSegmentName(c).c_str());
  return Status::Ok();
}

Result<uint32_t> MemoryLedger::AddProcess(uint32_t c, int32_t host_pid, int32_t local_pid) {
  for (int p = 0; p < kMaxProcesses; ++p) {
    LedgerBook::Process& entry = book_->processes[p];
    if (entry.state.load() != kFree) continue;
    ProcessCounters& slot = segments_[c].processes[p];
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.used[d].store(0);
      slot.gpu_ns[d].store(0);
      slot.quota_hint_ns[d].store(0);
      slot.waiting[d].store(0);
      slot.idle_at_ns[d].store(0);
    }
    slot.busy_mask.store(0);
    slot.beat_ns.store(0);
    slot.interval_head.store(0);
    for (int d = 0; d < kMaxDevices; ++d) {
      book_->processes[p].gate_gpu_ns[d].store(0);
    }
    entry.host_pid.store(host_pid);
    entry.local_pid.store(local_pid > 0 ? local_pid : host_pid);
    entry.container.store(c);
    entry.state.store(kLive, std::memory_order_release);
    PublishProcess(static_cast<uint32_t>(p));
    book_->containers[c].process_count.fetch_add(1);
    PublishContainer(c);
    return static_cast<uint32_t>(p);
  }
  return Result<uint32_t>::Error("ledger: all " + std::to_string(kMaxProcesses) +
                                 " process slots are in use");
}

void MemoryLedger::ReclaimProcess(uint32_t p) {
  LedgerBook::Process& entry = book_->processes[p];
  if (entry.state.load() != kLive) return;
  const uint32_t c = entry.container.load();
  ContainerSegment& seg = segments_[c];
  ProcessCounters& slot = seg.processes[p];
  for (int d = 0; d < kMaxDevices; ++d) {
    // What the process says it holds is its own claim: it can take back no more than its
    // container holds (the subtraction saturates), and only from its own container.
    const uint64_t held = slot.used[d].exchange(0);
    if (held != 0) SaturatingSub(seg.counters.used[d], held);
  }
  // A dead process neither waits nor has work; its measured GPU time stays readable until the
  // slot is reused (the arbiter notices the new generation).
  for (int d = 0; d < kMaxDevices; ++d) {
    slot.waiting[d].store(0);
    slot.idle_at_ns[d].store(0);
  }
  slot.busy_mask.store(0);
  entry.host_pid.store(0);
  entry.local_pid.store(0);
  entry.state.store(kFree, std::memory_order_release);
  entry.generation.fetch_add(1);
  PublishProcess(p);
  std::atomic<uint32_t>& count = book_->containers[c].process_count;
  uint32_t n = count.load();
  while (n > 0 && !count.compare_exchange_weak(n, n - 1)) {
  }
  PublishContainer(c);
}

void MemoryLedger::SetLimit(uint32_t c, int device, uint64_t bytes) {
  book_->containers[c].limit[device].store(bytes);
  layout_->containers[c].limit[device].store(bytes);
  store_->containers[c].limit[device].store(bytes);
}

void MemoryLedger::SetCompute(uint32_t c, uint32_t core_percent, uint32_t weight,
                              uint32_t high_priority) {
  LedgerBook::Container& entry = book_->containers[c];
  entry.core_percent.store(core_percent);
  entry.weight.store(weight);
  entry.high_priority.store(high_priority);
  PublishContainer(c);
}

void MemoryLedger::SetFlags(uint32_t c, uint32_t set, uint32_t clear) {
  LedgerBook::Container& entry = book_->containers[c];
  entry.flags.store((entry.flags.load() | set) & ~clear);
  layout_->containers[c].flags.store(entry.flags.load());
  store_->containers[c].flags.store(entry.flags.load());
}

void MemoryLedger::AddUnseenGpuTime(uint32_t c, int device, uint64_t ns) {
  book_->containers[c].unseen_gpu_ns[device].fetch_add(ns);
}

void MemoryLedger::SetUnseen(uint32_t c, int device, uint64_t bytes) {
  book_->containers[c].unseen[device].store(bytes);
  layout_->containers[c].unseen[device].store(bytes);
  store_->containers[c].unseen[device].store(bytes);
}

}  // namespace tessera::ledger
