// Tests of MIG nodes in the placement engine: profile ids over every model's tables, the fit rules
// and bookkeeping of instances, the instance choice (a free instance; a GPU cut again only while
// all of it is free, into the layout that strands the fewest memory slices, checked against a
// direct count over every layout), every policy placing MIG requests by the same rule, and a
// replay of a MIG cluster.
#include "placement/mig.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "placement/cluster.h"
#include "placement/frag.h"
#include "placement/policy.h"
#include "placement/replay.h"

namespace tessera::placement {
namespace {

const mig::GpuModel& Model(std::string_view name) { return **mig::FindGpuModel(name); }

// One GPU's layout of `model` holding `counts` ("3g.40gb=1", ...), placed by the planner.
mig::Layout LayoutOf(std::string_view model, std::vector<std::string> counts) {
  const mig::GpuModel& m = Model(model);
  auto parsed = mig::ParseProfileCounts(m, counts);
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  auto placed = mig::Place(m, *parsed);
  EXPECT_TRUE(placed.ok()) << placed.error();
  return *placed;
}

// A MIG node of `gpus` GPUs, each cut as `layout`.
NodeSpec MigNode(std::string name, ModelTable& models, const mig::Layout& layout, int gpus,
                 bool relayout = false) {
  NodeSpec s;
  s.name = std::move(name);
  s.cpu_milli = 64000;
  s.memory_mib = 1 << 20;
  s.gpu_count = gpus;
  s.model = *models.Intern(layout.model->name, 80 * 1024);
  s.mode = NodeMode::kMig;
  s.mig_gpus.assign(static_cast<size_t>(gpus), layout);
  s.mig_relayout = relayout;
  return s;
}

Request Mig(std::string_view profile, int64_t cpu = 1000) {
  auto r = RequestForMigProfile(cpu, 1024, profile);
  EXPECT_TRUE(r.ok()) << r.error();
  return *r;
}

TEST(MigProfileTest, EveryProfileOfEveryModelHasAnIdThatFindsIt) {
  for (const mig::GpuModel& m : mig::GpuModels()) {
    for (const mig::MigProfile& p : m.Profiles()) {
      const int id = MigProfileId(p.name);
      ASSERT_GE(id, 0) << p.name;
      EXPECT_EQ(MigProfileName(id), p.name);
      EXPECT_EQ(MigProfileOn(m, id), &p) << m.name << " " << p.name;
    }
  }
  EXPECT_EQ(MigProfileId("3g.45gb"), -1);
  // One name, two shapes: 1g.10gb is one memory slice of an H100-80GB, two of an A100-40GB.
  const int id = MigProfileId("1g.10gb");
  EXPECT_EQ(MigProfileOn(Model("H100-80GB"), id)->memory_slices, 1);
  EXPECT_EQ(MigProfileOn(Model("A100-40GB"), id)->memory_slices, 2);
  EXPECT_EQ(MigProfileOn(Model("A30"), id), nullptr);
  auto bad = RequestForMigProfile(0, 0, "3g.45gb");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.error().find("MIG profile \"3g.45gb\": no GPU model has it; expected one of 1g.6gb"),
      std::string::npos)
      << bad.error();
}

TEST(MigClusterTest, FitRulesAndBookkeepingOfInstances) {
  ModelTable models;
  const int t4 = *models.Intern("T4");
  // Node 0: an H100 cut 3g.40gb@0 + 2g.20gb@4 + 1g.10gb@6; node 1: T4s shared by compute.
  std::vector<NodeSpec> specs = {
      MigNode("mig", models, LayoutOf("H100-80GB", {"3g.40gb", "2g.20gb", "1g.10gb"}), 1),
      {"t4", 64000, 1 << 20, 2, t4, NodeMode::kMemoryAndCompute}};
  auto c = Cluster::Create(models, specs);
  ASSERT_TRUE(c.ok()) << c.error();
  const Request three = Mig("3g.40gb"), one = Mig("1g.10gb"), seven = Mig("7g.80gb");
  EXPECT_EQ(c->Fits(0, three), FitResult::kFits);
  EXPECT_EQ(c->Fits(0, seven), FitResult::kMigInstance) << "no 7g.80gb instance in this layout";
  EXPECT_EQ(c->Fits(1, three), FitResult::kMode) << "a MIG request fits only MIG nodes";
  Request share;
  share.gpu_count = 1;
  share.gpu_milli = 300;
  EXPECT_EQ(c->Fits(0, share), FitResult::kMode);
  share.gpu_milli = kMilliPerGpu;  // a whole GPU: not of a GPU in MIG mode
  EXPECT_EQ(c->Fits(0, share), FitResult::kMode);
  EXPECT_EQ(c->Fits(0, Mig("1g.6gb")), FitResult::kMigProfile) << "an A30 profile";

  EXPECT_EQ(c->MigInstanceFor(0, 0, three), 0);
  ASSERT_TRUE(c->Place(three, {0, 1, 0}).ok());
  EXPECT_EQ(c->Fits(0, three), FitResult::kMigInstance);
  EXPECT_EQ(c->MigInstanceFor(0, 0, three), -1);
  EXPECT_EQ(c->gpu_milli_allocated(), 3 * 1000 / 7);
  EXPECT_EQ(c->gpu_memory_free(0)[0], 80 * 1024 - 80 * 1024 * 4 / 8);
  EXPECT_EQ(c->cpu_free(0), 63000);
  EXPECT_EQ(c->share_free_total(0), 0) << "no fractional share on a MIG GPU";
  // An assignment that names a taken instance, a wrong profile's or none, is refused.
  EXPECT_FALSE(c->Place(one, {0, 1, 0}).ok());
  EXPECT_FALSE(c->Place(one, {0, 1, 4}).ok()) << "slot 4 is a 2g.20gb";
  EXPECT_FALSE(c->Place(one, {0, 1, 6, 0}).ok()) << "the node keeps its layouts";
  ASSERT_TRUE(c->Place(one, {0, 1, 6}).ok());
  EXPECT_EQ(c->gpu_milli_allocated(), 3 * 1000 / 7 + 1000 / 7);
  // Remove gives back exactly that instance, once.
  ASSERT_TRUE(c->Remove(three, {0, 1, 0}).ok());
  EXPECT_FALSE(c->Remove(three, {0, 1, 0}).ok());
  EXPECT_EQ(c->MigInstanceFor(0, 0, three), 0);
  ASSERT_TRUE(c->Remove(one, {0, 1, 6}).ok());
  EXPECT_EQ(c->gpu_milli_allocated(), 0);
  EXPECT_EQ(c->whole_gpus_free(0), 1);
  EXPECT_EQ(c->cpu_free(0), 64000);

  // Bad specs: a layout per GPU, of one model, valid.
  NodeSpec wrong = specs[0];
  wrong.mig_gpus.clear();
  EXPECT_FALSE(Cluster::Create(models, {wrong}).ok());
  wrong = specs[0];
  wrong.mig_gpus[0].instances.push_back(wrong.mig_gpus[0].instances[0]);  // overlaps
  auto overlapping = Cluster::Create(models, {wrong});
  ASSERT_FALSE(overlapping.ok());
  EXPECT_NE(overlapping.error().find("node \"mig\": GPU 0"), std::string::npos)
      << overlapping.error();
  wrong = specs[1];
  wrong.mig_relayout = true;
  EXPECT_FALSE(Cluster::Create(models, {wrong}).ok());
}

// Which free instance, and which node: every candidate leaves nothing newly stranded, so the
// node with the least left free wins (bin packing), and its lowest free instance.
TEST(MigPolicyTest, EveryPolicyTakesAFreeInstanceOnTheFullestNode) {
  ModelTable models;
  const mig::Layout ones = LayoutOf("H100-80GB", {"1g.10gb=7"});
  std::vector<NodeSpec> specs = {MigNode("a", models, ones, 2), MigNode("b", models, ones, 2)};
  const Cluster initial = *Cluster::Create(models, specs);
  for (std::string_view name : PolicyNames()) {
    SCOPED_TRACE(std::string(name));
    Cluster c = initial;
    const std::vector<Request> pods = {Mig("1g.10gb")};
    const TargetWorkload w = TargetWorkload::FromRequests(pods);
    PolicyOptions o;
    o.workload = &w;
    auto policy = MakePolicy(name, o);
    ASSERT_TRUE(policy.ok()) << policy.error();
    ASSERT_TRUE(c.Place(pods[0], {1, 2, 3}).ok());  // node b, GPU 1, slot 3 is taken
    auto a = (*policy)->Select(c, pods[0]);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, (Assignment{1, 1, 0, -1})) << "node b (fuller), GPU 0's slot 0";
    std::vector<NodeScore> scores;
    auto among = (*policy)->SelectAmong(c, pods[0], std::vector<int>{0}, &scores);
    ASSERT_TRUE(among.has_value());
    EXPECT_EQ(among->node, 0);
    EXPECT_EQ(scores.size(), 1u);
    EXPECT_EQ((*policy)->GpusOn(c, 1, pods[0]), 1u);
    // 27 more fill every instance; then nothing fits.
    for (int i = 0; i < 27; ++i) {
      auto next = (*policy)->Select(c, pods[0]);
      ASSERT_TRUE(next.has_value()) << i;
      ASSERT_TRUE(c.Place(pods[0], *next).ok());
    }
    EXPECT_FALSE((*policy)->Select(c, pods[0]).has_value());
    EXPECT_EQ(c.gpu_milli_allocated(), 4 * 7 * (1000 / 7));
  }
}

