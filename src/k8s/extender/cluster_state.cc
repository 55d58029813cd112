// The extender's cluster picture, its holds and its decisions (see cluster_state.h). No I/O.
#include "k8s/extender/cluster_state.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "core/bytes.h"
#include "core/text.h"
#include "k8s/fit.h"
#include "k8s/quantity.h"
#include "mig/profiles.h"
#include "placement/fit.h"
#include "placement/mig.h"
#include "placement/stranded.h"

namespace tessera::extender {

namespace pl = tessera::placement;
using k8s::Json;
using SteadyTime = std::chrono::steady_clock::time_point;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

int64_t CeilMib(int64_t bytes) { return (bytes + kMiB - 1) / kMiB; }

// A hash of a list of node names, to recognise the same list again.
template <typename Name>
uint64_t HashNames(std::span<const Name> names) {
  uint64_t h = 1469598103934665603ULL;
  for (const Name& n : names) {
    for (const char c : n) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
  }
  return h;
}

// Whether user pattern `pattern` (tessera.io/gpu-model) names model `model`: equal or contained,
// ignoring ASCII case ("A100" names "NVIDIA A100-SXM4-80GB").
bool ModelMatches(std::string_view model, std::string_view pattern) {
  if (pattern.size() > model.size()) return false;
  for (size_t i = 0; i + pattern.size() <= model.size(); ++i) {
    if (EqualsIgnoreCase(model.substr(i, pattern.size()), pattern)) return true;
  }
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Records

namespace {

// What the extender keeps of a Node: the placement inputs and the commit's condition.
struct NodeRec {
  std::string name;
  std::string resource_version;
  CommitLog log;              // kCommitLogAnnotation
  bool log_readable = true;   // false: the annotation is there but unreadable
  uint64_t verified_seq = 0;  // see NodeCommitView
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  k8s::PlacementPolicy policy = k8s::PlacementPolicy::kTessera;
  bool has_inventory = false;
  k8s::NodeMode mode = k8s::NodeMode::kCoreMem;
  std::vector<k8s::InventoryGpu> gpus;       // healthy, in index order: placement GPU i
  std::vector<k8s::InventoryGpu> unhealthy;  // out of placement; their holders keep them
  std::string problem;  // why no GPU pod can go here (bad inventory or label); empty when fine
  // A mig node: its GPUs (placement GPU i is mig_gpus[i]) and their healthy MIG devices, by start
  // slot (an unhealthy instance is out of placement, its slices unused).
  struct MigInstance {
    std::string uuid;
    std::string profile;
    int start = 0;
    uint64_t memory_bytes = 0;
  };
  struct MigGpu {
    std::string uuid;
    const mig::GpuModel* model = nullptr;
    std::vector<MigInstance> instances;
    mig::Layout Layout() const {
      mig::Layout l{model, {}};
      for (const MigInstance& i : instances)
        l.instances.push_back({*mig::FindProfile(*model, i.profile, ""), i.start});
      return l;
    }
  };
  std::vector<MigGpu> mig_gpus;
  // The GPU and the instance of MIG device `uuid` (healthy ones), or {-1, nullptr}.
  std::pair<int, const MigInstance*> MigDevice(std::string_view uuid) const {
    for (size_t g = 0; g < mig_gpus.size(); ++g) {
      for (const MigInstance& i : mig_gpus[g].instances) {
        if (i.uuid == uuid) return {static_cast<int>(g), &i};
      }
    }
    return {-1, nullptr};
  }

  bool SamePlacement(const NodeRec& o) const {
    return cpu_milli == o.cpu_milli && memory_mib == o.memory_mib && policy == o.policy &&
           has_inventory == o.has_inventory && mode == o.mode && gpus == o.gpus &&
           unhealthy == o.unhealthy && problem == o.problem;
  }
  int GpuIndex(std::string_view uuid) const {
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i].uuid == uuid) return static_cast<int>(i);
    }
    return -1;
  }
  bool KnowsGpu(std::string_view uuid) const {
    if (GpuIndex(uuid) >= 0) return true;
    for (const auto& g : unhealthy) {
      if (g.uuid == uuid) return true;
    }
    return false;
  }
};

// One GPU of a container's hold, as the assignment annotation states it.
struct GpuPart {
  std::string uuid;
  int core_percent = 0;
  int64_t mem_bytes = 0;
};
struct ContainerPart {
  std::string name;
  std::vector<GpuPart> gpus;
};

enum class HoldKind { kObserved, kReserved, kBinding };

std::string_view HoldKindName(HoldKind k, bool bound) {
  switch (k) {
    case HoldKind::kObserved:
      return bound ? "bound" : "assumed";
    case HoldKind::kReserved:
      return "reserved";
    case HoldKind::kBinding:
      return "binding";
  }
  return "?";
}

struct Hold {
  HoldKind kind = HoldKind::kObserved;
  std::string pod;  // ns/name
  std::string node;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<ContainerPart> containers;
  uint64_t seq = 0;
  bool bound = false;  // observed on a bound pod (else assumed)
  SteadyTime deadline{};
  // What was placed on the cluster of build `epoch` (nothing when the node is unknown there).
  uint64_t epoch = 0;
  std::vector<std::pair<pl::Request, pl::Assignment>> applied;
  std::string conflict;  // why some of it could not be placed; empty when all was

  bool SameShares(const Hold& o) const {
    if (node != o.node || cpu_milli != o.cpu_milli || memory_mib != o.memory_mib ||
        containers.size() != o.containers.size()) {
      return false;
    }
    for (size_t i = 0; i < containers.size(); ++i) {
      const auto& a = containers[i].gpus;
      const auto& b = o.containers[i].gpus;
      if (a.size() != b.size()) return false;
      for (size_t j = 0; j < a.size(); ++j) {
        if (a[j].uuid != b[j].uuid || a[j].core_percent != b[j].core_percent ||
            a[j].mem_bytes != b[j].mem_bytes) {
          return false;
        }
      }
    }
    return true;
  }
};

// What the extender keeps of a Pod.
struct PodRec {
  std::string uid;
  std::string key;  // ns/name
  std::string resource_version;
  std::string node_name;
  std::string scheduler_name;
  bool terminal = false;
  bool deleting = false;
  k8s::PodDemand demand;
  int64_t priority = 0;  // spec.priority (admission sets it from the PriorityClass; 0 without)
  std::optional<k8s::Assignment> assignment;
  std::string assignment_error;
  bool assumed = false;  // tessera.io/phase=assumed
  bool waiting = false;  // pending, and kube-scheduler found no node for it
  std::string created;   // metadata.creationTimestamp
};

// A resourceVersion as a number, or nullopt (they are opaque strings; every server we know counts).
std::optional<uint64_t> VersionNumber(const std::string& rv) {
  uint64_t v = 0;
  if (ParseDigits(rv, &v) != DigitsError::kNone) return std::nullopt;
  return v;
}

// True when `incoming` is older than `held` (a watch event that lags a direct read).
bool Older(const std::string& incoming, const std::string& held) {
  const auto a = VersionNumber(incoming);
  const auto b = VersionNumber(held);
  return a && b && *a < *b;
}

Result<PodRec> ReadPodRec(const Json& pod) {
  auto view = k8s::PodFromJson(pod);
  if (!view.ok()) return view.status();
  if (view->uid.empty()) {
    return Result<PodRec>::Error("pod " + view->Key() + ": has no metadata.uid");
  }
  PodRec rec;
  rec.uid = view->uid;
  rec.key = view->Key();
  rec.resource_version = view->resource_version;
  rec.node_name = view->node_name;
  rec.scheduler_name = view->scheduler_name;
  rec.terminal = view->Terminal();
  rec.waiting = view->unschedulable && view->node_name.empty() && !rec.terminal;
  rec.created = view->creation_timestamp;
  rec.deleting = view->deleting;
  rec.demand = k8s::ReadPodDemand(*view, pod);
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    if (auto p = spec->find("priority"); p != spec->end() && p->is_number_integer()) {
      rec.priority = p->get<int64_t>();
    }
  }
  if (const std::string* text = view->Annotation(k8s::kAssignmentAnnotation)) {
    auto a = k8s::ParseAssignment(*text);
    if (a.ok()) {
      rec.assignment = std::move(*a);
    } else {
      rec.assignment_error = "pod " + rec.key + ": " + a.error();
    }
  }
  if (const std::string* phase = view->Annotation(k8s::kPhaseAnnotation)) {
    rec.assumed = *phase == k8s::PhaseName(k8s::Phase::kAssumed);
  }
  return rec;
}

// A mig node's GPUs from its healthy MIG devices (the inventory parser checked each against the
// MIG tables and each GPU's devices against each other); GPUs not in MIG mode take no pod there.
template <typename Note>
void ReadMigGpus(NodeRec& rec, const std::string& who, Note note) {
  for (const k8s::InventoryGpu& g : rec.gpus) {
    if (!g.mig) continue;
    auto it = std::find_if(rec.mig_gpus.begin(), rec.mig_gpus.end(),
                           [&](const NodeRec::MigGpu& m) { return m.uuid == g.mig->gpu; });
    if (it == rec.mig_gpus.end())
      it = rec.mig_gpus.insert(rec.mig_gpus.end(), {g.mig->gpu, nullptr, {}});
    it->model = *mig::FindGpuModel(g.mig->model);
    it->instances.push_back({g.uuid, g.mig->profile, g.mig->start, g.memory.count()});
  }
  for (NodeRec::MigGpu& m : rec.mig_gpus) {
    std::sort(m.instances.begin(), m.instances.end(),
              [](const auto& a, const auto& b) { return a.start < b.start; });
    if (m.model != rec.mig_gpus.front().model) {
      note(who + ": " + k8s::kInventoryAnnotation +
           " lists MIG devices of GPUs of different "
           "models (" +
           std::string(rec.mig_gpus.front().model->name) + " and " + std::string(m.model->name) +
           "); expected one model per node");
    }
  }
}

