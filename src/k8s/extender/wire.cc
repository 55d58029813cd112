// Reading and writing the extender protocol's JSON. No decisions, no HTTP.
#include "k8s/extender/wire.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
                                      (v == nullptr     ? "missing"
                                       : v->is_string() ? "empty"
                                                        : v->type_name()) +
                                      "; expected a non-empty string");
  }
  return v->get<std::string>();
}

}  // namespace

namespace {

// Reads ExtenderArgs in one pass: the Pod (and a Nodes list) become JSON objects, NodeNames goes
// straight into a vector of strings (a DOM of thousands of names costs more than the decision).
// Unknown top-level keys are skipped; keys match ignoring case.
class ArgsReader : public nlohmann::json_sax<Json> {
 public:
  enum class Slot { kNone, kPod, kNodes, kNames };

  bool null() override { return Value(Json(nullptr)); }
  bool boolean(bool v) override { return Value(Json(v)); }
  bool number_integer(number_integer_t v) override { return Value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Value(Json(v)); }
  bool binary(binary_t&) override { return Value(Json(nullptr)); }
  bool string(string_t& v) override {
    if (slot_ == Slot::kNames && depth_ == 2) {
      names.push_back(std::move(v));
      return true;
    }
    return Value(Json(std::move(v)));
  }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) {
      top_ = true;
      return true;
    }
    if (slot_ == Slot::kNames && depth_ >= 2) {
      return Fail("NodeNames holds an object; expected node names (strings)");
    }
    return Open(Json::object());
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      slot_ = EqualsIgnoreCase(k, "Pod")         ? Slot::kPod
              : EqualsIgnoreCase(k, "NodeNames") ? Slot::kNames
              : EqualsIgnoreCase(k, "Nodes")     ? Slot::kNodes
                                                 : Slot::kNone;
      if (slot_ != Slot::kNone) seen[static_cast<int>(slot_)] = true;
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override {
    ++depth_;
    if (slot_ == Slot::kNames && depth_ == 2) {
      names_array = true;
      return true;
    }
    if (slot_ == Slot::kNames && depth_ > 2)
      return Fail("NodeNames holds an array; expected node names (strings)");
    return Open(Json::array());
  }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return Fail("the body is not valid JSON");
  }

  Json pod;
  Json nodes;
  std::vector<std::string> names;
  bool names_array = false;
  bool top_ = false;
  bool seen[4] = {false, false, false, false};
  std::string error;

 private:
  bool Fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  Json* Target() { return slot_ == Slot::kPod ? &pod : slot_ == Slot::kNodes ? &nodes : nullptr; }
  // A scalar value at the current position.
  bool Value(Json v) {
    if (depth_ == 0)
      return Fail("the body is a JSON " + std::string(v.type_name()) + "; expected an object");
    if (slot_ == Slot::kNames) {
      if (depth_ == 1) {
        if (v.is_null()) return true;
        return Fail("NodeNames is " + std::string(v.type_name()) +
                    "; expected an array of node names");
      }
      return Fail("NodeNames holds a " + std::string(v.type_name()) +
                  "; expected node names (strings)");
    }
    Json* root = Target();
    if (root == nullptr) return true;  // a key we skip
    if (stack_.empty()) {
      *root = std::move(v);
      return true;
    }
    Insert(std::move(v));
    return true;
  }
  Json* Insert(Json v) {
    Json* parent = stack_.back();
    if (parent->is_object()) {
      Json& slot = (*parent)[key_];
      slot = std::move(v);
      return &slot;
    }
    parent->push_back(std::move(v));
    return &parent->back();
  }
  bool Open(Json container) {
    if (depth_ == 1) return Fail("the body is a JSON array; expected an object");
    Json* root = Target();
    if (root == nullptr) {
      ++skipped_;
      return true;
    }
    if (stack_.empty()) {
      *root = std::move(container);
      stack_.push_back(root);
    } else {
      stack_.push_back(Insert(std::move(container)));
    }
    return true;
  }
  bool Close() {
    --depth_;
    if (depth_ == 0) return true;
    if (slot_ == Slot::kNames && depth_ == 1) return true;
    if (Target() == nullptr) {
      if (skipped_ > 0) --skipped_;
      return true;
    }
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }

  int depth_ = 0;
  int skipped_ = 0;
  Slot slot_ = Slot::kNone;
  std::string key_;
  std::vector<Json*> stack_;
};

}  // namespace

