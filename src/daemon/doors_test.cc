// The control tree's three doors on one real tesserad (simgpu, two GPUs): `tessera ctl` (the CTL
// socket verb), HTTP /v1/ctl/ over TCP on 127.0.0.1 (port 0, read from the startup line), and the
// FUSE mount (in a unique temporary directory; skipped with the reason where FUSE cannot mount).
// A container `web` is registered with CONTAINER and a real tenant (shim_tenant through the shim)
// holds memory in it, so every kind of file has a real value. Also: refused writes leave the node
// unchanged, a write through one door shows through the others, /metrics and /v1/state, --config,
// and /metrics scraped on time while slow clients hold more connections than the door serves.
//
// Every daemon gets its own socket, sim state and ledger; every wait is bounded.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ctl/fuse_mount.h"
#include "ipc/futex.h"
#include "ipc/unix_socket.h"
#include "ledger/ledger_view.h"
#include "process/child_process.h"
#include "testing/support/http_attack.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

constexpr uint64_t kHeld = 512ull << 20;    // what the tenant allocates in `web`
constexpr uint64_t kWebLimit = 2ull << 30;  // web's memsize on every GPU

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr together
};

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command line and collects what it printed and its exit status.
CommandResult Shell(const std::string& command) {
  CommandResult r;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.output.append(buf, n);
  const int status = pclose(f);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

struct HttpResult {
  int status = 0;
  std::string body;
};

// One request to 127.0.0.1:port with cpp-httplib's client (a fresh connection each time).
HttpResult Http(uint16_t port, const std::string& method, const std::string& target,
                const std::string& body = "") {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  client.set_url_encode(false);  // targets here are written encoded already
  httplib::Request request;
  request.method = method;
  request.path = target;
  request.body = body;
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(request, response, error)) return {};
  return {response.status, response.body};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The value of the sample `series` (name and labels exactly as exported) in an exposition, or
// nullopt when it has no such line.
std::optional<double> SampleValue(const std::string& exposition, const std::string& series) {
  const std::string text = "\n" + exposition;
  const std::string start = "\n" + series + " ";
  const size_t pos = text.find(start);
  if (pos == std::string::npos) return std::nullopt;
  return std::strtod(text.c_str() + pos + start.size(), nullptr);
}

// Why FUSE cannot be mounted here, or nullopt when it can be tried.
std::optional<std::string> FuseUnavailable() {
  if (!tessera::ctl::FuseMount::Available()) return "this build has no libfuse3";
  if (geteuid() != 0) return "mounting FUSE needs root (tesserad mounts with mount(2))";
  if (access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse is not available";
  return std::nullopt;
}

class DoorsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    tenant_.reset();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      EXPECT_EQ(daemon_->Wait(10s), 0) << "tesserad did not exit cleanly";
    }
    if (!mount_dir_.empty()) rmdir(mount_dir_.c_str());
    if (!state_.empty()) shm_unlink(("/tessera-sim-" + state_).c_str());
  }

  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimA:8GiB:80,SimB:4GiB:40"};
  }

  // Starts tesserad with `args` and waits for its startup line; reads the HTTP port from it.
  void StartDaemon(std::vector<std::string> args) {
    state_ = UniqueName("doors");
    socket_ = "/tmp/" + state_ + ".sock";
    std::vector<std::string> argv = {BuildDir() + "/bin/tesserad",
                                     "--sim",
                                     "--socket",
                                     socket_,
                                     "--ephemeral",
                                     "--http",
                                     "127.0.0.1:0"};
    argv.insert(argv.end(), args.begin(), args.end());
    daemon_ = std::make_unique<ChildProcess>(argv, SimEnv());
    ASSERT_TRUE(daemon_->started());
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      daemon_->WaitForKey("(startup line)", 50ms);
      for (const auto& [key, value] : daemon_->values()) {
        if (key.rfind("tesserad: listening on ", 0) == 0) {
          startup_line_ = key + "=" + value;
          port_ = static_cast<uint16_t>(std::stoi(value.substr(value.rfind(':') + 1)));
        }
      }
    }
    ASSERT_NE(port_, 0) << "no startup line with http=ADDR from tesserad";
  }

  // Registers `web` (2 GiB on each GPU, weight 2) and starts a tenant holding kHeld in it.
  void AddWebWithTenant() {
    auto reply = tessera::ipc::Call(
        socket_, "CONTAINER id=web mem=" + std::to_string(kWebLimit) + " weight=2", nullptr,
        3000ms);
    ASSERT_TRUE(reply.ok()) << reply.error();
    ASSERT_EQ(reply->rfind("OK", 0), 0u) << *reply;
    std::vector<std::string> env = TenantEnv(SimEnv(), socket_, "web");
    tenant_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "hold", std::to_string(kHeld)},
        env);
    ASSERT_TRUE(tenant_->started());
    ASSERT_TRUE(tenant_->WaitForKey("ready", 20s).has_value()) << "the tenant did not allocate";
    // The arbiter learns about the tenant's container on its next pass (within ~50 ms).
    for (int i = 0; i < 100 && Ctl("get 0/free_weight").output != "14\n"; ++i) {
      std::this_thread::sleep_for(20ms);
    }
  }

  CommandResult Ctl(const std::string& args) {
    return Shell("TESSERA_SOCKET=" + Quote(socket_) + " " + Quote(BuildDir() + "/bin/tessera") +
                 " ctl " + args);
  }

  // Every path of the tree with its text ("" for folders), read through HTTP.
  std::map<std::string, std::string> HttpWalk(const std::string& folder = "") {
    std::map<std::string, std::string> out;
    HttpResult listing = Http(port_, "GET", "/v1/ctl/" + folder);
    EXPECT_EQ(listing.status, 200) << folder << ": " << listing.body;
    const auto json = nlohmann::json::parse(listing.body, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(json.is_discarded()) << folder << ": " << listing.body;
    if (json.is_discarded()) return out;
    for (const auto& entry : json.value("entries", nlohmann::json::array())) {
      const std::string path = folder.empty() ? entry.at("name").get<std::string>()
                                              : folder + "/" + entry.at("name").get<std::string>();
      if (entry.at("dir").get<bool>()) {
        out[path + "/"] = "";
        for (auto& [p, text] : HttpWalk(path)) out[p] = text;
      } else {
        HttpResult file = Http(port_, "GET", "/v1/ctl/" + path);
        EXPECT_EQ(file.status, 200) << path;
        out[path] = file.body;
      }
    }
    return out;
  }

  // The same through `tessera ctl ls` and `tessera ctl get`.
  std::map<std::string, std::string> CtlWalk(const std::string& folder = "") {
    std::map<std::string, std::string> out;
    CommandResult listing = Ctl("ls " + (folder.empty() ? std::string("/") : Quote(folder)));
    EXPECT_EQ(listing.status, 0) << listing.output;
    std::istringstream lines(listing.output);
    std::string kind, name;
    while (lines >> kind >> name) {
      if (kind == "dir") {
        name.pop_back();  // the trailing '/'
        const std::string path = folder.empty() ? name : folder + "/" + name;
        out[path + "/"] = "";
        for (auto& [p, text] : CtlWalk(path)) out[p] = text;
      } else {
        const std::string path = folder.empty() ? name : folder + "/" + name;
        CommandResult file = Ctl("get " + Quote(path));
        EXPECT_EQ(file.status, 0) << path << ": " << file.output;
        out[path] = file.output;
      }
    }
    return out;
  }

  // The same through the FUSE mount with opendir/read.
  std::map<std::string, std::string> FuseWalk(const std::string& folder = "") {
    std::map<std::string, std::string> out;
    DIR* dir = opendir((mount_dir_ + "/" + folder).c_str());
    EXPECT_NE(dir, nullptr) << folder;
    if (dir == nullptr) return out;
    std::vector<std::pair<std::string, bool>> names;
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st {};
      stat((mount_dir_ + "/" + (folder.empty() ? name : folder + "/" + name)).c_str(), &st);
      names.push_back({name, S_ISDIR(st.st_mode)});
    }
    closedir(dir);
    for (const auto& [name, is_dir] : names) {
      const std::string path = folder.empty() ? name : folder + "/" + name;
      if (is_dir) {
        out[path + "/"] = "";
        for (auto& [p, text] : FuseWalk(path)) out[p] = text;
      } else {
        out[path] = ReadFile(mount_dir_ + "/" + path);
      }
    }
    return out;
  }

  std::string state_, socket_, mount_dir_, startup_line_;
  uint16_t port_ = 0;
  std::unique_ptr<ChildProcess> daemon_, tenant_;
};

