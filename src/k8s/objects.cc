// Views of Pods and Nodes.
#include "k8s/objects.h"

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
  if (!it->is_array())
    return Status::Error("pod " + pod->Key() + ": spec." + key + " is not a list");
  for (const Json& c : *it) {
    if (!c.is_object())
      return Status::Error("pod " + pod->Key() + ": spec." + key + " holds a non-object");
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

std::string ResourceVersionOf(const Json& object) {
  if (!object.is_object()) return {};
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  auto rv = meta->find("resourceVersion");
  return rv != meta->end() && rv->is_string() ? rv->get<std::string>() : std::string();
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

}  // namespace tessera::k8s