namespace {

// `names` copied back to back into `out.name_bytes`, and `out.nodes` views of them in order.
template <typename Names>
void SetNames(ExtenderArgs& out, const Names& names) {
  size_t bytes = 0;
  for (const auto& n : names) bytes += n.size();
  out.name_bytes = std::make_unique<char[]>(bytes > 0 ? bytes : 1);
  out.nodes.clear();
  out.nodes.reserve(names.size());
  char* at = out.name_bytes.get();
  for (const auto& n : names) {
    std::copy(n.begin(), n.end(), at);
    out.nodes.emplace_back(at, n.size());
    at += n.size();
  }
}

// The body through the SAX reader above; with `tail`, a body whose NodeNames list was read
// already (ReadPlainNameTail: its names and their buffer) and stands as null in it.
Result<ExtenderArgs> ReadArgs(std::string_view body, ExtenderArgs* tail) {
  constexpr std::string_view kWhat = "ExtenderArgs";
  auto fail = [&](const std::string& message) {
    return Result<ExtenderArgs>::Error(std::string(kWhat) + ": " + message);
  };
  // JSON holds no NUL byte (not even inside a string), and the parser would take one for the end
  // of the input: a body with one is refused here, whatever follows it.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return fail("the body is not valid JSON (a NUL byte at offset " + std::to_string(nul) + ")");
  }
  ArgsReader reader;
  const bool parsed = Json::sax_parse(body, &reader);
  if (!parsed || !reader.error.empty()) {
    return fail(reader.error.empty() ? "the body is not valid JSON" : reader.error);
  }
  if (!reader.top_) return fail("the body is not a JSON object");
  ExtenderArgs out;
  if (!reader.pod.is_object()) {
    return fail(std::string("Pod is ") + (reader.seen[1] ? reader.pod.type_name() : "missing") +
                "; expected a v1.Pod object");
  }
  out.pod = std::move(reader.pod);
  if (tail != nullptr) {
    // The rest of a body whose names were read from its end (below): a list there too is a
    // second NodeNames, which only the whole reading answers as it would.
    if (reader.names_array) return fail("NodeNames appears twice");
    out.nodes = std::move(tail->nodes);
    out.name_bytes = std::move(tail->name_bytes);
    return out;
  }
  if (reader.names_array) {
    SetNames(out, reader.names);
    return out;
  }
  if (reader.seen[2] && !reader.nodes.is_null()) {
    const Json* items = reader.nodes.is_object() ? Member(reader.nodes, "items") : nullptr;
    if (items == nullptr || !items->is_array()) {
      return fail("Nodes has no items array; expected a v1.NodeList");
    }
    std::vector<std::string> names;
    for (const Json& n : *items) {
      const Json* meta = n.is_object() ? Member(n, "metadata") : nullptr;
      const Json* name = meta != nullptr && meta->is_object() ? Member(*meta, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return fail("a node in Nodes.items has no metadata.name");
      }
      names.push_back(name->get<std::string>());
    }
    SetNames(out, names);
    out.node_objects = true;
    out.node_list = std::move(reader.nodes);
    return out;
  }
  return fail("neither NodeNames nor Nodes is set; expected one");
}

// kube-scheduler marshals ExtenderArgs with Go's encoding/json: fields in struct order, no
// spaces, so the names come last: {"Pod":{...},"Nodes":null,"NodeNames":["a","b"]}. At 5000
// nodes that list is nearly all of the body, and a JSON lexer reading it byte by byte costs more
// than the decision. When the body ends in exactly that form, with names of plain bytes (printable
// ASCII without quote or backslash: every Kubernetes node name), the names are read backwards
// from the end here, and the rest, with `"NodeNames":null}` in place of the list, goes to the
// reader above. That the rest parses as an object proves the list was the top-level NodeNames
// member; anything else (escapes, spaces, other bytes, another key) returns nullopt and the whole
// body is read as before. The result is the whole reading's, which wire_test and the fuzz target
// extender_wire check on every body they try.
std::optional<Result<ExtenderArgs>> ReadPlainNameTail(std::string_view body) {
  constexpr std::string_view kKey = "\"NodeNames\":";
  size_t end = body.size();
  auto back = [&](char c) {
    if (end == 0 || body[end - 1] != c) return false;
    --end;
    return true;
  };
  if (!back('}') || !back(']')) return std::nullopt;
  std::vector<std::string_view> reversed;
  if (!back('[')) {
    for (;;) {
      if (!back('"')) return std::nullopt;
      const size_t close = end;
      while (end > 0) {
        const auto c = static_cast<unsigned char>(body[end - 1]);
        if (c == '"') break;
        if (c < 0x20 || c >= 0x7f || c == '\\') return std::nullopt;
        --end;
      }
      const size_t open = end;
      if (!back('"')) return std::nullopt;
      reversed.push_back(body.substr(open, close - open));
      if (back('[')) break;
      if (!back(',')) return std::nullopt;
    }
  }
  if (end < kKey.size() || body.substr(end - kKey.size(), kKey.size()) != kKey) return std::nullopt;
  end -= kKey.size();
  std::string rest(body.substr(0, end));
  rest += "\"NodeNames\":null}";
  std::reverse(reversed.begin(), reversed.end());
  ExtenderArgs tail;
  SetNames(tail, reversed);
  auto out = ReadArgs(rest, &tail);
  if (!out.ok()) return std::nullopt;  // the whole reading says what is wrong
  return out;
}

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  if (auto quick = ReadPlainNameTail(body)) return std::move(*quick);
  return ReadArgs(body, nullptr);
}

