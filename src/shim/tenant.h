// Tenant: what the shim knows about the process it lives in: its configuration (from the
// environment, validated once on cuInit), its registration with tesserad (the connection stays
// open for the process's life: its close is the process's death), and the mapped ledger.
//
// Modes: kUninitialised until cuInit; kPassThrough when TESSERA_DISABLE=1 or, with
// TESSERA_FAIL_OPEN=1, when no daemon is reachable; kEnforcing otherwise. The fast path reads the
// mode and the slot indices with plain atomic loads; only Initialise and a re-registration after
// fork do I/O, and neither runs on an allocation path except once in a forked child.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "driver/cuda_api.h"
#include "ledger/tenant_ledger.h"

namespace tessera::shim {

enum class Mode : uint32_t { kUninitialised = 0, kPassThrough = 1, kEnforcing = 2, kFailed = 3 };

struct TenantState {
  std::atomic<Mode> mode{Mode::kUninitialised};
  std::atomic<bool> needs_registration{false};  // set in a forked child
  ledger::TenantLedger* ledger = nullptr;
  uint32_t container = 0;
  uint32_t process = 0;
  uint32_t generation = 0;  // the process slot's generation, from the HELLO reply
  // The connection to the daemon. After registration only the daemon watcher (tenant.cc) changes
  // it: when the daemon goes away it re-attaches this process to the next one (HELLO resume=).
  int socket_fd = -1;
  // TESSERA_VISIBLE_DEVICES: the process's device ordinal -> the node's (ledger) device index.
  int physical[ledger::kMaxDevices] = {};
  int visible_count = 0;
  uint64_t context_bytes = 0;          // what one context costs on a device (from the daemon)
  CUresult init_error = CUDA_SUCCESS;  // what cuInit returns when kFailed
  // Called after every successful registration (the first, and a forked child's): the libcuda
  // shim starts its compute gate with the new process slot there. Null in the NVML shim.
  void (*on_registered)() = nullptr;
};

TenantState& Tenant();

// The ledger index of the device the process calls `ordinal`, or -1.
inline int LedgerDevice(int ordinal) {
  const TenantState& t = Tenant();
  return ordinal >= 0 && ordinal < t.visible_count ? t.physical[ordinal] : -1;
}

// Reads the environment, registers with the daemon and maps the ledger. Returns the status cuInit
// must return before (or instead of) calling the real one. Idempotent; thread-safe. An observer
// (the NVML shim) only reads its container's view: it takes no process slot.
CUresult InitialiseTenant(bool observer = false);

// Re-registers a forked child as its own process (slow path, once per child).
bool RegisterForkedChild();
// Whether the process is registered: at once unless it is a forked child not yet registered.
inline bool EnsureRegistered() {
  return !Tenant().needs_registration.load(std::memory_order_acquire) || RegisterForkedChild();
}

}  // namespace tessera::shim
