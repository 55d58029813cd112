// One rule for whether a request fits (k8s/fit.h over placement/fit.h), checked where it is used:
// every request shape a container can write (shares, memory-only shares, whole GPUs with and
// without a memory ask, several GPUs, MIG instances, ACK's names) on a node of every mode, and the
// verdicts of the three doors that apply it must agree:
//   the extender     ClusterState::Filter on that one node (and, when it fits, its assignment);
//   the device plugin  the real Allocator against a real tesserad on simgpu, called as kubelet
//                    calls it: per resource the node serves (a resource it does not serve never
//                    reaches Allocate: kube-scheduler and kubelet refuse the pod), on the
//                    extender's assignment when there is one;
//   `tessera sim`    the trace's own forms (node and pod CSV rows) through the loaders and
//                    placement::Cluster::Fits, as `tessera sim` reads and places them.
// A shape the rule refuses is refused by the filter and by Allocate with the same words.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "k8s/deviceplugin/allocator.h"
#include "k8s/deviceplugin/mig_devices.h"
#include "k8s/deviceplugin/node_devices.h"
#include "k8s/extender/cluster_state.h"
#include "k8s/fit.h"
#include "placement/cluster.h"
#include "placement/trace.h"
#include "process/child_process.h"
#include "testing/support/test_support.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

constexpr char kNode[] = "fit-node";

struct Shape {
  std::string name;
  std::map<std::string, std::string> limits;
};

// Every shape a container can ask, on a node of two 16 GiB GPUs (the MIG node: one H100-80GB
// cut 3g.40gb + 2 x 1g.10gb).
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {"core share", {{"tessera.io/gpu-core", "30"}}},
      {"core+mem share", {{"tessera.io/gpu-core", "30"}, {"tessera.io/gpu-mem", "4"}}},
      {"ACK core+mem share",
       {{"aliyun.com/gpu-core.percentage", "30"}, {"aliyun.com/gpu-mem", "4"}}},
      {"memory-only share", {{"tessera.io/gpu-mem", "4"}}},
      {"ACK memory-only share", {{"aliyun.com/gpu-mem", "4"}}},
      {"whole GPU (count)", {{"tessera.io/gpu-count", "1"}}},
      {"whole GPU (core 100)", {{"tessera.io/gpu-core", "100"}}},
      {"whole GPU, memory asked", {{"tessera.io/gpu-core", "100"}, {"tessera.io/gpu-mem", "8"}}},
      {"whole GPU, more memory than the GPU",
       {{"tessera.io/gpu-core", "100"}, {"tessera.io/gpu-mem", "20"}}},
      {"share, more memory than the GPU",
       {{"tessera.io/gpu-core", "50"}, {"tessera.io/gpu-mem", "20"}}},
      {"memory-only, more than the GPU", {{"tessera.io/gpu-mem", "20"}}},
      {"ACK whole GPU, more memory than the GPU",
       {{"aliyun.com/gpu-core.percentage", "100"}, {"aliyun.com/gpu-mem", "20"}}},
      {"two GPUs, shares",
       {{"tessera.io/gpu-count", "2"}, {"tessera.io/gpu-core", "30"}, {"tessera.io/gpu-mem", "4"}}},
      {"two whole GPUs", {{"tessera.io/gpu-count", "2"}}},
      {"ACK two whole GPUs", {{"aliyun.com/gpu-count", "2"}}},
      {"two whole GPUs, 20 GiB each",
       {{"tessera.io/gpu-count", "2"},
        {"tessera.io/gpu-core", "100"},
        {"tessera.io/gpu-mem", "40"}}},
      {"two memory-only shares", {{"tessera.io/gpu-count", "2"}, {"tessera.io/gpu-mem", "6"}}},
      {"more GPUs than the node", {{"tessera.io/gpu-count", "4"}}},
      {"MIG instance", {{"tessera.io/mig-1g.10gb", "1"}}},
      {"MIG profile of another model", {{"tessera.io/mig-1g.6gb", "1"}}},
  };
  return shapes;
}

