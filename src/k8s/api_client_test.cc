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
#include <functional>
#include <set>
#include <thread>

#include "process/child_process.h"
#include "testing/standins/test_apiserver.h"

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
  ASSERT_TRUE(
      client_->PatchPodAnnotations("ns", "a", {{"tessera.io/phase", std::nullopt}, {"x", "1"}})
          .ok());
  const Json after = *server_.GetPod("ns", "a");
  EXPECT_FALSE(after["metadata"]["annotations"].contains("tessera.io/phase"));
  EXPECT_EQ(after["metadata"]["annotations"]["x"], "1");

  // A patch cannot change identity (422, as the registry's update validation answers), nor status
  // through the main resource (ignored there).
  auto forged =
      client_->MergePatch("/api/v1/namespaces/ns/pods/a", {{"metadata", {{"uid", "forged"}}}});
  EXPECT_EQ(forged.kind(), ApiErrorKind::kInvalid);
  EXPECT_THAT(forged.error().message, HasSubstr("field is immutable"));
  EXPECT_NE((*server_.GetPod("ns", "a"))["metadata"]["uid"], "forged");
  ASSERT_TRUE(
      client_->MergePatch("/api/v1/namespaces/ns/pods/a", {{"status", {{"phase", "Running"}}}})
          .ok());
  EXPECT_EQ((*server_.GetPod("ns", "a"))["status"]["phase"], "Pending");
  ASSERT_TRUE(
      client_
          ->MergePatch("/api/v1/namespaces/ns/pods/a/status", {{"status", {{"phase", "Running"}}}})
          .ok());
  EXPECT_EQ((*server_.GetPod("ns", "a"))["status"]["phase"], "Running");

  auto missing = client_->PatchNodeAnnotations("nope", {{"a", "b"}});
  EXPECT_EQ(missing.kind(), ApiErrorKind::kNotFound);
}

TEST_F(ApiClientTest, JsonPatchesAndTheirPreconditions) {
  server_.CreateNode(NodeJson("n1"));
  const std::string rv = (*server_.GetNode("n1"))["metadata"]["resourceVersion"];
  auto ok = client_->JsonPatch(
      "/api/v1/nodes/n1",
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
  auto node_events =
      client_->Get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.kind%3DNode");
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
    Status s = client_->Watch(
        "/api/v1/pods", Opts("spec.nodeName=n1", "", rv, 20), [&](const WatchEvent& e) {
          if (e.type == "BOOKMARK") {
            bookmark = true;
            return true;
          }
          seen.push_back(e.type + " " + e.object["metadata"].value("name", ""));
          return seen.size() < 4;
        });
    EXPECT_TRUE(s.ok()) << s.message();
  });
  const Json pod = server_.CreatePod(PodJson("later"));  // not on n1: unseen
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
  Status s = client_->Watch(
      "/api/v1/pods", Opts("", "", old), [](const WatchEvent&) { return true; }, &kind);
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

// ---- the client and the Reflector under the API server's behaviours -----------------------------

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

