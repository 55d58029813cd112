// SlicePublisher: keeps a node's ResourceSlices (resource.k8s.io/v1) of one driver equal to what
// the plugin wants published, through the API server, as upstream's ResourceSlice controller
// (k8s.io/dynamic-resource-allocation resourceslice) does, so kube-scheduler and autoscalers read
// the pool as they expect:
//  - one pool named after the node; every slice has spec.nodeName, the pool's name, generation and
//    resourceSliceCount, and a Node owner reference (the slices go when the node goes);
//  - slice i is named "<i as 5 hex digits>-<driver>-<node>-<random>" (generateName), so an
//    existing slice is matched to its index by its name;
//  - a slice of an older generation, or one whose name matches no index, is obsolete and deleted
//    (with uid and resourceVersion preconditions) before anything else is written;
//  - the generation stays when the change is one update of one slice, and goes up by one when
//    slices must be created or more than one updated (consumers take only the highest
//    generation, and count resourceSliceCount slices of it before they trust the pool); every
//    slice then carries the new generation;
//  - nothing to publish deletes every slice.
// It watches its slices (field selector spec.nodeName and spec.driver), so a slice deleted or
// changed by someone else (kubelet deletes a driver's slices when its plugin is gone for 30 s)
// is put back; writes that fail are tried again after a second.
//
// Thread-safety: Set and the getters may be called from any thread; one thread of its own writes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "k8s/api_client.h"

namespace tessera::k8s::dra {

class SlicePublisher {
 public:
  // `node_uid` may be empty: the node is read for it before the first write.
  SlicePublisher(ApiClient* api, std::string driver, std::string node, std::string node_uid = "");
  ~SlicePublisher();
  SlicePublisher(const SlicePublisher&) = delete;
  SlicePublisher& operator=(const SlicePublisher&) = delete;

  void Start();
  // Stops writing; the slices stay (kubelet removes them when the plugin stays away).
  void Stop();

  // What the pool should hold from now on: each element is one slice's "devices" or
  // "sharedCounters" (slices.h PoolSlices); none deletes the pool.
  void Set(std::vector<Json> slices);

  // True once the API server holds exactly the wanted slices (for tests and logs).
  bool InSync() const;
  bool WaitInSync(std::chrono::milliseconds timeout) const;
  int64_t generation() const;
  std::string last_error() const;
  int writes() const { return writes_.load(); }

 private:
  void Run();
  // One pass of the controller's algorithm; true when nothing was left to do.
  Result<bool> Sync();
  void Store(const Json& slice);
  void Forget(const std::string& name);

  ApiClient* api_;
  std::string driver_, node_, node_uid_;
  std::unique_ptr<Reflector> watch_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> writes_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool dirty_ = true;
  bool in_sync_ = false;
  bool listed_ = false;
  std::vector<Json> desired_;
  std::map<std::string, Json> actual_;  // by name: the watch's view plus our own writes
  int64_t generation_ = 0;
  std::string last_error_;
};

}  // namespace tessera::k8s::dra