Result<NodeRec> ReadNodeRec(const Json& node) {
  auto view = k8s::NodeFromJson(node);
  if (!view.ok()) return view.status();
  NodeRec rec;
  rec.name = view->name;
  rec.resource_version = view->resource_version;
  const std::string who = "node " + rec.name;
  auto note = [&rec](std::string message) {
    if (rec.problem.empty()) rec.problem = std::move(message);
  };
  if (auto it = view->annotations.find(kCommitLogAnnotation); it != view->annotations.end()) {
    auto log = ParseCommitLog(it->second);
    if (log.ok()) {
      rec.log = std::move(*log);
    } else {
      rec.log_readable = false;  // the next commit there lists every pod first
    }
  }
  for (const auto& [resource, scale, target] :
       {std::tuple{"cpu", 3, &rec.cpu_milli}, std::tuple{"memory", 0, &rec.memory_mib}}) {
    auto it = view->allocatable.find(resource);
    if (it == view->allocatable.end()) continue;  // 0: nothing fits that asks for any
    const std::string input = who + " status.allocatable " + resource;
    auto q = k8s::Quantity::Parse(it->second, input);
    auto v = q.ok() ? q->Scaled(scale, input) : Result<int64_t>(q.status());
    if (!v.ok()) {
      note(v.error());
      continue;
    }
    *target = *v;
  }
  rec.memory_mib /= kMiB;
  auto policy = k8s::PlacementPolicyFromLabels(view->labels);
  if (policy.ok()) {
    rec.policy = *policy;
  } else {
    note(who + ": " + policy.error());
  }
  if (auto it = view->annotations.find(k8s::kInventoryAnnotation); it != view->annotations.end()) {
    auto inv = k8s::ParseGpuInventory(it->second);
    if (!inv.ok()) {
      note(who + ": " + inv.error());
    } else {
      rec.has_inventory = true;
      rec.mode = inv->mode;
      for (const k8s::InventoryGpu& g : inv->gpus) {
        (g.healthy ? rec.gpus : rec.unhealthy).push_back(g);
      }
      if (rec.mode == k8s::NodeMode::kMig) {
        ReadMigGpus(rec, who, note);
      } else {
        for (const auto& g : rec.gpus) {
          if (g.model != rec.gpus.front().model || g.memory != rec.gpus.front().memory) {
            note(who + ": " + k8s::kInventoryAnnotation +
                 " lists GPUs of different models or "
                 "sizes (\"" +
                 rec.gpus.front().model + "\" and \"" + g.model +
                 "\"); expected one model per node");
            break;
          }
        }
      }
      const size_t placed_gpus =
          rec.mode == k8s::NodeMode::kMig ? rec.mig_gpus.size() : rec.gpus.size();
      if (static_cast<int>(placed_gpus) > pl::kMaxGpusPerNode) {
        note(who + ": " + std::to_string(placed_gpus) + " healthy GPUs; the extender places " +
             "on nodes of at most " + std::to_string(pl::kMaxGpusPerNode));
      }
    }
  }
  if (!rec.problem.empty()) {
    rec.gpus.clear();
    rec.mig_gpus.clear();
  }
  return rec;
}

// What a pod asks, for people: "30% + 4 GiB", "2 GPUs", "2 x (10% + 2 GiB)", "MIG 3g.40gb"; a
// pod of several asking containers names each.
std::string DescribeAsks(const k8s::PodDemand& d) {
  auto gib = [](int64_t mib) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), mib % 1024 == 0 ? "%.0f GiB" : "%.1f GiB", mib / 1024.0);
    return std::string(buf);
  };
  std::string out;
  for (const k8s::ContainerAsk& a : d.asks) {
    std::string one;
    if (!a.mig_profile.empty()) {
      one = "MIG " + a.mig_profile;
    } else if (a.whole()) {
      one = std::to_string(a.gpu_count) + (a.gpu_count == 1 ? " GPU" : " GPUs");
    } else {
      std::string share;
      if (a.core_percent > 0) share = std::to_string(a.core_percent) + "%";
      if (a.mem_mib > 0) share += (share.empty() ? "" : " + ") + gib(a.mem_mib);
      one = a.gpu_count > 1 ? std::to_string(a.gpu_count) + " x (" + share + ")" : share;
    }
    if (d.asks.size() > 1) one = a.name + ": " + one;
    out += (out.empty() ? "" : ", ") + one;
  }
  return out.empty() ? "no GPU" : out;
}

// kube-scheduler's summary of why no node took a pod (its FitError): "0/3 nodes are available:
// 2 tessera: Insufficient tessera.io/gpu-core, 1 tessera: node has fewer GPUs than ...", each
// reason with its count of nodes, sorted as strings.
std::string NoNodeSummary(size_t asked, const std::vector<NodeFailure>& failed) {
  std::map<std::string, size_t> counts;
  for (const NodeFailure& f : failed) ++counts[f.reason];
  std::vector<std::string> parts;
  for (const auto& [reason, count] : counts) parts.push_back(std::to_string(count) + " " + reason);
  std::sort(parts.begin(), parts.end());
  std::string out = "0/" + std::to_string(asked) + " nodes are available";
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? ": " : ", ") + parts[i];
  return out + ".";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Impl

struct ClusterState::Impl {
  explicit Impl(StateOptions o) : options(std::move(o)) {
    if (!options.clock) options.clock = [] { return std::chrono::steady_clock::now(); };
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
  std::shared_ptr<const pl::TargetWorkload> workload;
  SteadyTime learned_at{};
  bool pods_changed = true;
  bool pods_listed = false;  // a pod list has come in

  mutable std::mutex mu;
  std::map<std::string, NodeRec> nodes;            // by name: the placement order
  std::unordered_map<std::string, PodRec> pods;    // by uid, from the API server
  std::unordered_map<std::string, PodRec> asked;   // by uid, from the latest filter/prioritize
  std::unordered_map<std::string, Hold> holds;     // by uid
  std::set<std::string> reserved;                  // uids with a reserved hold
  std::set<std::string> conflicted;                // uids whose hold did not all fit
  // Pending pods kube-scheduler marked unschedulable (uids), and the nodes drained for them.
  std::set<std::string> unschedulable;
  uint64_t unschedulable_version = 0;  // bumped when `unschedulable` changes
  pl::Reservations drains;
  uint64_t drains_changes = ~uint64_t{0};  // `changes` and `unschedulable_version` it was planned at
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
    SteadyTime since{};  // its first filter that found no node
    k8s::PodDemand demand;
  };
  std::unordered_map<std::string, Waiting> waiting;

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
  const std::vector<int>& IndicesOf(std::span<const std::string_view> names) {
    bool same = last_names_epoch == epoch && last_ends.size() == names.size();
    for (size_t i = 0, start = 0; same && i < names.size(); start = last_ends[i], ++i) {
      same = names[i] == std::string_view(last_names).substr(start, last_ends[i] - start);
    }
    if (same) return last_indices;
    last_names.clear();
    last_ends.clear();
    last_indices.clear();
    for (const std::string_view name : names) {
      last_names.append(name);
      last_ends.push_back(static_cast<uint32_t>(last_names.size()));
      auto it = index_of.find(std::string(name));
      last_indices.push_back(it == index_of.end() ? -1 : it->second);
    }
    last_names_epoch = epoch;
    return last_indices;
  }
  // `nodes` (indices) in index order, each once: a pass over marks, not a sort.
  std::vector<int> SortedUnique(const std::vector<int>& nodes) {
    if (std::is_sorted(nodes.begin(), nodes.end()) &&
        std::adjacent_find(nodes.begin(), nodes.end()) == nodes.end()) {
      return nodes;
    }
    std::vector<uint8_t> marks(by_index.size(), 0);
    for (int n : nodes) marks[static_cast<size_t>(n)] = 1;
    std::vector<int> out;
    out.reserve(nodes.size());
    for (size_t n = 0; n < marks.size(); ++n) {
      if (marks[n] != 0) out.push_back(static_cast<int>(n));
    }
    return out;
  }
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

  void EnsureBuilt() {
    if (!dirty && cluster) return;
    dirty = false;
    ++changes;
    ++epoch;
    ++rebuilds;
    pl::ModelTable models;
    model_names.clear();
    std::vector<pl::NodeSpec> specs;
    specs.reserve(nodes.size());
    by_index.clear();
    index_of.clear();
    for (auto& [name, rec] : nodes) {
      pl::NodeSpec s;
      s.name = name;
      s.cpu_milli = rec.cpu_milli;
      s.memory_mib = rec.memory_mib;
      s.mode = k8s::PlacementModeOf(rec.mode);
      s.max_gpus_per_request = k8s::MaxGpusPerRequest(rec.mode);
      if (rec.mode == k8s::NodeMode::kMig) {
        AddMigGpus(rec, models, &s);
      } else if (!rec.gpus.empty()) {
        const int64_t mib = static_cast<int64_t>(rec.gpus.front().memory.count()) / kMiB;
        const std::string key = rec.gpus.front().model + "/" + std::to_string(mib);
        auto id = models.Intern(key, std::max<int64_t>(mib, 1));
        if (id.ok()) {
          if (*id == static_cast<int>(model_names.size())) model_names.push_back(rec.gpus.front().model);
          s.model = *id;
          s.gpu_count = static_cast<int>(rec.gpus.size());
        } else {
          rec.problem = "node " + name + ": " + id.error();
          rec.gpus.clear();
        }
      }
      index_of[name] = static_cast<int>(specs.size());
      by_index.push_back(&rec);
      specs.push_back(std::move(s));
    }
    cluster = std::make_unique<pl::Cluster>(std::move(models), std::move(specs));
    quick.clear();
    for (const NodeRec* rec : by_index) {
      const Gate gate = !rec->problem.empty() ? Gate::kProblem
                        : !rec->has_inventory ? Gate::kNoInventory
                                              : Gate::kOpen;
      quick.push_back({gate, rec->policy});
    }
    // Observed holds first, oldest decision first, so that if the books are over-committed the
    // newest decision is the one that does not fit; then ours.
    std::vector<Hold*> order;
    for (auto& [uid, h] : holds) order.push_back(&h);
    std::stable_sort(order.begin(), order.end(), [](const Hold* a, const Hold* b) {
      auto rank = [](const Hold* h) { return h->kind == HoldKind::kObserved ? (h->bound ? 0 : 1) : 2; };
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      if (a->seq != b->seq) return a->seq < b->seq;
      return a->pod < b->pod;
    });
    conflicted.clear();
    for (Hold* h : order) Apply(*h);
    for (auto& [uid, h] : holds) {
      if (!h.conflict.empty()) conflicted.insert(uid);
    }
  }

