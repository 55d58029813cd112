// A real Prometheus server (the Debian package's /usr/bin/prometheus) scrapes a real tesserad's
// /metrics, and the values are read back through Prometheus's HTTP query API: a container with a
// known limit, a real tenant (shim_tenant through the shim, on simgpu) holding a known number of
// bytes in it. This is the check that the exposition is one Prometheus accepts, not only one our
// own parser likes.
//
// Parallel-safe: every run gets its own sim state, socket, ledger (--ephemeral), tesserad port
// (port 0, read from the startup line), Prometheus port (a free one found by binding port 0) and
// temporary directory (config, TSDB, log); Prometheus is stopped and the directory removed in
// TearDown, also when a check failed. Without /usr/bin/prometheus the test fails and says how to
// install it: a monitoring check that quietly skips is one nobody notices is missing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr uint64_t kHeld = 384ull << 20;  // what the tenant allocates in the container
constexpr uint64_t kLimit = 3ull << 30;   // the container's memory limit on every GPU

// A port nobody listens on now: bind port 0 on loopback, read what the kernel chose, close.
uint16_t FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// One instant query's answer: the number of series and the first one's value (as Prometheus
// spells it) and instance label, or why there is none (the body).
struct QueryAnswer {
  int series = 0;
  std::string value;
  std::string instance;
  std::string body;
};

// Asks Prometheus's /api/v1/query at 127.0.0.1:port; the answer is
// {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},
// "value":[TIME,"VALUE"]},...]}}.
QueryAnswer Query(uint16_t port, const std::string& promql) {
  QueryAnswer a;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  auto response = client.Get("/api/v1/query", {{"query", promql}}, httplib::Headers());
  if (!response) {
    a.body = "no answer: " + httplib::to_string(response.error());
    return a;
  }
  a.body = response->body;
  const auto json = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (response->status != 200 || json.is_discarded() || json.value("status", "") != "success") {
    return a;
  }
  const nlohmann::json& result = json["data"]["result"];
  a.series = static_cast<int>(result.size());
  if (!result.empty()) {
    a.value = result[0]["value"][1].get<std::string>();
    a.instance = result[0]["metric"].value("instance", "");
  }
  return a;
}

class PrometheusTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (prometheus_) {
      prometheus_->Kill(SIGTERM);
      if (!prometheus_->Wait(15s)) prometheus_->Kill(SIGKILL);
      prometheus_.reset();  // reaps it
    }
    if (HasFailure() && !dir_.empty()) {
      std::ifstream log(dir_ + "/prometheus.log");
      std::string text(std::istreambuf_iterator<char>(log), {});
      std::fprintf(stderr, "---- prometheus.log (last 4000 bytes) ----\n%s\n",
                   text.substr(text.size() > 4000 ? text.size() - 4000 : 0).c_str());
    }
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
    tenant_.reset();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      EXPECT_EQ(daemon_->Wait(10s), 0) << "tesserad did not exit cleanly";
    }
    if (!state_.empty()) shm_unlink(("/tessera-sim-" + state_).c_str());
  }

  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimA:8GiB:80"};
  }

  // tesserad on simgpu with HTTP on a port of its choosing, read from its startup line.
  void StartDaemon() {
    state_ = UniqueName("prom");
    socket_ = "/tmp/" + state_ + ".sock";
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                 "--ephemeral", "--http", "127.0.0.1:0"},
        SimEnv());
    ASSERT_TRUE(daemon_->started());
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline && daemon_port_ == 0) {
      daemon_->WaitForKey("(startup line)", 50ms);
      for (const auto& [key, value] : daemon_->values()) {
        if (key.rfind("tesserad: listening on ", 0) == 0) {
          daemon_port_ = static_cast<uint16_t>(std::stoi(value.substr(value.rfind(':') + 1)));
        }
      }
    }
    ASSERT_NE(daemon_port_, 0) << "no startup line with http=ADDR from tesserad";
  }

  // Registers `mon` with kLimit and starts a tenant holding kHeld in it.
  void StartTenant() {
    auto reply = tessera::ipc::Call(socket_, "CONTAINER id=mon mem=" + std::to_string(kLimit),
                                    nullptr, 3000ms);
    ASSERT_TRUE(reply.ok()) << reply.error();
    ASSERT_EQ(reply->rfind("OK", 0), 0u) << *reply;
    std::vector<std::string> env = TenantEnv(SimEnv(), socket_, "mon");
    tenant_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "hold", std::to_string(kHeld)},
        env);
    ASSERT_TRUE(tenant_->started());
    ASSERT_TRUE(tenant_->WaitForKey("ready", 20s).has_value()) << "the tenant did not allocate";
  }

  // Prometheus on loopback, scraping tesserad every second, everything in a temporary directory.
  void StartPrometheus() {
    char dir[] = "/tmp/tessera-prom-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    {
      std::ofstream config(dir_ + "/prometheus.yml");
      config << "# Written by prometheus_test: scrape one tesserad every second.\n"
                "global:\n"
                "  scrape_interval: 1s\n"
                "  scrape_timeout: 1s\n"
                "  evaluation_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: tesserad\n"
                "    static_configs:\n"
                "      - targets: ['127.0.0.1:"
             << daemon_port_ << "']\n";
    }
    prom_port_ = FreePort();
    ASSERT_NE(prom_port_, 0) << "could not find a free loopback port";
    // Through sh only to send its log to a file (exec: the pid is Prometheus's own).
    const std::string command =
        std::string("exec ") + kPrometheus + " --config.file=" + dir_ +
        "/prometheus.yml --storage.tsdb.path=" + dir_ +
        "/data --web.listen-address=127.0.0.1:" + std::to_string(prom_port_) + " 2>" + dir_ +
        "/prometheus.log";
    prometheus_ = std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", command},
                                                 std::vector<std::string>{});
    ASSERT_TRUE(prometheus_->started());
  }

  QueryAnswer Query(const std::string& promql) { return ::Query(prom_port_, promql); }

  std::string state_, socket_, dir_;
  uint16_t daemon_port_ = 0, prom_port_ = 0;
  std::unique_ptr<ChildProcess> daemon_, tenant_, prometheus_;
};

