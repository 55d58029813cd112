// Allocator against a real tesserad on simulated GPUs: finding the pod of each Allocate in
// kubelet's order, what a container gets, every refusal (named, on the pod's events, and nothing
// registered), release, resync after tesserad lost its containers, preferences, modes, PreStart.
#include "k8s/deviceplugin/allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "testing/support/test_support.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using testing::AssignmentJson;
using testing::ContainerSpec;
using testing::GpuShare;
using ::testing::HasSubstr;
using testing::kGiB;
using testing::PodJson;
using testing::SimNode;

constexpr char kNode[] = "node-1";

class FakePods : public PodSource {
 public:
  std::vector<NodePod> Pods() const override { return pods_; }
  Status Refresh() override {
    ++refreshes;
    for (NodePod& p : late_) pods_.push_back(p);
    late_.clear();
    return Status::Ok();
  }
  // Adds a pod bound to the node, next in kubelet's order; `late`: only a Refresh() finds it.
  PodView Add(Json pod, bool late = false) {
    pod["metadata"]["uid"] = "uid-" + pod["metadata"]["name"].get<std::string>();
    pod["spec"]["nodeName"] = kNode;
    pod["status"]["phase"] = "Pending";
    NodePod p{*PodFromJson(pod), ++order_};
    (late ? late_ : pods_).push_back(p);
    return p.view;
  }
  int refreshes = 0;

 private:
  std::vector<NodePod> pods_, late_;
  uint64_t order_ = 0;
};

class FakeEvents : public EventSink {
 public:
  void PodEvent(const PodView& pod, const std::string& reason, const std::string& message,
                bool warning) override {
    events.push_back(pod.Key() + " " + reason + (warning ? " Warning: " : " Normal: ") + message);
  }
  std::vector<std::string> events;
};

class AllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(node_.Start());
    uuid0_ = node_.Uuid(0);
    uuid1_ = node_.Uuid(1);
    config_.node = kNode;
    config_.checkpoint_path = node_.Scratch("state") + "/checkpoint.json";
    config_.container_socket_dir = node_.container_sockets();
    config_.shim_dir = "/host/tessera/lib";
    config_.preload_file = "/host/tessera/ld.so.preload";
    Make();
  }
  void Make(NodeMode mode = NodeMode::kCoreMem, ResourceNames names = ResourceNames::kBoth) {
    allocator_ = std::make_unique<Allocator>(config_, &node_.client(), &pods_, &events_);
    ASSERT_TRUE(allocator_->Load().ok());
    allocator_->SetMode(mode, names);
  }
  // n device IDs of `resource` (kubelet's picks; the GPU they name does not matter).
  std::vector<std::string> Ids(size_t n, const std::string& tag = "m") {
    std::vector<std::string> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(uuid0_ + "-" + tag + std::to_string(next_id_++));
    return ids;
  }
  size_t Containers() { return node_.Status().containers.size(); }
  const TesseradContainer* Registered(const std::string& id) {
    status_ = node_.Status();
    return status_.Find(id);
  }

  SimNode node_{"SimA:16GiB:80,SimA:16GiB:80"};
  std::string uuid0_, uuid1_;
  AllocatorConfig config_;
  FakePods pods_;
  FakeEvents events_;
  std::unique_ptr<Allocator> allocator_;
  TesseradStatus status_;
  int next_id_ = 0;
};

