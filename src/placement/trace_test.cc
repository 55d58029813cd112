// Tests of the node and pod CSV parsers: accepted input and every rejection, each naming the
// file, line, column and value.
#include "placement/trace.h"

#include <gtest/gtest.h>

#include "placement/mig.h"

namespace tessera::placement {
namespace {

constexpr const char* kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,64000,262144,2,P100\n"
    "n1,96000,393216,8,G2\r\n"
    "\n"
    "cpu0,32000,65536,0,\n";

void ExpectError(const std::string& error, const std::string& where, const std::string& what) {
  EXPECT_NE(error.find(where), std::string::npos) << "missing \"" << where << "\" in: " << error;
  EXPECT_NE(error.find(what), std::string::npos) << "missing \"" << what << "\" in: " << error;
}

TEST(NodeCsvTest, ParsesTheTraceFormat) {
  auto list = ParseNodeCsv(kNodes, "nodes.csv");
  ASSERT_TRUE(list.ok()) << list.error();
  ASSERT_EQ(list->nodes.size(), 3u);
  EXPECT_EQ(list->nodes[1].name, "n1");
  EXPECT_EQ(list->nodes[1].gpu_count, 8);
  EXPECT_EQ(list->models.model(list->nodes[1].model).name, "G2");
  EXPECT_EQ(list->nodes[2].gpu_count, 0);
  EXPECT_EQ(list->nodes[2].model, -1);
  EXPECT_EQ(list->models.size(), 2);
}

TEST(NodeCsvTest, OptionalModeAndGpuMemoryColumns) {
  auto list = ParseNodeCsv(
      "model,gpu,sn,cpu_milli,memory_mib,mode,gpu_memory_mib\n"
      "H100,8,h0,128000,1048576,memory-only,81920\n"
      "T4,2,t0,32000,65536,,\n"
      "T4,2,t1,32000,65536,whole-gpu,\n",
      "n.csv");
  ASSERT_TRUE(list.ok()) << list.error();
  EXPECT_EQ(list->nodes[0].mode, NodeMode::kMemoryOnly);
  EXPECT_EQ(list->models.model(list->nodes[0].model).memory_mib, 81920);
  EXPECT_EQ(list->nodes[1].mode, NodeMode::kMemoryAndCompute);
  EXPECT_EQ(list->nodes[2].mode, NodeMode::kWholeGpus);
  auto bad = ParseNodeCsv("sn,cpu_milli,memory_mib,gpu,model,mode\nx,1,1,1,T4,shared\n", "n.csv");
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "n.csv:2: column 6 (mode): \"shared\"",
              "memory+compute, memory-only, whole-gpu, mps or mig");
}

TEST(NodeCsvTest, gpu_modes_EachGpusModeInTheModeColumn) {
  auto list = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model,mode\n"
      "m0,96000,786432,8,A100,mps=4|memory+compute=4\n"
      "m1,96000,786432,3,A100,whole-gpu=1|memory-only=2\n"
      "m2,96000,786432,8,A100,mps\n",
      "n.csv");
  ASSERT_TRUE(list.ok()) << list.error();
  const NodeSpec& m0 = list->nodes[0];
  ASSERT_EQ(m0.gpu_modes.size(), 8u);
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(m0.ModeOf(g), NodeMode::kMemoryAndCompute) << g;
    EXPECT_EQ(m0.gpu_modes[static_cast<size_t>(g)].one_gpu_per_request, g < 4) << g;
  }
  EXPECT_NE(m0.gpu_modes[0].tag, m0.gpu_modes[4].tag);
  const NodeSpec& m1 = list->nodes[1];
  ASSERT_EQ(m1.gpu_modes.size(), 3u);
  EXPECT_EQ(m1.ModeOf(0), NodeMode::kWholeGpus);
  EXPECT_EQ(m1.ModeOf(1), NodeMode::kMemoryOnly);
  EXPECT_EQ(m1.ModeOf(2), NodeMode::kMemoryOnly);
  EXPECT_TRUE(list->nodes[2].gpu_modes.empty());
  EXPECT_EQ(list->nodes[2].max_gpus_per_request, 1);

  const std::string header = "sn,cpu_milli,memory_mib,gpu,model,mode\n";
  struct Case {
    std::string row, where, what;
  };
  const Case cases[] = {
      {"x,1,1,8,T4,mps=4|memory+compute=3", "column 6 (mode): \"mps=4|memory+compute=3\"",
       "counts summing to the node's 8 GPUs"},
      {"x,1,1,8,T4,mps=4|mig=4", "has a part \"mig=4\" that is no GPU mode and count",
       "(mig is a whole node's)"},
      {"x,1,1,8,T4,mps=4|shared=4", "has a part \"shared=4\"", "MODE=COUNT parts separated by |"},
      {"x,1,1,8,T4,mps=0|memory+compute=8", "has a part \"mps=0\" whose count is not 1-32",
       "sum to the node's GPUs"},
      {"x,1,1,8,T4,mps=x4|memory+compute=4", "has a part \"mps=x4\"", "whose count"},
      {"x,1,1,8,T4,mps=4||memory+compute=4", "has a part \"\"", "MODE=COUNT"},
      {"x,1,1,8,T4,mps=4|", "has a part \"\"", "MODE=COUNT"},
  };
  for (const Case& c : cases) {
    auto bad = ParseNodeCsv(header + c.row + "\n", "n.csv");
    ASSERT_FALSE(bad.ok()) << c.row;
    ExpectError(bad.error(), c.where, c.what);
  }
}