// The stranded slices of a layout with one instance of `profile` taken, counted straight from the
// definition: slices of the GPU not held by that instance or by another of an asked profile.
int StrandedByHand(const mig::Layout& l, std::string_view profile,
                   const std::set<std::string>& asked) {
  int covered = 0;
  bool taken = false;
  for (const mig::PlacedInstance& i : l.instances) {
    if (!taken && i.profile->name == profile) {
      taken = true;
      covered += i.profile->memory_slices;
    } else if (asked.count(std::string(i.profile->name)) != 0) {
      covered += i.profile->memory_slices;
    }
  }
  return l.model->memory_slices - covered;
}

TEST(MigRelayoutTest, AFreeGpuIsCutIntoTheLayoutThatStrandsTheLeast) {
  ModelTable models;
  const mig::Layout empty{&Model("H100-80GB"), {}};
  auto c = Cluster::Create(models, {MigNode("dyn", models, empty, 2, /*relayout=*/true)});
  ASSERT_TRUE(c.ok()) << c.error();
  // Half the MIG pods ask 1g.10gb, half 3g.40gb: 4 x 1g + 3g covers all 8 slices, 7 x 1g leaves
  // slice 7 to nothing.
  const std::vector<Request> pods = {Mig("1g.10gb"), Mig("3g.40gb")};
  const TargetWorkload w = TargetWorkload::FromRequests(pods);
  auto choice = ChooseMigInstance(*c, 0, pods[0], w.mig_demand());
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->gpu, 0);
  EXPECT_EQ(choice->newly_stranded, 0);
  ASSERT_GE(choice->layout, 0);
  const mig::Layout& cut = MigLayoutsOf(Model("H100-80GB"))[static_cast<size_t>(choice->layout)];
  EXPECT_EQ(mig::FormatCounts(*cut.model, cut.Counts()), "1g.10gb=4 3g.40gb=1");
  auto a = MigAssignmentOn(*c, 0, pods[0], w.mig_demand());
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(c->Place(pods[0], *a).ok()) << mig::SliceMap(cut);
  // The 3g.40gb now takes the free instance of that layout, not the other, uncut GPU.
  auto b = MigAssignmentOn(*c, 0, pods[1], w.mig_demand());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, (Assignment{0, 1, 4, -1}));
  ASSERT_TRUE(c->Place(pods[1], *b).ok());
  // A GPU with instances taken is not cut again; once all are free it may be.
  EXPECT_FALSE(c->MigRelayoutable(0, 0));
  EXPECT_FALSE(c->Place(pods[1], {0, 1, 0, choice->layout}).ok());
  ASSERT_TRUE(c->Remove(pods[0], *a).ok());
  ASSERT_TRUE(c->Remove(pods[1], *b).ok());
  EXPECT_TRUE(c->MigRelayoutable(0, 0));
  EXPECT_EQ(c->mig_gpus(0)[0].layout.instances.size(), 5u) << "the cut stays when its pods leave";
}