  // A mig node's GPUs as a placement node: the MIG model (its memory from an instance's, which
  // placement shares out in proportion to memory slices), and each GPU's layout as the node has it.
  void AddMigGpus(NodeRec& rec, pl::ModelTable& models, pl::NodeSpec* s) {
    if (rec.mig_gpus.empty() || rec.mig_gpus.front().instances.empty()) return;
    const NodeRec::MigGpu& first = rec.mig_gpus.front();
    const NodeRec::MigInstance& one = first.instances.front();
    const mig::MigProfile& profile = **mig::FindProfile(*first.model, one.profile, "");
    const int64_t mib = static_cast<int64_t>(one.memory_bytes) / kMiB * first.model->memory_slices /
                        profile.memory_slices;
    auto id = models.Intern("mig:" + std::string(first.model->name) + "/" + std::to_string(mib),
                            std::max<int64_t>(mib, 1));
    if (!id.ok()) {
      rec.problem = "node " + rec.name + ": " + id.error();
      rec.mig_gpus.clear();
      return;
    }
    if (*id == static_cast<int>(model_names.size())) model_names.push_back(rec.gpus.front().model);
    s->model = *id;
    s->gpu_count = static_cast<int>(rec.mig_gpus.size());
    for (const NodeRec::MigGpu& g : rec.mig_gpus) s->mig_gpus.push_back(g.Layout());
  }

  void EnsurePolicies() {
    if (!options.workload && (pods_changed || learned_at == SteadyTime{})) {
      const SteadyTime now = options.clock();
      if (learned_at == SteadyTime{} || now - learned_at >= options.relearn_interval) {
        Learn();
        learned_at = now;
        pods_changed = false;
        policies.clear();
        ++changes;
      }
    }
    if (!policies.empty()) return;
    for (auto p : {k8s::PlacementPolicy::kTessera, k8s::PlacementPolicy::kBinpack,
                   k8s::PlacementPolicy::kSpread}) {
      pl::PolicyOptions po;
      po.workload = workload.get();
      auto made = pl::MakePolicy(k8s::PlacementPolicyName(p), po);
      if (made.ok()) policies[p] = std::move(made.value());
    }
  }