// The paths every walk must find, with the values this setup gives them.
void ExpectExpectedTree(const std::map<std::string, std::string>& tree, pid_t tenant) {
  EXPECT_EQ(tree.at("version"), "tessera " TESSERA_VERSION "\n");
  EXPECT_EQ(tree.at("default_memsize"), "unlimited\n");
  EXPECT_EQ(tree.at("0/policy"), "0\n");
  EXPECT_EQ(tree.at("0/max_inst"), "16\n");
  EXPECT_EQ(tree.at("0/free_weight"), "14\n");  // web's weight 2, now scheduled
  EXPECT_EQ(tree.at("1/prio_ratio"), "50\n");
  EXPECT_EQ(tree.at("0/web/id"), "web\n");
  EXPECT_EQ(tree.at("0/web/weight"), "2\n");
  EXPECT_EQ(tree.at("1/web/weight"), "2\n");
  EXPECT_EQ(tree.at("0/web/highprio"), "0\n");
  EXPECT_EQ(tree.at("0/web/memsize"), std::to_string(kWebLimit) + "\n");
  EXPECT_EQ(tree.at("0/web/meminfo"), "Free: " + std::to_string(kWebLimit - kHeld) +
                                          "\nPID: " + std::to_string(tenant) +
                                          " Mem: " + std::to_string(kHeld) + "\n");
  EXPECT_EQ(tree.at("1/web/meminfo"), "Free: " + std::to_string(kWebLimit) +
                                          "\nPID: " + std::to_string(tenant) + " Mem: 0\n");
}

