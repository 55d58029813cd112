// Tests of ClusterState: filter reasons per node, decisions equal to the placement engine's,
// reservations and their release, holds rebuilt from annotations, binds prepared and finished.
#include "k8s/extender/cluster_state.h"

#include <gtest/gtest.h>

#include <bit>
#include <initializer_list>
#include <set>
#include <sstream>

#include "placement/policy.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using testing::Bound;
using testing::GpuUuid;
using testing::MigNode;
using testing::MigUuid;
using testing::Node;
using testing::Pod;
using testing::TestContainer;
using testing::TestGpu;

std::vector<TestGpu> Gpus(int n, uint64_t gib = 16, std::string model = "SimGPU") {
  return std::vector<TestGpu>(static_cast<size_t>(n), TestGpu{std::move(model), gib, true});
}

const NodeFailure* FailureOf(const FilterOutcome& out, const std::string& node) {
  for (const NodeFailure& f : out.failed) {
    if (f.node == node) return &f;
  }
  return nullptr;
}

// The GPUs a plan gives container `c`.
std::set<std::string> PlanGpus(const BindPlan& plan, size_t c = 0) {
  std::set<std::string> out;
  for (const auto& g : plan.assignment.containers.at(c).gpus) out.insert(g.uuid);
  return out;
}

// A state with a fixed, empty target workload (first-fit among equal scores) unless given one.
// Filters answer every fitting node (most tests here are about which nodes fit and why); the
// tests of FilterAnswer::kChosen, the program's default, ask for it.
std::unique_ptr<ClusterState> MakeState(
    std::shared_ptr<const placement::TargetWorkload> w = nullptr,
    FilterAnswer answer = FilterAnswer::kFitting, const Clock* clock = nullptr) {
  StateOptions o;
  o.workload = w ? w : std::make_shared<placement::TargetWorkload>();
  o.filter_answer = answer;
  o.clock = clock;
  return std::make_unique<ClusterState>(o);
}

Result<BindPlan> FilterAndBind(ClusterState& s, const k8s::Json& pod,
                               const std::vector<std::string>& nodes, std::string* chosen) {
  auto out = s.Filter(pod, nodes);
  if (!out.ok()) return out.status();
  auto prio = s.Prioritize(pod, out->fits);
  if (!prio.ok()) return prio.status();
  std::string best;
  int64_t top = -1;
  for (const NodePriority& p : *prio) {
    if (p.score > top) {
      top = p.score;
      best = p.node;
    }
  }
  if (best.empty()) return Result<BindPlan>::Error("no node fits");
  *chosen = best;
  const std::string name = pod["metadata"]["name"];
  return s.PrepareBind("default", name, "uid-" + name, best);
}

TEST(ClusterStateTest, FilterAnswersEveryNodeWithAReason) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("a-fits", Gpus(2))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("b-mem", Gpus(2), "mem")).ok());
  ASSERT_TRUE(s->UpsertNode(Node("c-exclusive", Gpus(2), "exclusive")).ok());
  ASSERT_TRUE(s->UpsertNode(Node("d-no-inventory", {}, "none")).ok());
  k8s::Json bad = Node("e-bad-inventory", Gpus(1));
  bad["metadata"]["annotations"][k8s::kInventoryAnnotation] = "{\"version\":1,\"mode\":\"fast\"}";
  ASSERT_TRUE(s->UpsertNode(bad).ok());
  ASSERT_TRUE(s->UpsertNode(Node("f-small-cpu", Gpus(2), "core_mem", "500m")).ok());
  ASSERT_TRUE(s->UpsertNode(Node("g-one-gpu", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("h-t4", Gpus(2, 16, "Tesla T4"))).ok());
  const std::vector<std::string> names = {
      "a-fits",      "b-mem",     "c-exclusive", "d-no-inventory", "e-bad-inventory",
      "f-small-cpu", "g-one-gpu", "h-t4",        "zz-unknown"};
  auto out = s->Filter(Pod("p", {{"tessera.io/gpu-core", "30"}, {"tessera.io/gpu-count", "2"}},
                           {{"tessera.io/gpu-model", "simgpu"}}),
                       names);
  ASSERT_TRUE(out.ok()) << out.error();
  EXPECT_EQ(out->fits, std::vector<std::string>{"a-fits"});
  ASSERT_EQ(out->failed.size(), names.size() - 1);
  auto expect = [&](const std::string& node, const std::string& kind, const std::string& text,
                    bool unresolvable) {
    const NodeFailure* f = FailureOf(*out, node);
    ASSERT_NE(f, nullptr) << node;
    EXPECT_EQ(f->kind, kind) << node;
    EXPECT_NE(f->reason.find(text), std::string::npos) << node << ": " << f->reason;
    EXPECT_EQ(f->unresolvable, unresolvable) << node;
  };
  expect("b-mem", "mode", "node mode mem does not reserve GPU time (tessera.io/gpu-core)", true);
  expect("c-exclusive", "mode", "takes whole GPUs only", true);
  expect("d-no-inventory", "no-gpus", "no tessera.io/gpu-inventory", true);
  expect("e-bad-inventory", "node-invalid", "tessera.io/gpu-inventory", true);
  expect("f-small-cpu", "cpu", "Insufficient cpu", false);
  expect("g-one-gpu", "gpu-count", "fewer GPUs than tessera.io/gpu-count=2", true);
  expect("h-t4", "gpu-model", "\"Tesla T4\" is not allowed by tessera.io/gpu-model", true);
  expect("zz-unknown", "node-unknown", "not known to the extender", true);
}