TEST_F(AllocatorTest, APodGetsItsCapsRegisteredAndItsOwnSocket) {
  const PodView pod = pods_.Add(PodJson(
      "team", "web", {{"app", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "30"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 7, {{"app", {{uuid1_, 2 * kGiB, 30}}}})},
       {kWeightAnnotation, "2"},
       {kHighPriorityAnnotation, "true"}}));
  auto r = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(r.ok()) << r.error();
  const std::string id = Allocator::ContainerId(pod, "app");
  EXPECT_EQ(id.rfind("k8s.web.app-", 0), 0u) << id;
  EXPECT_EQ(r->envs.at("TESSERA_CONTAINER"), id);
  EXPECT_EQ(r->envs.at("TESSERA_SOCKET"), "/run/tessera/tessera.sock");
  EXPECT_EQ(r->envs.at("TESSERA_VISIBLE_DEVICES"), uuid1_);
  EXPECT_EQ(r->envs.at("NVIDIA_VISIBLE_DEVICES"), uuid1_);
  EXPECT_EQ(r->envs.at("TESSERA_MEM_LIMIT"), "2GiB");
  EXPECT_EQ(r->envs.at("TESSERA_CORE_LIMIT"), "30");
  EXPECT_EQ(r->envs.at("TESSERA_WEIGHT"), "2");
  EXPECT_EQ(r->envs.at("TESSERA_HIGH_PRIO"), "1");
  std::map<std::string, std::string> mounts;
  for (const auto& m : r->mounts) {
    EXPECT_TRUE(m.read_only) << m.container_path;
    mounts[m.container_path] = m.host_path;
  }
  EXPECT_EQ(mounts["/usr/local/tessera/lib"], "/host/tessera/lib");
  EXPECT_EQ(mounts["/etc/ld.so.preload"], "/host/tessera/ld.so.preload");
  EXPECT_EQ(mounts["/run/tessera"], node_.container_sockets() + "/" + id);
  struct stat st {};
  EXPECT_EQ(stat((node_.container_sockets() + "/" + id + "/tessera.sock").c_str(), &st), 0)
      << "tesserad opened the container's socket in its folder";

  const TesseradContainer* c = Registered(id);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->limits[0], Bytes(0)) << "nothing on the GPU the pod was not given";
  EXPECT_EQ(c->limits[1], Bytes(2 * kGiB));
  EXPECT_EQ(c->core_percent, 30u);
  EXPECT_EQ(c->weight, 2u);
  EXPECT_TRUE(c->high_priority);

  // The same container's second resource: the same answer, no second registration.
  EXPECT_TRUE(allocator_->CompletePods(pods_.Pods()).empty());
  auto again = allocator_->Allocate("tessera.io/gpu-core", Ids(30, "c"));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->envs, r->envs);
  EXPECT_EQ(Containers(), 1u);
  EXPECT_EQ(allocator_->CompletePods(pods_.Pods()), std::set<std::string>{pod.uid});
  ASSERT_EQ(events_.events.size(), 1u);
  EXPECT_THAT(events_.events[0], HasSubstr("team/web TesseraAllocated Normal: container app on " +
                                           uuid1_ + " 2GiB, 30% of GPU time"));
}

TEST_F(AllocatorTest, ContainersOfAPodInKubeletsOrderInitContainersFirst) {
  const PodView pod = pods_.Add(
      PodJson("ns", "multi",
              {{"setup", {{"tessera.io/gpu-mem", "1"}, {"tessera.io/gpu-core", "100"}}, true},
               {"app", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "50"}}},
               {"side", {{"tessera.io/gpu-mem", "3"}, {"tessera.io/gpu-core", "20"}}},
               {"plain", {{"cpu", "1"}}}},
              {{kAssignmentAnnotation, AssignmentJson(kNode, 1,
                                                      {{"setup", {{uuid0_, 1 * kGiB, 100}}},
                                                       {"app", {{uuid0_, 2 * kGiB, 50}}},
                                                       {"side", {{uuid1_, 3 * kGiB, 20}}}})}}));
  // kubelet: the init container, then each container's resources in whatever order.
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", Ids(1)).ok());
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-core", Ids(100, "c")).ok());
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-core", Ids(50, "c")).ok());
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", Ids(2)).ok());
  auto side = allocator_->Allocate("tessera.io/gpu-mem", Ids(3));
  ASSERT_TRUE(side.ok()) << side.error();
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-core", Ids(20, "c")).ok());
  EXPECT_EQ(side->envs.at("TESSERA_VISIBLE_DEVICES"), uuid1_);
  const TesseradContainer* setup = Registered(Allocator::ContainerId(pod, "setup"));
  ASSERT_NE(setup, nullptr);
  EXPECT_EQ(setup->limits[0], Bytes(kGiB));
  EXPECT_EQ(setup->core_percent, 100u);
  const TesseradContainer* app = Registered(Allocator::ContainerId(pod, "app"));
  ASSERT_NE(app, nullptr);
  EXPECT_EQ(app->limits[0], Bytes(2 * kGiB));
  EXPECT_EQ(app->core_percent, 50u);
  const TesseradContainer* s = Registered(Allocator::ContainerId(pod, "side"));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->limits[1], Bytes(3 * kGiB));
  EXPECT_EQ(s->limits[0], Bytes(0));
  EXPECT_EQ(s->core_percent, 20u);
  EXPECT_EQ(Containers(), 3u);
  EXPECT_EQ(allocator_->CompletePods(pods_.Pods()).size(), 1u);
}

