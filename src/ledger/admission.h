// Admission against a container's memory limit: the two operations of the shim's fast path, over
// the shared layout (ledger_layout.h). TenantLedger calls them on the mappings a process was
// given; tests that act as a tenant on the daemon's mappings call the same code. No syscalls, no
// locks, no logging, no allocation: nothing here may be added that needs one.
//
// Reserve-then-allocate: a caller reserves before the driver call and releases if the call fails.
// Reserve charges the container before the process, so a process killed between the two
// instructions leaves at most that one reservation counted (a leak the daemon's reconciliation
// repairs), never an undercount that would let a neighbour overshoot.
#pragma once

#include <atomic>
#include <cstdint>

#include "ledger/ledger_layout.h"

namespace tessera::ledger {

// Subtracts `n` from `counter`, stopping at zero.
inline void SaturatingSub(std::atomic<uint64_t>& counter, uint64_t n) {
  uint64_t cur = counter.load(std::memory_order_relaxed);
  while (!counter.compare_exchange_weak(cur, cur > n ? cur - n : 0, std::memory_order_acq_rel)) {
  }
}

// Reserves `bytes` on `device` for process `p` of the container whose node-view slot is `slot`
// and whose segment is `seg`. False when it would exceed the container's limit or the container is
// blocked (kContainerBlocked); nothing is charged then.
inline bool ReserveIn(const ContainerSlot& slot, ContainerSegment& seg, uint32_t p, int device,
                      uint64_t bytes) {
  if ((slot.flags.load(std::memory_order_relaxed) & kContainerBlocked) != 0) return false;
  const uint64_t limit = slot.limit[device].load(std::memory_order_relaxed);
  std::atomic<uint64_t>& counter = seg.counters.used[device];
  uint64_t used = counter.load(std::memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) return false;
  } while (!counter.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel));
  seg.processes[p].used[device].fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

// Gives back what ReserveIn took; saturates at zero.
inline void ReleaseIn(ContainerSegment& seg, uint32_t p, int device, uint64_t bytes) {
  SaturatingSub(seg.processes[p].used[device], bytes);
  SaturatingSub(seg.counters.used[device], bytes);
}

}  // namespace tessera::ledger
