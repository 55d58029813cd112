// tessera-extender's cluster page in a real browser: headless Chromium loads /ui from a real
// extender over the stand-in API server, after pods of several shapes were placed through the
// verbs as kube-scheduler drives them, and the test reads what the page's script drew (nodes,
// GPUs, each pod's memory and GPU-time share; then a pod that fits nowhere listed as waiting, with
// its reason, and the GPUs it leaves stranded marked) from the rendered DOM. The screenshot is kept
// under build/browser/ as a CI artifact.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "k8s/extender/extender_app.h"
#include "process/child_process.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/browser.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using testing::Node;
using testing::Pod;
using testing::SchedulerDriver;
using testing::TestGpu;

k8s::Json Created(k8s::Json object) {
  object["metadata"].erase("uid");
  object["metadata"].erase("resourceVersion");
  return object;
}

TEST(ClusterPageTest, ABrowserDrawsEveryGpuWithThePodsThatHoldIt) {
  auto browser = ::tessera::testing::Chromium::Find();
  ASSERT_TRUE(browser.ok()) << browser.error();
  k8s::TestApiServer api;
  ASSERT_TRUE(api.Start(0).ok());
  api.CreateNode(Created(Node("gpu-a", std::vector<TestGpu>(2))));
  api.CreateNode(Created(Node("gpu-b", std::vector<TestGpu>(2, TestGpu{"SimL4", 24}))));
  AppConfig c;
  c.api.server = api.url();
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.state.workload = std::make_shared<placement::TargetWorkload>();
  c.quiet = true;
  ExtenderApp app(c);
  ASSERT_TRUE(app.Start().ok());
  ASSERT_TRUE(app.WaitReady(std::chrono::seconds(10)));
  SchedulerDriver driver(app.port());
  const std::vector<std::string> nodes = {"gpu-a", "gpu-b"};
  struct Ask {
    const char* name;
    std::map<std::string, std::string> limits;
  };
  const Ask asks[] = {{"infer-1", {{"tessera.io/gpu-core", "30"}}},
                      {"infer-2", {{"tessera.io/gpu-core", "30"}}},
                      {"notebook", {{"tessera.io/gpu-core", "20"}, {"tessera.io/gpu-mem", "4"}}},
                      {"trainer", {{"tessera.io/gpu-count", "2"}}}};
  for (const Ask& a : asks) {
    auto r = driver.Schedule(api.CreatePod(Created(Pod(a.name, a.limits))), nodes);
    ASSERT_TRUE(r.bound) << a.name << ": " << r.error;
  }

  const std::string scratch = "/tmp/" + process::UniqueName("clusterpage");
  ::tessera::testing::Chromium chromium(scratch);
  const std::string url = "http://127.0.0.1:" + std::to_string(app.port()) + "/ui";
  auto dom = chromium.RenderedDom(url);
  ASSERT_TRUE(dom.ok()) << dom.error();
  // The three shares are packed onto one GPU, the trainer takes both of the other node's.
  EXPECT_NE(dom->find("2 node(s), 4 GPU(s): 3 in use"), std::string::npos) << *dom;
  EXPECT_NE(dom->find("data-node=\"gpu-a\""), std::string::npos);
  EXPECT_NE(dom->find("data-node=\"gpu-b\""), std::string::npos);
  // Each pod is drawn where it holds: its memory and GPU-time segments carry its name.
  for (const Ask& a : asks) {
    const std::string pod = std::string("default/") + a.name;
    EXPECT_NE(dom->find("data-pod=\"" + pod + "\""), std::string::npos) << pod << "\n" << *dom;
  }
  EXPECT_NE(dom->find("title=\"default/infer-1/app: 30% of the GPU (bound)\""), std::string::npos)
      << *dom;
  EXPECT_NE(dom->find("data-pending=\"0\""), std::string::npos);
  EXPECT_EQ(dom->find("class=\"sub err\""), std::string::npos);
  EXPECT_EQ(dom->find("gpu stranded"), std::string::npos) << "nothing waits: nothing is stranded";

  // Two whole GPUs more fit no node (gpu-a has one free GPU and 20 % of the other): the pod waits,
  // listed with what it asks and kube-scheduler's reason, and gpu-a's two GPUs are drawn stranded,
  // free capacity the waiting pod cannot use.
  auto waits = driver.Schedule(
      api.CreatePod(Created(Pod("second-trainer", {{"tessera.io/gpu-count", "2"}}))), nodes);
  ASSERT_FALSE(waits.bound);
  dom = chromium.RenderedDom(url);
  ASSERT_TRUE(dom.ok()) << dom.error();
  EXPECT_NE(dom->find("2 node(s), 4 GPU(s): 3 in use, 2 stranded; 1 pod(s) waiting"),
            std::string::npos)
      << *dom;
  EXPECT_NE(dom->find("data-pending=\"1\""), std::string::npos) << *dom;
  EXPECT_NE(dom->find("<tr data-pod=\"default/second-trainer\"><td>default/second-trainer</td>"
                      "<td>2 GPUs</td>"),
            std::string::npos)
      << *dom;
  EXPECT_NE(dom->find("0/2 nodes are available: 2 tessera: Insufficient tessera.io/gpu-count"),
            std::string::npos)
      << *dom;
  size_t stranded_cells = 0;
  for (size_t at = dom->find("class=\"gpu stranded"); at != std::string::npos;
       at = dom->find("class=\"gpu stranded", at + 1))
    ++stranded_cells;
  EXPECT_EQ(stranded_cells, 2u) << *dom;
  EXPECT_NE(dom->find("class=\"seg free-stranded\""), std::string::npos) << *dom;

  process::RunShell("mkdir -p '" + process::BuildDir() + "/browser'");
  auto shot = chromium.Screenshot(url, process::BuildDir() + "/browser/cluster_page.png");
  EXPECT_TRUE(shot.ok()) << shot.message();
  process::RunShell("rm -rf '" + scratch + "'");
  app.Stop();
  api.Stop();
}

}  // namespace
}  // namespace tessera::extender
