// Reading and writing the extender protocol's JSON. No decisions, no HTTP.
#include "k8s/extender/wire.h"

#include <utility>

#include "core/text.h"

namespace tessera::extender {

namespace {

using k8s::Json;

// The member of object `j` named `key` ignoring ASCII case (as Go's decoder matches), or null.
template <typename J>
J* Member(J& j, std::string_view key) {
  if (auto it = j.find(key); it != j.end()) return &*it;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (EqualsIgnoreCase(it.key(), key)) return &*it;
  }
  return nullptr;
}

Result<Json> ParseObject(std::string_view body, std::string_view what) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Result<Json>::Error(std::string(what) + ": the body is not valid JSON");
  }
  if (!j.is_object()) {
    return Result<Json>::Error(std::string(what) + ": the body is a JSON " + j.type_name() +
                               "; expected an object");
  }
  return j;
}

Result<std::string> StringMember(const Json& j, std::string_view key, std::string_view what) {
  const Json* v = Member(j, key);
  if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>().empty()) {
    return Result<std::string>::Error(std::string(what) + ": " + std::string(key) + " is " +
                                      (v == nullptr ? "missing" : v->is_string() ? "empty" : v->type_name()) +
                                      "; expected a non-empty string");
  }
  return v->get<std::string>();
}

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  constexpr std::string_view kWhat = "ExtenderArgs";
  auto j = ParseObject(body, kWhat);
  if (!j.ok()) return j.status();
  ExtenderArgs out;
  Json* pod = Member(*j, "Pod");
  if (pod == nullptr || !pod->is_object()) {
    return Result<ExtenderArgs>::Error(std::string(kWhat) + ": Pod is " +
                                       (pod == nullptr ? "missing" : pod->type_name()) +
                                       "; expected a v1.Pod object");
  }
  out.pod = std::move(*pod);
  const Json* names = Member(*j, "NodeNames");
  Json* nodes = Member(*j, "Nodes");
  if (names != nullptr && !names->is_null()) {
    if (!names->is_array()) {
      return Result<ExtenderArgs>::Error(std::string(kWhat) + ": NodeNames is " +
                                         names->type_name() + "; expected an array of node names");
    }
    out.nodes.reserve(names->size());
    for (const Json& n : *names) {
      if (!n.is_string()) {
        return Result<ExtenderArgs>::Error(std::string(kWhat) + ": NodeNames holds a " +
                                           n.type_name() + "; expected node names (strings)");
      }
      out.nodes.push_back(n.get<std::string>());
    }
    return out;
  }
  if (nodes != nullptr && !nodes->is_null()) {
    const Json* items = nodes->is_object() ? Member(*nodes, "items") : nullptr;
    if (items == nullptr || !items->is_array()) {
      return Result<ExtenderArgs>::Error(std::string(kWhat) +
                                         ": Nodes has no items array; expected a v1.NodeList");
    }
    for (const Json& n : *items) {
      const Json* meta = n.is_object() ? Member(n, "metadata") : nullptr;
      const Json* name = meta != nullptr && meta->is_object() ? Member(*meta, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return Result<ExtenderArgs>::Error(std::string(kWhat) +
                                           ": a node in Nodes.items has no metadata.name");
      }
      out.nodes.push_back(name->get<std::string>());
    }
    out.node_objects = true;
    out.node_list = std::move(*nodes);
    return out;
  }
  return Result<ExtenderArgs>::Error(std::string(kWhat) +
                                     ": neither NodeNames nor Nodes is set; expected one");
}

std::string WriteFilterResult(const ExtenderArgs& args, const FilterOutcome& outcome) {
  Json failed = Json::object();
  Json unresolvable = Json::object();
  for (const NodeFailure& f : outcome.failed) (f.unresolvable ? unresolvable : failed)[f.node] = f.reason;
  Json out = {{"FailedNodes", std::move(failed)},
              {"FailedAndUnresolvableNodes", std::move(unresolvable)},
              {"Error", ""}};
  if (args.node_objects) {
    Json list = args.node_list;
    Json items = Json::array();
    size_t next = 0;  // fits is in request order
    for (const Json& n : args.node_list["items"]) {
      if (next < outcome.fits.size() && n["metadata"]["name"] == outcome.fits[next]) {
        items.push_back(n);
        ++next;
      }
    }
    list["items"] = std::move(items);
    out["Nodes"] = std::move(list);
    out["NodeNames"] = nullptr;
  } else {
    out["Nodes"] = nullptr;
    out["NodeNames"] = outcome.fits;
  }
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string WriteFilterError(std::string_view error) {
  Json out = {{"Nodes", nullptr},
              {"NodeNames", nullptr},
              {"FailedNodes", Json::object()},
              {"FailedAndUnresolvableNodes", Json::object()},
              {"Error", std::string(error)}};
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string WritePriorities(const std::vector<NodePriority>& priorities) {
  Json out = Json::array();
  for (const NodePriority& p : priorities) out.push_back({{"Host", p.node}, {"Score", p.score}});
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<BindingArgs> ParseBindingArgs(std::string_view body) {
  constexpr std::string_view kWhat = "ExtenderBindingArgs";
  auto j = ParseObject(body, kWhat);
  if (!j.ok()) return j.status();
  BindingArgs out;
  for (const auto& [key, slot] : {std::pair{"PodName", &out.pod_name},
                                  std::pair{"PodNamespace", &out.pod_namespace},
                                  std::pair{"PodUID", &out.pod_uid}, std::pair{"Node", &out.node}}) {
    auto v = StringMember(*j, key, kWhat);
    if (!v.ok()) return v.status();
    *slot = std::move(*v);
  }
  return out;
}

std::string WriteBindingResult(std::string_view error) {
  return Json{{"Error", std::string(error)}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tessera::extender
