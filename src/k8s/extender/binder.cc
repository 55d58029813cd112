// The bind's three conditioned writes and their recovery (see binder.h). No decisions here: the
// state decides, this file only writes and reads back.
#include "k8s/extender/binder.h"

#include <optional>
#include <utility>
#include <vector>

#include "k8s/objects.h"

namespace tessera::extender {

std::string ApiBinder::CatchUp(const std::string& node, const NodeCommitView& view,
                               const std::string& uid) {
  if (!view.log_readable || !view.log.Covers(view.verified_seq)) {
    // Commits we cannot name: read every pod.
    auto list = client_.ListPods("");
    if (!list.ok())
      return "listing pods to read node " + node + "'s commits: " + list.error().message;
    std::vector<k8s::Json> items;
    if (auto it = list->find("items"); it != list->end() && it->is_array()) {
      items.assign(it->begin(), it->end());
    }
    state_.ReplacePods(items);
    return {};
  }
  for (const CommitLog::Entry& e : view.log.recent) {
    if (e.seq <= view.verified_seq || e.uid == uid) continue;
    const size_t slash = e.pod.find('/');
    if (slash == std::string::npos) continue;  // not a pod we could have placed
    auto pod = client_.GetPod(e.pod.substr(0, slash), e.pod.substr(slash + 1));
    if (!pod.ok()) {
      if (pod.kind() == k8s::ApiErrorKind::kNotFound) continue;  // gone: it holds nothing
      return "reading pod " + e.pod + " (committed on node " + node + "): " + pod.error().message;
    }
    (void)state_.UpsertPod(*pod);  // a newer pod of the same name is just as current
  }
  return {};
}

void ApiBinder::Undo(const BindingArgs& args, const std::string& resource_version) {
  if (resource_version.empty()) return;
  (void)client_.PatchPodAnnotations(
      args.pod_namespace, args.pod_name,
      {{k8s::kAssignmentAnnotation, std::nullopt}, {k8s::kPhaseAnnotation, std::nullopt}},
      resource_version);
}

Binder::Outcome ApiBinder::Commit(const BindingArgs& args, BindPlan& plan) {
  const std::string key = args.pod_namespace + "/" + args.pod_name;
  std::string pod_rv = plan.pod_resource_version;
  std::string written;     // the assignment text on the pod
  std::string written_rv;  // the pod's resourceVersion after that write
  auto fail = [&](std::string kind, std::string message) {
    Undo(args, written_rv);
    return Outcome{false, std::move(kind), "pod " + key + " on node " + args.node + ": " + message};
  };
  for (int attempt = 0;; ++attempt) {
    if (attempt == kAttempts) {
      return fail("conflict", "the node kept changing under the commit; gave up after " +
                                  std::to_string(kAttempts) + " attempts (the scheduler retries)");
    }
    const NodeCommitView view = state_.CommitView(args.node);
    if (!view.known) return fail("node-gone", "the node is gone");
    // Every commit on the node must be in our books before ours, and ours must come after them.
    if (!view.log_readable || view.log.seq > view.verified_seq ||
        plan.assignment.seq <= view.log.seq) {
      if (!view.log_readable || view.log.seq > view.verified_seq) {
        if (std::string error = CatchUp(args.node, view, args.pod_uid); !error.empty()) {
          return fail("api-error", error);
        }
        state_.MarkVerified(args.node, view.log.seq);
      }
      auto again = state_.Redecide(args.pod_uid, args.node);
      if (!again.ok()) return fail("conflict", again.error());
      plan.assignment = std::move(again->assignment);
      continue;
    }
    // 1. The pod's annotations.
    const std::string text = k8s::WriteAssignment(plan.assignment);
    if (text != written) {
      auto patched = client_.PatchPodAnnotations(
          args.pod_namespace, args.pod_name,
          {{k8s::kAssignmentAnnotation, text},
           {k8s::kPhaseAnnotation, std::string(k8s::PhaseName(k8s::Phase::kAssumed))}},
          written_rv.empty() ? pod_rv : written_rv);
      if (!patched.ok()) {
        if (patched.kind() == k8s::ApiErrorKind::kNotFound)
          return fail("pod-gone", "the pod is gone");
        if (patched.kind() != k8s::ApiErrorKind::kConflict) {
          return fail("api-error", "writing its assignment: " + patched.error().message);
        }
        auto now = client_.GetPod(args.pod_namespace, args.pod_name);
        if (!now.ok()) {
          return fail(now.kind() == k8s::ApiErrorKind::kNotFound ? "pod-gone" : "api-error",
                      "reading it after a conflict: " + now.error().message);
        }
        auto view_now = k8s::PodFromJson(*now);
        if (!view_now.ok() || view_now->uid != args.pod_uid)
          return fail("pod-gone", "the pod was replaced");
        if (!view_now->node_name.empty()) {
          written_rv.clear();  // not ours to undo any more
          return fail("already-bound", "the pod is bound to " + view_now->node_name + " already");
        }
        if (view_now->deleting) return fail("pod-gone", "the pod is being deleted");
        const std::string* ours = view_now->Annotation(k8s::kAssignmentAnnotation);
        if (!written.empty() && (ours == nullptr || *ours != written)) written_rv.clear();
        pod_rv = view_now->resource_version;
        if (!written_rv.empty()) written_rv = pod_rv;
        written.clear();
        continue;
      }
      written = text;
      written_rv = k8s::ResourceVersionOf(*patched);
    }
    // 2. The node's commit log.
    CommitLog log = view.log_readable ? view.log : CommitLog{};
    log.Append({plan.assignment.seq, args.pod_uid, key});
    auto committed = client_.PatchNodeAnnotations(
        args.node, {{kCommitLogAnnotation, WriteCommitLog(log)}}, view.resource_version);
    if (!committed.ok()) {
      if (committed.kind() != k8s::ApiErrorKind::kConflict) {
        return fail(committed.kind() == k8s::ApiErrorKind::kNotFound ? "node-gone" : "api-error",
                    "committing on the node: " + committed.error().message);
      }
      auto node = client_.GetNode(args.node);
      if (!node.ok())
        return fail("api-error", "reading the node after a conflict: " + node.error().message);
      (void)state_.UpsertNode(*node);
      continue;
    }
    state_.NoteCommit(args.node, k8s::ResourceVersionOf(*committed), log, view.log.seq);
    break;
  }
  // 3. The Binding.
  auto bound = client_.BindPod(args.pod_namespace, args.pod_name, args.pod_uid, args.node);
  if (!bound.ok()) {
    if (bound.kind() == k8s::ApiErrorKind::kConflict) {
      auto now = client_.GetPod(args.pod_namespace, args.pod_name);
      auto view_now = now.ok() ? k8s::PodFromJson(*now) : Result<k8s::PodView>::Error("");
      if (view_now.ok() && view_now->node_name == args.node) {
        const std::string* ours = view_now->Annotation(k8s::kAssignmentAnnotation);
        if (ours != nullptr && *ours == written) return Outcome{true, {}, {}};  // ours got there
      }
      written_rv.clear();  // bound by someone else: its annotations are not ours to remove
      return fail("already-bound", "creating the Binding: " + bound.error().message);
    }
    return fail(bound.kind() == k8s::ApiErrorKind::kNotFound ? "pod-gone" : "api-error",
                "creating the Binding: " + bound.error().message);
  }
  return Outcome{true, {}, {}};
}

}  // namespace tessera::extender