  // The target workload from the pods seen: each pod's request as the engine would place it.
  void Learn() {
    std::vector<pl::Request> requests;
    for (const auto& [uid, rec] : pods) {
      if (rec.terminal || !rec.demand.demand_error.empty()) continue;
      auto reqs = k8s::PlacementRequestsOf(rec.demand, pl::ModelSet::Any());
      if (reqs.ok()) requests.push_back(reqs->requests[reqs->primary]);
    }
    workload = std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(requests));
  }

  // -- holds ------------------------------------------------------------------------------------

  // The placement share of one GPU part on `rec`'s GPU: whole, memory-only or compute+memory.
  static pl::Request PartRequest(const NodeRec& rec, const GpuPart& part) {
    pl::Request r;
    r.gpu_count = 1;
    const int64_t cap = static_cast<int64_t>(rec.gpus.front().memory.count());
    const bool whole = (part.core_percent >= 100 && rec.mode != k8s::NodeMode::kMem) ||
                       part.mem_bytes >= cap;
    if (whole) {
      r.gpu_milli = pl::kMilliPerGpu;
    } else if (rec.mode == k8s::NodeMode::kMem) {
      r.gpu_milli = 0;
      r.gpu_mem_mib = CeilMib(part.mem_bytes);
    } else {
      r.gpu_milli = part.core_percent * 10;
      r.gpu_mem_mib = CeilMib(part.mem_bytes);
    }
    return r;
  }

  void Place(Hold& h, const pl::Request& r, const pl::Assignment& a, const std::string& what) {
    Status s = cluster->Place(r, a);
    if (s.ok()) {
      h.applied.emplace_back(r, a);
      return;
    }
    ++conflicts;
    if (h.conflict.empty()) h.conflict = what + ": " + s.message();
  }

  void Apply(Hold& h) {
    ++changes;
    h.applied.clear();
    h.conflict.clear();
    h.epoch = epoch;
    auto it = index_of.find(h.node);
    if (it == index_of.end()) return;  // the node is gone: nothing to hold there
    const int n = it->second;
    const NodeRec& rec = *by_index[static_cast<size_t>(n)];
    if (h.cpu_milli > 0 || h.memory_mib > 0) {
      pl::Request cpu;
      cpu.cpu_milli = h.cpu_milli;
      cpu.memory_mib = h.memory_mib;
      Place(h, cpu, {n, 0}, "CPU and memory");
    }
    for (const ContainerPart& c : h.containers) {
      for (const GpuPart& part : c.gpus) {
        if (rec.mode == k8s::NodeMode::kMig) {
          ApplyMigPart(h, rec, n, c.name, part);
          continue;
        }
        const int g = rec.GpuIndex(part.uuid);
        if (g < 0) {
          if (!rec.KnowsGpu(part.uuid) && h.conflict.empty()) {
            h.conflict = "container " + c.name + ": GPU " + part.uuid + " is not on node " + h.node;
          }
          continue;  // an unhealthy GPU is out of placement anyway
        }
        Place(h, PartRequest(rec, part), {n, uint32_t{1} << g},
              "container " + c.name + " on GPU " + part.uuid);
      }
    }
  }

  // One MIG device of a hold on mig node `rec` (placement node `n`): its instance, taken.
  void ApplyMigPart(Hold& h, const NodeRec& rec, int n, const std::string& container,
                    const GpuPart& part) {
    const auto [g, instance] = rec.MigDevice(part.uuid);
    if (instance == nullptr) {
      if (!rec.KnowsGpu(part.uuid) && h.conflict.empty()) {
        h.conflict =
            "container " + container + ": MIG device " + part.uuid + " is not on node " + h.node;
      }
      return;  // an unhealthy instance is out of placement anyway
    }
    auto r = pl::RequestForMigProfile(0, 0, instance->profile);
    if (!r.ok()) return;
    Place(h, *r, {n, uint32_t{1} << g, instance->start},
          "container " + container + " on MIG device " + part.uuid);
  }

  void Unapply(Hold& h) {
    ++changes;
    if (h.epoch == epoch && cluster) {
      for (auto it = h.applied.rbegin(); it != h.applied.rend(); ++it) {
        (void)cluster->Remove(it->first, it->second);
      }
    }
    h.applied.clear();
  }

  void Drop(const std::string& uid) {
    auto it = holds.find(uid);
    if (it == holds.end()) return;
    const std::string node = it->second.node;
    const bool applied = !it->second.applied.empty();
    Unapply(it->second);
    holds.erase(it);
    reserved.erase(uid);
    conflicted.erase(uid);
    if (applied) Retry(node);
  }

  // Applies again the holds on `node` that did not fit when they came (room may have been made).
  void Retry(const std::string& node) {
    if (dirty || !cluster) return;
    std::vector<std::string> again;
    for (const std::string& uid : conflicted) {
      auto it = holds.find(uid);
      if (it != holds.end() && it->second.node == node) again.push_back(uid);
    }
    for (const std::string& uid : again) {
      Hold& h = holds.at(uid);
      Unapply(h);
      Apply(h);
      if (h.conflict.empty()) conflicted.erase(uid);
    }
  }

  // Replaces `uid`'s hold by `h` (a new one is applied unless the cluster is about to be rebuilt).
  // What the API server reports outranks this extender's reservations: an observed hold that does
  // not fit takes the room of reservations on its node (those pods decide again at their bind).
  void Put(const std::string& uid, Hold h) {
    Drop(uid);
    if (h.kind == HoldKind::kReserved) reserved.insert(uid);
    Hold& placed = holds.emplace(uid, std::move(h)).first->second;
    if (dirty || !cluster) return;
    Apply(placed);
    if (placed.kind == HoldKind::kObserved && !placed.conflict.empty()) {
      std::vector<std::string> yield;
      for (const std::string& r : reserved) {
        if (holds.at(r).node == placed.node) yield.push_back(r);
      }
      for (const std::string& r : yield) {
        Unapply(holds.at(r));
        holds.erase(r);
        reserved.erase(r);
      }
      if (!yield.empty()) {
        Unapply(placed);
        Apply(placed);
      }
    }
    if (!placed.conflict.empty()) conflicted.insert(uid);
  }

  // What a pod the API server reported holds, if anything.
  std::optional<Hold> Observed(const PodRec& rec) const {
    if (rec.terminal) return std::nullopt;
    Hold h;
    h.kind = HoldKind::kObserved;
    h.pod = rec.key;
    h.bound = !rec.node_name.empty();
    h.node = rec.node_name;
    if (!h.bound) {
      if (!rec.assignment || !rec.assumed) return std::nullopt;
      h.node = rec.assignment->node;
    }
    h.cpu_milli = rec.demand.cpu_milli;
    h.memory_mib = CeilMib(rec.demand.memory_bytes);
    if (rec.assignment && rec.assignment->node == h.node) {
      h.seq = rec.assignment->seq;
      for (const k8s::ContainerAssignment& c : rec.assignment->containers) {
        ContainerPart part{c.name, {}};
        for (const k8s::AssignedGpu& g : c.gpus) {
          part.gpus.push_back(
              {g.uuid, g.core.value(), static_cast<int64_t>(g.mem.count())});
        }
        h.containers.push_back(std::move(part));
      }
    }
    return h;
  }

  void Observe(const PodRec& rec) {
    auto current = holds.find(rec.uid);
    std::optional<Hold> seen = Observed(rec);
    if (current != holds.end() && current->second.kind != HoldKind::kObserved) {
      // Ours is in flight; the API server's word wins once the pod is bound (or gone).
      if (rec.node_name.empty() && !rec.terminal) return;
    }
    if (!seen) {
      Drop(rec.uid);
      return;
    }
    if (current != holds.end() && current->second.kind == HoldKind::kObserved &&
        current->second.bound == seen->bound && current->second.SameShares(*seen)) {
      current->second.seq = seen->seq;
      return;
    }
    Put(rec.uid, std::move(*seen));
  }

  void SweepReservations() {
    const SteadyTime now = options.clock();
    std::vector<std::string> lapsed;
    for (auto it = reserved.begin(); it != reserved.end();) {
      auto h = holds.find(*it);
      if (h == holds.end() || h->second.kind != HoldKind::kReserved) {
        it = reserved.erase(it);
        continue;
      }
      if (h->second.deadline <= now) lapsed.push_back(*it);
      ++it;
    }
    for (const std::string& uid : lapsed) {
      ++expired;
      Drop(uid);
      asked.erase(uid);
    }
  }

  // -- decisions --------------------------------------------------------------------------------

  pl::ModelSet Allowed(const k8s::PodDemand& d) const {
    if (d.allowed_models.empty()) return pl::ModelSet::Any();
    pl::ModelSet set = pl::ModelSet::None();
    for (size_t id = 0; id < model_names.size(); ++id) {
      for (const std::string& pattern : d.allowed_models) {
        if (ModelMatches(model_names[id], pattern)) set = set.With(static_cast<int>(id));
      }
    }
    return set;
  }

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
                       std::vector<pl::Assignment>* where) {
    std::vector<std::pair<pl::Request, pl::Assignment>> placed;
    pl::FitResult result = pl::FitResult::kFits;
    std::vector<pl::Assignment> out(p.requests.size(), pl::Assignment{node, 0});
    std::vector<size_t> order{p.primary};
    for (size_t i = 0; i < p.requests.size(); ++i) {
      if (i != p.primary) order.push_back(i);
    }
    for (size_t i : order) {
      const pl::Request& r = p.requests[i];
      const pl::FitResult fit = cluster->Fits(node, r);
      if (fit != pl::FitResult::kFits) {
        result = fit;
        break;
      }
      const pl::Assignment a = i == p.primary && primary ? *primary : On(node, r);
      if (!cluster->Place(r, a).ok()) {
        result = r.mig() ? pl::FitResult::kMigInstance : pl::FitResult::kGpuCompute;
        break;
      }
      placed.emplace_back(r, a);
      out[i] = a;
    }
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) {
      (void)cluster->Remove(it->first, it->second);
    }
    if (where != nullptr) *where = std::move(out);
    return result;
  }

  pl::FitResult FitsAll(const PodRequests& p, int node) {
    if (p.requests.size() == 1) return cluster->Fits(node, p.requests[0]);
    return TryAll(p, node, std::nullopt, nullptr);
  }

  // The engine's choice among `candidates` (sorted node indices that fit every request); with
  // `scores`, the 0..10 extender score of each candidate.
  std::optional<Choice> Choose(const PodRequests& p, const std::vector<int>& candidates,
                               std::vector<int64_t>* scores) {
    std::map<k8s::PlacementPolicy, std::vector<int>> groups;
    for (int n : candidates) groups[quick[static_cast<size_t>(n)].policy].push_back(n);
    const pl::Request& primary = p.requests[p.primary];
    std::optional<pl::Assignment> best;
    std::vector<std::pair<pl::Assignment, std::vector<pl::NodeScore>>> per_group;
    for (auto& [policy, members] : groups) {
      std::vector<pl::NodeScore> ranked;
      auto a = policies.at(policy)->SelectAmong(*cluster, primary, members,
                                                scores != nullptr ? &ranked : nullptr);
      if (!a) continue;
      if (!best || a->node < best->node) best = a;
      if (scores != nullptr) per_group.emplace_back(*a, std::move(ranked));
    }
    if (!best) return std::nullopt;
    if (scores != nullptr) {
      scores->assign(static_cast<size_t>(cluster->node_count()), 0);
      for (const auto& [choice, group] : per_group) {
        double lo = 0, hi = 0;
        bool first = true;
        for (const pl::NodeScore& s : group) {
          lo = first ? s.primary : std::min(lo, s.primary);
          hi = first ? s.primary : std::max(hi, s.primary);
          first = false;
        }
        for (const pl::NodeScore& s : group) {
          int64_t score = 9;
          if (hi > lo) {
            score = std::min<int64_t>(9, static_cast<int64_t>(std::floor(9 * (s.primary - lo) / (hi - lo))));
          }
          (*scores)[static_cast<size_t>(s.node)] = s.node == best->node ? 10 : score;
        }
      }
    }
    Choice c;
    c.node = best->node;
    if (p.requests.size() == 1) {
      c.where = {*best};
    } else {
      (void)TryAll(p, best->node, *best, &c.where);
    }
    return c;
  }

  // The hold of `rec`'s pod for choice `c`, as the assignment annotation will state it.
  Hold MakeHold(const PodRec& rec, const PodRequests& p, const Choice& c, HoldKind kind) const {
    const NodeRec& node = *by_index[static_cast<size_t>(c.node)];
    Hold h;
    h.kind = kind;
    h.pod = rec.key;
    h.node = node.name;
    h.cpu_milli = rec.demand.cpu_milli;
    h.memory_mib = CeilMib(rec.demand.memory_bytes);
    for (size_t i = 0; i < p.requests.size(); ++i) {
      if (p.names[i].empty() && rec.demand.asks.empty()) continue;  // the CPU-only request
      const pl::Request& r = p.requests[i];
      ContainerPart part{p.names[i], {}};
      if (r.mig()) {
        // One MIG device: the instance the engine chose, its whole memory, not time-shared.
        const int g = std::countr_zero(c.where[i].gpus);
        if (g < static_cast<int>(node.mig_gpus.size())) {
          for (const NodeRec::MigInstance& inst : node.mig_gpus[static_cast<size_t>(g)].instances) {
            if (inst.start != c.where[i].mig_start) continue;
            part.gpus.push_back({inst.uuid, 100, static_cast<int64_t>(inst.memory_bytes)});
          }
        }
        h.containers.push_back(std::move(part));
        continue;
      }
      for (int g = 0; g < pl::kMaxGpusPerNode; ++g) {
        if (((c.where[i].gpus >> g) & 1) == 0) continue;
        const k8s::InventoryGpu& gpu = node.gpus[static_cast<size_t>(g)];
        GpuPart gp;
        gp.uuid = gpu.uuid;
        if (r.whole_gpus()) {
          // A whole GPU, capped as k8s/fit.h says (the device plugin checks the same).
          gp.core_percent = 100;
          gp.mem_bytes = static_cast<int64_t>(gpu.memory.count());
          gp.mem_bytes =
              static_cast<int64_t>(k8s::WholeGpuCap(p.asked[i], node.mode, gpu.memory).count());
        } else {
          gp.core_percent = r.memory_only() ? 100 : r.gpu_milli / 10;
          gp.mem_bytes = r.MemoryOn(cluster->gpu_memory_mib(c.node)) * kMiB;
        }
        part.gpus.push_back(std::move(gp));
      }
      h.containers.push_back(std::move(part));
    }
    return h;
  }

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
  NodeFailure Describe(const PodRec& rec, int n, Verdict v) const {
    const NodeRec& node = *by_index[static_cast<size_t>(n)];
    if (v.gate == Gate::kProblem) {
      return NodeFailure{node.name, "tessera: " + node.problem, true, "node-invalid"};
    }
    if (v.gate == Gate::kNoInventory) {
      return NodeFailure{node.name,
                         "tessera: node has no Tessera GPUs (no tessera.io/gpu-inventory; is "
                         "the device plugin running there?)",
                         true, "no-gpus"};
    }
    return NodeFailure{node.name, Reason(rec, node, n, v.fit), Unresolvable(v.fit),
                       std::string(FitKind(v.fit))};
  }
  // The reason a pod cannot go to node `n` (nullopt: it fits every request).
  std::optional<NodeFailure> WhyNot(const PodRec& rec, const PodRequests& p, int n) {
    const Verdict v = Check(rec, p, n);
    if (v.fits()) return std::nullopt;
    return Describe(rec, n, v);
  }

  static std::string_view FitKind(pl::FitResult fit) {
    switch (fit) {
      case pl::FitResult::kCpu:
        return "cpu";
      case pl::FitResult::kMemory:
        return "memory";
      case pl::FitResult::kModel:
        return "gpu-model";
      case pl::FitResult::kMode:
        return "mode";
      case pl::FitResult::kGpuCount:
        return "gpu-count";
      case pl::FitResult::kGpuCompute:
        return "gpu-core";
      case pl::FitResult::kGpuMemory:
        return "gpu-mem";
      case pl::FitResult::kGpuSize:
        return "gpu-size";
      case pl::FitResult::kMigProfile:
        return "mig-profile";
      case pl::FitResult::kMigInstance:
        return "mig-instance";
      case pl::FitResult::kFits:
        break;
    }
    return "fits";
  }

  static bool Unresolvable(pl::FitResult fit) {
    return fit == pl::FitResult::kModel || pl::IsShapeFailure(fit);
  }

  // Why a MIG pod does not fit mig node `node` (placement node `n`), naming the profile and what
  // the node has.
  std::string MigReason(const PodRec& rec, const NodeRec& node, int n, pl::FitResult) const {
    std::vector<std::string> asked;
    for (const k8s::ContainerAsk& a : rec.demand.asks) {
      if (!a.mig_profile.empty()) asked.push_back(a.mig_profile);
    }
    const std::string profile = asked.empty() ? "?" : asked.front();
    // What is free, per profile: "1g.10gb x2 free, 3g.40gb taken".
    std::map<std::string, std::pair<int, int>> count;  // profile -> (free, taken)
    for (const pl::MigGpu& g : cluster->mig_gpus(n)) {
      for (size_t i = 0; i < g.layout.instances.size(); ++i) {
        auto& c = count[std::string(g.layout.instances[i].profile->name)];
        (g.Taken(i) ? c.second : c.first) += 1;
      }
    }
    std::string has;
    for (const auto& [p, c] : count) {
      has += (has.empty() ? "" : ", ") + p + " " + std::to_string(c.first) + " free of " +
             std::to_string(c.first + c.second);
    }
    std::string what = asked.size() > 1 ? "free instances for every MIG container of the pod ("
                                        : "free " + profile + " instance";
    if (asked.size() > 1) {
      for (size_t i = 0; i < asked.size(); ++i) what += (i ? ", " : "") + asked[i];
      what += ")";
    }
    return "tessera: no " + what + " on the node (its instances: " + (has.empty() ? "none" : has) +
           ")";
  }

  std::string Reason(const PodRec& rec, const NodeRec& node, int n, pl::FitResult fit) const {
    const k8s::PodDemand& d = rec.demand;
    if (fit == pl::FitResult::kMigInstance) return MigReason(rec, node, n, fit);
    if (pl::IsShapeFailure(fit)) {
      // The shape rule, worded as the device plugin words it, for the first container it refuses.
      const pl::NodeShape shape =
          pl::ShapeOf(cluster->spec(n), cluster->gpu_memory_mib(n), cluster->mig_model(n));
      for (const k8s::ContainerAsk& a : d.asks) {
        const pl::FitResult f = k8s::ShapeFitOf(a.gpu, shape);
        if (f != pl::FitResult::kFits) {
          return "tessera: " + k8s::ShapeRefusal(f, a.gpu, node.mode, shape);
        }
      }
    }
    bool memory_only = false, whole = false, compute = false;
    for (const k8s::ContainerAsk& a : d.asks) {
      memory_only |= !a.whole() && a.core_percent == 0;
      whole |= a.whole();
      compute |= !a.whole() && a.core_percent > 0;
    }
    switch (fit) {
      case pl::FitResult::kFits:
        return "fits";
      case pl::FitResult::kCpu:
        return "tessera: Insufficient cpu";
      case pl::FitResult::kMemory:
        return "tessera: Insufficient memory";
      case pl::FitResult::kModel:
        if (node.gpus.empty()) return "tessera: node has no healthy Tessera GPUs";
        return "tessera: GPU model \"" + node.gpus.front().model +
               "\" is not allowed by tessera.io/gpu-model";
      case pl::FitResult::kGpuCompute:
        if (whole && !compute && !memory_only) {
          return "tessera: Insufficient tessera.io/gpu-count (too few entirely free GPUs)";
        }
        return "tessera: Insufficient tessera.io/gpu-core";
      case pl::FitResult::kGpuMemory:
        return "tessera: Insufficient tessera.io/gpu-mem";
      default:
        break;
    }
    return "tessera: does not fit (" + std::string(pl::FitResultName(fit)) + ")";
  }

  // The pod as asked at a verb: read it, release its own reservation (or the stale assumed
  // decision of an unbound pod being placed again), and remember it for the bind.
  Result<PodRec> TakeAsked(const Json& pod) {
    auto rec = ReadPodRec(pod);
    if (!rec.ok()) return rec.status();
    if (auto h = holds.find(rec->uid); h != holds.end()) {
      if (h->second.kind == HoldKind::kReserved ||
          (h->second.kind == HoldKind::kObserved && !h->second.bound)) {
        Drop(rec->uid);
      }
    }
    asked[rec->uid] = *rec;
    return rec;
  }

  void Reserve(const PodRec& rec, const PodRequests& p, const Choice& c) {
    Hold h = MakeHold(rec, p, c, HoldKind::kReserved);
    h.deadline = options.clock() + options.reservation_ttl;
    Put(rec.uid, std::move(h));
  }

  void Prepare() {
    EnsureBuilt();
    EnsurePolicies();
    SweepReservations();
    EnsureDrains();
  }

  // -- nodes drained for waiting pods -------------------------------------------------------------

  void NoteWaiting(const PodRec& rec) {
    const bool now = rec.waiting && rec.demand.demand_error.empty();
    const bool was = unschedulable.count(rec.uid) > 0;
    if (now == was) return;
    if (now) {
      unschedulable.insert(rec.uid);
    } else {
      unschedulable.erase(rec.uid);
    }
    ++unschedulable_version;
  }

  uint64_t DrainKey(const PodRec& rec) {
    auto [it, fresh] = drain_keys.try_emplace(rec.uid, drain_pods.size() + 1);
    if (fresh) drain_pods.push_back(rec.key);
    return it->second;
  }

  // Plans the drained nodes again when the cluster or the waiting pods changed (the plan is a
  // function of both, so planning more often than needed gives the same plan).
  void EnsureDrains() {
    auto tessera = policies.find(k8s::PlacementPolicy::kTessera);
    const bool on = options.reserve_for_waiting && tessera != policies.end() &&
                    tessera->second->ReservesForWaiting();
    if (!on || unschedulable.empty()) {
      drains.Clear();
      return;
    }
    if (drains_changes == changes && drains_waiting == unschedulable_version) return;
    struct Entry {
      const PodRec* rec;
      pl::Request request;
    };
    std::vector<Entry> entries;
    for (const std::string& uid : unschedulable) {
      auto it = pods.find(uid);
      if (it == pods.end()) continue;
      auto reqs = k8s::PlacementRequestsOf(it->second.demand, Allowed(it->second.demand));
      if (!reqs.ok() || !pl::Reservations::Holds(reqs->requests[reqs->primary])) continue;
      entries.push_back({&it->second, reqs->requests[reqs->primary]});
    }
    // Oldest first: creation time (RFC 3339 in UTC sorts as text), then name.
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.rec->created != b.rec->created ? a.rec->created < b.rec->created
                                              : a.rec->key < b.rec->key;
    });
    std::vector<pl::WaitingPod> oldest_first;
    for (const Entry& e : entries) oldest_first.push_back({DrainKey(*e.rec), e.request});
    std::vector<uint8_t> eligible(quick.size(), 0);
    for (size_t n = 0; n < quick.size(); ++n) {
      eligible[n] =
          quick[n].gate == Gate::kOpen && quick[n].policy == k8s::PlacementPolicy::kTessera;
    }
    drains.Plan(*cluster, oldest_first, eligible);
    drains_changes = changes;
    drains_waiting = unschedulable_version;
  }

  // Whether `rec`'s pod (asking `primary`) may go to node `n`, and if not who holds it.
  bool DrainAllows(const PodRec& rec, const pl::Request& primary, int n) {
    if (drains.empty()) return true;
    const pl::Reservations::Held* h = drains.On(n);
    if (h == nullptr) return true;
    pl::Request asked = primary;
    if (rec.demand.wants_gpu() && asked.gpu_count == 0) asked.gpu_count = 1;
    return drains.Allows(*cluster, n, DrainKey(rec), asked);
  }

  NodeFailure DrainFailure(int n) const {
    const pl::Reservations::Held* h = drains.On(n);
    const std::string holder =
        h != nullptr && h->key - 1 < drain_pods.size() ? drain_pods[h->key - 1] : "?";
    return NodeFailure{by_index[static_cast<size_t>(n)]->name,
                       "tessera: node kept draining for pod " + holder + ", which waits for " +
                           std::to_string(h != nullptr ? h->request.gpu_count : 0) +
                           " GPUs on one node",
                       false, "reserved"};
  }

  void SeedSeq(uint64_t seen) { next_seq = std::max(next_seq, seen + 1); }

  // The pod as last asked about at a verb, else as the API server reported it.
  const PodRec* Asked(const std::string& uid) const {
    if (auto it = asked.find(uid); it != asked.end()) return &it->second;
    if (auto it = pods.find(uid); it != pods.end()) return &it->second;
    return nullptr;
  }

  // The bind plan of binding hold `h`, with a seq above every commit on its node.
  BindPlan Plan(const PodRec& rec, Hold& h) {
    const NodeRec& node = nodes.at(h.node);
    BindPlan plan;
    plan.pod_resource_version = rec.resource_version;
    plan.assignment.node = h.node;
    plan.assignment.seq = std::max(next_seq, node.log.seq + 1);
    next_seq = plan.assignment.seq + 1;
    h.seq = plan.assignment.seq;
    for (const ContainerPart& c : h.containers) {
      k8s::ContainerAssignment ca;
      ca.name = c.name;
      for (const GpuPart& g : c.gpus) {
        ca.gpus.push_back({g.uuid, Bytes(static_cast<uint64_t>(g.mem_bytes)),
                           *Percent::FromInt(g.core_percent)});
      }
      plan.assignment.containers.push_back(std::move(ca));
    }
    return plan;
  }
};

