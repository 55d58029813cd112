// ClusterState: the extender's picture of the cluster and every decision it makes on it.
//
// It holds the Nodes and Pods the API server reported (fed by the informer: Upsert/Remove/Replace)
// and, built from them, a src/placement Cluster: one placement node per Node (sorted by name, so
// replicas and restarts agree on the order that breaks ties), with the node's allocatable CPU and
// memory and its healthy GPUs from the device plugin's `tessera.io/gpu-inventory`. What each pod
// holds is a Hold on that Cluster:
//   observed   read from the API server: a bound, non-terminal pod holds its CPU and memory and,
//              from its `tessera.io/assignment`, its GPU shares; an unbound pod whose assignment
//              is `assumed` (another replica's bind in flight, or a bind a crash cut short) holds
//              its shares on the assignment's node until the scheduler places it again;
//   reserved   this extender's choice at filter/prioritize time, so the next pod's decision, which
//              kube-scheduler may ask for before this one's bind arrives, sees it; it lapses after
//              `reservation_ttl` without a bind, and the pod's next filter replaces it;
//   binding    between PrepareBind and the API server confirming the bound pod.
// A pod's holds carry when it was first held, on the state's clock: the start its shares are
// placed with, from which the engine tells nodes of long-running pods from nodes of young ones.
// A pod that is deleted, Succeeded or Failed releases everything at once; a failed bind releases
// the binding hold (FinishBind). No lock survives a restart: the new process rebuilds every
// observed hold from the pods' annotations.
//
// Pending pods that kube-scheduler marked unschedulable (PodScheduled False, Unschedulable) and
// that ask for two GPUs or more, or one GPU with the CPU of two, or that few GPUs can serve
// (Reservations::Holds), each keep a node draining for them, oldest (by creation time) first, as
// `tessera sim --replay` plans them (placement/reservation.h): the filter leaves that node to its
// holder. The plan is a function of what the API server shows, so a restarted extender makes the
// same one.
//
// Decisions run the same placement code as `tessera sim`: the node's policy label
// (`tessera.io/gpu.placement`: tessera, binpack, spread) picks the src/placement Policy, which
// chooses among the candidate nodes (Policy::SelectAmong) and the GPUs on a node (GpusOn).
// Candidates with different policies are ranked by their own policy; each group's best is a
// contender and the first of them in node order wins. A pod's CPU and memory travel with its
// first GPU container's request (its only one, for a one-container pod, exactly as the trace's
// requests); further containers, init containers included (a conservative choice: they are
// reserved as if they ran beside the others), go on the chosen node one after another.
//
// Thread-safe: one mutex around everything; decisions take microseconds to a few milliseconds.
// Knows Kubernetes objects only through src/k8s's views; does no I/O (the binder writes).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "k8s/annotations.h"
#include "k8s/extender/commit_log.h"
#include "k8s/objects.h"
#include "k8s/pod_demand.h"
#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/policy.h"
#include "placement/reservation.h"

