// The control tree (docs/contracts.md): the cGPU `/proc/cgpu_km`-style files through which an
// operator reads and changes a node's GPU sharing, implemented once and served by three doors
// (the FUSE mount in fuse_mount.h, `tessera ctl`, and the daemon's `GET/PUT /v1/ctl/PATH`).
//
// The tree owns no state and applies nothing itself. It reads a snapshot of the node through
// NodeControl, the daemon's side of the contract, and turns a write into one typed NodeControl
// setter after checking the value's syntax and range and the cross-field rules (weights within
// max_inst and free_weight, memsize not below usage). It does no I/O, no logging and no locking,
// and knows nothing of FUSE, HTTP or sockets: the doors translate.
//
// Paths are relative to the tree's root, components separated by '/' (a leading or trailing '/'
// is ignored; empty components, "." and ".." are refused):
//   version                      ro   the daemon's version
//   default_memsize              rw   bytes given to a container that declares no limit
//   <gpu>/policy                 rw   0-5 (core/arbiter_policy.h); reads as the number
//   <gpu>/max_inst               rw   1-256, never below the sum of the GPU's container weights
//   <gpu>/free_weight            ro   max_inst minus the sum of the weights
//   <gpu>/prio_ratio             rw   20-99 (percent of the GPU for the high-priority lane)
//   <gpu>/<container>/weight     rw   1..max_inst, at most free_weight + its current weight
//   <gpu>/<container>/memsize    rw   bytes; below the container's usage only with force
//   <gpu>/<container>/highprio   rw   0 or 1
//   <gpu>/<container>/meminfo    ro   "Free: N" then one "PID: p Mem: m" line per process
//   <gpu>/<container>/id         ro   the container id
// <gpu> is a GPU index written in decimal without leading zeros ("0", "1", ...). A container whose
// id is also a GPU file's name (IsControlTreeGpuFileName) cannot appear: the file wins, so the
// daemon should refuse such ids when containers register. Every file reads
// as text ending in a newline, as /proc files do. Sizes read as byte counts, or "unlimited" where
// no limit is set. A size written to the tree may be a plain byte count ("4294967296") or a size
// with a unit ("4GiB", "512MiB"; see core/bytes.h). Unlike TESSERA_MEM_LIMIT, a bare number here
// means bytes, as in cGPU's files. Writing "unlimited" is not accepted: the tree never removes a
// limit.
//
// Access: a write succeeds only when the door says the caller may write (root or the configured
// writer group; WriteOptions::writer_may_write). A container-scoped view (ScopedTo) lists and
// reads `version`, and on each GPU where that container exists `free_weight` and the container's
// own folder; it writes nothing and everything else is "no such file" to it.
//
// Every refused write returns an error in Tessera's form, `PATH="value": reason; expected what`,
// and calls no setter, so the node is unchanged. The checks run against one snapshot; two writers
// may race past them, so NodeControl's setters enforce the same invariants again under the
// daemon's lock (they return Status for that) and the tree passes their refusals on.
//
// A ControlTree is a small value (a pointer and an optional scope): copy it freely. It is as
// thread-safe as its NodeControl.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/arbiter_policy.h"
#include "core/bytes.h"
#include "core/percent.h"
#include "core/result.h"

namespace tessera::ctl {

// One process of a container on one GPU.
struct ProcessMemory {
  int64_t pid = 0;  // as the daemon reports it (the pid the container sees)
  Bytes used;       // device memory the process holds on this GPU

  friend bool operator==(const ProcessMemory&, const ProcessMemory&) = default;
};

// One container as seen on one GPU.
struct ContainerState {
  std::string id;                // a valid container id (core/container_id.h)
  int weight = 1;                // 1..max_inst of its GPU
  bool high_priority = false;    // the `highprio` flag
  std::optional<Bytes> memsize;  // the memory limit on this GPU; nullopt: unlimited
  Bytes used;                    // what the container holds on this GPU now
  std::vector<ProcessMemory> processes;

  friend bool operator==(const ContainerState&, const ContainerState&) = default;
};

// One GPU and its containers.
struct GpuState {
  int index = 0;  // the `<gpu>` path component
  ArbiterPolicy policy = ArbiterPolicy::kFair;
  int max_inst = 16;
  Percent prio_ratio;
  int free_weight = 16;  // as the daemon computes it: max_inst minus the weights
  Bytes memory_free;     // the device's free memory (an unlimited container's meminfo Free)
  std::vector<ContainerState> containers;  // any order; ids unique per GPU

