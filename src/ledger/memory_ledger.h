// MemoryLedger: the daemon's side of the node's memory ledger (ledger_layout.h): tesserad creates
// or reopens the segments, adds and removes containers and processes, reclaims a dead process's
// bytes, and opens the descriptors a process is given. A captured process never holds one: it
// maps what it was sent as a TenantLedger (tenant_ledger.h), whose fast path (admission.h) is the
// only code that charges memory. Nothing here runs on the shim's fast path.
//
// Shared memory is untrusted input. A tenant process maps the node view read-only and sealed, its
// own container's segment writable and no other container's at all (ledger_layout.h), so the
// fields below cannot be rewritten by a tenant; the daemon still keeps its own record of every
// field only it writes (the LedgerBook below: slot states and generations, a process's container
// and pids, a container's id, limits, settings and flags, the device table) and reads those from
// the book, never back from the segment, because a segment a previous daemon left (or a crash
// mid-write) is still input. The book is built once, when the daemon opens the segment, by
// validating what it finds there (a slot that is not what the daemon could have written is dropped
// and reported, and the counters of the containers it touched are rebuilt from their processes);
// Repair() later puts back anything that differs. Counters a tenant legitimately writes (bytes
// used, GPU time, waits) are read from its container's segment; their readers treat them as
// claims.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "ledger/ledger_layout.h"
#include "ledger/segment_guard.h"
#include "ledger/tenant_ledger.h"

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

class MemoryLedger {
 public:
  // Creates the named POSIX shared-memory segments, or reopens them (a restarted daemon keeps
  // every container's and process's accounting). Devices are (re)written. A reopened segment is
  // validated slot by slot into the book (open_report() says what was dropped or repaired); one of
  // another layout version, or recorded for other GPUs (other UUIDs), is refused.
  static Result<MemoryLedger> CreateOrOpen(const std::string& shm_name,
                                           const std::vector<DeviceInfo>& devices);
  // Removes every named segment of the ledger `shm_name` (the node segment, the containers'); for
  // tests and an ephemeral daemon's exit. Mappings stay valid until unmapped.
  static void Remove(const std::string& shm_name);

  MemoryLedger(MemoryLedger&& other) noexcept;
  MemoryLedger& operator=(MemoryLedger&& other) noexcept;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;
  ~MemoryLedger();

  // The node view: what every process reads (limits, settings, process identities, the
  // arbiter's words). Writable here only: a process's mapping is read-only and sealed (no writable
  // mapping of it can be made, by any route), and a write through it faults.
  LedgerLayout* layout() const { return layout_; }
  // Container slot `c`'s segment (a free slot's reads as zeros), and its counters.
  ContainerSegment& segment(uint32_t c) const { return segments_[c]; }
  ContainerCounters& counters(uint32_t c) const { return segments_[c].counters; }
  // Process `p`'s counters, in the segment of the container the book says it is in.
  ProcessCounters& process(uint32_t p) const {
    return segments_[book_->processes[p].container.load() % kMaxContainers].processes[p];
  }
  Exchange& exchange() const { return *exchange_; }
  // The kMaxContainers container segments, indexed by container slot. Like layout(), the pointer
  // stays valid when the ledger is moved (for services that keep it).
  ContainerSegment* segments() const { return segments_; }
  // The node's device count, from the book.
  int device_count() const { return static_cast<int>(book_->device_count); }
  // Opens the descriptors a process of container `c` is given (the caller closes them; the
  // process maps them as a TenantLedger).
  Result<TenantDescriptors> OpenForTenant(uint32_t c) const;

  // Container `c`'s limit on `device` as the view says, and the bytes its processes say they use.
  uint64_t Limit(uint32_t c, int device) const {
    return layout_->containers[c].limit[device].load(std::memory_order_relaxed);
  }
  uint64_t Used(uint32_t c, int device) const {
    return counters(c).used[device].load(std::memory_order_relaxed);
  }

  // ---- Slots (under the caller's lock) ----
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

  // Writes `devices` as the node segment's device table, for the daemon that opens this ledger
  // next (a restart after a MIG GPU was cut again: CreateOrOpen then finds the devices it
  // discovers). Neither the book nor the view changes: call it only when this daemon stops next.
  void RecordDevicesForRestart(const std::vector<DeviceInfo>& devices);

  // ---- The daemon's book ----
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
  // Makes the sealed node view (its header and devices from the node segment; the slots
  // are published after) and the exchange, each a memfd of its own.
  Status MakeView();
  std::vector<std::string> RepairLayout(LedgerLayout* l);
  // Maps container `c`'s segment file in its place. `fresh`: a new, empty file (the old
  // one, if any, is unlinked first); else the file a previous daemon left, which must be intact
  // (else a fresh one is made and the loss reported).
  Status MapContainerSegment(uint32_t c, bool fresh);
  std::string ContainerSegmentName(uint32_t c) const;
  void Unmap();

  LedgerLayout* layout_ = nullptr;  // the node view
  // The node segment (the named file, kept across restarts): the daemon-owned fields, as in the
  // view, from which a restarted daemon rebuilds its book. No tenant is given it.
  LedgerLayout* store_ = nullptr;
  int view_fd_ = -1;                      // the view's memfd
  int exchange_fd_ = -1;                  // the exchange's memfd
  std::unique_ptr<SegmentGuard> guard_;   // over segments_
  ContainerSegment* segments_ = nullptr;  // kMaxContainers of them, in one reservation
  Exchange* exchange_ = nullptr;
  std::string name_;  // the node segment's shm name
  std::unique_ptr<LedgerBook> book_;
  std::vector<std::string> open_report_;
};

}  // namespace tessera::ledger
