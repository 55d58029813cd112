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
//
// Shared memory is untrusted input (issue 17). Since layout 8 a tenant process maps the node
// view read-only and sealed, its own container's segment writable and no other container's at
// all (ledger_layout.h), so the fields below can no longer be rewritten by a tenant; the daemon
// still keeps its own record of every field only it writes (the LedgerBook below: slot states and
// generations, a process's container and pids, a container's id, limits, settings and flags, the
// device table) and reads those from the book, never back from the segment, because a segment a
// previous daemon left (or a crash mid-write) is still input. The book is built once, when the
// daemon opens the segment, by validating what it finds there (a slot that is not what the daemon
// could have written is dropped and reported, and the counters of the containers it touched are
// rebuilt from their processes); Repair() later puts back anything that differs. Counters a tenant
// legitimately writes (bytes used, GPU time, waits) are read from its container's segment; their
// readers treat them as claims.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "ledger/ledger_layout.h"
#include "ledger/segment_guard.h"

namespace tessera::ledger {

struct DeviceInfo {
  std::string uuid;
  std::string name;
  uint64_t total_bytes = 0;
};


// The daemon's record of what only it writes (see the file comment). Fields are atomics because
// the daemon's threads (event loop, arbiter, reconciler, doors) read them concurrently; only
// MemoryLedger's slow-path functions write them, under the caller's lock.
struct LedgerBook {
  struct Process {
    std::atomic<uint32_t> state{kFree};
    std::atomic<uint32_t> generation{0};
    std::atomic<uint32_t> container{0};  // always < kMaxContainers
    std::atomic<int32_t> host_pid{0};
    std::atomic<int32_t> local_pid{0};
    // GPU time the arbiter attributed to the process from its gates' intervals (cumulative ns,
    // never decreasing): the device time its kernels occupied, not the time they waited behind
    // others' (arbiter/device_timeline.h). Written by ComputeService alone; the reconciler
    // compares it with what the device says the process used. Daemon memory only.
    std::atomic<uint64_t> gate_gpu_ns[kMaxDevices] = {};
  };
  struct Container {
    std::atomic<uint32_t> state{kFree};
    std::atomic<uint32_t> generation{0};
    char id[sizeof(ContainerSlot::id)] = {};  // NUL-terminated, valid whenever state is kLive
    std::atomic<uint64_t> limit[kMaxDevices] = {};
    std::atomic<uint64_t> unseen[kMaxDevices] = {};
    // GPU time the device saw the container's processes use beyond what their gates measured, as
    // charged by reconciliation (cumulative ns; the arbiter charges its increase). Daemon memory
    // only: not in the segment, and zero again after a restart.
    std::atomic<uint64_t> unseen_gpu_ns[kMaxDevices] = {};
    // GPU time its gates' intervals were attributed, over all its processes so far (cumulative ns,
    // never decreasing; written by ComputeService alone, zero again after a restart): with
    // unseen_gpu_ns, the container's GPU seconds (tessera_container_gpu_seconds_total).
    std::atomic<uint64_t> gate_gpu_ns[kMaxDevices] = {};
    std::atomic<uint32_t> core_percent{100};
    std::atomic<uint32_t> weight{1};
    std::atomic<uint32_t> high_priority{0};
    std::atomic<uint32_t> process_count{0};
    std::atomic<uint32_t> flags{0};
  };
  uint32_t device_count = 0;
  LedgerDevice devices[kMaxDevices] = {};  // written once, before the daemon's threads start
  Process processes[kMaxProcesses];
  Container containers[kMaxContainers];
};

// Which file a mapping is of (st_dev, st_ino).
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};

// The descriptors a process of one container is given (each open; the receiver closes them).
struct TenantDescriptors {
  int node = -1;       // the node view (a sealed memfd: no writable mapping can be made of it)
  int container = -1;  // the container's segment, read-write
  int exchange = -1;   // the exchange segment, read-write
};

