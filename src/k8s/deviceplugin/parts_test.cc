// The device plugin's small parts: what each mode advertises and the devices' IDs, pod UIDs from
// cgroup paths (and from a real process in a kubelet-style cgroup), the checkpoint's round trip
// and refusal, CDI specs, tesserad's STATUS parsing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "k8s/deviceplugin/cdi.h"
#include "k8s/deviceplugin/checkpoint.h"
#include "k8s/deviceplugin/node_devices.h"
#include "k8s/deviceplugin/pod_cgroup.h"
#include "k8s/deviceplugin/tesserad_client.h"
#include "k8s/objects.h"
#include "process/child_process.h"
#include "testing/support/test_support.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

constexpr char kUuid[] = "GPU-2e1fc313-a110-49be-8c5d-7c0bff8a19b5";

TEST(NodeDevices, EachModeServesItsResourcesInTheSpellingsAsked) {
  EXPECT_EQ(ServedResources(NodeMode::kCoreMem, ResourceNames::kTessera),
            (std::vector<std::string>{"tessera.io/gpu-mem", "tessera.io/gpu-core",
                                      "tessera.io/gpu-count"}));
  // An exclusive node serves all three too: a whole GPU may be asked as gpu-core 100, or with a
  // gpu-mem floor (the fit rule, k8s/fit.h); shares are refused there by the rule, not by kubelet.
  EXPECT_EQ(ServedResources(NodeMode::kExclusive, ResourceNames::kBoth),
            (std::vector<std::string>{"tessera.io/gpu-mem", "aliyun.com/gpu-mem",
                                      "tessera.io/gpu-core", "aliyun.com/gpu-core.percentage",
                                      "tessera.io/gpu-count", "aliyun.com/gpu-count"}));
  EXPECT_EQ(ServedResources(NodeMode::kMem, ResourceNames::kAliyun),
            (std::vector<std::string>{"aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage",
                                      "aliyun.com/gpu-count"}));
  EXPECT_TRUE(ServedResources(NodeMode::kMig, ResourceNames::kBoth).empty()) << "no MIG device yet";
  EXPECT_EQ(ServedResources(NodeMode::kMps, ResourceNames::kTessera),
            ServedResources(NodeMode::kCoreMem, ResourceNames::kTessera));
  EXPECT_TRUE(ModeIsolates(NodeMode::kMem));
  EXPECT_TRUE(ModeIsolates(NodeMode::kMig));
  EXPECT_TRUE(ModeIsolates(NodeMode::kMps));
  EXPECT_FALSE(ModeIsolates(NodeMode::kShare));
  EXPECT_FALSE(ModeIsolates(NodeMode::kExclusive));
  EXPECT_EQ(ParseResourceNames("both").value(), ResourceNames::kBoth);
  EXPECT_EQ(ParseResourceNames("ack").error(),
            "--resource-names=\"ack\": expected tessera, aliyun or both");
}

TEST(NodeDevices, OneDevicePerUnitWithTheGpuInItsId) {
  const std::vector<NodeGpu> gpus = {
      {0, kUuid, "H200", Bytes(151397597184), 16, true},
      {1, "GPU-00000000-0000-4000-8000-000000000001", "H200", Bytes(151397597184), 16, false}};
  const std::vector<Device> mem = DevicesOf("tessera.io/gpu-mem", NodeMode::kCoreMem, gpus);
  ASSERT_EQ(mem.size(), 2u * 141u) << "whole GiB only";
  EXPECT_EQ(mem[0].id, std::string(kUuid) + "-m0");
  EXPECT_TRUE(mem[0].healthy);
  EXPECT_FALSE(mem.back().healthy);
  for (const Device& d : mem) EXPECT_LE(d.id.size(), 63u);
  EXPECT_EQ(DevicesOf("aliyun.com/gpu-core.percentage", NodeMode::kCoreMem, gpus).size(), 200u);
  EXPECT_EQ(DevicesOf("tessera.io/gpu-count", NodeMode::kShare, gpus).size(), 32u)
      << "max_inst per GPU";
  EXPECT_EQ(DevicesOf("tessera.io/gpu-count", NodeMode::kExclusive, gpus).size(), 2u);
  EXPECT_TRUE(DevicesOf("nvidia.com/gpu", NodeMode::kCoreMem, gpus).empty());
  EXPECT_EQ(GpuOfDevice(std::string(kUuid) + "-c99"), kUuid);
  EXPECT_EQ(GpuOfDevice(std::string(kUuid) + "-n0"), kUuid);
  EXPECT_FALSE(GpuOfDevice(kUuid).has_value());
  EXPECT_FALSE(GpuOfDevice(std::string(kUuid) + "-x1").has_value());
  EXPECT_FALSE(GpuOfDevice(std::string(kUuid) + "-m").has_value());
  const GpuInventory inv = InventoryOf(NodeMode::kMem, gpus);
  EXPECT_EQ(inv.mode, NodeMode::kMem);
  EXPECT_FALSE(inv.gpus[1].healthy);
  EXPECT_EQ(inv.gpus[0].memory, Bytes(151397597184));
}