// ---------------------------------------------------------------------------------------------

ClusterState::ClusterState(StateOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ClusterState::~ClusterState() = default;

Status ClusterState::UpsertNode(const Json& node) {
  auto rec = ReadNodeRec(node);
  if (!rec.ok()) return rec.status();
  std::lock_guard lock(impl_->mu);
  impl_->SeedSeq(rec->log.seq);
  auto it = impl_->nodes.find(rec->name);
  if (it == impl_->nodes.end()) {
    impl_->nodes.emplace(rec->name, std::move(*rec));  // verified_seq 0: its log is read first
    impl_->dirty = true;
    return Status::Ok();
  }
  if (Older(rec->resource_version, it->second.resource_version)) return Status::Ok();
  if (!it->second.SamePlacement(*rec)) impl_->dirty = true;
  rec->verified_seq = it->second.verified_seq;
  it->second = std::move(*rec);
  return Status::Ok();
}

void ClusterState::RemoveNode(const std::string& name) {
  std::lock_guard lock(impl_->mu);
  if (impl_->nodes.erase(name) > 0) impl_->dirty = true;
}

Status ClusterState::UpsertPod(const Json& pod) {
  auto rec = ReadPodRec(pod);
  if (!rec.ok()) return rec.status();
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  if (auto held = s.pods.find(rec->uid);
      held != s.pods.end() && Older(rec->resource_version, held->second.resource_version)) {
    return Status::Ok();
  }
  if (rec->assignment) s.SeedSeq(rec->assignment->seq);
  s.pods_changed = true;
  s.EnsureBuilt();
  s.Observe(*rec);
  s.NoteWaiting(*rec);
  if (rec->terminal || !rec->node_name.empty()) {
    s.asked.erase(rec->uid);
    s.waiting.erase(rec->uid);
  }
  s.pods[rec->uid] = std::move(*rec);
  return Status::Ok();
}

void ClusterState::RemovePod(const std::string& uid) {
  std::lock_guard lock(impl_->mu);
  impl_->pods_changed = true;
  impl_->Drop(uid);
  impl_->pods.erase(uid);
  impl_->asked.erase(uid);
  if (impl_->unschedulable.erase(uid) > 0) ++impl_->unschedulable_version;
  impl_->waiting.erase(uid);
}

void ClusterState::ReplaceNodes(const std::vector<Json>& nodes) {
  std::map<std::string, NodeRec> recs;
  for (const Json& n : nodes) {
    auto rec = ReadNodeRec(n);
    if (rec.ok()) recs.emplace(rec->name, std::move(*rec));
  }
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  for (auto& [name, rec] : recs) {
    s.SeedSeq(rec.log.seq);
    if (auto old = s.nodes.find(name); old != s.nodes.end()) {
      rec.verified_seq = old->second.verified_seq;
    } else if (!s.pods_listed) {
      rec.verified_seq = rec.log.seq;  // the pod list to come is newer than this node list
    }
  }
  s.nodes = std::move(recs);
  s.dirty = true;
  s.EnsureBuilt();
}

void ClusterState::ReplacePods(const std::vector<Json>& pods) {
  std::vector<PodRec> recs;
  for (const Json& p : pods) {
    auto rec = ReadPodRec(p);
    if (rec.ok()) recs.push_back(std::move(*rec));
  }
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.pods_listed = true;
  s.pods_changed = true;
  std::unordered_map<std::string, PodRec> listed;
  for (PodRec& r : recs) {
    if (r.assignment) s.SeedSeq(r.assignment->seq);
    listed.emplace(r.uid, std::move(r));
  }
  // Observed holds of pods no longer listed go; the others are brought up to date below.
  for (auto it = s.holds.begin(); it != s.holds.end();) {
    if (it->second.kind == HoldKind::kObserved && listed.count(it->first) == 0) {
      s.Unapply(it->second);
      s.conflicted.erase(it->first);
      it = s.holds.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = s.waiting.begin(); it != s.waiting.end();) {
    auto p = listed.find(it->first);
    const bool waits = p != listed.end() && !p->second.terminal && p->second.node_name.empty();
    it = waits ? std::next(it) : s.waiting.erase(it);
  }
  s.pods = std::move(listed);
  s.EnsureBuilt();
  s.unschedulable.clear();
  ++s.unschedulable_version;
  for (const auto& [uid, rec] : s.pods) {
    s.Observe(rec);
    s.NoteWaiting(rec);
  }
}

namespace {

std::vector<std::string_view> Views(std::span<const std::string> names) {
  return {names.begin(), names.end()};
}

}  // namespace

Result<FilterOutcome> ClusterState::Filter(const Json& pod, std::span<const std::string> names) {
  const std::vector<std::string_view> views = Views(names);
  return Filter(pod, std::span<const std::string_view>(views));
}

Result<std::vector<NodePriority>> ClusterState::Prioritize(const Json& pod,
                                                           std::span<const std::string> names) {
  const std::vector<std::string_view> views = Views(names);
  return Prioritize(pod, std::span<const std::string_view>(views));
}

Result<FilterOutcome> ClusterState::Filter(const Json& pod,
                                           std::span<const std::string_view> names) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.Prepare();
  auto rec = s.TakeAsked(pod);
  if (!rec.ok()) return rec.status();
  FilterOutcome out;
  std::string pod_error = rec->demand.demand_error;
  std::optional<Impl::PodRequests> reqs;
  if (pod_error.empty()) {
    auto r = k8s::PlacementRequestsOf(rec->demand, s.Allowed(rec->demand));
    if (r.ok()) {
      reqs = std::move(*r);
    } else {
      pod_error = "pod " + rec->key + ": " + r.error();
    }
  }
  // First every node's verdict, without a string; the reasons are written only when
  // kube-scheduler reads them (below).
  std::vector<int> candidates;  // node indices of the nodes that fit, in the order asked
  std::vector<size_t> fit_at;   // and their places in `names`
  struct Rejected {
    size_t at;  // place in `names`
    int node;   // -1: unknown to the extender
    Impl::Verdict verdict;
  };
  std::vector<Rejected> rejected;
  std::vector<size_t> drained;  // places in `names` of nodes kept for a waiting pod
  candidates.reserve(names.size());
  fit_at.reserve(names.size());
  const std::vector<int>& index = s.IndicesOf(names);
  for (size_t i = 0; i < names.size(); ++i) {
    if (!pod_error.empty()) {
      ++out.rejected["pod-invalid"];
      continue;
    }
    const int n = index[i];
    if (n < 0) {
      rejected.push_back({i, -1, {}});
      ++out.rejected["node-unknown"];
      continue;
    }
    const Impl::Verdict v = s.Check(*rec, *reqs, n);
    if (!v.fits()) {
      rejected.push_back({i, n, v});
      continue;
    }
    if (!s.DrainAllows(*rec, reqs->requests[reqs->primary], n)) {
      drained.push_back(i);
      ++out.rejected["reserved"];
      continue;
    }
    candidates.push_back(n);
    fit_at.push_back(i);
  }
  {
    std::map<std::string_view, uint64_t> kinds;  // counted by enum, named once
    for (const Rejected& r : rejected) {
      if (r.node >= 0) ++kinds[Impl::KindOf(r.verdict)];
    }
    for (const auto& [kind, count] : kinds) out.rejected[std::string(kind)] += count;
  }
  const std::vector<int> sorted = s.SortedUnique(candidates);
  std::vector<int64_t> scores;
  std::optional<Impl::Choice> choice;
  const bool chosen_only = s.options.filter_answer == FilterAnswer::kChosen;
  if (!sorted.empty()) {
    choice = s.Choose(*reqs, sorted, chosen_only ? nullptr : &scores);
    if (choice) s.Reserve(*rec, *reqs, *choice);
  }
  if (choice) s.waiting.erase(rec->uid);
  if (choice && chosen_only) {
    // kube-scheduler reads the failure maps only when no node passes (they are why a pod is
    // Pending); with one node passing it binds there, so none is written.
    out.fits = {s.by_index[static_cast<size_t>(choice->node)]->name};
    candidates = {choice->node};
    scores.assign(s.by_index.size(), 0);
    scores[static_cast<size_t>(choice->node)] = 10;
  } else {
    out.fits.reserve(fit_at.size());
    for (size_t i : fit_at) out.fits.emplace_back(names[i]);
    if (!pod_error.empty()) {
      for (const std::string_view name : names) {
        out.failed.push_back({std::string(name), "tessera: " + pod_error, true, "pod-invalid"});
      }
    }
    out.failed.reserve(rejected.size());
    for (const Rejected& r : rejected) {
      if (r.node >= 0) {
        out.failed.push_back(s.Describe(*rec, r.node, r.verdict));
        continue;
      }
      const std::string name(names[r.at]);
      out.failed.push_back(
          {name, "tessera: node " + name + " is not known to the extender", true, "node-unknown"});
    }
    for (size_t at : drained) out.failed.push_back(s.DrainFailure(index[at]));
  }
  if (!choice) {
    Impl::Waiting& w = s.waiting[rec->uid];
    if (w.since == SteadyTime{}) w.since = s.options.clock();
    w.pod = rec->key;
    w.asks = DescribeAsks(rec->demand);
    w.reason = NoNodeSummary(names.size(), out.failed);
    w.demand = rec->demand;
  }
  Impl::LastFilter& last = s.last_filter;
  last.uid = rec->uid;
  last.changes = s.changes;
  last.names_hash = HashNames(std::span<const std::string>(out.fits));
  last.count = out.fits.size();
  last.scores.clear();
  for (int n : candidates) {
    last.scores.push_back(scores.empty() ? 0 : scores[static_cast<size_t>(n)]);
  }
  return out;
}

Result<std::vector<PreemptCandidate>> ClusterState::Preempt(
    const Json& pod, std::span<const PreemptCandidate> proposed) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.Prepare();
  auto rec = ReadPodRec(pod);
  if (!rec.ok()) return rec.status();
  if (!rec->demand.demand_error.empty())
    return Result<std::vector<PreemptCandidate>>::Error(rec->demand.demand_error);
  auto reqs = k8s::PlacementRequestsOf(rec->demand, s.Allowed(rec->demand));
  if (!reqs.ok())
    return Result<std::vector<PreemptCandidate>>::Error("pod " + rec->key + ": " + reqs.error());
  // The pod's own reservation, if any, is not in its way.
  std::optional<Hold> own;
  if (auto it = s.holds.find(rec->uid); it != s.holds.end()) {
    own = it->second;
    s.Unapply(it->second);
  }
  std::vector<PreemptCandidate> out;
  for (const PreemptCandidate& c : proposed) {
    auto at = s.index_of.find(c.node);
    if (at == s.index_of.end()) continue;
    const int n = at->second;
    const Impl::Verdict before = s.Check(*rec, *reqs, n);
    if (before.gate != Impl::Gate::kOpen || (!before.fits() && Impl::Unresolvable(before.fit))) {
      continue;
    }
    // Take the victims' holds off the node for a moment (only theirs on this node: a hold
    // elsewhere is not freed by evicting the pod here), and see whether the pod fits then.
    std::vector<Hold*> off;
    auto take_off = [&](const std::string& uid) -> bool {
      auto h = s.holds.find(uid);
      if (h == s.holds.end() || h->second.node != c.node || h->second.applied.empty()) return false;
      s.Unapply(h->second);
      off.push_back(&h->second);
      return true;
    };
    for (const std::string& uid : c.victims) take_off(uid);
    bool fits = s.FitsAll(*reqs, n) == pl::FitResult::kFits;
    PreemptCandidate answer = c;
    if (!fits) {
      // More of the node's bound pods of lower priority, lowest first (then the newest decision
      // first), until the pod fits; then those not needed are spared again, the last taken first.
      std::vector<std::pair<const PodRec*, Hold*>> more;
      const std::set<std::string> proposed_uids(c.victims.begin(), c.victims.end());
      for (auto& [uid, h] : s.holds) {
        if (h.node != c.node || h.kind != HoldKind::kObserved || !h.bound || h.applied.empty() ||
            proposed_uids.count(uid) != 0) {
          continue;
        }
        auto p = s.pods.find(uid);
        if (p == s.pods.end() || p->second.priority >= rec->priority) continue;
        more.emplace_back(&p->second, &h);
      }
      std::sort(more.begin(), more.end(), [](const auto& a, const auto& b) {
        if (a.first->priority != b.first->priority) return a.first->priority < b.first->priority;
        if (a.second->seq != b.second->seq) return a.second->seq > b.second->seq;
        return a.first->uid < b.first->uid;
      });
      std::vector<std::pair<const PodRec*, Hold*>> taken;
      for (const auto& m : more) {
        s.Unapply(*m.second);
        off.push_back(m.second);
        taken.push_back(m);
        if (s.FitsAll(*reqs, n) == pl::FitResult::kFits) {
          fits = true;
          break;
        }
      }
      if (fits) {
        for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
          s.Apply(*it->second);
          if (s.FitsAll(*reqs, n) == pl::FitResult::kFits) {
            off.erase(std::find(off.begin(), off.end(), it->second));
            continue;  // spared
          }
          s.Unapply(*it->second);
          answer.victims.push_back(it->first->uid);
        }
        // Spared in reverse; name the added victims in the order they were taken.
        std::reverse(answer.victims.begin() + static_cast<std::ptrdiff_t>(c.victims.size()),
                     answer.victims.end());
      }
    }
    for (Hold* h : off) s.Apply(*h);
    // kube-scheduler refuses an answer naming a node with no victim.
    if (fits && !answer.victims.empty()) out.push_back(std::move(answer));
  }
  if (own) {
    if (auto it = s.holds.find(rec->uid); it != s.holds.end()) s.Apply(it->second);
  }
  return out;
}