TEST(MigRelayoutTest, TheChosenCutStrandsNoMoreThanAnyLayoutCountedByHand) {
  std::mt19937 rng(7);
  for (const char* model_name : {"H100-80GB", "A30", "A100-40GB"}) {
    const mig::GpuModel& model = Model(model_name);
    const std::vector<mig::Layout> all = mig::FeasibleLayouts(model);
    for (int round = 0; round < 60; ++round) {
      // A random set of asked profiles (their MIG requests), and one of them to place.
      std::vector<Request> pods;
      std::set<std::string> asked;
      for (const mig::MigProfile& p : model.Profiles()) {
        if (rng() % 3 == 0) {
          pods.push_back(Mig(p.name));
          asked.insert(std::string(p.name));
        }
      }
      if (pods.empty()) continue;
      const Request& r = pods[rng() % pods.size()];
      const std::string_view profile = MigProfileName(r.mig_profile);
      ModelTable models;
      auto c = *Cluster::Create(models, {MigNode("dyn", models, mig::Layout{&model, {}}, 1, true)});
      const TargetWorkload w = TargetWorkload::FromRequests(pods);
      auto choice = ChooseMigInstance(c, 0, r, w.mig_demand());
      ASSERT_TRUE(choice.has_value());
      int best = model.memory_slices;
      for (const mig::Layout& l : all) {
        bool has = false;
        for (const auto& i : l.instances) has = has || i.profile->name == profile;
        if (has) best = std::min(best, StrandedByHand(l, profile, asked));
      }
      EXPECT_EQ(choice->newly_stranded, best) << model_name << " " << profile;
      const mig::Layout& cut = MigLayoutsOf(model)[static_cast<size_t>(choice->layout)];
      EXPECT_EQ(StrandedByHand(cut, profile, asked), best) << mig::SliceMap(cut);
      EXPECT_TRUE(c.Place(r, *MigAssignmentOn(c, 0, r, w.mig_demand())).ok());
    }
  }
}

