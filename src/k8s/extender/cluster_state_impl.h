// ClusterState::Impl (cluster_state.h): the extender's state under one mutex, and its parts by
// name, each defined in its own file:
//   cluster_build.cc    the placement Cluster built from the node records, the node-name index
//                       kube-scheduler's lists are read through, the policies and their workload
//   cluster_holds.cc    the holds on the books (observed, reserved, binding): applied to the
//                       Cluster, dropped, retried, swept; the bind plan of a hold
//   cluster_decide.cc   the decisions: which nodes fit a pod, the engine's choice, the reasons
//   cluster_drains.cc   the nodes kept draining for pods that wait for a node to empty
// The records it keeps are cluster_records.h; the public verbs (cluster_state.cc) take the mutex
// and call these. Internal to the extender; no I/O.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "k8s/extender/cluster_records.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/fit.h"
#include "placement/fit.h"
#include "placement/policy.h"
#include "placement/reservation.h"

namespace tessera::extender {

struct ClusterState::Impl {
  explicit Impl(StateOptions o)
      : options(std::move(o)),
        clock(options.clock ? *options.clock : RealClock()),
        drains(std::max(0.0, std::chrono::duration<double>(options.hold_after).count())) {
    workload = options.workload ? options.workload : std::make_shared<pl::TargetWorkload>();
  }

  // The requests of one pod (k8s/fit.h).
  using PodRequests = k8s::PodPlacement;
  // The engine's choice: a node and, per request, where it goes (its GPUs; a MIG request's
  // instance too).
  struct Choice {
    int node = -1;
    std::vector<pl::Assignment> where;
  };

  StateOptions options;
  const Clock& clock;  // options.clock, or the host's
  std::shared_ptr<const pl::TargetWorkload> workload;
  std::optional<Nanos> learned_at;
  bool pods_changed = true;
  bool pods_listed = false;  // a pod list has come in

  mutable std::mutex mu;
  std::map<std::string, NodeRec> nodes;           // by name: the placement order
  std::unordered_map<std::string, PodRec> pods;   // by uid, from the API server
  std::unordered_map<std::string, PodRec> asked;  // by uid, from the latest filter/prioritize
  std::unordered_map<std::string, Hold> holds;    // by uid
  std::set<std::string> reserved;                 // uids with a reserved hold
  std::set<std::string> conflicted;               // uids whose hold did not all fit
  // Pending pods kube-scheduler marked unschedulable (uid -> when this state first saw it so
  // marked, on `clock`, in seconds), and the nodes drained for them.
  std::map<std::string, double> unschedulable;
  uint64_t unschedulable_version = 0;  // bumped when `unschedulable` changes
  pl::Reservations drains;
  uint64_t drains_changes =
      ~uint64_t{0};  // `changes` and `unschedulable_version` it was planned at
  uint64_t drains_waiting = ~uint64_t{0};
  std::unordered_map<std::string, uint64_t> drain_keys;  // uid -> the plan's key of the pod
  std::vector<std::string> drain_pods;                   // key - 1 -> ns/name, for reasons
  // Pods whose latest filter found no node, by uid: the waiting pods /inspect lists, and the
  // demand stranded GPUs are judged by. Dropped when a filter finds the pod a node, and when it
  // is bound, ends or is deleted.
  struct Waiting {
    std::string pod;  // ns/name
    std::string asks;
    std::string reason;
    std::optional<Nanos> since;  // its first filter that found no node
    k8s::PodDemand demand;
  };
  std::unordered_map<std::string, Waiting> waiting;
  // When each MIG GPU (by UUID) was last planned for a re-cut (PlanMigRecuts).
  std::unordered_map<std::string, Nanos> recut_at;

  bool dirty = true;
  uint64_t epoch = 0;
  std::unique_ptr<pl::Cluster> cluster;
  std::vector<const NodeRec*> by_index;
  // What a filter asks of every node, by index, packed: reading it from the NodeRecs (one cache
  // miss each, scattered over the map) was 40 % of a filter at 5000 nodes.
  enum class Gate : uint8_t { kOpen, kProblem, kNoInventory };
  struct NodeQuick {
    Gate gate = Gate::kOpen;
    k8s::PlacementPolicy policy = k8s::PlacementPolicy::kTessera;
  };
  std::vector<NodeQuick> quick;
  std::unordered_map<std::string, int> index_of;
  std::vector<std::string> model_names;  // placement model id -> the GPU's NVML name
  std::map<k8s::PlacementPolicy, std::unique_ptr<pl::Policy>> policies;

