// ClusterState's MIG re-cuts (cluster_state.h PlanMigRecuts): which idle MIG GPUs to ask their
// nodes to cut again for the MIG pods that found no free instance. Decides only; writing the
// request on the Node (tessera.io/mig-recut) is recut_writer.h's. No I/O.
#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "k8s/extender/cluster_state_impl.h"
#include "k8s/fit.h"
#include "mig/planner.h"
#include "placement/mig.h"

namespace tessera::extender {

std::vector<MigRecut> ClusterState::PlanMigRecuts() {
  std::lock_guard lock(impl_->mu);
  Impl& s = *impl_;
  s.Prepare();
  std::vector<MigRecut> out;
  if (s.waiting.empty()) return out;
  const Nanos now = s.clock.Now();
  const pl::MigDemand demand = s.workload ? s.workload->mig_demand() : pl::MigDemand{};
  // Oldest wait first, then by name.
  std::vector<const Impl::Waiting*> order;
  for (const auto& [uid, w] : s.waiting) order.push_back(&w);
  std::sort(order.begin(), order.end(), [](const Impl::Waiting* a, const Impl::Waiting* b) {
    return std::tie(a->since, a->pod) < std::tie(b->since, b->pod);
  });
  std::set<std::string> planned;  // GPUs given to an earlier pod of this call
  for (const Impl::Waiting* w : order) {
    auto reqs = k8s::PlacementRequestsOf(w->demand, s.Allowed(w->demand));
    if (!reqs.ok()) continue;
    const auto mig = std::find_if(reqs->requests.begin(), reqs->requests.end(),
                                  [](const pl::Request& r) { return r.mig(); });
    if (mig == reqs->requests.end()) continue;
    const pl::Request& r = *mig;
    // Only when no node has a free instance for it, and among the nodes that lack only that.
    std::vector<int> lacking;
    bool free_somewhere = false;
    for (int n = 0; n < s.cluster->node_count() && !free_somewhere; ++n) {
      if (s.quick[static_cast<size_t>(n)].gate != Impl::Gate::kOpen) continue;
      const pl::FitResult fit = s.cluster->Fits(n, r);
      free_somewhere = fit == pl::FitResult::kFits;
      if (fit == pl::FitResult::kMigInstance && s.by_index[static_cast<size_t>(n)]->mig_recut) {
        lacking.push_back(n);
      }
    }
    if (free_somewhere) continue;
    bool done = false;
    for (int n : lacking) {
      const NodeRec& rec = *s.by_index[static_cast<size_t>(n)];
      const mig::GpuModel* model = s.cluster->mig_model(n);
      const std::span<const pl::MigGpu> gpus = s.cluster->mig_gpus(n);
      // tesserad cuts no GPU while a device of a later GPU is in use (its index would move:
      // docs/kubernetes.md, "mig nodes"), so only GPUs after the last one in use are candidates.
      size_t first_cuttable = 0;
      for (size_t g = 0; g < gpus.size(); ++g) {
        if (!gpus[g].AllFree()) first_cuttable = g + 1;
      }
      for (size_t g = first_cuttable; g < gpus.size() && g < rec.mig_gpus.size() && !done; ++g) {
        const std::string& uuid = rec.mig_gpus[g].uuid;
        if (planned.count(uuid) > 0) continue;
        // An unhealthy MIG device of the GPU: someone may still use it; never cut under it.
        const bool unhealthy =
            std::any_of(rec.unhealthy.begin(), rec.unhealthy.end(),
                        [&](const k8s::InventoryGpu& u) { return u.mig && u.mig->gpu == uuid; });
        if (unhealthy) continue;
        if (auto at = s.recut_at.find(uuid);
            at != s.recut_at.end() && now - at->second < s.options.mig_recut_interval) {
          continue;
        }
        const int k = pl::ChooseRecutLayout(*model, r.mig_profile, demand);
        if (k < 0) continue;
        const mig::Layout& layout = pl::MigLayoutsOf(*model)[static_cast<size_t>(k)];
        out.push_back({rec.name, uuid, mig::FormatCounts(*model, layout.Counts()), w->pod});
        s.recut_at[uuid] = now;
        planned.insert(uuid);
        done = true;
      }
      if (done) break;
    }
  }
  return out;
}

void ClusterState::UnplanMigRecut(const std::string& gpu) {
  std::lock_guard lock(impl_->mu);
  impl_->recut_at.erase(gpu);
}

}  // namespace tessera::extender