TEST(MigRelayoutTest, recut_TheExtendersLayoutIsTheEnginesOwnReCut) {
  // For every model and asked mix, ChooseRecutLayout gives the layout ChooseMigInstance cuts an
  // all-free GPU into on a dynamic node.
  std::mt19937 rng(11);
  for (const char* model_name : {"H100-80GB", "A30", "A100-40GB"}) {
    const mig::GpuModel& model = Model(model_name);
    for (int round = 0; round < 40; ++round) {
      std::vector<Request> pods;
      for (const mig::MigProfile& p : model.Profiles()) {
        if (rng() % 3 == 0) pods.push_back(Mig(p.name));
      }
      if (pods.empty()) continue;
      const Request& r = pods[rng() % pods.size()];
      ModelTable models;
      auto c = *Cluster::Create(models, {MigNode("dyn", models, mig::Layout{&model, {}}, 1, true)});
      const TargetWorkload w = TargetWorkload::FromRequests(pods);
      auto choice = ChooseMigInstance(c, 0, r, w.mig_demand());
      ASSERT_TRUE(choice.has_value());
      EXPECT_EQ(ChooseRecutLayout(model, r.mig_profile, w.mig_demand()), choice->layout)
          << model_name << " " << MigProfileName(r.mig_profile);
    }
  }
  // A 1g.10gb pod alone asks: seven 1g.10gb instances strand nothing it cannot use.
  const mig::GpuModel& h100 = Model("H100-80GB");
  const std::vector<Request> ones = {Mig("1g.10gb")};
  const int k = ChooseRecutLayout(h100, MigProfileId("1g.10gb"),
                                  TargetWorkload::FromRequests(ones).mig_demand());
  ASSERT_GE(k, 0);
  const mig::Layout& cut = MigLayoutsOf(h100)[static_cast<size_t>(k)];
  EXPECT_EQ(mig::FormatCounts(h100, cut.Counts()), "1g.10gb=7");
  EXPECT_EQ(ChooseRecutLayout(Model("A30"), MigProfileId("7g.80gb"), MigDemand{}), -1);
}