constexpr NodeMode kModes[] = {NodeMode::kCoreMem,   NodeMode::kMem, NodeMode::kShare,
                               NodeMode::kExclusive, NodeMode::kMps, NodeMode::kMig};

struct Verdict {
  bool fits = false;
  std::string reason;  // why not ("" when it fits)
};

// A simulated node: a real tesserad on simgpu and the devices the plugin would list.
struct FitNode {
  explicit FitNode(const std::string& gpus, std::vector<std::string> args = {})
      : sim(gpus, std::move(args)) {}
  testing::SimNode sim;
  std::vector<NodeGpu> gpus;
};

class FitRuleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shares_ = new FitNode("SimA:16GiB:80,SimA:16GiB:80");
    ASSERT_TRUE(shares_->sim.Start());
    // An mps node's tesserad runs a control daemon per GPU: here mps_control_standin, a stand-in
    // for nvidia-cuda-mps-control (the real one needs an NVIDIA driver).
    mps_dir_ = "/tmp/" + process::UniqueName("fitmps");
    mps_ = new FitNode("SimA:16GiB:80,SimA:16GiB:80",
                       {"--mps", "--mps-control",
                        process::BuildDir() + "/tests/mps_control_standin", "--mps-dir", mps_dir_});
    ASSERT_TRUE(mps_->sim.Start());
    // The MIG node as an operator leaves it: cut by the real `tessera mig apply` before tesserad.
    mig_ = new FitNode("H100-80GB:8GiB:132:mig=H100-80GB");
    std::string env;
    for (const std::string& e : mig_->sim.SimEnv()) env += e + " ";
    const auto [status, out] =
        process::RunShell(env + "'" + process::BuildDir() +
                          "/bin/tessera' mig apply --sim --gpu H100-80GB 3g.40gb=1 1g.10gb=2 2>&1");
    ASSERT_EQ(status, 0) << out;
    ASSERT_TRUE(mig_->sim.Start());
    for (FitNode* n : {shares_, mps_, mig_}) {
      for (const TesseradGpu& g : n->sim.Status().gpus) {
        n->gpus.push_back({g.index, g.uuid, g.name, g.total, g.max_inst, true, std::nullopt});
      }
    }
    // What each MIG device is, as the plugin reads it: through NVML (simgpu's, on this node).
    for (const std::string& e : mig_->sim.SimEnv()) {
      const size_t eq = e.find('=');
      setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    MigDeviceLister lister(process::BuildDir() + "/lib/libtessera-simgpu.so");
    std::vector<std::string> notes;
    auto parts = lister.List(&notes);
    ASSERT_TRUE(parts.ok()) << parts.error();
    for (NodeGpu& g : mig_->gpus) {
      if (auto it = parts->find(g.uuid); it != parts->end()) g.mig = it->second;
    }
  }
  static void TearDownTestSuite() {
    delete shares_;
    delete mps_;  // quits the control daemons before their folders go
    delete mig_;
    std::system(("rm -rf '" + mps_dir_ + "'").c_str());
  }

  static FitNode& NodeFor(NodeMode mode) {
    return mode == NodeMode::kMig ? *mig_ : mode == NodeMode::kMps ? *mps_ : *shares_;
  }

  static Json PodOf(const Shape& shape, const std::string& name) {
    return testing::PodJson("team", name, {{"app", shape.limits}});
  }

  // The extender: the filter on this node alone, and the assignment it would bind.
  static Verdict Extender(const Shape& shape, NodeMode mode, const std::string& pod_name,
                          std::optional<Assignment>* assignment) {
    extender::StateOptions o;
    o.workload = std::make_shared<placement::TargetWorkload>();
    extender::ClusterState state(o);
    FitNode& node = NodeFor(mode);
    Json n = {{"metadata",
               {{"name", kNode},
                {"uid", "node-uid"},
                {"resourceVersion", "1"},
                {"labels", {{kScheduleLabel, std::string(NodeModeName(mode))}}},
                {"annotations",
                 {{kInventoryAnnotation, WriteGpuInventory(InventoryOf(mode, node.gpus))}}}}},
              {"status", {{"allocatable", {{"cpu", "32"}, {"memory", "128Gi"}}}}}};
    EXPECT_TRUE(state.UpsertNode(n).ok());
    state.ReplacePods({});
    Json pod = PodOf(shape, pod_name);
    pod["metadata"]["uid"] = "uid-" + pod_name;
    auto out = state.Filter(pod, std::vector<std::string>{kNode});
    EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error());
    if (!out.ok()) return {false, out.error()};
    if (out->fits.empty()) {
      return {false, out->failed.empty() ? "(no reason)" : out->failed.front().reason};
    }
    auto plan = state.PrepareBind("team", pod_name, "uid-" + pod_name, kNode);
    EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error());
    if (plan.ok()) *assignment = plan->assignment;
    return {true, ""};
  }

  // The device plugin, as kubelet drives it: each resource the container asks that the node
  // serves, Allocate with that many device IDs; a resource the node does not serve stops the pod
  // before Allocate (kube-scheduler's NodeResourcesFit, kubelet's admission).
  static Verdict DevicePlugin(const Shape& shape, NodeMode mode, const std::string& pod_name,
                              const std::optional<Assignment>& from_extender) {
    FitNode& node = NodeFor(mode);
    class OnePod : public PodSource {
     public:
      std::vector<NodePod> Pods() const override { return list; }
      Status Refresh() override { return Status::Ok(); }
      std::vector<NodePod> list;
    } pods;
    AllocatorConfig config;
    config.node = kNode;
    config.checkpoint_path = node.sim.Scratch("fit-" + pod_name) + "/checkpoint.json";
    config.container_socket_dir = node.sim.container_sockets();
    config.shim_dir = "/host/tessera/lib";
    config.preload_file = "/host/tessera/ld.so.preload";
    Allocator allocator(config, &node.sim.client(), &pods, nullptr);
    EXPECT_TRUE(allocator.Load().ok());
    allocator.SetMode(mode, ResourceNames::kBoth);
    allocator.SetNodeGpus(node.gpus);
    // The assignment: the extender's, or (for a shape it refused) what a filter that ignored the
    // rule would write: the asked count of the node's GPUs, the memory asked or the whole GPU.
    Assignment a;
    if (from_extender) {
      a = *from_extender;
    } else {
      a.node = kNode;
      a.seq = 1;
      ContainerAssignment c{"app", {}};
      auto req = GpuRequestOf(*PodFromJson(PodOf(shape, pod_name))->Container("app"));
      const size_t want = req.ok() ? std::max<size_t>(req->Gpus(), 1) : 1;
      for (size_t i = 0; i < want && i < node.gpus.size(); ++i) {
        const Bytes total = node.gpus[i].memory;
        const uint64_t asked =
            req.ok() && req->mem_gib != 0 ? req->mem_gib * (1ull << 30) / want : total.count();
        c.gpus.push_back(
            {node.gpus[i].uuid, Bytes(std::min<uint64_t>(asked, total.count())),
             *Percent::FromInt(req.ok() && req->core != 0 ? static_cast<int>(req->core) : 100)});
      }
      a.containers.push_back(c);
    }
    Json pod = PodOf(shape, pod_name);
    pod["metadata"]["uid"] = "uid-" + pod_name;
    pod["metadata"]["annotations"][kAssignmentAnnotation] = WriteAssignment(a);
    pod["spec"]["nodeName"] = kNode;
    pod["status"]["phase"] = "Pending";
    pods.list.push_back({*PodFromJson(pod), 1});
    const std::vector<std::string> served = ServedResources(mode, ResourceNames::kBoth, node.gpus);
    Verdict v{true, ""};
    bool called = false;
    for (const auto& [resource, quantity] : shape.limits) {
      if (std::find(served.begin(), served.end(), resource) == served.end()) {
        return {false, "the node does not serve " + resource};
      }
    }
    for (const auto& [resource, quantity] : shape.limits) {
      std::vector<std::string> ids;
      for (int i = 0; i < std::stoi(quantity); ++i) {
        ids.push_back(node.gpus[0].uuid + "-x" + std::to_string(i));
      }
      auto r = allocator.Allocate(resource, ids);
      called = true;
      if (!r.ok()) return {false, r.error()};
    }
    EXPECT_TRUE(called);
    // What it registered goes again, so the next row starts from an empty node.
    allocator.Release({"uid-" + pod_name});
    return v;
  }

  // `tessera sim`: the same shape as a trace row, on the same node as a node-list row.
  static Verdict Sim(const Shape& shape, NodeMode mode) {
    auto req = GpuRequestOf(*PodFromJson(PodOf(shape, "sim"))->Container("app"));
    if (!req.ok()) return {false, req.error()};
    std::string node_csv = "sn,cpu_milli,memory_mib,gpu,model,mode,gpu_memory_mib,mig\n";
    switch (mode) {
      case NodeMode::kMem:
        node_csv += "n,32000,131072,2,SimA,memory-only,16384,\n";
        break;
      case NodeMode::kExclusive:
        node_csv += "n,32000,131072,2,SimA,whole-gpu,16384,\n";
        break;
      case NodeMode::kMps:
        node_csv += "n,32000,131072,2,SimA,mps,16384,\n";
        break;
      case NodeMode::kMig:
        node_csv += "n,32000,131072,1,H100-80GB,mig,,3g.40gb=1 1g.10gb=2\n";
        break;
      case NodeMode::kCoreMem:
      case NodeMode::kShare:
        node_csv += "n,32000,131072,2,SimA,memory+compute,16384,\n";
        break;
    }
    auto nodes = placement::ParseNodeCsv(node_csv, "nodes.csv");
    EXPECT_TRUE(nodes.ok()) << (nodes.ok() ? "" : nodes.error());
    if (!nodes.ok()) return {false, nodes.error()};
    // The trace's form: num_gpu, gpu_milli per GPU (1000: whole), gpu_mem_mib per GPU (empty:
    // proportional), or a mig_profile.
    const uint32_t gpus = req->Gpus();
    const bool whole = req->core >= 100 || (req->core == 0 && req->mem_gib == 0);
    std::string row = "p,0,0," + std::to_string(gpus) + ",";
    if (req->mig()) {
      row += "0,," + req->mig_profile;
    } else {
      row += std::to_string(whole ? 1000 : req->core * 10) + ",";
      if (req->mem_gib != 0) row += std::to_string(req->mem_gib * 1024 / gpus);
      row += ",";
    }
    auto pods = placement::ParsePodCsv(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_mem_mib,mig_profile\n" + row + "\n",
        "pods.csv", nodes->models);
    if (!pods.ok()) return {false, pods.error()};
    auto cluster = placement::Cluster::Create(nodes->models, nodes->nodes);
    EXPECT_TRUE(cluster.ok()) << (cluster.ok() ? "" : cluster.error());
    if (!cluster.ok()) return {false, cluster.error()};
    const placement::FitResult fit = cluster->Fits(0, pods->requests[0]);
    if (fit == placement::FitResult::kFits) return {true, ""};
    return {false, std::string(placement::FitResultName(fit))};
  }

  static FitNode* shares_;
  static FitNode* mps_;
  static FitNode* mig_;
  static std::string mps_dir_;
};

