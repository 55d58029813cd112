// Tests of ReadPodDemand: CPU and memory as kube-scheduler counts them, each container's Tessera
// ask per GPU (docs/contracts.md), ACK names, and errors that name the pod, container and value.
#include "k8s/pod_demand.h"

#include <gtest/gtest.h>

#include "testing/support/test_objects.h"

namespace tessera::k8s {
namespace {

using ::tessera::extender::testing::Pod;
using ::tessera::extender::testing::TestContainer;

PodDemand Read(const Json& pod) {
  auto view = PodFromJson(pod);
  EXPECT_TRUE(view.ok()) << view.error();
  return ReadPodDemand(*view, pod);
}

TEST(PodDemandTest, CpuAndMemoryAsTheSchedulerCountsThem) {
  TestContainer a{"a", {}, "1500m", "1Gi"};
  TestContainer b{"b", {}, "2", "512Mi"};
  TestContainer init{"init", {}, "4", "256Mi", true};
  Json pod = Pod("p", {init, a, b});
  pod["spec"]["overhead"] = {{"cpu", "250m"}, {"memory", "64Mi"}};
  const PodDemand d = Read(pod);
  EXPECT_EQ(d.cpu_milli, 4000 + 250);                     // max(3.5 apps, 4 init) + overhead
  EXPECT_EQ(d.memory_bytes, (int64_t{1536} + 64) << 20);  // max(1.5Gi apps, 256Mi init) + 64Mi
  EXPECT_TRUE(d.requests_error.empty());
  EXPECT_FALSE(d.wants_gpu());
}

// Native sidecars (init containers with restartPolicy Always) run beside the app containers and
// beside every init container after them (k8s.io/component-helpers resource.PodRequests).
TEST(PodDemandTest, NativeSidecarsAddUpAsTheSchedulerCountsThem) {
  TestContainer sidecar{"proxy", {}, "1", "1Gi", true};
  TestContainer setup{"setup", {}, "2", "256Mi", true};
  TestContainer app{"app", {}, "500m", "512Mi"};
  Json pod = Pod("p", {sidecar, setup, app});
  pod["spec"]["initContainers"][0]["restartPolicy"] = "Always";
  const PodDemand d = Read(pod);
  EXPECT_EQ(d.cpu_milli, 3000);  // max(1 + 0.5 apps, 1 + 2 init beside the sidecar)
  EXPECT_EQ(d.memory_bytes, int64_t{1536} << 20);  // max(1Gi + 512Mi, 1Gi + 256Mi)
}

TEST(PodDemandTest, AsksPerGpu) {
  const PodDemand d = Read(Pod(
      "p", {TestContainer{"frac",
                          {{"tessera.io/gpu-core", "30"},
                           {"tessera.io/gpu-mem", "6"},
                           {"tessera.io/gpu-count", "2"}}},
            TestContainer{"whole", {{"tessera.io/gpu-count", "2"}}},
            TestContainer{"memonly", {{"tessera.io/gpu-mem", "5"}}}, TestContainer{"plain", {}}}));
  ASSERT_EQ(d.asks.size(), 3u);
  EXPECT_EQ(d.asks[0].name, "frac");
  EXPECT_EQ(d.asks[0].gpu_count, 2);
  EXPECT_EQ(d.asks[0].core_percent, 30);
  EXPECT_EQ(d.asks[0].mem_mib, 3072);  // 6 GiB split over 2 GPUs
  EXPECT_FALSE(d.asks[0].whole());
  EXPECT_TRUE(d.asks[1].whole());
  EXPECT_EQ(d.asks[1].gpu_count, 2);
  EXPECT_EQ(d.asks[2].gpu_count, 1);
  EXPECT_EQ(d.asks[2].mem_mib, 5120);
  EXPECT_EQ(d.asks[2].core_percent, 0);
  EXPECT_FALSE(d.asks[2].whole());
  EXPECT_TRUE(d.demand_error.empty()) << d.demand_error;
}

TEST(PodDemandTest, AckNamesAndModels) {
  const PodDemand d =
      Read(Pod("p", {{"aliyun.com/gpu-mem", "8"}, {"aliyun.com/gpu-core.percentage", "25"}},
               {{"tessera.io/gpu-model", "A100|H100"}}));
  ASSERT_EQ(d.asks.size(), 1u);
  EXPECT_EQ(d.asks[0].core_percent, 25);
  EXPECT_EQ(d.asks[0].mem_mib, 8192);
  EXPECT_EQ(d.allowed_models, (std::vector<std::string>{"A100", "H100"}));
}

TEST(PodDemandTest, ErrorsNameThePodAndTheValue) {
  auto error_of = [](const Json& pod) { return Read(pod).demand_error; };
  EXPECT_NE(
      error_of(Pod("p", {{"tessera.io/gpu-core", "0.5"}})).find("pod default/p: container app"),
      std::string::npos);
  EXPECT_NE(error_of(Pod("p", {{"tessera.io/gpu-core", "20"}, {"aliyun.com/gpu-mem", "2"}}))
                .find("one spelling"),
            std::string::npos);
  EXPECT_NE(
      error_of(Pod("p", {{"tessera.io/gpu-core", "10"}}, {{"tessera.io/gpu-model", "A100||H100"}}))
          .find("tessera.io/gpu-model=\"A100||H100\""),
      std::string::npos);
  EXPECT_NE(
      error_of(Pod("p", {{"tessera.io/gpu-core", "10"}}, {{"tessera.io/high-priority", "yes"}}))
          .find("tessera.io/high-priority=\"yes\""),
      std::string::npos);
  TestContainer bad_cpu{"app", {}, "1.2.3"};
  const PodDemand d = Read(Pod("p", std::vector<TestContainer>{bad_cpu}));
  EXPECT_NE(d.requests_error.find("pod default/p container \"app\" requests cpu=\"1.2.3\""),
            std::string::npos)
      << d.requests_error;
}

}  // namespace
}  // namespace tessera::k8s