TEST_F(AllocatorTest, PodsWithTheSameRequestGoInBindOrderAndTheChoiceIsRecorded) {
  const PodView a = pods_.Add(PodJson(
      "ns", "a", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, 2 * kGiB, 100}}}})}}));
  const PodView b = pods_.Add(PodJson(
      "ns", "b", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 2, {{"c", {{uuid1_, 2 * kGiB, 100}}}})}}));
  auto first = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_EQ(first->envs.at("TESSERA_VISIBLE_DEVICES"), uuid0_) << "a was bound first";
  auto second = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ(second->envs.at("TESSERA_VISIBLE_DEVICES"), uuid1_);
  const Checkpoint cp = allocator_->Snapshot();
  ASSERT_EQ(cp.records.size(), 2u);
  EXPECT_EQ(cp.records[0].pod_uid, a.uid);
  EXPECT_EQ(cp.records[0].also_waiting, std::vector<std::string>{"ns/b"});
  EXPECT_EQ(cp.records[1].pod_uid, b.uid);
  EXPECT_TRUE(cp.records[1].also_waiting.empty()) << "b was the only one left";
}

TEST_F(AllocatorTest, APodUnderWayComesBeforeTheNextOne) {
  pods_.Add(PodJson("ns", "two",
                    {{"x", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}},
                     {"y", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
                    {{kAssignmentAnnotation, AssignmentJson(kNode, 1,
                                                            {{"x", {{uuid0_, 2 * kGiB, 100}}},
                                                             {"y", {{uuid1_, 2 * kGiB, 100}}}})}}));
  const PodView one = pods_.Add(PodJson(
      "ns", "one", {{"z", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 2, {{"z", {{uuid0_, 2 * kGiB, 100}}}})}}));
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", Ids(2)).ok());
  auto y = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->envs.at("TESSERA_VISIBLE_DEVICES"), uuid1_) << "pod two's second container";
  auto z = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(allocator_->Snapshot().records.back().pod_uid, one.uid);
}

TEST_F(AllocatorTest, APodTheCacheHasNotSeenYetIsFoundByListingAgain) {
  pods_.Add(
      PodJson("ns", "fresh", {{"c", {{"tessera.io/gpu-mem", "1"}, {"tessera.io/gpu-core", "100"}}}},
              {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, kGiB, 100}}}})}}),
      /*late=*/true);
  auto r = allocator_->Allocate("tessera.io/gpu-mem", Ids(1));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(pods_.refreshes, 1);
}