FitNode* FitRuleTest::shares_ = nullptr;
FitNode* FitRuleTest::mps_ = nullptr;
FitNode* FitRuleTest::mig_ = nullptr;
std::string FitRuleTest::mps_dir_;

TEST_F(FitRuleTest, EveryShapeOnEveryModeGetsOneVerdictFromAllThree) {
  int row = 0, fitting = 0;
  std::string table = "shape \\ mode:";
  for (NodeMode mode : kModes) table += " " + std::string(NodeModeName(mode));
  for (const Shape& shape : Shapes()) {
    table += "\n  " + shape.name + ":";
    for (NodeMode mode : kModes) {
      const std::string what =
          "\"" + shape.name + "\" on a " + std::string(NodeModeName(mode)) + " node";
      const std::string pod = "p" + std::to_string(row++);
      std::optional<Assignment> assignment;
      const Verdict ext = Extender(shape, mode, pod, &assignment);
      const Verdict dp = DevicePlugin(shape, mode, pod, assignment);
      const Verdict sim = Sim(shape, mode);
      EXPECT_EQ(ext.fits, dp.fits)
          << what << "\n  extender: " << ext.reason << "\n  device plugin: " << dp.reason;
      EXPECT_EQ(ext.fits, sim.fits)
          << what << "\n  extender: " << ext.reason << "\n  tessera sim: " << sim.reason;
      fitting += ext.fits ? 1 : 0;
      table += ext.fits ? " fits" : " -";
      if (!ext.fits) {
        // A shape failure names the same thing at the filter and at Allocate.
        EXPECT_EQ(ext.reason.rfind("tessera: ", 0), 0u) << what << ": " << ext.reason;
        if (dp.reason.find("does not serve") == std::string::npos) {
          EXPECT_THAT(dp.reason, HasSubstr(ext.reason.substr(9))) << what;
        }
      }
    }
  }
  // Not a table of refusals: the shapes that should fit do.
  EXPECT_GE(fitting, 25);
  std::printf("%s\n", table.c_str());
}

