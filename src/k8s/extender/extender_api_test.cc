// Tests of tessera-extender through its HTTP verbs against the stand-in API server: what a bind
// writes, shares released when pods end or binds fail, malformed input refused while everything
// else is served, two replicas that never give one GPU's share twice, and (with real processes)
// an extender killed in the middle of a burst of binds and started again.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "k8s/annotations.h"
#include "k8s/api_client.h"
#include "k8s/extender/commit_log.h"
#include "k8s/extender/extender_app.h"
#include "k8s/extender/recut_writer.h"
#include "process/child_process.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using testing::GpuUuid;
using testing::Node;
using testing::Pod;
using testing::SchedulerDriver;
using testing::TestGpu;

constexpr auto kWait = std::chrono::seconds(10);

std::vector<TestGpu> Gpus(int n) { return std::vector<TestGpu>(static_cast<size_t>(n)); }

k8s::Json Created(k8s::Json object) {
  object["metadata"].erase("uid");
  object["metadata"].erase("resourceVersion");
  return object;
}

std::unique_ptr<ExtenderApp> StartExtender(const std::string& api_url) {
  AppConfig c;
  c.api.server = api_url;
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.state.workload = std::make_shared<placement::TargetWorkload>();
  c.quiet = true;
  auto app = std::make_unique<ExtenderApp>(c);
  EXPECT_TRUE(app->Start().ok());
  EXPECT_TRUE(app->WaitReady(kWait));
  return app;
}

// Per GPU UUID, what the bound pods' assignments give away: core percent and bytes. Fails the
// test when a bound pod's assignment names another node.
struct Given {
  int core = 0;
  uint64_t mem = 0;
  int holders = 0;
  bool whole = false;
};
std::map<std::string, Given> GivenAway(const std::vector<k8s::Json>& pods) {
  std::map<std::string, Given> out;
  for (const k8s::Json& p : pods) {
    auto view = k8s::PodFromJson(p);
    if (!view.ok() || view->node_name.empty() || view->Terminal()) continue;
    const std::string* text = view->Annotation(k8s::kAssignmentAnnotation);
    if (text == nullptr) continue;
    auto a = k8s::ParseAssignment(*text);
    EXPECT_TRUE(a.ok()) << a.error();
    if (!a.ok()) continue;
    EXPECT_EQ(a->node, view->node_name) << view->Key();
    for (const auto& c : a->containers) {
      for (const auto& g : c.gpus) {
        Given& given = out[g.uuid];
        given.core += g.core.value();
        given.mem += g.mem.count();
        given.whole |= g.mem.count() == uint64_t{16} << 30;
        ++given.holders;
      }
    }
  }
  return out;
}

void ExpectNoGpuGivenTwice(const std::vector<k8s::Json>& pods) {
  for (const auto& [uuid, g] : GivenAway(pods)) {
    EXPECT_LE(g.core, 100) << uuid;
    EXPECT_LE(g.mem, uint64_t{16} << 30) << uuid;
    if (g.whole) {
      EXPECT_EQ(g.holders, 1) << uuid;
    }
  }
}

// Schedules `pod` until it binds or `deadline` (the scheduler retries what failed).
testing::ScheduleResult ScheduleUntilBound(SchedulerDriver& driver, const k8s::Json& pod,
                                           const std::vector<std::string>& nodes,
                                           std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  testing::ScheduleResult r;
  while (true) {
    r = driver.Schedule(pod, nodes);
    if (r.bound || std::chrono::steady_clock::now() >= end) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class ExtenderApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start(0).ok()); }
  void TearDown() override { api_.Stop(); }
  k8s::Json CreatePod(const k8s::Json& pod) { return api_.CreatePod(Created(pod)); }
  k8s::TestApiServer api_;
};