TEST(MigRelayoutTest, AFreeInstanceComesBeforeCuttingAnotherGpu) {
  ModelTable models;
  const mig::Layout empty{&Model("H100-80GB"), {}};
  Cluster c = *Cluster::Create(models, {MigNode("dyn", models, empty, 2, true)});
  const std::vector<Request> pods = {Mig("1g.10gb")};
  const TargetWorkload w = TargetWorkload::FromRequests(pods);
  auto first = MigAssignmentOn(c, 0, pods[0], w.mig_demand());
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(first->mig_layout, 0);
  ASSERT_TRUE(c.Place(pods[0], *first).ok());
  for (int i = 0; i < 6; ++i) {
    auto next = MigAssignmentOn(c, 0, pods[0], w.mig_demand());
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->gpus, first->gpus) << "the cut GPU's free 1g.10gb instances first";
    EXPECT_EQ(next->mig_layout, -1);
    ASSERT_TRUE(c.Place(pods[0], *next).ok());
  }
  auto eighth = MigAssignmentOn(c, 0, pods[0], w.mig_demand());
  ASSERT_TRUE(eighth.has_value());
  EXPECT_NE(eighth->gpus, first->gpus) << "the first GPU is full (7 x 1g.10gb)";
  EXPECT_GE(eighth->mig_layout, 0);
}

TEST(MigReplayTest, AMigClusterReplaysWithDeparturesUnderEveryPolicy) {
  ModelTable models;
  std::vector<NodeSpec> specs = {
      MigNode("fixed", models, LayoutOf("H100-80GB", {"3g.40gb", "2g.20gb", "1g.10gb"}), 2),
      MigNode("dyn", models, mig::Layout{&Model("H100-80GB"), {}}, 2, true)};
  const Cluster c = *Cluster::Create(models, specs);
  std::vector<Request> pods;
  std::vector<PodTimes> times;
  const char* profiles[] = {"1g.10gb", "3g.40gb", "2g.20gb", "7g.80gb", "1g.10gb"};
  for (int i = 0; i < 200; ++i) {
    pods.push_back(Mig(profiles[i % 5]));
    times.push_back({i * 10, i * 10 + 35});
  }
  const TargetWorkload w = TargetWorkload::FromRequests(pods);
  EXPECT_TRUE(w.shapes().empty()) << "MIG requests are no share shapes";
  ReplayOptions o;
  o.resample = false;
  o.speedup = 1;
  for (std::string_view policy : PolicyNames()) {
    SCOPED_TRACE(std::string(policy));
    auto r = Replay(c, pods, times, w, policy, o);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->placed, 200) << "each pod finds an instance within its wait";
    EXPECT_EQ(r->unplaceable, 0);
    EXPECT_GT(r->allocation_mean, 0);
  }
}

}  // namespace
}  // namespace tessera::placement