// GPUs with modes of their own: each cut by its mode, the resources those of every mode present,
// the inventory naming the modes that differ from the node's.
TEST(NodeDevices, gpu_modes_EachGpuIsCutByItsOwnMode) {
  std::vector<NodeGpu> gpus = {
      {0, kUuid, "H200", Bytes(4 * kBytesPerGiB), 16, true},
      {1, "GPU-00000000-0000-4000-8000-000000000001", "H200", Bytes(4 * kBytesPerGiB), 16, true},
      {2, "GPU-00000000-0000-4000-8000-000000000002", "H200", Bytes(4 * kBytesPerGiB), 16, true}};
  gpus[0].mode = NodeMode::kMps;
  gpus[1].mode = NodeMode::kExclusive;
  EXPECT_EQ(ServedResources(NodeMode::kCoreMem, ResourceNames::kTessera, gpus),
            ServedResources(NodeMode::kCoreMem, ResourceNames::kTessera));
  EXPECT_EQ(DevicesOf("tessera.io/gpu-count", NodeMode::kCoreMem, gpus).size(), 16u + 1u + 16u)
      << "the exclusive GPU has one gpu-count device";
  EXPECT_EQ(DevicesOf("tessera.io/gpu-mem", NodeMode::kCoreMem, gpus).size(), 12u);
  // The node's mode for a GPU without its own: an exclusive node with one core_mem GPU.
  gpus[0].mode.reset();
  gpus[1].mode = NodeMode::kCoreMem;
  EXPECT_EQ(DevicesOf("tessera.io/gpu-count", NodeMode::kExclusive, gpus).size(), 1u + 16u + 1u);
  const GpuInventory inv = InventoryOf(NodeMode::kExclusive, gpus);
  EXPECT_EQ(inv.gpus[0].mode, std::nullopt);
  EXPECT_EQ(inv.gpus[1].mode, NodeMode::kCoreMem);
  EXPECT_EQ(inv.gpus[2].mode, std::nullopt);
  // A GPU whose own mode is the node's is written without one.
  gpus[2].mode = NodeMode::kExclusive;
  EXPECT_EQ(InventoryOf(NodeMode::kExclusive, gpus).gpus[2].mode, std::nullopt);
}

// A mig node: one resource per profile present, one device per MIG device, its ID the MIG UUID;
// a MIG device tesserad lists but NVML gave no profile for is not served.
TEST(NodeDevices, AMigNodeServesEachProfileItHasWithTheMigUuidsAsIds) {
  const std::string mig0 = "MIG-11111111-2222-4333-8444-555555555555";
  const std::string mig1 = "MIG-11111111-2222-4333-8444-555555555556";
  const std::string mig2 = "MIG-11111111-2222-4333-8444-555555555557";
  const std::string mig3 = "MIG-11111111-2222-4333-8444-c00000000001";
  const std::vector<NodeGpu> gpus = {{0, mig0, "H100 MIG 3g.40gb", Bytes(40ull << 30), 16, true,
                                      InventoryMig{kUuid, "H100-80GB", "3g.40gb", 0}},
                                     {1, mig1, "H100 MIG 1g.10gb+me", Bytes(10ull << 30), 16, true,
                                      InventoryMig{kUuid, "H100-80GB", "1g.10gb+me", 4}},
                                     {2, mig2, "H100 MIG 1g.10gb", Bytes(10ull << 30), 16, false,
                                      InventoryMig{kUuid, "H100-80GB", "1g.10gb", 5}},
                                     {3, mig3, "H100 MIG ?", Bytes(10ull << 30), 16, true}};
  EXPECT_EQ(ServedResources(NodeMode::kMig, ResourceNames::kBoth, gpus),
            (std::vector<std::string>{"tessera.io/mig-1g.10gb", "tessera.io/mig-1g.10gb.me",
                                      "tessera.io/mig-3g.40gb"}));
  const std::vector<Device> three = DevicesOf("tessera.io/mig-3g.40gb", NodeMode::kMig, gpus);
  ASSERT_EQ(three.size(), 1u);
  EXPECT_EQ(three[0].id, mig0);
  const std::vector<Device> one = DevicesOf("tessera.io/mig-1g.10gb", NodeMode::kMig, gpus);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_FALSE(one[0].healthy);
  EXPECT_TRUE(DevicesOf("tessera.io/gpu-mem", NodeMode::kMig, gpus).empty());
  EXPECT_EQ(GpuOfDevice(mig3), mig3) << "a MIG UUID ending in c<digits> is no gpu-core unit";
  const GpuInventory inv = InventoryOf(NodeMode::kMig, gpus);
  ASSERT_EQ(inv.gpus.size(), 3u) << "the device without a profile is left out";
  EXPECT_EQ(inv.gpus[1].mig->profile, "1g.10gb+me");
  EXPECT_TRUE(ParseGpuInventory(WriteGpuInventory(inv)).ok());
  const GpuInventory relabelled = InventoryOf(NodeMode::kCoreMem, gpus);
  EXPECT_FALSE(relabelled.gpus[0].mig.has_value()) << "no MIG parts once the node left mode mig";
  EXPECT_TRUE(ParseGpuInventory(WriteGpuInventory(relabelled)).ok());
}