Result<std::vector<NodePriority>> ClusterState::Prioritize(
    const Json& pod, std::span<const std::string_view> names) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.Prepare();
  std::vector<NodePriority> out;
  out.reserve(names.size());
  for (const std::string_view name : names) out.push_back({std::string(name), 0});
  // Asked about exactly what the last filter let through, with nothing changed since: its
  // decision and reservation stand.
  const Impl::LastFilter& last = s.last_filter;
  if (last.changes == s.changes && last.count == names.size() && !last.uid.empty()) {
    auto quick = ReadPodRec(pod);
    if (quick.ok() && quick->uid == last.uid && HashNames(names) == last.names_hash) {
      for (size_t i = 0; i < out.size(); ++i) out[i].score = last.scores[i];
      s.asked[quick->uid] = std::move(*quick);
      return out;
    }
  }
  auto rec = s.TakeAsked(pod);
  if (!rec.ok()) return rec.status();
  if (!rec->demand.demand_error.empty()) return out;
  auto reqs = k8s::PlacementRequestsOf(rec->demand, s.Allowed(rec->demand));
  if (!reqs.ok()) return out;
  std::vector<int> candidates;
  const std::vector<int>& index = s.IndicesOf(names);
  for (size_t i = 0; i < names.size(); ++i) {
    const int n = index[i];
    if (n >= 0 && s.Check(*rec, *reqs, n).fits() &&
        s.DrainAllows(*rec, reqs->requests[reqs->primary], n)) {
      candidates.push_back(n);
    }
  }
  candidates = s.SortedUnique(candidates);
  std::vector<int64_t> scores;
  if (auto choice = s.Choose(*reqs, candidates, &scores)) s.Reserve(*rec, *reqs, *choice);
  if (scores.empty()) return out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (index[i] >= 0) out[i].score = scores[static_cast<size_t>(index[i])];
  }
  return out;
}

