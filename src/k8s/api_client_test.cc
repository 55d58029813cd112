// ApiClient against the stand-in API server (in process, and as the test_apiserver program):
// get/list with selectors, merge and JSON patches with resourceVersion preconditions (409 as its
// own kind), bindings, events, watches with bookmarks and 410 after compaction, the Reflector, and
// kubeconfig loading.
#include "k8s/api_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "testing/standins/test_apiserver.h"
#include "process/child_process.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

ListOptions Opts(const std::string& fields, const std::string& labels = "",
                 const std::string& rv = "", int timeout = 0) {
  ListOptions o;
  o.field_selector = fields;
  o.label_selector = labels;
  o.resource_version = rv;
  o.timeout_seconds = timeout;
  return o;
}

Json NodeJson(const std::string& name, Json labels = Json::object()) {
  return {{"metadata", {{"name", name}, {"labels", labels}}}};
}

Json PodJson(const std::string& name, const std::string& node = "") {
  Json pod = {{"metadata", {{"name", name}, {"namespace", "ns"}, {"labels", {{"app", "web"}}}}},
              {"spec", {{"containers", Json::array({{{"name", "c"}}})}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

class ApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start().ok());
    ClientConfig c;
    c.server = server_.url();
    client_ = std::make_unique<ApiClient>(c);
  }
  TestApiServer server_;
  std::unique_ptr<ApiClient> client_;
};

TEST_F(ApiClientTest, CreatesGetsAndListsWithSelectors) {
  ASSERT_TRUE(client_->Create("/api/v1/nodes", NodeJson("n1", {{"gpu", "yes"}})).ok());
  ASSERT_TRUE(client_->Create("/api/v1/nodes", NodeJson("n2")).ok());
  auto created = client_->Create("/api/v1/namespaces/ns/pods", PodJson("a", "n1"));
  ASSERT_TRUE(created.ok()) << created.error().message;
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty());
  EXPECT_EQ((*created)["status"]["phase"], "Pending");
  ASSERT_TRUE(client_->Create("/api/v1/namespaces/ns/pods", PodJson("b", "n2")).ok());
  Json other = PodJson("c", "n1");
  other["metadata"]["namespace"] = "other";
  ASSERT_TRUE(client_->Create("/api/v1/namespaces/other/pods", other).ok());
  // A body naming another namespace than the path is refused, as the real server does.
  auto mismatch = client_->Create("/api/v1/namespaces/other/pods", PodJson("d", "n1"));
  EXPECT_EQ(mismatch.kind(), ApiErrorKind::kInvalid);

  auto again = client_->Create("/api/v1/namespaces/ns/pods", PodJson("a"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.kind(), ApiErrorKind::kConflict);
  EXPECT_THAT(again.error().message, HasSubstr("AlreadyExists"));

  auto pod = client_->GetPod("ns", "a");
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ((*pod)["spec"]["nodeName"], "n1");
  auto missing = client_->GetPod("ns", "zz");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.kind(), ApiErrorKind::kNotFound);
  EXPECT_THAT(missing.error().message, HasSubstr("pods \"zz\" not found"));

  auto on_n1 = client_->ListPods("", Opts("spec.nodeName=n1"));
  ASSERT_TRUE(on_n1.ok());
  EXPECT_EQ((*on_n1)["items"].size(), 2u);
  EXPECT_FALSE((*on_n1)["metadata"].value("resourceVersion", "").empty());
  auto ns_only = client_->ListPods("ns", Opts("spec.nodeName!=n1"));
  ASSERT_EQ((*ns_only)["items"].size(), 1u);
  EXPECT_EQ((*ns_only)["items"][0]["metadata"]["name"], "b");
  auto labelled = client_->ListNodes(Opts("", "gpu=yes"));
  ASSERT_EQ((*labelled)["items"].size(), 1u);
  auto not_labelled = client_->ListNodes(Opts("", "!gpu"));
  ASSERT_EQ((*not_labelled)["items"].size(), 1u);
  EXPECT_EQ((*not_labelled)["items"][0]["metadata"]["name"], "n2");
  auto by_name = client_->ListPods("", Opts("metadata.name=c,metadata.namespace=other"));
  EXPECT_EQ((*by_name)["items"].size(), 1u);
}