class MemoryLedger {
 public:
  // Daemon: creates the named POSIX shared-memory segments, or reopens them (a restarted daemon
  // keeps every container's and process's accounting). Devices are (re)written. A reopened segment
  // is validated slot by slot into the book (open_report() says what was dropped or repaired); one
  // of another layout version, or recorded for other GPUs (other UUIDs), is refused.
  static Result<MemoryLedger> CreateOrOpen(const std::string& shm_name,
                                           const std::vector<DeviceInfo>& devices);
  // Removes every named segment of the ledger `shm_name` (the node segment, the containers'); for
  // tests and an ephemeral daemon's exit. Mappings stay valid until unmapped.
  static void Remove(const std::string& shm_name);
  // Process: maps a ledger from the descriptors the daemon sent for container `container` (the
  // descriptors are not kept). The node view is mapped read-only.
  static Result<MemoryLedger> MapFds(const TenantDescriptors& fds, uint32_t container);
  // Process: maps, in place of what is mapped now, each segment `fds` names that is not the one
  // mapped (another file): the node view and exchange of a restarted daemon, the segment of
  // another container (a forked child registered elsewhere) or a replaced one. In place, so
  // pointers into the mappings (the gate's, the shim's) stay valid.
  Status Remap(const TenantDescriptors& fds, uint32_t container);

  MemoryLedger(MemoryLedger&& other) noexcept;
  MemoryLedger& operator=(MemoryLedger&& other) noexcept;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;
  ~MemoryLedger();

  // The node view: what every process reads (limits, settings, process identities, the
  // arbiter's words). Writable in the daemon only: a process's mapping is read-only and sealed
  // (no writable mapping of it can be made, by any route), and a write through it faults.
  LedgerLayout* layout() const { return layout_; }
  // A container's segment: in the daemon any container's (a free slot's reads as zeros); in a
  // process only its own (`c` must be its container).
  ContainerSegment& segment(uint32_t c) const { return own_ != nullptr ? *own_ : segments_[c]; }
  ContainerCounters& counters(uint32_t c) const { return segment(c).counters; }
  // Process `p`'s counters, in its container's segment (the daemon finds the container in its
  // book; a process has only its own).
  ProcessCounters& process(uint32_t p) const {
    return own_ != nullptr
               ? own_->processes[p]
               : segments_[book_->processes[p].container.load() % kMaxContainers].processes[p];
  }
  Exchange& exchange() const { return *exchange_; }
  // Daemon: the kMaxContainers container segments, indexed by container slot. Like layout(), the
  // pointer stays valid when the ledger is moved (for services that keep it).
  ContainerSegment* segments() const { return segments_; }
  // The daemon's count (its book) when it has one, else the segment's, bounded by kMaxDevices.
  int device_count() const {
    if (book_) return static_cast<int>(book_->device_count);
    const uint32_t n = layout_->device_count.load();
    return static_cast<int>(n < static_cast<uint32_t>(kMaxDevices) ? n : kMaxDevices);
  }
  // Daemon: opens the descriptors a process of container `c` is given (the caller closes them).
  Result<TenantDescriptors> OpenForTenant(uint32_t c) const;

