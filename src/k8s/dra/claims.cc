// Reading a claim's allocation and our opaque configuration (see the header).
#include "k8s/dra/claims.h"

#include <algorithm>
#include <map>

#include "k8s/quantity.h"

namespace tessera::k8s::dra {
namespace {

std::string Quote(const Json& v) {
  return v.is_string() ? "\"" + v.get<std::string>() + "\"" : v.dump();
}

// Whether a config entry with `requests` applies to the result of request `request`
// ("req" or "req/sub"): an empty list applies to all, a name to the request or its subrequest.
bool Applies(const Json& requests, const std::string& request) {
  if (!requests.is_array() || requests.empty()) return true;
  const std::string parent = request.substr(0, request.find('/'));
  for (const Json& r : requests) {
    if (r.is_string() && (r.get<std::string>() == request || r.get<std::string>() == parent)) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<GpuConfig> ParseGpuConfig(const Json& p, const std::string& where) {
  auto fail = [&](const std::string& field, const Json& value, const std::string& allowed) {
    return Result<GpuConfig>::Error(where + "." + field + "=" + Quote(value) + ": " + allowed);
  };
  if (!p.is_object()) {
    return Result<GpuConfig>::Error(where + "=" + Quote(p) + ": expected an object of apiVersion " +
                                    kConfigApiVersion + ", kind " + kConfigKind);
  }
  const Json api = p.value("apiVersion", Json());
  if (api != kConfigApiVersion) {
    return fail("apiVersion", api, std::string("expected ") + kConfigApiVersion);
  }
  const Json kind = p.value("kind", Json());
  if (kind != kConfigKind) return fail("kind", kind, std::string("expected ") + kConfigKind);
  GpuConfig out;
  for (const auto& [key, value] : p.items()) {
    if (key == "apiVersion" || key == "kind") continue;
    if (key == "weight") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 256) {
        return fail(key, value,
                    "expected a whole number from 1 to 256 (at most the GPUs' max_inst)");
      }
      out.weight = static_cast<uint32_t>(value.get<int64_t>());
    } else if (key == "highPriority") {
      if (!value.is_boolean()) return fail(key, value, "expected true or false");
      out.high_priority = value.get<bool>();
    } else {
      return fail(key, value,
                  "unknown field; " + std::string(kConfigKind) + " has weight and highPriority");
    }
  }
  return out;
}

Result<ClaimPlan> PlanClaim(const Json& claim, const ClaimRef& ref, const std::string& pool,
                            NodeMode mode, const std::vector<PublishedDevice>& devices,
                            uint32_t max_weight) {
  const std::string who = ref.Describe();
  auto fail = [&](const std::string& why) { return Result<ClaimPlan>::Error(who + ": " + why); };
  auto field = [&](const std::string& path, const Json& value, const std::string& why) {
    return fail(path + "=" + Quote(value) + ": " + why);
  };
  if (!claim.is_object() || !claim.contains("metadata"))
    return fail("the API server's answer is no object");
  const Json& meta = claim["metadata"];
  if (meta.value("uid", "") != ref.uid) {
    return field("metadata.uid", meta.value("uid", ""),
                 "kubelet asked for uid " + ref.uid + " (the claim was deleted and made again?)");
  }
  const Json* allocation = nullptr;
  if (claim.contains("status") && claim["status"].is_object() &&
      claim["status"].contains("allocation") && claim["status"]["allocation"].is_object()) {
    allocation = &claim["status"]["allocation"];
  }
  if (allocation == nullptr) return fail("status.allocation is empty: the claim is not allocated");
  const Json results = allocation->contains("devices")
                           ? (*allocation)["devices"].value("results", Json::array())
                           : Json::array();
  const Json configs = allocation->contains("devices")
                           ? (*allocation)["devices"].value("config", Json::array())
                           : Json::array();
  ClaimPlan plan;
  plan.ref = ref;
  std::map<std::string, size_t> gpu_of;  // uuid -> index in plan.gpus
  for (size_t i = 0; i < results.size(); ++i) {
    const Json& r = results[i];
    const std::string at = "status.allocation.devices.results[" + std::to_string(i) + "]";
    if (!r.is_object() || r.value("driver", "") != kDriverName) continue;
    const std::string request = r.value("request", "");
    if (r.value("pool", "") != pool) {
      return field(at + ".pool", r.value("pool", Json()), "this node's pool is " + pool);
    }
    const std::string name = r.value("device", "");
    auto d = std::find_if(devices.begin(), devices.end(),
                          [&](const PublishedDevice& p) { return p.name == name; });
    if (d == devices.end()) {
      std::string have;
      for (const PublishedDevice& p : devices) have += (have.empty() ? "" : ", ") + p.name;
      return field(
          at + ".device", r.value("device", Json()),
          "no such device in pool " + pool + " (it has " + (have.empty() ? "none" : have) + ")");
    }
    if (r.value("adminAccess", false)) {
      return field(at + ".adminAccess", true, "gpu.tessera.io gives no administrative access");
    }
    ClaimDevice cd;
    cd.request = request;
    cd.pool = pool;
    cd.device = name;
    cd.uuid = d->gpu.uuid;
    if (r.contains("shareID") && r["shareID"].is_string())
      cd.share_id = r["shareID"].get<std::string>();
    // What the result consumes: what the scheduler wrote, or the whole device.
    const int64_t device_memory = static_cast<int64_t>(d->gpu.memory.count());
    int64_t memory = d->shared ? d->memory_max : device_memory;
    int cores = 100;
    bool whole = true;
    const Json consumed = r.value("consumedCapacity", Json::object());
    if (d->shared && consumed.is_object() && !consumed.empty()) {
      whole = false;
      for (const auto& [cap, value] : consumed.items()) {
        const std::string path = at + ".consumedCapacity." + cap;
        if (cap != kCapacityMemory && cap != kCapacityCores) {
          return field(path, value, "device " + name + " has no such capacity (memory, cores)");
        }
        if (cap == kCapacityCores && !d->has_cores) {
          return field(path, value,
                       "node mode " + std::string(NodeModeName(mode)) +
                           " does not divide GPU time; device " + name + " has no cores");
        }
        auto q = value.is_string()
                     ? Quantity::Parse(value.get<std::string>(), path)
                     : Result<Quantity>::Error(path + "=" + Quote(value) + ": expected a quantity");
        if (!q.ok()) return fail(q.error());
        auto v = q->Scaled(0, path);
        if (!v.ok()) return fail(v.error());
        if (cap == kCapacityMemory) {
          if (*v < kMemoryStep || *v > device_memory) {
            return field(path, value,
                         "device " + name + " gives from " + FormatBinaryQuantity(kMemoryStep) +
                             " to " + FormatBinaryQuantity(device_memory));
          }
          memory = *v;
        } else {
          if (*v < 1 || *v > 100)
            return field(path, value, "expected 1 to 100 (percent of the GPU's time)");
          cores = static_cast<int>(*v);
        }
      }
    }
    auto [it, fresh] = gpu_of.emplace(cd.uuid, plan.gpus.size());
    if (fresh) {
      plan.gpus.push_back(
          {cd.uuid, d->gpu.index, Bytes(static_cast<uint64_t>(memory)), cores, whole});
    } else {
      // A second share of the same GPU in this claim: they add up.
      ClaimGpu& g = plan.gpus[it->second];
      if (g.whole || whole) {
        return field(at + ".device", name, "the claim already has all of device " + name);
      }
      g.memory = Bytes(g.memory.count() + static_cast<uint64_t>(memory));
      g.cores += cores;
      if (static_cast<int64_t>(g.memory.count()) > device_memory || g.cores > 100) {
        return field(
            at + ".consumedCapacity", consumed,
            "with the claim's other shares of " + name + " it asks more than the device has");
      }
    }
    plan.devices.push_back(std::move(cd));
  }
  if (plan.devices.empty()) {
    return fail("status.allocation.devices.results names no device of driver " +
                std::string(kDriverName));
  }
  // One tesserad container per claim: one GPU-time share for all its GPUs.
  for (const ClaimGpu& g : plan.gpus) {
    if (g.cores != plan.gpus[0].cores) {
      return fail("status.allocation.devices.results: cores " + std::to_string(plan.gpus[0].cores) +
                  " on " + plan.gpus[0].uuid + " but " + std::to_string(g.cores) + " on " + g.uuid +
                  "; tesserad gives a claim one GPU-time share on all its GPUs");
    }
  }
  if (mode == NodeMode::kMig && plan.gpus.size() > 1) {
    return fail("status.allocation.devices.results: " + std::to_string(plan.gpus.size()) +
                " MIG devices; a CUDA process uses one MIG device, so a claim gets one");
  }
  if (mode == NodeMode::kMps && plan.gpus.size() > 1) {
    return fail("status.allocation.devices.results: " + std::to_string(plan.gpus.size()) +
                " GPUs on an mps node, which gives a claim one GPU (that GPU's MPS server)");
  }
  // Our opaque configuration, class entries first, then the claim's; a later entry wins.
  std::optional<std::string> weight_from, prio_from;
  for (size_t i = 0; i < configs.size(); ++i) {
    const Json& c = configs[i];
    const std::string at = "status.allocation.devices.config[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("opaque") || !c["opaque"].is_object() ||
        c["opaque"].value("driver", "") != kDriverName) {
      continue;
    }
    const Json requests = c.value("requests", Json::array());
    std::vector<std::string> applies_to;
    for (const ClaimDevice& d : plan.devices) {
      if (Applies(requests, d.request)) applies_to.push_back(d.request);
    }
    if (applies_to.empty()) continue;
    auto config =
        ParseGpuConfig(c["opaque"].value("parameters", Json()), at + ".opaque.parameters");
    if (!config.ok()) return fail(config.error());
    // Entries for different requests of one claim must agree (it is one container).
    const bool all = applies_to.size() == plan.devices.size();
    if (config->weight) {
      if (*config->weight > max_weight) {
        return field(at + ".opaque.parameters.weight", *config->weight,
                     "expected 1 to " + std::to_string(max_weight) + " (the GPUs' max_inst)");
      }
      if (!all && weight_from && plan.weight != *config->weight) {
        return field(at + ".opaque.parameters.weight", *config->weight,
                     *weight_from + " gives weight " + std::to_string(plan.weight) +
                         " to other requests of the claim, which is one tesserad container");
      }
      plan.weight = *config->weight;
      weight_from = at;
    }
    if (config->high_priority) {
      if (!all && prio_from && plan.high_priority != *config->high_priority) {
        return field(at + ".opaque.parameters.highPriority", *config->high_priority,
                     *prio_from + " says otherwise for other requests of the claim");
      }
      plan.high_priority = *config->high_priority;
      prio_from = at;
    }
  }
  return plan;
}

}  // namespace tessera::k8s::dra
