// ApiBinder: the extender's bind, written to the API server through k8s::ApiClient.
//
// A bind commits in three writes, each conditioned so that no GPU share is ever given twice:
//   1. the pod: `tessera.io/assignment` and `tessera.io/phase: assumed` (docs/contracts.md), on the
//   pod's
//      resourceVersion (a 409 re-reads the pod; a bound or deleted pod ends the bind);
//   2. the node: its commit log (commit_log.h) with this decision appended, on the node's
//      resourceVersion. Before writing, every commit the log names that this extender has not
//      read yet (another replica's, or its own from before a restart) is read in, by a GET of the
//      pod, or by listing every pod when the log no longer reaches back far enough; the decision is
//      then made again on that node, so it counts them. A 409 here means the node changed under
//      us: read it and go round again (bounded);
//   3. the Binding (pods/NAME/binding).
// A failure after step 1 removes the annotations again (on the version it wrote) and reports;
// the caller releases the decision. A crash anywhere leaves either an unbound pod whose assumed
// assignment every extender counts until the scheduler places the pod again, or a bound pod.
// No lock is held on any object between requests, so nothing waits on a crashed holder.
//
// Thread-safe: binds of different pods run concurrently; the state serialises decisions.
#pragma once

#include <string>

#include "k8s/api_client.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/extender/extender_server.h"

namespace tessera::extender {

class ApiBinder : public Binder {
 public:
  ApiBinder(k8s::ApiClient& client, ClusterState& state) : client_(client), state_(state) {}
  Outcome Commit(const BindingArgs& args, BindPlan& plan) override;

  static constexpr int kAttempts = 8;

 private:
  // Reads in the pods of `node`'s commits after `verified` (see above). Empty on success.
  std::string CatchUp(const std::string& node, const NodeCommitView& view, const std::string& uid);
  // Removes the annotations written by step 1 (only while the pod still has `resource_version`).
  void Undo(const BindingArgs& args, const std::string& resource_version);

  k8s::ApiClient& client_;
  ClusterState& state_;
};

}  // namespace tessera::extender