TEST_F(FitRuleTest, AWholeGpuAskingMoreMemoryThanTheGpuIsRefusedByTheFilterNamingTheGpusSize) {
  std::optional<Assignment> a;
  const Shape shape{"issue", {{"tessera.io/gpu-mem", "20"}, {"tessera.io/gpu-core", "100"}}};
  const Verdict ext = Extender(shape, NodeMode::kCoreMem, "big", &a);
  EXPECT_FALSE(ext.fits);
  EXPECT_EQ(ext.reason,
            "tessera: it asks tessera.io/gpu-mem=20, tessera.io/gpu-core=100, 20GiB on each of 1 "
            "GPU, more than the node's GPUs have (16GiB each)");
  const Verdict dp = DevicePlugin(shape, NodeMode::kCoreMem, "big", std::nullopt);
  EXPECT_FALSE(dp.fits);
  EXPECT_THAT(dp.reason, HasSubstr("more than the node's GPUs have (16GiB each)"));
}

// The shapes that fit get the same caps from the extender's assignment as the device plugin
// registers: a whole GPU with a memory ask is capped at the ask where the node caps memory.
TEST_F(FitRuleTest, AWholeGpuWithAMemoryAskIsCappedAtTheAskWhereTheNodeCapsMemory) {
  const Shape shape{"whole+mem", {{"tessera.io/gpu-core", "100"}, {"tessera.io/gpu-mem", "8"}}};
  for (NodeMode mode : {NodeMode::kCoreMem, NodeMode::kMem, NodeMode::kExclusive}) {
    std::optional<Assignment> a;
    ASSERT_TRUE(Extender(shape, mode, "cap", &a).fits) << NodeModeName(mode);
    ASSERT_TRUE(a.has_value());
    const Bytes expect = mode == NodeMode::kCoreMem ? Bytes(8ull << 30) : Bytes(16ull << 30);
    EXPECT_EQ(a->containers.at(0).gpus.at(0).mem, expect) << NodeModeName(mode);
    EXPECT_TRUE(DevicePlugin(shape, mode, "cap", a).fits) << NodeModeName(mode);
  }
}

}  // namespace
}  // namespace tessera::k8s