TEST_F(ExtenderApiTest, BindWritesTheDecisionAndEndedPodsFreeTheirShare) {
  api_.CreateNode(Created(Node("n1", Gpus(2))));
  auto app = StartExtender(api_.url());
  SchedulerDriver driver(app->port());
  const std::vector<std::string> nodes = {"n1"};
  const k8s::Json a = CreatePod(Pod("a", {{"tessera.io/gpu-core", "60"}}));
  auto ra = driver.Schedule(a, nodes);
  ASSERT_TRUE(ra.bound) << ra.error;
  // On the API server: bound, with the assignment and phase; the node's log names the commit.
  auto pa = *api_.GetPod("default", "a");
  EXPECT_EQ(pa["spec"]["nodeName"], "n1");
  auto assignment = k8s::ParseAssignment(
      pa["metadata"]["annotations"][k8s::kAssignmentAnnotation].get<std::string>());
  ASSERT_TRUE(assignment.ok()) << assignment.error();
  EXPECT_EQ(assignment->node, "n1");
  ASSERT_EQ(assignment->containers.size(), 1u);
  EXPECT_EQ(assignment->containers[0].name, "app");
  ASSERT_EQ(assignment->containers[0].gpus.size(), 1u);
  EXPECT_EQ(assignment->containers[0].gpus[0].uuid, GpuUuid("n1", 0));
  EXPECT_EQ(assignment->containers[0].gpus[0].core.value(), 60);
  EXPECT_EQ(assignment->containers[0].gpus[0].mem.count(), uint64_t{9830} << 20);  // 60 % of 16 GiB
  EXPECT_EQ(pa["metadata"]["annotations"][k8s::kPhaseAnnotation], "assumed");
  auto log = ParseCommitLog(
      (*api_.GetNode("n1"))["metadata"]["annotations"][kCommitLogAnnotation].get<std::string>());
  ASSERT_TRUE(log.ok()) << log.error();
  EXPECT_EQ(log->seq, assignment->seq);
  ASSERT_EQ(log->recent.size(), 1u);
  EXPECT_EQ(log->recent[0].uid, pa["metadata"]["uid"]);

  auto rb = driver.Schedule(CreatePod(Pod("b", {{"tessera.io/gpu-core", "60"}})), nodes);
  ASSERT_TRUE(rb.bound) << rb.error;
  const k8s::Json c = CreatePod(Pod("c", {{"tessera.io/gpu-core", "60"}}));
  auto rc = driver.Schedule(c, nodes);
  EXPECT_FALSE(rc.bound);
  EXPECT_EQ(rc.failures["n1"], "tessera: Insufficient tessera.io/gpu-core");
  // a is deleted: c fits at once (within the watch's delay).
  ASSERT_TRUE(api_.DeletePod("default", "a"));
  rc = ScheduleUntilBound(driver, c, nodes, kWait);
  ASSERT_TRUE(rc.bound) << rc.error;
  auto pc = k8s::ParseAssignment(
      (*api_.GetPod("default", "c"))["metadata"]["annotations"][k8s::kAssignmentAnnotation]
          .get<std::string>());
  EXPECT_EQ(pc->containers[0].gpus[0].uuid, GpuUuid("n1", 0));
  // b finishes (Succeeded): its share is back too.
  ASSERT_TRUE(api_.SetPodPhase("default", "b", "Succeeded"));
  auto rd = ScheduleUntilBound(driver, CreatePod(Pod("d", {{"tessera.io/gpu-core", "60"}})), nodes,
                               kWait);
  ASSERT_TRUE(rd.bound) << rd.error;
  ExpectNoGpuGivenTwice(api_.Pods());
}

