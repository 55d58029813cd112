// tesserad's node page in a real browser: headless Chromium loads http://HOST:PORT/ from a real
// tesserad on simgpu with two containers and a tenant each, and the test reads what the page's
// script drew (GPUs, each container's held memory, caps, GPU time) from the rendered DOM. The
// screenshot is kept under build/browser/ as a CI artifact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ipc/unix_socket.h"
#include "process/child_process.h"
#include "testing/support/browser.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using process::BuildDir;
using process::ChildProcess;

// CLOCK_MONOTONIC now, as shim_tenant's spin takes its start.
int64_t MonotonicNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class NodePageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = process::UniqueName("nodepage");
    socket_ = "/tmp/" + state_ + ".sock";
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                 "--ephemeral", "--http", "127.0.0.1:0", "--gpu-policy", "0:2"},
        SimEnv());
    ASSERT_TRUE(daemon_->started());
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline && port_ == 0) {
      daemon_->WaitForKey("(startup line)", 50ms);
      for (const auto& [key, value] : daemon_->values()) {
        if (key.rfind("tesserad: listening on ", 0) == 0) {
          port_ = std::stoi(value.substr(value.rfind(':') + 1));
        }
      }
    }
    ASSERT_NE(port_, 0) << "no startup line with http=ADDR from tesserad";
  }
  void TearDown() override {
    tenants_.clear();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    shm_unlink(("/tessera-sim-" + state_).c_str());
    process::RunShell("rm -rf '/tmp/" + state_ + ".browser'");
  }
  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimA:8GiB:80,SimB:4GiB:40"};
  }
  // Registers `id` with `args` and starts a tenant holding `bytes` in it on GPU 0.
  void AddContainer(const std::string& id, const std::string& args, uint64_t bytes) {
    auto reply = ipc::Call(socket_, "CONTAINER id=" + id + " " + args, nullptr, 3000ms);
    ASSERT_TRUE(reply.ok()) << reply.error();
    ASSERT_EQ(reply->rfind("OK", 0), 0u) << *reply;
    auto tenant = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "hold", std::to_string(bytes)},
        process::TenantEnv(SimEnv(), socket_, id));
    ASSERT_TRUE(tenant->started());
    ASSERT_TRUE(tenant->WaitForKey("ready", 20s).has_value()) << id << " did not allocate";
    tenants_.push_back(std::move(tenant));
  }
  // Starts a tenant of `id` that launches 1 ms kernels on GPU 0 for `seconds`.
  void AddSpinner(const std::string& id, int seconds) {
    auto tenant = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/tests/shim_tenant", "spin", "1000",
                                 std::to_string(seconds), std::to_string(MonotonicNowNs()),
                                 "legacy"},
        process::TenantEnv(SimEnv(), socket_, id));
    ASSERT_TRUE(tenant->started());
    tenants_.push_back(std::move(tenant));
  }

  std::string state_, socket_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> daemon_;
  std::vector<std::unique_ptr<ChildProcess>> tenants_;
};

TEST_F(NodePageTest, ABrowserDrawsEachGpuWithItsContainersCapsAndShares) {
  auto browser = testing::Chromium::Find();
  ASSERT_TRUE(browser.ok()) << browser.error();
  ASSERT_NO_FATAL_FAILURE(AddContainer("web", "mem=2147483648 core=30", uint64_t{1} << 30));
  ASSERT_NO_FATAL_FAILURE(AddContainer("batch", "mem=3221225472 weight=2", uint64_t{3} << 30));
  ASSERT_NO_FATAL_FAILURE(AddSpinner("web", 30));
  ASSERT_NO_FATAL_FAILURE(AddSpinner("batch", 30));
  std::this_thread::sleep_for(1500ms);  // a second of GPU time to show
  testing::Chromium chromium("/tmp/" + state_ + ".browser");
  const std::string url = "http://127.0.0.1:" + std::to_string(port_) + "/";
  auto dom = chromium.RenderedDom(url);
  ASSERT_TRUE(dom.ok()) << dom.error();
  // The script ran and read /v1/state: the summary counts, one card per GPU.
  EXPECT_NE(dom->find("2 GPU(s), 2 container(s), 4 process(es)"), std::string::npos) << *dom;
  EXPECT_NE(dom->find("data-gpu=\"0\""), std::string::npos);
  EXPECT_NE(dom->find("data-gpu=\"1\""), std::string::npos);
  EXPECT_NE(dom->find("GPU 0 \u2014 SimA, 8.00 GiB, policy 2 (weighted preemptive)"),
            std::string::npos)
      << *dom;
  // Each container's memory drawn as what it holds, the rest of its cap hatched, in the table.
  EXPECT_NE(dom->find("title=\"web: 1.00 GiB held\""), std::string::npos) << *dom;
  EXPECT_NE(dom->find("title=\"batch: 3.00 GiB held\""), std::string::npos) << *dom;
  EXPECT_NE(dom->find("title=\"web: cap 2.00 GiB, 1.00 GiB of it unused\""), std::string::npos);
  // batch holds its whole cap on GPU 0 (no hatched rest there); on GPU 1 all of it is unused.
  EXPECT_NE(dom->find("title=\"batch: cap 3.00 GiB, 3.00 GiB of it unused\""), std::string::npos);
  EXPECT_EQ(dom->find("title=\"batch: cap 3.00 GiB, 0"), std::string::npos);
  EXPECT_NE(dom->find("data-container=\"web\""), std::string::npos);
  // GPU time as each container got it over the last second, with its target.
  EXPECT_NE(dom->find("title=\"web: "), std::string::npos);
  EXPECT_NE(dom->find("% got, target "), std::string::npos) << *dom;
  EXPECT_NE(dom->find("weight 2"), std::string::npos);
  EXPECT_EQ(dom->find("class=\"sub err\""), std::string::npos) << *dom;

  const std::string png = BuildDir() + "/browser/node_page.png";
  process::RunShell("mkdir -p '" + BuildDir() + "/browser'");
  auto shot = chromium.Screenshot(url, png);
  EXPECT_TRUE(shot.ok()) << shot.message();
}

TEST_F(NodePageTest, AnIdleNodeIsDrawnAndThePageNeedsNothingFromElsewhere) {
  auto browser = testing::Chromium::Find();
  ASSERT_TRUE(browser.ok()) << browser.error();
  testing::Chromium chromium("/tmp/" + state_ + ".browser");
  const std::string url = "http://127.0.0.1:" + std::to_string(port_) + "/ui";
  auto dom = chromium.RenderedDom(url);
  ASSERT_TRUE(dom.ok()) << dom.error();
  EXPECT_NE(dom->find("0 container(s)"), std::string::npos) << *dom;
  // The page is self-contained: nothing it loads comes from elsewhere.
  EXPECT_EQ(dom->find("src=\"http"), std::string::npos);
  EXPECT_EQ(dom->find("href=\"http"), std::string::npos);
}

}  // namespace
}  // namespace tessera