TEST(ClusterStateTest, CapacityReasonsNameTheResource) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("m", Gpus(1), "mem")).ok());
  std::string chosen;
  ASSERT_TRUE(FilterAndBind(*s, Pod("a", {{"tessera.io/gpu-core", "80"}}), {"n"}, &chosen).ok());
  auto core = s->Filter(Pod("b", {{"tessera.io/gpu-core", "30"}}), std::vector<std::string>{"n"});
  EXPECT_EQ(FailureOf(*core, "n")->reason, "tessera: Insufficient tessera.io/gpu-core");
  auto whole = s->Filter(Pod("c", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"});
  EXPECT_EQ(FailureOf(*whole, "n")->kind, "gpu-core");
  EXPECT_NE(FailureOf(*whole, "n")->reason.find("Insufficient tessera.io/gpu-count"),
            std::string::npos);
  // 10 % of compute but 8 of 16 GiB: memory is what is short.
  auto mem = s->Filter(Pod("d", {{"tessera.io/gpu-core", "10"}, {"tessera.io/gpu-mem", "8"}}),
                       std::vector<std::string>{"n"});
  EXPECT_EQ(FailureOf(*mem, "n")->reason, "tessera: Insufficient tessera.io/gpu-mem");
  EXPECT_FALSE(FailureOf(*mem, "n")->unresolvable);
  // A memory-only share needs a mem node.
  auto mem_only =
      s->Filter(Pod("e", {{"tessera.io/gpu-mem", "4"}}), std::vector<std::string>{"n", "m"});
  EXPECT_NE(FailureOf(*mem_only, "n")->reason.find("memory-only share"), std::string::npos);
  EXPECT_EQ(mem_only->fits, std::vector<std::string>{"m"});
}

TEST(ClusterStateTest, DecisionsAreThePlacementEnginesOwn) {
  // The same nodes and requests through ClusterState and straight through src/placement with the
  // same workload: every decision (node and GPUs) agrees.
  std::vector<placement::Request> trace;
  for (int core : {30, 30, 50, 50, 50, 100, 25, 70, 20, 100}) {
    auto r = placement::RequestFromShares(1000, 1024, 1, 0, core);
    trace.push_back(*r);
  }
  auto workload =
      std::make_shared<placement::TargetWorkload>(placement::TargetWorkload::FromRequests(trace));
  auto s = MakeState(workload);
  placement::ModelTable models;
  const int sim = *models.Intern("SimGPU/16384", 16384);
  std::vector<placement::NodeSpec> specs;
  const std::vector<int> gpu_counts = {4, 2, 8, 1, 4};
  for (size_t i = 0; i < gpu_counts.size(); ++i) {
    const std::string name = "node-" + std::to_string(i);
    ASSERT_TRUE(s->UpsertNode(Node(name, Gpus(gpu_counts[i]), "core_mem", "16", "64Gi")).ok());
    specs.push_back(
        {name, 16000, 65536, gpu_counts[i], sim, placement::NodeMode::kMemoryAndCompute});
  }
  placement::Cluster direct(models, specs);
  placement::PolicyOptions po;
  po.workload = workload.get();
  auto policy = std::move(placement::MakePolicy("tessera", po).value());
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  for (int i = 0; i < 40; ++i) {
    const int core = std::vector<int>{30, 50, 25, 70, 20, 100}[static_cast<size_t>(i) % 6];
    const placement::Request r = *placement::RequestFromShares(1000, 1024, 1, 0, core);
    const auto expected = policy->Select(direct, r);
    std::string chosen;
    auto plan = FilterAndBind(
        *s, Pod("p" + std::to_string(i), {{"tessera.io/gpu-core", std::to_string(core)}}), names,
        &chosen);
    ASSERT_EQ(plan.ok(), expected.has_value()) << "pod " << i;
    if (!expected) continue;
    EXPECT_EQ(chosen, specs[static_cast<size_t>(expected->node)].name) << "pod " << i;
    const std::string gpu = GpuUuid(chosen, std::countr_zero(expected->gpus));
    EXPECT_EQ(PlanGpus(*plan), std::set<std::string>{gpu}) << "pod " << i;
    ASSERT_TRUE(direct.Place(r, *expected).ok());
    s->FinishBind("uid-p" + std::to_string(i), *plan, true);
  }
}

TEST(ClusterStateTest, AChosenAnswerIsTheNodeTheFittingAnswerScoresTen) {
  // Two states fed the same nodes and pods, one answering every fitting node, one the choice:
  // pod after pod, the chosen answer is the one node the fitting answer's prioritize gives 10,
  // the failures are counted alike (and written alike when nothing fits), and the bind plans are
  // the same.
  auto fitting = MakeState(nullptr, FilterAnswer::kFitting);
  auto chosen = MakeState(nullptr, FilterAnswer::kChosen);
  std::vector<std::string> names;
  const std::vector<int> gpu_counts = {2, 1, 4, 0, 2};
  for (size_t i = 0; i < gpu_counts.size(); ++i) {
    const std::string name = "node-" + std::to_string(i);
    names.push_back(name);
    for (auto* s : {fitting.get(), chosen.get()}) {
      ASSERT_TRUE(s->UpsertNode(Node(name, Gpus(gpu_counts[i]), "core_mem", "8", "64Gi")).ok());
    }
  }
  int placed = 0;
  for (int i = 0; i < 30; ++i) {
    const int core = std::vector<int>{30, 50, 25, 70, 100}[static_cast<size_t>(i) % 5];
    const k8s::Json pod =
        Pod("p" + std::to_string(i), {{"tessera.io/gpu-core", std::to_string(core)}});
    auto all = fitting->Filter(pod, names);
    auto one = chosen->Filter(pod, names);
    ASSERT_TRUE(all.ok() && one.ok());
    EXPECT_EQ(all->rejected, one->rejected) << "pod " << i;
    if (all->fits.empty()) {
      // Nothing fits: both say why, node by node (the pod's Pending reasons).
      EXPECT_TRUE(one->fits.empty()) << "pod " << i;
      ASSERT_EQ(all->failed.size(), one->failed.size()) << "pod " << i;
      ASSERT_FALSE(one->failed.empty());
      for (size_t f = 0; f < all->failed.size(); ++f) {
        EXPECT_EQ(all->failed[f].node, one->failed[f].node);
        EXPECT_EQ(all->failed[f].reason, one->failed[f].reason);
      }
      continue;
    }
    // A node chosen: kube-scheduler binds there and never reads reasons, so none are written.
    EXPECT_TRUE(one->failed.empty()) << "pod " << i;
    auto scores = fitting->Prioritize(pod, all->fits);
    ASSERT_TRUE(scores.ok());
    std::vector<std::string> tens;
    for (const NodePriority& p : *scores) {
      if (p.score == 10) tens.push_back(p.node);
    }
    ASSERT_EQ(tens.size(), 1u) << "pod " << i;
    EXPECT_EQ(one->fits, tens) << "pod " << i;
    // kube-scheduler does not prioritize one node; a caller that does gets 10 for it.
    auto alone = chosen->Prioritize(pod, one->fits);
    ASSERT_TRUE(alone.ok());
    ASSERT_EQ(alone->size(), 1u);
    EXPECT_EQ(alone->front().score, 10);
    const std::string name = pod["metadata"]["name"];
    auto a = fitting->PrepareBind("default", name, "uid-" + name, tens.front());
    auto b = chosen->PrepareBind("default", name, "uid-" + name, tens.front());
    ASSERT_TRUE(a.ok() && b.ok()) << "pod " << i;
    EXPECT_EQ(k8s::WriteAssignment(a->assignment), k8s::WriteAssignment(b->assignment));
    fitting->FinishBind("uid-" + name, *a, true);
    chosen->FinishBind("uid-" + name, *b, true);
    ++placed;
  }
  EXPECT_GT(placed, 10);
  EXPECT_LT(placed, 30);  // the cluster filled: later pods found no node
}

TEST(ClusterStateTest, ReservationsKeepTheNextDecisionFromTakingTheSameShare) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n1", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("n2", Gpus(1))).ok());
  const std::vector<std::string> names = {"n1", "n2"};
  // a is filtered and prioritized; its bind has not come yet when b is filtered.
  auto a = s->Filter(Pod("a", {{"tessera.io/gpu-core", "60"}}), names);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->fits, names);
  auto b = s->Filter(Pod("b", {{"tessera.io/gpu-core", "60"}}), names);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->fits, std::vector<std::string>{"n2"});  // n1's GPU is a's
  auto c = s->Filter(Pod("c", {{"tessera.io/gpu-core", "60"}}), names);
  EXPECT_TRUE(c->fits.empty());
  EXPECT_EQ(s->Stats().holds_reserved, 2u);
  // a filtered again (a retry) replaces its own reservation instead of adding one.
  auto again = s->Filter(Pod("a", {{"tessera.io/gpu-core", "60"}}), names);
  EXPECT_EQ(again->fits, std::vector<std::string>{"n1"});
  EXPECT_EQ(s->Stats().holds_reserved, 2u);
}

TEST(ClusterStateTest, ReservationsLapseWithoutABind) {
  ManualClock clock;
  StateOptions o;
  o.workload = std::make_shared<placement::TargetWorkload>();
  o.reservation_ttl = std::chrono::seconds(30);
  o.clock = &clock;
  ClusterState s(o);
  ASSERT_TRUE(s.UpsertNode(Node("n", Gpus(1))).ok());
  ASSERT_TRUE(s.Filter(Pod("a", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"})
                  ->fits.size() == 1);
  EXPECT_TRUE(s.Filter(Pod("b", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"})
                  ->fits.empty());
  clock.Advance(std::chrono::seconds(31));
  EXPECT_EQ(s.Filter(Pod("b", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"})
                ->fits.size(),
            1u);
  EXPECT_EQ(s.Stats().reservations_expired, 1u);
}

TEST(ClusterStateTest, BindPlansStateTheAssignmentAndFailuresReleaseIt) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(2, 16))).ok());
  std::string chosen;
  auto plan = FilterAndBind(*s,
                            Pod("a", {{"tessera.io/gpu-core", "30"},
                                      {"tessera.io/gpu-mem", "6"},
                                      {"tessera.io/gpu-count", "2"}}),
                            {"n"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->assignment.node, "n");
  EXPECT_GE(plan->assignment.seq, 1u);
  ASSERT_EQ(plan->assignment.containers.size(), 1u);
  EXPECT_EQ(plan->assignment.containers[0].name, "app");
  ASSERT_EQ(plan->assignment.containers[0].gpus.size(), 2u);
  for (const auto& g : plan->assignment.containers[0].gpus) {
    EXPECT_EQ(g.core.value(), 30);
    EXPECT_EQ(g.mem.count(), uint64_t{3} << 30);  // 6 GiB over 2 GPUs
  }
  EXPECT_EQ(s->Stats().holds_binding, 1u);
  s->FinishBind("uid-a", *plan, false);
  EXPECT_EQ(s->Stats().holds_binding, 0u);
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 0);
  // Bound for real: the hold stays until the API server reports the pod; a second decision's seq
  // is larger.
  auto again = FilterAndBind(*s, Pod("a", {{"tessera.io/gpu-core", "30"}}), {"n"}, &chosen);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->assignment.seq, plan->assignment.seq);
  s->FinishBind("uid-a", *again, true);
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 300);
}

// A node whose GPUs 0-3 are mps and 4-7 core_mem (as the device plugin's inventory says them).
std::vector<TestGpu> MixedGpus() {
  std::vector<TestGpu> gpus = Gpus(8);
  for (size_t i = 0; i < 4; ++i) gpus[i].mode = "mps";
  return gpus;
}