namespace tessera::extender {

// What a filter answers as passing: the one node the engine chose (the pod's GPUs reserved there),
// or every node that fits. With `chosen` kube-scheduler has one node left, so it skips
// prioritize and binds there; the nodes that fit but were not chosen are in neither failure map.
// With `fitting` kube-scheduler scores them all, the chosen one 10 (prioritize), and may blend in
// its own score plugins (the shipped configuration disables them, so both land pods alike).
enum class FilterAnswer { kChosen, kFitting };

struct StateOptions {
  // The target workload of the tessera policy (FGD's M). Null: learned from the pods the
  // extender sees (their shapes), refreshed at most every `relearn_interval`.
  std::shared_ptr<const placement::TargetWorkload> workload;
  std::chrono::milliseconds relearn_interval{60000};
  // How long a filter/prioritize reservation waits for its bind.
  std::chrono::milliseconds reservation_ttl{30000};
  FilterAnswer filter_answer = FilterAnswer::kChosen;
  // Keep a node draining for each pending pod that asks for two GPUs or more (or one GPU with the
  // CPU of two, or that few GPUs serve: Reservations::Holds) and that kube-scheduler marked
  // unschedulable (placement/reservation.h), on the nodes whose policy keeps such reservations
  // (tessera), once the pod has waited `hold_after` since this state first saw it marked
  // unschedulable.
  bool reserve_for_waiting = true;
  std::chrono::milliseconds hold_after{
      static_cast<int64_t>(placement::Reservations::kHoldAfterS * 1000)};
  // The least time between two re-cuts of one MIG GPU (PlanMigRecuts).
  std::chrono::milliseconds mig_recut_interval{300000};
  // Where reservation deadlines, relearning and waiting times read the time; it must outlive the
  // state. Null: the host's steady clock (RealClock()).
  const Clock* clock = nullptr;
};

// Why a node does not take the pod; `unresolvable` when preempting pods there would not help.
// `kind` is the reason's short name for metrics: cpu, memory, gpu-model, mode, gpu-count,
// gpu-core, gpu-mem, no-gpus, node-invalid, node-unknown, pod-invalid or reserved (kept draining
// for a waiting multi-GPU pod).
struct NodeFailure {
  std::string node;
  std::string reason;
  bool unresolvable = false;
  std::string kind;
};

struct FilterOutcome {
  std::vector<std::string> fits;  // in the order asked; with FilterAnswer::kChosen, the choice
  // Why the others do not fit, in the order asked; with FilterAnswer::kChosen only when no node
  // was chosen (kube-scheduler reads the reasons only then).
  std::vector<NodeFailure> failed;
  std::map<std::string, uint64_t> rejected;  // nodes that do not fit, by kind: always counted
};

struct NodePriority {
  std::string node;
  int64_t score = 0;  // 0..10: 10 for the node the engine chose, less for the others
};

// A node kube-scheduler's preemption proposes for a pod and the pods it would evict there (their
// UIDs), and the PodDisruptionBudget violations that costs; the preempt verb's answer has the same
// form.
struct PreemptCandidate {
  std::string node;
  std::vector<std::string> victims;  // pod UIDs
  int64_t pdb_violations = 0;
};

// A MIG GPU the extender asks its node to cut again (docs/contracts.md, tessera.io/mig-recut).
struct MigRecut {
  std::string node;
  std::string gpu;     // the GPU's UUID
  std::string layout;  // profile counts as `tessera mig apply` takes them: "1g.10gb=7"
  std::string pod;     // ns/name of the waiting pod it is for
  bool operator==(const MigRecut&) const = default;
};

// A decision ready to be written: the assignment annotation and the pod's version it was made on.
struct BindPlan {
  k8s::Assignment assignment;        // containers empty for a pod without Tessera resources
  std::string pod_resource_version;  // as last seen (empty: unknown)
};

// What a commit on a node is conditioned on: the node's resourceVersion and commit log as last
// seen, and the newest seq of that log whose pod this extender is known to have read (every
// commit up to it is in the holds). A commit needs `verified_seq == log.seq`.
struct NodeCommitView {
  bool known = false;
  std::string resource_version;
  CommitLog log;
  bool log_readable = true;  // false: unreadable, so the pods must be listed before a commit
  uint64_t verified_seq = 0;
};

// What the API server last said of a pod (through the watch): what decides whether a verb may act
// on it.
struct PodFacts {
  std::string key;  // ns/name
  std::string node_name;
  std::string scheduler_name;
  bool terminal = false;
  bool deleting = false;
};

// Counters for /metrics.
struct StateStats {
  size_t nodes = 0;
  size_t pods = 0;
  size_t holds_observed = 0;
  size_t holds_reserved = 0;
  size_t holds_binding = 0;
  uint64_t rebuilds = 0;
  uint64_t reservations_expired = 0;
  uint64_t accounting_conflicts = 0;  // observed shares that did not fit their GPUs
  size_t pods_waiting = 0;            // pending pods kube-scheduler marked unschedulable
  size_t nodes_reserved = 0;          // nodes drained for waiting pods (reservation.h)
  int64_t gpu_milli_capacity = 0;
  int64_t gpu_milli_allocated = 0;
};

class ClusterState {
 public:
  explicit ClusterState(StateOptions options = {});
  ~ClusterState();
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // Informer side: objects as the API server serves them. A malformed object is logged and kept
  // out (UpsertPod/UpsertNode return the reason); everything else carries on.
  Status UpsertNode(const k8s::Json& node);
  void RemoveNode(const std::string& name);
  Status UpsertPod(const k8s::Json& pod);
  void RemovePod(const std::string& uid);
  // A fresh list replaces everything observed (reservations and binds in flight stay). At start,
  // list Nodes before Pods: a node's commit log as first listed counts as verified only because
  // every pod committed up to it is in the pod list taken after it.
  void ReplaceNodes(const std::vector<k8s::Json>& nodes);
  void ReplacePods(const std::vector<k8s::Json>& pods);
  // An object older than the one held (by numeric resourceVersion) is ignored.