TEST_F(ExtenderApiTest, AFailedBindReleasesItsShareAtOnce) {
  api_.CreateNode(Created(Node("n1", Gpus(1))));
  auto app = StartExtender(api_.url());
  SchedulerDriver driver(app->port());
  k8s::ClientConfig config;
  config.server = api_.url();
  k8s::ApiClient client(config);
  std::string body;
  auto bind = [&](const k8s::Json& pod) {
    driver.Post("/bind",
                k8s::Json{{"PodName", pod["metadata"]["name"]},
                          {"PodNamespace", "default"},
                          {"PodUID", pod["metadata"]["uid"]},
                          {"Node", "n1"}}
                    .dump(),
                &body);
    return k8s::Json::parse(body)["Error"].get<std::string>();
  };
  // a is filtered (its share reserved), then bound by someone else before our bind: the bind
  // fails and says so, and the reservation is gone at once.
  const k8s::Json a = CreatePod(Pod("a", {{"tessera.io/gpu-count", "1"}}));
  ASSERT_EQ(driver.Post("/filter", k8s::Json{{"Pod", a}, {"NodeNames", {"n1"}}}.dump(), &body),
            200);
  EXPECT_EQ(k8s::Json::parse(body)["NodeNames"], k8s::Json::array({"n1"}));
  ASSERT_TRUE(client.BindPod("default", "a", a["metadata"]["uid"], "n1").ok());
  EXPECT_NE(bind(a).find("already"), std::string::npos) << body;
  EXPECT_EQ(
      (*api_.GetPod("default", "a"))["metadata"]["annotations"].count(k8s::kAssignmentAnnotation),
      0u);
  auto rb = driver.Schedule(CreatePod(Pod("b", {{"tessera.io/gpu-count", "1"}})), {"n1"});
  EXPECT_TRUE(rb.bound) << rb.error;
  // c is filtered, then deleted before its bind: the bind fails, nothing stays held.
  ASSERT_TRUE(api_.DeletePod("default", "b"));
  const k8s::Json c = CreatePod(Pod("c", {{"tessera.io/gpu-count", "1"}}));
  ASSERT_EQ(driver.Post("/filter", k8s::Json{{"Pod", c}, {"NodeNames", {"n1"}}}.dump(), &body),
            200);
  ASSERT_TRUE(api_.DeletePod("default", "c"));
  EXPECT_FALSE(bind(c).empty());
  auto rd = ScheduleUntilBound(driver, CreatePod(Pod("d", {{"tessera.io/gpu-count", "1"}})), {"n1"},
                               kWait);
  EXPECT_TRUE(rd.bound) << rd.error;
}

