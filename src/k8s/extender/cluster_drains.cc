// ClusterState's drained nodes (cluster_state_impl.h): the pods kube-scheduler found no node for,
// and the nodes placement/reservation.h keeps draining so that the oldest of them gets whole GPUs.
// No I/O.
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

void ClusterState::Impl::NoteWaiting(const PodRec& rec) {
  const bool now = rec.waiting && rec.demand.demand_error.empty();
  const bool was = unschedulable.count(rec.uid) > 0;
  if (now == was) return;
  if (now) {
    unschedulable.emplace(rec.uid, Seconds(clock.Now()));
  } else {
    unschedulable.erase(rec.uid);
  }
  ++unschedulable_version;
}

void ClusterState::Impl::EnsureDrains() {
  auto tessera = policies.find(k8s::PlacementPolicy::kTessera);
  const bool on = options.reserve_for_waiting && tessera != policies.end() &&
                  tessera->second->ReservesForWaiting();
  if (!on || unschedulable.empty()) {
    drains.Clear();
    return;
  }
  const double now = Seconds(clock.Now());
  if (drains_changes == changes && drains_waiting == unschedulable_version &&
      now < drains.next_change_s()) {
    return;
  }
  cluster->set_now(now);
  struct Entry {
    const PodRec* rec;
    pl::Request request;
    double since;
  };
  std::vector<Entry> entries;
  for (const auto& [uid, since] : unschedulable) {
    auto it = pods.find(uid);
    if (it == pods.end()) continue;
    auto reqs = k8s::PlacementRequestsOf(it->second.demand, Allowed(it->second.demand));
    if (!reqs.ok() || !drains.Holds(*cluster, reqs->requests[reqs->primary])) continue;
    entries.push_back({&it->second, reqs->requests[reqs->primary], since});
  }
  // Oldest first: creation time (RFC 3339 in UTC sorts as text), then name.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.rec->created != b.rec->created ? a.rec->created < b.rec->created
                                            : a.rec->key < b.rec->key;
  });
  std::vector<pl::WaitingPod> oldest_first;
  for (const Entry& e : entries) oldest_first.push_back({DrainKey(*e.rec), e.request, e.since});
  std::vector<uint8_t> eligible(quick.size(), 0);
  for (size_t n = 0; n < quick.size(); ++n) {
    eligible[n] = quick[n].gate == Gate::kOpen && quick[n].policy == k8s::PlacementPolicy::kTessera;
  }
  drains.Plan(*cluster, oldest_first, eligible);
  drains_changes = changes;
  drains_waiting = unschedulable_version;
}

bool ClusterState::Impl::DrainAllows(const PodRec& rec, const pl::Request& primary, int n) {
  if (drains.empty()) return true;
  const pl::Reservations::Held* h = drains.On(n);
  if (h == nullptr) return true;
  pl::Request asked = primary;
  if (rec.demand.wants_gpu() && asked.gpu_count == 0) asked.gpu_count = 1;
  return drains.Allows(*cluster, n, DrainKey(rec), asked);
}

NodeFailure ClusterState::Impl::DrainFailure(int n) const {
  const pl::Reservations::Held* h = drains.On(n);
  const std::string holder =
      h != nullptr && h->key - 1 < drain_pods.size() ? drain_pods[h->key - 1] : "?";
  const int gpus = h != nullptr ? h->request.gpu_count : 0;
  const int64_t cpu = h != nullptr ? h->request.cpu_milli : 0;
  const std::string cpu_text =
      cpu % 1000 == 0 ? std::to_string(cpu / 1000) : std::to_string(cpu) + "m";
  return NodeFailure{by_index[static_cast<size_t>(n)]->name,
                     "tessera: node kept draining for pod " + holder + ", which waits for " +
                         std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs") + " and " +
                         cpu_text + " CPU on one node",
                     false, "reserved"};
}

}  // namespace tessera::extender