Result<BindPlan> ClusterState::PrepareBind(const std::string& ns, const std::string& name,
                                           const std::string& uid, const std::string& node) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.Prepare();
  const std::string key = ns + "/" + name;
  const PodRec* rec = s.Asked(uid);
  if (rec == nullptr) {
    return Result<BindPlan>::Error("pod " + key + " (uid " + uid +
                                   "): not known to the extender (neither filtered here nor seen "
                                   "on the API server)");
  }
  if (rec->key != key) {
    return Result<BindPlan>::Error("pod uid " + uid + " is " + rec->key + ", not " + key);
  }
  if (!rec->demand.demand_error.empty()) return Result<BindPlan>::Error(rec->demand.demand_error);
  if (auto seen = s.pods.find(uid); seen != s.pods.end() && !seen->second.node_name.empty()) {
    s.asked.erase(uid);
    if (auto h = s.holds.find(uid); h != s.holds.end() && h->second.kind != HoldKind::kObserved) {
      s.Drop(uid);
      s.Observe(seen->second);
    }
    return Result<BindPlan>::Error("pod " + key + " is bound to " + seen->second.node_name +
                                   " already");
  }
  auto node_it = s.index_of.find(node);
  if (node_it == s.index_of.end()) {
    return Result<BindPlan>::Error("node " + node + ": not known to the extender");
  }
  const int n = node_it->second;
  auto held = s.holds.find(uid);
  const bool reserved_here = held != s.holds.end() &&
                             held->second.kind == HoldKind::kReserved && held->second.node == node;
  if (reserved_here) {
    held->second.kind = HoldKind::kBinding;
    s.reserved.erase(uid);
  } else {
    if (held != s.holds.end() && held->second.kind != HoldKind::kObserved) s.Drop(uid);
    if (held = s.holds.find(uid); held != s.holds.end() && !held->second.bound) s.Drop(uid);
    auto reqs = k8s::PlacementRequestsOf(rec->demand, s.Allowed(rec->demand));
    if (!reqs.ok()) return Result<BindPlan>::Error("pod " + key + ": " + reqs.error());
    if (auto why = s.WhyNot(*rec, *reqs, n)) {
      return Result<BindPlan>::Error("pod " + key + " no longer fits node " + node + ": " +
                                     why->reason);
    }
    if (!s.DrainAllows(*rec, reqs->requests[reqs->primary], n)) {
      return Result<BindPlan>::Error("pod " + key + " may not go to node " + node + ": " +
                                     s.DrainFailure(n).reason);
    }
    auto choice = s.Choose(*reqs, {n}, nullptr);
    if (!choice) return Result<BindPlan>::Error("pod " + key + " no longer fits node " + node);
    Hold h = s.MakeHold(*rec, *reqs, *choice, HoldKind::kBinding);
    s.Put(uid, std::move(h));
    held = s.holds.find(uid);
  }
  return s.Plan(*rec, held->second);
}

void ClusterState::FinishBind(const std::string& uid, const BindPlan& plan, bool committed) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.asked.erase(uid);
  if (committed) return;
  auto it = s.holds.find(uid);
  if (it != s.holds.end() && it->second.kind == HoldKind::kBinding) s.Drop(uid);
  // The pod may still hold what the API server says it holds (e.g. an earlier assignment).
  if (auto p = s.pods.find(uid); p != s.pods.end()) s.Observe(p->second);
}

std::optional<PodFacts> ClusterState::Observed(const std::string& uid) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->pods.find(uid);
  if (it == impl_->pods.end()) return std::nullopt;
  const PodRec& rec = it->second;
  return PodFacts{rec.key, rec.node_name, rec.scheduler_name, rec.terminal, rec.deleting};
}