// A reflector of the pods on n1 that keeps their names; Wait checks for a set of names.
struct PodNames {
  std::mutex mu;
  std::set<std::string> names;
  Reflector::Handlers Handlers() {
    return {[this](const std::vector<Json>& items) {
              std::lock_guard<std::mutex> lock(mu);
              names.clear();
              for (const Json& p : items) names.insert(p["metadata"]["name"].get<std::string>());
            },
            [this](const WatchEvent& e) {
              std::lock_guard<std::mutex> lock(mu);
              const std::string n = e.object["metadata"]["name"];
              if (e.type == "DELETED") {
                names.erase(n);
              } else {
                names.insert(n);
              }
            }};
  }
  bool Wait(const std::set<std::string>& want, std::chrono::milliseconds timeout = 10s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (names == want) return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

TEST_F(ApiClientTest, ABearerTokenIsSentAndARefusalIsForbiddenByName) {
  server_.RequireToken("s3cret");
  ClientConfig good;
  good.server = server_.url();
  good.token = "s3cret";
  ApiClient with(good);
  ASSERT_TRUE(with.Create("/api/v1/nodes", NodeJson("n1")).ok());
  EXPECT_TRUE(with.ListNodes().ok());
  // From a file, as a service account's token is read (and read again as it rotates).
  const std::string file = "/tmp/" + std::to_string(getpid()) + "-apitoken";
  std::ofstream(file) << "s3cret\n";
  ClientConfig from_file;
  from_file.server = server_.url();
  from_file.token_file = file;
  EXPECT_TRUE(ApiClient(from_file).GetNode("n1").ok());
  unlink(file.c_str());
  auto refused = client_->GetNode("n1");  // no token
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.kind(), ApiErrorKind::kForbidden);
  EXPECT_EQ(refused.error().http_status, 401);
  EXPECT_THAT(refused.error().message, HasSubstr("Unauthorized"));
  ClientConfig wrong = good;
  wrong.token = "guess";
  EXPECT_EQ(ApiClient(wrong).ListPods("").kind(), ApiErrorKind::kForbidden);
  EXPECT_EQ(server_.unauthorized(), 2);
  // A watch is refused the same way, and says so.
  ApiErrorKind kind = ApiErrorKind::kOther;
  Status w = client_->Watch(
      "/api/v1/pods", {}, [](const WatchEvent&) { return true; }, &kind);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(kind, ApiErrorKind::kForbidden);
}

// What the client writes passes the server's validation; what the server refuses is its own kind.
TEST_F(ApiClientTest, WhatTheClientWritesPassesTheServersValidation) {
  ASSERT_TRUE(client_->Create("/api/v1/nodes", NodeJson("n1")).ok());
  auto pod = client_->Create("/api/v1/namespaces/ns/pods", PodJson("a"));
  ASSERT_TRUE(pod.ok()) << pod.error().message;
  EXPECT_TRUE(client_
                  ->PatchPodAnnotations("ns", "a", {{"tessera.io/phase", "assumed"}},
                                        (*pod)["metadata"]["resourceVersion"])
                  .ok());
  EXPECT_TRUE(client_->PatchNodeAnnotations("n1", {{"tessera.io/gpu-inventory", "{}"}}).ok());
  EventSpec e;
  e.kind = "Pod";
  e.ns = "ns";
  e.name = "a";
  e.uid = (*pod)["metadata"]["uid"];
  e.reason = "TesseraAllocated";
  e.message = "ok";
  e.component = "tessera-device-plugin";
  e.host = "n1";
  EXPECT_TRUE(client_->CreateEvent(e).ok());
  e.kind = "Node";
  e.ns = "";
  e.name = "n1";
  EXPECT_TRUE(client_->CreateEvent(e).ok()) << "a Node's event goes to default";
  EXPECT_TRUE(client_->BindPod("ns", "a", (*pod)["metadata"]["uid"], "n1").ok());
  // And what it refuses: a pod's spec, annotations that are not strings, too much of them,
  // identity changes, an Event whose namespace is not its object's.
  auto spec = client_->MergePatch("/api/v1/namespaces/ns/pods/a", {{"spec", {{"nodeName", "n2"}}}});
  EXPECT_EQ(spec.kind(), ApiErrorKind::kInvalid);
  EXPECT_EQ(spec.error().http_status, 422);
  auto number =
      client_->MergePatch("/api/v1/nodes/n1", {{"metadata", {{"annotations", {{"x", 1}}}}}});
  EXPECT_EQ(number.error().http_status, 400);
  auto huge = client_->PatchNodeAnnotations("n1", {{"big", std::string(300 * 1024, 'x')}});
  EXPECT_EQ(huge.error().http_status, 422);
  EXPECT_THAT(huge.error().message, HasSubstr("must have at most 262144 bytes"));
  auto rename = client_->MergePatch("/api/v1/nodes/n1", {{"metadata", {{"name", "n9"}}}});
  EXPECT_EQ(rename.kind(), ApiErrorKind::kInvalid);
  Json stray = {{"metadata", {{"generateName", "a."}, {"namespace", "ns"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "a"}, {"namespace", "other"}}},
                {"reason", "X"}};
  auto event = client_->Create("/api/v1/namespaces/ns/events", stray);
  EXPECT_EQ(event.error().http_status, 422);
  EXPECT_THAT(event.error().message, HasSubstr("does not match event.namespace"));
  // A second Binding conflicts; a Binding of another name is refused.
  EXPECT_EQ(client_->BindPod("ns", "a", "", "n1").kind(), ApiErrorKind::kConflict);
  auto misnamed =
      client_->Create("/api/v1/namespaces/ns/pods/a/binding", {{"apiVersion", "v1"},
                                                               {"kind", "Binding"},
                                                               {"metadata", {{"name", "b"}}},
                                                               {"target", {{"name", "n1"}}}});
  EXPECT_EQ(misnamed.error().http_status, 400);
  EXPECT_THAT(misnamed.error().message,
              HasSubstr("name in URL does not match name in Binding object"));
}

// 5xx answers and dropped connections are errors of their own (transport for a drop, other for a
// 5xx), never a success or a hang; a slow server is waited for up to the client's timeout.
TEST_F(ApiClientTest, ServerErrorsDropsAndSlowAnswers) {
  ASSERT_TRUE(client_->Create("/api/v1/nodes", NodeJson("n1")).ok());
  server_.InjectFault({"GET", "/api/v1/nodes/n1", 1, 503});
  auto unavailable = client_->GetNode("n1");
  ASSERT_FALSE(unavailable.ok());
  EXPECT_EQ(unavailable.error().http_status, 503);
  EXPECT_THAT(unavailable.error().message, HasSubstr("ServiceUnavailable"));
  server_.InjectFault({"PATCH", "/api/v1/nodes/n1", 1, 500});
  EXPECT_EQ(client_->PatchNodeAnnotations("n1", {{"k", "v"}}).error().http_status, 500);
  EXPECT_TRUE(client_->GetNode("n1").ok()) << "the faults were one each";
  // A dropped connection (a fresh client: a kept-alive connection that fails is tried once more on
  // a new one, which would meet no fault).
  ClientConfig plain;
  plain.server = server_.url();
  ApiClient fresh(plain);
  server_.InjectFault({"GET", "/api/v1/nodes/n1", 1, 0});
  auto dropped = fresh.GetNode("n1");
  ASSERT_FALSE(dropped.ok());
  EXPECT_EQ(dropped.kind(), ApiErrorKind::kTransport);
  // Slow, within the timeout: answered; slower than it: a transport error, in about the timeout.
  server_.SetLatency(300ms);
  EXPECT_TRUE(client_->GetNode("n1").ok());
  server_.SetLatency(0ms);
  ClientConfig quick;
  quick.server = server_.url();
  quick.timeout = std::chrono::seconds(1);
  ApiClient impatient(quick);
  server_.InjectFault({"GET", "/api/v1/nodes/n1", 1, 503, 2500ms});
  const auto t0 = std::chrono::steady_clock::now();
  auto late = impatient.GetNode("n1");
  EXPECT_FALSE(late.ok());
  EXPECT_EQ(late.kind(), ApiErrorKind::kTransport);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2400ms);
  EXPECT_EQ(server_.faults_served(), 4);
}

