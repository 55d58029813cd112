// The pool's devices and the slices' contents (see the header).
#include "k8s/dra/slices.h"

#include <algorithm>
#include <cctype>

#include "k8s/quantity.h"
#include "mig/profiles.h"

namespace tessera::k8s::dra {
namespace {

Json StringAttribute(const std::string& value) { return {{"string", value.substr(0, 64)}}; }

Json RangePolicy(int64_t min, int64_t max, int64_t step, int64_t default_value, bool bytes) {
  auto q = [bytes](int64_t v) {
    return bytes ? FormatBinaryQuantity(v) : FormatDecimalQuantity(v);
  };
  return {{"default", q(default_value)},
          {"validRange", {{"min", q(min)}, {"max", q(max)}, {"step", q(step)}}}};
}

// The MIG tables' profile of a MIG device, or nullptr.
const mig::MigProfile* ProfileOf(const InventoryMig& m, const mig::GpuModel** model_out) {
  auto model = mig::FindGpuModel(m.model, "mig.model");
  if (!model.ok()) return nullptr;
  auto profile = mig::FindProfile(**model, m.profile, "mig.profile");
  if (!profile.ok()) return nullptr;
  *model_out = *model;
  return *profile;
}

}  // namespace

std::vector<PublishedDevice> PoolDevices(NodeMode mode, const std::vector<NodeGpu>& gpus) {
  std::vector<PublishedDevice> out;
  std::vector<std::string> parents;  // MIG GPUs in order of first appearance
  for (const NodeGpu& g : gpus) {
    PublishedDevice d;
    d.gpu = g;
    const int64_t memory = static_cast<int64_t>(g.memory.count());
    if (mode == NodeMode::kMig) {
      const mig::GpuModel* model = nullptr;
      if (!g.mig || ProfileOf(*g.mig, &model) == nullptr) continue;
      auto it = std::find(parents.begin(), parents.end(), g.mig->gpu);
      if (it == parents.end()) it = parents.insert(parents.end(), g.mig->gpu);
      d.name =
          "gpu-" + std::to_string(it - parents.begin()) + "-mig-" + std::to_string(g.mig->start);
      d.memory_max = memory;
    } else if (mode == NodeMode::kExclusive) {
      d.name = "gpu-" + std::to_string(g.index);
      d.has_cores = true;
      d.memory_max = memory;
    } else {
      if (memory < 2 * kMemoryStep) continue;  // the range needs min + step <= the memory
      d.name = "gpu-" + std::to_string(g.index);
      d.shared = true;
      d.has_cores = mode != NodeMode::kMem;
      d.memory_max = memory / kMemoryStep * kMemoryStep;
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Json> PoolSlices(NodeMode mode, const std::vector<NodeGpu>& gpus,
                             const PoolOptions& options) {
  const std::vector<PublishedDevice> devices = PoolDevices(mode, gpus);
  const std::string driver_version = SemverOf(options.driver_version);
  Json device_list = Json::array();
  Json counter_sets = Json::array();
  std::map<std::string, std::string> counter_set_of;  // MIG GPU UUID -> its counter set
  for (const PublishedDevice& d : devices) {
    Json attributes = {{"type", StringAttribute(d.gpu.mig ? "mig" : "gpu")},
                       {"uuid", StringAttribute(d.gpu.uuid)},
                       {"index", {{"int", d.gpu.index}}},
                       {"productName", StringAttribute(d.gpu.model)},
                       {"mode", StringAttribute(std::string(NodeModeName(mode)))}};
    if (!driver_version.empty()) attributes["driverVersion"] = {{"version", driver_version}};
    Json capacity = Json::object();
    const int64_t memory = static_cast<int64_t>(d.gpu.memory.count());
    if (d.shared) {
      capacity[kCapacityMemory] = {{"value", FormatBinaryQuantity(memory)},
                                   {"requestPolicy", RangePolicy(kMemoryStep, d.memory_max,
                                                                 kMemoryStep, d.memory_max, true)}};
      if (d.has_cores) {
        capacity[kCapacityCores] = {{"value", "100"},
                                    {"requestPolicy", RangePolicy(1, 100, 1, 100, false)}};
      }
    } else {
      capacity[kCapacityMemory] = {{"value", FormatBinaryQuantity(memory)}};
      if (d.has_cores) capacity[kCapacityCores] = {{"value", "100"}};
    }
    Json device = {{"name", d.name}, {"attributes", attributes}, {"capacity", capacity}};
    if (d.shared) device["allowMultipleAllocations"] = true;
    if (d.gpu.mig) {
      const mig::GpuModel* model = nullptr;
      const mig::MigProfile* profile = ProfileOf(*d.gpu.mig, &model);
      device["attributes"]["profile"] = StringAttribute(d.gpu.mig->profile);
      device["attributes"]["parentUUID"] = StringAttribute(d.gpu.mig->gpu);
      device["attributes"]["migModel"] = StringAttribute(d.gpu.mig->model);
      if (options.mig_counters) {
        auto known = counter_set_of.find(d.gpu.mig->gpu);
        if (known == counter_set_of.end()) {
          // The counter set of the GPU: one counter per memory slice.
          const std::string name = d.name.substr(0, d.name.find("-mig-")) + "-memory-slices";
          Json counters = Json::object();
          for (int s = 0; s < model->memory_slices; ++s) {
            counters["memory-slice-" + std::to_string(s)] = {{"value", "1"}};
          }
          counter_sets.push_back({{"name", name}, {"counters", counters}});
          known = counter_set_of.emplace(d.gpu.mig->gpu, name).first;
        }
        Json consumed = Json::object();
        for (int s = d.gpu.mig->start; s < d.gpu.mig->start + profile->memory_slices; ++s) {
          consumed["memory-slice-" + std::to_string(s)] = {{"value", "1"}};
        }
        device["consumesCounters"] =
            Json::array({{{"counterSet", known->second}, {"counters", consumed}}});
      }
    }
    device_list.push_back(std::move(device));
  }
  std::vector<Json> out;
  if (device_list.empty()) return out;  // no devices: no pool
  // Counter sets and devices may not share a slice; the counters' slice comes first.
  if (!counter_sets.empty()) out.push_back({{"sharedCounters", counter_sets}});
  out.push_back({{"devices", device_list}});
  return out;
}

std::vector<CurrentPool> CurrentPools(const std::vector<Json>& slices) {
  std::map<std::pair<std::string, std::string>, std::vector<const Json*>> by_pool;
  for (const Json& s : slices) {
    const Json& spec = s["spec"];
    auto& list = by_pool[{spec.value("driver", ""), spec["pool"].value("name", "")}];
    const int64_t gen = spec["pool"].value("generation", int64_t{0});
    if (!list.empty()) {
      const int64_t have = (*list[0])["spec"]["pool"].value("generation", int64_t{0});
      if (gen < have) continue;
      if (gen > have) list.clear();
    }
    list.push_back(&s);
  }
  std::vector<CurrentPool> out;
  for (auto& [key, list] : by_pool) {
    std::sort(list.begin(), list.end(), [](const Json* a, const Json* b) {
      return (*a)["metadata"].value("name", "") < (*b)["metadata"].value("name", "");
    });
    const int64_t count = (*list[0])["spec"]["pool"].value("resourceSliceCount", int64_t{1});
    out.push_back({key.first, key.second, list, static_cast<int64_t>(list.size()) == count});
  }
  return out;
}

std::string SemverOf(const std::string& version) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : version) {
    if (c == '.') {
      parts.push_back(cur);
      cur.clear();
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      cur += c;
    } else {
      return "";
    }
  }
  parts.push_back(cur);
  if (parts.size() < 2 || parts.size() > 3) return "";
  while (parts.size() < 3) parts.push_back("0");
  std::string out;
  for (std::string& p : parts) {
    if (p.empty() || p.size() > 18) return "";
    p.erase(0, std::min(p.find_first_not_of('0'), p.size() - 1));  // no leading zeros
    out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

void CanonicalizeQuantities(Json* spec) {
  auto canonical = [](Json& q, bool bytes) {
    if (!q.is_string()) return;
    auto parsed = Quantity::Parse(q.get<std::string>(), "quantity");
    if (!parsed.ok()) return;
    auto whole = parsed->Whole("quantity");
    if (!whole.ok()) return;  // a fraction stays as written
    q = bytes ? FormatBinaryQuantity(*whole) : FormatDecimalQuantity(*whole);
  };
  auto counters = [&](Json& map) {
    if (!map.is_object()) return;
    for (auto& [name, c] : map.items()) {
      if (c.is_object() && c.contains("value")) canonical(c["value"], false);
    }
  };
  if (spec->contains("devices") && (*spec)["devices"].is_array()) {
    for (Json& d : (*spec)["devices"]) {
      if (d.contains("capacity") && d["capacity"].is_object()) {
        for (auto& [name, cap] : d["capacity"].items()) {
          const bool bytes = name == kCapacityMemory;
          if (!cap.is_object()) continue;
          if (cap.contains("value")) canonical(cap["value"], bytes);
          if (!cap.contains("requestPolicy") || !cap["requestPolicy"].is_object()) continue;
          Json& p = cap["requestPolicy"];
          if (p.contains("default")) canonical(p["default"], bytes);
          if (p.contains("validValues") && p["validValues"].is_array()) {
            for (Json& v : p["validValues"]) canonical(v, bytes);
          }
          if (p.contains("validRange") && p["validRange"].is_object()) {
            for (const char* k : {"min", "max", "step"}) {
              if (p["validRange"].contains(k)) canonical(p["validRange"][k], bytes);
            }
          }
        }
      }
      if (d.contains("consumesCounters") && d["consumesCounters"].is_array()) {
        for (Json& c : d["consumesCounters"]) {
          if (c.is_object() && c.contains("counters")) counters(c["counters"]);
        }
      }
    }
  }
  if (spec->contains("sharedCounters") && (*spec)["sharedCounters"].is_array()) {
    for (Json& s : (*spec)["sharedCounters"]) {
      if (s.is_object() && s.contains("counters")) counters(s["counters"]);
    }
  }
}

}  // namespace tessera::k8s::dra