TEST(ClusterStateTest, gpu_modes_AMixedNodePlacesEachPodOnGpusOfItsMode) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("mixed", MixedGpus(), "core_mem", "64")).ok());
  ASSERT_TRUE(s->UpsertNode(Node("plain", Gpus(2), "core_mem", "64")).ok());
  auto gpu_of = [](const BindPlan& plan) {
    const std::string uuid = plan.assignment.containers.at(0).gpus.at(0).uuid;
    for (int i = 0; i < 8; ++i) {
      if (GpuUuid("mixed", i) == uuid) return i;
    }
    return -1;
  };
  std::string chosen;
  // MPS pods go to GPUs 0-3 only, core_mem pods to 4-7 only: four of each fill them (70 % each).
  for (int i = 0; i < 4; ++i) {
    const std::string name = "mps-" + std::to_string(i);
    auto plan = FilterAndBind(
        *s, Pod(name, {{"tessera.io/gpu-core", "70"}}, {{"tessera.io/gpu-mode", "mps"}}),
        {"mixed", "plain"}, &chosen);
    ASSERT_TRUE(plan.ok()) << plan.error();
    EXPECT_EQ(chosen, "mixed");
    const int g = gpu_of(*plan);
    EXPECT_TRUE(g >= 0 && g < 4) << name << " on GPU " << g;
    s->FinishBind("uid-" + name, *plan, true);
  }
  for (int i = 0; i < 4; ++i) {
    const std::string name = "core-" + std::to_string(i);
    auto plan = FilterAndBind(
        *s, Pod(name, {{"tessera.io/gpu-core", "70"}}, {{"tessera.io/gpu-mode", "core_mem"}}),
        {"mixed"}, &chosen);
    ASSERT_TRUE(plan.ok()) << plan.error();
    const int g = gpu_of(*plan);
    EXPECT_TRUE(g >= 4 && g < 8) << name << " on GPU " << g;
    s->FinishBind("uid-" + name, *plan, true);
  }
  // Every GPU now has 30 % left: a fifth MPS pod of 70 % fits no GPU of its mode, nor here.
  auto full =
      s->Filter(Pod("mps-5", {{"tessera.io/gpu-core", "70"}}, {{"tessera.io/gpu-mode", "mps"}}),
                std::vector<std::string>{"mixed"});
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(full->fits.empty());
  // Two GPUs for one container, any mode: never MPS GPUs (one MPS server per container).
  auto pair =
      FilterAndBind(*s, Pod("pair", {{"tessera.io/gpu-core", "30"}, {"tessera.io/gpu-count", "2"}}),
                    {"mixed"}, &chosen);
  ASSERT_TRUE(pair.ok()) << pair.error();
  for (const std::string& uuid : PlanGpus(*pair)) {
    EXPECT_TRUE(uuid == GpuUuid("mixed", 4) || uuid == GpuUuid("mixed", 5) ||
                uuid == GpuUuid("mixed", 6) || uuid == GpuUuid("mixed", 7))
        << uuid;
  }
  // A pod that only takes mps GPUs, two of them: refused with the modes the node has.
  auto two_mps =
      s->Filter(Pod("two-mps", {{"tessera.io/gpu-core", "10"}, {"tessera.io/gpu-count", "2"}},
                    {{"tessera.io/gpu-mode", "mps"}}),
                std::vector<std::string>{"mixed", "plain"});
  ASSERT_TRUE(two_mps.ok());
  EXPECT_TRUE(two_mps->fits.empty());
  const NodeFailure* f = FailureOf(*two_mps, "mixed");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->kind, "mode");  // no GPU here is both mps and one a two-GPU container may take
  EXPECT_TRUE(f->unresolvable);
  EXPECT_NE(f->reason.find("core_mem: GPU 4,5,6,7; mps: GPU 0,1,2,3"), std::string::npos)
      << f->reason;
  EXPECT_NE(f->reason.find("tessera.io/gpu-mode=mps"), std::string::npos) << f->reason;
  f = FailureOf(*two_mps, "plain");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->kind, "mode");
  EXPECT_NE(f->reason.find("node mode core_mem is not among tessera.io/gpu-mode=mps"),
            std::string::npos)
      << f->reason;
  // A hostile annotation is refused by name.
  auto bad =
      s->Filter(Pod("bad", {{"tessera.io/gpu-core", "10"}}, {{"tessera.io/gpu-mode", "mps|turbo"}}),
                std::vector<std::string>{"mixed"});
  ASSERT_TRUE(bad.ok());
  ASSERT_EQ(bad->failed.size(), 1u);
  EXPECT_NE(bad->failed[0].reason.find("tessera.io/gpu-mode=\"mps|turbo\""), std::string::npos)
      << bad->failed[0].reason;
  EXPECT_NE(bad->failed[0].reason.find("core_mem"), std::string::npos) << bad->failed[0].reason;
}

TEST(ClusterStateTest, BindOnAnotherNodeThanReservedDecidesThere) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n1", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("n2", Gpus(1))).ok());
  ASSERT_TRUE(
      s->Filter(Pod("a", {{"tessera.io/gpu-core", "50"}}), std::vector<std::string>{"n1", "n2"})
          .ok());
  auto plan = s->PrepareBind("default", "a", "uid-a", "n2");  // kube-scheduler picked n2
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(PlanGpus(*plan), std::set<std::string>{GpuUuid("n2", 0)});
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 500);  // n1's reservation is gone
  auto unknown = s->PrepareBind("default", "ghost", "uid-ghost", "n1");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("not known to the extender"), std::string::npos);
}

TEST(ClusterStateTest, HoldsAreRebuiltFromAnnotationsAndReleasedWhenPodsEnd) {
  auto s = MakeState();
  std::string chosen;
  // First life: decide three pods and keep their plans as a crash would find them written.
  k8s::Json running, assumed, finished;
  {
    auto first = MakeState();
    ASSERT_TRUE(first->UpsertNode(Node("n", Gpus(1))).ok());
    for (const auto& [name, slot] :
         {std::pair{"run", &running}, {"assumed", &assumed}, {"done", &finished}}) {
      k8s::Json pod = Pod(name, {{"tessera.io/gpu-core", "30"}});
      auto plan = FilterAndBind(*first, pod, {"n"}, &chosen);
      ASSERT_TRUE(plan.ok()) << plan.error();
      pod["metadata"]["annotations"][k8s::kAssignmentAnnotation] =
          k8s::WriteAssignment(plan->assignment);
      pod["metadata"]["annotations"][k8s::kPhaseAnnotation] = "assumed";
      *slot = pod;
      first->FinishBind(std::string("uid-") + name, *plan, true);
    }
  }
  running = Bound(running, "n");
  finished = Bound(finished, "n", "Succeeded");
  // Second life: rebuilt from the list. The running pod and the assumed (unbound) one hold; the
  // finished one does not.
  s->ReplaceNodes({Node("n", Gpus(1))});
  s->ReplacePods({running, assumed, finished});
  EXPECT_EQ(s->Stats().holds_observed, 2u);
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 600);
  auto big = s->Filter(Pod("big", {{"tessera.io/gpu-core", "50"}}), std::vector<std::string>{"n"});
  EXPECT_TRUE(big->fits.empty());
  // The assumed pod is placed again by the scheduler: its old decision no longer counts.
  auto retry = s->Filter(assumed, std::vector<std::string>{"n"});
  EXPECT_EQ(retry->fits.size(), 1u);
  // The running pod is deleted: its share is back at once.
  s->RemovePod("uid-run");
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 300);  // the assumed pod's new reservation
  // A Failed pod releases too.
  ASSERT_TRUE(s->UpsertPod(Bound(Pod("x", {{"tessera.io/gpu-core", "10"}}), "n", "Failed")).ok());
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 300);
}

// A pending pod kube-scheduler found no node for, as it leaves it: PodScheduled False.
k8s::Json Unschedulable(k8s::Json pod, const std::string& created) {
  pod["metadata"]["creationTimestamp"] = created;
  pod["status"]["conditions"] = k8s::Json::array(
      {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}});
  return pod;
}

// Pods bound to the nodes named, `taken` whole GPUs each (one pod per GPU, from GPU 0, asking
// `cpu`), as the API server lists them: "<node>-run<i>", with their assignment annotation.
std::vector<k8s::Json> SingleGpuPodsOn(std::initializer_list<std::pair<const char*, int>> taken,
                                       const std::string& cpu = "1") {
  std::vector<k8s::Json> pods;
  for (const auto& [node, count] : taken) {
    for (int i = 0; i < count; ++i) {
      TestContainer c;
      c.limits = {{"tessera.io/gpu-count", "1"}};
      c.cpu = cpu;
      k8s::Json p = Pod(std::string(node) + "-run" + std::to_string(i), std::vector{c});
      k8s::Assignment a;
      a.node = node;
      a.seq = static_cast<uint64_t>(pods.size() + 1);
      a.containers = {{"app", {{GpuUuid(node, i), Bytes(16ull << 30), *Percent::FromInt(100)}}}};
      p["metadata"]["annotations"][k8s::kAssignmentAnnotation] = k8s::WriteAssignment(a);
      pods.push_back(Bound(p, node));
    }
  }
  return pods;
}