TEST_F(ExtenderApiTest, MalformedInputIsRefusedAndEverythingElseServed) {
  k8s::Json bad = Created(Node("bad", Gpus(1)));
  bad["metadata"]["annotations"][k8s::kInventoryAnnotation] = "{\"version\":1,\"gpus\":[]}";
  api_.CreateNode(bad);
  api_.CreateNode(Created(Node("good", Gpus(1))));
  auto app = StartExtender(api_.url());
  SchedulerDriver driver(app->port());
  std::string body;
  // Every answer is 200, the message where kube-scheduler reads it: it reads no body of any other
  // status (pkg/scheduler/extender.go, send).
  EXPECT_EQ(driver.Post("/filter", "{", &body), 200);
  EXPECT_NE(k8s::Json::parse(body)["Error"].get<std::string>().find("not valid JSON"),
            std::string::npos);
  EXPECT_EQ(driver.Post("/prioritize", "[]", &body), 200);
  EXPECT_EQ(body, "[]") << "a prioritize error gives no score";
  EXPECT_EQ(driver.Post("/preempt", "[]", &body), 200);
  EXPECT_EQ(k8s::Json::parse(body), k8s::Json::parse(R"({"NodeNameToMetaVictims":{}})"))
      << "a preempt error preempts nowhere";
  EXPECT_EQ(driver.Post("/bind", "{}", &body), 200);
  EXPECT_NE(k8s::Json::parse(body)["Error"].get<std::string>().find("PodName is missing"),
            std::string::npos);
  EXPECT_EQ(
      driver.Post("/bind", R"({"PodName":"x","PodNamespace":"default","PodUID":"u","Node":"good"})",
                  &body),
      200);
  EXPECT_NE(k8s::Json::parse(body)["Error"].get<std::string>().find("pod default/x does not exist"),
            std::string::npos)
      << body;
  // A pod with an invalid annotation: every node says why.
  auto invalid = driver.Schedule(
      CreatePod(Pod("w", {{"tessera.io/gpu-core", "10"}}, {{"tessera.io/weight", "0"}})),
      {"bad", "good"});
  EXPECT_FALSE(invalid.bound);
  EXPECT_NE(invalid.failures["good"].find("tessera.io/weight=\"0\""), std::string::npos)
      << invalid.failures["good"];
  // A valid pod: the other node takes it; asked about the node with the malformed inventory
  // alone, the filter says why that one cannot (with a node passing, no reasons are written:
  // kube-scheduler reads them only when none passes).
  const k8s::Json ok = CreatePod(Pod("ok", {{"tessera.io/gpu-core", "10"}}));
  ASSERT_EQ(
      driver.Post("/filter", k8s::Json{{"Pod", ok}, {"NodeNames", {"bad", "good"}}}.dump(), &body),
      200);
  const k8s::Json f = k8s::Json::parse(body);
  EXPECT_EQ(f["NodeNames"], k8s::Json::array({"good"}));
  EXPECT_TRUE(f["FailedAndUnresolvableNodes"].empty()) << body;
  ASSERT_EQ(driver.Post("/filter", k8s::Json{{"Pod", ok}, {"NodeNames", {"bad"}}}.dump(), &body),
            200);
  const k8s::Json alone = k8s::Json::parse(body);
  EXPECT_TRUE(alone["NodeNames"].empty()) << body;
  EXPECT_NE(alone["FailedAndUnresolvableNodes"]["bad"].get<std::string>().find(
                "tessera.io/gpu-inventory"),
            std::string::npos)
      << body;
  EXPECT_TRUE(driver.Schedule(ok, {"bad", "good"}).bound);
  httplib::Client http("127.0.0.1", app->port());
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get("/inspect/nope")->status, 404);
  const std::string metrics = http.Get("/metrics")->body;
  EXPECT_NE(metrics.find("tessera_extender_requests_total{verb=\"filter\",result=\"error\"} 1"),
            std::string::npos);
  EXPECT_NE(
      metrics.find("tessera_extender_pods_refused_total{verb=\"filter\",reason=\"pod-invalid\"} 1"),
      std::string::npos);
  EXPECT_NE(metrics.find("tessera_extender_request_duration_seconds_bucket{verb=\"bind\""),
            std::string::npos);
  // Every metric the Grafana dashboard of deploy/kubernetes/monitoring/monitoring.yaml queries is
  // served.
  std::string dashboard;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(
           std::string(TESSERA_SOURCE_DIR) + "/deploy/kubernetes/monitoring/monitoring.yaml")) {
    if (doc["data"] && doc["data"]["tessera-scheduler.json"])
      dashboard = doc["data"]["tessera-scheduler.json"].as<std::string>();
  }
  ASSERT_FALSE(dashboard.empty());
  std::set<std::string> queried;
  const k8s::Json parsed = k8s::Json::parse(dashboard);
  for (const auto& panel : parsed["panels"]) {
    for (const auto& target : panel["targets"]) {
      const std::string expr = target["expr"];
      const std::regex name(R"(tessera_extender_[a-z_]+)");
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name);
           it != std::sregex_iterator(); ++it) {
        std::string metric = it->str();
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          if (metric.size() > strlen(suffix) && metric.ends_with(suffix))
            metric.resize(metric.size() - strlen(suffix));
        }
        queried.insert(metric);
      }
    }
  }
  EXPECT_GE(queried.size(), 8u);
  for (const std::string& metric : queried) {
    EXPECT_NE(metrics.find("# TYPE " + metric + " "), std::string::npos)
        << metric << " is not served";
  }
}

