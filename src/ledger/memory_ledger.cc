// MemoryLedger's slow path: creating, reopening and mapping the segment, and the daemon's slot
// management. Only tesserad calls the mutating functions here, under its registry's lock, so slot
// allocation needs no cross-process lock: processes only ever touch counters. Every decision here
// reads the daemon's book, never a daemon-owned field back from the segment (memory_ledger.h).
#include "ledger/memory_ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

MemoryLedger::MemoryLedger(MemoryLedger&& other) noexcept
    : layout_(other.layout_),
      fd_(other.fd_),
      book_(std::move(other.book_)),
      open_report_(std::move(other.open_report_)) {
  other.layout_ = nullptr;
  other.fd_ = -1;
}

MemoryLedger& MemoryLedger::operator=(MemoryLedger&& other) noexcept {
  if (this != &other) {
    this->~MemoryLedger();
    layout_ = other.layout_;
    fd_ = other.fd_;
    book_ = std::move(other.book_);
    open_report_ = std::move(other.open_report_);
    other.layout_ = nullptr;
    other.fd_ = -1;
  }
  return *this;
}

MemoryLedger::~MemoryLedger() {
  if (layout_ != nullptr) munmap(layout_, sizeof(LedgerLayout));
  if (fd_ >= 0) close(fd_);
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
      "(rm /dev/shm" + shm_name + ") and start tesserad again";
  if (!fresh && static_cast<size_t>(st.st_size) != size) {
    uint32_t header[2] = {0, 0};  // magic, version, if the segment is big enough to hold them
    const bool read = pread(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
    close(fd);
    const std::string found =
        read && header[0] == kLedgerMagic
            ? "layout version " + std::to_string(header[1]) + " (" +
                  std::to_string(st.st_size) + " bytes)"
            : "something that is not a Tessera ledger (" + std::to_string(st.st_size) +
                  " bytes)";
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
  if (mem == MAP_FAILED) {
    close(fd);
    return Result<MemoryLedger>::Error("ledger: cannot map " + shm_name + ": " +
                                       std::strerror(errno));
  }
  auto* layout = static_cast<LedgerLayout*>(mem);
  if (fresh) {
    layout->magic = kLedgerMagic;
    layout->version = kLedgerVersion;
    layout->size = size;
  } else if (layout->magic != kLedgerMagic || layout->version != kLedgerVersion ||
             layout->size != size) {
    const std::string found = layout->magic == kLedgerMagic
                                  ? "layout version " + std::to_string(layout->version)
                                  : "something that is not a Tessera ledger";
    munmap(mem, size);
    close(fd);
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " holds " + found +
                                       ", this tesserad writes layout version " +
                                       std::to_string(kLedgerVersion) + what_to_do);
  } else if (const std::string other = OtherDevices(*layout, devices); !other.empty()) {
    munmap(mem, size);
    close(fd);
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " was created for " +
                                       other + what_to_do);
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
  MemoryLedger ledger(layout, fd);
  ledger.book_ = std::make_unique<LedgerBook>();
  ledger.book_->device_count = static_cast<uint32_t>(devices.size());
  std::memcpy(ledger.book_->devices, layout->devices, sizeof(layout->devices));
  ledger.AdoptSegment(fresh);
  return ledger;
}

Result<MemoryLedger> MemoryLedger::MapFd(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(LedgerLayout)) {
    return Result<MemoryLedger>::Error("ledger: the daemon's ledger has size " +
                                       std::to_string(st.st_size) + ", this library expects " +
                                       std::to_string(sizeof(LedgerLayout)) +
                                       " (tesserad and the shim are different versions)");
  }
  void* mem = mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    return Result<MemoryLedger>::Error(std::string("ledger: cannot map the daemon's ledger: ") +
                                       std::strerror(errno));
  }
  auto* layout = static_cast<LedgerLayout*>(mem);
  if (layout->magic != kLedgerMagic || layout->version != kLedgerVersion) {
    munmap(mem, sizeof(LedgerLayout));
    return Result<MemoryLedger>::Error(
        "ledger: the daemon's ledger has another layout version (tesserad and the shim differ)");
  }
  return MemoryLedger(layout, -1);
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
    LedgerBook::Container& entry = book_->containers[c];
    std::snprintf(entry.id, sizeof(entry.id), "%s", id.c_str());
    for (int d = 0; d < kMaxDevices; ++d) {
      entry.unseen[d].store(0);
      entry.unseen_gpu_ns[d].store(0);
    }
    entry.flags.store(0);
    entry.core_percent.store(100);
    entry.weight.store(1);
    entry.high_priority.store(0);
    entry.process_count.store(0);
    ContainerSlot& slot = layout_->containers[c];
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.used[d].store(0);
      slot.charged_until_ns[d].store(0);
    }
    slot.oom_refusals.store(0);
    slot.token_wait_ns.store(0);
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
  return Status::Ok();
}

Result<uint32_t> MemoryLedger::AddProcess(uint32_t c, int32_t host_pid, int32_t local_pid) {
  for (int p = 0; p < kMaxProcesses; ++p) {
    LedgerBook::Process& entry = book_->processes[p];
    if (entry.state.load() != kFree) continue;
    ProcessSlot& slot = layout_->processes[p];
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.used[d].store(0);
      slot.gpu_ns[d].store(0);
      slot.quota_hint_ns[d].store(0);
      slot.waiting[d].store(0);
      slot.idle_at_ns[d].store(0);
    }
    slot.busy_mask.store(0);
    slot.beat_ns.store(0);
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
  ProcessSlot& slot = layout_->processes[p];
  for (int d = 0; d < kMaxDevices; ++d) {
    // What the process says it holds is its own claim: it can take back no more than its
    // container holds (the subtraction saturates), and only from its own container.
    const uint64_t held = slot.used[d].exchange(0);
    if (held != 0) SaturatingSub(layout_->containers[c].used[d], held);
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
}

void MemoryLedger::AddUnseenGpuTime(uint32_t c, int device, uint64_t ns) {
  book_->containers[c].unseen_gpu_ns[device].fetch_add(ns);
}

void MemoryLedger::SetUnseen(uint32_t c, int device, uint64_t bytes) {
  book_->containers[c].unseen[device].store(bytes);
  layout_->containers[c].unseen[device].store(bytes);
}

}  // namespace tessera::ledger