TEST_F(PrometheusTest, PrometheusScrapesTheContainersMemoryAndTheDaemonsHealth) {
  ASSERT_EQ(access(kPrometheus, X_OK), 0)
      << kPrometheus << " is missing (access: " << std::strerror(errno)
      << "); this test needs the real Prometheus server: install it with "
         "`apt-get install prometheus` (scripts/dev test installs it)";
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  ASSERT_NO_FATAL_FAILURE(StartTenant());
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());
  // Scraped: Prometheus's own `up` for the target is 1 and it holds tesserad's series.
  const std::string instance = "127.0.0.1:" + std::to_string(daemon_port_);
  const std::string used_query = "tessera_container_memory_used_bytes{container=\"mon\",gpu=\"0\"}";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  QueryAnswer up, used;
  while (std::chrono::steady_clock::now() < deadline) {
    up = Query("up{job=\"tesserad\",instance=\"" + instance + "\"}");
    used = Query(used_query);
    if (up.value == "1" && used.series == 1) break;
    ASSERT_FALSE(prometheus_->Wait(0ms).has_value()) << "prometheus exited early";
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_EQ(up.value, "1") << "Prometheus did not scrape tesserad within 60 s: " << up.body;
  ASSERT_EQ(used.series, 1) << used.body;
  EXPECT_EQ(used.value, std::to_string(kHeld)) << used.body;
  EXPECT_EQ(used.instance, instance) << used.body;

  QueryAnswer limit = Query("tessera_container_memory_limit_bytes{container=\"mon\",gpu=\"0\"}");
  EXPECT_EQ(limit.series, 1) << limit.body;
  EXPECT_EQ(limit.value, std::to_string(kLimit)) << limit.body;
  QueryAnswer processes = Query("tessera_container_processes{container=\"mon\"}");
  EXPECT_EQ(processes.value, "1") << processes.body;
  QueryAnswer node_processes = Query("tessera_processes");
  EXPECT_EQ(node_processes.value, "1") << node_processes.body;
  QueryAnswer alive = Query("tessera_up");
  EXPECT_EQ(alive.series, 1) << alive.body;
  EXPECT_EQ(alive.value, "1") << alive.body;
  // The counters arrive as counters, at their real values.
  QueryAnswer refusals = Query("tessera_container_oom_refusals_total{container=\"mon\"}");
  EXPECT_EQ(refusals.value, "0") << refusals.body;
  QueryAnswer beat = Query("tessera_arbiter_beat_age_seconds < 1");
  EXPECT_EQ(beat.series, 1) << "the arbiter's heartbeat is not fresh: " << beat.body;
  // PromQL sees the GPU total and the container's share of it as tesserad exported them.
  QueryAnswer share =
      Query("sum(tessera_container_memory_used_bytes) / sum(tessera_gpu_memory_used_bytes)");
  EXPECT_EQ(share.value, "1") << share.body;
}

}  // namespace