TEST(NodeCsvTest, RejectsMalformedRowsWithFileLineAndColumn) {
  const std::string header = "sn,cpu_milli,memory_mib,gpu,model\n";
  struct Case {
    std::string row, where, what;
  };
  const Case cases[] = {
      {"n0,64k,262144,2,P100", "nodes.csv:2: column 2 (cpu_milli): \"64k\"", "not a whole number"},
      {"n0,64000,,2,P100", "nodes.csv:2: column 3 (memory_mib): \"\"", "is empty"},
      {"n0,64000,1,33,P100", "nodes.csv:2: column 4 (gpu): \"33\"", "expected 0 to 32"},
      {"n0,64000,1,-1,P100", "column 4 (gpu): \"-1\"", "not a whole number"},
      {"n0,64000,1,2,", "nodes.csv:2: column 5 (model): \"\"", "model name"},
      {"n0,64000,1,2", "nodes.csv:2: column 5 (model): missing", "expected 5"},
      {"n0,64000,1,2,T4,extra", "nodes.csv:2: column 6: unexpected extra field \"extra\"",
       "expected 5 fields"},
      {",64000,1,2,T4", "nodes.csv:2: column 1 (sn): \"\"", "a node name"},
      {"n0,99999999999999999999,1,2,T4", "column 2 (cpu_milli)", "out of range"},
  };
  for (const Case& c : cases) {
    auto r = ParseNodeCsv(header + c.row + "\n", "nodes.csv");
    ASSERT_FALSE(r.ok()) << c.row;
    ExpectError(r.error(), c.where, c.what);
  }
  auto dup = ParseNodeCsv(header + "n0,1,1,1,T4\nn0,1,1,1,T4\n", "nodes.csv");
  ASSERT_FALSE(dup.ok());
  ExpectError(dup.error(), "nodes.csv:3: column 1 (sn): \"n0\"", "first at line 2");
  auto no_col = ParseNodeCsv("sn,cpu_milli,memory_mib,model\nn0,1,1,T4\n", "nodes.csv");
  ASSERT_FALSE(no_col.ok());
  ExpectError(no_col.error(), "nodes.csv:1:", "no column \"gpu\"");
  ExpectError(ParseNodeCsv("", "nodes.csv").error(), "nodes.csv", "empty file");
  ExpectError(ParseNodeCsv(header, "nodes.csv").error(), "nodes.csv", "no nodes");
}

TEST(PodCsvTest, ParsesTheTraceFormat) {
  auto nodes = ParseNodeCsv(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok());
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
      "p1,6000,12288,1,460,P100|G2,LS,Running,427061,12902960,427061\n"
      "p2,4000,1024,0,0,,BE,Failed,1,2,3\n"
      "p3,1000,1024,1,500,V100M32,BE,Failed,1,2,3\n",
      "pods.csv", nodes->models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  ASSERT_EQ(pods->requests.size(), 4u);
  EXPECT_EQ(pods->names[1], "p1");
  EXPECT_TRUE(pods->requests[0].whole_gpus());
  EXPECT_TRUE(pods->requests[0].allowed.IsAny());
  const Request& p1 = pods->requests[1];
  EXPECT_EQ(p1.gpu_milli, 460);
  EXPECT_EQ(p1.gpu_mem_mib, kProportionalMemory);
  EXPECT_TRUE(p1.allowed.Contains(nodes->models.Find("P100")));
  EXPECT_TRUE(p1.allowed.Contains(nodes->models.Find("G2")));
  EXPECT_TRUE(pods->requests[2].cpu_only());
  // A model no node has: the pod may go nowhere.
  EXPECT_EQ(pods->requests[3].allowed, ModelSet::None());
}