  uint64_t next_seq = 1;
  uint64_t changes = 0;  // bumped by every change of the placement picture
  // The node names of the last verb, back to back, and their indices (kube-scheduler asks about
  // the same list, in the same order, pod after pod): comparing one run of bytes is cheaper than
  // hashing every name, or than comparing names each in a heap block of its own.
  std::string last_names;
  std::vector<uint32_t> last_ends;  // where each name ends in last_names
  std::vector<int> last_indices;
  uint64_t last_names_epoch = 0;
  // The index of every name in `names` (-1: unknown), through the cache above. The reference
  // stays good until the next call.
  const std::vector<int>& IndicesOf(std::span<const std::string_view> names);
  // `nodes` (indices) in index order, each once: a pass over marks, not a sort.
  std::vector<int> SortedUnique(const std::vector<int>& nodes);
  // The last filter's answer, reused by the prioritize that follows it when nothing changed in
  // between and it asks about exactly the nodes that passed (kube-scheduler's usual sequence).
  struct LastFilter {
    std::string uid;
    uint64_t changes = 0;
    uint64_t names_hash = 0;
    size_t count = 0;
    std::vector<int64_t> scores;  // per fitting node, in the order answered
  } last_filter;
  uint64_t rebuilds = 0;
  uint64_t expired = 0;
  uint64_t conflicts = 0;

  // -- building ---------------------------------------------------------------------------------

  void EnsureBuilt();

  // A mig node's GPUs as a placement node: the MIG model (its memory from an instance's, which
  // placement shares out in proportion to memory slices), and each GPU's layout as the node has it.
  void AddMigGpus(NodeRec& rec, pl::ModelTable& models, pl::NodeSpec* s);

  void EnsurePolicies();

  // The target workload from the pods seen: each pod's request as the engine would place it.
  void Learn();

  // -- holds ------------------------------------------------------------------------------------

  // The placement share of one GPU part on `rec`'s GPU: whole, memory-only or compute+memory.
  static pl::Request PartRequest(const NodeRec& rec, const GpuPart& part);

  void Place(Hold& h, const pl::Request& r, const pl::Assignment& a, const std::string& what);

  void Apply(Hold& h);

  // One MIG device of a hold on mig node `rec` (placement node `n`): its instance, taken.
  void ApplyMigPart(Hold& h, const NodeRec& rec, int n, const std::string& container,
                    const GpuPart& part);

  void Unapply(Hold& h);

  void Drop(const std::string& uid);

  // Applies again the holds on `node` that did not fit when they came (room may have been made).
  void Retry(const std::string& node);

  // Replaces `uid`'s hold by `h` (a new one is applied unless the cluster is about to be rebuilt).
  // What the API server reports outranks this extender's reservations: an observed hold that does
  // not fit takes the room of reservations on its node (those pods decide again at their bind).
  void Put(const std::string& uid, Hold h);

  // What a pod the API server reported holds, if anything.
  std::optional<Hold> Observed(const PodRec& rec) const;

  void Observe(const PodRec& rec);

  void SweepReservations();

  // -- decisions --------------------------------------------------------------------------------

  pl::ModelSet Allowed(const k8s::PodDemand& d) const;

  pl::Policy& PolicyOf(int node) { return *policies.at(quick[static_cast<size_t>(node)].policy); }

  // Where `r` goes on `node` (which it fits) by the node's policy: its GPUs; for a MIG request
  // the instance placement/mig.h chooses, as every policy does.
  pl::Assignment On(int node, const pl::Request& r) {
    if (r.mig()) {
      auto a = pl::MigAssignmentOn(*cluster, node, r, workload->mig_demand());
      return a ? *a : pl::Assignment{node, 0};
    }
    return pl::Assignment{node, PolicyOf(node).GpusOn(*cluster, node, r)};
  }

  // Places every request on `node` in turn (the primary where given, else chosen by the node's
  // policy), fills `where`, and takes it all back. The first rule that fails, or kFits.
  pl::FitResult TryAll(const PodRequests& p, int node, std::optional<pl::Assignment> primary,
                       std::vector<pl::Assignment>* where);

  pl::FitResult FitsAll(const PodRequests& p, int node) {
    if (p.requests.size() == 1) return cluster->Fits(node, p.requests[0]);
    return TryAll(p, node, std::nullopt, nullptr);
  }

