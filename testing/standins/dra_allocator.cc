// DraAllocator: the stand-in structured allocator (see the header).
#include "testing/standins/dra_allocator.h"

#include <algorithm>

#include "k8s/dra/allocation.h"
#include "k8s/dra/slices.h"

namespace tessera::k8s {

using dra::Amount;
using dra::Consumption;

struct DraAllocator::Device {
  DeviceId id;
  dra::CelDevice cel;
  dra::Capacities capacities;
  bool shared = false;
  // counter set -> counter -> milli-units consumed
  std::map<std::string, std::map<std::string, int64_t>> counters;
  Json attributes;
  const Pool* pool = nullptr;
};

struct DraAllocator::Pool {
  std::string driver, name;
  std::string node;  // spec.nodeName
  bool all_nodes = false;
  Json node_selector;  // spec.nodeSelector
  bool incomplete = false;
  std::vector<Device> devices;
  std::map<std::string, std::map<std::string, int64_t>> counter_sets;
};

namespace {

// An attribute by its fully qualified name; an unqualified name is in the driver's domain.
const Json* Attribute(const DraAllocator::Device& d, const std::string& qualified) {
  if (d.attributes.contains(qualified)) return &d.attributes[qualified];
  const size_t slash = qualified.find('/');
  if (slash != std::string::npos && qualified.substr(0, slash) == d.id.driver) {
    const std::string bare = qualified.substr(slash + 1);
    if (d.attributes.contains(bare)) return &d.attributes[bare];
  }
  return nullptr;
}

bool TermMatches(const Json& term, const DraAllocator::NodeInfo& node) {
  auto requirement = [&](const Json& r, bool field) {
    const std::string key = r.value("key", "");
    std::optional<std::string> value;
    if (field) {
      if (key == "metadata.name") value = node.name;
    } else if (auto it = node.labels.find(key); it != node.labels.end()) {
      value = it->second;
    }
    const std::string op = r.value("operator", "");
    std::set<std::string> values;
    for (const Json& v : r.value("values", Json::array())) values.insert(v.get<std::string>());
    if (op == "In") return value && values.count(*value) != 0;
    if (op == "NotIn") return !value || values.count(*value) == 0;
    if (op == "Exists") return value.has_value();
    if (op == "DoesNotExist") return !value.has_value();
    return false;
  };
  for (const Json& r : term.value("matchExpressions", Json::array())) {
    if (!requirement(r, false)) return false;
  }
  for (const Json& r : term.value("matchFields", Json::array())) {
    if (!requirement(r, true)) return false;
  }
  return true;
}

bool SelectorMatches(const Json& selector, const DraAllocator::NodeInfo& node) {
  for (const Json& term : selector.value("nodeSelectorTerms", Json::array())) {
    if (TermMatches(term, node)) return true;
  }
  return false;
}

}  // namespace

DraAllocator::DraAllocator() = default;
DraAllocator::~DraAllocator() = default;

void DraAllocator::SetSlices(const std::vector<Json>& slices) {
  pools_.clear();
  pools_by_node_.clear();
  shared_pools_.clear();
  matches_.clear();
  for (const dra::CurrentPool& current : dra::CurrentPools(slices)) {
    const std::vector<const Json*>& list = current.slices;
    auto pool = std::make_unique<Pool>();
    pool->driver = current.driver;
    pool->name = current.name;
    const Json& first = (*list[0])["spec"];
    pool->node = first.value("nodeName", "");
    pool->all_nodes = first.value("allNodes", false);
    pool->node_selector = first.value("nodeSelector", Json());
    pool->incomplete = !current.complete;
    for (const Json* s : list) {
      for (const Json& set : (*s)["spec"].value("sharedCounters", Json::array())) {
        auto& counters = pool->counter_sets[set.value("name", "")];
        const Json set_counters = set.value("counters", Json::object());
        for (const auto& [name, c] : set_counters.items()) {
          auto a = dra::ParseAmount(c.value("value", Json()), "counter");
          counters[name] = a.ok() ? a->milli : 0;
        }
      }
      for (const Json& d : (*s)["spec"].value("devices", Json::array())) {
        Device dev;
        dev.id = {pool->driver, pool->name, d.value("name", "")};
        dev.cel = dra::CelDevice::FromSliceDevice(pool->driver, d);
        auto caps = dra::ParseCapacities(d.value("capacity", Json::object()), dev.id.device);
        if (caps.ok()) dev.capacities = *caps;
        dev.shared = d.value("allowMultipleAllocations", false);
        dev.attributes = d.value("attributes", Json::object());
        for (const Json& c : d.value("consumesCounters", Json::array())) {
          auto& counters = dev.counters[c.value("counterSet", "")];
          const Json device_counters = c.value("counters", Json::object());
          for (const auto& [name, v] : device_counters.items()) {
            auto a = dra::ParseAmount(v.value("value", Json()), "counter");
            counters[name] = a.ok() ? a->milli : 0;
          }
        }
        pool->devices.push_back(std::move(dev));
      }
    }
    for (Device& d : pool->devices) d.pool = pool.get();
    const size_t index = pools_.size();
    if (!pool->node.empty()) {
      pools_by_node_[pool->node].push_back(index);
    } else {
      shared_pools_.push_back(index);
    }
    pools_.push_back(std::move(pool));
  }
}

void DraAllocator::SetClasses(const std::vector<Json>& classes) {
  classes_.clear();
  for (const Json& c : classes) classes_[c["metadata"].value("name", "")] = c;
  matches_.clear();
}

void DraAllocator::AddAllocation(const Json& allocation) {
  for (const Json& r :
       allocation.value("devices", Json::object()).value("results", Json::array())) {
    const DeviceId id{r.value("driver", ""), r.value("pool", ""), r.value("device", "")};
    if (!r.contains("shareID")) {
      ++whole_[id];
      continue;
    }
    ++shares_[id];
    const Json consumed = r.value("consumedCapacity", Json::object());
    for (const auto& [name, q] : consumed.items()) {
      auto a = dra::ParseAmount(q, name);
      if (a.ok()) consumed_[id][name].milli += a->milli;
    }
  }
}

void DraAllocator::RemoveAllocation(const Json& allocation) {
  for (const Json& r :
       allocation.value("devices", Json::object()).value("results", Json::array())) {
    const DeviceId id{r.value("driver", ""), r.value("pool", ""), r.value("device", "")};
    if (!r.contains("shareID")) {
      if (--whole_[id] <= 0) whole_.erase(id);
      continue;
    }
    const Json consumed = r.value("consumedCapacity", Json::object());
    for (const auto& [name, q] : consumed.items()) {
      auto a = dra::ParseAmount(q, name);
      if (a.ok()) consumed_[id][name].milli -= a->milli;
    }
    if (--shares_[id] <= 0) {
      shares_.erase(id);
      consumed_.erase(id);
    }
  }
}

std::vector<const DraAllocator::Pool*> DraAllocator::PoolsFor(const NodeInfo& node) {
  std::vector<const Pool*> out;
  if (auto it = pools_by_node_.find(node.name); it != pools_by_node_.end()) {
    for (size_t i : it->second) out.push_back(pools_[i].get());
  }
  for (size_t i : shared_pools_) {
    const Pool& p = *pools_[i];
    if (p.all_nodes || (!p.node_selector.is_null() && SelectorMatches(p.node_selector, node)))
      out.push_back(&p);
  }
  std::sort(out.begin(), out.end(), [](const Pool* a, const Pool* b) {
    return a->driver != b->driver ? a->driver < b->driver : a->name < b->name;
  });
  return out;
}

// One Allocate call.
struct DraAllocator::Search {
  struct Request {
    std::string name;  // as results name it: "req" or "req/sub"
    std::string parent;
    const Json* klass = nullptr;
    std::vector<std::string> selectors;  // the class's, then the request's
    Consumption capacity;
    bool all = false;
    size_t count = 1;
    std::vector<const Device*> all_devices;
  };
  struct Alternatives {
    std::vector<Request> options;  // one, or the subrequests of firstAvailable
    size_t chosen = 0;
  };
  struct Constraint {
    std::set<std::string> requests;  // empty: all
    std::string attribute;
    bool match = true;  // matchAttribute, else distinctAttribute
    std::vector<Json> values;
  };
  struct Chosen {
    const Device* device;
    std::string request;
    std::optional<std::string> share_id;
    Consumption consumed;
  };