TEST_F(DoorsTest, CtlAndHttpAgreeOnEveryPath) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-allow-write"}));
  EXPECT_NE(startup_line_.find("http=127.0.0.1:"), std::string::npos) << startup_line_;
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  const auto http = HttpWalk();
  const auto ctl = CtlWalk();
  EXPECT_EQ(http, ctl);
  EXPECT_EQ(http.size(), 24u);  // 2 root files + per GPU: its folder, 4 files, web/ and 5 files
  ExpectExpectedTree(http, tenant_->pid());
  // A folder read through HTTP is its JSON listing; a missing path is 404 with the reason.
  HttpResult root = Http(port_, "GET", "/v1/ctl/0/web");
  EXPECT_EQ(root.status, 200);
  const auto listing = nlohmann::json::parse(root.body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(listing.is_discarded()) << root.body;
  EXPECT_NE(std::find(listing["entries"].begin(), listing["entries"].end(),
                      nlohmann::json{{"name", "memsize"}, {"dir", false}, {"writable", true}}),
            listing["entries"].end())
      << root.body;
  EXPECT_EQ(Http(port_, "GET", "/v1/ctl/0/nobody/weight").status, 404);
  CommandResult missing = Ctl("get 0/nobody/weight");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("nobody"), std::string::npos) << missing.output;
}

TEST_F(DoorsTest, BadWritesAreRefusedWithAReasonAndChangeNothing) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-allow-write"}));
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  const auto before = HttpWalk();
  struct Bad {
    std::string path, value, reason;  // `reason`: a fragment the refusal must contain
  };
  const std::vector<Bad> bad = {
      {"0/policy", "9", "0/policy"},
      {"0/policy", "fair-ish", "0/policy"},
      {"0/max_inst", "0", "max_inst"},
      {"0/max_inst", "1", "weight"},  // below web's weight 2
      {"1/max_inst", "257", "max_inst"},
      {"0/prio_ratio", "10", "prio_ratio"},
      {"0/web/weight", "17", "weight"},
      {"0/web/weight", "0", "weight"},
      {"0/web/highprio", "2", "highprio"},
      {"0/web/memsize", "0", "memsize"},
      {"0/web/memsize", "unlimited", "memsize"},
      {"0/web/memsize", "256MiB", "memsize"},  // below what the tenant holds, without force
      {"0/web/memsize", "-5", "memsize"},
      {"0/free_weight", "3", "free_weight"},
      {"0/web/meminfo", "1", "meminfo"},
      {"version", "2", "version"},
      {"0/nobody/weight", "1", "nobody"},
      {"7/policy", "1", "7"},
      {"default_memsize", "0", "default_memsize"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.path + " <- " + b.value);
    CommandResult ctl = Ctl("set " + Quote(b.path) + " " + Quote(b.value));
    EXPECT_EQ(ctl.status, 1) << ctl.output;
    EXPECT_EQ(ctl.output.rfind("tessera ctl: set " + b.path + ": ", 0), 0u) << ctl.output;
    EXPECT_NE(ctl.output.find(b.reason), std::string::npos) << ctl.output;
    HttpResult http = Http(port_, "PUT", "/v1/ctl/" + b.path, b.value);
    EXPECT_EQ(http.status, 400) << http.body;
    EXPECT_NE(http.body.find(b.reason), std::string::npos) << http.body;
    EXPECT_GT(http.body.size(), b.path.size() + 5) << http.body;  // more than the path
  }
  EXPECT_EQ(HttpWalk(), before);
  // A value the socket protocol cannot carry: the CLI says which characters it can.
  CommandResult spaced = Ctl("set 0/policy '1 2'");
  EXPECT_EQ(spaced.status, 2);
  EXPECT_NE(spaced.output.find("A-Z a-z 0-9 _ . , : / + -"), std::string::npos) << spaced.output;
  // Reserved container ids are refused at registration.
  auto reserved = tessera::ipc::Call(socket_, "CONTAINER id=max_inst", nullptr, 3000ms);
  ASSERT_TRUE(reserved.ok());
  EXPECT_EQ(reserved->rfind("ERR ", 0), 0u) << *reserved;
  EXPECT_NE(reserved->find("reserved"), std::string::npos) << *reserved;
  // Below usage with force is allowed, through both doors.
  EXPECT_EQ(Ctl("set 0/web/memsize 256MiB --force").status, 0);
  EXPECT_EQ(Http(port_, "GET", "/v1/ctl/0/web/memsize").body, "268435456\n");
  EXPECT_EQ(Http(port_, "PUT", "/v1/ctl/0/web/memsize?force=1", "128MiB").status, 204);
  EXPECT_EQ(Ctl("get 0/web/memsize").output, "134217728\n");
}