TEST(ClusterStateTest, AWaitingMultiGpuPodKeepsTheClosestNodeDrainingAcrossARestart) {
  // Three 4-GPU nodes: a has 1 GPU taken, b 3, c 2. A pod asking 4 GPUs waits (kube-scheduler
  // marked it); so does a younger one asking 4. The older gets a (3 free), the younger c (2).
  std::vector<k8s::Json> nodes = {Node("a", Gpus(4)), Node("b", Gpus(4)), Node("c", Gpus(4))};
  std::vector<k8s::Json> pods = SingleGpuPodsOn({{"a", 1}, {"b", 3}, {"c", 2}});
  pods.push_back(
      Unschedulable(Pod("old", {{"tessera.io/gpu-count", "4"}}), "2026-01-01T00:00:00Z"));
  pods.push_back(
      Unschedulable(Pod("young", {{"tessera.io/gpu-count", "4"}}), "2026-01-01T00:00:05Z"));
  const std::vector<std::string> names = {"a", "b", "c"};
  ManualClock clock;
  clock.Advance(std::chrono::hours(1));
  for (int life = 0; life < 2; ++life) {  // the second: a restarted extender, from the lists
    SCOPED_TRACE(life);
    auto s = MakeState(nullptr, FilterAnswer::kFitting, &clock);
    s->ReplaceNodes(nodes);
    s->ReplacePods(pods);
    EXPECT_EQ(s->Stats().pods_waiting, 2u);
    // The waiting pods hold nothing until they have waited 20 minutes since this extender first
    // saw them waiting (a restarted one counts from its restart).
    EXPECT_EQ(s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names)->fits.size(), 3u);
    EXPECT_EQ(s->Stats().nodes_reserved, 0u);
    clock.Advance(std::chrono::minutes(19));
    EXPECT_EQ(s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names)->fits.size(), 3u);
    clock.Advance(std::chrono::minutes(1));
    // Then another pod asking one GPU may only go to b, the node no one waits for.
    auto one = s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->fits, std::vector<std::string>{"b"});
    EXPECT_EQ(s->Stats().nodes_reserved, 2u);
    ASSERT_NE(FailureOf(*one, "a"), nullptr);
    EXPECT_EQ(FailureOf(*one, "a")->kind, "reserved");
    EXPECT_NE(FailureOf(*one, "a")->reason.find("default/old"), std::string::npos)
        << FailureOf(*one, "a")->reason;
    EXPECT_NE(FailureOf(*one, "c")->reason.find("default/young"), std::string::npos);
    EXPECT_FALSE(FailureOf(*one, "a")->unresolvable);
    EXPECT_EQ(one->rejected.at("reserved"), 2u);
    // A bind there anyway (kube-scheduler's own choice) is refused.
    EXPECT_FALSE(s->PrepareBind("default", "one", "uid-one", "a").ok());
    // A pod asking no GPU may go beside the holder's CPU (the nodes have 32 cores, the pods ask 1).
    TestContainer plain;
    plain.cpu = "2";
    auto cpu = s->Filter(Pod("cpu", std::vector<TestContainer>{plain}), names);
    EXPECT_EQ(cpu->fits.size(), 3u);
    // The same pods listed again keep when each was first seen waiting.
    s->ReplacePods(pods);
    EXPECT_EQ(s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names)->fits,
              std::vector<std::string>{"b"});
  }
  // Once the older pod is bound (to a, its two others gone), its drain ends: c stays the
  // younger pod's, and a is open again.
  auto s = MakeState(nullptr, FilterAnswer::kFitting, &clock);
  s->ReplaceNodes(nodes);
  s->ReplacePods(pods);
  clock.Advance(std::chrono::minutes(20));
  s->RemovePod("uid-a-run0");
  k8s::Json old = pods[pods.size() - 2];
  old.erase("status");
  k8s::Assignment a;
  a.node = "a";
  a.seq = 50;
  a.containers = {{"app", {}}};
  for (int i = 0; i < 4; ++i) {
    a.containers[0].gpus.push_back({GpuUuid("a", i), Bytes(16ull << 30), *Percent::FromInt(100)});
  }
  old["metadata"]["annotations"][k8s::kAssignmentAnnotation] = k8s::WriteAssignment(a);
  old["metadata"]["resourceVersion"] = "99";
  ASSERT_TRUE(s->UpsertPod(Bound(old, "a")).ok());
  EXPECT_EQ(s->Stats().pods_waiting, 1u);
  auto one = s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names);
  EXPECT_EQ(one->fits, std::vector<std::string>{"b"});  // a is full now; c is still held
  EXPECT_EQ(s->Stats().nodes_reserved, 1u);
}

TEST(ClusterStateTest, AWaitingSingleGpuPodAskingTheCpuOfSeveralGpusKeepsANodeDraining) {
  // Two 4-GPU nodes of 32 cores (8 per GPU), a with 3 GPUs and 21 cores taken, b with 2 and 14.
  // A pod asking one GPU and 16 cores (two GPUs' worth) waits: it holds b, where its CPU is free
  // (a is 5 cores short). One asking one GPU and 15 cores would hold nothing.
  std::vector<k8s::Json> nodes = {Node("a", Gpus(4)), Node("b", Gpus(4))};
  std::vector<k8s::Json> pods = SingleGpuPodsOn({{"a", 3}, {"b", 2}}, "7");
  TestContainer heavy;
  heavy.limits = {{"tessera.io/gpu-count", "1"}};
  heavy.cpu = "16";
  pods.push_back(Unschedulable(Pod("heavy", std::vector{heavy}), "2026-01-01T00:00:00Z"));
  const std::vector<std::string> names = {"a", "b"};
  ManualClock clock;
  clock.Advance(std::chrono::hours(1));
  auto s = MakeState(nullptr, FilterAnswer::kFitting, &clock);
  s->ReplaceNodes(nodes);
  s->ReplacePods(pods);
  clock.Advance(std::chrono::minutes(20));
  auto one = s->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->fits, std::vector<std::string>{"a"});
  ASSERT_NE(FailureOf(*one, "b"), nullptr);
  EXPECT_EQ(FailureOf(*one, "b")->reason,
            "tessera: node kept draining for pod default/heavy, which waits for 1 GPU and 16 CPU "
            "on one node");
  // With 15 cores it is an ordinary single-GPU pod: nothing is held.
  heavy.cpu = "15";
  pods.back() = Unschedulable(Pod("heavy", std::vector{heavy}), "2026-01-01T00:00:00Z");
  auto t = MakeState(nullptr, FilterAnswer::kFitting, &clock);
  t->ReplaceNodes(nodes);
  t->ReplacePods(pods);
  clock.Advance(std::chrono::minutes(20));
  EXPECT_EQ(t->Filter(Pod("one", {{"tessera.io/gpu-count", "1"}}), names)->fits.size(), 2u);
  EXPECT_EQ(t->Stats().nodes_reserved, 0u);
}

TEST(ClusterStateTest, BoundPodsWithoutTesseraResourcesHoldTheirCpu) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1), "core_mem", "4")).ok());
  TestContainer plain;
  plain.cpu = "3500m";
  ASSERT_TRUE(s->UpsertPod(Bound(Pod("web", std::vector<TestContainer>{plain}), "n")).ok());
  auto out = s->Filter(Pod("g", {{"tessera.io/gpu-core", "10"}}), std::vector<std::string>{"n"});
  EXPECT_EQ(FailureOf(*out, "n")->kind, "cpu");
}

TEST(ClusterStateTest, UnhealthyGpusAreOutOfPlacement) {
  auto s = MakeState();
  std::vector<TestGpu> gpus = Gpus(2);
  gpus[0].healthy = false;
  ASSERT_TRUE(s->UpsertNode(Node("n", gpus)).ok());
  std::string chosen;
  auto plan = FilterAndBind(*s, Pod("a", {{"tessera.io/gpu-count", "1"}}), {"n"}, &chosen);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PlanGpus(*plan), std::set<std::string>{GpuUuid("n", 1)});
  auto none = s->Filter(Pod("b", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"});
  EXPECT_TRUE(none->fits.empty());
}

TEST(ClusterStateTest, MultiContainerPodsGetOneEntryPerContainer) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(2))).ok());
  TestContainer a{"trainer", {{"tessera.io/gpu-core", "60"}}};
  TestContainer b{"sidecar", {{"tessera.io/gpu-core", "60"}}};
  TestContainer none{"log", {}};
  TestContainer init{"warm", {{"tessera.io/gpu-core", "20"}}, "1", "1Gi", true};
  std::string chosen;
  auto plan = FilterAndBind(*s, Pod("m", {init, a, b, none}), {"n"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->assignment.containers.size(), 3u);
  EXPECT_EQ(plan->assignment.containers[0].name, "warm");
  EXPECT_EQ(plan->assignment.containers[1].name, "trainer");
  EXPECT_EQ(plan->assignment.containers[2].name, "sidecar");
  EXPECT_NE(PlanGpus(*plan, 1), PlanGpus(*plan, 2));  // 60 + 60 do not fit one GPU
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 1400);
  // A third 60 % container fits no GPU: the pod fits nowhere, the reason names the core share.
  TestContainer c{"third", {{"tessera.io/gpu-core", "60"}}};
  auto out = s->Filter(Pod("m2", std::vector<TestContainer>{c, c}), std::vector<std::string>{"n"});
  EXPECT_TRUE(out->fits.empty());
}

TEST(ClusterStateTest, InvalidPodsAreRefusedAndEverythingElseServed) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1))).ok());
  auto weight =
      s->Filter(Pod("w", {{"tessera.io/gpu-core", "10"}}, {{"tessera.io/weight", "lots"}}),
                std::vector<std::string>{"n"});
  ASSERT_TRUE(weight.ok());
  EXPECT_TRUE(weight->fits.empty());
  EXPECT_EQ(FailureOf(*weight, "n")->kind, "pod-invalid");
  EXPECT_NE(FailureOf(*weight, "n")->reason.find("tessera.io/weight=\"lots\""), std::string::npos);
  auto core = s->Filter(Pod("c", {{"tessera.io/gpu-core", "150"}}), std::vector<std::string>{"n"});
  EXPECT_NE(FailureOf(*core, "n")->reason.find("from 1 to 100"), std::string::npos);
  auto ack = s->Filter(Pod("k", {{"aliyun.com/gpu-core.percentage", "33"}}),
                       std::vector<std::string>{"n"});
  EXPECT_NE(FailureOf(*ack, "n")->reason.find("multiple of 5"), std::string::npos);
  auto cpu = s->Filter(
      Pod("q", std::vector<TestContainer>{{"app", {{"tessera.io/gpu-core", "10"}}, "lots"}}),
      std::vector<std::string>{"n"});
  ASSERT_TRUE(cpu.ok());  // a CPU quantity it cannot read counts as 0; the pod is still served
  EXPECT_FALSE(s->Filter(k8s::Json::array(), std::vector<std::string>{"n"}).ok());
  // And the next pod is placed as if nothing happened.
  EXPECT_EQ(s->Filter(Pod("ok", {{"tessera.io/gpu-core", "10"}}), std::vector<std::string>{"n"})
                ->fits.size(),
            1u);
}

