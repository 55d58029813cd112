// Reading what a pod and each of its containers ask of Tessera. No placement, no HTTP.
#include "k8s/pod_demand.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "k8s/annotations.h"
#include "k8s/quantity.h"

namespace tessera::k8s {

namespace {

struct CpuMem {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};

// `resource` from `requests`, else `limits` (Kubernetes defaults a missing request to the limit),
// scaled by 10^scale; 0 when neither gives it.
Result<int64_t> Amount(const std::map<std::string, std::string>& requests,
                       const std::map<std::string, std::string>& limits,
                       const std::string& resource, int scale, const std::string& who) {
  for (const auto& [list, list_name] :
       {std::pair{&requests, "requests"}, std::pair{&limits, "limits"}}) {
    auto it = list->find(resource);
    if (it == list->end()) continue;
    const std::string input = who + " " + list_name + " " + resource;
    auto q = Quantity::Parse(it->second, input);
    if (!q.ok()) return q.status();
    return q->Scaled(scale, input);
  }
  return int64_t{0};
}

Result<CpuMem> ReadCpuMem(const std::map<std::string, std::string>& requests,
                          const std::map<std::string, std::string>& limits,
                          const std::string& who) {
  CpuMem out;
  auto cpu = Amount(requests, limits, "cpu", 3, who);
  if (!cpu.ok()) return cpu.status();
  auto mem = Amount(requests, limits, "memory", 0, who);
  if (!mem.ok()) return mem.status();
  out.cpu_milli = *cpu;
  out.memory_bytes = *mem;
  return out;
}

std::map<std::string, std::string> Overhead(const Json& pod) {
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

uint64_t GpuRequest::Of(GpuResource resource) const {
  switch (resource) {
    case GpuResource::kMem:
      return mem_gib;
    case GpuResource::kCore:
      return core;
    case GpuResource::kCount:
      return count;
  }
  return 0;
}

Result<GpuRequest> GpuRequestOf(const ContainerView& container) {
  GpuRequest out;
  bool ours = false, ack = false;
  std::string mig_resource;  // the tessera.io/mig-... name asked, if any
  for (const auto& [name, quantity] : container.limits) {
    auto resource = GpuResourceOf(name);
    if (!resource && !IsMigResourceName(name)) continue;
    const std::string input = "container " + container.name + " limits " + name;
    auto value = ParseWholeQuantity(quantity, input);
    if (!value.ok()) return value.status();
    auto req = container.requests.find(name);
    if (req != container.requests.end()) {
      auto r = ParseWholeQuantity(req->second, "container " + container.name + " requests " + name);
      if (!r.ok()) return r.status();
      if (*r != *value) {
        return Result<GpuRequest>::Error(input + "=" + quantity + " differs from its request " +
                                         req->second +
                                         "; expected equal values (extended "
                                         "resources cannot be overcommitted)");
      }
    }
    if (!resource) {
      auto profile = MigProfileOfResource(name, "container " + container.name + " limits");
      if (!profile.ok()) return profile.status();
      if (*value != 1) {
        return Result<GpuRequest>::Error(input + "=" + quantity +
                                         ": expected 1 (one MIG instance per container: a CUDA "
                                         "process sees one MIG device)");
      }
      if (!mig_resource.empty()) {
        return Result<GpuRequest>::Error("container " + container.name + " asks " + mig_resource +
                                         " and " + name +
                                         "; expected one MIG instance per "
                                         "container (a CUDA process sees one MIG device)");
      }
      mig_resource = name;
      out.mig_profile = *profile;
      continue;
    }
    (IsAckResourceName(name) ? ack : ours) = true;
    switch (*resource) {
      case GpuResource::kMem:
        // 64 GPUs of 1 TiB: beyond any node, and small enough that MiB and bytes stay in 64 bits.
        if (*value < 1 || *value > 65536) {
          return Result<GpuRequest>::Error(input + "=" + quantity + ": expected 1 to 65536 GiB");
        }
        out.mem_gib = static_cast<uint64_t>(*value);
        break;
      case GpuResource::kCore:
        if (*value < 1 || *value > 100) {
          return Result<GpuRequest>::Error(input + "=" + quantity +
                                           ": expected a percentage of one GPU from 1 to 100");
        }
        if (IsAckResourceName(name) && *value % 5 != 0) {
          return Result<GpuRequest>::Error(input + "=" + quantity +
                                           ": expected a multiple of 5 (as ACK requires)");
        }
        out.core = static_cast<uint32_t>(*value);
        break;
      case GpuResource::kCount:
        if (*value < 1 || *value > 64) {
          return Result<GpuRequest>::Error(input + "=" + quantity + ": expected 1 to 64 GPUs");
        }
        out.count = static_cast<uint32_t>(*value);
        break;
    }
  }
  // A request of a Tessera resource without a limit is not how extended resources are written.
  for (const auto& [name, quantity] : container.requests) {
    if ((GpuResourceOf(name) || IsMigResourceName(name)) && container.limits.count(name) == 0) {
      return Result<GpuRequest>::Error("container " + container.name + " requests " + name + "=" +
                                       quantity + " without a limit; expected it under limits");
    }
  }
  if (ours && ack) {
    return Result<GpuRequest>::Error("container " + container.name +
                                     " mixes tessera.io/ and aliyun.com/ GPU resources; expected "
                                     "one spelling per container");
  }
  if (!mig_resource.empty() && (ours || ack)) {
    return Result<GpuRequest>::Error("container " + container.name + " asks " + mig_resource +
                                     " beside a GPU share (gpu-mem, gpu-core or gpu-count); "
                                     "expected either one MIG instance or a share");
  }
  out.ack = ack;
  return out;
}

PodDemand ReadPodDemand(const PodView& view, const Json& pod) {
  PodDemand out;
  const std::string pod_name = "pod " + view.Key();
  auto note = [](std::string& slot, const std::string& message) {
    if (slot.empty()) slot = message;
  };
  // As kube-scheduler counts (k8s.io/component-helpers resource.PodRequests): the app containers
  // and the native sidecars (restartable init containers) add up; each plain init container runs
  // beside the sidecars started before it; the pod needs the larger of the two.
  CpuMem apps, inits, sidecars;
  for (const ContainerView& c : view.containers) {
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
    auto gpu = GpuRequestOf(c);
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
  auto user = ParseUserAnnotations(view.annotations);
  if (!user.ok()) {
    note(out.demand_error, pod_name + ": annotation " + user.error());
  } else {
    out.allowed_models = user->gpu_models;
    out.allowed_modes = user->gpu_modes;
  }
  return out;
}

}  // namespace tessera::k8s
