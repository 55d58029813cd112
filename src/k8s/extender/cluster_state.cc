// The extender's cluster picture, its holds and its decisions (see cluster_state.h): the public
// verbs, each under the state's mutex. The state and its parts are cluster_state_impl.h. No I/O.
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
#include "k8s/extender/cluster_state_impl.h"
#include "k8s/fit.h"
#include "k8s/quantity.h"
#include "mig/profiles.h"
#include "placement/fit.h"
#include "placement/mig.h"
#include "placement/stranded.h"

namespace tessera::extender {

namespace {

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
  // Pods still waiting keep when they were first seen waiting.
  std::map<std::string, double> seen = std::move(s.unschedulable);
  s.unschedulable.clear();
  ++s.unschedulable_version;
  for (const auto& [uid, rec] : s.pods) {
    s.Observe(rec);
    s.NoteWaiting(rec);
    if (auto it = seen.find(uid); it != seen.end() && s.unschedulable.count(uid) > 0) {
      s.unschedulable[uid] = it->second;
    }
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
    if (!w.since) w.since = s.clock.Now();
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
  const bool reserved_here = held != s.holds.end() && held->second.kind == HoldKind::kReserved &&
                             held->second.node == node;
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
    Json pod_entry = {{"pod", h.pod},
                      {"uid", uid},
                      {"state", state},
                      {"cpu_milli", h.cpu_milli},
                      {"memory_mib", h.memory_mib}};
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
    Json j = {
        {"name", name},
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
  const Nanos now = s.clock.Now();
  Json pending = Json::array();
  for (const auto& [uid, w] : order) {
    pending.push_back(
        {{"pod", w->pod},
         {"uid", uid},
         {"asks", w->asks},
         {"reason", w->reason},
         {"waiting_seconds", std::chrono::duration<double>(now - *w->since).count()}});
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
