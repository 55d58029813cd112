// Registry: tesserad's record of containers and processes on top of the shared memory ledger.
// It turns protocol requests into ledger slots (HELLO: a process joins a container; CONTAINER: an
// operator or `tessera run` sets limits), reclaims a process's memory when its connection closes,
// and renders the STATUS snapshot. It does no I/O of its own.
//
// Thread-safety: every public method takes the registry's one mutex, so the event loop (its main
// caller), the control tree's doors (FUSE and HTTP threads, through NodeControl) and the HTTP
// endpoint's STATUS may call it concurrently. WithLedger() runs code under that same mutex, so a
// reader sees no container slot half-created or half-freed (a slot's id is plain bytes).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <bitset>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"
#include "ledger/memory_ledger.h"
#include "protocol/protocol.h"

namespace tessera::daemon {

class ComputeService;

// The process slot of an observer registration (HELLO observer=1), which holds no slot.
inline constexpr uint32_t kNoProcess = ~uint32_t{0};

struct RegistryOptions {
  bool allow_self_declared = true;
  uint64_t context_bytes = 0;  // charged once per process and device for the driver's context
  // Processes one container may have registered at once (HELLO through any socket), so that one
  // tenant cannot take the node's ledger::kMaxProcesses slots from its neighbours: 1 to
  // kMaxProcesses (tesserad --container-max-processes).
  int max_processes_per_container = 128;
};

class Registry {
 public:
  // `compute` (may be null) admits new containers against max_inst and supplies the shares STATUS
  // reports.
  Registry(ledger::MemoryLedger ledger, RegistryOptions options, ComputeService* compute = nullptr);

  // HELLO: registers the process `pid` (from SO_PEERCRED). Returns the reply fields; the caller
  // sends the ledger descriptor with them and remembers the process slot for Disconnected. With
  // resume=SLOT generation=G it re-attaches a process of an earlier daemon instead (see
  // ResumeLocked).
  Result<protocol::Message> Hello(const protocol::Message& request, pid_t pid,
                                  uint32_t* process_slot);
  // CONTAINER: creates or updates a container's limits. With remove=1 (and no other field but id)
  // it unregisters the container instead: it goes at once when no process of it is left, else
  // when its last process exits (until then its processes keep what they hold); the reply says
  // how many processes remain (`processes=N`). Its container socket closes either way.
  Result<protocol::Message> SetContainer(const protocol::Message& request);
  // The connection of a registered process closed: everything it held goes back. `generation` is
  // the slot's generation its HELLO reply carried: a slot the sweep (ReclaimDeadProcesses) already
  // took back, and perhaps gave to a new process since, is left alone.
  void Disconnected(uint32_t process_slot, uint32_t generation);
  // Reclaims slots of processes that died while no daemon was watching (after a restart).
  int ReclaimDeadProcesses();
  // Puts back every daemon-owned ledger field a tenant rewrote (MemoryLedger::Repair), logging one
  // line per slot; returns how many slots were repaired. The server calls it once a second.
  int Repair();
  std::string StatusJson() const;

  // The limit (bytes, on every device) given to a container declared by its first process's HELLO
  // when that HELLO declares none (no `mem=`); ledger::kUnlimited (the default): no limit.
  void SetDefaultLimit(uint64_t bytes) { default_limit_.store(bytes); }
  // MPS (daemon/mps_gpus.h): the folder its pipes are under and the GPUs whose control daemons
  // run, for STATUS (`mps_root`, each device's `mps`). An empty root: this tesserad runs no MPS.
  void SetMpsGpus(std::string root, std::set<int> gpus);
  uint64_t default_limit() const { return default_limit_.load(); }

  // Runs `f(ledger)` under the registry's mutex and returns what it returns. `f` must be quick and
  // must not call back into the registry.
  template <typename F>
  auto WithLedger(F&& f) const {
    std::lock_guard<std::mutex> lock(mu_);
    return f(ledger_);
  }
  // The same, for code that changes daemon-owned fields through the ledger's setters.
  template <typename F>
  auto WithLedger(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(ledger_);
  }

  // The ledger; its descriptor and layout pointer never change. Reading slots consistently with
  // registrations needs WithLedger().
  const ledger::MemoryLedger& ledger() const { return ledger_; }

 private:
  // Applies the compute fields of a request (core=, weight=, high_prio=) to container `c`.
  Status ApplyCompute(const protocol::Message& request, uint32_t c, const char* verb);
  // HELLO resume=SLOT generation=G (Hello hands it here, under the lock): a process registered
  // with an earlier daemon (before a restart or upgrade) re-attaches its connection, so its death
  // is again a closed socket. Accepted only when slot SLOT is live, holds `pid` (SO_PEERCRED) and
  // still has generation G; nothing in the ledger changes.
  Result<protocol::Message> ResumeLocked(const protocol::Message& request, pid_t pid,
                                         uint32_t* process_slot);
  // The reply fields every accepted HELLO carries: container, devices, pid, context_bytes.
  protocol::Message Welcome(uint32_t c, pid_t pid) const;
  // Parses and validates the compute fields of a request into `out`.
  struct ComputeFields {
    uint32_t core = 100;
    uint32_t weight = 1;
    uint32_t high_priority = 0;
  };
  Result<ComputeFields> ParseCompute(const protocol::Message& request, const char* verb) const;
  // Frees container `c` if it was self-declared (or unregistered) and has no process left.
  void RemoveIfUnused(uint32_t c);
  // CONTAINER id=X remove=1, under the lock.
  Result<protocol::Message> UnregisterLocked(const protocol::Message& request);
  // Parses a "mem" field: comma list of byte counts or "none", one per device of `devices` (a
  // shorter list repeats its last entry).
  Result<std::vector<uint64_t>> ParseLimits(const std::string& text, int devices) const;

  mutable std::mutex mu_;
  std::string mps_root_;    // under mu_
  std::set<int> mps_gpus_;  // under mu_
  // Process slots with a live connection to this daemon (HELLO or resume; cleared on close). Slots
  // live in the ledger without one belong to processes of an earlier daemon that have not resumed.
  std::bitset<ledger::kMaxProcesses> attached_;
  ledger::MemoryLedger ledger_;
  RegistryOptions options_;
  std::atomic<uint64_t> default_limit_{ledger::kUnlimited};
  ComputeService* compute_;
};

}  // namespace tessera::daemon
