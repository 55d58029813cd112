// The podman harness against the real podman + runc: a container has its own root and /dev/shm,
// its output and exit status reach the test, a kill or the time bound ends it, nothing is left
// behind (a removed container, an orphan of a dead test process), and an image is built once.
#include "testing/support/podman.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace tessera::podman {
namespace {

using namespace std::chrono_literals;
using process::BuildDir;
using ::testing::HasSubstr;

bool Exists(const std::string& name) {
  return RunPodman({"container", "exists", name}, 30s).first == 0;
}
bool WaitUntilGone(const std::string& name) {
  for (int i = 0; i < 100 && Exists(name); ++i) usleep(100'000);
  return !Exists(name);
}

ImageContents Tenants() {
  ImageContents c;
  c.name = "harness";
  c.files = {{BuildDir() + "/tests/preload_tenant", "/opt/test/preload_tenant"}};
  return c;
}

TEST(PodmanHarness, AContainerHasItsOwnRootAndShmAndItsOutputAndStatusComeBack) {
  TESSERA_REQUIRE_PODMAN();
  auto image = Image::Build(Tenants());
  ASSERT_TRUE(image.ok()) << image.error();
  const std::string marker = "/dev/shm/" + process::UniqueName("tessera-harness");
  std::ofstream(marker) << "host";
  RunOptions o;
  o.image = *image;
  o.command = {"/bin/sh", "-c",
               "echo shm_marker=$(test -e " + marker +
                   " && echo seen || echo absent); "
                   "echo tenant=$(test -x /opt/test/preload_tenant && echo present); "
                   "echo build_tree=$(test -e " +
                   BuildDir() +
                   " && echo seen || echo absent); "
                   "/opt/test/preload_tenant; echo tenant_exit=$?; exit 3"};
  Container c("harness", o);
  ASSERT_TRUE(c.started());
  c.process().DrainOutput(30s);
  EXPECT_EQ(c.Wait(30s), 3);
  unlink(marker.c_str());
  const auto& v = c.process().values();
  EXPECT_EQ(v.count("shm_marker") ? v.at("shm_marker") : "", "absent");
  EXPECT_EQ(v.count("build_tree") ? v.at("build_tree") : "", "absent");
  EXPECT_EQ(v.count("tenant") ? v.at("tenant") : "", "present");
  // The tenant ran on the image's own libraries; with no libcuda.so.1 in the image it says so.
  EXPECT_EQ(v.count("dlopen_error") ? v.at("dlopen_error") : "", "1");
  EXPECT_EQ(v.count("tenant_exit") ? v.at("tenant_exit") : "", "1");
  EXPECT_TRUE(WaitUntilGone(c.name()));
}

TEST(PodmanHarness, AKilledContainerEndsAndTheDestructorLeavesNothing) {
  TESSERA_REQUIRE_PODMAN();
  auto image = Image::Build(Tenants());
  ASSERT_TRUE(image.ok()) << image.error();
  RunOptions o;
  o.image = *image;
  o.command = {"/bin/sh", "-c", "echo ready=1; exec sleep 100"};
  std::string name;
  {
    Container killed("harness", o);
    ASSERT_TRUE(killed.process().WaitForKey("ready", 30s));
    const auto pid = killed.HostPid(10s);
    ASSERT_TRUE(pid.has_value());
    EXPECT_EQ(kill(*pid, 0), 0) << "the pid file names a live process on the host";
    ASSERT_TRUE(killed.Kill(SIGKILL).ok());
    EXPECT_EQ(killed.Wait(30s), 137);
  }
  {
    Container left("harness", o);
    name = left.name();
    ASSERT_TRUE(left.process().WaitForKey("ready", 30s));
    EXPECT_TRUE(Exists(name));
  }
  EXPECT_FALSE(Exists(name)) << name << " outlived its Container";
}

TEST(PodmanHarness, TheTimeBoundEndsAContainerThatWouldRunOn) {
  TESSERA_REQUIRE_PODMAN();
  auto image = Image::Build(Tenants());
  ASSERT_TRUE(image.ok()) << image.error();
  RunOptions o;
  o.image = *image;
  o.command = {"/bin/sleep", "100"};
  o.timeout = 1s;
  Container c("harness", o);
  const auto start = std::chrono::steady_clock::now();
  const std::optional<int> status = c.Wait(20s);
  ASSERT_TRUE(status.has_value()) << "podman's --timeout did not end the container";
  EXPECT_NE(*status, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

TEST(PodmanHarness, ContainersOfADeadTestProcessAreRemoved) {
  TESSERA_REQUIRE_PODMAN();
  auto image = Image::Build(Tenants());
  ASSERT_TRUE(image.ok()) << image.error();
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const std::string name = process::UniqueName("tessera-test-orphan");
  std::vector<std::string> args = {
      "run", "-d",     "--network", "none",    "--timeout",
      "60",  "--name", name,        "--label", "tessera.test.owner=" + std::to_string(gone)};
  for (const std::string& u : Ulimits()) args.push_back(u);
  args.insert(args.end(), {*image, "/bin/sleep", "60"});
  auto [rc, out] = RunPodman(args);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(Exists(name));
  RemoveOrphans();
  EXPECT_FALSE(Exists(name));
}

TEST(PodmanHarness, AnImageIsBuiltOnceAndAgainWhenAFileChanges) {
  TESSERA_REQUIRE_PODMAN();
  const std::string file = "/tmp/" + process::UniqueName("tessera-harness-file");
  std::ofstream(file) << "one";
  ImageContents c;
  c.name = "harness-change";
  c.files = {{file, "/data/file"}};
  auto first = Image::Build(c);
  ASSERT_TRUE(first.ok()) << first.error();
  auto again = Image::Build(c);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  std::ofstream(file) << "two, longer";
  auto changed = Image::Build(c);
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_NE(*changed, *first);
  unlink(file.c_str());
  EXPECT_NE(RunPodman({"image", "exists", *first}, 30s).first, 0) << "the replaced image was kept";
  RunOptions o;
  o.image = *changed;
  o.command = {"/bin/sh", "-c", "echo content=$(cat /data/file | tr ' ,' '__')"};
  Container run("harness", o);
  EXPECT_EQ(run.process().WaitForKey("content", 30s), "two__longer");
  RunPodman({"rmi", "--force", *changed}, 30s);
}

TEST(PodmanHarness, AMissingFileIsNamed) {
  ImageContents c;
  c.name = "harness-missing";
  c.files = {{"/nonexistent/tenant", "/opt/tenant"}};
  auto image = Image::Build(c);
  ASSERT_FALSE(image.ok());
  EXPECT_THAT(image.error(), HasSubstr("/nonexistent/tenant cannot be read"));
}

}  // namespace
}  // namespace tessera::podman