TEST(ClusterStateTest, AckNamesModelsAndPolicies) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("a100", Gpus(2, 40, "NVIDIA A100-SXM4-40GB"), "core_mem", "32",
                                 "128Gi", {{"tessera.io/gpu.placement", "spread"}}))
                  .ok());
  ASSERT_TRUE(s->UpsertNode(Node("t4", Gpus(2, 16, "Tesla T4"), "core_mem", "32", "128Gi",
                                 {{"ack.node.gpu.placement", "binpack"}}))
                  .ok());
  const std::vector<std::string> names = {"a100", "t4"};
  std::string chosen;
  auto ack = FilterAndBind(
      *s,
      Pod("ack", {{"aliyun.com/gpu-core.percentage", "25"}, {"aliyun.com/gpu-mem", "4"}},
          {{"tessera.io/gpu-model", "a100"}}),
      names, &chosen);
  ASSERT_TRUE(ack.ok()) << ack.error();
  EXPECT_EQ(chosen, "a100");
  EXPECT_EQ(ack->assignment.containers[0].gpus[0].mem.count(), uint64_t{4} << 30);
  // spread: the next share on the A100 node goes to its other GPU.
  s->FinishBind("uid-ack", *ack, true);
  auto second = FilterAndBind(
      *s, Pod("s2", {{"tessera.io/gpu-core", "25"}}, {{"tessera.io/gpu-model", "A100"}}), names,
      &chosen);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(PlanGpus(*second), PlanGpus(*ack));
  // binpack on the T4 node: two shares share a GPU.
  auto t1 = FilterAndBind(
      *s, Pod("t1", {{"tessera.io/gpu-core", "25"}}, {{"tessera.io/gpu-model", "T4"}}), names,
      &chosen);
  ASSERT_TRUE(t1.ok());
  s->FinishBind("uid-t1", *t1, true);
  auto t2 = FilterAndBind(
      *s, Pod("t2", {{"tessera.io/gpu-core", "25"}}, {{"tessera.io/gpu-model", "T4"}}), names,
      &chosen);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(PlanGpus(*t2), PlanGpus(*t1));
  // A bad placement label makes the node refuse GPU pods, naming the label.
  ASSERT_TRUE(s->UpsertNode(Node("odd", Gpus(1), "core_mem", "32", "128Gi",
                                 {{"tessera.io/gpu.placement", "tetris"}}))
                  .ok());
  auto odd = s->Filter(Pod("o", {{"tessera.io/gpu-core", "10"}}), std::vector<std::string>{"odd"});
  EXPECT_NE(FailureOf(*odd, "odd")->reason.find("tessera.io/gpu.placement"), std::string::npos);
}

TEST(ClusterStateTest, PrioritizeGivesTheEnginesChoiceTheTopScore) {
  auto s = MakeState();
  for (const char* n : {"n0", "n1", "n2"}) ASSERT_TRUE(s->UpsertNode(Node(n, Gpus(2))).ok());
  std::string chosen;
  // n1 gets a 50 % share first; tessera with an empty workload first-fits, so a second 50 %
  // share is scored on every node and the top score is unique.
  ASSERT_TRUE(FilterAndBind(*s, Pod("a", {{"tessera.io/gpu-core", "50"}}), {"n1"}, &chosen).ok());
  auto prio = s->Prioritize(Pod("b", {{"tessera.io/gpu-core", "50"}}),
                            std::vector<std::string>{"n0", "n1", "n2", "nx"});
  ASSERT_TRUE(prio.ok());
  ASSERT_EQ(prio->size(), 4u);
  int tens = 0;
  for (const NodePriority& p : *prio) {
    EXPECT_GE(p.score, 0);
    EXPECT_LE(p.score, 10);
    tens += p.score == 10;
  }
  EXPECT_EQ(tens, 1);
  EXPECT_EQ((*prio)[3].score, 0);  // unknown node
}

TEST(ClusterStateTest, InspectShowsWhoHoldsWhat) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1))).ok());
  std::string chosen;
  auto plan = FilterAndBind(*s, Pod("a", {{"tessera.io/gpu-core", "40"}}), {"n"}, &chosen);
  ASSERT_TRUE(plan.ok());
  auto j = s->Inspect(std::string("n"));
  ASSERT_TRUE(j.has_value());
  const auto& gpu = (*j)["gpus"][0];
  EXPECT_EQ(gpu["uuid"], GpuUuid("n", 0));
  EXPECT_DOUBLE_EQ(gpu["core_free_percent"].get<double>(), 60.0);
  ASSERT_EQ(gpu["holders"].size(), 1u);
  EXPECT_EQ(gpu["holders"][0]["pod"], "default/a");
  EXPECT_EQ(gpu["holders"][0]["state"], "binding");
  EXPECT_FALSE(s->Inspect(std::string("nope")).has_value());
  EXPECT_EQ((*s->Inspect(std::nullopt))["nodes"].size(), 1u);
}

TEST(ClusterStateTest, InspectListsWaitingPodsWithTheirReasonAndMarksStrandedGpus) {
  // A clock the test moves: how long a pod has waited.
  ManualClock clock;
  StateOptions o;
  o.workload = std::make_shared<placement::TargetWorkload>();
  o.clock = &clock;
  ClusterState s(o);
  ASSERT_TRUE(s.UpsertNode(Node("a", Gpus(2))).ok());
  ASSERT_TRUE(s.UpsertNode(Node("b", Gpus(2))).ok());
  const std::vector<std::string> nodes = {"a", "b"};
  std::string chosen;
  // 80 % of a's GPU 0 and all of b's GPUs are taken.
  for (const auto& [name, limits] : {std::pair<std::string, std::map<std::string, std::string>>{
                                         "share", {{"tessera.io/gpu-core", "80"}}},
                                     {"pair", {{"tessera.io/gpu-count", "2"}}}}) {
    auto plan = FilterAndBind(s, Pod(name, limits), nodes, &chosen);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.error();
    s.FinishBind("uid-" + name, *plan, true);
  }
  // Nothing waits and the target workload is empty: nothing to judge free capacity by.
  auto j = s.Inspect(std::nullopt);
  EXPECT_TRUE((*j)["pending"].empty());
  EXPECT_EQ((*j)["stranded_gpus"], 0);
  EXPECT_EQ((*j)["stranded_judged_by"], "nothing");
  // Two whole GPUs more fit no node: the pod waits with kube-scheduler's summary of the reasons,
  // and both of a's GPUs are stranded (one whole GPU free there, 20 % on the other), b's are full.
  const k8s::Json waiting = Pod("second-pair", {{"tessera.io/gpu-count", "2"}});
  auto out = s.Filter(waiting, nodes);
  ASSERT_TRUE(out.ok() && out->fits.empty());
  clock.Advance(std::chrono::seconds(7));
  ASSERT_TRUE(s.Filter(waiting, nodes).ok());  // tried again: it waits since the first
  j = s.Inspect(std::nullopt);
  ASSERT_EQ((*j)["pending"].size(), 1u) << j->dump();
  const k8s::Json& p = (*j)["pending"][0];
  EXPECT_EQ(p["pod"], "default/second-pair");
  EXPECT_EQ(p["asks"], "2 GPUs");
  EXPECT_EQ(p["reason"],
            "0/2 nodes are available: 2 tessera: Insufficient tessera.io/gpu-count (too few "
            "entirely free GPUs).")
      << p.dump();
  EXPECT_DOUBLE_EQ(p["waiting_seconds"].get<double>(), 7.0);
  EXPECT_EQ((*j)["stranded_gpus"], 2);
  EXPECT_EQ((*j)["stranded_judged_by"], "waiting pods");
  const k8s::Json& a = (*j)["nodes"][0];
  ASSERT_EQ(a["name"], "a");
  EXPECT_EQ(a["gpus"][0]["stranded"], true);
  EXPECT_EQ(a["gpus"][1]["stranded"], true);
  EXPECT_EQ((*j)["nodes"][1]["gpus"][0]["stranded"], false) << "a full GPU is never stranded";
  // A small share could use a's GPUs: once it waits too, they are not stranded.
  auto small =
      s.Filter(Pod("small", {{"tessera.io/gpu-core", "10"}}), std::vector<std::string>{"b"});
  ASSERT_TRUE(small.ok() && small->fits.empty());
  j = s.Inspect(std::nullopt);
  EXPECT_EQ((*j)["pending"].size(), 2u);
  EXPECT_EQ((*j)["stranded_gpus"], 0);
  // Bound elsewhere (by another scheduler), deleted: each leaves the list.
  ASSERT_TRUE(s.UpsertPod(Bound(Pod("small", {{"tessera.io/gpu-core", "10"}}), "a")).ok());
  s.RemovePod("uid-second-pair");
  j = s.Inspect(std::nullopt);
  EXPECT_TRUE((*j)["pending"].empty()) << j->dump();
  // A filter that finds a node takes the pod off the list too.
  ASSERT_FALSE(s.Filter(Pod("later", {{"tessera.io/gpu-count", "2"}}), nodes)->fits.size());
  EXPECT_EQ((*s.Inspect(std::nullopt))["pending"].size(), 1u);
  s.RemovePod("uid-pair");
  EXPECT_EQ(s.Filter(Pod("later", {{"tessera.io/gpu-count", "2"}}), nodes)->fits.size(), 1u);
  EXPECT_TRUE((*s.Inspect(std::nullopt))["pending"].empty());
}