TEST_F(ApiClientTest, PatchesAnnotationsWithAResourceVersionPrecondition) {
  server_.CreatePod(PodJson("a"));
  auto pod = client_->GetPod("ns", "a");
  const std::string rv = (*pod)["metadata"]["resourceVersion"];
  auto patched = client_->PatchPodAnnotations("ns", "a", {{"tessera.io/phase", "assumed"}}, rv);
  ASSERT_TRUE(patched.ok()) << patched.error().message;
  EXPECT_EQ((*patched)["metadata"]["annotations"]["tessera.io/phase"], "assumed");
  EXPECT_NE((*patched)["metadata"]["resourceVersion"], rv);

  // The same version again is stale now: 409, a kind of its own, and nothing changes.
  auto stale = client_->PatchPodAnnotations("ns", "a", {{"tessera.io/phase", "allocated"}}, rv);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.kind(), ApiErrorKind::kConflict);
  EXPECT_EQ(stale.error().http_status, 409);
  EXPECT_THAT(stale.error().message, HasSubstr("the object has been modified"));
  EXPECT_EQ(server_.conflicts(), 1);
  EXPECT_EQ((*server_.GetPod("ns", "a"))["metadata"]["annotations"]["tessera.io/phase"], "assumed");

  // Without a precondition it applies; nullopt removes the key.
  ASSERT_TRUE(client_->PatchPodAnnotations("ns", "a", {{"tessera.io/phase", std::nullopt},
                                                       {"x", "1"}})
                  .ok());
  const Json after = *server_.GetPod("ns", "a");
  EXPECT_FALSE(after["metadata"]["annotations"].contains("tessera.io/phase"));
  EXPECT_EQ(after["metadata"]["annotations"]["x"], "1");

  // A patch cannot change identity or status through the main resource.
  ASSERT_TRUE(client_->MergePatch("/api/v1/namespaces/ns/pods/a",
                                  {{"metadata", {{"uid", "forged"}}}, {"status", {{"phase", "Running"}}}})
                  .ok());
  EXPECT_NE((*server_.GetPod("ns", "a"))["metadata"]["uid"], "forged");
  EXPECT_EQ((*server_.GetPod("ns", "a"))["status"]["phase"], "Pending");
  ASSERT_TRUE(client_->MergePatch("/api/v1/namespaces/ns/pods/a/status",
                                  {{"status", {{"phase", "Running"}}}})
                  .ok());
  EXPECT_EQ((*server_.GetPod("ns", "a"))["status"]["phase"], "Running");

  auto missing = client_->PatchNodeAnnotations("nope", {{"a", "b"}});
  EXPECT_EQ(missing.kind(), ApiErrorKind::kNotFound);
}

TEST_F(ApiClientTest, JsonPatchesAndTheirPreconditions) {
  server_.CreateNode(NodeJson("n1"));
  const std::string rv = (*server_.GetNode("n1"))["metadata"]["resourceVersion"];
  auto ok = client_->JsonPatch("/api/v1/nodes/n1",
                               Json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv}},
                                            {{"op", "add"}, {"path", "/metadata/annotations"}, {"value", {{"k", "v"}}}}}));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*server_.GetNode("n1"))["metadata"]["annotations"]["k"], "v");
  auto failed_test = client_->JsonPatch(
      "/api/v1/nodes/n1",
      Json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv}}}));
  EXPECT_EQ(failed_test.kind(), ApiErrorKind::kInvalid);
  auto stale = client_->JsonPatch(
      "/api/v1/nodes/n1",
      Json::array({{{"op", "replace"}, {"path", "/metadata/resourceVersion"}, {"value", rv}}}));
  EXPECT_EQ(stale.kind(), ApiErrorKind::kConflict);
}

TEST_F(ApiClientTest, BindsOncePerPod) {
  const Json pod = server_.CreatePod(PodJson("a"));
  const std::string uid = pod["metadata"]["uid"];
  auto wrong_uid = client_->BindPod("ns", "a", "not-the-uid", "n1");
  EXPECT_EQ(wrong_uid.kind(), ApiErrorKind::kConflict);
  ASSERT_TRUE(client_->BindPod("ns", "a", uid, "n1").ok());
  EXPECT_EQ((*server_.GetPod("ns", "a"))["spec"]["nodeName"], "n1");
  auto twice = client_->BindPod("ns", "a", uid, "n2");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.kind(), ApiErrorKind::kConflict);
  EXPECT_THAT(twice.error().message, HasSubstr("already assigned to node \"n1\""));
  EXPECT_EQ(client_->BindPod("ns", "zz", "", "n1").kind(), ApiErrorKind::kNotFound);
}

