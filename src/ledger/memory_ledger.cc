// MemoryLedger's slow path: creating, reopening and mapping the segment, and the daemon's slot
// management. Only tesserad calls the mutating functions here, from its single event-loop thread,
// so slot allocation needs no cross-process lock: processes only ever touch counters.
#include "ledger/memory_ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tessera::ledger {

MemoryLedger::MemoryLedger(MemoryLedger&& other) noexcept : layout_(other.layout_), fd_(other.fd_) {
  other.layout_ = nullptr;
  other.fd_ = -1;
}

MemoryLedger& MemoryLedger::operator=(MemoryLedger&& other) noexcept {
  if (this != &other) {
    this->~MemoryLedger();
    layout_ = other.layout_;
    fd_ = other.fd_;
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
  if (!fresh && static_cast<size_t>(st.st_size) != size) {
    close(fd);
    return Result<MemoryLedger>::Error(
        "ledger: /dev/shm" + shm_name + " has size " + std::to_string(st.st_size) +
        ", this tesserad expects " + std::to_string(size) +
        " (a different version left it); stop every tenant and remove it");
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
    munmap(mem, size);
    close(fd);
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name +
                                       " holds another layout version; stop every tenant and "
                                       "remove it");
  } else if (const uint32_t had = layout->device_count.load(); had != devices.size()) {
    munmap(mem, size);
    close(fd);
    return Result<MemoryLedger>::Error("ledger: /dev/shm" + shm_name + " was created for " +
                                       std::to_string(had) + " devices, this node has " +
                                       std::to_string(devices.size()));
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
  return MemoryLedger(layout, fd);
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
    const ContainerSlot& slot = layout_->containers[c];
    if (slot.state.load() == kLive && id == slot.id) return c;
  }
  return -1;
}

Result<uint32_t> MemoryLedger::UpsertContainer(const std::string& id,
                                               const std::vector<uint64_t>& limits) {
  if (id.empty() || id.size() >= sizeof(ContainerSlot::id)) {
    return Result<uint32_t>::Error("ledger: container id \"" + id + "\" has a bad length");
  }
  int c = FindContainer(id);
  if (c < 0) {
    for (int i = 0; i < kMaxContainers && c < 0; ++i) {
      if (layout_->containers[i].state.load() == kFree) c = i;
    }
    if (c < 0) {
      return Result<uint32_t>::Error("ledger: all " + std::to_string(kMaxContainers) +
                                     " container slots are in use");
    }
    ContainerSlot& slot = layout_->containers[c];
    std::snprintf(slot.id, sizeof(slot.id), "%s", id.c_str());
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.used[d].store(0);
      slot.charged_until_ns[d].store(0);
      slot.unseen[d].store(0);
    }
    slot.flags.store(0);
    slot.oom_refusals.store(0);
    slot.token_wait_ns.store(0);
    slot.core_percent.store(100);
    slot.weight.store(1);
    slot.high_priority.store(0);
    slot.process_count.store(0);
  }
  ContainerSlot& slot = layout_->containers[c];
  for (int d = 0; d < kMaxDevices; ++d) {
    slot.limit[d].store(static_cast<size_t>(d) < limits.size() ? limits[d] : kUnlimited);
  }
  slot.state.store(kLive, std::memory_order_release);
  return static_cast<uint32_t>(c);
}

Status MemoryLedger::RemoveContainer(uint32_t c) {
  ContainerSlot& slot = layout_->containers[c];
  if (slot.process_count.load() != 0) {
    return Status::Error(std::string("ledger: container ") + slot.id + " still has processes");
  }
  slot.state.store(kFree, std::memory_order_release);
  slot.generation.fetch_add(1);
  return Status::Ok();
}

Result<uint32_t> MemoryLedger::AddProcess(uint32_t c, int32_t host_pid, int32_t local_pid) {
  for (int p = 0; p < kMaxProcesses; ++p) {
    ProcessSlot& slot = layout_->processes[p];
    if (slot.state.load() != kFree) continue;
    for (int d = 0; d < kMaxDevices; ++d) {
      slot.used[d].store(0);
      slot.gpu_ns[d].store(0);
      slot.quota_hint_ns[d].store(0);
      slot.waiting[d].store(0);
      slot.idle_at_ns[d].store(0);
    }
    slot.busy_mask.store(0);
    slot.beat_ns.store(0);
    slot.host_pid.store(host_pid);
    slot.local_pid.store(local_pid > 0 ? local_pid : host_pid);
    slot.container.store(c);
    slot.state.store(kLive, std::memory_order_release);
    layout_->containers[c].process_count.fetch_add(1);
    return static_cast<uint32_t>(p);
  }
  return Result<uint32_t>::Error("ledger: all " + std::to_string(kMaxProcesses) +
                                 " process slots are in use");
}

void MemoryLedger::ReclaimProcess(uint32_t p) {
  ProcessSlot& slot = layout_->processes[p];
  if (slot.state.load() != kLive) return;
  const uint32_t c = slot.container.load();
  for (int d = 0; d < kMaxDevices; ++d) {
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
  slot.host_pid.store(0);
  slot.local_pid.store(0);
  slot.state.store(kFree, std::memory_order_release);
  slot.generation.fetch_add(1);
  uint32_t count = layout_->containers[c].process_count.load();
  while (count > 0 &&
         !layout_->containers[c].process_count.compare_exchange_weak(count, count - 1)) {
  }
}

}  // namespace tessera::ledger