// A pod the API server reports with an assignment, bound to `node`.
k8s::Json Assigned(const std::string& name, const std::string& node, int core, uint64_t gib,
                   int gpu = 0) {
  k8s::Json pod = Bound(Pod(name, {{"tessera.io/gpu-core", std::to_string(core)}}), node);
  k8s::Assignment a;
  a.node = node;
  a.seq = 100;
  a.containers.push_back(
      {"app", {{GpuUuid(node, gpu), Bytes(gib << 30), *Percent::FromInt(core)}}});
  pod["metadata"]["annotations"][k8s::kAssignmentAnnotation] = k8s::WriteAssignment(a);
  pod["metadata"]["annotations"][k8s::kPhaseAnnotation] = "allocated";
  return pod;
}

// ---- mig nodes -----------------------------------------------------------------------------

// A mig node of one H100 cut 3g.40gb@0 + 1g.10gb@4 + 1g.10gb@5, and a core_mem node.
std::unique_ptr<ClusterState> MigState() {
  auto s = MakeState();
  EXPECT_TRUE(s->UpsertNode(MigNode("mig", "H100-80GB", 1, {"3g.40gb=1", "1g.10gb=2"})).ok());
  EXPECT_TRUE(s->UpsertNode(Node("core", Gpus(2))).ok());
  return s;
}

// A mig node of two H100s cut whole (7g.80gb) that allows re-cuts, and one that does not.
k8s::Json RecutNode(const std::string& name, bool recut, const std::string& layout = "7g.80gb=1",
                    const std::string& version = "1") {
  std::vector<std::string> counts;  // "1g.10gb=4 3g.40gb=1" as MigNode takes it
  std::istringstream words(layout);
  for (std::string w; words >> w;) counts.push_back(w);
  k8s::Json node = MigNode(name, "H100-80GB", 2, counts);
  if (recut) node["metadata"]["labels"][k8s::kMigRecutLabel] = "true";
  node["metadata"]["resourceVersion"] = version;
  return node;
}

// What the re-cut tests' ClusterState runs with: no target workload, `clock`, re-cuts at most
// every `interval`.
StateOptions RecutOptions(ManualClock* clock, std::chrono::seconds interval) {
  StateOptions o;
  o.workload = std::make_shared<placement::TargetWorkload>();
  o.clock = clock;
  o.mig_recut_interval = interval;
  return o;
}

TEST(ClusterStateTest, recut_APendingOneGPodGetsAnIdleGpuCutAgainNeverOneInUse) {
  ManualClock clock;
  ClusterState s(RecutOptions(&clock, std::chrono::seconds(60)));
  ASSERT_TRUE(s.UpsertNode(RecutNode("a-fixed", false)).ok());
  ASSERT_TRUE(s.UpsertNode(RecutNode("b-dynamic", true)).ok());
  const std::vector<std::string> nodes = {"a-fixed", "b-dynamic"};
  EXPECT_TRUE(s.PlanMigRecuts().empty()) << "nothing waits";
  // A whole-GPU pod runs on one of b's GPUs.
  std::string chosen;
  auto big =
      FilterAndBind(s, Pod("big", {{"tessera.io/mig-7g.80gb", "1"}}), {"b-dynamic"}, &chosen);
  ASSERT_TRUE(big.ok()) << big.error();
  s.FinishBind("uid-big", *big, true);
  const std::string used = big->assignment.containers[0].gpus[0].uuid;
  const std::string used_gpu =
      used == MigUuid("b-dynamic", 0, 0) ? GpuUuid("b-dynamic", 0) : GpuUuid("b-dynamic", 1);
  // A 1g.10gb pod finds no 1g instance anywhere: it waits.
  const k8s::Json one = Pod("one", {{"tessera.io/mig-1g.10gb", "1"}});
  ASSERT_TRUE(s.Filter(one, nodes)->fits.empty());
  auto recuts = s.PlanMigRecuts();
  ASSERT_EQ(recuts.size(), 1u);
  const MigRecut& r = recuts[0];
  EXPECT_EQ(r.node, "b-dynamic") << "a-fixed is not labelled " << k8s::kMigRecutLabel;
  EXPECT_NE(r.gpu, used_gpu) << "never the GPU a pod uses";
  EXPECT_EQ(r.gpu.rfind("GPU-", 0), 0u) << r.gpu;
  EXPECT_NE(r.layout.find("1g.10gb="), std::string::npos) << r.layout;
  EXPECT_EQ(r.pod, "default/one");
  // The interval bounds it: not again at once, nor within 60 s; again after.
  EXPECT_TRUE(s.PlanMigRecuts().empty());
  clock.Advance(std::chrono::seconds(59));
  EXPECT_TRUE(s.PlanMigRecuts().empty());
  clock.Advance(std::chrono::seconds(2));
  ASSERT_EQ(s.PlanMigRecuts(), recuts);
  // The node applied it (its inventory now lists the new instances): the pod lands there, and
  // nothing more is cut.
  clock.Advance(std::chrono::seconds(61));
  k8s::Json applied = RecutNode("b-dynamic", true, r.layout, "2");
  ASSERT_TRUE(s.UpsertNode(applied).ok());
  s.RemovePod("uid-big");  // (the test's node has both GPUs cut so; the big pod is gone first)
  auto landed = FilterAndBind(s, one, nodes, &chosen);
  ASSERT_TRUE(landed.ok()) << landed.error();
  EXPECT_EQ(chosen, "b-dynamic");
  s.FinishBind("uid-one", *landed, true);
  EXPECT_TRUE(s.PlanMigRecuts().empty());
}

// tesserad cuts no GPU while a device of a later GPU is in use: the extender never asks it to.
TEST(ClusterStateTest, recut_NoGpuBeforeOneInUseIsAskedFor) {
  ManualClock clock;
  ClusterState s(RecutOptions(&clock, std::chrono::seconds(1)));
  ASSERT_TRUE(s.UpsertNode(RecutNode("b-dynamic", true)).ok());
  const std::vector<std::string> nodes = {"b-dynamic"};
  // Two whole-GPU pods take both GPUs; the one on GPU 0 leaves.
  std::string chosen;
  std::vector<std::string> uids;
  for (const std::string name : {"big0", "big1"}) {
    auto out = FilterAndBind(s, Pod(name, {{"tessera.io/mig-7g.80gb", "1"}}), nodes, &chosen);
    ASSERT_TRUE(out.ok()) << out.error();
    s.FinishBind("uid-" + name, *out, true);
    if (out->assignment.containers[0].gpus[0].uuid == MigUuid("b-dynamic", 0, 0)) {
      uids.insert(uids.begin(), "uid-" + name);
    } else {
      uids.push_back("uid-" + name);
    }
  }
  ASSERT_EQ(uids.size(), 2u);
  s.RemovePod(uids[0]);
  const k8s::Json one = Pod("one", {{"tessera.io/mig-1g.10gb", "1"}});
  ASSERT_TRUE(s.Filter(one, nodes)->fits.empty());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(s.PlanMigRecuts().empty()) << "GPU 0 is free but GPU 1 is in use after it";
    clock.Advance(std::chrono::seconds(2));
  }
  // GPU 1's pod leaves: now GPU 0, the first of the free GPUs after the last in use, is cut.
  s.RemovePod(uids[1]);
  ASSERT_TRUE(s.Filter(one, nodes)->fits.empty());
  auto recuts = s.PlanMigRecuts();
  ASSERT_EQ(recuts.size(), 1u);
  EXPECT_EQ(recuts[0].gpu, GpuUuid("b-dynamic", 0));
}

