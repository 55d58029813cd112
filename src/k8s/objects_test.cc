// Tests of pod views and GPU requests.
#include "k8s/objects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/pod_demand.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

Json Pod(Json containers, Json init = Json::array()) {
  return {{"metadata",
           {{"name", "p"},
            {"namespace", "ns"},
            {"uid", "u1"},
            {"resourceVersion", "7"},
            {"annotations", {{"a", "b"}}}}},
          {"spec", {{"nodeName", "n1"}, {"initContainers", init}, {"containers", containers}}},
          {"status", {{"phase", "Pending"}}}};
}

Json Ctr(const std::string& name, Json limits, Json requests = Json::object()) {
  return {{"name", name}, {"resources", {{"limits", limits}, {"requests", requests}}}};
}

TEST(PodView, ReadsIdentityContainersInOrderAndAnnotations) {
  auto pod =
      PodFromJson(Pod({Ctr("app", {{"tessera.io/gpu-mem", "2"}}), Ctr("side", Json::object())},
                      {Ctr("init", {{"tessera.io/gpu-mem", "1"}})}));
  ASSERT_TRUE(pod.ok()) << pod.error();
  EXPECT_EQ(pod->Key(), "ns/p");
  EXPECT_EQ(pod->uid, "u1");
  EXPECT_EQ(pod->node_name, "n1");
  EXPECT_EQ(pod->phase, "Pending");
  ASSERT_EQ(pod->containers.size(), 3u);
  EXPECT_EQ(pod->containers[0].name, "init");
  EXPECT_TRUE(pod->containers[0].init);
  EXPECT_EQ(pod->containers[1].name, "app");
  EXPECT_EQ(*pod->Annotation("a"), "b");
  EXPECT_FALSE(pod->Terminal());
}

TEST(PodView, ReadsWhetherKubeSchedulerFoundNoNode) {
  Json pod = Pod({Ctr("app", Json::object())});
  EXPECT_FALSE(PodFromJson(pod)->unschedulable);
  pod["status"]["conditions"] =
      Json::array({{{"type", "Ready"}, {"status", "False"}, {"reason", "Unschedulable"}},
                   {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}});
  EXPECT_TRUE(PodFromJson(pod)->unschedulable);
  pod["status"]["conditions"][1]["reason"] = "SchedulerError";  // not a verdict on the nodes
  EXPECT_FALSE(PodFromJson(pod)->unschedulable);
  pod["status"]["conditions"][1] = {{"type", "PodScheduled"}, {"status", "True"}};
  EXPECT_FALSE(PodFromJson(pod)->unschedulable);
  pod["status"]["conditions"] = "not a list";
  EXPECT_FALSE(PodFromJson(pod)->unschedulable);
}

TEST(GpuRequest, ReadsLimitsInBothSpellings) {
  auto r = GpuRequestOf(*PodFromJson(Pod({Ctr("a", {{"tessera.io/gpu-mem", "2"},
                                                    {"tessera.io/gpu-core", "30"},
                                                    {"cpu", "1"}})}))
                             ->Container("a"));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->mem_gib, 2u);
  EXPECT_EQ(r->core, 30u);
  EXPECT_EQ(r->Gpus(), 1u);
  EXPECT_FALSE(r->ack);
  auto ack = GpuRequestOf(*PodFromJson(Pod({Ctr("a", {{"aliyun.com/gpu-mem", "4"},
                                                      {"aliyun.com/gpu-core.percentage", "35"},
                                                      {"aliyun.com/gpu-count", "2"}})}))
                               ->Container("a"));
  ASSERT_TRUE(ack.ok()) << ack.error();
  EXPECT_TRUE(ack->ack);
  EXPECT_EQ(ack->Gpus(), 2u);
  EXPECT_EQ(ack->Of(GpuResource::kCore), 35u);
  auto none = GpuRequestOf(*PodFromJson(Pod({Ctr("a", {{"cpu", "1"}})}))->Container("a"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->any());
  EXPECT_EQ(none->Gpus(), 0u);
}

