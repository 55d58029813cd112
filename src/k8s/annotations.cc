// Parsers and writers of Tessera's annotations and labels, on nlohmann-json.
#include "k8s/annotations.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/number.h"
#include "mig/planner.h"
#include "mig/profiles.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

// A value as it appeared, for error messages: JSON text, cut to 80 characters.
std::string Shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// Reads typed fields of one annotation's JSON, naming the annotation and key path in errors.
class Reader {
 public:
  explicit Reader(std::string_view annotation) : annotation_(annotation) {}

  Status Fail(const std::string& path, const std::string& problem) const {
    return Status::Error(annotation_ + ": " + path + problem);
  }
  Result<json> Parse(std::string_view text) const {
    try {
      json doc = json::parse(text);
      if (!doc.is_object()) {
        return Result<json>(Fail(
            "", "value " + Shown(doc) + " is not a JSON object; expected {\"version\":1,...}"));
      }
      return doc;
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
      std::string shown(text.substr(0, 80));
      return Result<json>(Fail("", "\"" + shown + (text.size() > 80 ? "..." : "") +
                                       "\" is not valid JSON (" + e.what() + ")"));
    }
  }
  // obj[key] when present; a missing required key is an error naming `what` was expected.
  Result<const json*> Field(const json& obj, const std::string& path, const char* key,
                            const std::string& what) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      return Result<const json*>(Fail(path + key, " is missing; expected " + what));
    }
    return &*it;
  }
  Result<uint64_t> Unsigned(const json& obj, const std::string& path, const char* key, uint64_t min,
                            uint64_t max, const std::string& what) const {
    auto field = Field(obj, path, key, what);
    if (!field.ok()) return field.status();
    const json& v = **field;
    if (!v.is_number_unsigned() || v.get<uint64_t>() < min || v.get<uint64_t>() > max) {
      return Result<uint64_t>(Fail(path + key, "=" + Shown(v) + ": expected " + what));
    }
    return v.get<uint64_t>();
  }
  Result<std::string> String(const json& obj, const std::string& path, const char* key,
                             const std::string& what) const {
    auto field = Field(obj, path, key, what);
    if (!field.ok()) return field.status();
    const json& v = **field;
    if (!v.is_string() || v.get<std::string>().empty()) {
      return Result<std::string>(Fail(path + key, "=" + Shown(v) + ": expected " + what));
    }
    return v.get<std::string>();
  }
  Result<bool> Bool(const json& obj, const std::string& path, const char* key) const {
    auto field = Field(obj, path, key, "true or false");
    if (!field.ok()) return field.status();
    if (!(*field)->is_boolean()) {
      return Result<bool>(Fail(path + key, "=" + Shown(**field) + ": expected true or false"));
    }
    return (*field)->get<bool>();
  }
  Result<const json*> Array(const json& obj, const std::string& path, const char* key,
                            const std::string& what) const {
    auto field = Field(obj, path, key, what);
    if (!field.ok()) return field;
    if (!(*field)->is_array()) {
      return Result<const json*>(Fail(path + key, "=" + Shown(**field) + ": expected " + what));
    }
    return field;
  }
  Status Version(const json& obj, int version) const {
    auto v =
        Unsigned(obj, "", "version", static_cast<uint64_t>(version), static_cast<uint64_t>(version),
                 std::to_string(version) + " (the only version this reader knows)");
    return v.ok() ? Status::Ok() : v.status();
  }

 private:
  std::string annotation_;
};