  // ---- Fast path (captured processes) ----
  // Reserves `bytes` on `device` for container `c` and process `p`. False when it would exceed the
  // container's limit or the container is blocked (kContainerBlocked); nothing is charged then.
  bool Reserve(uint32_t c, uint32_t p, int device, uint64_t bytes) {
    const ContainerSlot& slot = layout_->containers[c];
    if ((slot.flags.load(std::memory_order_relaxed) & kContainerBlocked) != 0) return false;
    const uint64_t limit = slot.limit[device].load(std::memory_order_relaxed);
    ContainerSegment& seg = segment(c);
    std::atomic<uint64_t>& counter = seg.counters.used[device];
    uint64_t used = counter.load(std::memory_order_relaxed);
    do {
      if (bytes > limit || used > limit - bytes) return false;
    } while (!counter.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel));
    seg.processes[p].used[device].fetch_add(bytes, std::memory_order_relaxed);
    return true;
  }
  // Gives back what Reserve took; saturates at zero.
  void Release(uint32_t c, uint32_t p, int device, uint64_t bytes) {
    ContainerSegment& seg = segment(c);
    SaturatingSub(seg.processes[p].used[device], bytes);
    SaturatingSub(seg.counters.used[device], bytes);
  }
  uint64_t Limit(uint32_t c, int device) const {
    return layout_->containers[c].limit[device].load(std::memory_order_relaxed);
  }
  uint64_t Used(uint32_t c, int device) const {
    return counters(c).used[device].load(std::memory_order_relaxed);
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
  // (kUnlimited for none). Fails when every slot is taken or its segment cannot be made.
  Result<uint32_t> UpsertContainer(const std::string& id, const std::vector<uint64_t>& limits);
  // Frees a container slot that has no processes left.
  Status RemoveContainer(uint32_t c);
  // Adds a process of container `c`. `local_pid` is its pid in its own pid namespace (what tools
  // inside its container show); 0 when unknown.
  Result<uint32_t> AddProcess(uint32_t c, int32_t host_pid, int32_t local_pid = 0);
  // Takes back everything process `p` holds and frees its slot. Idempotent per generation.
  void ReclaimProcess(uint32_t p);

  // ---- The daemon's book (tesserad only: these need CreateOrOpen's ledger) ----
  const LedgerBook& book() const { return *book_; }
  // The book, writable, for the one part of it that ComputeService (the arbiter thread) keeps:
  // the gate_gpu_ns counters. Everything else in it changes through this class's methods only.
  LedgerBook& compute_book() const { return *book_; }
  // A live container's id (empty for a free slot).
  std::string ContainerId(uint32_t c) const;
  // Setters of daemon-owned container fields: each writes the book and the segment.
  void SetLimit(uint32_t c, int device, uint64_t bytes);
  void SetCompute(uint32_t c, uint32_t core_percent, uint32_t weight, uint32_t high_priority);
  void SetFlags(uint32_t c, uint32_t set, uint32_t clear);
  void SetUnseen(uint32_t c, int device, uint64_t bytes);
  // Charges `ns` of GPU time the container's gates did not measure (LedgerBook::unseen_gpu_ns).
  void AddUnseenGpuTime(uint32_t c, int device, uint64_t ns);
  // Puts back, in the node view and the node segment, every daemon-owned field that differs from
  // the book. Returns one line per repaired slot, naming it and what was found; empty when nothing
  // was touched. Call it under the same lock as the other slow-path functions.
  std::vector<std::string> Repair();
  // What validating a reopened segment dropped or repaired (one line each; empty when clean).
  const std::vector<std::string>& open_report() const { return open_report_; }

 private:
  MemoryLedger() = default;
  // Builds the book from a segment a previous daemon (and its tenants) left (ledger_audit.cc).
  void AdoptSegment(bool fresh);
  // Writes a container's book entry into its slot in the view and the node segment (every
  // daemon-owned field).
  void PublishContainer(uint32_t c);
  void PublishProcess(uint32_t p);
  // Daemon: makes the sealed node view (its header and devices from the node segment; the slots
  // are published after) and the exchange, each a memfd of its own.
  Status MakeView();
  std::vector<std::string> RepairLayout(LedgerLayout* l);
  // Daemon: maps container `c`'s segment file in its place. `fresh`: a new, empty file (the old
  // one, if any, is unlinked first); else the file a previous daemon left, which must be intact
  // (else a fresh one is made and the loss reported).
  Status MapContainerSegment(uint32_t c, bool fresh);
  std::string ContainerSegmentName(uint32_t c) const;
  void Release();

  LedgerLayout* layout_ = nullptr;  // the node view
  // Daemon: the node segment (the named file, kept across restarts): the daemon-owned fields, as
  // in the view, from which a restarted daemon rebuilds its book. No tenant is given it.
  LedgerLayout* store_ = nullptr;
  int view_fd_ = -1;                      // daemon: the view's memfd
  int exchange_fd_ = -1;                  // daemon: the exchange's memfd
  std::unique_ptr<SegmentGuard> guard_;   // daemon: over segments_
  ContainerSegment* segments_ = nullptr;  // daemon: kMaxContainers of them, in one reservation
  ContainerSegment* own_ = nullptr;       // process: its own container's
  Exchange* exchange_ = nullptr;
  // Process: which files are mapped (the view, its container's segment, the exchange).
  FileId node_file_, own_file_, exchange_file_;
  std::string name_;                  // daemon: the node segment's shm name
  std::unique_ptr<LedgerBook> book_;  // daemon only
  std::vector<std::string> open_report_;
};

}  // namespace tessera::ledger