  // The verbs. `pod` is the v1.Pod kube-scheduler sent; `nodes` the names it asks about.
  // Filter reserves the pod's share on the engine's choice; Prioritize scores and moves the
  // reservation to its choice among `nodes`.
  Result<FilterOutcome> Filter(const k8s::Json& pod, std::span<const std::string_view> nodes);
  Result<std::vector<NodePriority>> Prioritize(const k8s::Json& pod,
                                               std::span<const std::string_view> nodes);
  Result<FilterOutcome> Filter(const k8s::Json& pod, std::span<const std::string> nodes);
  Result<std::vector<NodePriority>> Prioritize(const k8s::Json& pod,
                                               std::span<const std::string> nodes);
  // The preempt verb: of `proposed` (nodes and the victims kube-scheduler's own preemption chose
  // there), the nodes where evicting the victims frees what the pod needs under the engine's
  // placement, each with the victims that takes. kube-scheduler counts devices; the engine places
  // shares on particular GPUs (a 4 GiB share needs 4 GiB on one GPU, not 2 on each of two), so its
  // victims may not be enough: then bound pods of the node of lower priority than the pod
  // (spec.priority), lowest first, are added until it fits, and those not needed are spared. A node
  // where even that does not free enough, or that the pod never fits (a shape the node cannot
  // take, its GPU model, an unusable inventory), is left out. kube-scheduler's victims are kept
  // whole: they are what its own filters need. Changes nothing.
  Result<std::vector<PreemptCandidate>> Preempt(const k8s::Json& pod,
                                                std::span<const PreemptCandidate> proposed);
  // Turns the pod's reservation on `node` (or, when it has none there, a fresh decision on that
  // node alone) into a binding hold and returns what to write. Fails, releasing nothing else,
  // when the pod is unknown or no longer fits there.
  Result<BindPlan> PrepareBind(const std::string& ns, const std::string& name,
                               const std::string& uid, const std::string& node);
  // The outcome of writing `plan`: on success the binding hold stays until the API server shows
  // the pod bound; on failure it is released at once.
  void FinishBind(const std::string& uid, const BindPlan& plan, bool committed);

  // The binder's side of a commit (binder.h): what the node's commit is conditioned on; that the
  // pods of its log up to `seq` are read in; a fresh decision for the pod on `node` after they
  // were (its seq above the node's log); and the node as the binder's own write left it.
  NodeCommitView CommitView(const std::string& node) const;
  void MarkVerified(const std::string& node, uint64_t seq);
  Result<BindPlan> Redecide(const std::string& uid, const std::string& node);
  // `base_seq`: the log's seq the commit was written over (verified by the binder before).
  void NoteCommit(const std::string& node, const std::string& resource_version,
                  const CommitLog& log, uint64_t base_seq);

  // The pod with `uid` as the API server last reported it; nullopt when the watch has not shown
  // it (or shows it deleted). A verb's own copy of a pod never counts here.
  std::optional<PodFacts> Observed(const std::string& uid) const;

  // The MIG GPUs to cut again now, for MIG pods whose latest filter found no node: for each such
  // pod (oldest first) whose profile has no free instance on any node that otherwise takes it,
  // one GPU of a node labelled tessera.io/mig.recut=true, of a model with that profile, whose
  // instances are all free (no pod holds, reserves or is binding any) and healthy, and that was
  // not planned for within `mig_recut_interval`; the new layout is the engine's re-cut
  // (placement::ChooseRecutLayout, for the workload the policies learn). A GPU is planned for at
  // most once per call and per interval; each GPU returned counts as cut from now.
  std::vector<MigRecut> PlanMigRecuts();
  // Forgets that GPU `gpu` (UUID) was planned for (its request could not be written), so a later
  // PlanMigRecuts may choose it again within the interval.
  void UnplanMigRecut(const std::string& gpu);

  // JSON for GET /inspect (every node) or /inspect/NODE (one; nullopt when unknown).
  std::optional<k8s::Json> Inspect(std::optional<std::string> node) const;
  StateStats Stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::extender
