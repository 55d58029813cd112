// ClusterState's decisions (cluster_state_impl.h): which of a pod's requests fit a node, the
// engine's choice among the nodes that fit, the hold a choice makes, and the reason a node
// refuses, worded as kube-scheduler words its own. No I/O.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/bytes.h"
#include "core/text.h"
#include "k8s/extender/cluster_state_impl.h"
#include "k8s/fit.h"
#include "k8s/quantity.h"
#include "mig/profiles.h"
#include "placement/fit.h"
#include "placement/mig.h"
#include "placement/stranded.h"

namespace tessera::extender {

namespace {

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

pl::ModelSet ClusterState::Impl::Allowed(const k8s::PodDemand& d) const {
  if (d.allowed_models.empty()) return pl::ModelSet::Any();
  pl::ModelSet set = pl::ModelSet::None();
  for (size_t id = 0; id < model_names.size(); ++id) {
    for (const std::string& pattern : d.allowed_models) {
      if (ModelMatches(model_names[id], pattern)) set = set.With(static_cast<int>(id));
    }
  }
  return set;
}

pl::FitResult ClusterState::Impl::TryAll(const PodRequests& p, int node,
                                         std::optional<pl::Assignment> primary,
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
    if (!cluster->Place(r, a, cluster->now()).ok()) {
      result = r.mig() ? pl::FitResult::kMigInstance : pl::FitResult::kGpuCompute;
      break;
    }
    placed.emplace_back(r, a);
    out[i] = a;
  }
  for (auto it = placed.rbegin(); it != placed.rend(); ++it) {
    (void)cluster->Remove(it->first, it->second, cluster->now());
  }
  if (where != nullptr) *where = std::move(out);
  return result;
}

std::optional<ClusterState::Impl::Choice> ClusterState::Impl::Choose(
    const PodRequests& p, const std::vector<int>& candidates, std::vector<int64_t>* scores) {
  cluster->set_now(Seconds(clock.Now()));
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
          score = std::min<int64_t>(
              9, static_cast<int64_t>(std::floor(9 * (s.primary - lo) / (hi - lo))));
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

Hold ClusterState::Impl::MakeHold(const PodRec& rec, const PodRequests& p, const Choice& c,
                                  HoldKind kind) const {
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
        gp.mem_bytes = static_cast<int64_t>(
            k8s::WholeGpuCap(p.asked[i], gpu.mode.value_or(node.mode), gpu.memory).count());
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

NodeFailure ClusterState::Impl::Describe(const PodRec& rec, int n, Verdict v) const {
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

std::string_view ClusterState::Impl::FitKind(pl::FitResult fit) {
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

std::string ClusterState::Impl::MigReason(const PodRec& rec, const NodeRec& node, int n,
                                          pl::FitResult) const {
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

std::string ClusterState::Impl::Reason(const PodRec& rec, const NodeRec& node, int n,
                                       pl::FitResult fit) const {
  const k8s::PodDemand& d = rec.demand;
  if (fit == pl::FitResult::kMigInstance) return MigReason(rec, node, n, fit);
  if (fit == pl::FitResult::kMode && !cluster->spec(n).mixed() && !d.allowed_modes.empty() &&
      std::find(d.allowed_modes.begin(), d.allowed_modes.end(), node.mode) ==
          d.allowed_modes.end()) {
    std::string allowed;
    for (k8s::NodeMode m : d.allowed_modes) {
      allowed += (allowed.empty() ? "" : "|") + std::string(k8s::NodeModeName(m));
    }
    return "tessera: node mode " + std::string(k8s::NodeModeName(node.mode)) +
           " is not among tessera.io/gpu-mode=" + allowed;
  }
  if (pl::IsShapeFailure(fit) && cluster->spec(n).mixed()) {
    // GPUs of several modes: say which modes the node has and what the pod allows.
    std::map<std::string, std::string> modes;  // mode -> its GPU indices
    for (const k8s::InventoryGpu& g : node.gpus) {
      std::string& list = modes[std::string(k8s::NodeModeName(g.mode.value_or(node.mode)))];
      list += (list.empty() ? "" : ",") + std::to_string(g.index);
    }
    std::string has;
    for (const auto& [m, list] : modes) has += (has.empty() ? "" : "; ") + m + ": GPU " + list;
    std::string allowed;
    for (k8s::NodeMode m : d.allowed_modes) {
      allowed += (allowed.empty() ? "" : "|") + std::string(k8s::NodeModeName(m));
    }
    return "tessera: too few GPUs of one mode that takes it (" + has + ")" +
           (allowed.empty() ? std::string(" for its request (an mps GPU serves one GPU per "
                                          "container, exclusive whole GPUs, mem memory shares)")
                            : " among those tessera.io/gpu-mode=" + allowed + " allows");
  }
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

Result<PodRec> ClusterState::Impl::TakeAsked(const Json& pod) {
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

}  // namespace tessera::extender
