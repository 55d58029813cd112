// DaemonNodeControl: tesserad's implementation of ctl::NodeControl, the daemon's side of the
// control tree (docs/contracts.md). It reads the node from the shared ledger (through the
// Registry, under its mutex) and from the ComputeService, and applies a write to exactly one of
// them. The three doors (the FUSE mount, the CTL socket verb behind `tessera ctl`, and HTTP
// /v1/ctl/) all hold a ControlTree over one DaemonNodeControl.
//
// Thread-safety: safe from any thread. Snapshot() and every setter run under the registry's mutex
// (Registry::WithLedger), so a snapshot never shows a container slot half-registered, and setters
// re-check the tree's rules against the node as it is at that moment, one at a time.
//
// How the ledger's model maps onto the tree's:
// - Every live container (ledger state kLive, with or without processes) appears under every GPU,
//   with its limit on that GPU as `memsize` (kUnlimited reads as "unlimited").
// - Weights and high priority are per container in the ledger, not per container and GPU: a write
//   of `<gpu>/<c>/weight` or `<gpu>/<c>/highprio` under any GPU applies to the container on every
//   GPU. A weight increase must therefore fit the free weight of every GPU (and stay within every
//   GPU's max_inst).
// - `free_weight` is the arbiter's (ComputeService::Shares): max_inst minus the weights of the
//   containers it schedules, which are the containers that have processes. A registered container
//   with no process yet holds no weight until its first process arrives.
// - `memory_free` is the device's total minus what every container uses on it (the ledger's view;
//   memory outside Tessera's accounting is not subtracted).
// - A memsize below what the container uses now needs `force`. The limit is stored with one
//   atomic write; an allocation racing with it is admitted against either the old or the new
//   limit, never both (the shim's CAS reads the limit once).
// What it must not do: I/O, or any check of value syntax (the tree parses; this class enforces
// the node's invariants).
#pragma once

#include <string>
#include <string_view>

#include "ctl/control_tree.h"
#include "daemon/compute.h"
#include "daemon/registry.h"

namespace tessera::daemon {

class DaemonNodeControl : public ctl::NodeControl {
 public:
  // `registry` and `compute` must outlive this object. `version` is the one line `version` shows.
  DaemonNodeControl(Registry* registry, ComputeService* compute, std::string version);
  DaemonNodeControl(const DaemonNodeControl&) = delete;
  DaemonNodeControl& operator=(const DaemonNodeControl&) = delete;

  ctl::NodeSnapshot Snapshot() const override;

  Status SetDefaultMemsize(Bytes memsize) override;
  Status SetPolicy(int gpu, ArbiterPolicy policy) override;
  Status SetMaxInst(int gpu, int max_inst) override;
  Status SetPrioRatio(int gpu, Percent prio_ratio) override;
  // Applies to the container on every GPU (see the header comment).
  Status SetWeight(int gpu, std::string_view container, int weight) override;
  Status SetMemsize(int gpu, std::string_view container, Bytes memsize, bool force) override;
  // Applies to the container on every GPU (see the header comment).
  Status SetHighPriority(int gpu, std::string_view container, bool high_priority) override;

 private:
  // OK when `gpu` is one of the node's GPUs; otherwise an error about `path`.
  Status CheckGpu(const ledger::MemoryLedger& ledger, int gpu, const std::string& path) const;
  // Changes one field of GPU `gpu`'s arbiter config under the registry's mutex.
  template <typename Change>
  Status Reconfigure(int gpu, const std::string& path, const std::string& value, Change change);

  Registry* registry_;
  ComputeService* compute_;
  std::string version_;
};

}  // namespace tessera::daemon