TEST(PodCsvTest, RejectsMalformedRowsWithFileLineAndColumn) {
  ModelTable models;
  (void)models.Intern("T4");
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  struct Case {
    std::string row, where, what;
  };
  const Case cases[] = {
      {"p,1,1,x,1000,", "pods.csv:3: column 4 (num_gpu): \"x\"", "expected 0 to 32"},
      {"p,1,1,1,1001,", "pods.csv:3: column 5 (gpu_milli): \"1001\"", "expected 0 to 1000"},
      {"p,1,1,0,500,", "column 5 (gpu_milli): \"500\"", "0 when num_gpu is 0"},
      {"p,1,1,1,0,", "column 5 (gpu_milli): \"0\"", "1 to 1000"},
      {"p,1,1,1,500,T4||G2", "column 6 (gpu_spec): \"T4||G2\"", "separated by |"},
      {"p,1.5,1,1,500,", "column 2 (cpu_milli): \"1.5\"", "not a whole number"},
      {"p,1,1,1,500", "column 6 (gpu_spec): missing", "expected 6"},
  };
  for (const Case& c : cases) {
    auto r = ParsePodCsv(header + "ok,1,1,1,1000,\n" + c.row + "\n", "pods.csv", models);
    ASSERT_FALSE(r.ok()) << c.row;
    ExpectError(r.error(), c.where, c.what);
    EXPECT_NE(r.error().find("pods.csv:3:"), std::string::npos) << r.error();
  }
  // A required column missing from the header is an error naming it; gpu_spec is not required.
  auto missing = ParsePodCsv("name,cpu_milli,num_gpu,gpu_milli,gpu_spec\n", "pods.csv", models);
  ASSERT_FALSE(missing.ok());
  ExpectError(missing.error(), "pods.csv:1:", "no column \"memory_mib\"");
}