TEST_F(AllocatorTest, ACallNoWaitingPodMatchesFailsAndSaysWhatIsWaiting) {
  pods_.Add(
      PodJson("ns", "small", {{"c", {{"tessera.io/gpu-mem", "1"}, {"tessera.io/gpu-core", "100"}}}},
              {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, kGiB, 100}}}})}}));
  auto r = allocator_->Allocate("tessera.io/gpu-mem", Ids(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "no pod bound to node node-1 is waiting for tessera.io/gpu-mem=5 at its next container "
            "asking "
            "for it; "
            "waiting here: ns/small (c:tessera.io/gpu-core=100 c:tessera.io/gpu-mem=1)");
  EXPECT_EQ(Containers(), 0u);
  auto unserved = allocator_->Allocate("nvidia.com/gpu", Ids(1));
  ASSERT_FALSE(unserved.ok());
  EXPECT_THAT(unserved.error(), HasSubstr("does not serve it"));
}

// Every bad input: the pod's event and the error name it; nothing is registered; the pod is not
// matched again (kubelet fails its admission).
TEST_F(AllocatorTest, BadInputsAreRefusedByNameAndChangeNothing) {
  const std::string big = "GPU-00000000-0000-4000-8000-00000000dead";
  struct Case {
    std::map<std::string, std::string> limits;
    std::map<std::string, std::string> annotations;
    std::string message;
  };
  auto assign = [&](const std::string& node, const std::string& ctr, const std::string& uuid,
                    uint64_t mem, int core) {
    return AssignmentJson(node, 1, {{ctr, {{uuid, mem, core}}}});
  };
  const std::vector<Case> cases = {
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {},
       "pod ns/p0 container c: the pod has no tessera.io/assignment annotation, so it was not "
       "placed by tessera-extender"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, "{\"version\":1,"}},
       "pod ns/p1 container c: tessera.io/assignment: \"{\"version\":1,\" is not valid JSON"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign(kNode, "c", big, 2 * kGiB, 100)}},
       "tessera.io/assignment names GPU " + big +
           ", which node node-1 does not have (its GPUs: " + uuid0_ + "," + uuid1_ + ")"},
      {{{"tessera.io/gpu-mem", "20"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 20 * kGiB, 100)}},
       "it asks tessera.io/gpu-mem=20, tessera.io/gpu-core=100, 20GiB on each of 1 GPU, more than "
       "the node's GPUs have (16GiB each) (node node-1)"},
      {{{"tessera.io/gpu-count", "1"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 17 * kGiB, 100)}},
       "tessera.io/assignment mem_bytes=18253611008 on " + uuid0_ +
           " is more than that GPU's 17179869184 bytes"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign("node-2", "c", uuid0_, 2 * kGiB, 100)}},
       "tessera.io/assignment node=\"node-2\", but the pod is bound to node node-1"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign(kNode, "other", uuid0_, 2 * kGiB, 100)}},
       "tessera.io/assignment has no entry for this container (it lists other)"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "30"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 2 * kGiB, 40)}},
       "tessera.io/assignment core_percent=40 on " + uuid0_ +
           ", but the container asks tessera.io/gpu-core=30"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "50"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 1 * kGiB, 50)}},
       "tessera.io/assignment caps its memory at 1073741824 bytes in all, but it asks "
       "tessera.io/gpu-mem=2 (2147483648 bytes)"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 1 * kGiB, 100)}},
       "tessera.io/assignment mem_bytes=1073741824 on " + uuid0_ +
           ", but a whole GPU asked with tessera.io/gpu-mem=2 on a core_mem node is capped at "
           "2147483648 bytes"},
      {{{"tessera.io/gpu-mem", "2"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 2 * kGiB, 100)}},
       "node mode core_mem does not take a memory-only share (tessera.io/gpu-mem without "
       "tessera.io/gpu-core); mode mem does (node node-1)"},
      {{{"tessera.io/gpu-count", "3"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 16 * kGiB, 100)}},
       "node has fewer GPUs than tessera.io/gpu-count=3 (it has 2) (node node-1)"},
      {{{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 2 * kGiB, 100)},
        {kWeightAnnotation, "0"}},
       "tessera.io/weight=\"0\""},
      {{{"aliyun.com/gpu-mem", "2"}, {"aliyun.com/gpu-core.percentage", "33"}},
       {{kAssignmentAnnotation, assign(kNode, "c", uuid0_, 2 * kGiB, 33)}},
       "aliyun.com/gpu-core.percentage=33: expected a multiple of 5 (as ACK requires)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string name = "p" + std::to_string(i);
    pods_.Add(PodJson("ns", name, {{"c", c.limits}}, c.annotations));
    const std::string resource = c.limits.begin()->first;
    const size_t n = std::stoul(c.limits.begin()->second);
    auto r = allocator_->Allocate(resource, Ids(n));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_THAT(r.error(), HasSubstr(c.message)) << name;
    ASSERT_FALSE(events_.events.empty());
    EXPECT_THAT(events_.events.back(),
                HasSubstr("ns/" + name + " TesseraAllocateFailed Warning: "));
    EXPECT_THAT(events_.events.back(), HasSubstr(c.message));
    EXPECT_EQ(Containers(), 0u) << name << " registered something";
    EXPECT_EQ(allocator_->Snapshot().rejected.count("uid-" + name), 1u);
  }
  EXPECT_TRUE(allocator_->Snapshot().records.empty());
}