  DraAllocator* a;
  const NodeInfo* node;
  const std::vector<Json>* claims;
  const DeviceFilter* filter;
  std::vector<const Pool*> pools;
  std::vector<std::vector<Alternatives>> requests;  // per claim
  std::vector<std::vector<Constraint>> constraints;
  std::vector<std::vector<Chosen>> results;
  std::map<DeviceId, std::set<size_t>> allocating_whole;
  std::map<DeviceId, Consumption> allocating_capacity;
  std::map<const Pool*, std::map<std::string, std::map<std::string, int64_t>>> counters_used;
  std::map<const Pool*, std::map<std::string, std::map<std::string, int64_t>>> counters_held;
  std::optional<std::string> error;

  Result<bool> Matches(const Device& d, const std::string& expr) {
    auto key = std::make_pair(&d, expr);
    auto it = a->matches_.find(key);
    if (it != a->matches_.end()) return it->second;
    auto program = a->cel_.Get(expr);
    Result<bool> r =
        program.ok() ? (*program)->Matches(d.cel) : Result<bool>::Error(program.error());
    a->matches_.emplace(key, r);
    return r;
  }

  // Selectors of the class, then the request's; a CEL error stops the allocation.
  bool Selectable(size_t claim, const Request& r, const Device& d) {
    for (const std::string& s : r.selectors) {
      auto m = Matches(d, s);
      if (!m.ok()) {
        error = "claim " + Name(claim) + ": selector on device " + d.id.Text() +
                ": CEL runtime error: " + m.error();
        return false;
      }
      if (!*m) return false;
    }
    return true;
  }

