// Reading what a pod asks of a node. No placement, no HTTP.
#include "k8s/extender/pod_demand.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "k8s/annotations.h"
#include "k8s/quantity.h"

namespace tessera::extender {

namespace {

struct CpuMem {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};

// `resource` from `requests`, else `limits` (Kubernetes defaults a missing request to the limit),
// scaled by 10^scale; 0 when neither gives it.
Result<int64_t> Amount(const std::map<std::string, std::string>& requests,
                       const std::map<std::string, std::string>& limits, const std::string& resource,
                       int scale, const std::string& who) {
  for (const auto& [list, list_name] :
       {std::pair{&requests, "requests"}, std::pair{&limits, "limits"}}) {
    auto it = list->find(resource);
    if (it == list->end()) continue;
    const std::string input = who + " " + list_name + " " + resource;
    auto q = k8s::Quantity::Parse(it->second, input);
    if (!q.ok()) return q.status();
    return q->Scaled(scale, input);
  }
  return int64_t{0};
}

Result<CpuMem> ReadCpuMem(const std::map<std::string, std::string>& requests,
                          const std::map<std::string, std::string>& limits, const std::string& who) {
  CpuMem out;
  auto cpu = Amount(requests, limits, "cpu", 3, who);
  if (!cpu.ok()) return cpu.status();
  auto mem = Amount(requests, limits, "memory", 0, who);
  if (!mem.ok()) return mem.status();
  out.cpu_milli = *cpu;
  out.memory_bytes = *mem;
  return out;
}

std::map<std::string, std::string> Overhead(const k8s::Json& pod) {
  std::map<std::string, std::string> out;
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return out;
  auto overhead = spec->find("overhead");
  if (overhead == spec->end() || !overhead->is_object()) return out;
  for (auto it = overhead->begin(); it != overhead->end(); ++it) {
    out[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  }
  return out;
}

}  // namespace

PodDemand ReadPodDemand(const k8s::PodView& view, const k8s::Json& pod) {
  PodDemand out;
  const std::string pod_name = "pod " + view.Key();
  auto note = [](std::string& slot, const std::string& message) {
    if (slot.empty()) slot = message;
  };
  // As kube-scheduler counts (k8s.io/component-helpers resource.PodRequests): the app containers
  // and the native sidecars (restartable init containers) add up; each plain init container runs
  // beside the sidecars started before it; the pod needs the larger of the two.
  CpuMem apps, inits, sidecars;
  for (const k8s::ContainerView& c : view.containers) {
    const std::string who =
        pod_name + (c.init ? " init container \"" : " container \"") + c.name + "\"";
    auto cm = ReadCpuMem(c.requests, c.limits, who);
    if (!cm.ok()) {
      note(out.requests_error, cm.error());
    } else if (c.restartable) {
      apps.cpu_milli += cm->cpu_milli;
      apps.memory_bytes += cm->memory_bytes;
      sidecars.cpu_milli += cm->cpu_milli;
      sidecars.memory_bytes += cm->memory_bytes;
      inits.cpu_milli = std::max(inits.cpu_milli, sidecars.cpu_milli);
      inits.memory_bytes = std::max(inits.memory_bytes, sidecars.memory_bytes);
    } else if (c.init) {
      inits.cpu_milli = std::max(inits.cpu_milli, cm->cpu_milli + sidecars.cpu_milli);
      inits.memory_bytes = std::max(inits.memory_bytes, cm->memory_bytes + sidecars.memory_bytes);
    } else {
      apps.cpu_milli += cm->cpu_milli;
      apps.memory_bytes += cm->memory_bytes;
    }
    auto gpu = k8s::GpuRequestOf(c);
    if (!gpu.ok()) {
      note(out.demand_error, pod_name + ": " + gpu.error());
      continue;
    }
    if (!gpu->any()) continue;
    ContainerAsk ask;
    ask.name = c.name;
    ask.init = c.init;
    ask.gpu_count = static_cast<int>(gpu->Gpus());
    ask.core_percent = static_cast<int>(gpu->core);
    ask.mem_mib = static_cast<int64_t>(gpu->mem_gib) * 1024 / ask.gpu_count;
    ask.mig_profile = gpu->mig_profile;
    ask.gpu = *gpu;
    out.asks.push_back(std::move(ask));
  }
  out.cpu_milli = std::max(apps.cpu_milli, inits.cpu_milli);
  out.memory_bytes = std::max(apps.memory_bytes, inits.memory_bytes);
  if (auto overhead = Overhead(pod); !overhead.empty()) {
    auto cm = ReadCpuMem(overhead, {}, pod_name + " spec.overhead");
    if (!cm.ok()) {
      note(out.requests_error, cm.error());
    } else {
      out.cpu_milli += cm->cpu_milli;
      out.memory_bytes += cm->memory_bytes;
    }
  }
  auto user = k8s::ParseUserAnnotations(view.annotations);
  if (!user.ok()) {
    note(out.demand_error, pod_name + ": annotation " + user.error());
  } else {
    out.allowed_models = user->gpu_models;
  }
  return out;
}

}  // namespace tessera::extender