TEST_F(AllocatorTest, ReleaseUnregistersAndRemovesTheCdiSpec) {
  config_.cdi = true;
  config_.cdi_dir = node_.Scratch("cdi");
  Make();
  const PodView pod = pods_.Add(PodJson(
      "ns", "cdi", {{"c", {{"tessera.io/gpu-mem", "4"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid1_, 4 * kGiB, 100}}}})}}));
  auto r = allocator_->Allocate("tessera.io/gpu-mem", Ids(4));
  ASSERT_TRUE(r.ok()) << r.error();
  const std::string id = Allocator::ContainerId(pod, "c");
  EXPECT_EQ(r->cdi_devices,
            (std::vector<std::string>{"nvidia.com/gpu=" + uuid1_, "tessera.io/container=" + id}));
  EXPECT_TRUE(r->envs.empty()) << "with CDI the runtime applies the spec's edits";
  const std::string spec = config_.cdi_dir + "/tessera.io-container-" + id + ".json";
  std::ifstream in(spec);
  ASSERT_TRUE(in.good()) << spec;
  const Json doc = Json::parse(in);
  EXPECT_EQ(doc["cdiVersion"], "0.5.0");
  EXPECT_EQ(doc["kind"], "tessera.io/container");
  EXPECT_EQ(doc["devices"][0]["name"], id);
  const Json env = doc["devices"][0]["containerEdits"]["env"];
  EXPECT_NE(std::find(env.begin(), env.end(), "TESSERA_MEM_LIMIT=4GiB"), env.end());
  ASSERT_NE(Registered(id), nullptr);

  const std::vector<std::string> lines = allocator_->Release({pod.uid});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("released ns/cdi container c (tesserad container " + id + ")"));
  EXPECT_EQ(Registered(id), nullptr);
  struct stat st {};
  EXPECT_NE(stat(spec.c_str(), &st), 0) << "the CDI spec outlived the pod";
  EXPECT_NE(stat((node_.container_sockets() + "/" + id).c_str(), &st), 0)
      << "the socket folder outlived it";
  EXPECT_TRUE(allocator_->Snapshot().records.empty());
}