  std::string Name(size_t claim) const {
    const Json& m = (*claims)[claim]["metadata"];
    return m.value("namespace", "") + "/" + m.value("name", "");
  }

  bool InUse(const Device& d) const {
    auto w = allocating_whole.find(d.id);
    return a->whole_.count(d.id) != 0 || (w != allocating_whole.end() && !w->second.empty());
  }

  bool CapacityFits(const Request& r, const Device& d) {
    static const Consumption kNone;
    auto in_use = a->consumed_.find(d.id);
    auto allocating = allocating_capacity.find(d.id);
    auto fits = dra::FitsCapacity(
        in_use == a->consumed_.end() ? kNone : in_use->second, r.capacity, d.capacities,
        allocating == allocating_capacity.end() ? kNone : allocating->second);
    return fits.ok() && *fits;
  }

  // The pool's counters left after allocated devices; then whether `d` fits beside what this
  // search has taken.
  bool CountersFit(const Device& d) {
    if (d.counters.empty()) return true;
    const Pool* p = d.pool;
    if (counters_held.count(p) == 0) {
      auto& held = counters_held[p];
      for (const Device& other : p->devices) {
        if (a->whole_.count(other.id) == 0 && a->shares_.count(other.id) == 0) continue;
        for (const auto& [set, cs] : other.counters) {
          for (const auto& [name, v] : cs) held[set][name] += v;
        }
      }
    }
    for (const auto& [set, cs] : d.counters) {
      auto avail = p->counter_sets.find(set);
      if (avail == p->counter_sets.end()) return false;
      for (const auto& [name, v] : cs) {
        auto total = avail->second.find(name);
        if (total == avail->second.end()) return false;
        if (counters_held[p][set][name] + counters_used[p][set][name] + v > total->second)
          return false;
      }
    }
    return true;
  }

  bool ConstraintsAdd(size_t claim, const std::string& parent, const Device& d) {
    size_t added = 0;
    for (Constraint& c : constraints[claim]) {
      if (!c.requests.empty() && c.requests.count(parent) == 0) {
        ++added;
        continue;
      }
      const Json* v = Attribute(d, c.attribute);
      bool ok = v != nullptr;
      if (ok) {
        for (const Json& have : c.values) {
          ok = ok && (c.match ? have == *v : have != *v);
        }
      }
      if (!ok) {
        for (size_t i = 0; i < added; ++i) ConstraintRemove(claim, i, parent, d);
        return false;
      }
      c.values.push_back(*v);
      ++added;
    }
    return true;
  }
  void ConstraintRemove(size_t claim, size_t index, const std::string& parent, const Device& d) {
    Constraint& c = constraints[claim][index];
    if (!c.requests.empty() && c.requests.count(parent) == 0) return;
    if (Attribute(d, c.attribute) != nullptr && !c.values.empty()) c.values.pop_back();
  }

