// ClusterState's holds (cluster_state_impl.h): each decision on the books applied to the Cluster,
// replaced, dropped, retried where room was made, observed from the API server and swept when a
// reservation lapses; and the bind plan of a binding hold. No I/O.
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

pl::Request ClusterState::Impl::PartRequest(const NodeRec& rec, const GpuPart& part) {
  pl::Request r;
  r.gpu_count = 1;
  const int64_t cap = static_cast<int64_t>(rec.gpus.front().memory.count());
  const bool whole =
      (part.core_percent >= 100 && rec.mode != k8s::NodeMode::kMem) || part.mem_bytes >= cap;
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

void ClusterState::Impl::Place(Hold& h, const pl::Request& r, const pl::Assignment& a,
                               const std::string& what) {
  Status s = cluster->Place(r, a, h.started_s);
  if (s.ok()) {
    h.applied.emplace_back(r, a);
    return;
  }
  ++conflicts;
  if (h.conflict.empty()) h.conflict = what + ": " + s.message();
}

void ClusterState::Impl::Apply(Hold& h) {
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

void ClusterState::Impl::ApplyMigPart(Hold& h, const NodeRec& rec, int n,
                                      const std::string& container, const GpuPart& part) {
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

void ClusterState::Impl::Unapply(Hold& h) {
  ++changes;
  if (h.epoch == epoch && cluster) {
    for (auto it = h.applied.rbegin(); it != h.applied.rend(); ++it) {
      (void)cluster->Remove(it->first, it->second, h.started_s);
    }
  }
  h.applied.clear();
}

void ClusterState::Impl::Drop(const std::string& uid) {
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

void ClusterState::Impl::Retry(const std::string& node) {
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

void ClusterState::Impl::Put(const std::string& uid, Hold h) {
  // A pod keeps the start of its first hold (a reservation, then the bind, then the bound pod).
  auto earlier = holds.find(uid);
  h.started_s = earlier != holds.end() ? earlier->second.started_s : Seconds(clock.Now());
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

std::optional<Hold> ClusterState::Impl::Observed(const PodRec& rec) const {
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
        part.gpus.push_back({g.uuid, g.core.value(), static_cast<int64_t>(g.mem.count())});
      }
      h.containers.push_back(std::move(part));
    }
  }
  return h;
}

void ClusterState::Impl::Observe(const PodRec& rec) {
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

void ClusterState::Impl::SweepReservations() {
  const Nanos now = clock.Now();
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

BindPlan ClusterState::Impl::Plan(const PodRec& rec, Hold& h) {
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
      ca.gpus.push_back(
          {g.uuid, Bytes(static_cast<uint64_t>(g.mem_bytes)), *Percent::FromInt(g.core_percent)});
    }
    plan.assignment.containers.push_back(std::move(ca));
  }
  return plan;
}

}  // namespace tessera::extender
