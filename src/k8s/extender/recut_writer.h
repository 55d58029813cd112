// The extender's MIG re-cut requests on their way to the nodes: each MigRecut PlanMigRecuts chose
// becomes the Node annotation tessera.io/mig-recut (docs/contracts.md), written through the API
// server on the node's resourceVersion (a conflict reads the node again and tries once more, at
// most four times). A node answers each request once in tessera.io/mig-recut-status; while its
// latest request is unanswered no other is written there (one request per node at a time), and
// the plan is given back (ClusterState::UnplanMigRecut) so the GPU may be chosen again later.
// No decisions of its own beyond that; no placement.
#pragma once

#include <functional>
#include <string>

#include "core/result.h"
#include "k8s/api_client.h"
#include "k8s/extender/cluster_state.h"

namespace tessera::extender {

struct RecutWriteOutcome {
  bool written = false;
  uint64_t id = 0;     // the request's number when written
  std::string reason;  // why not written
};

// Writes `recut` on its node (see the file comment).
RecutWriteOutcome WriteMigRecut(k8s::ApiClient& client, const MigRecut& recut);

}  // namespace tessera::extender