TEST(ClusterStateTest, recut_NoGpuWithAPodOrAnUnlabelledNodeIsEverCut) {
  ManualClock clock;
  ClusterState s(RecutOptions(&clock, std::chrono::seconds(1)));
  ASSERT_TRUE(s.UpsertNode(RecutNode("a-fixed", false)).ok());
  ASSERT_TRUE(s.UpsertNode(RecutNode("b-dynamic", true)).ok());
  std::string chosen;
  // Both of b's GPUs run a pod (one bound, one only reserved by a filter: both hold it).
  auto big =
      FilterAndBind(s, Pod("big", {{"tessera.io/mig-7g.80gb", "1"}}), {"b-dynamic"}, &chosen);
  ASSERT_TRUE(big.ok()) << big.error();
  s.FinishBind("uid-big", *big, true);
  ASSERT_EQ(s.Filter(Pod("big2", {{"tessera.io/mig-7g.80gb", "1"}}),
                     std::vector<std::string>{"b-dynamic"})
                ->fits.size(),
            1u);
  ASSERT_TRUE(s.Filter(Pod("one", {{"tessera.io/mig-1g.10gb", "1"}}),
                       std::vector<std::string>{"a-fixed", "b-dynamic"})
                  ->fits.empty());
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(s.PlanMigRecuts().empty()) << "a-fixed is idle but not labelled; b is in use";
    clock.Advance(std::chrono::seconds(2));
  }
  // A hostile label refuses the node by name.
  k8s::Json bad = RecutNode("c-bad", false);
  bad["metadata"]["labels"][k8s::kMigRecutLabel] = "yes";
  ASSERT_TRUE(s.UpsertNode(bad).ok());
  auto out =
      s.Filter(Pod("one2", {{"tessera.io/mig-1g.10gb", "1"}}), std::vector<std::string>{"c-bad"});
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->failed.size(), 1u);
  EXPECT_NE(
      out->failed[0].reason.find("label tessera.io/mig.recut=\"yes\": expected true or false"),
      std::string::npos)
      << out->failed[0].reason;
}

TEST(ClusterStateTest, MigPodsTakeAFreeInstanceAndTheAssignmentNamesItsUuid) {
  auto s = MigState();
  std::string chosen;
  const k8s::Json big = Pod("big", {{"tessera.io/mig-3g.40gb", "1"}});
  auto out = s->Filter(big, std::vector<std::string>{"core", "mig"});
  ASSERT_TRUE(out.ok()) << out.error();
  EXPECT_EQ(out->fits, std::vector<std::string>{"mig"});
  const NodeFailure* core = FailureOf(*out, "core");
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->reason,
            "tessera: node mode core_mem serves no MIG instances (tessera.io/mig-<profile>); mig "
            "nodes do");
  EXPECT_TRUE(core->unresolvable);
  auto plan = FilterAndBind(*s, big, {"core", "mig"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(chosen, "mig");
  ASSERT_EQ(plan->assignment.containers.size(), 1u);
  ASSERT_EQ(plan->assignment.containers[0].gpus.size(), 1u);
  const k8s::AssignedGpu& g = plan->assignment.containers[0].gpus[0];
  EXPECT_EQ(g.uuid, MigUuid("mig", 0, 0));
  EXPECT_EQ(g.mem, Bytes(40ull << 30)) << "the instance's whole memory";
  EXPECT_EQ(g.core.value(), 100);
  s->FinishBind("uid-big", *plan, true);
  // The only 3g.40gb is held: the next one is told so, by profile and with what is free.
  auto second =
      s->Filter(Pod("big2", {{"tessera.io/mig-3g.40gb", "1"}}), std::vector<std::string>{"mig"});
  const NodeFailure* why = FailureOf(*second, "mig");
  ASSERT_NE(why, nullptr);
  EXPECT_EQ(why->reason,
            "tessera: no free 3g.40gb instance on the node (its instances: 1g.10gb 2 free "
            "of 2, 3g.40gb 0 free of 1)");
  EXPECT_EQ(why->kind, "mig-instance");
  EXPECT_FALSE(why->unresolvable) << "preempting the holder would help";
  // 1g.10gb pods take the free instances, lowest slot first; a third finds none.
  for (int start : {4, 5}) {
    auto small = FilterAndBind(
        *s, Pod("s" + std::to_string(start), {{"tessera.io/mig-1g.10gb", "1"}}), {"mig"}, &chosen);
    ASSERT_TRUE(small.ok()) << small.error();
    EXPECT_EQ(small->assignment.containers[0].gpus[0].uuid, MigUuid("mig", 0, start));
    EXPECT_EQ(small->assignment.containers[0].gpus[0].mem, Bytes(10ull << 30));
    s->FinishBind("uid-s" + std::to_string(start), *small, true);
  }
  EXPECT_TRUE(
      s->Filter(Pod("s6", {{"tessera.io/mig-1g.10gb", "1"}}), std::vector<std::string>{"mig"})
          ->fits.empty());
  // A profile the node's model does not have, and a share: neither ever fits there.
  auto a30 =
      s->Filter(Pod("a30", {{"tessera.io/mig-1g.6gb", "1"}}), std::vector<std::string>{"mig"});
  EXPECT_EQ(FailureOf(*a30, "mig")->reason,
            "tessera: the node's GPUs (H100-80GB) have no MIG profile 1g.6gb; theirs: 1g.10gb, "
            "1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb");
  EXPECT_TRUE(FailureOf(*a30, "mig")->unresolvable);
  auto share =
      s->Filter(Pod("share", {{"tessera.io/gpu-core", "30"}}), std::vector<std::string>{"mig"});
  EXPECT_EQ(
      FailureOf(*share, "mig")->reason,
      "tessera: node mode mig gives MIG instances only (tessera.io/mig-<profile>: 1); it asks "
      "for a share (tessera.io/gpu-core=30)");
  // What the extender holds, per MIG device.
  auto j = s->Inspect(std::string("mig"));
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ((*j)["mode"], "mig");
  ASSERT_EQ((*j)["gpus"].size(), 3u);
  EXPECT_EQ((*j)["gpus"][0]["mig"]["profile"], "3g.40gb");
  EXPECT_EQ((*j)["gpus"][0]["mig"]["taken"], true);
  EXPECT_EQ((*j)["gpus"][0]["holders"][0]["pod"], "default/big");
}

TEST(ClusterStateTest, MigHoldsComeFromAssignmentsAndTwoContainersTakeTwoInstances) {
  auto s = MigState();
  // A bound pod holding the 3g.40gb, as the API server reports it.
  k8s::Json held = Bound(Pod("held", {{"tessera.io/mig-3g.40gb", "1"}}), "mig");
  k8s::Assignment a;
  a.node = "mig";
  a.seq = 7;
  a.containers.push_back({"app", {{MigUuid("mig", 0, 0), Bytes(40ull << 30), Percent::Full()}}});
  held["metadata"]["annotations"][k8s::kAssignmentAnnotation] = k8s::WriteAssignment(a);
  ASSERT_TRUE(s->UpsertPod(held).ok());
  EXPECT_TRUE(
      s->Filter(Pod("big", {{"tessera.io/mig-3g.40gb", "1"}}), std::vector<std::string>{"mig"})
          ->fits.empty());
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 3 * 1000 / 7);
  s->RemovePod("uid-held");
  EXPECT_EQ(
      s->Filter(Pod("big", {{"tessera.io/mig-3g.40gb", "1"}}), std::vector<std::string>{"mig"})
          ->fits.size(),
      1u);
  // Two containers of one pod, each a 1g.10gb: the two instances.
  TestContainer first, second;
  first.name = "one";
  first.limits = {{"tessera.io/mig-1g.10gb", "1"}};
  second.name = "two";
  second.limits = first.limits;
  std::string chosen;
  auto plan =
      FilterAndBind(*s, Pod("pair", std::vector<TestContainer>{first, second}), {"mig"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->assignment.containers.size(), 2u);
  EXPECT_EQ(plan->assignment.containers[0].gpus[0].uuid, MigUuid("mig", 0, 4));
  EXPECT_EQ(plan->assignment.containers[1].gpus[0].uuid, MigUuid("mig", 0, 5));
  // A third container would find none: the pod does not fit. (The 3g.40gb is reserved by the
  // filter of "big" above: a filter reserves its choice until the bind.)
  TestContainer third = first;
  third.name = "three";
  auto trio = s->Filter(Pod("trio", std::vector<TestContainer>{first, second, third}),
                        std::vector<std::string>{"mig"});
  ASSERT_EQ(trio->failed.size(), 1u);
  EXPECT_EQ(trio->failed[0].reason,
            "tessera: no free instances for every MIG container of the pod (1g.10gb, 1g.10gb, "
            "1g.10gb) on the node (its instances: 1g.10gb 0 free of 2, 3g.40gb 0 free of 1)");
}

TEST(ClusterStateTest, UnhealthyMigDevicesAreOutOfPlacement) {
  auto s = MakeState();
  ASSERT_TRUE(
      s->UpsertNode(MigNode("mig", "H100-80GB", 1, {"3g.40gb=2"}, 80, {MigUuid("mig", 0, 0)}))
          .ok());
  std::string chosen;
  auto plan = FilterAndBind(*s, Pod("a", {{"tessera.io/mig-3g.40gb", "1"}}), {"mig"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->assignment.containers[0].gpus[0].uuid, MigUuid("mig", 0, 4));
  s->FinishBind("uid-a", *plan, true);
  EXPECT_TRUE(
      s->Filter(Pod("b", {{"tessera.io/mig-3g.40gb", "1"}}), std::vector<std::string>{"mig"})
          ->fits.empty());
}

TEST(ClusterStateTest, WhatTheApiServerSaysOutranksReservations) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1))).ok());
  ASSERT_EQ(s->Filter(Pod("r", {{"tessera.io/gpu-count", "1"}}), std::vector<std::string>{"n"})
                ->fits.size(),
            1u);
  // Another scheduler's pod turns up on the GPU: it counts, the reservation yields.
  ASSERT_TRUE(s->UpsertPod(Assigned("x", "n", 100, 16)).ok());
  EXPECT_EQ(s->Stats().holds_reserved, 0u);
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 1000);
  auto plan = s->PrepareBind("default", "r", "uid-r", "n");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().find("no longer fits"), std::string::npos) << plan.error();
}

