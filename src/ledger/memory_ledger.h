// MemoryLedger: the node's memory ledger (ledger_layout.h) mapped into this process, with the
// operations each side needs. Captured processes use only the fast path (Reserve/Release), which is
// a CAS on the container's counter plus an add on the process's own, with no syscalls, locks,
// logging or allocation. tesserad owns the slow path: creating the segment, adding and removing
// containers and processes, and reclaiming a dead process's bytes.
//
// Reserve-then-allocate: a caller reserves before the driver call and releases if the call fails.
// Ordering note: Reserve charges the container before the process, so a process killed between the
// two instructions leaves at most that one reservation counted (a leak the daemon's reconciliation
// repairs), never an undercount that would let a neighbour overshoot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "ledger/ledger_layout.h"

namespace tessera::ledger {

struct DeviceInfo {
  std::string uuid;
  std::string name;
  uint64_t total_bytes = 0;
};

class MemoryLedger {
 public:
  // Daemon: creates the named POSIX shared-memory segment, or reopens it (a restarted daemon keeps
  // every container's and process's accounting). Devices are (re)written; a reopened ledger whose
  // devices differ in number is refused.
  static Result<MemoryLedger> CreateOrOpen(const std::string& shm_name,
                                           const std::vector<DeviceInfo>& devices);
  // Process: maps a ledger from a descriptor received from the daemon (the descriptor is not kept).
  static Result<MemoryLedger> MapFd(int fd);

  MemoryLedger(MemoryLedger&& other) noexcept;
  MemoryLedger& operator=(MemoryLedger&& other) noexcept;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;
  ~MemoryLedger();

  LedgerLayout* layout() const { return layout_; }
  int device_count() const { return static_cast<int>(layout_->device_count.load()); }
  // The descriptor of the segment (daemon side; -1 in processes).
  int fd() const { return fd_; }

  // ---- Fast path (captured processes) ----
  // Reserves `bytes` on `device` for container `c` and process `p`. False when it would exceed the
  // container's limit or the container is blocked (kContainerBlocked); nothing is charged then.
  bool Reserve(uint32_t c, uint32_t p, int device, uint64_t bytes) {
    ContainerSlot& slot = layout_->containers[c];
    if ((slot.flags.load(std::memory_order_relaxed) & kContainerBlocked) != 0) return false;
    const uint64_t limit = slot.limit[device].load(std::memory_order_relaxed);
    uint64_t used = slot.used[device].load(std::memory_order_relaxed);
    do {
      if (bytes > limit || used > limit - bytes) return false;
    } while (
        !slot.used[device].compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel));
    layout_->processes[p].used[device].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  // Gives back what Reserve took; saturates at zero.
  void Release(uint32_t c, uint32_t p, int device, uint64_t bytes) {
    SaturatingSub(layout_->processes[p].used[device], bytes);
    SaturatingSub(layout_->containers[c].used[device], bytes);
  }
  uint64_t Limit(uint32_t c, int device) const {
    return layout_->containers[c].limit[device].load(std::memory_order_relaxed);
  }
  uint64_t Used(uint32_t c, int device) const {
    return layout_->containers[c].used[device].load(std::memory_order_relaxed);
  }

  static void SaturatingSub(std::atomic<uint64_t>& counter, uint64_t n) {
    uint64_t cur = counter.load(std::memory_order_relaxed);
    while (!counter.compare_exchange_weak(cur, cur > n ? cur - n : 0, std::memory_order_acq_rel)) {
    }
  }

  // ---- Slow path (tesserad) ----
  // The live container with this id, or -1.
  int FindContainer(const std::string& id) const;
  // Adds a container (or updates the limits of an existing one). `limits` has one entry per device
  // (kUnlimited for none). Fails when every slot is taken.
  Result<uint32_t> UpsertContainer(const std::string& id, const std::vector<uint64_t>& limits);
  // Frees a container slot that has no processes left.
  Status RemoveContainer(uint32_t c);
  // Adds a process of container `c`. `local_pid` is its pid in its own pid namespace (what tools
  // inside its container show); 0 when unknown.
  Result<uint32_t> AddProcess(uint32_t c, int32_t host_pid, int32_t local_pid = 0);
  // Takes back everything process `p` holds and frees its slot. Idempotent per generation.
  void ReclaimProcess(uint32_t p);

 private:
  MemoryLedger(LedgerLayout* layout, int fd) : layout_(layout), fd_(fd) {}
  LedgerLayout* layout_ = nullptr;
  int fd_ = -1;
};

}  // namespace tessera::ledger