  // Takes `d` for request `r` of `claim`; the undo on success.
  std::optional<std::function<void()>> Take(size_t claim, const Request& r, const Device& d) {
    ++a->tries_;
    if (!d.shared && InUse(d)) return std::nullopt;
    if (d.shared && a->whole_.count(d.id) != 0) return std::nullopt;
    const bool capacity_in_use =
        a->consumed_.count(d.id) != 0 || allocating_capacity.count(d.id) != 0;
    if (!(d.shared && capacity_in_use) && !CountersFit(d)) return std::nullopt;
    if (!ConstraintsAdd(claim, r.parent.empty() ? r.name : r.parent, d)) return std::nullopt;
    Chosen chosen{&d, r.name, std::nullopt, {}};
    if (!d.shared) {
      allocating_whole[d.id].insert(claim);
    } else {
      if (!CapacityFits(r, d)) {
        for (size_t i = 0; i < constraints[claim].size(); ++i)
          ConstraintRemove(claim, i, r.parent.empty() ? r.name : r.parent, d);
        return std::nullopt;
      }
      chosen.consumed = dra::ConsumedCapacity(r.capacity, d.capacities);
      chosen.share_id = dra::NewShareId();
      for (const auto& [name, amount] : chosen.consumed)
        allocating_capacity[d.id][name].milli += amount.milli;
    }
    for (const auto& [set, cs] : d.counters) {
      for (const auto& [name, v] : cs) counters_used[d.pool][set][name] += v;
    }
    results[claim].push_back(chosen);
    const std::string parent = r.parent.empty() ? r.name : r.parent;
    return [this, claim, parent, &d, chosen] {
      for (size_t i = 0; i < constraints[claim].size(); ++i) ConstraintRemove(claim, i, parent, d);
      if (!d.shared) {
        allocating_whole[d.id].erase(claim);
      } else {
        for (const auto& [name, amount] : chosen.consumed)
          allocating_capacity[d.id][name].milli -= amount.milli;
        bool empty = true;
        for (const auto& [name, amount] : allocating_capacity[d.id])
          empty = empty && amount.milli == 0;
        if (empty) allocating_capacity.erase(d.id);
      }
      for (const auto& [set, cs] : d.counters) {
        for (const auto& [name, v] : cs) counters_used[d.pool][set][name] -= v;
      }
      results[claim].pop_back();
    };
  }

  bool Allowed(size_t claim, const Request& r, const Device& d) const {
    return *filter == nullptr || (*filter)(claim, r.name, d.id);
  }

  // allocateOne: device `index` of request `req` of claim `claim`, searching from `start`.
  bool One(size_t claim, size_t req, size_t index, std::pair<size_t, size_t> start) {
    if (error) return false;
    if (claim >= requests.size()) return true;
    if (req >= requests[claim].size()) return One(claim + 1, 0, 0, {0, 0});
    Alternatives& alts = requests[claim][req];
    if (index == 0 && alts.options.size() > 1) {
      for (size_t o = 0; o < alts.options.size(); ++o) {
        alts.chosen = o;
        if (OneOf(claim, req, 0, {0, 0})) return true;
        if (error) return false;
      }
      return false;
    }
    return OneOf(claim, req, index, start);
  }

