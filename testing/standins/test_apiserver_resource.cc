// TestApiServer, resource.k8s.io/v1: the routes of ResourceSlice, DeviceClass, ResourceClaim and
// ResourceClaimTemplate, updates, deletes with preconditions and of a collection, and the
// validation of slices and of what may change (see the header). The rules are those of upstream's
// pkg/apis/resource/validation, as far as the objects Tessera writes and reads use them.
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include "k8s/quantity.h"
#include "testing/standins/test_apiserver.h"

namespace tessera::k8s {
namespace {

constexpr char kBase[] = "/apis/resource\\.k8s\\.io/v1";

Json StatusOf(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

void Answer(httplib::Response& res, int code, const Json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

// The checks of one object, collected as "field: reason".
class Errors {
 public:
  void Add(const std::string& field, const std::string& why) {
    list_.push_back(field + ": " + why);
  }
  Status ToStatus() const {
    if (list_.empty()) return Status::Ok();
    std::string out;
    for (const std::string& e : list_) out += (out.empty() ? "[" : ", ") + e;
    return Status::Error(out + "]");
  }

 private:
  std::vector<std::string> list_;
};

bool IsDnsLabel(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return !s.empty() && s.size() <= 63 && std::regex_match(s, re);
}

bool IsDnsSubdomain(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  return !s.empty() && s.size() <= 253 && std::regex_match(s, re);
}

bool IsCIdentifier(const std::string& s) {
  static const std::regex re("[A-Za-z_][A-Za-z0-9_]*");
  return std::regex_match(s, re);
}

bool IsSemver(const std::string& s) {
  static const std::regex re(
      "(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)"
      "(-(0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(\\.(0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
      "(\\+[0-9a-zA-Z-]+(\\.[0-9a-zA-Z-]+)*)?");
  return std::regex_match(s, re);
}

// A quantity's value in milli-units, or nullopt (and an error) when it does not parse.
std::optional<int64_t> Milli(const Json& q, const std::string& field, Errors* errors) {
  if (!q.is_string() && !q.is_number()) {
    errors->Add(field, "a quantity is required");
    return std::nullopt;
  }
  auto parsed = Quantity::Parse(q.is_string() ? q.get<std::string>() : q.dump(), field);
  if (!parsed.ok()) {
    errors->Add(field, parsed.error());
    return std::nullopt;
  }
  auto v = parsed->Scaled(3, field);
  if (!v.ok()) {
    errors->Add(field, v.error());
    return std::nullopt;
  }
  return *v;
}

void QualifiedName(const std::string& name, const std::string& field, Errors* errors) {
  const size_t slash = name.find('/');
  const std::string id = slash == std::string::npos ? name : name.substr(slash + 1);
  if (slash != std::string::npos) {
    const std::string domain = name.substr(0, slash);
    if (domain.empty()) {
      errors->Add(field, "the domain must not be empty");
    } else if (!IsDnsSubdomain(domain) || domain.size() > 63) {
      errors->Add(field,
                  "the domain \"" + domain + "\" must be a DNS subdomain of at most 63 characters");
    }
  }
  if (id.empty()) {
    errors->Add(field, "the name must not be empty");
  } else if (id.size() > 32 || !IsCIdentifier(id)) {
    errors->Add(field, "\"" + id + "\" must be a C identifier of at most 32 characters");
  }
}

void RequestPolicy(const Json& value, const Json& p, const std::string& field, Errors* errors) {
  auto cap = Milli(value, field + ".value", errors);
  if (!cap) return;
  const bool values =
      p.contains("validValues") && p["validValues"].is_array() && !p["validValues"].empty();
  const bool range = p.contains("validRange") && p["validRange"].is_object();
  if (values && range) {
    errors->Add(field + ".requestPolicy",
                "exactly one policy can be specified, cannot specify \"validValues\" and "
                "\"validRange\" at the same time");
    return;
  }
  std::optional<int64_t> def;
  if ((values || range) && (!p.contains("default") || p["default"].is_null())) {
    errors->Add(
        field + ".requestPolicy.default",
        std::string("required when ") + (values ? "validValues" : "validRange") + " is defined");
    return;
  }
  if (p.contains("default") && !p["default"].is_null())
    def = Milli(p["default"], field + ".requestPolicy.default", errors);
  if (values) {
    const Json& vv = p["validValues"];
    if (vv.size() > 10)
      errors->Add(field + ".requestPolicy.validValues", "must have at most 10 items");
    bool found = false;
    std::optional<int64_t> prev;
    for (size_t i = 0; i < vv.size(); ++i) {
      auto v =
          Milli(vv[i], field + ".requestPolicy.validValues[" + std::to_string(i) + "]", errors);
      if (!v) continue;
      if (prev && *prev > *v)
        errors->Add(field + ".requestPolicy.validValues[" + std::to_string(i) + "]",
                    "values must be sorted in ascending order");
      if (*v > *cap)
        errors->Add(field + ".requestPolicy.validValues[" + std::to_string(i) + "]",
                    "option is larger than capacity value");
      if (def && *v == *def) found = true;
      prev = v;
    }
    if (def && !found)
      errors->Add(field + ".requestPolicy.validValues",
                  "default value is not valid according to the requestPolicy");
  }
  if (range) {
    const Json& r = p["validRange"];
    const std::string at = field + ".requestPolicy.validRange";
    if (!r.contains("min") || r["min"].is_null()) {
      errors->Add(at + ".min", "required when validRange is defined");
      return;
    }
    auto min = Milli(r["min"], at + ".min", errors);
    if (!min || !def) return;
    if (*min > *cap) errors->Add(at + ".min", "min is larger than capacity value");
    if (*def < *min) errors->Add(at + ".min", "default is less than min");
    std::optional<int64_t> max;
    if (r.contains("max") && !r["max"].is_null()) {
      max = Milli(r["max"], at + ".max", errors);
      if (max) {
        if (*min > *max) errors->Add(at + ".max", "min is larger than max");
        if (*max > *cap) errors->Add(at + ".max", "max is larger than capacity value");
        if (*def > *max) errors->Add(at + ".max", "default is more than max");
      }
    }
    if (r.contains("step") && !r["step"].is_null()) {
      auto step = Milli(r["step"], at + ".step", errors);
      if (step && *step > 0) {
        // Upstream compares whole units (Quantity.Value) for the steps.
        auto units = [](int64_t milli) { return (milli + 999) / 1000; };
        if (*min + *step > *cap)
          errors->Add(at + ".step", "one step is larger than capacity value");
        const int64_t s = units(*step);
        if ((units(*def) - units(*min)) % s != 0)
          errors->Add(at + ".step", "value is not a multiple of a given step from min (default)");
        if (max && (units(*max) - units(*min)) % s != 0)
          errors->Add(at + ".step", "value is not a multiple of a given step from min (max)");
      } else if (step) {
        errors->Add(at + ".step", "must be greater than zero");
      }
    }
  }
}

void Counters(const Json& counters, const std::string& field, size_t max, Errors* errors) {
  if (!counters.is_object() || counters.empty()) {
    errors->Add(field, "Required value");
    return;
  }
  if (counters.size() > max)
    errors->Add(field, "must have at most " + std::to_string(max) + " items");
  for (const auto& [name, c] : counters.items()) {
    if (!IsDnsLabel(name)) errors->Add(field + "[" + name + "]", "must be a DNS label");
    if (!c.is_object() || !c.contains("value")) {
      errors->Add(field + "[" + name + "].value", "Required value");
    } else {
      Milli(c["value"], field + "[" + name + "].value", errors);
    }
  }
}

void Device(const Json& d, const std::string& field, bool per_device_nodes, Errors* errors) {
  const std::string name = d.value("name", "");
  if (!IsDnsLabel(name)) errors->Add(field + ".name", "\"" + name + "\" must be a DNS label");
  const Json attributes = d.value("attributes", Json::object());
  const Json capacity = d.value("capacity", Json::object());
  if (attributes.size() + capacity.size() > 32) {
    errors->Add(field, "the total number of attributes and capacities must not exceed 32");
  }
  for (const auto& [key, a] : attributes.items()) {
    const std::string at = field + ".attributes[" + key + "]";
    QualifiedName(key, at, errors);
    int set = 0;
    for (const char* t :
         {"int", "bool", "string", "version", "ints", "bools", "strings", "versions"}) {
      if (a.is_object() && a.contains(t) && !a[t].is_null()) ++set;
    }
    if (set != 1) errors->Add(at, "exactly one value must be specified");
    if (a.contains("string") &&
        (!a["string"].is_string() || a["string"].get<std::string>().size() > 64)) {
      errors->Add(at + ".string", "must be a string of at most 64 characters");
    }
    if (a.contains("version") &&
        (!a["version"].is_string() || !IsSemver(a["version"].get<std::string>()) ||
         a["version"].get<std::string>().size() > 64)) {
      errors->Add(at + ".version", "must be a string compatible with semver.org spec 2.0.0");
    }
    if (a.contains("int") && !a["int"].is_number_integer())
      errors->Add(at + ".int", "must be an integer");
    if (a.contains("bool") && !a["bool"].is_boolean())
      errors->Add(at + ".bool", "must be a boolean");
  }
  const bool multiple = d.value("allowMultipleAllocations", false);
  for (const auto& [key, c] : capacity.items()) {
    const std::string at = field + ".capacity[" + key + "]";
    QualifiedName(key, at, errors);
    if (!c.is_object() || !c.contains("value")) {
      errors->Add(at + ".value", "Required value");
      continue;
    }
    Milli(c["value"], at + ".value", errors);
    if (c.contains("requestPolicy") && !c["requestPolicy"].is_null()) {
      if (!multiple) {
        errors->Add(at + ".requestPolicy", "Forbidden: allowMultipleAllocations must be true");
      } else {
        RequestPolicy(c["value"], c["requestPolicy"], at, errors);
      }
    }
  }
  const Json consumes = d.value("consumesCounters", Json::array());
  if (consumes.size() > 2) errors->Add(field + ".consumesCounters", "must have at most 2 items");
  std::set<std::string> sets;
  for (size_t i = 0; i < consumes.size(); ++i) {
    const std::string at = field + ".consumesCounters[" + std::to_string(i) + "]";
    const std::string set = consumes[i].value("counterSet", "");
    if (!IsDnsLabel(set)) errors->Add(at + ".counterSet", "must be a DNS label");
    if (!sets.insert(set).second) errors->Add(at + ".counterSet", "Duplicate value");
    Counters(consumes[i].value("counters", Json()), at + ".counters", 32, errors);
  }
  const bool node_fields =
      d.contains("nodeName") || d.contains("nodeSelector") || d.contains("allNodes");
  if (!per_device_nodes && node_fields) {
    errors->Add(field,
                "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec");
  }
}

std::string KeyOf(const Json& obj) {
  const Json& meta = obj["metadata"];
  const std::string ns = meta.value("namespace", "");
  return ns.empty() ? meta.value("name", "") : ns + "/" + meta.value("name", "");
}

}  // namespace

bool IsResourceKind(const std::string& kind) {
  return kind == "ResourceSlice" || kind == "DeviceClass" || kind == "ResourceClaim" ||
         kind == "ResourceClaimTemplate";
}

std::string ApiVersionOf(const std::string& kind) {
  return IsResourceKind(kind) ? "resource.k8s.io/v1" : "v1";
}

Status ValidateResourceSlice(const Json& slice, const Json* old) {
  Errors e;
  const Json meta = slice.value("metadata", Json::object());
  const std::string name = meta.value("name", "");
  if (!IsDnsSubdomain(name)) e.Add("metadata.name", "\"" + name + "\" must be a DNS subdomain");
  const Json spec = slice.value("spec", Json::object());
  const std::string driver = spec.value("driver", "");
  if (driver.empty()) {
    e.Add("spec.driver", "Required value");
  } else if (!IsDnsSubdomain(driver) || driver.size() > 63) {
    e.Add("spec.driver", "\"" + driver + "\" must be a DNS subdomain of at most 63 characters");
  }
  const Json pool = spec.value("pool", Json::object());
  const std::string pool_name = pool.value("name", "");
  if (pool_name.empty()) {
    e.Add("spec.pool.name", "Required value");
  } else {
    bool ok = pool_name.size() <= 253;
    size_t start = 0;
    while (ok) {
      const size_t slash = pool_name.find('/', start);
      ok = IsDnsSubdomain(
          pool_name.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    if (!ok)
      e.Add("spec.pool.name",
            "\"" + pool_name + "\" must be one or more DNS subdomains separated by slashes");
  }
  if (!pool.contains("resourceSliceCount") || !pool["resourceSliceCount"].is_number_integer() ||
      pool["resourceSliceCount"].get<int64_t>() <= 0) {
    e.Add("spec.pool.resourceSliceCount", "must be greater than zero");
  }
  if (!pool.contains("generation") || !pool["generation"].is_number_integer() ||
      pool["generation"].get<int64_t>() < 0) {
    e.Add("spec.pool.generation", "must be greater than or equal to zero");
  }
  int selections = 0;
  if (spec.contains("nodeName") && !spec["nodeName"].is_null()) {
    const std::string node =
        spec["nodeName"].is_string() ? spec["nodeName"].get<std::string>() : "";
    if (node.empty()) {
      e.Add("spec.nodeName", "must be either unset or set to a non-empty string");
    } else {
      ++selections;
      if (!IsDnsSubdomain(node)) e.Add("spec.nodeName", "\"" + node + "\" must be a DNS subdomain");
    }
  }
  if (spec.contains("nodeSelector") && !spec["nodeSelector"].is_null()) {
    ++selections;
    if (spec["nodeSelector"].value("nodeSelectorTerms", Json::array()).size() != 1) {
      e.Add("spec.nodeSelector.nodeSelectorTerms", "must have exactly one node selector term");
    }
  }
  for (const char* flag : {"allNodes", "perDeviceNodeSelection"}) {
    if (!spec.contains(flag) || spec[flag].is_null()) continue;
    if (spec[flag] == true) {
      ++selections;
    } else {
      e.Add(std::string("spec.") + flag, "must be either unset or set to true");
    }
  }
  if (selections == 0) {
    e.Add("spec",
          "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
          "required");
  } else if (selections > 1) {
    e.Add("spec",
          "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is "
          "required, but multiple fields are set");
  }
  const bool has_devices = spec.contains("devices") && !spec["devices"].is_null();
  const bool has_counters = spec.contains("sharedCounters") && !spec["sharedCounters"].is_null();
  if (has_devices && has_counters)
    e.Add("spec", "only one of `sharedCounters` or `devices` is allowed");
  const Json devices = spec.value("devices", Json::array());
  bool consumes = false;
  for (const Json& d : devices)
    consumes = consumes || (d.contains("consumesCounters") && !d["consumesCounters"].empty()) ||
               (d.contains("taints") && !d["taints"].empty());
  const size_t max_devices = consumes ? 64 : 128;
  if (devices.size() > max_devices) {
    e.Add("spec.devices", "Too many: " + std::to_string(devices.size()) + ": must have at most " +
                              std::to_string(max_devices) + " items");
  } else {
    std::set<std::string> names;
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string at = "spec.devices[" + std::to_string(i) + "]";
      Device(devices[i], at, spec.value("perDeviceNodeSelection", false), &e);
      if (!names.insert(devices[i].value("name", "")).second)
        e.Add(at, "Duplicate value: " + devices[i].value("name", ""));
    }
  }
  const Json sets = spec.value("sharedCounters", Json::array());
  if (sets.size() > 8) e.Add("spec.sharedCounters", "must have at most 8 items");
  std::set<std::string> set_names;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string at = "spec.sharedCounters[" + std::to_string(i) + "]";
    const std::string set = sets[i].value("name", "");
    if (!IsDnsLabel(set)) e.Add(at + ".name", "must be a DNS label");
    if (!set_names.insert(set).second) e.Add(at + ".name", "Duplicate value");
    Counters(sets[i].value("counters", Json()), at + ".counters", 32, &e);
  }
  if (old != nullptr) {
    const Json old_spec = old->value("spec", Json::object());
    if (old_spec.value("driver", Json()) != spec.value("driver", Json()))
      e.Add("spec.driver", "field is immutable");
    if (old_spec.value("pool", Json::object()).value("name", Json()) !=
        pool.value("name", Json())) {
      e.Add("spec.pool.name", "field is immutable");
    }
    if (old_spec.value("nodeName", Json()) != spec.value("nodeName", Json()))
      e.Add("spec.nodeName", "field is immutable");
  }
  return e.ToStatus();
}

Status ValidateResourceChange(const std::string& kind, const Json& updated, const Json& current) {
  const std::string what =
      kind + ".resource.k8s.io \"" + updated["metadata"].value("name", "") + "\" is invalid: ";
  Status s = Status::Ok();
  if (kind == "ResourceSlice") {
    s = ValidateResourceSlice(updated, &current);
  } else if (kind == "ResourceClaim" || kind == "ResourceClaimTemplate") {
    Errors e;
    if (updated.value("spec", Json()) != current.value("spec", Json()))
      e.Add("spec", "field is immutable");
    if (kind == "ResourceClaim") {
      const Json before = current.value("status", Json::object()).value("allocation", Json());
      const Json after = updated.value("status", Json::object()).value("allocation", Json());
      if (!before.is_null() && !after.is_null() && before != after) {
        e.Add("status.allocation", "field is immutable");
      }
      const Json reserved =
          updated.value("status", Json::object()).value("reservedFor", Json::array());
      if (after.is_null() && !reserved.empty()) {
        e.Add("status.reservedFor", "may not be set without status.allocation");
      }
    }
    s = e.ToStatus();
  }
  return s.ok() ? s : Status::Error(what + s.message());
}

void TestApiServer::RouteResource() {
  httplib::Server& s = *server_;
  const std::string base = kBase;
  auto get_collection = [this](const std::string& kind, bool namespaced) {
    return CollectionGet(kind, namespaced);
  };
  for (const auto& [kind, plural] : std::vector<std::pair<std::string, std::string>>{
           {"ResourceSlice", "resourceslices"}, {"DeviceClass", "deviceclasses"}}) {
    const std::string all = base + "/" + plural, one = all + "/([^/]+)";
    s.Get(all, get_collection(kind, false));
    s.Post(all, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleCreate({kind, ""}, req, res);
    });
    s.Delete(all, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleDeleteCollection({kind, ""}, req, res);
    });
    s.Get(one, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleGet(kind, req.matches[1], res);
    });
    s.Put(one, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleUpdate(kind, req.matches[1], req, res, false);
    });
    s.Patch(one, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandlePatch(kind, req.matches[1], req, res, false);
    });
    s.Delete(one, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleDeleteWithOptions(kind, req.matches[1], req, res);
    });
  }
  for (const auto& [kind, plural] : std::vector<std::pair<std::string, std::string>>{
           {"ResourceClaim", "resourceclaims"},
           {"ResourceClaimTemplate", "resourceclaimtemplates"}}) {
    const std::string in_ns = base + "/namespaces/([^/]+)/" + plural;
    const std::string one = in_ns + "/([^/]+)";
    auto key = [](const httplib::Request& req) {
      return std::string(req.matches[1]) + "/" + std::string(req.matches[2]);
    };
    s.Get(base + "/" + plural, get_collection(kind, false));
    s.Get(in_ns, get_collection(kind, true));
    s.Post(in_ns, [this, kind](const httplib::Request& req, httplib::Response& res) {
      HandleCreate({kind, req.matches[1]}, req, res);
    });
    s.Get(one, [this, kind, key](const httplib::Request& req, httplib::Response& res) {
      HandleGet(kind, key(req), res);
    });
    s.Put(one, [this, kind, key](const httplib::Request& req, httplib::Response& res) {
      HandleUpdate(kind, key(req), req, res, false);
    });
    s.Patch(one, [this, kind, key](const httplib::Request& req, httplib::Response& res) {
      HandlePatch(kind, key(req), req, res, false);
    });
    s.Delete(one, [this, kind, key](const httplib::Request& req, httplib::Response& res) {
      HandleDeleteWithOptions(kind, key(req), req, res);
    });
    if (kind == "ResourceClaim") {
      s.Put(one + "/status",
            [this, kind, key](const httplib::Request& req, httplib::Response& res) {
              HandleUpdate(kind, key(req), req, res, true);
            });
      s.Patch(one + "/status",
              [this, kind, key](const httplib::Request& req, httplib::Response& res) {
                HandlePatch(kind, key(req), req, res, true);
              });
    }
  }
}