TEST(GpuRequest, RefusesWhatKubernetesOrAckWouldNot) {
  struct Case {
    Json limits, requests;
    const char* message;
  };
  const Case cases[] = {
      {{{"tessera.io/gpu-core", "0"}},
       {},
       "container a limits tessera.io/gpu-core=0: expected a percentage of one GPU from 1 to 100"},
      {{{"tessera.io/gpu-core", "101"}}, {}, "gpu-core=101"},
      {{{"aliyun.com/gpu-core.percentage", "33"}},
       {},
       "gpu-core.percentage=33: expected a multiple of 5"},
      {{{"tessera.io/gpu-mem", "0"}}, {}, "gpu-mem=0: expected 1 to 65536 GiB"},
      {{{"tessera.io/gpu-mem", "9E"}}, {}, "gpu-mem=9E: expected 1 to 65536 GiB"},
      {{{"tessera.io/gpu-mem", "65537"}}, {}, "gpu-mem=65537: expected 1 to 65536 GiB"},
      {{{"tessera.io/gpu-mem", "1.5"}}, {}, "tessera.io/gpu-mem=\"1.5\""},
      {{{"tessera.io/gpu-mem", "2"}, {"aliyun.com/gpu-core.percentage", "30"}},
       {},
       "mixes tessera.io/ and aliyun.com/"},
      {{{"tessera.io/gpu-mem", "2"}}, {{"tessera.io/gpu-mem", "1"}}, "differs from its request 1"},
      {Json::object(),
       {{"tessera.io/gpu-mem", "1"}},
       "requests tessera.io/gpu-mem=1 without a limit"},
      {{{"tessera.io/gpu-count", "0"}}, {}, "gpu-count=0: expected 1 to 64 GPUs"},
      // MIG: an unknown profile, "+" in the name, more than one, two profiles, beside a share.
      {{{"tessera.io/mig-3g.45gb", "1"}},
       {},
       "container a limits=\"tessera.io/mig-3g.45gb\": not a MIG profile of any GPU model we know; "
       "expected tessera.io/mig- followed by one of 1g.6gb, 1g.6gb.me"},
      {{{"tessera.io/mig-1g.10gb+me", "1"}}, {}, "('+' written '.')"},
      {{{"tessera.io/mig-3g.40gb", "2"}},
       {},
       "container a limits tessera.io/mig-3g.40gb=2: expected 1 (one MIG instance per container"},
      {{{"tessera.io/mig-3g.40gb", "1"}, {"tessera.io/mig-1g.10gb", "1"}},
       {},
       "asks tessera.io/mig-1g.10gb and tessera.io/mig-3g.40gb; expected one MIG instance per "
       "container"},
      {{{"tessera.io/mig-3g.40gb", "1"}, {"tessera.io/gpu-mem", "4"}},
       {},
       "asks tessera.io/mig-3g.40gb beside a GPU share"},
      {Json::object(),
       {{"tessera.io/mig-3g.40gb", "1"}},
       "requests tessera.io/mig-3g.40gb=1 without a limit"},
  };
  for (const Case& c : cases) {
    auto pod =
        PodFromJson(Pod({Ctr("a", c.limits, c.requests.is_null() ? Json::object() : c.requests)}));
    ASSERT_TRUE(pod.ok());
    auto r = GpuRequestOf(*pod->Container("a"));
    ASSERT_FALSE(r.ok()) << c.limits.dump();
    EXPECT_THAT(r.error(), HasSubstr(c.message));
  }
}

// A MIG instance: tessera.io/mig-<profile>: 1; '+' is written '.' in the name. (What may not go
// with it: RefusesWhatKubernetesOrAckWouldNot.)
TEST(GpuRequest, OneMigInstanceOfAKnownProfile) {
  auto r =
      GpuRequestOf(*PodFromJson(Pod({Ctr("a", {{"tessera.io/mig-1g.10gb.me", "1"}, {"cpu", "1"}},
                                         {{"tessera.io/mig-1g.10gb.me", "1"}})}))
                        ->Container("a"));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->mig_profile, "1g.10gb+me");
  EXPECT_TRUE(r->mig());
  EXPECT_TRUE(r->any());
  EXPECT_EQ(r->Gpus(), 1u);
}

}  // namespace
}  // namespace tessera::k8s