// The server ends watches (its timeout), drops them, and forgets old versions: the Reflector
// watches again from where it was, and lists again only when told its version is gone (410).
TEST_F(ApiClientTest, ReflectorRidesOutEndedDroppedAndExpiredWatches) {
  server_.SetWatchTimeout(300ms);
  server_.CreatePod(PodJson("a", "n1"));
  PodNames seen;
  Reflector r(client_.get(), "/api/v1/pods", Opts("spec.nodeName=n1"), seen.Handlers());
  r.Start();
  ASSERT_TRUE(r.WaitSynced(5s));
  for (const char* name : {"b", "c"}) {
    std::this_thread::sleep_for(400ms);  // past the watch's end: a new watch sees it
    server_.CreatePod(PodJson(name, "n1"));
  }
  EXPECT_TRUE(seen.Wait({"a", "b", "c"}));
  EXPECT_EQ(r.relists(), 1) << "an ended watch is watched again from its version, not relisted";
  EXPECT_GE(server_.Requests("GET", "/api/v1/pods"), 3) << "a list and at least two watches";
  // Dropped mid-stream, the next watches refused (503) while the window moves on: 410, a new
  // list, and nothing lost.
  server_.SetWatchTimeout(0ms);
  server_.SetHistoryLimit(2);
  server_.InjectFault({"GET", "/api/v1/pods", 2, 503});
  server_.DropWatches();
  for (const char* name : {"d", "e", "f", "g"}) server_.CreatePod(PodJson(name, "n1"));
  server_.DeletePod("ns", "a");
  EXPECT_TRUE(seen.Wait({"b", "c", "d", "e", "f", "g"}));
  EXPECT_TRUE(WaitFor([&] { return r.relists() >= 2; })) << "no list after the 410";
  r.Stop();
}

// Bookmarks carry the collection's version on while nothing of the selection changes, so a watch
// that ends is taken up again inside the window instead of listing everything again.
TEST_F(ApiClientTest, BookmarksKeepAQuietWatchInsideTheWindow) {
  server_.SetBookmarkInterval(100ms);
  server_.SetWatchTimeout(600ms);
  server_.CreatePod(PodJson("a", "n1"));
  PodNames seen;
  Reflector r(client_.get(), "/api/v1/pods", Opts("spec.nodeName=n1"), seen.Handlers());
  r.Start();
  ASSERT_TRUE(r.WaitSynced(5s));
  ASSERT_TRUE(WaitFor([&] { return server_.Requests("GET", "/api/v1/pods") >= 2; }))
      << "the reflector never watched";
  std::this_thread::sleep_for(100ms);
  // Nothing of the watch's selection changes while the window moves far past the list's version;
  // the watches end and start again meanwhile.
  server_.SetHistoryLimit(3);
  for (int i = 0; i < 20; ++i) server_.CreatePod(PodJson("other-" + std::to_string(i), "n2"));
  std::this_thread::sleep_for(1500ms);
  server_.CreatePod(PodJson("b", "n1"));
  EXPECT_TRUE(seen.Wait({"a", "b"}));
  EXPECT_EQ(r.relists(), 1) << "the watch fell out of the window although bookmarks came";
  EXPECT_GE(server_.Requests("GET", "/api/v1/pods"), 3) << "the watch did not end and start again";
  r.Stop();
}

TEST_F(ApiClientTest, ReflectorListsAgainAfterServerErrors) {
  server_.CreatePod(PodJson("a", "n1"));
  server_.InjectFault({"GET", "/api/v1/pods", 2, 503});
  PodNames seen;
  Reflector r(client_.get(), "/api/v1/pods", Opts("spec.nodeName=n1"), seen.Handlers());
  r.Start();
  ASSERT_TRUE(r.WaitSynced(10s)) << "two 503s, then the list";
  EXPECT_TRUE(seen.Wait({"a"}));
  EXPECT_EQ(server_.faults_served(), 2);
  r.Stop();
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