TEST_F(AllocatorTest, ResyncRegistersWhatTesseradLostAndDropsOrphans) {
  const PodView pod = pods_.Add(PodJson(
      "ns", "kept", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, 2 * kGiB, 100}}}})}}));
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", Ids(2)).ok());
  const std::string id = Allocator::ContainerId(pod, "c");
  ASSERT_TRUE(node_.client().Unregister(id).ok());  // as a tesserad with a fresh ledger would be
  ContainerRegistration orphan;
  orphan.id = "k8s.gone.c-abcdef";
  orphan.limits = {Bytes(kGiB), Bytes(0)};
  ASSERT_TRUE(node_.client().Register(orphan).ok());
  ContainerRegistration other;  // not the plugin's: left alone
  other.id = "batch";
  ASSERT_TRUE(node_.client().Register(other).ok());
  const std::vector<std::string> lines = allocator_->Resync();
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "registered " + id + " again (tesserad had lost it)",
                       "unregistered k8s.gone.c-abcdef, which no pod of this node owns"}));
  const TesseradContainer* back = Registered(id);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->limits[0], Bytes(2 * kGiB));
  EXPECT_EQ(Registered("k8s.gone.c-abcdef"), nullptr);
  EXPECT_NE(Registered("batch"), nullptr);
}

// The reconciler resyncs while kubelet allocates and pods leave: what Allocate registers and
// Release removes meanwhile is neither "lost" nor an orphan.
TEST_F(AllocatorTest, ResyncBesideAllocationsAndReleasesFindsNothingAmiss) {
  std::set<std::string> uids;
  for (int i = 0; i < 8; ++i) {
    const std::string name = "p" + std::to_string(i);
    uids.insert(
        pods_
            .Add(PodJson(
                "ns", name, {{"c", {{"tessera.io/gpu-mem", "1"}, {"tessera.io/gpu-core", "10"}}}},
                {{kAssignmentAnnotation, AssignmentJson(kNode, i, {{"c", {{uuid0_, kGiB, 10}}}})}}))
            .uid);
  }
  std::atomic<bool> done{false};
  std::vector<std::string> lines;
  std::thread reconciler([&] {
    while (!done.load()) {
      for (std::string& l : allocator_->Resync()) lines.push_back(std::move(l));
    }
  });
  for (int i = 0; i < 8; ++i) {
    auto r = allocator_->Allocate("tessera.io/gpu-mem", Ids(1));
    EXPECT_TRUE(r.ok()) << r.error();
  }
  EXPECT_EQ(allocator_->Release(uids).size(), 8u);
  done.store(true);
  reconciler.join();
  EXPECT_THAT(lines, ::testing::IsEmpty());
  EXPECT_EQ(Containers(), 0u);
}

TEST_F(AllocatorTest, PreferencesNameTheAssignedGpus) {
  pods_.Add(PodJson(
      "ns", "pref", {{"c", {{"tessera.io/gpu-mem", "3"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid1_, 3 * kGiB, 100}}}})}}));
  std::vector<std::string> available;
  for (const std::string& u : {uuid0_, uuid1_}) {
    for (int k = 0; k < 4; ++k) available.push_back(u + "-m" + std::to_string(k));
  }
  const std::vector<std::string> picked =
      allocator_->Prefer("tessera.io/gpu-mem", available, {}, 3);
  ASSERT_EQ(picked.size(), 3u);
  for (const std::string& id : picked) EXPECT_EQ(GpuOfDevice(id), uuid1_) << id;
  EXPECT_EQ(allocator_->Prefer("tessera.io/gpu-mem", available, {uuid0_ + "-m0"}, 2).front(),
            uuid0_ + "-m0");
}