TEST(PodCgroup, FindsThePodInEveryDriversLayout) {
  const std::string uid = "0c4f8a5e-6b0d-4f7e-9c3a-2d1b6e8f7a90";
  EXPECT_EQ(PodUidFromCgroup("0::/kubepods/burstable/pod" + uid + "/8d2c1f\n"), uid);
  EXPECT_EQ(PodUidFromCgroup("0::/kubepods.slice/kubepods-besteffort.slice/"
                             "kubepods-besteffort-pod0c4f8a5e_6b0d_4f7e_9c3a_2d1b6e8f7a90.slice/"
                             "cri-containerd-ab.scope\n"),
            uid);
  EXPECT_EQ(PodUidFromCgroup("8:pids:/kubepods/pod" + uid + "/c0\n4:memory:/x\n"), uid);
  EXPECT_FALSE(PodUidFromCgroup("0::/system.slice/tesserad.service\n").has_value());
  EXPECT_FALSE(
      PodUidFromCgroup("0::/user.slice/podman-pod" + uid.substr(0, 10) + "\n").has_value());
  EXPECT_FALSE(PodUidFromCgroup("0::/kubepods/podnot-a-uid/x\n").has_value());
}

TEST(PodCgroup, AProcessInAPodsCgroupNamesThatPod) {
  const std::string root = testing::WritableCgroupRoot();
  if (root.empty()) GTEST_SKIP() << "no cgroup hierarchy this test may write (needs root)";
  const std::string uid = "11111111-2222-4333-8444-555555555555";
  const std::string dir = root + "/kubepods/pod" + uid + "/c" + std::to_string(getpid());
  std::system(("mkdir -p " + dir).c_str());
  process::ChildProcess child(
      {"/bin/sh", "-c", "echo $$ > " + dir + "/cgroup.procs && echo in=1 && cat >/dev/null"}, {});
  ASSERT_TRUE(child.WaitForKey("in", std::chrono::seconds(10)).has_value());
  EXPECT_EQ(PodUidOfProcess("/proc", child.pid()), uid);
  EXPECT_FALSE(PodUidOfProcess("/proc", getpid()).has_value());
  child.CloseStdin();
  child.Wait(std::chrono::seconds(10));
  rmdir(dir.c_str());
  rmdir((root + "/kubepods/pod" + uid).c_str());
}

TEST(Checkpoint, RoundTripsAndRefusesWhatItCannotRead) {
  const std::string path = "/tmp/" + process::UniqueName("checkpoint") + ".json";
  auto empty = LoadCheckpoint(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->records.empty());
  Checkpoint c;
  AllocationRecord r;
  r.id = "k8s.web.app-123abc";
  r.pod_uid = "u";
  r.ns = "ns";
  r.pod = "web";
  r.container = "app";
  r.init = true;
  r.devices = {{"tessera.io/gpu-mem", {"a", "b"}}};
  r.gpus = {{kUuid, 1, Bytes(2147483648), *Percent::FromInt(30)}};
  r.core = Percent::FromInt(30);
  r.weight = 2;
  r.high_priority = true;
  r.registered = true;
  r.cdi_file = "/var/run/cdi/x.json";
  r.also_waiting = {"ns/other"};
  r.mps_root = "/run/tessera/mps";
  r.mode = NodeMode::kMps;
  c.records.push_back(r);
  r.id = "k8s.old.app-456def";
  r.mode.reset();  // a record from before modes were recorded
  c.records.push_back(r);
  c.rejected["v"] = "why";
  ASSERT_TRUE(SaveCheckpoint(path, c).ok());
  auto back = LoadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, c);
  EXPECT_NE(back->FindId("k8s.web.app-123abc"), nullptr);
  EXPECT_NE(back->Find("u", "app"), nullptr);
  std::ofstream(path) << "{\"version\": 9, \"records\": [], \"rejected\": {}}";
  auto newer = LoadCheckpoint(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_THAT(newer.error(), HasSubstr("version 9; this plugin reads version 1"));
  std::ofstream(path) << "{\"version\": 1, \"records\": [{\"id\": \"i\", \"pod_uid\": \"u\", "
                         "\"namespace\": \"n\", \"pod\": \"p\", \"container\": \"c\", "
                         "\"devices\": {}, \"gpus\": [], \"mode\": \"turbo\"}], \"rejected\": {}}";
  auto bad_mode = LoadCheckpoint(path);
  ASSERT_FALSE(bad_mode.ok());
  EXPECT_THAT(bad_mode.error(),
              HasSubstr("checkpoint " + path + ": mode=\"turbo\": unknown GPU sharing mode"));
  std::ofstream(path) << "{";
  auto broken = LoadCheckpoint(path);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error(), HasSubstr(path + " does not parse"));
  EXPECT_THAT(broken.error(), HasSubstr("move it away to start afresh"));
  unlink(path.c_str());
}