TEST_F(ApiClientTest, CreatesEventsAboutPodsAndNodes) {
  const Json pod = server_.CreatePod(PodJson("a"));
  EventSpec e;
  e.ns = "ns";
  e.name = "a";
  e.uid = pod["metadata"]["uid"];
  e.reason = "TesseraAllocateFailed";
  e.message = "no assignment";
  e.component = "tessera-device-plugin";
  e.host = "n1";
  ASSERT_TRUE(client_->CreateEvent(e).ok());
  EventSpec n;
  n.kind = "Node";
  n.name = "n1";
  n.reason = "TesseraBadLabel";
  n.message = "m";
  ASSERT_TRUE(client_->CreateEvent(n).ok());
  auto in_ns = server_.Events("ns");
  ASSERT_EQ(in_ns.size(), 1u);
  EXPECT_EQ(in_ns[0]["involvedObject"]["uid"], e.uid);
  EXPECT_EQ(in_ns[0]["reason"], "TesseraAllocateFailed");
  EXPECT_EQ(in_ns[0]["type"], "Warning");
  auto node_events = client_->Get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DNode");
  ASSERT_TRUE(node_events.ok());
  ASSERT_EQ((*node_events)["items"].size(), 1u);
  EXPECT_EQ((*node_events)["items"][0]["involvedObject"]["name"], "n1");
}

TEST_F(ApiClientTest, WatchesFromAVersionWithSelectorTransitionsAndBookmarks) {
  server_.CreatePod(PodJson("before", "n1"));
  auto list = client_->ListPods("", Opts("spec.nodeName=n1"));
  const std::string rv = (*list)["metadata"]["resourceVersion"];
  std::vector<std::string> seen;
  std::atomic<bool> bookmark{false};
  std::thread watcher([&] {
    Status s = client_->Watch("/api/v1/pods", Opts("spec.nodeName=n1", "", rv, 20),
                              [&](const WatchEvent& e) {
                                if (e.type == "BOOKMARK") {
                                  bookmark = true;
                                  return true;
                                }
                                seen.push_back(e.type + " " + e.object["metadata"].value("name", ""));
                                return seen.size() < 4;
                              });
    EXPECT_TRUE(s.ok()) << s.message();
  });
  const Json pod = server_.CreatePod(PodJson("later"));                           // not on n1: unseen
  ASSERT_TRUE(client_->BindPod("ns", "later", pod["metadata"]["uid"], "n1").ok());  // enters: ADDED
  ASSERT_TRUE(client_->PatchPodAnnotations("ns", "later", {{"k", "v"}}).ok());      // MODIFIED
  std::this_thread::sleep_for(1500ms);                                              // a bookmark
  ASSERT_TRUE(server_.DeletePod("ns", "before"));                                   // DELETED
  ASSERT_TRUE(server_.SetPodPhase("ns", "later", "Running"));                       // MODIFIED
  watcher.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED later", "MODIFIED later", "DELETED before",
                                            "MODIFIED later"}));
  EXPECT_TRUE(bookmark.load());
}

TEST_F(ApiClientTest, AWatchFromACompactedVersionIsGone) {
  server_.CreatePod(PodJson("a"));
  const std::string old = std::to_string(server_.resource_version());
  server_.CreatePod(PodJson("b"));
  server_.Compact();
  ApiErrorKind kind = ApiErrorKind::kOther;
  Status s = client_->Watch("/api/v1/pods", Opts("", "", old),
                            [](const WatchEvent&) { return true; }, &kind);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(kind, ApiErrorKind::kGone);
  EXPECT_THAT(s.message(), HasSubstr("410"));
}