  bool OneOf(size_t claim, size_t req, size_t index, std::pair<size_t, size_t> start) {
    const Request& r = requests[claim][req].options[requests[claim][req].chosen];
    if (r.all && r.all_devices.empty()) return false;
    const size_t need = r.all ? r.all_devices.size() : r.count;
    if (index >= need) return One(claim, req + 1, 0, {0, 0});
    if (r.all) {
      const Device& d = *r.all_devices[index];
      auto undo = Take(claim, r, d);
      if (!undo) return false;
      if (One(claim, req, index + 1, {0, 0})) return true;
      (*undo)();
      return false;
    }
    for (size_t p = start.first; p < pools.size(); ++p) {
      const Pool& pool = *pools[p];
      if (pool.incomplete) continue;
      for (size_t i = p == start.first ? start.second : 0; i < pool.devices.size(); ++i) {
        const Device& d = pool.devices[i];
        if (!d.shared && InUse(d)) continue;
        if (!Allowed(claim, r, d)) continue;
        if (!Selectable(claim, r, d)) {
          if (error) return false;
          continue;
        }
        if (d.shared && !CapacityFits(r, d)) continue;
        auto undo = Take(claim, r, d);
        if (!undo) continue;
        if (One(claim, req, index + 1, {p, i + 1})) return true;
        (*undo)();
        if (error) return false;
      }
    }
    return false;
  }
};

Result<std::optional<std::vector<Json>>> DraAllocator::Allocate(const NodeInfo& node,
                                                                const std::vector<Json>& claims,
                                                                const DeviceFilter& filter) {
  using Out = Result<std::optional<std::vector<Json>>>;
  Search s;
  s.a = this;
  s.node = &node;
  s.claims = &claims;
  s.filter = &filter;
  s.pools = PoolsFor(node);
  s.requests.resize(claims.size());
  s.constraints.resize(claims.size());
  s.results.resize(claims.size());
  for (size_t c = 0; c < claims.size(); ++c) {
    const Json devices = claims[c].value("spec", Json::object()).value("devices", Json::object());
    const std::string who = "claim " + s.Name(c);
    for (const Json& req : devices.value("requests", Json::array())) {
      const std::string name = req.value("name", "");
      Search::Alternatives alts;
      std::vector<std::pair<std::string, Json>> options;
      if (req.contains("exactly")) {
        options.emplace_back(name, req["exactly"]);
      } else {
        for (const Json& sub : req.value("firstAvailable", Json::array())) {
          options.emplace_back(name + "/" + sub.value("name", ""), sub);
        }
      }
      if (options.empty())
        return Out::Error(who + ", request " + name + ": neither exactly nor firstAvailable");
      for (const auto& [result_name, e] : options) {
        Search::Request r;
        r.name = result_name;
        r.parent = result_name == name ? "" : name;
        const std::string klass = e.value("deviceClassName", "");
        auto k = classes_.find(klass);
        if (k == classes_.end()) {
          return Out::Error(who + ", request " + result_name +
                            ": could not retrieve device class " + klass);
        }
        r.klass = &k->second;
        for (const Json& sel : k->second["spec"].value("selectors", Json::array())) {
          r.selectors.push_back(sel["cel"].value("expression", ""));
        }
        for (const Json& sel : e.value("selectors", Json::array())) {
          if (!sel.contains("cel"))
            return Out::Error(who + ", request " + result_name +
                              ": CEL expression empty (unsupported selector type?)");
          r.selectors.push_back(sel["cel"].value("expression", ""));
        }
        auto cap = dra::ParseCapacityRequests(e, who + ", request " + result_name);
        if (!cap.ok()) return cap.status();
        r.capacity = *cap;
        const std::string mode = e.value("allocationMode", "ExactCount");
        if (mode == "All") {
          r.all = true;
          for (const Pool* p : s.pools) {
            if (p->incomplete) {
              return Out::Error(who + ", request " + result_name +
                                ": asks for all devices, but resource pool " + p->driver + "/" +
                                p->name + " is currently being updated");
            }
            for (const Device& d : p->devices) {
              if (!s.Selectable(c, r, d)) {
                if (s.error) return Out::Error(*s.error);
                continue;
              }
              if (d.shared && !s.CapacityFits(r, d)) continue;
              r.all_devices.push_back(&d);
            }
          }
        } else if (mode == "ExactCount") {
          r.count = static_cast<size_t>(std::max<int64_t>(e.value("count", int64_t{1}), 1));
        } else {
          return Out::Error(who + ", request " + result_name + ": unsupported count mode " + mode);
        }
        alts.options.push_back(std::move(r));
      }
      s.requests[c].push_back(std::move(alts));
    }
    for (const Json& con : devices.value("constraints", Json::array())) {
      Search::Constraint k;
      for (const Json& r : con.value("requests", Json::array()))
        k.requests.insert(r.get<std::string>());
      if (con.contains("matchAttribute")) {
        k.attribute = con["matchAttribute"].get<std::string>();
      } else if (con.contains("distinctAttribute")) {
        k.attribute = con["distinctAttribute"].get<std::string>();
        k.match = false;
      } else {
        return Out::Error(who + ": empty constraint (unsupported constraint type?)");
      }
      s.constraints[c].push_back(std::move(k));
    }
  }
  const bool done = s.One(0, 0, 0, {0, 0});
  if (s.error) return Out::Error(*s.error);
  if (!done) return std::optional<std::vector<Json>>();

  std::vector<Json> out;
  for (size_t c = 0; c < claims.size(); ++c) {
    std::vector<dra::AllocatedRequest> requests;
    for (const Search::Alternatives& alts : s.requests[c]) {
      const Search::Request& r = alts.options[alts.chosen];
      requests.push_back({r.name, r.klass});
    }
    std::vector<dra::ChosenDevice> chosen;
    bool local = false;
    for (const Search::Chosen& ch : s.results[c]) {
      chosen.push_back({ch.request, ch.device->id.driver, ch.device->id.pool, ch.device->id.device,
                        ch.share_id, ch.consumed});
      local = local || !ch.device->pool->node.empty();
    }
    out.push_back(dra::AllocationJson(claims[c], requests, chosen, local ? node.name : ""));
  }
  return std::optional<std::vector<Json>>(std::move(out));
}

}  // namespace tessera::k8s