  // The engine's choice among `candidates` (sorted node indices that fit every request); with
  // `scores`, the 0..10 extender score of each candidate.
  std::optional<Choice> Choose(const PodRequests& p, const std::vector<int>& candidates,
                               std::vector<int64_t>* scores);

  // The hold of `rec`'s pod for choice `c`, as the assignment annotation will state it.
  Hold MakeHold(const PodRec& rec, const PodRequests& p, const Choice& c, HoldKind kind) const;

  // What stops a pod at node `n`: the node's own state (no usable inventory) or the first
  // placement rule that fails; fits() when nothing does. No strings: a filter checks every node.
  struct Verdict {
    Gate gate = Gate::kOpen;
    pl::FitResult fit = pl::FitResult::kFits;
    bool fits() const { return gate == Gate::kOpen && fit == pl::FitResult::kFits; }
  };
  Verdict Check(const PodRec& rec, const PodRequests& p, int n) {
    const Gate gate = quick[static_cast<size_t>(n)].gate;
    if (rec.demand.wants_gpu() && gate != Gate::kOpen) return {gate, pl::FitResult::kFits};
    return {Gate::kOpen, FitsAll(p, n)};
  }
  static std::string_view KindOf(Verdict v) {
    if (v.gate == Gate::kProblem) return "node-invalid";
    if (v.gate == Gate::kNoInventory) return "no-gpus";
    return FitKind(v.fit);
  }
  // The failure `v` (not fits()) as kube-scheduler shows it.
  NodeFailure Describe(const PodRec& rec, int n, Verdict v) const;
  // The reason a pod cannot go to node `n` (nullopt: it fits every request).
  std::optional<NodeFailure> WhyNot(const PodRec& rec, const PodRequests& p, int n) {
    const Verdict v = Check(rec, p, n);
    if (v.fits()) return std::nullopt;
    return Describe(rec, n, v);
  }

  static std::string_view FitKind(pl::FitResult fit);

  static bool Unresolvable(pl::FitResult fit) {
    return fit == pl::FitResult::kModel || pl::IsShapeFailure(fit);
  }

  // Why a MIG pod does not fit mig node `node` (placement node `n`), naming the profile and what
  // the node has.
  std::string MigReason(const PodRec& rec, const NodeRec& node, int n, pl::FitResult) const;

  std::string Reason(const PodRec& rec, const NodeRec& node, int n, pl::FitResult fit) const;

  // The pod as asked at a verb: read it, release its own reservation (or the stale assumed
  // decision of an unbound pod being placed again), and remember it for the bind.
  Result<PodRec> TakeAsked(const Json& pod);

  void Reserve(const PodRec& rec, const PodRequests& p, const Choice& c) {
    Hold h = MakeHold(rec, p, c, HoldKind::kReserved);
    h.deadline = clock.Now() + options.reservation_ttl;
    Put(rec.uid, std::move(h));
  }

  void Prepare() {
    EnsureBuilt();
    EnsurePolicies();
    SweepReservations();
    EnsureDrains();
  }

  // -- nodes drained for waiting pods -------------------------------------------------------------

  void NoteWaiting(const PodRec& rec);

  uint64_t DrainKey(const PodRec& rec) {
    auto [it, fresh] = drain_keys.try_emplace(rec.uid, drain_pods.size() + 1);
    if (fresh) drain_pods.push_back(rec.key);
    return it->second;
  }

  // Plans the drained nodes again when the cluster or the waiting pods changed, or the clock
  // reached the plan's next_change_s (the plan is a function of these, so planning more often
  // than needed gives the same plan).
  void EnsureDrains();

  // Whether `rec`'s pod (asking `primary`) may go to node `n`, and if not who holds it.
  bool DrainAllows(const PodRec& rec, const pl::Request& primary, int n);

  NodeFailure DrainFailure(int n) const;

  void SeedSeq(uint64_t seen) { next_seq = std::max(next_seq, seen + 1); }

  // The pod as last asked about at a verb, else as the API server reported it.
  const PodRec* Asked(const std::string& uid) const {
    if (auto it = asked.find(uid); it != asked.end()) return &it->second;
    if (auto it = pods.find(uid); it != pods.end()) return &it->second;
    return nullptr;
  }

  // The bind plan of binding hold `h`, with a seq above every commit on its node.
  BindPlan Plan(const PodRec& rec, Hold& h);
};

}  // namespace tessera::extender
