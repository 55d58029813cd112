// TenantLedger: a captured process's view of the node's memory ledger (ledger_layout.h), mapped
// from the descriptors tesserad sent it: the node view read-only (sealed), its own container's
// segment and the exchange read-write, no other container's segment at all. What the shim needs
// on its fast path (Reserve/Release, the counters) is here, inline, with no syscalls, locks,
// logging or allocation; mapping and remapping (registration, a fork, a restarted daemon) is the
// only slow path. It must never create, name or repair a segment: that is MemoryLedger's, in
// tesserad (memory_ledger.h). Everything it reads from the segments is what the daemon and its
// own container wrote; it trusts nothing it uses to index memory beyond the bounds checked here.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "ledger/admission.h"
#include "ledger/ledger_layout.h"

namespace tessera::ledger {

// The descriptors a process of one container is given (each open; the receiver closes them).
struct TenantDescriptors {
  int node = -1;       // the node view (a sealed memfd: no writable mapping can be made of it)
  int container = -1;  // the container's segment, read-write
  int exchange = -1;   // the exchange segment, read-write
};

class TenantLedger {
 public:
  // Maps a ledger from the descriptors the daemon sent for container slot `container` (the
  // descriptors are not kept). The node view is mapped read-only.
  static Result<TenantLedger> MapFds(const TenantDescriptors& fds, uint32_t container);
  // Maps, in place of what is mapped now, each segment `fds` names that is not the one mapped
  // (another file): the node view and exchange of a restarted daemon, the segment of another
  // container (a forked child registered elsewhere) or a replaced one. In place, so pointers into
  // the mappings (the gate's, the shim's) stay valid. On success the ledger is `container`'s.
  Status Remap(const TenantDescriptors& fds, uint32_t container);

  TenantLedger(TenantLedger&& other) noexcept;
  TenantLedger& operator=(TenantLedger&& other) noexcept;
  TenantLedger(const TenantLedger&) = delete;
  TenantLedger& operator=(const TenantLedger&) = delete;
  ~TenantLedger();

  // The container slot whose segment is mapped.
  uint32_t container() const { return container_; }
  // The node view: limits, settings, process identities, the arbiter's words. Read-only: a write
  // through it faults, and no writable mapping of it can be made by any route.
  const LedgerLayout* layout() const { return layout_; }
  // Its container's segment, its counters, and process `p`'s (a process of its container).
  ContainerSegment& segment() const { return *own_; }
  ContainerCounters& counters() const { return own_->counters; }
  ProcessCounters& process(uint32_t p) const { return own_->processes[p]; }
  Exchange& exchange() const { return *exchange_; }
  // The node's device count as the view says, bounded by kMaxDevices.
  int device_count() const {
    const uint32_t n = layout_->device_count.load();
    return static_cast<int>(n < static_cast<uint32_t>(kMaxDevices) ? n : kMaxDevices);
  }

  // ---- Fast path (admission.h) ----
  // Reserves `bytes` on `device` for process `p` of its container. False when it would exceed
  // the container's limit or the container is blocked; nothing is charged then.
  bool Reserve(uint32_t p, int device, uint64_t bytes) {
    return ReserveIn(layout_->containers[container_], *own_, p, device, bytes);
  }
  // Gives back what Reserve took; saturates at zero.
  void Release(uint32_t p, int device, uint64_t bytes) { ReleaseIn(*own_, p, device, bytes); }
  uint64_t Limit(int device) const {
    return layout_->containers[container_].limit[device].load(std::memory_order_relaxed);
  }
  uint64_t Used(int device) const {
    return own_->counters.used[device].load(std::memory_order_relaxed);
  }

 private:
  // Which file a mapping is of (st_dev, st_ino).
  struct FileId {
    uint64_t dev = 0, ino = 0;
    bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  };

  TenantLedger() = default;
  static FileId FileOf(int fd);
  void Unmap();

  LedgerLayout* layout_ = nullptr;   // the node view, mapped read-only
  ContainerSegment* own_ = nullptr;  // its container's segment
  Exchange* exchange_ = nullptr;
  uint32_t container_ = 0;
  FileId node_file_, own_file_, exchange_file_;  // which files are mapped
};

}  // namespace tessera::ledger
