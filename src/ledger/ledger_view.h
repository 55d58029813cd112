// LedgerView: a ledger segment mapped read-only by name, as an operator's tool, a test or the
// chaos soak reads it from outside the daemon, and its comparison with what the tenants say they
// hold. It never writes the segment and holds no policy; it trusts the segment as it finds it
// (its users run the tenants themselves).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "ledger/ledger_layout.h"

namespace tessera::ledger {

// What a test expects the ledger to hold on device 0: per container id, its live processes (host
// pid) and the bytes each says it holds.
using ExpectedHoldings = std::map<std::string, std::map<pid_t, uint64_t>>;

class LedgerView {
 public:
  // Maps the POSIX shared-memory segment `shm_name` read-only; !ok() when it cannot.
  explicit LedgerView(const std::string& shm_name);
  ~LedgerView();
  LedgerView(const LedgerView&) = delete;
  LedgerView& operator=(const LedgerView&) = delete;

  bool ok() const { return layout_ != nullptr; }
  const LedgerLayout* layout() const { return layout_; }

  // Differences between the segment and `expected` (empty when they agree): every live container
  // uses exactly the sum of its live processes' holdings, every live process slot is one of the
  // expected processes and holds what it says, and no container outside `expected` uses memory.
  std::string Compare(const ExpectedHoldings& expected) const;
  // Live process slots that name one of `pids` (processes known dead), as "slot S pid P" lines.
  std::vector<std::string> LiveSlotsOf(const std::vector<pid_t>& pids) const;

 private:
  std::string name_;
  const LedgerLayout* layout_ = nullptr;
};

// The node view (ledger_layout.h) of the daemon that last opened the ledger `shm_name` (its pid is
// in the node segment), found among that daemon's descriptors in /proc/PID/fd (which takes the
// daemon's rights) and mapped read-only; nullptr when it cannot be. For tests and tools that read
// the arbiter's words, which only the view holds. Unmap it with munmap(p, sizeof(LedgerLayout)).
const LedgerLayout* MapDaemonView(const std::string& shm_name);

}  // namespace tessera::ledger