TEST_F(DoorsTest, AWriteThroughOneDoorShowsThroughTheOthers) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-allow-write"}));
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  EXPECT_EQ(Ctl("set 0/policy weighted-preemptive").status, 0);
  EXPECT_EQ(Http(port_, "GET", "/v1/ctl/0/policy").body, "2\n");
  EXPECT_EQ(Http(port_, "PUT", "/v1/ctl/1/max_inst", "8\n").status, 204);
  EXPECT_EQ(Ctl("get 1/max_inst").output, "8\n");
  EXPECT_EQ(Ctl("get 1/free_weight").output, "6\n");
  // A weight is the container's: written under GPU 1, it shows on GPU 0 as well.
  EXPECT_EQ(Http(port_, "PUT", "/v1/ctl/1/web/weight", "5").status, 204);
  EXPECT_EQ(Ctl("get 0/web/weight").output, "5\n");
  // ...and must fit every GPU: GPU 1 has max_inst 8 now.
  CommandResult too_heavy = Ctl("set 0/web/weight 9");
  EXPECT_EQ(too_heavy.status, 1);
  EXPECT_NE(too_heavy.output.find("max_inst"), std::string::npos) << too_heavy.output;
  EXPECT_EQ(Ctl("set 0/web/highprio 1").status, 0);
  EXPECT_EQ(Http(port_, "GET", "/v1/ctl/1/web/highprio").body, "1\n");
  EXPECT_EQ(Ctl("set default_memsize 1GiB").status, 0);
  EXPECT_EQ(Http(port_, "GET", "/v1/ctl/default_memsize").body, "1073741824\n");
  // default_memsize applies to a container whose first process declares no limit.
  std::vector<std::string> env = TenantEnv(SimEnv(), socket_, "plain");
  ChildProcess plain({BuildDir() + "/tests/shim_tenant", "hold", std::to_string(2 << 20)}, env);
  ASSERT_TRUE(plain.WaitForKey("ready", 20s).has_value());
  EXPECT_EQ(Ctl("get 0/plain/memsize").output, "1073741824\n");
  // /v1/state is the STATUS JSON, with both containers.
  HttpResult state = Http(port_, "GET", "/v1/state");
  EXPECT_EQ(state.status, 200);
  const auto status = nlohmann::json::parse(state.body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(status.is_discarded()) << state.body;
  std::vector<std::string> ids;
  for (const auto& c : status["containers"]) ids.push_back(c.at("id").get<std::string>());
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre("web", "plain")) << state.body;
}