Result<ExtenderArgs> ParseExtenderArgsWhole(std::string_view body) {
  return ReadArgs(body, nullptr);
}

namespace {

// `text` as a JSON string literal (quotes included); bytes >= 0x80 pass through. Runs that need
// no escape (node names always) are appended whole: a byte at a time, 5000 names cost 0.1 ms.
void AppendString(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t plain = 0;  // start of the run not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (c != '"' && c != '\\' && u >= 0x20) continue;
    out.append(text.data() + plain, i - plain);
    plain = i + 1;
    if (u >= 0x20) {
      out.push_back('\\');
      out.push_back(c);
    } else {
      out += "\\u00";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  out.append(text.data() + plain, text.size() - plain);
  out.push_back('"');
}

// {"node":"reason",...} of the failures with the given unresolvability.
void AppendFailures(std::string& out, const FilterOutcome& outcome, bool unresolvable) {
  out.push_back('{');
  bool first = true;
  for (const NodeFailure& f : outcome.failed) {
    if (f.unresolvable != unresolvable) continue;
    if (!first) out.push_back(',');
    first = false;
    AppendString(out, f.node);
    out.push_back(':');
    AppendString(out, f.reason);
  }
  out.push_back('}');
}

}  // namespace

std::string WriteFilterResult(const ExtenderArgs& args, const FilterOutcome& outcome) {
  std::string out;
  size_t size = 128;
  for (const std::string& n : outcome.fits) size += n.size() + 3;
  for (const NodeFailure& f : outcome.failed) size += f.node.size() + f.reason.size() + 6;
  out.reserve(size);
  out += "{\"Nodes\":";
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
    out += list.dump(-1, ' ', false, Json::error_handler_t::replace);
    out += ",\"NodeNames\":null";
  } else {
    out += "null,\"NodeNames\":[";
    for (size_t i = 0; i < outcome.fits.size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendString(out, outcome.fits[i]);
    }
    out.push_back(']');
  }
  out += ",\"FailedNodes\":";
  AppendFailures(out, outcome, false);
  out += ",\"FailedAndUnresolvableNodes\":";
  AppendFailures(out, outcome, true);
  out += ",\"Error\":\"\"}";
  return out;
}

std::string WriteFilterError(std::string_view error) {
  std::string out =
      "{\"Nodes\":null,\"NodeNames\":null,\"FailedNodes\":{},\"FailedAndUnresolvableNodes\":{},"
      "\"Error\":";
  AppendString(out, error);
  out.push_back('}');
  return out;
}

std::string WritePriorities(const std::vector<NodePriority>& priorities) {
  std::string out;
  out.reserve(priorities.size() * 40 + 2);
  out.push_back('[');
  for (size_t i = 0; i < priorities.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += "{\"Host\":";
    AppendString(out, priorities[i].node);
    out += ",\"Score\":";
    out += std::to_string(priorities[i].score);
    out.push_back('}');
  }
  out.push_back(']');
  return out;
}