// A GPU UUID as NVML prints it: GPU- or MIG- followed by hex digits and dashes.
bool IsGpuUuid(const std::string& uuid) {
  if (uuid.size() < 5 || uuid.size() > 60) return false;
  if (uuid.rfind("GPU-", 0) != 0 && uuid.rfind("MIG-", 0) != 0) return false;
  for (size_t i = 4; i < uuid.size(); ++i) {
    const char c = uuid[i];
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}
constexpr char kUuidWhat[] = "a GPU UUID such as \"GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5\"";

struct ModeName {
  NodeMode mode;
  const char* name;
};
constexpr ModeName kModes[] = {
    {NodeMode::kCoreMem, "core_mem"},    {NodeMode::kMem, "mem"}, {NodeMode::kShare, "share"},
    {NodeMode::kExclusive, "exclusive"}, {NodeMode::kMig, "mig"}, {NodeMode::kMps, "mps"}};
constexpr char kModesAllowed[] = "core_mem, mem, share, exclusive, mig or mps";

struct PolicyName {
  PlacementPolicy policy;
  const char* name;
};
constexpr PolicyName kPolicies[] = {{PlacementPolicy::kTessera, "tessera"},
                                    {PlacementPolicy::kBinpack, "binpack"},
                                    {PlacementPolicy::kSpread, "spread"}};

const std::string* Lookup(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

// gpus[i].mig of the inventory: the GPU it is cut from, that GPU's MIG model, its profile and
// start.
Result<InventoryMig> ParseInventoryMig(const Reader& r, const json& m, const std::string& at,
                                       NodeMode mode) {
  if (!m.is_object())
    return Result<InventoryMig>(r.Fail(at, "=" + Shown(m) + ": expected an object"));
  if (mode != NodeMode::kMig) {
    return Result<InventoryMig>(r.Fail(at, std::string(" on a node in mode ") +
                                               std::string(NodeModeName(mode)) +
                                               "; expected MIG devices only on mig nodes"));
  }
  const std::string path = at + ".";
  InventoryMig out;
  auto gpu = r.String(m, path, "gpu", kUuidWhat);
  if (!gpu.ok()) return gpu.status();
  if (!IsGpuUuid(*gpu) || gpu->rfind("GPU-", 0) != 0) {
    return Result<InventoryMig>(r.Fail(path + "gpu", "=\"" + *gpu + "\": expected " + kUuidWhat));
  }
  out.gpu = *gpu;
  auto model =
      r.String(m, path, "model", "a MIG model of tessera mig profiles, e.g. \"H100-80GB\"");
  if (!model.ok()) return model.status();
  auto found = mig::FindGpuModel(*model, std::string(kInventoryAnnotation) + ": " + path + "model");
  if (!found.ok()) return found.status();
  out.model = std::string((*found)->name);
  auto profile = r.String(m, path, "profile", "a MIG profile, e.g. \"3g.40gb\"");
  if (!profile.ok()) return profile.status();
  auto p = mig::FindProfile(**found, *profile,
                            std::string(kInventoryAnnotation) + ": " + path + "profile");
  if (!p.ok()) return p.status();
  out.profile = std::string((*p)->name);
  auto start =
      r.Unsigned(m, path, "start", 0, mig::kMaxMemorySlices - 1, "a memory slice from 0 to 7");
  if (!start.ok()) return start.status();
  if (((*p)->start_mask >> *start & 1u) == 0) {
    return Result<InventoryMig>(r.Fail(path + "start", "=" + std::to_string(*start) + ": a " +
                                                           out.profile + " instance starts at " +
                                                           mig::StartSlots(**p)));
  }
  out.start = static_cast<int>(*start);
  return out;
}

// The MIG devices of each GPU must be one model's and form a layout the MIG tables allow.
Status CheckMigLayouts(const Reader& r, const GpuInventory& inv) {
  std::map<std::string, mig::Layout> by_gpu;
  for (const InventoryGpu& g : inv.gpus) {
    if (!g.mig) continue;
    const mig::GpuModel* model = *mig::FindGpuModel(g.mig->model);
    mig::Layout& layout = by_gpu[g.mig->gpu];
    if (layout.model != nullptr && layout.model != model) {
      return r.Fail("", "the MIG devices of GPU " + g.mig->gpu + " name two models (" +
                            std::string(layout.model->name) + " and " + g.mig->model +
                            "); expected one model per GPU");
    }
    layout.model = model;
    layout.instances.push_back({*mig::FindProfile(*model, g.mig->profile, ""), g.mig->start});
  }
  for (auto& [gpu, layout] : by_gpu) {
    std::sort(layout.instances.begin(), layout.instances.end(),
              [](const mig::PlacedInstance& a, const mig::PlacedInstance& b) {
                return a.start < b.start;
              });
    if (Status s = mig::CheckLayout(layout); !s.ok()) {
      return r.Fail("",
                    "the MIG devices of GPU " + gpu + " do not form a MIG layout: " + s.message());
    }
  }
  return Status::Ok();
}

}  // namespace

std::optional<GpuResource> GpuResourceOf(std::string_view name) {
  if (name == kResourceGpuMem || name == kAckResourceGpuMem) return GpuResource::kMem;
  if (name == kResourceGpuCore || name == kAckResourceGpuCore) return GpuResource::kCore;
  if (name == kResourceGpuCount || name == kAckResourceGpuCount) return GpuResource::kCount;
  return std::nullopt;
}

bool IsAckResourceName(std::string_view name) {
  return name == kAckResourceGpuMem || name == kAckResourceGpuCore || name == kAckResourceGpuCount;
}

std::string_view GpuResourceName(GpuResource resource, bool ack) {
  switch (resource) {
    case GpuResource::kMem:
      return ack ? kAckResourceGpuMem : kResourceGpuMem;
    case GpuResource::kCore:
      return ack ? kAckResourceGpuCore : kResourceGpuCore;
    case GpuResource::kCount:
      return ack ? kAckResourceGpuCount : kResourceGpuCount;
  }
  return "";
}

std::string MigResourceName(std::string_view profile) {
  std::string out = kResourceMigPrefix;
  for (char c : profile) out += c == '+' ? '.' : c;
  return out;
}

bool IsMigResourceName(std::string_view name) {
  return name.substr(0, sizeof(kResourceMigPrefix) - 1) == kResourceMigPrefix;
}

Result<std::string> MigProfileOfResource(std::string_view name, std::string_view input_name) {
  if (IsMigResourceName(name)) {
    for (std::string_view profile : mig::AllProfileNames()) {
      if (MigResourceName(profile) == name) return std::string(profile);
    }
  }
  std::string spelled;
  for (std::string_view profile : mig::AllProfileNames()) {
    spelled += (spelled.empty() ? "" : ", ") +
               MigResourceName(profile).substr(sizeof(kResourceMigPrefix) - 1);
  }
  return Result<std::string>::Error(std::string(input_name) + "=\"" + std::string(name) +
                                    "\": not a MIG profile of any GPU model we know; expected " +
                                    kResourceMigPrefix + " followed by one of " + spelled +
                                    " ('+' written '.')");
}

std::string_view NodeModeName(NodeMode mode) {
  for (const ModeName& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  return "";
}

Result<NodeMode> ParseNodeMode(std::string_view text, std::string_view input_name) {
  for (const ModeName& m : kModes) {
    if (text == m.name) return m.mode;
  }
  return Result<NodeMode>::Error(std::string(input_name) + "=\"" + std::string(text) +
                                 "\": unknown GPU sharing mode; expected " + kModesAllowed);
}

Result<NodeMode> NodeModeFromLabels(const std::map<std::string, std::string>& labels,
                                    NodeMode fallback) {
  if (const std::string* v = Lookup(labels, kScheduleLabel)) {
    return ParseNodeMode(*v, std::string("node label ") + kScheduleLabel);
  }
  if (const std::string* v = Lookup(labels, kAckScheduleLabel)) {
    return ParseNodeMode(*v, std::string("node label ") + kAckScheduleLabel);
  }
  return fallback;
}

Result<std::map<int, NodeMode>> GpuModesFromLabels(
    const std::map<std::string, std::string>& labels) {
  using Out = Result<std::map<int, NodeMode>>;
  std::map<int, NodeMode> out;
  const std::string_view prefix = kGpuScheduleLabelPrefix;
  for (auto it = labels.lower_bound(std::string(prefix));
       it != labels.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix; ++it) {
    const std::string& key = it->first;
    const std::string_view digits = std::string_view(key).substr(prefix.size());
    bool number = !digits.empty() && digits.size() <= 3 && (digits.size() == 1 || digits[0] != '0');
    for (char c : digits) number = number && c >= '0' && c <= '9';
    const int index = number ? std::stoi(std::string(digits)) : -1;
    if (!number || index > kMaxGpuIndex) {
      return Out::Error("node label " + key + "=\"" + it->second + "\": \"" + std::string(digits) +
                        "\" is no GPU index; expected " + kGpuScheduleLabelPrefix +
                        "<index>, the index a decimal 0-" + std::to_string(kMaxGpuIndex) +
                        " without leading zeros");
    }
    auto mode = ParseNodeMode(it->second, "node label " + key);
    if (!mode.ok()) return Out::Error(mode.error());
    if (*mode == NodeMode::kMig) {
      return Out::Error("node label " + key + "=\"mig\": mig is a whole node's mode (label " +
                        kScheduleLabel +
                        "); a GPU's own mode is core_mem, mem, share, exclusive or mps");
    }
    out[index] = *mode;
  }
  return out;
}

std::string_view PlacementPolicyName(PlacementPolicy policy) {
  for (const PolicyName& p : kPolicies) {
    if (p.policy == policy) return p.name;
  }
  return "";
}

Result<PlacementPolicy> ParsePlacementPolicy(std::string_view text, std::string_view input_name) {
  for (const PolicyName& p : kPolicies) {
    if (text == p.name) return p.policy;
  }
  return Result<PlacementPolicy>::Error(std::string(input_name) + "=\"" + std::string(text) +
                                        "\": unknown placement policy; expected tessera, binpack "
                                        "or spread");
}

Result<PlacementPolicy> PlacementPolicyFromLabels(
    const std::map<std::string, std::string>& labels) {
  if (const std::string* v = Lookup(labels, kPlacementLabel)) {
    return ParsePlacementPolicy(*v, std::string("node label ") + kPlacementLabel);
  }
  if (const std::string* v = Lookup(labels, kAckPlacementLabel)) {
    return ParsePlacementPolicy(*v, std::string("node label ") + kAckPlacementLabel);
  }
  return PlacementPolicy::kTessera;
}

const InventoryGpu* GpuInventory::Find(std::string_view uuid) const {
  for (const InventoryGpu& g : gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

Result<GpuInventory> ParseGpuInventory(std::string_view text) {
  const Reader r(kInventoryAnnotation);
  auto doc = r.Parse(text);
  if (!doc.ok()) return doc.status();
  if (Status s = r.Version(*doc, kInventoryVersion); !s.ok()) return s;
  GpuInventory out;
  auto mode = r.String(*doc, "", "mode", std::string("a mode: ") + kModesAllowed);
  if (!mode.ok()) return mode.status();
  auto parsed_mode = ParseNodeMode(*mode, std::string(kInventoryAnnotation) + ": mode");
  if (!parsed_mode.ok()) return parsed_mode.status();
  out.mode = *parsed_mode;
  auto gpus = r.Array(*doc, "", "gpus", "an array of GPUs");
  if (!gpus.ok()) return gpus.status();
  for (size_t i = 0; i < (*gpus)->size(); ++i) {
    const json& g = (**gpus)[i];
    const std::string path = "gpus[" + std::to_string(i) + "].";
    if (!g.is_object())
      return r.Fail(path.substr(0, path.size() - 1), "=" + Shown(g) + ": expected an object");
    InventoryGpu gpu;
    auto index = r.Unsigned(g, path, "index", 0, 1023, "an NVML index from 0 to 1023");
    if (!index.ok()) return index.status();
    gpu.index = static_cast<int>(*index);
    auto uuid = r.String(g, path, "uuid", kUuidWhat);
    if (!uuid.ok()) return uuid.status();
    if (!IsGpuUuid(*uuid))
      return r.Fail(path + "uuid", "=\"" + *uuid + "\": expected " + kUuidWhat);
    gpu.uuid = *uuid;
    auto model = r.String(g, path, "model", "NVML's device name, e.g. \"NVIDIA H200\"");
    if (!model.ok()) return model.status();
    gpu.model = *model;
    auto memory =
        r.Unsigned(g, path, "memory_bytes", 1, UINT64_MAX, "the GPU's memory in bytes (> 0)");
    if (!memory.ok()) return memory.status();
    gpu.memory = Bytes(*memory);
    auto healthy = r.Bool(g, path, "healthy");
    if (!healthy.ok()) return healthy.status();
    gpu.healthy = *healthy;
    if (auto m = g.find("mig"); m != g.end()) {
      auto mig = ParseInventoryMig(r, *m, path + "mig", out.mode);
      if (!mig.ok()) return mig.status();
      if (gpu.uuid.rfind("MIG-", 0) != 0) {
        return r.Fail(path + "uuid",
                      "=\"" + gpu.uuid + "\": a MIG device's UUID; expected MIG-...");
      }
      gpu.mig = std::move(*mig);
    } else if (out.mode == NodeMode::kMig && gpu.uuid.rfind("MIG-", 0) == 0) {
      return r.Fail(path + "mig", " is missing for MIG device " + gpu.uuid +
                                      " on a mig node; expected its GPU, model, profile and start");
    }
    if (auto m = g.find("mode"); m != g.end()) {
      auto own =
          r.String(g, path, "mode", "a GPU's own mode: core_mem, mem, share, exclusive or mps");
      if (!own.ok()) return own.status();
      auto parsed = ParseNodeMode(*own, std::string(kInventoryAnnotation) + ": " + path + "mode");
      if (!parsed.ok()) return parsed.status();
      if (*parsed == NodeMode::kMig || out.mode == NodeMode::kMig) {
        return r.Fail(path + "mode", "=\"" + *own + "\" on a " +
                                         std::string(NodeModeName(out.mode)) +
                                         " node; expected a GPU's own mode only off mig nodes, "
                                         "and never mig");
      }
      gpu.mode = *parsed;
    }
    if (out.Find(gpu.uuid) != nullptr) {
      return r.Fail(path + "uuid", "=\"" + gpu.uuid + "\": listed twice; expected each GPU once");
    }
    out.gpus.push_back(std::move(gpu));
  }
  if (Status s = CheckMigLayouts(r, out); !s.ok()) return s;
  return out;
}

std::string WriteGpuInventory(const GpuInventory& inventory) {
  json gpus = json::array();
  for (const InventoryGpu& g : inventory.gpus) {
    json entry = {{"index", g.index},
                  {"uuid", g.uuid},
                  {"model", g.model},
                  {"memory_bytes", g.memory.count()},
                  {"healthy", g.healthy}};
    if (g.mig) {
      entry["mig"] = {{"gpu", g.mig->gpu},
                      {"model", g.mig->model},
                      {"profile", g.mig->profile},
                      {"start", g.mig->start}};
    }
    if (g.mode) entry["mode"] = std::string(NodeModeName(*g.mode));
    gpus.push_back(std::move(entry));
  }
  json doc = {{"version", kInventoryVersion},
              {"mode", std::string(NodeModeName(inventory.mode))},
              {"gpus", gpus}};
  return doc.dump();
}

const ContainerAssignment* Assignment::Find(std::string_view container_name) const {
  for (const ContainerAssignment& c : containers) {
    if (c.name == container_name) return &c;
  }
  return nullptr;
}

Result<Assignment> ParseAssignment(std::string_view text) {
  const Reader r(kAssignmentAnnotation);
  auto doc = r.Parse(text);
  if (!doc.ok()) return doc.status();
  if (Status s = r.Version(*doc, kAssignmentVersion); !s.ok()) return s;
  Assignment out;
  auto node = r.String(*doc, "", "node", "the name of the node the pod is bound to");
  if (!node.ok()) return node.status();
  out.node = *node;
  auto seq = r.Unsigned(*doc, "", "seq", 0, UINT64_MAX, "the extender's decision number (>= 0)");
  if (!seq.ok()) return seq.status();
  out.seq = *seq;
  auto containers = r.Array(*doc, "", "containers", "an array of containers");
  if (!containers.ok()) return containers.status();
  for (size_t i = 0; i < (*containers)->size(); ++i) {
    const json& c = (**containers)[i];
    const std::string path = "containers[" + std::to_string(i) + "].";
    if (!c.is_object())
      return r.Fail(path.substr(0, path.size() - 1), "=" + Shown(c) + ": expected an object");
    ContainerAssignment container;
    auto name = r.String(c, path, "name", "the container's name in the pod spec");
    if (!name.ok()) return name.status();
    container.name = *name;
    if (out.Find(container.name) != nullptr) {
      return r.Fail(path + "name",
                    "=\"" + container.name + "\": listed twice; expected each container once");
    }
    auto gpus = r.Array(c, path, "gpus", "a non-empty array of GPUs");
    if (!gpus.ok()) return gpus.status();
    if ((*gpus)->empty()) return r.Fail(path + "gpus", "=[]: expected at least one GPU");
    for (size_t j = 0; j < (*gpus)->size(); ++j) {
      const json& g = (**gpus)[j];
      const std::string gpath = path + "gpus[" + std::to_string(j) + "].";
      if (!g.is_object())
        return r.Fail(gpath.substr(0, gpath.size() - 1), "=" + Shown(g) + ": expected an object");
      AssignedGpu gpu;
      auto uuid = r.String(g, gpath, "uuid", kUuidWhat);
      if (!uuid.ok()) return uuid.status();
      if (!IsGpuUuid(*uuid))
        return r.Fail(gpath + "uuid", "=\"" + *uuid + "\": expected " + kUuidWhat);
      for (const AssignedGpu& other : container.gpus) {
        if (other.uuid == *uuid) {
          return r.Fail(gpath + "uuid",
                        "=\"" + *uuid + "\": listed twice; a container spans distinct GPUs");
        }
      }
      gpu.uuid = *uuid;
      auto mem = r.Unsigned(g, gpath, "mem_bytes", 1, UINT64_MAX, "the memory cap in bytes (> 0)");
      if (!mem.ok()) return mem.status();
      gpu.mem = Bytes(*mem);
      auto core = r.Unsigned(g, gpath, "core_percent", 1, 100, "a whole percentage from 1 to 100");
      if (!core.ok()) return core.status();
      gpu.core = *Percent::FromInt(static_cast<int64_t>(*core));
      container.gpus.push_back(std::move(gpu));
    }
    out.containers.push_back(std::move(container));
  }
  return out;
}

std::string WriteAssignment(const Assignment& assignment) {
  json containers = json::array();
  for (const ContainerAssignment& c : assignment.containers) {
    json gpus = json::array();
    for (const AssignedGpu& g : c.gpus) {
      gpus.push_back(
          {{"uuid", g.uuid}, {"mem_bytes", g.mem.count()}, {"core_percent", g.core.value()}});
    }
    containers.push_back({{"name", c.name}, {"gpus", gpus}});
  }
  json doc = {{"version", kAssignmentVersion},
              {"node", assignment.node},
              {"seq", assignment.seq},
              {"containers", containers}};
  return doc.dump();
}

Result<std::vector<std::string>> MigRecutLayoutWords(std::string_view layout,
                                                     std::string_view input_name) {
  const std::string what =
      "space-separated <profile>=<count> (count 1-7; profiles: " + mig::AllProfileNamesText() + ")";
  auto fail = [&](const std::string& problem) {
    std::string shown(layout.substr(0, 80));
    return Result<std::vector<std::string>>::Error(std::string(input_name) + "=\"" + shown +
                                                   (layout.size() > 80 ? "..." : "") +
                                                   "\": " + problem + "; expected " + what);
  };
  std::vector<std::string> words;
  size_t at = 0;
  while (at < layout.size()) {
    if (layout[at] == ' ') {
      ++at;
      continue;
    }
    const size_t end = std::min(layout.find(' ', at), layout.size());
    const std::string word(layout.substr(at, end - at));
    at = end;
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return fail("\"" + word + "\" has no count");
    const std::string name = word.substr(0, eq);
    const auto names = mig::AllProfileNames();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return fail("\"" + name + "\" is no MIG profile");
    }
    const std::string count = word.substr(eq + 1);
    if (count.size() != 1 || count[0] < '1' || count[0] > '7') {
      return fail("\"" + word + "\" has count \"" + count + "\"");
    }
    for (const std::string& w : words) {
      if (w.substr(0, w.find('=')) == name) return fail("\"" + name + "\" is named twice");
    }
    words.push_back(word);
    if (words.size() > 7) return fail("more than 7 profiles");
  }
  if (words.empty()) return fail("no instances");
  return words;
}

Result<MigRecutRequest> ParseMigRecutRequest(std::string_view text) {
  const Reader r(kMigRecutAnnotation);
  if (text.size() > 4096) {
    return Result<MigRecutRequest>(
        r.Fail("", "value of " + std::to_string(text.size()) + " bytes; expected at most 4096"));
  }
  auto doc = r.Parse(text);
  if (!doc.ok()) return doc.status();
  if (Status s = r.Version(*doc, kMigRecutVersion); !s.ok()) return s;
  MigRecutRequest out;
  auto id = r.Unsigned(*doc, "", "id", 1, kMaxMigRecutId, "the request's number, 1 to 2^53");
  if (!id.ok()) return id.status();
  out.id = *id;
  auto gpu = r.String(*doc, "", "gpu", kUuidWhat);
  if (!gpu.ok()) return gpu.status();
  if (!IsGpuUuid(*gpu) || gpu->rfind("GPU-", 0) != 0) {
    return Result<MigRecutRequest>(r.Fail("gpu", "=\"" + *gpu + "\": expected " + kUuidWhat));
  }
  out.gpu = *gpu;
  auto layout = r.String(*doc, "", "layout", "profile counts such as \"1g.10gb=7\"");
  if (!layout.ok()) return layout.status();
  auto words = MigRecutLayoutWords(*layout, std::string(kMigRecutAnnotation) + ": layout");
  if (!words.ok()) return words.status();
  out.layout = *layout;
  if (auto pod = doc->find("pod"); pod != doc->end()) {
    if (!pod->is_string() || pod->get<std::string>().size() > 317) {
      return Result<MigRecutRequest>(
          r.Fail("pod", "=" + Shown(*pod) + ": expected the waiting pod's namespace/name"));
    }
    out.pod = pod->get<std::string>();
  }
  return out;
}

std::string WriteMigRecutRequest(const MigRecutRequest& request) {
  json doc = {{"version", kMigRecutVersion},
              {"id", request.id},
              {"gpu", request.gpu},
              {"layout", request.layout}};
  if (!request.pod.empty()) doc["pod"] = request.pod;
  return doc.dump();
}

namespace {
struct RecutStateName {
  MigRecutState state;
  const char* name;
};
constexpr RecutStateName kRecutStates[] = {{MigRecutState::kApplied, "applied"},
                                           {MigRecutState::kRefused, "refused"},
                                           {MigRecutState::kFailed, "failed"}};
}  // namespace

std::string_view MigRecutStateName(MigRecutState state) {
  for (const RecutStateName& s : kRecutStates) {
    if (s.state == state) return s.name;
  }
  return "failed";
}

Result<MigRecutStatus> ParseMigRecutStatus(std::string_view text) {
  const Reader r(kMigRecutStatusAnnotation);
  if (text.size() > 8192) {
    return Result<MigRecutStatus>(
        r.Fail("", "value of " + std::to_string(text.size()) + " bytes; expected at most 8192"));
  }
  auto doc = r.Parse(text);
  if (!doc.ok()) return doc.status();
  if (Status s = r.Version(*doc, kMigRecutVersion); !s.ok()) return s;
  MigRecutStatus out;
  auto id = r.Unsigned(*doc, "", "id", 0, kMaxMigRecutId, "the request's number, 0 to 2^53");
  if (!id.ok()) return id.status();
  out.id = *id;
  auto state = r.String(*doc, "", "state", "applied, refused or failed");
  if (!state.ok()) return state.status();
  bool known = false;
  for (const RecutStateName& s : kRecutStates) {
    if (*state == s.name) {
      out.state = s.state;
      known = true;
    }
  }
  if (!known) {
    return Result<MigRecutStatus>(
        r.Fail("state", "=\"" + *state + "\": expected applied, refused or failed"));
  }
  if (auto gpu = doc->find("gpu"); gpu != doc->end()) {
    if (!gpu->is_string() ||
        (!gpu->get<std::string>().empty() && !IsGpuUuid(gpu->get<std::string>()))) {
      return Result<MigRecutStatus>(r.Fail("gpu", "=" + Shown(*gpu) + ": expected " + kUuidWhat));
    }
    out.gpu = gpu->get<std::string>();
  }
  if (auto reason = doc->find("reason"); reason != doc->end()) {
    if (!reason->is_string()) {
      return Result<MigRecutStatus>(r.Fail("reason", "=" + Shown(*reason) + ": expected a string"));
    }
    out.reason = reason->get<std::string>();
  }
  return out;
}

std::string WriteMigRecutStatus(const MigRecutStatus& status) {
  json doc = {{"version", kMigRecutVersion},
              {"id", status.id},
              {"state", std::string(MigRecutStateName(status.state))},
              {"gpu", status.gpu},
              {"reason", status.reason}};
  return doc.dump();
}

std::string_view PhaseName(Phase phase) {
  return phase == Phase::kAssumed ? "assumed" : "allocated";
}

Result<Phase> ParsePhase(std::string_view text) {
  if (text == "assumed") return Phase::kAssumed;
  if (text == "allocated") return Phase::kAllocated;
  return Result<Phase>::Error(std::string(kPhaseAnnotation) + "=\"" + std::string(text) +
                              "\": unknown phase; expected assumed or allocated");
}

Result<UserAnnotations> ParseUserAnnotations(const std::map<std::string, std::string>& annotations,
                                             uint32_t max_weight) {
  UserAnnotations out;
  if (const std::string* v = Lookup(annotations, kGpuModelAnnotation)) {
    size_t pos = 0;
    for (;;) {
      const size_t bar = v->find('|', pos);
      const std::string model =
          v->substr(pos, bar == std::string::npos ? std::string::npos : bar - pos);
      if (model.empty() || model.find_first_not_of(' ') == std::string::npos) {
        return Result<UserAnnotations>::Error(
            std::string(kGpuModelAnnotation) + "=\"" + *v +
            "\": an empty model name; expected GPU model names separated by '|', e.g. "
            "\"NVIDIA A100-SXM4-80GB|NVIDIA H100 80GB HBM3\"");
      }
      out.gpu_models.push_back(model);
      if (bar == std::string::npos) break;
      pos = bar + 1;
    }
  }
  if (const std::string* v = Lookup(annotations, kGpuModeAnnotation)) {
    for (size_t pos = 0;;) {
      const size_t bar = v->find('|', pos);
      const std::string word =
          v->substr(pos, bar == std::string::npos ? std::string::npos : bar - pos);
      auto mode = ParseNodeMode(word, std::string(kGpuModeAnnotation) + "=\"" + *v + "\": mode");
      if (!mode.ok()) return Result<UserAnnotations>::Error(mode.error() + ", separated by '|'");
      if (std::find(out.gpu_modes.begin(), out.gpu_modes.end(), *mode) == out.gpu_modes.end()) {
        out.gpu_modes.push_back(*mode);
      }
      if (bar == std::string::npos) break;
      pos = bar + 1;
    }
  }
  if (const std::string* v = Lookup(annotations, kHighPriorityAnnotation)) {
    if (*v == "true") {
      out.high_priority = true;
    } else if (*v == "false") {
      out.high_priority = false;
    } else {
      return Result<UserAnnotations>::Error(std::string(kHighPriorityAnnotation) + "=\"" + *v +
                                            "\": expected true or false");
    }
  }
  if (const std::string* v = Lookup(annotations, kWeightAnnotation)) {
    auto w = ParseUnsigned(
        *v, kWeightAnnotation, 1, max_weight,
        "a whole number from 1 to " + std::to_string(max_weight) + " (the node's max_inst)");
    if (!w.ok()) return w.status();
    out.weight = static_cast<uint32_t>(*w);
  }
  return out;
}

}  // namespace tessera::k8s
