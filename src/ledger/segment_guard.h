// SegmentGuard: tesserad's defence against a tenant that shrinks its own container's segment file.
// A tenant maps its container's segment writable, so it holds a writable descriptor of that file
// and may ftruncate it; the daemon's mapping of the file would then fault (SIGBUS) on every page
// past the new end, in the arbiter, the reconciler or a reclaim: one tenant would take the node's
// daemon down, and every restart with it. While a guard covers the daemon's mapping of the
// container segments, such a fault instead finds a page of zeros (a private anonymous page mapped
// in place of the lost one, from the signal handler) and the segment is noted as cut; the daemon
// reports it from its sweep (MemoryLedger::Repair). The tenant's own processes still fault on
// their mappings: the cut costs only the container that made it.
//
// Daemon only; never linked into a tenant's process. At most kMaxGuards guards at once (one per
// MemoryLedger a process holds: tesserad has one; tests and the fuzzer a few). Any other SIGBUS is
// passed on to the handler installed before (ASan's, or the default, which ends the process).
#pragma once

#include <bitset>
#include <cstddef>

#include "ledger/ledger_layout.h"

namespace tessera::ledger {

inline constexpr int kMaxGuards = 8;

class SegmentGuard {
 public:
  // Guards `count` segments of `segment_size` bytes each, laid end to end from `base` (page
  // aligned). !ok() when every guard is taken.
  SegmentGuard(void* base, size_t segment_size, int count);
  ~SegmentGuard();
  SegmentGuard(const SegmentGuard&) = delete;
  SegmentGuard& operator=(const SegmentGuard&) = delete;

  bool ok() const { return slot_ >= 0; }
  // The segments found cut since the last call (bit i: segment i), cleared as they are returned.
  std::bitset<kMaxContainers> TakeCut();

 private:
  int slot_ = -1;
};

}  // namespace tessera::ledger