TEST_F(AllocatorTest, ExclusiveAndShareNodesHandOutGpusWithoutTesserad) {
  Make(NodeMode::kExclusive, ResourceNames::kTessera);
  pods_.Add(PodJson(
      "ns", "whole", {{"c", {{"tessera.io/gpu-count", "1"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid1_, 16 * kGiB, 100}}}})}}));
  auto whole = allocator_->Allocate("tessera.io/gpu-count", Ids(1, "n"));
  ASSERT_TRUE(whole.ok()) << whole.error();
  EXPECT_EQ(whole->envs, (std::map<std::string, std::string>{{"NVIDIA_VISIBLE_DEVICES", uuid1_}}));
  EXPECT_TRUE(whole->mounts.empty());
  pods_.Add(PodJson(
      "ns", "part", {{"c", {{"tessera.io/gpu-count", "1"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 2, {{"c", {{uuid0_, 4 * kGiB, 100}}}})}}));
  auto part = allocator_->Allocate("tessera.io/gpu-count", Ids(1, "n"));
  ASSERT_FALSE(part.ok());
  EXPECT_THAT(part.error(), HasSubstr("node node-1 is exclusive (whole GPUs only), but "
                                      "tessera.io/assignment gives it 4GiB and 100% of " +
                                      uuid0_));
  Make(NodeMode::kShare, ResourceNames::kTessera);
  pods_.Add(PodJson(
      "ns", "shared", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 3, {{"c", {{uuid0_, 2 * kGiB, 100}}}})}}));
  auto shared = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_TRUE(shared.ok()) << shared.error();
  EXPECT_EQ(shared->envs, (std::map<std::string, std::string>{{"NVIDIA_VISIBLE_DEVICES", uuid0_}}));
  EXPECT_EQ(Containers(), 0u);
  Make(NodeMode::kMig, ResourceNames::kTessera);
  auto mig = allocator_->Allocate("tessera.io/gpu-mem", Ids(2));
  ASSERT_FALSE(mig.ok());
  EXPECT_THAT(mig.error(), HasSubstr("does not serve it"));
}

TEST_F(AllocatorTest, PreStartRegistersAgainOrRefusesWithoutTesserad) {
  const PodView pod = pods_.Add(PodJson(
      "ns", "pre", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "100"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, 2 * kGiB, 100}}}})}}));
  const std::vector<std::string> ids = Ids(2);
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", ids).ok());
  const std::string id = Allocator::ContainerId(pod, "c");
  ASSERT_TRUE(node_.client().Unregister(id).ok());
  std::vector<std::string> reversed(ids.rbegin(), ids.rend());
  ASSERT_TRUE(allocator_->PreStart("tessera.io/gpu-mem", reversed).ok());
  EXPECT_NE(Registered(id), nullptr) << "PreStart registers a lost container again";
  auto unknown = allocator_->PreStart("tessera.io/gpu-mem", {uuid0_ + "-m999"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.message(), HasSubstr("no allocation of these devices is recorded"));
  node_.Stop();
  auto down = allocator_->PreStart("tessera.io/gpu-mem", ids);
  ASSERT_FALSE(down.ok());
  EXPECT_THAT(down.message(), HasSubstr("container of pod ns/pre cannot start: tesserad at " +
                                        node_.socket() + " is not reachable"));
  EXPECT_THAT(down.message(), HasSubstr("without it the container would run unisolated"));
}

TEST_F(AllocatorTest, ARestartedAllocatorCarriesOnFromItsCheckpoint) {
  const PodView pod = pods_.Add(PodJson(
      "ns", "long", {{"c", {{"tessera.io/gpu-mem", "2"}, {"tessera.io/gpu-core", "25"}}}},
      {{kAssignmentAnnotation, AssignmentJson(kNode, 1, {{"c", {{uuid0_, 2 * kGiB, 25}}}})}}));
  ASSERT_TRUE(allocator_->Allocate("tessera.io/gpu-mem", Ids(2)).ok());
  Make();  // the plugin restarted between the container's two resources
  auto core = allocator_->Allocate("tessera.io/gpu-core", Ids(25, "c"));
  ASSERT_TRUE(core.ok()) << core.error();
  EXPECT_EQ(core->envs.at("TESSERA_CONTAINER"), Allocator::ContainerId(pod, "c"));
  EXPECT_EQ(Containers(), 1u);
  EXPECT_EQ(allocator_->Snapshot().records.size(), 1u);
  EXPECT_EQ(allocator_->CompletePods(pods_.Pods()).size(), 1u);
}

}  // namespace
}  // namespace tessera::k8s