TEST_F(DoorsTest, MetricsShowTheContainer) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  HttpResult m = Http(port_, "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  const std::string expected[] = {
      "# TYPE tessera_up gauge\ntessera_up 1\n",
      "tessera_build_info{version=\"tessera " TESSERA_VERSION "\"} 1\n",
      "tessera_gpu_memory_total_bytes{gpu=\"0\",uuid=\"",
      "tessera_gpu_memory_used_bytes{gpu=\"0\"} " + std::to_string(kHeld) + "\n",
      "tessera_gpu_policy{gpu=\"1\"} 0\n",
      "tessera_gpu_free_weight{gpu=\"0\"} 14\n",
      "tessera_container_memory_used_bytes{container=\"web\",gpu=\"0\"} " + std::to_string(kHeld) +
          "\n",
      "tessera_container_memory_limit_bytes{container=\"web\",gpu=\"1\"} " +
          std::to_string(kWebLimit) + "\n",
      "tessera_container_compute_target_percent{container=\"web\",gpu=\"0\"} 6.25\n",
      "# TYPE tessera_container_compute_achieved_percent gauge\n",
      "tessera_container_weight{container=\"web\"} 2\n",
      "tessera_container_high_priority{container=\"web\"} 0\n",
      "tessera_container_processes{container=\"web\"} 1\n",
      "tessera_container_memory_unseen_bytes{container=\"web\",gpu=\"1\"} ",
      "tessera_container_blocked{container=\"web\"} 0\n",
      "# TYPE tessera_container_oom_refusals_total counter\n"
      "tessera_container_oom_refusals_total{container=\"web\"} 0\n",
      "# TYPE tessera_container_token_wait_seconds_total counter\n"
      "tessera_container_token_wait_seconds_total{container=\"web\"} ",
      "# TYPE tessera_container_token_grants_total counter\n",
      "tessera_container_token_grants_total{container=\"web\",gpu=\"1\"} ",
      "# TYPE tessera_processes gauge\ntessera_processes 1\n",
      "# TYPE tessera_arbiter_beat_age_seconds gauge\ntessera_arbiter_beat_age_seconds ",
  };
  for (const std::string& e : expected) {
    EXPECT_NE(m.body.find(e), std::string::npos) << "missing: " << e << "\nin:\n" << m.body;
  }
  // The arbiter beats at least every 50 ms while the daemon runs (1 s: a loaded machine).
  const auto beat_age = SampleValue(m.body, "tessera_arbiter_beat_age_seconds");
  ASSERT_TRUE(beat_age.has_value()) << m.body;
  EXPECT_GE(*beat_age, 0.0);
  EXPECT_LT(*beat_age, 1.0) << "the arbiter has not beaten for " << *beat_age << " s";
  // Writes over HTTP are off without --http-allow-write, and say how to turn them on.
  HttpResult put = Http(port_, "PUT", "/v1/ctl/0/policy", "1");
  EXPECT_EQ(put.status, 403);
  EXPECT_NE(put.body.find("--http-allow-write"), std::string::npos) << put.body;
  EXPECT_EQ(Ctl("get 0/policy").output, "0\n");
}

// 300 connections that never finish a request (silent ones and slowloris ones, from two other
// addresses, reopened when closed) against a door that serves 128 at once: a Prometheus-like
// scraper on a fresh connection every 50 ms gets every /metrics, within a bound far under its
// scrape timeout, measured against the same scraper with no attack in the same run.
TEST_F(DoorsTest, SlowClientsDoNotTurnScrapesAway) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  // Scrapes for `duration`, and at least 20 (a sanitizer build on a loaded machine is slow).
  auto scrape = [&](std::chrono::milliseconds duration) {
    tessera::testing::Latencies out;
    const auto end = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < end || out.ms.size() < 20) {
      const auto start = std::chrono::steady_clock::now();
      HttpResult m = Http(port_, "GET", "/metrics");
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      const bool ok = m.status == 200 && m.body.find("tessera_up 1") != std::string::npos;
      out.Add(ms, ok, "HTTP " + std::to_string(m.status) + ": " + m.body.substr(0, 120));
      std::this_thread::sleep_for(50ms);
    }
    return out;
  };
  const tessera::testing::Latencies quiet = scrape(1000ms);
  tessera::testing::Latencies attacked;
  uint64_t closed = 0;
  {
    using tessera::testing::SlowClients;
    SlowClients silent(port_, "127.0.0.2", 150, SlowClients::Kind::kSilent);
    SlowClients loris(port_, "127.0.0.3", 150, SlowClients::Kind::kPartialHead, 100ms);
    ASSERT_TRUE(silent.WaitOpen(10s));
    ASSERT_TRUE(loris.WaitOpen(10s));
    attacked = scrape(3000ms);
    closed = silent.closed_by_server() + loris.closed_by_server();
  }
  std::printf("tesserad /metrics, quiet: %s\n", quiet.Format().c_str());
  std::printf("tesserad /metrics, 300 slow connections (%llu closed to make room): %s\n",
              static_cast<unsigned long long>(closed), attacked.Format().c_str());
  EXPECT_EQ(quiet.failed, 0) << quiet.first_failure;
  EXPECT_EQ(attacked.failed, 0) << attacked.Format();
  EXPECT_LT(attacked.Max(), 5000.0) << attacked.Format();  // Prometheus waits 10 s by default
  EXPECT_EQ(Http(port_, "GET", "/metrics").status, 200);   // and after
}

