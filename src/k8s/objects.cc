// Views of Pods and Nodes, quantities and GPU requests.
#include "k8s/objects.h"

#include <limits>

namespace tessera::k8s {
namespace {

std::map<std::string, std::string> StringMap(const Json& obj, const char* key) {
  std::map<std::string, std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return out;
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (e.value().is_string()) {
      out[e.key()] = e.value().get<std::string>();
    } else {
      out[e.key()] = e.value().dump();  // quantities may arrive as JSON numbers
    }
  }
  return out;
}

std::string StringAt(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const Json& ObjectAt(const Json& obj, const char* key) {
  static const Json kEmpty = Json::object();
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? *it : kEmpty;
}

Status AddContainers(const Json& spec, const char* key, bool init, PodView* pod) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Status::Error("pod " + pod->Key() + ": spec." + key + " is not a list");
  for (const Json& c : *it) {
    if (!c.is_object()) return Status::Error("pod " + pod->Key() + ": spec." + key + " holds a non-object");
    ContainerView view;
    view.name = StringAt(c, "name");
    view.init = init;
    view.restartable = init && StringAt(c, "restartPolicy") == "Always";
    const Json& resources = ObjectAt(c, "resources");
    view.limits = StringMap(resources, "limits");
    view.requests = StringMap(resources, "requests");
    pod->containers.push_back(std::move(view));
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseQuantity(std::string_view text, std::string_view input_name) {
  auto fail = [&](const std::string& why) {
    return Result<uint64_t>::Error(std::string(input_name) + "=\"" + std::string(text) + "\": " +
                                   why + "; expected a whole number such as 2 (suffixes k, M, G, "
                                   "Ki, Mi, Gi allowed)");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return fail("not a quantity");
  if (digits > 19) return fail("too large");
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  const std::string_view suffix = text.substr(digits);
  struct Suffix {
    const char* name;
    uint64_t factor;
  };
  static constexpr Suffix kSuffixes[] = {
      {"", 1},
      {"k", 1000ull},
      {"M", 1000ull * 1000},
      {"G", 1000ull * 1000 * 1000},
      {"T", 1000ull * 1000 * 1000 * 1000},
      {"P", 1000ull * 1000 * 1000 * 1000 * 1000},
      {"E", 1000ull * 1000 * 1000 * 1000 * 1000 * 1000},
      {"Ki", 1ull << 10},
      {"Mi", 1ull << 20},
      {"Gi", 1ull << 30},
      {"Ti", 1ull << 40},
      {"Pi", 1ull << 50},
      {"Ei", 1ull << 60}};
  if (suffix == "m") {
    if (value % 1000 != 0) return fail("not a whole number");
    return value / 1000;
  }
  for (const Suffix& s : kSuffixes) {
    if (suffix == s.name) {
      if (value != 0 && s.factor > std::numeric_limits<uint64_t>::max() / value) return fail("too large");
      return value * s.factor;
    }
  }
  return fail("unknown suffix \"" + std::string(suffix) + "\"");
}

const ContainerView* PodView::Container(std::string_view container_name) const {
  for (const ContainerView& c : containers) {
    if (c.name == container_name) return &c;
  }
  return nullptr;
}

const std::string* PodView::Annotation(std::string_view key) const {
  auto it = annotations.find(std::string(key));
  return it == annotations.end() ? nullptr : &it->second;
}

Result<PodView> PodFromJson(const Json& pod) {
  if (!pod.is_object()) return Result<PodView>::Error("a pod is not a JSON object");
  PodView view;
  const Json& meta = ObjectAt(pod, "metadata");
  view.ns = StringAt(meta, "namespace");
  if (view.ns.empty()) view.ns = "default";
  view.name = StringAt(meta, "name");
  view.uid = StringAt(meta, "uid");
  view.resource_version = StringAt(meta, "resourceVersion");
  view.creation_timestamp = StringAt(meta, "creationTimestamp");
  view.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  view.labels = StringMap(meta, "labels");
  view.annotations = StringMap(meta, "annotations");
  if (view.name.empty()) return Result<PodView>::Error("a pod without metadata.name");
  const Json& spec = ObjectAt(pod, "spec");
  view.node_name = StringAt(spec, "nodeName");
  view.scheduler_name = StringAt(spec, "schedulerName");
  const Json& status = ObjectAt(pod, "status");
  view.phase = StringAt(status, "phase");
  if (auto it = status.find("conditions"); it != status.end() && it->is_array()) {
    for (const Json& c : *it) {
      if (c.is_object() && StringAt(c, "type") == "PodScheduled") {
        view.unschedulable =
            StringAt(c, "status") == "False" && StringAt(c, "reason") == "Unschedulable";
      }
    }
  }
  if (Status s = AddContainers(spec, "initContainers", true, &view); !s.ok()) return s;
  if (Status s = AddContainers(spec, "containers", false, &view); !s.ok()) return s;
  return view;
}

Result<NodeView> NodeFromJson(const Json& node) {
  if (!node.is_object()) return Result<NodeView>::Error("a node is not a JSON object");
  NodeView view;
  const Json& meta = ObjectAt(node, "metadata");
  view.name = StringAt(meta, "name");
  view.uid = StringAt(meta, "uid");
  view.resource_version = StringAt(meta, "resourceVersion");
  view.labels = StringMap(meta, "labels");
  view.annotations = StringMap(meta, "annotations");
  view.allocatable = StringMap(ObjectAt(node, "status"), "allocatable");
  if (view.name.empty()) return Result<NodeView>::Error("a node without metadata.name");
  return view;
}

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
    auto value = ParseQuantity(quantity, input);
    if (!value.ok()) return value.status();
    auto req = container.requests.find(name);
    if (req != container.requests.end()) {
      auto r = ParseQuantity(req->second, "container " + container.name + " requests " + name);
      if (!r.ok()) return r.status();
      if (*r != *value) {
        return Result<GpuRequest>::Error(input + "=" + quantity + " differs from its request " +
                                         req->second + "; expected equal values (extended "
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
        if (*value == 0) return Result<GpuRequest>::Error(input + "=0: expected at least 1 GiB");
        out.mem_gib = *value;
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

}  // namespace tessera::k8s
