// tessera-extender attacked as a hostile network peer would, against the stand-in API server:
//   - who may drive the verbs: only a client holding kube-scheduler's certificate (the program with
//     its TLS flags; plain HTTP, no certificate, another CA's certificate are refused; the
//     read-only address serves no verb; the program will not serve the verbs in the clear unless
//     told to, and then says so);
//   - what the verbs act on: bind and filter of pods of another scheduler or namespace, of pods
//     that are bound, ending or made up, change nothing and answer in the field kube-scheduler
//     reads, and made-up pods reserve no GPU;
//   - slow clients holding more connections than the door serves, and a 62 MB body, do not delay
//     kube-scheduler's calls, nor keep the memory they cost.
// A legitimate scheduler (the stand-in, testing/standins/scheduler_driver.h) is served throughout;
// its latency under each attack is printed next to the same calls with no attack, in the same run.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "k8s/annotations.h"
#include "k8s/api_client.h"
#include "k8s/extender/extender_app.h"
#include "process/child_process.h"
#include "testing/standins/scheduler_driver.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/http_attack.h"
#include "testing/support/test_objects.h"

namespace tessera::extender {
namespace {

using namespace std::chrono_literals;
namespace attack = tessera::testing;
using testing::Node;
using testing::Pod;
using testing::SchedulerDriver;
using testing::TestGpu;
using Clock = std::chrono::steady_clock;

constexpr auto kWait = std::chrono::seconds(10);

std::vector<TestGpu> Gpus(int n) { return std::vector<TestGpu>(static_cast<size_t>(n)); }

k8s::Json Created(k8s::Json object) {
  object["metadata"].erase("uid");
  object["metadata"].erase("resourceVersion");
  return object;
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/tessera-extender-security-" + std::to_string(getpid()) + "-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string BindBody(const k8s::Json& pod, const std::string& node) {
  return k8s::Json{{"PodName", pod["metadata"]["name"]},
                   {"PodNamespace", pod["metadata"]["namespace"]},
                   {"PodUID", pod["metadata"]["uid"]},
                   {"Node", node}}
      .dump();
}

class ExtenderSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(api_.Start(0).ok()); }
  void TearDown() override {
    if (app_) app_->Stop();
    api_.Stop();
  }

  // The extender in process (plain HTTP unless `config` says otherwise), ready.
  void StartExtender(AppConfig c = {}) {
    c.api.server = api_.url();
    c.listen_host = "127.0.0.1";
    c.listen_port = 0;
    c.state.workload = std::make_shared<placement::TargetWorkload>();
    c.quiet = true;
    app_ = std::make_unique<ExtenderApp>(c);
    ASSERT_TRUE(app_->Start().ok());
    ASSERT_TRUE(app_->WaitReady(kWait));
  }

  k8s::Json CreatePod(const k8s::Json& pod) { return api_.CreatePod(Created(pod)); }

  // The pod as the API server has it now.
  k8s::Json Now(const k8s::Json& pod) {
    return api_
        .GetPod(pod["metadata"]["namespace"].get<std::string>(),
                pod["metadata"]["name"].get<std::string>())
        .value_or(k8s::Json());
  }

