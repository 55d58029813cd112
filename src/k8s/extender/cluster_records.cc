// Reading Nodes and Pods into ClusterState's records (cluster_records.h). No I/O.
#include "k8s/extender/cluster_records.h"

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

std::optional<uint64_t> VersionNumber(const std::string& rv) {
  uint64_t v = 0;
  if (ParseDigits(rv, &v) != DigitsError::kNone) return std::nullopt;
  return v;
}

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

namespace {

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

}  // namespace

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
  if (auto it = view->labels.find(k8s::kMigRecutLabel); it != view->labels.end()) {
    if (it->second == "true" || it->second == "false") {
      rec.mig_recut = it->second == "true";
    } else {
      note(who + ": label " + k8s::kMigRecutLabel + "=\"" + it->second +
           "\": expected true or false");
    }
  }
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

}  // namespace tessera::extender
