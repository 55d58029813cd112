// Writing the extender's MIG re-cut requests on Nodes (recut_writer.h). Reads back and validates
// what the node holds before it writes; never trusts an annotation value.
#include "k8s/extender/recut_writer.h"

#include <algorithm>

#include "k8s/annotations.h"
#include "k8s/objects.h"

namespace tessera::extender {

namespace {

const k8s::Json* AnnotationOf(const k8s::Json& node, const char* key) {
  auto meta = node.find("metadata");
  if (meta == node.end() || !meta->is_object()) return nullptr;
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return nullptr;
  auto it = ann->find(key);
  return it == ann->end() || !it->is_string() ? nullptr : &*it;
}

}  // namespace

RecutWriteOutcome WriteMigRecut(k8s::ApiClient& client, const MigRecut& recut) {
  RecutWriteOutcome out;
  for (int attempt = 0; attempt < 4; ++attempt) {
    auto node = client.GetNode(recut.node);
    if (!node.ok()) {
      out.reason = "reading node " + recut.node + ": " + node.error().message;
      return out;
    }
    // The node's last request and answer. An unreadable request (someone else's write) is
    // replaced; an unreadable answer counts as none.
    uint64_t asked = 0, answered = 0;
    if (const k8s::Json* v = AnnotationOf(*node, k8s::kMigRecutAnnotation)) {
      if (auto req = k8s::ParseMigRecutRequest(v->get<std::string>()); req.ok()) asked = req->id;
    }
    if (const k8s::Json* v = AnnotationOf(*node, k8s::kMigRecutStatusAnnotation)) {
      if (auto st = k8s::ParseMigRecutStatus(v->get<std::string>()); st.ok()) answered = st->id;
    }
    if (asked > answered) {
      out.reason = "node " + recut.node + " has not answered request " + std::to_string(asked) +
                   " yet (" + k8s::kMigRecutStatusAnnotation + ")";
      return out;
    }
    const uint64_t id = std::max(asked, answered) + 1;
    if (id > k8s::kMaxMigRecutId) {
      out.reason = "node " + recut.node + ": request numbers are used up";
      return out;
    }
    const k8s::MigRecutRequest request{id, recut.gpu, recut.layout, recut.pod};
    auto patched = client.PatchNodeAnnotations(
        recut.node, {{k8s::kMigRecutAnnotation, k8s::WriteMigRecutRequest(request)}},
        k8s::ResourceVersionOf(*node));
    if (patched.ok()) {
      out.written = true;
      out.id = id;
      return out;
    }
    if (patched.kind() != k8s::ApiErrorKind::kConflict) {
      out.reason = "writing " + std::string(k8s::kMigRecutAnnotation) + " on node " + recut.node +
                   ": " + patched.error().message;
      return out;
    }
  }
  out.reason = "node " + recut.node + " changed under four writes in a row";
  return out;
}

}  // namespace tessera::extender