// The monitoring counters move with real events: a tenant allocating past web's limit is refused
// once (one refused call, however many reservations it tried); a spin tenant under policy 1 waits
// for the token and is granted it.
TEST_F(DoorsTest, MetricsCountRefusalsWaitsAndGrants) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon({}));
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  ASSERT_EQ(Ctl("set 0/policy 1").status, 0);
  std::vector<std::string> env = TenantEnv(SimEnv(), socket_, "web");
  // One second of 2 ms kernels on GPU 0, starting now.
  ChildProcess spin({BuildDir() + "/tests/shim_tenant", "spin", "2000", "1",
                     std::to_string(tessera::ipc::MonotonicNs()), "stream"},
                    env);
  ChildProcess greedy({BuildDir() + "/tests/shim_tenant", "alloc-until-oom", "256"}, env);
  ASSERT_TRUE(greedy.WaitForKey("failure", 20s).has_value()) << "the greedy tenant never stopped";
  EXPECT_EQ(greedy.values().at("failure"), "2");  // CUDA_ERROR_OUT_OF_MEMORY
  ASSERT_EQ(spin.Wait(20s), 0) << "the spin tenant failed";
  // The daemon drops the spin tenant's process slot when its socket closes, a moment after the
  // exit that Wait saw: read the metrics once that has happened (or 5 s on).
  HttpResult m;
  for (auto deadline = std::chrono::steady_clock::now() + 5s;;) {
    m = Http(port_, "GET", "/metrics");
    ASSERT_EQ(m.status, 200);
    if (SampleValue(m.body, "tessera_processes") == 2.0 ||
        std::chrono::steady_clock::now() > deadline) {
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(SampleValue(m.body, "tessera_container_oom_refusals_total{container=\"web\"}"), 1.0)
      << m.body;
  EXPECT_EQ(SampleValue(m.body, "tessera_processes"), 2.0) << m.body;  // hold and greedy
  EXPECT_EQ(SampleValue(m.body, "tessera_container_processes{container=\"web\"}"), 2.0);
  const auto grants =
      SampleValue(m.body, "tessera_container_token_grants_total{container=\"web\",gpu=\"0\"}");
  ASSERT_TRUE(grants.has_value()) << m.body;
  EXPECT_GE(*grants, 1.0) << m.body;
  const auto waited =
      SampleValue(m.body, "tessera_container_token_wait_seconds_total{container=\"web\"}");
  ASSERT_TRUE(waited.has_value()) << m.body;
  EXPECT_GT(*waited, 0.0) << "the spin tenant's first launch waits for the token\n" << m.body;
  EXPECT_LT(*waited, 20.0) << m.body;
  // A second refused call counts once more.
  greedy.CloseStdin();
  EXPECT_EQ(greedy.Wait(10s), 0);
  ChildProcess again({BuildDir() + "/tests/shim_tenant", "alloc-until-oom", "4096"}, env);
  ASSERT_TRUE(again.WaitForKey("failure", 20s).has_value());
  EXPECT_EQ(again.values().at("allocated"), "0");  // 4 GiB never fits web's 2 GiB
  m = Http(port_, "GET", "/metrics");
  EXPECT_EQ(SampleValue(m.body, "tessera_container_oom_refusals_total{container=\"web\"}"), 2.0)
      << m.body;
  again.CloseStdin();
  EXPECT_EQ(again.Wait(10s), 0);
}

// --container-sockets: web's own socket (the one mounted into web's pods) shows web's part of the
// tree read-only, registers processes into web only, and serves nothing node-wide.
TEST_F(DoorsTest, AContainerSocketSeesAndRegistersOnlyItsContainer) {
  const std::string dir = "/tmp/" + UniqueName("csock");
  StartDaemon({"--container-sockets", dir});
  AddWebWithTenant();
  auto batch = tessera::ipc::Call(socket_, "CONTAINER id=batch mem=1073741824", nullptr, 3000ms);
  ASSERT_TRUE(batch.ok() && batch->rfind("OK", 0) == 0) << (batch.ok() ? *batch : batch.error());
  const std::string web_sock = dir + "/web/tessera.sock";
  struct stat st {};
  ASSERT_EQ(stat(web_sock.c_str(), &st), 0) << web_sock << " was not created at registration";
  ASSERT_EQ(stat((dir + "/batch/tessera.sock").c_str(), &st), 0);
  auto in_web = [&](const std::string& args) {
    return Shell("TESSERA_SOCKET=" + Quote(web_sock) + " " + Quote(BuildDir() + "/bin/tessera") +
                 " ctl " + args);
  };
  EXPECT_EQ(in_web("get 0/web/memsize").output, std::to_string(kWebLimit) + "\n");
  EXPECT_EQ(in_web("get version").status, 0);
  for (const char* hidden : {"get 0/batch/memsize", "get 0/policy", "get default_memsize"}) {
    CommandResult r = in_web(hidden);
    EXPECT_NE(r.status, 0) << hidden << " is visible through web's socket: " << r.output;
  }
  CommandResult write = in_web("set 0/web/weight 3");
  EXPECT_NE(write.status, 0) << "a container socket wrote the tree: " << write.output;
  EXPECT_EQ(Ctl("get 0/web/weight").output, "2\n");
  for (const char* node_wide : {"STATUS", "CONTAINER id=web mem=1"}) {
    auto r = tessera::ipc::Call(web_sock, node_wide, nullptr, 3000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->rfind("ERR", 0), 0u) << node_wide << " answered on web's socket: " << *r;
  }
  EXPECT_EQ(Ctl("get 0/web/memsize").output, std::to_string(kWebLimit) + "\n");
  // A tenant through web's socket lands in web; one that claims batch there is refused.
  std::vector<std::string> env = TenantEnv(SimEnv(), web_sock);
  ChildProcess joined({BuildDir() + "/tests/shim_tenant", "hold", std::to_string(64 << 20)}, env);
  ASSERT_TRUE(joined.WaitForKey("ready", 20s).has_value());
  const std::string meminfo = Ctl("get 0/web/meminfo").output;
  EXPECT_NE(meminfo.find("PID: " + std::to_string(joined.pid())), std::string::npos) << meminfo;
  env.push_back("TESSERA_CONTAINER=batch");
  ChildProcess impostor({BuildDir() + "/tests/shim_tenant", "hold", std::to_string(64 << 20)}, env);
  EXPECT_TRUE(impostor.WaitForKey("init_error", 20s).has_value())
      << "a HELLO for batch was accepted on web's socket";
  EXPECT_EQ(Ctl("get 0/batch/meminfo").output.find("PID:"), std::string::npos);
  // CONTAINER remove=1: batch (no process) goes at once with its socket and folder; web's
  // socket closes while its tenant still runs.
  auto removed = tessera::ipc::Call(socket_, "CONTAINER id=batch remove=1", nullptr, 3000ms);
  ASSERT_TRUE(removed.ok() && removed->rfind("OK processes=0", 0) == 0)
      << (removed.ok() ? *removed : removed.error());
  EXPECT_NE(stat((dir + "/batch").c_str(), &st), 0) << "batch's folder outlived batch";
  daemon_->Kill(SIGTERM);
  EXPECT_EQ(daemon_->Wait(10s), 0);
  daemon_.reset();
  EXPECT_NE(stat(web_sock.c_str(), &st), 0) << "tesserad left web's socket behind";
  EXPECT_EQ(stat((dir + "/web").c_str(), &st), 0)
      << "web's folder must outlive the daemon (pods mount it)";
  rmdir((dir + "/web").c_str());
  rmdir(dir.c_str());
}

TEST_F(DoorsTest, FuseAgreesWithCtlAndHttp) {
  if (auto why = FuseUnavailable()) GTEST_SKIP() << *why;
  char dir[] = "/tmp/tessera-doors-mnt-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  mount_dir_ = dir;
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--http-allow-write", "--ctl-mount", mount_dir_}));
  if (startup_line_.find("ctl mount " + mount_dir_) == std::string::npos) {
    GTEST_SKIP() << "tesserad could not mount FUSE here: " << startup_line_;
  }
  ASSERT_NO_FATAL_FAILURE(AddWebWithTenant());
  const auto fuse = FuseWalk();
  EXPECT_EQ(fuse, HttpWalk());
  EXPECT_EQ(fuse, CtlWalk());
  ExpectExpectedTree(fuse, tenant_->pid());
  // A write through the mount shows through the other doors, and the other way round.
  {
    std::ofstream out(mount_dir_ + "/0/web/highprio");
    out << "1\n";
  }
  EXPECT_EQ(Ctl("get 0/web/highprio").output, "1\n");
  EXPECT_EQ(Http(port_, "PUT", "/v1/ctl/0/prio_ratio", "70").status, 204);
  EXPECT_EQ(ReadFile(mount_dir_ + "/0/prio_ratio"), "70\n");
  // A refused write through the mount fails (EINVAL) and changes nothing.
  const int fd = open((mount_dir_ + "/0/policy").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  EXPECT_LT(write(fd, "9\n", 2), 0);
  close(fd);
  EXPECT_EQ(Ctl("get 0/policy").output, "0\n");
}

// --config: a deploy/tesserad.yaml-like file sets the daemon up; flags override it.
TEST(DoorsConfigTest, ConfigFileIsLoadedAndFlagsOverrideIt) {
  const std::string name = UniqueName("doorscfg");
  const std::string socket = "/tmp/" + name + ".sock";
  const std::string file = "/tmp/" + name + ".yaml";
  {
    std::ofstream out(file);
    out << "# like deploy/tesserad.yaml\n"
           "socket: "
        << socket
        << "\n"
           "sim: true\n"
           "ledger: "
        << name
        << "\n"
           "allow_self_declared: true\n"
           "context_overhead: 0\n"
           "policy: fixed-percentage\n"
           "max_inst: 10\n"
           "prio_ratio: 60\n"
           "quota_min: 2ms\n"
           "quota_max: 20ms\n"
           "default_memsize: 3GiB\n"
           "http: 127.0.0.1:0\n"
           "daemon_loss_timeout: 300ms\n"
           "gpus:\n"
           "  0:\n"
           "    policy: weighted-preemptive\n"
           "    max_inst: 8\n"
           "  5:\n"
           "    policy: 5\n";
  }
  ChildProcess daemon(
      {BuildDir() + "/bin/tesserad", "--config", file, "--ephemeral", "--max-inst", "12"},
      {"TESSERA_SIM_STATE=" + name, "TESSERA_SIM_GPUS=SimA:8GiB,SimB:8GiB"});
  uint16_t port = 0;
  for (int i = 0; i < 400 && port == 0; ++i) {
    daemon.WaitForKey("(startup line)", 50ms);
    for (const auto& [key, value] : daemon.values()) {
      if (key.rfind("tesserad: listening on " + socket, 0) == 0) {
        port = static_cast<uint16_t>(std::stoi(value.substr(value.rfind(':') + 1)));
      }
    }
  }
  ASSERT_NE(port, 0);
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/0/policy").body, "2\n");     // the file's GPU 0
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/1/policy").body, "3\n");     // the file's node-wide
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/0/max_inst").body, "12\n");  // the flag beats both
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/1/max_inst").body, "12\n");
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/1/prio_ratio").body, "60\n");
  EXPECT_EQ(Http(port, "GET", "/v1/ctl/default_memsize").body, "3221225472\n");
  // The file's daemon_loss_timeout is how long the gates wait for a silent arbiter.
  if (const tessera::ledger::LedgerLayout* view = tessera::ledger::MapDaemonView("/" + name)) {
    EXPECT_EQ(view->gate.loss_timeout_ns.load(), 300'000'000u);
    munmap(const_cast<tessera::ledger::LedgerLayout*>(view), sizeof(*view));
  } else {
    ADD_FAILURE() << "cannot map the daemon's view of /" << name;
  }
  daemon.Kill(SIGTERM);
  EXPECT_EQ(daemon.Wait(10s), 0);
  shm_unlink(("/tessera-sim-" + name).c_str());

  // A bad file stops tesserad with FILE:LINE:COL and the key.
  {
    std::ofstream out(file);
    out << "sim: true\nmax_inst: 16\npolicy: 9\n";
  }
  CommandResult bad = Shell(Quote(BuildDir() + "/bin/tesserad") + " --config " + Quote(file));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find(file + ":3:9: policy=\"9\""), std::string::npos) << bad.output;
  {
    std::ofstream out(file);
    out << "sim: true\nmax_inst: 16\nmax_instance: 4\n";
  }
  bad = Shell(Quote(BuildDir() + "/bin/tesserad") + " --config " + Quote(file));
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find(file + ":3:"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("max_instance"), std::string::npos) << bad.output;
  bad = Shell(Quote(BuildDir() + "/bin/tesserad") + " --config /nonexistent/tesserad.yaml");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("/nonexistent/tesserad.yaml"), std::string::npos) << bad.output;
  unlink(file.c_str());
}

// The sample config in deploy/ loads (its paths need root and a real node, so only parsing is
// checked here: tesserad with a bad flag value after it exits 2 naming the flag, not the file;
// an unknown flag is refused before any file is read).
TEST(DoorsConfigTest, DeploySampleLoads) {
  const std::string tesserad = Quote(BuildDir() + "/bin/tesserad") + " --config " +
                               Quote(std::string(TESSERA_SOURCE_DIR) + "/deploy/tesserad.yaml");
  CommandResult r = Shell(tesserad + " --max-inst=0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("loaded config"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--max-inst=\"0\""), std::string::npos) << r.output;
  r = Shell(tesserad + " --no-such-flag");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.find("loaded config"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--no-such-flag"), std::string::npos) << r.output;
}

}  // namespace