TEST(ClusterStateTest, SharesThatDidNotFitCountOnceThereIsRoom) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(1))).ok());
  // Two bound pods whose assignments over-commit the GPU (written by hand): the second does not
  // fit the books; when the first goes, it is counted.
  ASSERT_TRUE(s->UpsertPod(Assigned("x", "n", 60, 8)).ok());
  ASSERT_TRUE(s->UpsertPod(Assigned("y", "n", 60, 8)).ok());
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 600);
  EXPECT_GE(s->Stats().accounting_conflicts, 1u);
  s->RemovePod("uid-x");
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 600);  // y's share, now in the books
  auto j = s->Inspect(std::string("n"));
  ASSERT_EQ((*j)["gpus"][0]["holders"].size(), 1u);
  EXPECT_EQ((*j)["gpus"][0]["holders"][0]["pod"], "default/y");
  EXPECT_FALSE((*j)["pods"][0].contains("conflict"));
}

TEST(ClusterStateTest, AWholeGpuKeepsTheMemoryCapItAskedFor) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(2))).ok());
  std::string chosen;
  auto plan = FilterAndBind(
      *s, Pod("w", {{"tessera.io/gpu-core", "100"}, {"tessera.io/gpu-mem", "4"}}), {"n"}, &chosen);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->assignment.containers[0].gpus[0].core.value(), 100);
  EXPECT_EQ(plan->assignment.containers[0].gpus[0].mem.count(), uint64_t{4} << 30);
  s->FinishBind("uid-w", *plan, true);
  // The GPU is the pod's alone all the same.
  EXPECT_EQ(s->Stats().gpu_milli_allocated, 1000);
  auto other = s->Filter(Pod("x", {{"tessera.io/gpu-core", "10"}}), std::vector<std::string>{"n"});
  ASSERT_EQ(other->fits.size(), 1u);
  auto x = s->PrepareBind("default", "x", "uid-x", "n");
  ASSERT_TRUE(x.ok());
  EXPECT_NE(x->assignment.containers[0].gpus[0].uuid, plan->assignment.containers[0].gpus[0].uuid);
}

TEST(ClusterStateTest, OurCommitIsVerifiedWhenItsWatchEventArrivesBeforeTheWriteReturns) {
  // The binder's node write returns after the watch has already brought the node with that very
  // commit in its log: the commit is still ours, and the next bind on the node needs no catch-up
  // (before, it read the log's pods again and rebuilt the whole state: the bind's p99).
  auto s = MakeState();
  k8s::Json node = Node("n1", Gpus(1));
  node["metadata"]["resourceVersion"] = "10";
  ASSERT_TRUE(s->UpsertNode(node).ok());
  s->MarkVerified("n1", 0);
  const NodeCommitView before = s->CommitView("n1");
  ASSERT_TRUE(before.log_readable);
  CommitLog log = before.log;
  log.Append({before.log.seq + 1, "uid-a", "default/a"});
  k8s::Json written = node;
  written["metadata"]["resourceVersion"] = "11";
  written["metadata"]["annotations"][std::string(kCommitLogAnnotation)] = WriteCommitLog(log);
  ASSERT_TRUE(s->UpsertNode(written).ok());  // the watch event, first
  s->NoteCommit("n1", "11", log, before.log.seq);
  const NodeCommitView after = s->CommitView("n1");
  EXPECT_EQ(after.log.seq, log.seq);
  EXPECT_EQ(after.verified_seq, log.seq) << "our own commit was left for a catch-up";
}

// ---- preempt --------------------------------------------------------------------------------

// `pod` with spec.priority `priority` (admission sets it from the pod's PriorityClass).
k8s::Json WithPriority(k8s::Json pod, int priority) {
  pod["spec"]["priority"] = priority;
  return pod;
}

std::vector<std::string> VictimsOn(const std::vector<PreemptCandidate>& out,
                                   const std::string& node) {
  for (const PreemptCandidate& c : out) {
    if (c.node == node) return c.victims;
  }
  return {};
}

TEST(ClusterStateTest, PreemptKeepsNodesWhereTheVictimsFreeWhatThePodNeeds) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("one", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("small", Gpus(1, 8))).ok());
  ASSERT_TRUE(s->UpsertPod(WithPriority(Assigned("holder", "one", 100, 16), 0)).ok());
  ASSERT_TRUE(s->UpsertPod(WithPriority(Assigned("tiny", "small", 100, 8), 0)).ok());
  s->ReplacePods({WithPriority(Assigned("holder", "one", 100, 16), 0),
                  WithPriority(Assigned("tiny", "small", 100, 8), 0)});
  const k8s::Json urgent = WithPriority(
      Pod("urgent", {{"tessera.io/gpu-core", "100"}, {"tessera.io/gpu-mem", "12"}}), 1000);
  EXPECT_TRUE(s->Filter(urgent, std::vector<std::string>{"one", "small"})->fits.empty());
  const std::vector<PreemptCandidate> proposed = {{"one", {"uid-holder"}, 0},
                                                  {"small", {"uid-tiny"}, 0}};
  auto out = s->Preempt(urgent, proposed);
  ASSERT_TRUE(out.ok()) << out.error();
  // On "one" evicting the holder frees a whole 16 GiB GPU; "small"'s 8 GiB GPU never holds 12.
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ(VictimsOn(*out, "one"), std::vector<std::string>{"uid-holder"});
  // Preempt changes nothing: the holder still holds its GPU.
  EXPECT_TRUE(s->Filter(urgent, std::vector<std::string>{"one"})->fits.empty());
}

// kube-scheduler counts devices: two half-used GPUs have 100 gpu-core devices free, so its own
// preemption proposes no victim there; a whole GPU needs one of them emptied.
TEST(ClusterStateTest, PreemptAddsLowerPriorityVictimsTheEnginesPlacementNeeds) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("n", Gpus(2))).ok());
  const k8s::Json a = WithPriority(Assigned("a", "n", 50, 8, 0), 10);
  const k8s::Json b = WithPriority(Assigned("b", "n", 50, 8, 1), 0);
  const k8s::Json c = WithPriority(Assigned("c", "n", 40, 6, 1), 5000);
  s->ReplacePods({a, b, c});
  const k8s::Json whole = WithPriority(Pod("whole", {{"tessera.io/gpu-count", "1"}}), 1000);
  EXPECT_TRUE(s->Filter(whole, std::vector<std::string>{"n"})->fits.empty());
  const std::vector<PreemptCandidate> none = {{"n", {}, 0}};
  auto out = s->Preempt(whole, none);
  ASSERT_TRUE(out.ok()) << out.error();
  // b has the lowest priority but shares GPU 1 with c, which outranks the pod: only evicting a
  // frees a GPU. b was taken first, then spared.
  EXPECT_EQ(VictimsOn(*out, "n"), std::vector<std::string>{"uid-a"});
  // A pod of lower priority than a: nothing it may evict frees a GPU.
  auto low = s->Preempt(WithPriority(Pod("low", {{"tessera.io/gpu-count", "1"}}), 5), none);
  ASSERT_TRUE(low.ok()) << low.error();
  EXPECT_TRUE(low->empty());
}

TEST(ClusterStateTest, PreemptNeverNamesANodeWithoutVictimsOrOneThePodNeverFits) {
  auto s = MakeState();
  ASSERT_TRUE(s->UpsertNode(Node("free", Gpus(1))).ok());
  ASSERT_TRUE(s->UpsertNode(Node("mem", Gpus(1), "mem")).ok());
  s->ReplacePods({WithPriority(Assigned("x", "free", 10, 1), 0)});
  const k8s::Json pod = WithPriority(Pod("p", {{"tessera.io/gpu-core", "30"}}), 100);
  // It fits "free" as it is: kube-scheduler's victims there (for its own CPU count, say) stay.
  auto out = s->Preempt(pod, std::vector<PreemptCandidate>{{"free", {"uid-x"}, 1}, {"mem", {}, 0}});
  ASSERT_TRUE(out.ok()) << out.error();
  ASSERT_EQ(out->size(), 1u) << "a mem node never takes a compute share";
  EXPECT_EQ(out->front().node, "free");
  EXPECT_EQ(out->front().victims, std::vector<std::string>{"uid-x"});
  EXPECT_EQ(out->front().pdb_violations, 1);
  // No victims proposed and none needed: the node is left out (kube-scheduler refuses an answer
  // naming a node with no victim).
  auto empty = s->Preempt(pod, std::vector<PreemptCandidate>{{"free", {}, 0}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  // Unknown nodes and pods with an invalid ask: nothing.
  EXPECT_TRUE(s->Preempt(pod, std::vector<PreemptCandidate>{{"nope", {"uid-x"}, 0}})->empty());
  EXPECT_FALSE(s->Preempt(Pod("bad", {{"tessera.io/gpu-core", "300"}}),
                          std::vector<PreemptCandidate>{{"free", {"uid-x"}, 0}})
                   .ok());
}

}  // namespace
}  // namespace tessera::extender