// The extender against an API server that authenticates, fails, drops, slows and expires: every
// verb still answers 200 with what kube-scheduler reads, a failed write leaves nothing
// half-written, and the picture follows the server through ended and expired watches.
TEST_F(ExtenderApiTest, UnderTheApiServersTokenFaultsAndExpiriesNoShareIsLostOrGivenTwice) {
  api_.RequireToken("ext-token");
  api_.SetWatchTimeout(std::chrono::milliseconds(400));
  api_.CreateNode(Created(Node("n1", Gpus(2))));
  // Without the token the extender never gets its picture: the verbs say so, in Error.
  {
    AppConfig c;
    c.api.server = api_.url();
    c.api.token = "wrong";
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.quiet = true;
    ExtenderApp refused(c);
    ASSERT_TRUE(refused.Start().ok());
    EXPECT_FALSE(refused.WaitReady(std::chrono::milliseconds(1500)));
    SchedulerDriver driver(refused.port());
    auto r = driver.Schedule(CreatePod(Pod("early", {{"tessera.io/gpu-core", "10"}})), {"n1"});
    EXPECT_FALSE(r.bound);
    EXPECT_NE(r.error.find("still loading Nodes and Pods"), std::string::npos) << r.error;
    EXPECT_GT(api_.unauthorized(), 0);
  }
  AppConfig c;
  c.api.server = api_.url();
  c.api.token = "ext-token";
  c.listen_host = "127.0.0.1";
  c.listen_port = 0;
  c.state.workload = std::make_shared<placement::TargetWorkload>();
  c.quiet = true;
  ExtenderApp app(c);
  ASSERT_TRUE(app.Start().ok());
  ASSERT_TRUE(app.WaitReady(kWait));
  SchedulerDriver driver(app.port());
  // The Binding answers 503: the bind fails with the server's word in Error, and its annotation
  // is taken back; the next attempt binds.
  const k8s::Json a = CreatePod(Pod("a", {{"tessera.io/gpu-count", "1"}}));
  api_.InjectFault({"POST", "/binding", 1, 503});
  auto failed = driver.Schedule(a, {"n1"});
  EXPECT_FALSE(failed.bound);
  EXPECT_NE(failed.error.find("503"), std::string::npos) << failed.error;
  auto left = api_.GetPod("default", "a");
  EXPECT_FALSE((*left)["metadata"]
                   .value("annotations", k8s::Json::object())
                   .contains(k8s::kAssignmentAnnotation))
      << "a failed bind left its assignment";
  EXPECT_TRUE(ScheduleUntilBound(driver, a, {"n1"}, kWait).bound);
  // Dropped connections and a slow server while binding: each attempt binds or leaves nothing.
  api_.SetLatency(std::chrono::milliseconds(50));
  for (int i = 0; i < 3; ++i) {
    api_.InjectFault({"PATCH", "/api/v1/namespaces/default/pods/", 2, 0});
    const k8s::Json p = CreatePod(Pod("drop" + std::to_string(i), {{"tessera.io/gpu-core", "20"}}));
    auto r = ScheduleUntilBound(driver, p, {"n1"}, kWait);
    EXPECT_TRUE(r.bound) << r.error;
  }
  api_.SetLatency(std::chrono::milliseconds(0));
  // Watches ended, then dropped while the window moved on (410): a pod deleted meanwhile gives
  // its whole GPU back, and the next whole-GPU pod fits only then.
  const k8s::Json big = CreatePod(Pod("big", {{"tessera.io/gpu-count", "1"}}));
  EXPECT_FALSE(driver.Schedule(big, {"n1"}).bound) << "a holds one GPU, the shares the other";
  api_.SetHistoryLimit(3);
  api_.DropWatches();
  ASSERT_TRUE(api_.DeletePod("default", "a"));
  for (int i = 0; i < 5; ++i)
    api_.CreatePod(Created(Pod("noise" + std::to_string(i), std::map<std::string, std::string>{})));
  auto r = ScheduleUntilBound(driver, big, {"n1"}, kWait);
  EXPECT_TRUE(r.bound) << r.error;
  ExpectNoGpuGivenTwice(api_.Pods());
  EXPECT_GE(api_.faults_served(), 7);
}