TEST_F(ApiClientTest, StopEndsAWatchInProgress) {
  std::thread watcher([&] {
    Status s = client_->Watch("/api/v1/pods", {}, [](const WatchEvent&) { return true; });
    EXPECT_TRUE(s.ok()) << s.message();
  });
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  client_->Stop();
  watcher.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(ApiClientTest, ReflectorListsThenWatchesAndRelistsOnDemand) {
  server_.CreatePod(PodJson("a", "n1"));
  std::mutex mu;
  std::set<std::string> names;
  int replaces = 0;
  Reflector r(client_.get(), "/api/v1/pods", Opts("spec.nodeName=n1"),
              {[&](const std::vector<Json>& items) {
                 std::lock_guard<std::mutex> lock(mu);
                 ++replaces;
                 names.clear();
                 for (const Json& p : items) names.insert(p["metadata"]["name"].get<std::string>());
               },
               [&](const WatchEvent& e) {
                 std::lock_guard<std::mutex> lock(mu);
                 const std::string n = e.object["metadata"]["name"];
                 if (e.type == "DELETED") {
                   names.erase(n);
                 } else {
                   names.insert(n);
                 }
               }});
  r.Start();
  ASSERT_TRUE(r.WaitSynced(5s));
  server_.CreatePod(PodJson("b", "n1"));
  server_.DeletePod("ns", "a");
  auto wait_for = [&](const std::set<std::string>& want) {
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (names == want) return true;
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  EXPECT_TRUE(wait_for({"b"}));
  r.Relist();
  server_.CreatePod(PodJson("c", "n1"));
  EXPECT_TRUE(wait_for({"b", "c"}));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GE(replaces, 2);
}

TEST(ApiClient, ATransportErrorIsItsOwnKind) {
  ClientConfig c;
  c.server = "http://127.0.0.1:1";
  c.timeout = 2s;
  ApiClient client(c);
  auto r = client.ListNodes();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.kind(), ApiErrorKind::kTransport);
  EXPECT_THAT(r.error().message, HasSubstr("http://127.0.0.1:1/api/v1/nodes"));
}

TEST(ApiClient, TheStandInRunsAsAProgram) {
  process::ChildProcess server({process::BuildDir() + "/tests/test_apiserver", "--port", "0"}, {});
  auto port = server.WaitForKey("port", 10s);
  ASSERT_TRUE(port.has_value());
  ClientConfig c;
  c.server = "http://127.0.0.1:" + *port;
  ApiClient client(c);
  ASSERT_TRUE(client.Create("/api/v1/nodes", NodeJson("n1")).ok());
  auto nodes = client.ListNodes();
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ((*nodes)["items"].size(), 1u);
  server.CloseStdin();
  EXPECT_EQ(server.Wait(10s), 0);
}

TEST(Kubeconfig, ReadsTheContextsClusterAndUser) {
  const std::string dir = "/tmp/" + process::UniqueName("kubeconfig");
  mkdir(dir.c_str(), 0700);
  {
    std::ofstream(dir + "/token") << "file-token\n";
    std::ofstream(dir + "/config") << R"(apiVersion: v1
kind: Config
current-context: ops
contexts:
- name: ops
  context: {cluster: c1, user: u1}
- name: dev
  context: {cluster: c2, user: u2}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: c2
  cluster: {server: "http://127.0.0.1:8080", insecure-skip-tls-verify: true}
users:
- name: u1
  user: {token: abc}
- name: u2
  user: {tokenFile: token}
)";
  }
  auto ops = KubeconfigConfig(dir + "/config");
  ASSERT_TRUE(ops.ok()) << ops.error();
  EXPECT_EQ(ops->server, "https://10.0.0.1:6443");
  EXPECT_EQ(ops->token, "abc");
  EXPECT_EQ(ops->ca_pem, "-----BEGIN CERTIFICATE-----\n");
  auto dev = KubeconfigConfig(dir + "/config", "dev");
  ASSERT_TRUE(dev.ok()) << dev.error();
  EXPECT_TRUE(dev->insecure_skip_tls_verify);
  EXPECT_EQ(dev->token_file, dir + "/token");
  auto none = KubeconfigConfig(dir + "/config", "prod");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.error(), HasSubstr("contexts: no context named \"prod\""));
  auto missing = KubeconfigConfig(dir + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr(dir + "/nope"));
  std::system(("rm -rf " + dir).c_str());
}

TEST(InCluster, SaysWhatIsMissing) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  auto c = InClusterConfig("/nonexistent");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  EXPECT_THAT(c.error(), HasSubstr("--kubeconfig"));
}

}  // namespace
}  // namespace tessera::k8s