TEST(PodCsvTest, FiveColumnListsOfTheFgdAuthorsLoad) {
  // The multi-GPU lists of the FGD authors have only these five columns: every pod may use any
  // model, and the rows are checked as strictly as in the full form.
  ModelTable models;
  (void)models.Intern("T4");
  (void)models.Intern("G2");
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  auto pods = ParsePodCsv(header +
                              "openb-pod-0000,88000,327680,8,1000\n"
                              "openb-pod-0001,6000,12288,1,460\n"
                              "openb-pod-0002,4000,8192,0,0\n",
                          "openb_pod_list_multigpu50.csv", models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  ASSERT_EQ(pods->requests.size(), 3u);
  EXPECT_EQ(pods->requests[0].gpu_count, 8);
  EXPECT_TRUE(pods->requests[0].whole_gpus());
  EXPECT_EQ(pods->requests[1].gpu_milli, 460);
  EXPECT_TRUE(pods->requests[2].cpu_only());
  for (const Request& r : pods->requests) EXPECT_TRUE(r.allowed.IsAny());
  ASSERT_EQ(pods->times.size(), 3u);
  EXPECT_EQ(pods->times[0].created, -1);  // no times in this form
  auto bad = ParsePodCsv(header + "p,1,1,2,1000\np,1,1,2,10OO\n", "multi.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "multi.csv:3: column 5 (gpu_milli): \"10OO\"", "not a whole number");
  bad = ParsePodCsv(header + "p,1,1,2,1000,T4\n", "multi.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "multi.csv:2: column 6: unexpected extra field \"T4\"", "expected 5");
}

TEST(PodCsvTest, CreationAndDeletionTimes) {
  ModelTable models;
  (void)models.Intern("T4");
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n";
  auto pods = ParsePodCsv(header +
                              "a,1000,1024,1,500,,10,70\n"
                              "b,1000,1024,1,500,,20,\n",
                          "pods.csv", models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  EXPECT_EQ(pods->times[0].created, 10);
  EXPECT_EQ(pods->times[0].deleted, 70);
  EXPECT_EQ(pods->times[1].created, 20);
  EXPECT_EQ(pods->times[1].deleted, -1);  // never left
  auto bad = ParsePodCsv(header + "a,1000,1024,1,500,,80,70\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "pods.csv:2: column 8 (deletion_time): \"70\"",
              "before the pod's creation_time 80");
  bad = ParsePodCsv(header + "a,1000,1024,1,500,,,70\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "pods.csv:2: column 7 (creation_time): \"\"", "is empty");
  bad = ParsePodCsv(header + "a,1000,1024,1,500,,1.5,70\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "column 7 (creation_time): \"1.5\"", "not a whole number");
}

TEST(PodCsvTest, OptionalGpuMemoryColumn) {
  ModelTable models;
  (void)models.Intern("T4");
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,gpu_mem_mib\n"
      "a,1,1,1,0,,4096\n"
      "b,1,1,1,300,,\n",
      "pods.csv", models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  EXPECT_TRUE(pods->requests[0].memory_only());
  EXPECT_EQ(pods->requests[0].gpu_mem_mib, 4096);
  EXPECT_EQ(pods->requests[1].gpu_mem_mib, kProportionalMemory);
}

TEST(PodCsvTest, OurOwnShareForm) {
  ModelTable models;
  (void)models.Intern("T4");
  auto pods = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_core_percent,gpu_mem_gib,gpu_spec\n"
      "a,1000,1024,1,30,4,\n"
      "b,1000,1024,2,0,8,T4\n"
      "c,1000,1024,1,100,,\n"
      "d,1000,1024,0,0,,\n"
      "e,1000,1024,1,25,,\n",
      "pods.csv", models);
  ASSERT_TRUE(pods.ok()) << pods.error();
  EXPECT_EQ(pods->requests[0].gpu_milli, 300);
  EXPECT_EQ(pods->requests[0].gpu_mem_mib, 4096);
  EXPECT_TRUE(pods->requests[1].memory_only());
  EXPECT_EQ(pods->requests[1].gpu_count, 2);
  EXPECT_EQ(pods->requests[1].allowed, ModelSet::Of(0));
  EXPECT_TRUE(pods->requests[2].whole_gpus());
  EXPECT_TRUE(pods->requests[3].cpu_only());
  EXPECT_EQ(pods->requests[4].gpu_mem_mib, kProportionalMemory);
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_core_percent,gpu_mem_gib,gpu_spec\n";
  auto bad = ParsePodCsv(header + "a,1,1,1,33,,\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "pods.csv:2: column 5 (gpu_core_percent): \"33\"", "steps of 5");
  bad = ParsePodCsv(header + "a,1,1,1,0,,\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "column 5 (gpu_core_percent)", "no share");
  bad = ParsePodCsv(header + "a,1,1,0,0,4,\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "column 6 (gpu_mem_gib): \"4\"", "num_gpu is 0");
  bad = ParsePodCsv("name,cpu_milli,memory_mib,num_gpu,gpu_spec\n", "pods.csv", models);
  ASSERT_FALSE(bad.ok());
  ExpectError(bad.error(), "pods.csv:1:", "neither \"gpu_milli\" nor \"gpu_core_percent\"");
}

// MIG nodes: a fixed layout per node, "dynamic" and "dynamic" with a first cut; the model's memory
// from its full-GPU profile; and every rejection naming the line, column and value.
TEST(NodeCsvTest, MigNodesAndTheirLayouts) {
  auto list = ParseNodeCsv(
      "sn,cpu_milli,memory_mib,gpu,model,mode,mig\n"
      "m0,64000,262144,2,H100-80GB,mig,3g.40gb=1 2g.20gb=1 1g.10gb=1\n"
      "m1,64000,262144,4,H100-80GB,mig,dynamic\n"
      "m2,64000,262144,1,A30,mig,dynamic 2g.12gb=2\n"
      "t0,32000,65536,2,T4,,\n",
      "mig.csv");
  ASSERT_TRUE(list.ok()) << list.error();
  const NodeSpec& m0 = list->nodes[0];
  EXPECT_EQ(m0.mode, NodeMode::kMig);
  ASSERT_EQ(m0.mig_gpus.size(), 2u);
  EXPECT_EQ(mig::FormatPlacements(m0.mig_gpus[1]), "3g.40gb@0 2g.20gb@4 1g.10gb@6");
  EXPECT_FALSE(m0.mig_relayout);
  EXPECT_EQ(list->models.model(m0.model).memory_mib, 80 * 1024);
  EXPECT_TRUE(list->nodes[1].mig_relayout);
  EXPECT_EQ(list->nodes[1].mig_gpus.size(), 4u);
  EXPECT_TRUE(list->nodes[1].mig_gpus[0].instances.empty());
  EXPECT_TRUE(list->nodes[2].mig_relayout);
  EXPECT_EQ(mig::FormatPlacements(list->nodes[2].mig_gpus[0]), "2g.12gb@0 2g.12gb@2");
  EXPECT_EQ(list->models.model(list->nodes[2].model).memory_mib, 24 * 1024);
  EXPECT_TRUE(list->nodes[3].mig_gpus.empty());

  const std::string header = "sn,cpu_milli,memory_mib,gpu,model,mode,mig\n";
  auto bad = [&](const std::string& row) {
    auto r = ParseNodeCsv(header + row + "\n", "m.csv");
    EXPECT_FALSE(r.ok()) << row;
    return r.ok() ? std::string() : r.error();
  };
  ExpectError(bad("m,1,1,1,V100,mig,dynamic"), "m.csv:2: column 5 (model)",
              "model=\"V100\": not a MIG-capable GPU model we know; expected one of A30");
  ExpectError(bad("m,1,1,1,H100-80GB,mig,"), "m.csv:2", "a mig node needs a mig column");
  ExpectError(bad("m,1,1,1,H100-80GB,mig,3g.45gb=1"), "column 7 (mig): \"3g.45gb=1\"", "3g.45gb");
  ExpectError(bad("m,1,1,1,H100-80GB,mig,3g.40gb=3"), "column 7 (mig)", "3g.40gb");
  ExpectError(bad("m,1,1,2,T4,,dynamic"),
              "column 7 (mig): \"dynamic\" is a MIG layout for a node "
              "not in mode mig",
              "empty unless the mode column says mig");
  ExpectError(bad("m,1,1,0,H100-80GB,mig,dynamic"), "column 4 (gpu): \"0\" is 0 for a mig node",
              "1 or more GPUs");
}

TEST(PodCsvTest, MigProfileRequests) {
  ModelTable models;
  const int h100 = *models.Intern("H100-80GB", 80 * 1024);
  auto list = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,mig_profile\n"
      "a,1000,1024,1,0,,3g.40gb\n"
      "b,1000,1024,1,0,H100-80GB,1g.10gb+me\n"
      "c,1000,1024,1,500,,\n",
      "p.csv", models);
  ASSERT_TRUE(list.ok()) << list.error();
  EXPECT_EQ(list->requests[0].mig_profile, MigProfileId("3g.40gb"));
  EXPECT_EQ(list->requests[0].gpu_count, 1);
  EXPECT_TRUE(list->requests[1].allowed == ModelSet::Of(h100));
  EXPECT_FALSE(list->requests[2].mig());
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,mig_profile\n";
  auto bad = [&](const std::string& row) {
    auto r = ParsePodCsv(header + row + "\n", "p.csv", models);
    EXPECT_FALSE(r.ok()) << row;
    return r.ok() ? std::string() : r.error();
  };
  ExpectError(bad("x,1,1,2,0,3g.40gb"),
              "p.csv:2: column 4 (num_gpu): \"2\" is not 1 for a MIG request",
              "1 (one instance) when mig_profile is given");
  ExpectError(bad("x,1,1,1,300,3g.40gb"),
              "column 5 (gpu_milli): \"300\" is a GPU share for a MIG "
              "request",
              "0 or empty");
  ExpectError(bad("x,1,1,1,0,3g.45gb"), "column 6 (mig_profile): \"3g.45gb\"",
              "no GPU model has it; expected one of 1g.6gb");
  auto share = ParsePodCsv(
      "name,cpu_milli,memory_mib,num_gpu,gpu_core_percent,gpu_mem_gib,mig_profile\n"
      "a,1,1,1,0,,7g.80gb\n"
      "b,1,1,1,0,4,7g.80gb\n",
      "s.csv", models);
  ASSERT_FALSE(share.ok());
  ExpectError(share.error(),
              "s.csv:3: column 6 (gpu_mem_gib): \"4\" is a GPU share for a MIG request",
              "0 or empty");
}

TEST(TraceFileTest, MissingFileIsAnError) {
  auto r = LoadNodeCsv("/nonexistent/nodes.csv");
  ASSERT_FALSE(r.ok());
  ExpectError(r.error(), "/nonexistent/nodes.csv", "cannot open");
}

}  // namespace
}  // namespace tessera::placement