void TestApiServer::HandleUpdate(const std::string& kind, const std::string& key,
                                 const httplib::Request& req, httplib::Response& res,
                                 bool status_only) {
  Json body = Json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("metadata") || !body["metadata"].is_object()) {
    return Answer(res, 400, StatusOf(400, "BadRequest", "the body is not an object with metadata"));
  }
  const std::string name = key.substr(key.find('/') + 1);
  if (body["metadata"].value("name", "") != name) {
    return Answer(res, 400,
                  StatusOf(400, "BadRequest",
                           "the name of the object (" + body["metadata"].value("name", "") +
                               ") does not match the name on the URL (" + name + ")"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto* objects = Objects(kind);
  auto it = objects->find(key);
  if (it == objects->end()) {
    return Answer(res, 404, StatusOf(404, "NotFound", kind + " \"" + name + "\" not found"));
  }
  const Json current = it->second;
  const std::string asked = body["metadata"].value("resourceVersion", "");
  const std::string now = current["metadata"].value("resourceVersion", "");
  if (!asked.empty() && asked != now) {
    ++conflicts_;
    return Answer(res, 409,
                  StatusOf(409, "Conflict",
                           "Operation cannot be fulfilled on " + kind + " \"" + name +
                               "\": the object has been modified; please apply your "
                               "changes to the latest version and try again"));
  }
  Json result;
  if (status_only) {
    result = current;
    result["status"] = body.value("status", Json::object());
  } else {
    result = std::move(body);
    result.erase("status");
    if (current.contains("status")) result["status"] = current["status"];
    for (const char* k : {"name", "namespace", "uid", "creationTimestamp", "generation"}) {
      if (current["metadata"].contains(k)) result["metadata"][k] = current["metadata"][k];
    }
    result["apiVersion"] = ApiVersionOf(kind);
    result["kind"] = kind;
  }
  if (Status s = ValidateResourceChange(kind, result, current); !s.ok()) {
    return Answer(res, 422, StatusOf(422, "Invalid", s.message()));
  }
  Modify(kind, key, std::move(result));
  Answer(res, 200, (*objects)[key]);
}

void TestApiServer::HandleDeleteWithOptions(const std::string& kind, const std::string& key,
                                            const httplib::Request& req, httplib::Response& res) {
  const Json options = req.body.empty() ? Json::object() : Json::parse(req.body, nullptr, false);
  if (!options.is_object())
    return Answer(res, 400, StatusOf(400, "BadRequest", "DeleteOptions are not JSON"));
  const std::string name = key.substr(key.find('/') + 1);
  std::lock_guard<std::mutex> lock(mu_);
  auto* objects = Objects(kind);
  auto it = objects->find(key);
  if (it == objects->end()) {
    return Answer(res, 404, StatusOf(404, "NotFound", kind + " \"" + name + "\" not found"));
  }
  const Json pre = options.value("preconditions", Json::object());
  const Json& meta = it->second["metadata"];
  if (pre.contains("uid") && pre["uid"] != meta.value("uid", "")) {
    return Answer(res, 409,
                  StatusOf(409, "Conflict",
                           "Precondition failed: UID in precondition: " + pre["uid"].dump() +
                               ", UID in object meta: " + meta.value("uid", "")));
  }
  if (pre.contains("resourceVersion") &&
      pre["resourceVersion"] != meta.value("resourceVersion", "")) {
    return Answer(
        res, 409,
        StatusOf(409, "Conflict",
                 "Precondition failed: ResourceVersion in precondition: " +
                     pre["resourceVersion"].dump() +
                     ", ResourceVersion in object meta: " + meta.value("resourceVersion", "")));
  }
  Json last = it->second;
  Remove(kind, key);
  Answer(res, 200, last);
}

void TestApiServer::HandleDeleteCollection(const Collection& c, const httplib::Request& req,
                                           httplib::Response& res) {
  // The selectors as a list reads them; a field the list refuses is refused here too.
  httplib::Response listed;
  HandleList(c, req, listed);
  if (listed.status != 200) {
    res.status = listed.status;
    res.body = listed.body;
    res.set_header("Content-Type", "application/json");
    return;
  }
  const Json list = Json::parse(listed.body);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Json& obj : list["items"]) Remove(c.kind, KeyOf(obj));
  Answer(res, 200,
         {{"kind", c.kind + "List"},
          {"apiVersion", ApiVersionOf(c.kind)},
          {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
          {"items", list["items"]}});
}

Result<Json> TestApiServer::CreateResource(const std::string& kind, Json object) {
  if (!IsResourceKind(kind)) return Result<Json>::Error(kind + " is not a resource.k8s.io kind");
  object["apiVersion"] = ApiVersionOf(kind);
  object["kind"] = kind;
  object["metadata"]["generation"] = 1;
  if (kind == "ResourceClaim") object.erase("status");
  if (kind == "ResourceSlice") {
    if (Status s = ValidateResourceSlice(object); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = KeyOf(object);
  if (Objects(kind)->count(key) != 0)
    return Result<Json>::Error(kind + " " + key + " already exists");
  return Insert(kind, key, object);
}

std::optional<Json> TestApiServer::GetResource(const std::string& kind, const std::string& ns,
                                               const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto k = resources_.find(kind);
  if (k == resources_.end()) return std::nullopt;
  auto it = k->second.find(ns.empty() ? name : ns + "/" + name);
  if (it == k->second.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> TestApiServer::ListResources(const std::string& kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  auto k = resources_.find(kind);
  if (k == resources_.end()) return out;
  for (const auto& [key, obj] : k->second) out.push_back(obj);
  return out;
}

bool TestApiServer::DeleteResource(const std::string& kind, const std::string& ns,
                                   const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = ns.empty() ? name : ns + "/" + name;
  if (Objects(kind)->count(key) == 0) return false;
  Remove(kind, key);
  return true;
}

bool TestApiServer::SetClaimStatus(const std::string& ns, const std::string& name,
                                   const Json& status) {
  std::lock_guard<std::mutex> lock(mu_);
  auto* claims = Objects("ResourceClaim");
  auto it = claims->find(ns + "/" + name);
  if (it == claims->end()) return false;
  Json claim = it->second;
  claim["status"] = status;
  Modify("ResourceClaim", ns + "/" + name, std::move(claim));
  return true;
}

}  // namespace tessera::k8s
