// Registry: tesserad's record of containers and processes on top of the shared memory ledger.
// It turns protocol requests into ledger slots (HELLO: a process joins a container; CONTAINER: an
// operator or `tessera run` sets limits), reclaims a process's memory when its connection closes,
// and renders the STATUS snapshot. Single-threaded: the server's event loop is its only caller.
// It does no I/O of its own.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/result.h"
#include "daemon/protocol.h"
#include "ledger/memory_ledger.h"

namespace tessera::daemon {

class ComputeService;

// The process slot of an observer registration (HELLO observer=1), which holds no slot.
inline constexpr uint32_t kNoProcess = ~uint32_t{0};

struct RegistryOptions {
  bool allow_self_declared = true;
  uint64_t context_bytes = 0;  // charged once per process and device for the driver's context
};

class Registry {
 public:
  // `compute` (may be null) admits new containers against max_inst and supplies the shares STATUS
  // reports.
  Registry(ledger::MemoryLedger ledger, RegistryOptions options, ComputeService* compute = nullptr);

  // HELLO: registers the process `pid` (from SO_PEERCRED). Returns the reply fields; the caller
  // sends the ledger descriptor with them and remembers the process slot for Disconnected.
  Result<Message> Hello(const Message& request, pid_t pid, uint32_t* process_slot);
  // CONTAINER: creates or updates a container's limits.
  Result<Message> SetContainer(const Message& request);
  // The connection of a registered process closed: everything it held goes back.
  void Disconnected(uint32_t process_slot);
  // Reclaims slots of processes that died while no daemon was watching (after a restart).
  int ReclaimDeadProcesses();
  std::string StatusJson() const;

  const ledger::MemoryLedger& ledger() const { return ledger_; }

 private:
  // Applies the compute fields of a request (core=, weight=, high_prio=) to container `c`.
  Status ApplyCompute(const Message& request, uint32_t c, const char* verb);
  // Parses and validates the compute fields of a request into `out`.
  struct ComputeFields {
    uint32_t core = 100;
    uint32_t weight = 1;
    uint32_t high_priority = 0;
  };
  Result<ComputeFields> ParseCompute(const Message& request, const char* verb) const;
  // Frees container `c` if it was self-declared and has no process left.
  void RemoveIfUnused(uint32_t c);
  // Parses a "mem" field: comma list of byte counts or "none", one per device of `devices` (a
  // shorter list repeats its last entry).
  Result<std::vector<uint64_t>> ParseLimits(const std::string& text, int devices) const;

  ledger::MemoryLedger ledger_;
  RegistryOptions options_;
  ComputeService* compute_;
};

}  // namespace tessera::daemon