TEST(Cdi, WritesAVersionZeroFiveSpecAtomically) {
  const std::string dir = "/tmp/" + process::UniqueName("cdi");
  CdiEdits e;
  e.env = {{"TESSERA_MEM_LIMIT", "2GiB"}};
  e.mounts = {{"/var/lib/tessera/lib", "/usr/local/tessera/lib", true}, {"/a", "/b", false}};
  auto path = WriteCdiSpec(dir, "k8s.web.app-123abc", e);
  ASSERT_TRUE(path.ok()) << path.error();
  EXPECT_EQ(*path, dir + "/tessera.io-container-k8s.web.app-123abc.json");
  std::ifstream in(*path);
  const Json spec = Json::parse(in);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "tessera.io/container");
  const Json& edits = spec["devices"][0]["containerEdits"];
  EXPECT_EQ(edits["env"][0], "TESSERA_MEM_LIMIT=2GiB");
  EXPECT_EQ(edits["mounts"][0]["options"], Json::array({"bind", "nosuid", "nodev", "ro"}));
  EXPECT_EQ(edits["mounts"][1]["options"], Json::array({"bind", "nosuid", "nodev"}));
  EXPECT_FALSE(spec.contains("annotations")) << "0.5.0 has no annotations";
  EXPECT_FALSE(edits.contains("hooks")) << "no hook asked, none written";
  EXPECT_EQ(CdiQualifiedName("x"), "tessera.io/container=x");
  // The createRuntime hook, as CDI 0.5.0 spells it (podman 4.3 + runc run it:
  // container_identity_test).
  e.hooks = {{"createRuntime",
              "/var/lib/tessera/device-plugin/tessera-oci-hook",
              {"tessera-oci-hook", "--container", "k8s.web.app-123abc"},
              15}};
  path = WriteCdiSpec(dir, "k8s.web.app-123abc", e);
  ASSERT_TRUE(path.ok()) << path.error();
  std::ifstream again(*path);
  const Json hooked = Json::parse(again);
  EXPECT_EQ(hooked["devices"][0]["containerEdits"]["hooks"],
            Json::parse(R"([{"hookName":"createRuntime",
                             "path":"/var/lib/tessera/device-plugin/tessera-oci-hook",
                             "args":["tessera-oci-hook","--container","k8s.web.app-123abc"],
                             "timeout":15}])"));
  std::system(("rm -rf " + dir).c_str());
}

TEST(TesseradStatus, ParsesWhatTesseradWrites) {
  auto s = ParseTesseradStatus(
      R"({"devices":[{"index":0,"uuid":"GPU-a","name":"SimA","total_bytes":17179869184,"policy":3,"max_inst":16}],
          "containers":[{"id":"k8s.x","slot":0,"limit_bytes":[null],"used_bytes":[5],"core_percent":30,
                         "weight":2,"high_priority":true,"compute":[],"processes":[{"pid":42,"attached":true,"used_bytes":[5]}]}]})");
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->gpus[0].max_inst, 16u);
  EXPECT_EQ(s->Gpu("GPU-a")->total, Bytes(17179869184));
  const TesseradContainer* c = s->Find("k8s.x");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->limits[0].has_value());
  EXPECT_EQ(c->pids, std::vector<pid_t>{42});
  EXPECT_TRUE(c->high_priority);
  EXPECT_FALSE(ParseTesseradStatus("{\"devices\":3}").ok());
}

}  // namespace
}  // namespace tessera::k8s