// kube-scheduler's preemption asks the extender (preemptVerb) before it evicts: through HTTP, as
// a nodeCacheCapable extender is asked, the answer keeps only nodes where evicting frees what the
// pod needs under the engine's placement, with the victims that takes.
TEST_F(ExtenderApiTest, PreemptAnswersWhereEvictingFreesWhatThePodNeeds) {
  api_.CreateNode(Created(Node("n1", Gpus(2))));
  auto app = StartExtender(api_.url());
  SchedulerDriver driver(app->port());
  auto with_priority = [](k8s::Json pod, int priority) {
    pod["spec"]["priority"] = priority;
    return pod;
  };
  // Two pods of 60 %, one per GPU: 80 gpu-core devices are free, but no whole GPU.
  const k8s::Json low = CreatePod(with_priority(Pod("low", {{"tessera.io/gpu-core", "60"}}), 0));
  const k8s::Json mid = CreatePod(with_priority(Pod("mid", {{"tessera.io/gpu-core", "60"}}), 10));
  ASSERT_TRUE(driver.Schedule(low, {"n1"}).bound);
  ASSERT_TRUE(driver.Schedule(mid, {"n1"}).bound);
  ASSERT_EQ(GivenAway(api_.Pods()).size(), 2u);
  // Victims are pods the API server shows bound there: wait until the extender has seen both.
  for (int i = 0; i < 500 && app->state().Stats().holds_observed < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(app->state().Stats().holds_observed, 2u);
  const k8s::Json whole =
      CreatePod(with_priority(Pod("whole", {{"tessera.io/gpu-count", "1"}}), 100));
  ASSERT_FALSE(driver.Schedule(whole, {"n1"}).bound);
  // kube-scheduler's own preemption finds no victim needed by its counts: the extender names one.
  auto kept = driver.Preempt(whole, {{"n1", {}}});
  ASSERT_TRUE(kept.ok()) << kept.error();
  EXPECT_EQ(*kept, (std::map<std::string, std::vector<std::string>>{
                       {"n1", {low["metadata"]["uid"].get<std::string>()}}}))
      << "the lowest-priority pod frees a whole GPU";
  // A pod outranked by both holders may evict neither: nowhere to preempt.
  const k8s::Json meek = CreatePod(with_priority(Pod("meek", {{"tessera.io/gpu-count", "1"}}), -5));
  auto none = driver.Preempt(meek, {{"n1", {}}});
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->empty());
  // Not ready, or a body it cannot read: 200 and no node (nothing is evicted).
  std::string body;
  EXPECT_EQ(driver.Post("/preempt", R"({"Pod":{},"NodeNameToMetaVictims":{"n1":7}})", &body), 200);
  EXPECT_EQ(k8s::Json::parse(body), k8s::Json::parse(R"({"NodeNameToMetaVictims":{}})"));
}

