// ClusterState's placement picture (cluster_state_impl.h): the node-name index, the Cluster built
// from the node records with the holds applied in order, the policies and the workload they learn
// from the pods seen. No I/O.
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

const std::vector<int>& ClusterState::Impl::IndicesOf(std::span<const std::string_view> names) {
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

std::vector<int> ClusterState::Impl::SortedUnique(const std::vector<int>& nodes) {
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
void ClusterState::Impl::EnsureBuilt() {
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
    s.mode_tag = static_cast<uint8_t>(k8s::ModeTag(rec.mode));
    if (rec.mode == k8s::NodeMode::kMig) {
      AddMigGpus(rec, models, &s);
    } else if (!rec.gpus.empty()) {
      const int64_t mib = static_cast<int64_t>(rec.gpus.front().memory.count()) / kMiB;
      const std::string key = rec.gpus.front().model + "/" + std::to_string(mib);
      auto id = models.Intern(key, std::max<int64_t>(mib, 1));
      if (id.ok()) {
        if (*id == static_cast<int>(model_names.size()))
          model_names.push_back(rec.gpus.front().model);
        s.model = *id;
        s.gpu_count = static_cast<int>(rec.gpus.size());
        // GPUs with a mode of their own (the inventory says each as the device plugin serves it,
        // a change it holds under tenants not yet made): every GPU then carries its mode.
        if (std::any_of(rec.gpus.begin(), rec.gpus.end(),
                        [](const k8s::InventoryGpu& g) { return g.mode.has_value(); })) {
          for (const k8s::InventoryGpu& g : rec.gpus) {
            s.gpu_modes.push_back(k8s::PlacementGpuModeOf(g.mode.value_or(rec.mode)));
          }
        }
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
    auto rank = [](const Hold* h) {
      return h->kind == HoldKind::kObserved ? (h->bound ? 0 : 1) : 2;
    };
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

void ClusterState::Impl::AddMigGpus(NodeRec& rec, pl::ModelTable& models, pl::NodeSpec* s) {
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

void ClusterState::Impl::EnsurePolicies() {
  if (!options.workload && (pods_changed || !learned_at)) {
    const Nanos now = clock.Now();
    if (!learned_at || now - *learned_at >= options.relearn_interval) {
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

void ClusterState::Impl::Learn() {
  std::vector<pl::Request> requests;
  for (const auto& [uid, rec] : pods) {
    if (rec.terminal || !rec.demand.demand_error.empty()) continue;
    auto reqs = k8s::PlacementRequestsOf(rec.demand, pl::ModelSet::Any());
    if (reqs.ok()) requests.push_back(reqs->requests[reqs->primary]);
  }
  workload = std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(requests));
}

}  // namespace tessera::extender