  k8s::TestApiServer api_;
  std::unique_ptr<ExtenderApp> app_;
};

// Finding: POST /bind for pods of other namespaces and of default-scheduler, GPU pods or not,
// returned 200 and the pod was bound with the extender's credentials.
TEST_F(ExtenderSecurityTest, BindActsOnlyOnPendingPodsOfItsScheduler) {
  api_.CreateNode(Created(Node("n1", Gpus(2))));
  ASSERT_NO_FATAL_FAILURE(StartExtender());
  k8s::ClientConfig config;
  config.server = api_.url();
  k8s::ApiClient client(config);

  k8s::Json other_ns = Pod("kube-dns", {{"tessera.io/gpu-count", "1"}});
  other_ns["metadata"]["namespace"] = "kube-system";
  other_ns["spec"]["schedulerName"] = "default-scheduler";
  other_ns = CreatePod(other_ns);
  k8s::Json plain = Pod("web", std::vector<testing::TestContainer>{testing::TestContainer{}});
  plain["spec"]["schedulerName"] = "default-scheduler";
  plain = CreatePod(plain);
  const k8s::Json bound = CreatePod(Pod("bound", {{"tessera.io/gpu-core", "10"}}));
  ASSERT_TRUE(client.BindPod("default", "bound", bound["metadata"]["uid"], "n1").ok());
  const k8s::Json ending = CreatePod(Pod("ending", {{"tessera.io/gpu-core", "10"}}));
  ASSERT_TRUE(api_.MarkPodDeleting("default", "ending"));
  k8s::Json wrong_uid = CreatePod(Pod("wrong-uid", {{"tessera.io/gpu-core", "10"}}));
  wrong_uid["metadata"]["uid"] = "0b1e5e00-0000-4000-8000-000000000000";
  k8s::Json made_up = Pod("made-up", {{"tessera.io/gpu-core", "10"}});
  made_up["metadata"]["uid"] = "0b1e5e00-0000-4000-8000-000000000001";
  // Let the watch show all of it (the answers are the same without it: the API server is asked).
  std::this_thread::sleep_for(200ms);

  SchedulerDriver attacker(app_->port());
  const struct {
    const char* what;
    k8s::Json pod;
    const char* reason;
  } cases[] = {
      {"another namespace and scheduler", other_ns, "names scheduler \"default-scheduler\""},
      {"a pod of default-scheduler without GPUs", plain, "names scheduler \"default-scheduler\""},
      {"a bound pod", bound, "is bound to node n1 already"},
      {"a pod being deleted", ending, "is being deleted"},
      {"a real pod's name with another uid", wrong_uid,
       ", not 0b1e5e00-0000-4000-8000-000000000000"},
      {"a made-up pod", made_up, "default/made-up does not exist"},
  };
  for (const auto& c : cases) {
    std::string body;
    EXPECT_EQ(attacker.Post("/bind", BindBody(c.pod, "n1"), &body), 200) << c.what;
    const k8s::Json answer = k8s::Json::parse(body, nullptr, false);
    ASSERT_TRUE(answer.is_object()) << c.what << ": " << body;
    EXPECT_NE(answer.value("Error", "").find(c.reason), std::string::npos)
        << c.what << ": " << body;
    std::string filtered;
    EXPECT_EQ(attacker.Post("/filter", testing::ExtenderArgsBody(c.pod, {"n1"}), &filtered), 200);
    EXPECT_NE(k8s::Json::parse(filtered).value("Error", "").find(c.reason), std::string::npos)
        << c.what << ": " << filtered;
  }
  // Nothing changed on the API server: still unbound (or bound where it was), no assignment.
  for (const k8s::Json& pod : {other_ns, plain, ending, wrong_uid}) {
    const k8s::Json now = Now(pod);
    EXPECT_EQ(now["spec"].value("nodeName", ""), "") << now.dump();
    EXPECT_FALSE(now["metadata"].contains("annotations") &&
                 now["metadata"]["annotations"].contains(k8s::kAssignmentAnnotation))
        << now.dump();
  }
  EXPECT_FALSE(api_.GetPod("default", "made-up").has_value());
  // The scheduler's own pod binds.
  auto r = SchedulerDriver(app_->port())
               .Schedule(CreatePod(Pod("mine", {{"tessera.io/gpu-count", "1"}})), {"n1"});
  EXPECT_TRUE(r.bound) << r.error;
  httplib::Client http("127.0.0.1", app_->port());
  const std::string metrics = http.Get("/metrics")->body;
  EXPECT_NE(metrics.find(
                "tessera_extender_pods_refused_total{verb=\"bind\",reason=\"other-scheduler\"} 2"),
            std::string::npos)
      << metrics;
}

// Finding: 30 /filter calls with invented pods and UIDs filled every GPU in 0.02 s; a real pod was
// then refused for the 30 s reservation TTL, renewably.
TEST_F(ExtenderSecurityTest, MadeUpPodsReserveNothing) {
  api_.CreateNode(Created(Node("n1", Gpus(2))));
  api_.CreateNode(Created(Node("n2", Gpus(2))));
  ASSERT_NO_FATAL_FAILURE(StartExtender());  // reservations last the default 30 s
  SchedulerDriver attacker(app_->port());
  for (int round = 0; round < 2; ++round) {  // renewing them changes nothing either
    for (int i = 0; i < 30; ++i) {
      k8s::Json fake = Pod("fake-" + std::to_string(i), {{"tessera.io/gpu-count", "1"}});
      fake["metadata"]["uid"] = "f00d" + std::to_string(round) + "-" + std::to_string(i);
      std::string body;
      ASSERT_EQ(attacker.Post("/filter", testing::ExtenderArgsBody(fake, {"n1", "n2"}), &body),
                200);
      const k8s::Json answer = k8s::Json::parse(body);
      EXPECT_TRUE(answer["NodeNames"].empty()) << body;
      EXPECT_NE(answer.value("Error", "").find("does not exist"), std::string::npos) << body;
      ASSERT_EQ(attacker.Post("/prioritize", testing::ExtenderArgsBody(fake, {"n1", "n2"}), &body),
                200);
    }
  }
  EXPECT_EQ(app_->state().Stats().holds_reserved, 0u);
  // Four real pods of a whole GPU each: every one is placed at once.
  SchedulerDriver scheduler(app_->port());
  for (int i = 0; i < 4; ++i) {
    auto r = scheduler.Schedule(
        CreatePod(Pod("real-" + std::to_string(i), {{"tessera.io/gpu-count", "1"}})), {"n1", "n2"});
    EXPECT_TRUE(r.bound) << "real-" << i << ": " << r.error;
  }
}

// kube-scheduler's calls for real pods (filter, then bind; one pod after another, each created
// just before, as a stream of pods arrives), for `duration` and at least 10 pods (a sanitizer
// build on a loaded machine is slow). Every other pod goes over a connection of its own from
// `fresh`, as kube-scheduler opens one when the extender has closed an idle one, after a restart,
// or for binds running beside a filter; the rest over `kept`, kept alive throughout.
using MakeDriver = std::function<std::unique_ptr<SchedulerDriver>()>;
attack::Latencies ScheduleStream(k8s::TestApiServer& api, SchedulerDriver& kept,
                                 const MakeDriver& fresh, const std::string& prefix,
                                 std::chrono::milliseconds duration) {
  attack::Latencies out;
  const std::vector<std::string> nodes = {"s1", "s2", "s3", "s4"};
  const auto end = Clock::now() + duration;
  for (int i = 0; Clock::now() < end || i < 10; ++i) {
    testing::TestContainer small;  // so that the nodes never fill up
    small.limits = {{"tessera.io/gpu-core", "1"}};
    small.cpu = "10m";
    small.memory = "16Mi";
    const k8s::Json pod =
        api.CreatePod(Created(Pod(prefix + std::to_string(i), std::vector{small})));
    const auto start = Clock::now();
    std::unique_ptr<SchedulerDriver> own = i % 2 == 1 ? fresh() : nullptr;
    auto r = (own ? *own : kept).Schedule(pod, nodes);
    out.Add(std::chrono::duration<double, std::milli>(Clock::now() - start).count(), r.bound,
            r.error);
    std::this_thread::sleep_for(20ms);
  }
  return out;
}

// Finding: 12 slowloris connections kept the extender from answering within kube-scheduler's
// 10 s for 33 s. Here 300 slow connections (silent and slowloris, from two other addresses,
// reopened when closed) against a door serving 128 at once.
void SlowClientsDoNotDelayTheScheduler(k8s::TestApiServer& api, ExtenderApp& app,
                                       const MakeDriver& make, const char* mode) {
  std::unique_ptr<SchedulerDriver> kept = make();
  const attack::Latencies quiet = ScheduleStream(api, *kept, make, "quiet-", 1500ms);
  attack::Latencies attacked;
  uint64_t closed = 0;
  {
    using attack::SlowClients;
    SlowClients silent(static_cast<uint16_t>(app.port()), "127.0.0.2", 200,
                       SlowClients::Kind::kSilent);
    SlowClients loris(static_cast<uint16_t>(app.port()), "127.0.0.3", 100,
                      SlowClients::Kind::kPartialHead, 100ms);
    ASSERT_TRUE(silent.WaitOpen(10s));
    ASSERT_TRUE(loris.WaitOpen(10s));
    attacked = ScheduleStream(api, *kept, make, "attacked-", 3000ms);
    closed = silent.closed_by_server() + loris.closed_by_server();
  }
  std::printf("extender (%s), filter+bind, quiet: %s\n", mode, quiet.Format().c_str());
  std::printf("extender (%s), filter+bind, 300 slow connections (%llu closed to make room): %s\n",
              mode, static_cast<unsigned long long>(closed), attacked.Format().c_str());
  EXPECT_EQ(quiet.failed, 0) << quiet.first_failure;
  EXPECT_EQ(attacked.failed, 0) << attacked.Format();
  // kube-scheduler gives up after httpTimeout (10 s in deploy/kubernetes): loosely under it (the
  // machine may be loaded, the build a sanitizer's).
  EXPECT_LT(attacked.Max(), 5000.0) << attacked.Format();
}

TEST_F(ExtenderSecurityTest, SlowClientsDoNotDelayTheScheduler) {
  for (const char* n : {"s1", "s2", "s3", "s4"}) api_.CreateNode(Created(Node(n, Gpus(8))));
  ASSERT_NO_FATAL_FAILURE(StartExtender());
  const int port = app_->port();
  SlowClientsDoNotDelayTheScheduler(
      api_, *app_, [port] { return std::make_unique<SchedulerDriver>(port); }, "http");
}

TEST_F(ExtenderSecurityTest, SlowClientsDoNotDelayTheSchedulerOverTls) {
  auto files = attack::MakeTlsFiles(TempDir("slow"));
  ASSERT_TRUE(files.ok()) << files.error();
  for (const char* n : {"s1", "s2", "s3", "s4"}) api_.CreateNode(Created(Node(n, Gpus(8))));
  AppConfig c;
  c.tls = http::HttpServer::TlsOptions{files->cert, files->key, files->ca};
  ASSERT_NO_FATAL_FAILURE(StartExtender(c));
  const int port = app_->port();
  const testing::SchedulerTls tls{files->ca, files->client_cert, files->client_key};
  SlowClientsDoNotDelayTheScheduler(
      api_, *app_, [port, tls] { return std::make_unique<SchedulerDriver>(port, tls); }, "https");
}

// A filter body kube-scheduler would never send: Nodes as objects, `items` of them (about 31
// bytes each), written to `fd` in pieces so that the test itself never holds it whole.
void SendNodesBody(int fd, size_t items) {
  const std::string head =
      R"({"Pod":{"metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{}},"Nodes":{"items":[)";
  const std::string tail = "]}}";
  std::string item = R"({"metadata":{"name":"n0000000"}})";
  const size_t length = head.size() + items * (item.size() + 1) - 1 + tail.size();
  std::string chunk =
      "POST /filter HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(length) + "\r\n\r\n" + head;
  for (size_t i = 0; i < items; ++i) {
    if (i > 0) chunk += ',';
    chunk += item;
    if (chunk.size() >= (1 << 20) || i + 1 == items) {
      if (i + 1 == items) chunk += tail;
      if (send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(chunk.size())) {
        return;  // refused: the server closed
      }
      chunk.clear();
    }
  }
}

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The status line of the answer on `fd` (within `timeout`), or "".
std::string StatusLine(int fd, std::chrono::milliseconds timeout) {
  std::string got;
  const auto end = Clock::now() + timeout;
  while (got.find("\r\n") == std::string::npos && Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got.substr(0, got.find("\r\n"));
}

// Finding: one 62 MB body raised the extender's memory by ~4 GB, held a worker 20 s, and the
// memory was not returned.
TEST_F(ExtenderSecurityTest, ALargeBodyIsRefusedAndLargeRequestsGiveTheirMemoryBack) {
  for (const char* n : {"s1", "s2", "s3", "s4"}) api_.CreateNode(Created(Node(n, Gpus(8))));
  ASSERT_NO_FATAL_FAILURE(StartExtender());
  SchedulerDriver driver(app_->port());
  const uint64_t before = attack::ResidentBytes();
  // 62 MB: refused from its Content-Length, before the body is read.
  {
    const int fd = ConnectTo(app_->port());
    ASSERT_GE(fd, 0);
    const auto start = Clock::now();
    std::thread sender([fd] { SendNodesBody(fd, 2000000); });
    const std::string status = StatusLine(fd, 30s);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    shutdown(fd, SHUT_RDWR);
    sender.join();
    close(fd);
    EXPECT_EQ(status, "HTTP/1.1 413 Payload Too Large") << "after " << ms << " ms";
    EXPECT_LT(ms, 2000.0);
  }
  const uint64_t after_refused = attack::ResidentBytes();
  if (attack::UnderAddressSanitizer()) {
    GTEST_SKIP() << "the 62 MB body was refused unread; ASan's allocator holds freed memory in "
                    "quarantine, so what the rest hands back is measured in plain builds";
  }
  // Bodies under the limit (3.8 MB, 120000 node objects to parse): answered, and what parsing
  // them took is handed back.
  uint64_t peak = 0;
  for (int i = 0; i < 3; ++i) {
    const int fd = ConnectTo(app_->port());
    ASSERT_GE(fd, 0);
    SendNodesBody(fd, 120000);
    EXPECT_EQ(StatusLine(fd, 30s), "HTTP/1.1 200 OK");
    close(fd);
    peak = std::max(peak, attack::ResidentBytes());
  }
  std::this_thread::sleep_for(200ms);
  const uint64_t after = attack::ResidentBytes();
  std::printf(
      "extender resident: %llu MiB before, %llu MiB after a refused 62 MB body, %llu MiB "
      "peak and %llu MiB after three 3.8 MB bodies\n",
      static_cast<unsigned long long>(before >> 20),
      static_cast<unsigned long long>(after_refused >> 20),
      static_cast<unsigned long long>(peak >> 20), static_cast<unsigned long long>(after >> 20));
  EXPECT_LT(after_refused, before + (16 << 20));
  EXPECT_LT(after, before + (48 << 20));
  // And the scheduler is served.
  auto r = driver.Schedule(CreatePod(Pod("after", {{"tessera.io/gpu-core", "10"}})), {"s1"});
  EXPECT_TRUE(r.bound) << r.error;
}

// The program as deployed: the verbs over HTTPS to kube-scheduler's client certificate only, the
// read-only address beside them; without its TLS flags it does not start unless told to serve the
// verbs in the clear, and then it warns.
TEST(ExtenderProgramSecurityTest, OnlyKubeSchedulersCertificateDrivesTheVerbs) {
  const std::string build = process::BuildDir();
  const std::string dir = TempDir("program");
  auto files = attack::MakeTlsFiles(dir + "/ours");
  ASSERT_TRUE(files.ok()) << files.error();
  auto other = attack::MakeTlsFiles(dir + "/other");
  ASSERT_TRUE(other.ok()) << other.error();
  process::ChildProcess api({build + "/tests/test_apiserver", "--port", "0"}, {});
  auto url = api.WaitForKey("url", kWait);
  ASSERT_TRUE(url.has_value());
  k8s::ClientConfig config;
  config.server = *url;
  k8s::ApiClient client(config);
  ASSERT_TRUE(client.Create("/api/v1/nodes", Created(Node("n1", Gpus(2)))).ok());

  // No TLS flags, no --insecure-http: refused at start, saying what is missing.
  auto [status, text] =
      process::RunShell(build + "/bin/tessera-extender --apiserver " + *url +
                        " --listen 127.0.0.1:0 --tls-cert-file " + files->cert + " 2>&1");
  EXPECT_EQ(status, 2) << text;
  EXPECT_NE(text.find("missing --tls-private-key-file, --client-ca-file"), std::string::npos)
      << text;

  process::ChildProcess extender(
      {build + "/bin/tessera-extender", "--apiserver", *url, "--listen", "127.0.0.1:0",
       "--metrics-listen", "127.0.0.1:0", "--tls-cert-file", files->cert, "--tls-private-key-file",
       files->key, "--client-ca-file", files->ca},
      {});
  auto port_text = extender.WaitForKey("port", kWait);
  ASSERT_TRUE(port_text.has_value());
  auto metrics_text = extender.WaitForKey("metrics_port", kWait);
  ASSERT_TRUE(metrics_text.has_value());
  ASSERT_TRUE(extender.WaitForKey("ready", kWait).has_value());
  EXPECT_EQ(extender.values().at("tls"), "on");
  const int port = std::stoi(*port_text);
  const int metrics_port = std::stoi(*metrics_text);

  auto created = client.Create("/api/v1/namespaces/default/pods",
                               Created(Pod("victim", {{"tessera.io/gpu-count", "1"}})));
  ASSERT_TRUE(created.ok());
  const k8s::Json victim = *created;
  const std::string bind = BindBody(victim, "n1");
  // Plain HTTP on the verbs' port: no HTTP answer at all.
  {
    httplib::Client plain("127.0.0.1", port);
    plain.set_read_timeout(5, 0);
    EXPECT_FALSE(plain.Post("/bind", bind, "application/json"));
  }
  // HTTPS without a client certificate, with another CA's, with the extender's own server
  // certificate: the handshake fails.
  for (const auto& [what, cert, key] :
       {std::tuple<const char*, std::string, std::string>{"no certificate", "", ""},
        {"another CA's", other->client_cert, other->client_key},
        {"the server's own", files->cert, files->key}}) {
    httplib::SSLClient https("127.0.0.1", port, cert, key);
    https.set_ca_cert_path(files->ca.c_str());
    https.enable_server_certificate_verification(true);
    https.set_read_timeout(5, 0);
    auto answer = https.Post("/bind", bind, "application/json");
    EXPECT_FALSE(answer) << what << ": HTTP " << answer->status << " " << answer->body;
  }
  // The read-only address: probes and metrics, no verb.
  httplib::Client read_only("127.0.0.1", metrics_port);
  auto health = read_only.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = read_only.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("tessera_extender_ready 1"), std::string::npos);
  auto verb = read_only.Post("/bind", bind, "application/json");
  ASSERT_TRUE(verb);
  EXPECT_EQ(verb->status, 404);
  auto now = client.GetPod("default", "victim");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ((*now)["spec"].value("nodeName", ""), "") << "bound by someone not kube-scheduler";
  // kube-scheduler, with its certificate and checking the extender's against the CA: served.
  SchedulerDriver scheduler(
      port, testing::SchedulerTls{files->ca, files->client_cert, files->client_key});
  auto r = scheduler.Schedule(victim, {"n1"});
  EXPECT_TRUE(r.bound) << r.error;
  extender.Kill(SIGTERM);
  EXPECT_EQ(extender.Wait(kWait), 0);

  // --insecure-http: it serves, and says at start what that means.
  auto [insecure_status, insecure_text] =
      process::RunShell("timeout -s TERM 2 " + build + "/bin/tessera-extender --apiserver " + *url +
                        " --listen 127.0.0.1:0 --insecure-http 2>&1");
  EXPECT_NE(insecure_text.find("WARNING: --insecure-http"), std::string::npos) << insecure_text;
  EXPECT_NE(insecure_text.find("tls=off"), std::string::npos) << insecure_text;
  api.CloseStdin();
  api.Wait(kWait);
}

}  // namespace
}  // namespace tessera::extender