NodeCommitView ClusterState::CommitView(const std::string& node) const {
  std::lock_guard lock(impl_->mu);
  NodeCommitView v;
  auto it = impl_->nodes.find(node);
  if (it == impl_->nodes.end()) return v;
  v.known = true;
  v.resource_version = it->second.resource_version;
  v.log = it->second.log;
  v.log_readable = it->second.log_readable;
  v.verified_seq = it->second.verified_seq;
  return v;
}

void ClusterState::MarkVerified(const std::string& node, uint64_t seq) {
  std::lock_guard lock(impl_->mu);
  if (auto it = impl_->nodes.find(node); it != impl_->nodes.end()) {
    it->second.verified_seq = std::max(it->second.verified_seq, seq);
  }
}

Result<BindPlan> ClusterState::Redecide(const std::string& uid, const std::string& node) {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  // Rebuild so that every observed hold is placed before ours; then take ours out and decide
  // again on `node` alone.
  s.dirty = true;
  s.Prepare();
  const PodRec* rec = s.Asked(uid);
  auto held = s.holds.find(uid);
  if (rec == nullptr || held == s.holds.end() || held->second.kind != HoldKind::kBinding) {
    return Result<BindPlan>::Error("pod uid " + uid + ": no bind in progress");
  }
  s.Drop(uid);
  auto it = s.index_of.find(node);
  if (it == s.index_of.end()) return Result<BindPlan>::Error("node " + node + ": gone");
  auto reqs = k8s::PlacementRequestsOf(rec->demand, s.Allowed(rec->demand));
  if (!reqs.ok()) return reqs.status();
  if (auto why = s.WhyNot(*rec, *reqs, it->second)) {
    return Result<BindPlan>::Error("pod " + rec->key + " no longer fits node " + node +
                                   " after another scheduler's commits there: " + why->reason);
  }
  auto choice = s.Choose(*reqs, {it->second}, nullptr);
  if (!choice) return Result<BindPlan>::Error("pod " + rec->key + " no longer fits node " + node);
  s.Put(uid, s.MakeHold(*rec, *reqs, *choice, HoldKind::kBinding));
  return s.Plan(*rec, s.holds.at(uid));
}

void ClusterState::NoteCommit(const std::string& node, const std::string& resource_version,
                              const CommitLog& log, uint64_t base_seq) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->nodes.find(node);
  if (it == impl_->nodes.end()) return;
  // Our own commit: everything before it was verified, so it is too. Judged by the log it was
  // written over, not the one held now: the watch may have brought ours (or a later one) first.
  if (it->second.verified_seq >= base_seq) {
    it->second.verified_seq = std::max(it->second.verified_seq, log.seq);
  }
  if (!Older(resource_version, it->second.resource_version)) {
    it->second.resource_version = resource_version;
    it->second.log = log;
    it->second.log_readable = true;
  }
  impl_->SeedSeq(log.seq);
}

std::optional<Json> ClusterState::Inspect(std::optional<std::string> only) const {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.EnsureBuilt();
  // Holders per GPU UUID, and per node for CPU-only holds.
  std::unordered_map<std::string, Json> gpu_holders;
  std::unordered_map<std::string, Json> node_holders;
  for (const auto& [uid, h] : s.holds) {
    const std::string state(HoldKindName(h.kind, h.bound));
    Json pod_entry = {{"pod", h.pod}, {"uid", uid}, {"state", state},
                      {"cpu_milli", h.cpu_milli}, {"memory_mib", h.memory_mib}};
    if (h.seq != 0) pod_entry["seq"] = h.seq;
    if (!h.conflict.empty()) pod_entry["conflict"] = h.conflict;
    node_holders[h.node].push_back(pod_entry);
    for (const ContainerPart& c : h.containers) {
      for (const GpuPart& g : c.gpus) {
        gpu_holders[g.uuid].push_back({{"pod", h.pod},
                                       {"container", c.name},
                                       {"state", state},
                                       {"core_percent", g.core_percent},
                                       {"mem_bytes", g.mem_bytes}});
      }
    }
  }
  // Stranded GPUs (placement/stranded.h): judged by the waiting pods' requests, else by the
  // target workload's shapes.
  std::vector<pl::Request> waiting_requests;
  for (const auto& [uid, w] : s.waiting) {
    if (!w.demand.demand_error.empty()) continue;
    auto r = k8s::PlacementRequestsOf(w.demand, s.Allowed(w.demand));
    if (r.ok())
      waiting_requests.insert(waiting_requests.end(), r->requests.begin(), r->requests.end());
  }
  const std::vector<pl::Request> demand = pl::StrandingDemand(waiting_requests, *s.workload);
  int stranded_total = 0;
  Json nodes = Json::array();
  for (const auto& [name, rec] : s.nodes) {
    if (only && *only != name) continue;
    const int n = s.index_of.at(name);
    const uint32_t stranded = pl::StrandedGpus(*s.cluster, n, demand);
    stranded_total += std::popcount(stranded);
    Json gpus = Json::array();
    auto add_gpu = [&](const k8s::InventoryGpu& g, int placement_index) {
      Json j = {{"index", g.index},     {"uuid", g.uuid},
                {"model", g.model},     {"memory_bytes", g.memory.count()},
                {"healthy", g.healthy}, {"holders", Json::array()},
                {"stranded", false}};
      if (placement_index >= 0) {
        const auto i = static_cast<size_t>(placement_index);
        j["core_free_percent"] = s.cluster->gpu_milli_free(n)[i] / 10.0;
        j["memory_free_bytes"] = s.cluster->gpu_memory_free(n)[i] * kMiB;
        j["stranded"] = ((stranded >> i) & 1) != 0;
      }
      if (auto h = gpu_holders.find(g.uuid); h != gpu_holders.end()) j["holders"] = h->second;
      gpus.push_back(std::move(j));
    };
    if (rec.mode == k8s::NodeMode::kMig) {
      // MIG devices: each with its GPU, profile, place and whether an instance is held.
      for (const k8s::InventoryGpu& g : rec.gpus) {
        add_gpu(g, -1);
        if (!g.mig) continue;
        Json& j = gpus.back();
        j["mig"] = {{"gpu", g.mig->gpu}, {"profile", g.mig->profile}, {"start", g.mig->start}};
        const auto [gi, inst] = rec.MigDevice(g.uuid);
        if (inst == nullptr || gi >= s.cluster->spec(n).gpu_count) continue;
        const pl::MigGpu& placed = s.cluster->mig_gpus(n)[static_cast<size_t>(gi)];
        const int k = placed.InstanceAt(inst->start);
        if (k >= 0) j["mig"]["taken"] = placed.Taken(static_cast<size_t>(k));
        // A free instance of a stranded GPU is stranded.
        j["stranded"] =
            ((stranded >> gi) & 1) != 0 && k >= 0 && !placed.Taken(static_cast<size_t>(k));
      }
    } else {
      for (size_t i = 0; i < rec.gpus.size(); ++i) add_gpu(rec.gpus[i], static_cast<int>(i));
    }
    for (const auto& g : rec.unhealthy) add_gpu(g, -1);
    Json j = {{"name", name},
              {"policy", std::string(k8s::PlacementPolicyName(rec.policy))},
              {"mode", rec.has_inventory ? std::string(k8s::NodeModeName(rec.mode)) : "none"},
              {"seq", rec.log.seq},
              {"cpu_milli", {{"allocatable", rec.cpu_milli}, {"free", s.cluster->cpu_free(n)}}},
              {"memory_mib", {{"allocatable", rec.memory_mib}, {"free", s.cluster->memory_free(n)}}},
              {"gpus", std::move(gpus)},
              {"pods", Json::array()}};
    if (!rec.problem.empty()) j["problem"] = rec.problem;
    if (auto h = node_holders.find(name); h != node_holders.end()) j["pods"] = h->second;
    nodes.push_back(std::move(j));
  }
  if (only) {
    if (nodes.empty()) return std::nullopt;
    return nodes[0];
  }
  // Oldest first.
  std::vector<std::pair<std::string, const Impl::Waiting*>> order;
  for (const auto& [uid, w] : s.waiting) order.emplace_back(uid, &w);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->since, a.second->pod) < std::tie(b.second->since, b.second->pod);
  });
  const SteadyTime now = s.options.clock();
  Json pending = Json::array();
  for (const auto& [uid, w] : order) {
    pending.push_back({{"pod", w->pod},
                       {"uid", uid},
                       {"asks", w->asks},
                       {"reason", w->reason},
                       {"waiting_seconds", std::chrono::duration<double>(now - w->since).count()}});
  }
  return Json{{"nodes", std::move(nodes)},
              {"pending", std::move(pending)},
              {"stranded_gpus", stranded_total},
              {"stranded_judged_by", !waiting_requests.empty() ? "waiting pods"
                                     : !demand.empty()         ? "target workload"
                                                               : "nothing"}};
}

StateStats ClusterState::Stats() const {
  std::lock_guard lock(impl_->mu);
  const Impl& s = *impl_;
  StateStats out;
  out.nodes = s.nodes.size();
  out.pods = s.pods.size();
  for (const auto& [uid, h] : s.holds) {
    switch (h.kind) {
      case HoldKind::kObserved:
        ++out.holds_observed;
        break;
      case HoldKind::kReserved:
        ++out.holds_reserved;
        break;
      case HoldKind::kBinding:
        ++out.holds_binding;
        break;
    }
  }
  out.rebuilds = s.rebuilds;
  out.reservations_expired = s.expired;
  out.accounting_conflicts = s.conflicts;
  out.pods_waiting = s.unschedulable.size();
  out.nodes_reserved = s.drains.held().size();
  if (s.cluster) {
    out.gpu_milli_capacity = s.cluster->gpu_milli_capacity();
    out.gpu_milli_allocated = s.cluster->gpu_milli_allocated();
  }
  return out;
}

}  // namespace tessera::extender