  friend bool operator==(const GpuState&, const GpuState&) = default;
};

// Everything the tree shows, read at one instant.
struct NodeSnapshot {
  std::string version;                   // one line, e.g. "tessera 0.1.0"
  std::optional<Bytes> default_memsize;  // nullopt: containers without a limit stay unlimited
  std::vector<GpuState> gpus;            // any order; indices unique

  friend bool operator==(const NodeSnapshot&, const NodeSnapshot&) = default;
};

// The daemon's side of the control tree: what the node looks like now, and how to change it.
// Abstract so that the tree is one library the daemon, the CLI and the tests share; the real
// implementation is tesserad's, over its registry and arbiters.
//
// Contract for implementations: Snapshot() is consistent (one instant) and safe from any thread.
// Each setter applies its change atomically or not at all, re-checks the rules the tree checked
// (it may be called with a value that was valid a moment ago), and on refusal returns an error
// that names the path-like target, the value and what is allowed. `gpu` is a GPU index and
// `container` a container id, both of which existed in a recent snapshot; a setter returns an
// error when they no longer do.
class NodeControl {
 public:
  virtual ~NodeControl() = default;

  virtual NodeSnapshot Snapshot() const = 0;

  virtual Status SetDefaultMemsize(Bytes memsize) = 0;
  virtual Status SetPolicy(int gpu, ArbiterPolicy policy) = 0;
  virtual Status SetMaxInst(int gpu, int max_inst) = 0;
  virtual Status SetPrioRatio(int gpu, Percent prio_ratio) = 0;
  virtual Status SetWeight(int gpu, std::string_view container, int weight) = 0;
  // `force`: the limit may be set below what the container uses now (its later allocations fail
  // until it is back under; nothing already allocated is taken away).
  virtual Status SetMemsize(int gpu, std::string_view container, Bytes memsize, bool force) = 0;
  virtual Status SetHighPriority(int gpu, std::string_view container, bool high_priority) = 0;
};

// One name in a folder of the tree.
struct Entry {
  std::string name;
  bool is_directory = false;
  bool writable = false;  // in this view: always false in a scoped view

  friend bool operator==(const Entry&, const Entry&) = default;
};

// How a door writes. Both default to the safe side.
struct WriteOptions {
  bool force = false;             // memsize may go below the container's current usage
  bool writer_may_write = false;  // the caller is root or in the writer group (the door decides)
};

// The longest value a write may carry, in bytes (trailing whitespace included); longer is refused.
inline constexpr size_t kMaxWriteLength = 64;
// The longest path accepted, in bytes.
inline constexpr size_t kMaxPathLength = 256;

// True for "policy", "max_inst", "free_weight" and "prio_ratio": names a container id must not
// take, since they would hide its folder in `<gpu>/`.
bool IsControlTreeGpuFileName(std::string_view name);

class ControlTree {
 public:
  // The full view of `node`, which must outlive the tree and every copy and scoped view of it.
  explicit ControlTree(NodeControl* node);

  // The read-only view of container `container_id` (see the header comment).
  ControlTree ScopedTo(std::string container_id) const;
  // The scope of this view, or nullopt for the full view.
  const std::optional<std::string>& scope() const { return scope_; }

  // What `path` is (a folder or a file, writable or not); its name is the last component ("" for
  // the root). Errors: no such file or folder, or a malformed path.
  Result<Entry> Stat(std::string_view path) const;
  // The entries of folder `path` ("" or "/" is the root): its files in the order of the table
  // above, then GPU folders by index, then container folders by id.
  Result<std::vector<Entry>> List(std::string_view path) const;
  // The text of file `path`, ending in a newline.
  Result<std::string> Read(std::string_view path) const;
  // Parses `text` (surrounding whitespace ignored, e.g. the newline `echo` adds) and applies it
  // through NodeControl. Refused, with nothing changed, when the path is not a writable file of
  // this view, the caller may not write, or the value is malformed or breaks a rule.
  Status Write(std::string_view path, std::string_view text, const WriteOptions& options) const;

 private:
  ControlTree(NodeControl* node, std::optional<std::string> scope);

  NodeControl* node_;
  std::optional<std::string> scope_;
};

}  // namespace tessera::ctl
