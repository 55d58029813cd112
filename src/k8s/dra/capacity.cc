// Consumable capacity's rules (see the header).
#include "k8s/dra/capacity.h"

#include "k8s/quantity.h"

namespace tessera::k8s::dra {
namespace {

// Quantity.Value(): whole units, rounded up.
int64_t Units(int64_t milli) { return milli >= 0 ? (milli + 999) / 1000 : -((-milli) / 1000); }

}  // namespace

std::string AmountText(int64_t milli) {
  if (milli % 1000 != 0) return std::to_string(milli) + "m";
  return FormatBinaryQuantity(milli / 1000);
}

Result<Amount> ParseAmount(const Json& q, const std::string& what) {
  if (!q.is_string() && !q.is_number_integer()) {
    return Result<Amount>::Error(what + "=" + q.dump() + ": expected a quantity such as 4Gi or 30");
  }
  const std::string text = q.is_string() ? q.get<std::string>() : q.dump();
  auto parsed = Quantity::Parse(text, what);
  if (!parsed.ok()) return parsed.status();
  auto milli = parsed->Scaled(3, what);
  if (!milli.ok()) return milli.status();
  return Amount{*milli, text};
}

Result<Capacities> ParseCapacities(const Json& capacity, const std::string& device) {
  Capacities out;
  if (!capacity.is_object()) return out;
  for (const auto& [name, c] : capacity.items()) {
    const std::string at = "device " + device + " capacity " + name;
    DeviceCapacity dc;
    auto value = ParseAmount(c.value("value", Json()), at + ".value");
    if (!value.ok()) return value.status();
    dc.value = *value;
    if (c.contains("requestPolicy") && c["requestPolicy"].is_object()) {
      const Json& p = c["requestPolicy"];
      CapacityPolicy policy;
      if (p.contains("default") && !p["default"].is_null()) {
        auto d = ParseAmount(p["default"], at + ".requestPolicy.default");
        if (!d.ok()) return d.status();
        policy.default_value = *d;
      }
      for (const Json& v : p.value("validValues", Json::array())) {
        auto a = ParseAmount(v, at + ".requestPolicy.validValues");
        if (!a.ok()) return a.status();
        policy.valid_values.push_back(*a);
      }
      if (p.contains("validRange") && p["validRange"].is_object()) {
        const Json& r = p["validRange"];
        CapacityPolicy::Range range;
        if (r.contains("min") && !r["min"].is_null()) {
          auto m = ParseAmount(r["min"], at + ".requestPolicy.validRange.min");
          if (!m.ok()) return m.status();
          range.min = *m;
        }
        for (const char* k : {"max", "step"}) {
          if (!r.contains(k) || r[k].is_null()) continue;
          auto a = ParseAmount(r[k], at + ".requestPolicy.validRange." + k);
          if (!a.ok()) return a.status();
          (std::string(k) == "max" ? range.max : range.step) = *a;
        }
        policy.valid_range = range;
      }
      dc.policy = policy;
    }
    out[name] = dc;
  }
  return out;
}

Result<Consumption> ParseCapacityRequests(const Json& request, const std::string& what) {
  Consumption out;
  if (!request.contains("capacity") || !request["capacity"].is_object()) return out;
  const Json asked = request["capacity"].value("requests", Json::object());
  for (const auto& [name, q] : asked.items()) {
    auto a = ParseAmount(q, what + ".capacity.requests." + name);
    if (!a.ok()) return a.status();
    out[name] = *a;
  }
  return out;
}

Amount ConsumedOf(const std::optional<Amount>& requested, const DeviceCapacity& capacity) {
  if (!requested) {
    if (capacity.policy && capacity.policy->default_value) return *capacity.policy->default_value;
    return capacity.value;
  }
  if (!capacity.policy) return *requested;
  const CapacityPolicy& p = *capacity.policy;
  if (p.valid_range) {  // upstream reads a range with a min, which validation requires
    const CapacityPolicy::Range& r = *p.valid_range;
    if (requested->milli < r.min.milli) return r.min;
    if (!r.step) return *requested;
    const int64_t step = Units(r.step->milli), min = Units(r.min.milli);
    const int64_t added = Units(requested->milli) - min;
    int64_t n = added / step;
    if (added % step != 0) ++n;
    const int64_t value = min + step * n;
    return Amount{value * 1000, FormatBinaryQuantity(value)};
  }
  if (!p.valid_values.empty()) {
    for (const Amount& v : p.valid_values) {
      if (requested->milli <= v.milli) return v;
    }
  }
  return *requested;
}

bool ViolatesPolicy(const Amount& consumed, const std::optional<CapacityPolicy>& policy) {
  if (!policy) return false;
  if (policy->default_value && consumed.milli == policy->default_value->milli) return false;
  if (policy->valid_range) {
    const CapacityPolicy::Range& r = *policy->valid_range;
    if (r.max && consumed.milli > r.max->milli) return true;
    if (r.step) {
      const int64_t step = Units(r.step->milli);
      return step != 0 && (Units(consumed.milli) - Units(r.min.milli)) % step != 0;
    }
    return false;
  }
  if (!policy->valid_values.empty()) {
    for (const Amount& v : policy->valid_values) {
      if (v.milli == consumed.milli) return false;
    }
    return true;
  }
  return false;
}

Consumption ConsumedCapacity(const Consumption& requests, const Capacities& capacities) {
  Consumption out;
  for (const auto& [name, cap] : capacities) {
    auto it = requests.find(name);
    out[name] =
        ConsumedOf(it == requests.end() ? std::nullopt : std::optional<Amount>(it->second), cap);
  }
  return out;
}

Result<bool> FitsCapacity(const Consumption& in_use, const Consumption& requests,
                          const Capacities& capacities, const Consumption& allocating) {
  for (const auto& [name, q] : requests) {
    if (capacities.count(name) == 0)
      return Result<bool>::Error("some requested capacity has not been defined");
  }
  for (const auto& [name, cap] : capacities) {
    auto it = requests.find(name);
    const Amount consumed =
        ConsumedOf(it == requests.end() ? std::nullopt : std::optional<Amount>(it->second), cap);
    if (ViolatesPolicy(consumed, cap.policy)) return false;
    int64_t total = consumed.milli;
    if (auto u = in_use.find(name); u != in_use.end()) total += u->second.milli;
    if (auto a = allocating.find(name); a != allocating.end()) total += a->second.milli;
    if (total > cap.value.milli) return false;
  }
  return true;
}

}  // namespace tessera::k8s::dra