Result<PreemptionArgs> ParsePreemptionArgs(std::string_view body) {
  constexpr std::string_view kWhat = "ExtenderPreemptionArgs";
  auto fail = [&](const std::string& message) {
    return Result<PreemptionArgs>::Error(std::string(kWhat) + ": " + message);
  };
  auto j = ParseObject(body, kWhat);
  if (!j.ok()) return j.status();
  PreemptionArgs out;
  const Json* pod = Member(*j, "Pod");
  if (pod == nullptr || !pod->is_object()) {
    return fail(std::string("Pod is ") + (pod == nullptr ? "missing" : pod->type_name()) +
                "; expected a v1.Pod object");
  }
  out.pod = *pod;
  const Json* meta = Member(*j, "NodeNameToMetaVictims");
  const Json* full = Member(*j, "NodeNameToVictims");
  const bool use_meta = meta != nullptr && !meta->is_null();
  const Json* map = use_meta ? meta : full;
  const std::string key = use_meta ? "NodeNameToMetaVictims" : "NodeNameToVictims";
  if (map == nullptr || map->is_null()) return out;  // no candidates: nothing to answer
  if (!map->is_object()) {
    return fail(key + " is " + map->type_name() + "; expected an object of node name to victims");
  }
  for (auto it = map->begin(); it != map->end(); ++it) {
    const std::string where = key + "[\"" + it.key() + "\"]";
    if (it.key().empty()) return fail(key + " has an empty node name");
    PreemptCandidate c;
    c.node = it.key();
    if (it->is_null()) return fail(where + " is null; expected victims");
    if (!it->is_object()) return fail(where + " is " + it->type_name() + "; expected victims");
    if (const Json* pdb = Member(*it, "NumPDBViolations"); pdb != nullptr && !pdb->is_null()) {
      if (!pdb->is_number_integer() || pdb->get<int64_t>() < 0) {
        return fail(where + ".NumPDBViolations is " + pdb->dump() +
                    "; expected a whole number of at least 0");
      }
      c.pdb_violations = pdb->get<int64_t>();
    }
    const Json* pods = Member(*it, "Pods");
    if (pods != nullptr && !pods->is_null() && !pods->is_array()) {
      return fail(where + ".Pods is " + pods->type_name() + "; expected a list");
    }
    if (pods != nullptr && pods->is_array()) {
      for (const Json& p : *pods) {
        const Json* uid = nullptr;
        if (p.is_object()) {
          if (use_meta) {
            uid = Member(p, "UID");
          } else if (const Json* m = Member(p, "metadata"); m != nullptr && m->is_object()) {
            uid = Member(*m, "uid");
          }
        }
        if (uid == nullptr || !uid->is_string() || uid->get_ref<const std::string&>().empty()) {
          return fail(where + ".Pods holds " +
                      (use_meta ? "a MetaPod without a UID" : "a pod without metadata.uid") +
                      "; expected every victim named by its UID");
        }
        c.victims.push_back(uid->get<std::string>());
      }
    }
    out.nodes.push_back(std::move(c));
  }
  std::sort(out.nodes.begin(), out.nodes.end(),
            [](const PreemptCandidate& a, const PreemptCandidate& b) { return a.node < b.node; });
  return out;
}

std::string WritePreemptionResult(const std::vector<PreemptCandidate>& nodes) {
  std::string out = "{\"NodeNameToMetaVictims\":{";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendString(out, nodes[i].node);
    out += ":{\"Pods\":[";
    for (size_t v = 0; v < nodes[i].victims.size(); ++v) {
      if (v > 0) out.push_back(',');
      out += "{\"UID\":";
      AppendString(out, nodes[i].victims[v]);
      out.push_back('}');
    }
    out += "],\"NumPDBViolations\":" + std::to_string(nodes[i].pdb_violations) + "}";
  }
  out += "}}";
  return out;
}

Result<BindingArgs> ParseBindingArgs(std::string_view body) {
  constexpr std::string_view kWhat = "ExtenderBindingArgs";
  auto j = ParseObject(body, kWhat);
  if (!j.ok()) return j.status();
  BindingArgs out;
  for (const auto& [key, slot] :
       {std::pair{"PodName", &out.pod_name}, std::pair{"PodNamespace", &out.pod_namespace},
        std::pair{"PodUID", &out.pod_uid}, std::pair{"Node", &out.node}}) {
    auto v = StringMember(*j, key, kWhat);
    if (!v.ok()) return v.status();
    *slot = std::move(*v);
  }
  return out;
}

std::string WriteBindingResult(std::string_view error) {
  std::string out = "{\"Error\":";
  AppendString(out, error);
  out.push_back('}');
  return out;
}

}  // namespace tessera::extender