TEST_F(ExtenderApiTest, TwoReplicasNeverGiveOneShareTwice) {
  api_.CreateNode(Created(Node("solo", Gpus(1))));
  auto a = StartExtender(api_.url());
  auto b = StartExtender(api_.url());
  SchedulerDriver da(a->port()), db(b->port());
  // Each replica decides on the same empty GPU before either binds.
  const k8s::Json pa = CreatePod(Pod("pa", {{"tessera.io/gpu-count", "1"}}));
  const k8s::Json pb = CreatePod(Pod("pb", {{"tessera.io/gpu-count", "1"}}));
  std::string body;
  ASSERT_EQ(da.Post("/filter", k8s::Json{{"Pod", pa}, {"NodeNames", {"solo"}}}.dump(), &body), 200);
  ASSERT_EQ(k8s::Json::parse(body)["NodeNames"].size(), 1u);
  ASSERT_EQ(db.Post("/filter", k8s::Json{{"Pod", pb}, {"NodeNames", {"solo"}}}.dump(), &body), 200);
  ASSERT_EQ(k8s::Json::parse(body)["NodeNames"].size(), 1u);
  auto bind = [&](SchedulerDriver& d, const k8s::Json& pod) {
    std::string out;
    d.Post("/bind",
           k8s::Json{{"PodName", pod["metadata"]["name"]},
                     {"PodNamespace", "default"},
                     {"PodUID", pod["metadata"]["uid"]},
                     {"Node", "solo"}}
               .dump(),
           &out);
    return k8s::Json::parse(out)["Error"].get<std::string>();
  };
  const std::string ea = bind(da, pa);
  const std::string eb = bind(db, pb);
  EXPECT_EQ(ea.empty() + eb.empty(), 1) << "a: " << ea << "\nb: " << eb;
  ExpectNoGpuGivenTwice(api_.Pods());

  // A burst: both replicas schedule their own half of 24 half-GPU pods at once on 6 GPUs.
  for (const char* n : {"x1", "x2", "x3"}) api_.CreateNode(Created(Node(n, Gpus(2))));
  ASSERT_TRUE(api_.DeletePod("default", ea.empty() ? "pa" : "pb"));
  const std::vector<std::string> nodes = {"x1", "x2", "x3", "solo"};
  std::atomic<int> bound{0};
  auto burst = [&](int port, int first) {
    SchedulerDriver d(port);
    for (int i = first; i < 24; i += 2) {
      const k8s::Json pod =
          CreatePod(Pod("burst-" + std::to_string(i), {{"tessera.io/gpu-core", "50"}}));
      for (int attempt = 0; attempt < 20; ++attempt) {
        auto r = d.Schedule(pod, nodes);
        if (r.bound) {
          ++bound;
          break;
        }
        if (r.error.empty() && !r.failures.empty()) break;  // nothing fits: stays Pending
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  };
  std::thread ta(burst, a->port(), 0), tb(burst, b->port(), 1);
  ta.join();
  tb.join();
  const auto pods = api_.Pods();
  ExpectNoGpuGivenTwice(pods);
  int shares = 0;
  for (const auto& [uuid, g] : GivenAway(pods)) shares += g.core;
  EXPECT_LE(shares, 700);
  EXPECT_GE(bound.load(), 10);  // all 6 GPUs can be filled; conflicts cost retries, not capacity
}

// The extender as a process, killed with SIGKILL in the middle of a burst of binds and started
// again: afterwards no GPU is given twice and every pod is bound with an assignment or Pending.
TEST(ExtenderRestartTest, KilledDuringABurstOfBinds) {
  const std::string build = process::BuildDir();
  process::ChildProcess api({build + "/tests/test_apiserver", "--port", "0"}, {});
  auto url = api.WaitForKey("url", kWait);
  ASSERT_TRUE(url.has_value());
  k8s::ClientConfig config;
  config.server = *url;
  k8s::ApiClient client(config);
  std::vector<std::string> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back("r" + std::to_string(i));
    ASSERT_TRUE(client.Create("/api/v1/nodes", Created(Node(nodes.back(), Gpus(2)))).ok());
  }
  // 40 pods of 30 %: 24 fit on the 8 GPUs (3 per GPU), the rest stay Pending.
  std::vector<k8s::Json> pods;
  for (int i = 0; i < 40; ++i) {
    auto created =
        client.Create("/api/v1/namespaces/default/pods",
                      Created(Pod("r-" + std::to_string(i), {{"tessera.io/gpu-core", "30"}})));
    ASSERT_TRUE(created.ok());
    pods.push_back(*created);
  }
  auto start = [&]() {
    auto p = std::make_unique<process::ChildProcess>(
        std::vector<std::string>{build + "/bin/tessera-extender", "--apiserver", *url, "--listen",
                                 "127.0.0.1:0", "--insecure-http"},
        std::vector<std::string>{});
    return p;
  };
  auto extender = start();
  auto port = extender->WaitForKey("port", kWait);
  ASSERT_TRUE(port.has_value());
  ASSERT_TRUE(extender->WaitForKey("ready", kWait).has_value());
  std::atomic<int> current_port{std::stoi(*port)};
  std::atomic<int> done{0};
  std::atomic<int> failed_calls{0};  // verbs that got no answer: the extender was down
  std::atomic<bool> stop{false};
  std::set<int> pending;
  for (int i = 0; i < 40; ++i) pending.insert(i);
  std::mutex mu;
  // The scheduler: round after round over the pending pods, as its queue retries them.
  std::thread scheduler([&] {
    while (!stop) {
      std::vector<int> round;
      {
        std::lock_guard lock(mu);
        round.assign(pending.begin(), pending.end());
      }
      if (round.empty()) break;
      SchedulerDriver d(current_port.load());
      for (int i : round) {
        if (stop) break;
        auto r = d.Schedule(pods[static_cast<size_t>(i)], nodes);
        if (r.bound) {
          std::lock_guard lock(mu);
          pending.erase(i);
          ++done;
        } else if (r.error.rfind("Post \"", 0) == 0) {  // no answer: the client's error
          ++failed_calls;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  // Kill it in the middle of the burst.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  extender->Kill(SIGKILL);
  extender->Wait(kWait);
  auto again = start();
  auto port2 = again->WaitForKey("port", kWait);
  ASSERT_TRUE(port2.has_value());
  ASSERT_TRUE(again->WaitForKey("ready", kWait).has_value());
  current_port = std::stoi(*port2);
  // Let the scheduler place what fits; then stop it.
  const auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (done < 24 && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  scheduler.join();
  auto list = client.ListPods("default");
  ASSERT_TRUE(list.ok());
  std::vector<k8s::Json> items((*list)["items"].begin(), (*list)["items"].end());
  ExpectNoGpuGivenTwice(items);
  int bound = 0;
  for (const k8s::Json& p : items) {
    auto view = k8s::PodFromJson(p);
    ASSERT_TRUE(view.ok());
    if (view->node_name.empty()) continue;  // Pending
    ++bound;
    const std::string* a = view->Annotation(k8s::kAssignmentAnnotation);
    ASSERT_NE(a, nullptr) << view->Key() << " is bound without an assignment";
    EXPECT_EQ(k8s::ParseAssignment(*a)->node, view->node_name);
  }
  EXPECT_EQ(bound, 24);  // 3 per GPU: nothing lost to the crash
  EXPECT_GT(failed_calls.load(), 0) << "the kill did not land during the burst";
  again->Kill(SIGTERM);
  again->Wait(kWait);
  api.CloseStdin();
  api.Wait(kWait);
}

// The re-cut request on its way to the Node (recut_writer.h), through the stand-in API server: a
// hostile value there is replaced, no request is written over one the node has not answered, each
// answered one is followed by the next number, and a write that loses to another (409) reads the
// node again and wins on the next resourceVersion.
TEST(RecutWriterTest, recut_OneRequestPerNodeNumberedAndWrittenOnItsResourceVersion) {
  k8s::TestApiServer api;
  ASSERT_TRUE(api.Start(0).ok());
  api.CreateNode(
      {{"metadata",
        {{"name", "n"},
         {"annotations", {{k8s::kMigRecutAnnotation, "{\"version\":1,\"id\":\"x\"}"}}}}}});
  k8s::ClientConfig cc;
  cc.server = api.url();
  k8s::ApiClient client(cc);
  const std::string gpu = "GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5";
  const MigRecut recut{"n", gpu, "1g.10gb=7", "team/small"};
  auto request = [&] {
    auto node = api.GetNode("n");
    return k8s::ParseMigRecutRequest(
        (*node)["metadata"]["annotations"][k8s::kMigRecutAnnotation].get<std::string>());
  };
  RecutWriteOutcome out = WriteMigRecut(client, recut);
  ASSERT_TRUE(out.written) << out.reason;
  EXPECT_EQ(out.id, 1u);
  ASSERT_TRUE(request().ok()) << request().error();
  EXPECT_EQ(*request(), (k8s::MigRecutRequest{1, gpu, "1g.10gb=7", "team/small"}));
  // Unanswered: nothing is written over it.
  out = WriteMigRecut(client, {"n", gpu, "3g.40gb=2", "team/other"});
  EXPECT_FALSE(out.written);
  EXPECT_EQ(out.reason, "node n has not answered request 1 yet (tessera.io/mig-recut-status)");
  EXPECT_EQ(request()->layout, "1g.10gb=7");
  // Answered: the next number.
  ASSERT_TRUE(client
                  .PatchNodeAnnotations(
                      "n", {{k8s::kMigRecutStatusAnnotation,
                             k8s::WriteMigRecutStatus({1, k8s::MigRecutState::kRefused, gpu,
                                                       "GPU runs pod(s) team/big"})}})
                  .ok());
  api.InjectFault({"PATCH", "/api/v1/nodes/n", 1, 409});
  out = WriteMigRecut(client, {"n", gpu, "3g.40gb=2", "team/other"});
  ASSERT_TRUE(out.written) << out.reason;
  EXPECT_EQ(out.id, 2u);
  EXPECT_EQ(request()->layout, "3g.40gb=2");
  EXPECT_EQ(api.faults_served(), 1) << "the 409 was answered and the write tried again";
  // A node that is not there.
  out = WriteMigRecut(client, {"gone", gpu, "1g.10gb=7", ""});
  EXPECT_FALSE(out.written);
  EXPECT_NE(out.reason.find("reading node gone"), std::string::npos) << out.reason;
  api.Stop();
}

}  // namespace
}  // namespace tessera::extender
