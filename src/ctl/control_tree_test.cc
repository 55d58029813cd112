// Tests of ControlTree against a small in-test NodeControl: every path listed and read, every
// writable file written, and a table of refused writes that must each give a reason naming the
// path, the value and what is allowed while leaving the node exactly as it was.
//
// Must not: touch the file system, FUSE or any daemon (fuse_mount_test.cc covers the mount).
#include "ctl/control_tree.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/text.h"

namespace tessera::ctl {
namespace {

// The daemon's side, kept in memory. Setters apply what they are given (the tree's checks are
// what is under test) unless `refusal` is set, in which case they refuse with it.
class FakeNode : public NodeControl {
 public:
  FakeNode() {
    state.version = "tessera 0.1.0-test";
    state.default_memsize = GiB(4);

    GpuState gpu0;
    gpu0.index = 0;
    gpu0.policy = ArbiterPolicy::kWeightedPreemptive;
    gpu0.max_inst = 8;
    gpu0.prio_ratio = *Percent::FromInt(50);
    gpu0.memory_free = GiB(10);
    gpu0.containers.push_back(
        ContainerState{"web", 2, false, GiB(4), GiB(1), {{101, MiB(512)}, {102, MiB(512)}}});
    gpu0.containers.push_back(
        ContainerState{"batch", 3, true, std::nullopt, MiB(256), {{201, MiB(256)}}});

    GpuState gpu1;
    gpu1.index = 1;
    gpu1.policy = ArbiterPolicy::kFair;
    gpu1.max_inst = 4;
    gpu1.prio_ratio = *Percent::FromInt(30);
    gpu1.memory_free = MiB(512);
    gpu1.containers.push_back(ContainerState{"web", 1, false, GiB(2), Bytes(0), {}});

    // Listed out of order on purpose: the tree sorts.
    state.gpus = {gpu1, gpu0};
    Recompute();
  }

  NodeSnapshot Snapshot() const override { return state; }

  Status SetDefaultMemsize(Bytes memsize) override {
    return Apply([&] { state.default_memsize = memsize; });
  }
  Status SetPolicy(int gpu, ArbiterPolicy policy) override {
    return Apply([&] { Gpu(gpu).policy = policy; });
  }
  Status SetMaxInst(int gpu, int max_inst) override {
    return Apply([&] { Gpu(gpu).max_inst = max_inst; });
  }
  Status SetPrioRatio(int gpu, Percent prio_ratio) override {
    return Apply([&] { Gpu(gpu).prio_ratio = prio_ratio; });
  }
  Status SetWeight(int gpu, std::string_view container, int weight) override {
    return Apply([&] { Container(gpu, container).weight = weight; });
  }
  Status SetMemsize(int gpu, std::string_view container, Bytes memsize, bool force) override {
    last_force = force;
    return Apply([&] { Container(gpu, container).memsize = memsize; });
  }
  Status SetHighPriority(int gpu, std::string_view container, bool high_priority) override {
    return Apply([&] { Container(gpu, container).high_priority = high_priority; });
  }

  GpuState& Gpu(int index) {
    for (GpuState& gpu : state.gpus) {
      if (gpu.index == index) {
        return gpu;
      }
    }
    ADD_FAILURE() << "no GPU " << index;
    return state.gpus.front();
  }
  ContainerState& Container(int gpu, std::string_view id) {
    for (ContainerState& container : Gpu(gpu).containers) {
      if (container.id == id) {
        return container;
      }
    }
    ADD_FAILURE() << "no container " << id << " on GPU " << gpu;
    return Gpu(gpu).containers.front();
  }

  NodeSnapshot state;
  std::optional<std::string> refusal;
  int setter_calls = 0;
  bool last_force = false;

 private:
  template <typename Change>
  Status Apply(Change change) {
    ++setter_calls;
    if (refusal) {
      return Status::Error(*refusal);
    }
    change();
    Recompute();
    return Status::Ok();
  }
  void Recompute() {
    for (GpuState& gpu : state.gpus) {
      int sum = 0;
      for (const ContainerState& container : gpu.containers) {
        sum += container.weight;
      }
      gpu.free_weight = gpu.max_inst - sum;
    }
  }
};

WriteOptions Writer() {
  WriteOptions options;
  options.writer_may_write = true;
  return options;
}

std::vector<std::string> Names(const std::vector<Entry>& entries) {
  std::vector<std::string> names;
  for (const Entry& entry : entries) {
    names.push_back(entry.name);
  }
  return names;
}

TEST(ControlTreeTest, ListsEveryFolder) {
  FakeNode node;
  ControlTree tree(&node);

  auto root = tree.List("");
  ASSERT_TRUE(root.ok()) << root.error();
  EXPECT_EQ(*root, (std::vector<Entry>{{"version", false, false},
                                       {"default_memsize", false, true},
                                       {"0", true, false},
                                       {"1", true, false}}));
  auto slash = tree.List("/");
  ASSERT_TRUE(slash.ok()) << slash.error();
  EXPECT_EQ(*slash, *root);

  auto gpu = tree.List("0");
  ASSERT_TRUE(gpu.ok()) << gpu.error();
  EXPECT_EQ(*gpu, (std::vector<Entry>{{"policy", false, true},
                                      {"max_inst", false, true},
                                      {"free_weight", false, false},
                                      {"prio_ratio", false, true},
                                      {"batch", true, false},
                                      {"web", true, false}}));
  auto gpu1 = tree.List("/1/");
  ASSERT_TRUE(gpu1.ok()) << gpu1.error();
  EXPECT_EQ(Names(*gpu1),
            (std::vector<std::string>{"policy", "max_inst", "free_weight", "prio_ratio", "web"}));

  auto container = tree.List("0/web");
  ASSERT_TRUE(container.ok()) << container.error();
  EXPECT_EQ(*container, (std::vector<Entry>{{"weight", false, true},
                                            {"memsize", false, true},
                                            {"highprio", false, true},
                                            {"meminfo", false, false},
                                            {"id", false, false}}));
}

TEST(ControlTreeTest, ReadsEveryFile) {
  FakeNode node;
  ControlTree tree(&node);
  const std::vector<std::pair<std::string, std::string>> files = {
      {"version", "tessera 0.1.0-test\n"},
      {"default_memsize", "4294967296\n"},
      {"0/policy", "2\n"},
      {"0/max_inst", "8\n"},
      {"0/free_weight", "3\n"},
      {"0/prio_ratio", "50\n"},
      {"0/web/weight", "2\n"},
      {"0/web/memsize", "4294967296\n"},
      {"0/web/highprio", "0\n"},
      // Free: the limit minus usage (3GiB), under the device's free 10GiB.
      {"0/web/meminfo", "Free: 3221225472\nPID: 101 Mem: 536870912\nPID: 102 Mem: 536870912\n"},
      {"0/web/id", "web\n"},
      {"0/batch/weight", "3\n"},
      {"0/batch/memsize", "unlimited\n"},
      {"0/batch/highprio", "1\n"},
      // Unlimited: the device's free memory.
      {"0/batch/meminfo", "Free: 10737418240\nPID: 201 Mem: 268435456\n"},
      {"0/batch/id", "batch\n"},
      {"1/policy", "0\n"},
      {"1/max_inst", "4\n"},
      {"1/free_weight", "3\n"},
      {"1/prio_ratio", "30\n"},
      {"1/web/weight", "1\n"},
      {"1/web/memsize", "2147483648\n"},
      {"1/web/highprio", "0\n"},
      // The limit leaves 2GiB, but the device has only 512MiB free.
      {"1/web/meminfo", "Free: 536870912\n"},
      {"1/web/id", "web\n"},
  };
  for (const auto& [path, text] : files) {
    auto read = tree.Read(path);
    ASSERT_TRUE(read.ok()) << path << ": " << read.error();
    EXPECT_EQ(*read, text) << path;
    auto with_slash = tree.Read("/" + path);
    ASSERT_TRUE(with_slash.ok()) << path << ": " << with_slash.error();
    EXPECT_EQ(*with_slash, text) << path;

    auto stat = tree.Stat(path);
    ASSERT_TRUE(stat.ok()) << path << ": " << stat.error();
    EXPECT_FALSE(stat->is_directory) << path;
    EXPECT_EQ(stat->name, path.substr(path.rfind('/') + 1));
  }
  node.state.default_memsize.reset();
  EXPECT_EQ(*tree.Read("default_memsize"), "unlimited\n");
}

TEST(ControlTreeTest, StatTellsFoldersFromFilesAndWhatIsWritable) {
  FakeNode node;
  ControlTree tree(&node);
  EXPECT_EQ(*tree.Stat(""), (Entry{"", true, false}));
  EXPECT_EQ(*tree.Stat("0"), (Entry{"0", true, false}));
  EXPECT_EQ(*tree.Stat("0/web"), (Entry{"web", true, false}));
  EXPECT_EQ(*tree.Stat("0/web/memsize"), (Entry{"memsize", false, true}));
  EXPECT_EQ(*tree.Stat("0/free_weight"), (Entry{"free_weight", false, false}));
  EXPECT_FALSE(tree.Stat("0/ghost").ok());
  EXPECT_FALSE(tree.Read("0").ok());
  EXPECT_FALSE(tree.List("0/policy").ok());
}

TEST(ControlTreeTest, MissingPathsAreNotFoundWithTheirName) {
  FakeNode node;
  ControlTree tree(&node);
  for (const char* path :
       {"nope", "2/policy", "00/policy", "+0/policy", "0/ghost/weight", "0/web/nope",
        "0/web/weight/more", "0/policy/x", "version/x", "1/batch/weight", "-1/policy"}) {
    auto read = tree.Read(path);
    ASSERT_FALSE(read.ok()) << path;
    EXPECT_NE(read.error().find(QuoteValue(path)), std::string::npos) << read.error();
    EXPECT_NE(read.error().find("no such file"), std::string::npos) << read.error();
    EXPECT_FALSE(tree.Stat(path).ok()) << path;
  }
}

TEST(ControlTreeTest, AcceptedWritesReachTheNode) {
  FakeNode node;
  ControlTree tree(&node);
  auto write = [&](std::string_view path, std::string_view text) {
    const Status status = tree.Write(path, text, Writer());
    EXPECT_TRUE(status.ok()) << path << " <- " << text << ": " << status.message();
  };

  write("0/policy", "4\n");  // as `echo 4 >` writes it
  EXPECT_EQ(node.Gpu(0).policy, ArbiterPolicy::kWeak);
  write("0/policy", "native");
  EXPECT_EQ(node.Gpu(0).policy, ArbiterPolicy::kNative);
  write("1/prio_ratio", "99");
  EXPECT_EQ(node.Gpu(1).prio_ratio.value(), 99);
  write("1/prio_ratio", "20");
  EXPECT_EQ(node.Gpu(1).prio_ratio.value(), 20);

  // weight up to free_weight (3) + its own (2) = 5; then max_inst down to exactly the sum (8).
  write("0/web/weight", "5");
  EXPECT_EQ(node.Container(0, "web").weight, 5);
  EXPECT_EQ(*tree.Read("0/free_weight"), "0\n");
  write("0/max_inst", "8");
  write("0/web/weight", "1");
  write("0/max_inst", "4");
  EXPECT_EQ(node.Gpu(0).max_inst, 4);
  EXPECT_EQ(*tree.Read("0/free_weight"), "0\n");
  write("1/max_inst", "256");
  EXPECT_EQ(node.Gpu(1).max_inst, 256);

  write("0/web/memsize", "8GiB");
  EXPECT_EQ(node.Container(0, "web").memsize, GiB(8));
  write("0/web/memsize", "1073741824\n");  // a plain number is bytes, not GiB
  EXPECT_EQ(node.Container(0, "web").memsize, GiB(1));
  EXPECT_FALSE(node.last_force);
  write("0/batch/memsize", "1.5GiB");
  EXPECT_EQ(node.Container(0, "batch").memsize, MiB(1536));
  EXPECT_EQ(*tree.Read("0/batch/memsize"), "1610612736\n");

  // Below usage (1GiB) only when forced, and the setter is told.
  WriteOptions forced = Writer();
  forced.force = true;
  EXPECT_TRUE(tree.Write("0/web/memsize", "512MiB", forced).ok());
  EXPECT_EQ(node.Container(0, "web").memsize, MiB(512));
  EXPECT_TRUE(node.last_force);

  write("0/web/highprio", "1");
  EXPECT_TRUE(node.Container(0, "web").high_priority);
  write("0/batch/highprio", " 0 ");
  EXPECT_FALSE(node.Container(0, "batch").high_priority);

  write("default_memsize", "6G");
  EXPECT_EQ(node.state.default_memsize, GiB(6));
  write("/default_memsize", "100");
  EXPECT_EQ(node.state.default_memsize, Bytes(100));
}

struct BadWrite {
  std::string path;
  std::string text;
  std::vector<std::string> fragments;  // each must appear in the reason
  bool writer = true;                  // the door says the caller may write
  bool force = false;
};

// The refusals: each must name the path and value, say why and what is allowed, and change
// nothing (not even call a setter).
TEST(ControlTreeTest, RefusedWritesGiveAReasonAndChangeNothing) {
  const std::string long_value(10000, '1');
  const std::vector<BadWrite> table = {
      // policy
      {"0/policy", "7", {"unknown policy", "0 fair", "5 native"}},
      {"0/policy", "-1", {"0 fair", "5 native"}},
      {"0/policy", "abc", {"unknown policy", "0 fair"}},
      {"0/policy", "", {"empty value", "0 fair"}},
      {"0/policy", "\n", {"empty value"}},
      {"0/policy", "3abc", {"0 fair"}},
      {"0/policy", "2 3", {"0 fair"}},
      {"0/policy", std::string("2\0", 2), {"0 fair"}},
      {"0/policy", "2" + std::string(100, ' '), {"101 bytes long", "at most 64 bytes"}},
      {"0/policy", long_value, {"10000 bytes long", "at most 64 bytes"}},
      // prio_ratio
      {"0/prio_ratio", "19", {"19 is out of range", "from 20 to 99"}},
      {"0/prio_ratio", "100", {"100 is out of range", "from 20 to 99"}},
      {"0/prio_ratio", "50%", {"from 20 to 99"}},
      {"0/prio_ratio", "50.5", {"from 20 to 99"}},
      // max_inst: 1..256 and not below the weights on GPU 0 (2 + 3)
      {"0/max_inst", "4", {"below the sum of the weights", "(5)", "from 5 to 256"}},
      {"0/max_inst", "0", {"out of range", "from 1 to 256"}},
      {"0/max_inst", "257", {"257 is out of range", "from 1 to 256"}},
      {"0/max_inst", "8abc", {"not a number", "from 1 to 256"}},
      {"0/max_inst", "99999999999999999999999", {"too large"}},
      // weight: 1..max_inst and within free_weight (3) + its own (2)
      {"0/web/weight", "6", {"more than GPU 0 has free", "from 1 to 5", "free_weight 3"}},
      {"0/web/weight", "9", {"9 is out of range", "max_inst (8)"}},
      {"0/web/weight", "0", {"0 is out of range", "from 1 to max_inst"}},
      {"1/web/weight", "-2", {"negative numbers are not allowed"}},
      {"1/web/weight", "5", {"out of range", "max_inst (4)"}},
      // memsize: web uses 1GiB on GPU 0
      {"0/web/memsize", "512MiB", {"below what the container uses", "1073741824", "forced"}},
      {"0/web/memsize", "1", {"below what the container uses"}},
      {"0/web/memsize", "0", {"refuse every allocation", "at least 1 byte"}},
      {"0/web/memsize", "0", {"refuse every allocation"}, true, true},
      {"0/web/memsize", "abc", {"a size in bytes such as 4294967296"}},
      {"0/web/memsize", "-1GiB", {"negative", "a size in bytes"}},
      {"0/web/memsize", "1.5", {"needs a unit", "a size in bytes"}},
      {"0/web/memsize", "4GiBx", {"a size in bytes"}},
      {"0/web/memsize", "unlimited", {"a size in bytes"}},
      {"0/web/memsize", "99999999999999999999999", {"too large"}},
      {"default_memsize", "0", {"refuse every allocation"}},
      {"default_memsize", "", {"empty value"}},
      // highprio
      {"0/web/highprio", "2", {"2 is out of range", "0 or 1"}},
      {"0/web/highprio", "true", {"0 or 1"}},
      {"0/web/highprio", "-1", {"0 or 1"}},
      // read-only files and folders
      {"version", "x", {"read-only file", "default_memsize"}},
      {"0/free_weight", "3", {"read-only file", "<gpu>/policy"}},
      {"0/web/meminfo", "Free: 1", {"read-only file"}},
      {"0/web/id", "other", {"read-only file"}},
      {"0", "1", {"a folder, not a file"}},
      {"0/web", "1", {"a folder, not a file"}},
      // unknown paths
      {"0/nope", "2", {"no such file", "<gpu>/policy"}},
      {"nope", "2", {"no such file"}},
      {"2/policy", "2", {"no such file"}},
      {"00/policy", "2", {"no such file"}},
      {"0/ghost/weight", "2", {"no such file"}},
      {"1/batch/weight", "1", {"no such file"}},
      {"0/web/weight/x", "1", {"no such file"}},
      // traversal and malformed paths
      {"0/../x", "2", {"\"..\" are not allowed"}},
      {"0/../default_memsize", "1GiB", {"\"..\" are not allowed"}},
      {"../0/policy", "2", {"\"..\" are not allowed"}},
      {"0/./policy", "2", {"\"..\" are not allowed"}},
      {"0/web/../batch/weight", "1", {"\"..\" are not allowed"}},
      {"0//policy", "2", {"empty path component"}},
      // callers who may not write
      {"0/policy", "2", {"may not write", "root"}, false},
      {"default_memsize", "1GiB", {"may not write"}, false},
      {"0/web/weight", "1", {"may not write"}, false},
  };

  for (const BadWrite& bad : table) {
    SCOPED_TRACE(bad.path + " <- " + QuoteValue(bad.text));
    FakeNode node;
    ControlTree tree(&node);
    const NodeSnapshot before = node.Snapshot();
    WriteOptions options;
    options.writer_may_write = bad.writer;
    options.force = bad.force;

    const Status status = tree.Write(bad.path, bad.text, options);
    ASSERT_FALSE(status.ok());
    const std::string& message = status.message();
    const std::string head = bad.path + "=" + QuoteValue(bad.text) + ": ";
    EXPECT_EQ(message.rfind(head, 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("; expected "), std::string::npos) << message;
    for (const std::string& fragment : bad.fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "\"" << message << "\" lacks \"" << fragment << "\"";
    }
    EXPECT_EQ(node.setter_calls, 0);
    EXPECT_EQ(node.Snapshot(), before);
  }
}

TEST(ControlTreeTest, OverlongAndUnprintablePathsAreQuotedAndRefused) {
  FakeNode node;
  ControlTree tree(&node);
  const NodeSnapshot before = node.Snapshot();
  const std::string long_path = "0/" + std::string(300, 'a');
  const Status status = tree.Write(long_path, "1", Writer());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("control-tree path \"0/aaaa", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("302 bytes long, at most 256"), std::string::npos);
  EXPECT_LT(status.message().size(), 400u);
  EXPECT_FALSE(tree.Read(long_path).ok());

  const Status odd = tree.Write("0/po\nlicy", "1", Writer());
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.message().find('\n'), std::string::npos) << odd.message();
  EXPECT_EQ(node.setter_calls, 0);
  EXPECT_EQ(node.Snapshot(), before);
}

TEST(ControlTreeTest, TheNodesRefusalIsPassedOnUnchanged) {
  FakeNode node;
  ControlTree tree(&node);
  node.refusal = "0/policy=\"3\": GPU 0 is being reset; expected a write after the reset";
  const NodeSnapshot before = node.Snapshot();
  const Status status = tree.Write("0/policy", "3", Writer());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), *node.refusal);
  EXPECT_EQ(node.setter_calls, 1);
  EXPECT_EQ(node.Snapshot(), before);
}

TEST(ControlTreeTest, ScopedViewSeesOnlyItsContainerAndTheGpuReadOnlyFiles) {
  FakeNode node;
  const ControlTree full(&node);
  const ControlTree web = full.ScopedTo("web");
  ASSERT_EQ(web.scope(), std::optional<std::string>("web"));

  EXPECT_EQ(*web.List(""), (std::vector<Entry>{
                               {"version", false, false}, {"0", true, false}, {"1", true, false}}));
  EXPECT_EQ(*web.List("0"),
            (std::vector<Entry>{{"free_weight", false, false}, {"web", true, false}}));
  EXPECT_EQ(*web.List("0/web"), (std::vector<Entry>{{"weight", false, false},
                                                    {"memsize", false, false},
                                                    {"highprio", false, false},
                                                    {"meminfo", false, false},
                                                    {"id", false, false}}));
  EXPECT_EQ(*web.Read("version"), "tessera 0.1.0-test\n");
  EXPECT_EQ(*web.Read("0/free_weight"), "3\n");
  EXPECT_EQ(*web.Read("0/web/weight"), "2\n");
  EXPECT_EQ(*web.Read("1/web/memsize"), "2147483648\n");
  EXPECT_FALSE(web.Stat("0/web/weight")->writable);

  // batch exists only on GPU 0: GPU 1 is not in its view at all.
  const ControlTree batch = full.ScopedTo("batch");
  EXPECT_EQ(Names(*batch.List("")), (std::vector<std::string>{"version", "0"}));
  EXPECT_EQ(Names(*batch.List("0")), (std::vector<std::string>{"free_weight", "batch"}));

  for (const char* path :
       {"default_memsize", "0/policy", "0/max_inst", "0/prio_ratio", "0/batch/weight",
        "0/batch/meminfo", "1/policy", "0/web/../batch/id", "0/batch", "../x"}) {
    EXPECT_FALSE(web.Read(path).ok()) << path;
    EXPECT_FALSE(web.Stat(path).ok()) << path;
  }
  EXPECT_FALSE(web.List("0/batch").ok());
  EXPECT_FALSE(batch.List("1").ok());

  // Writes: none, whatever the path, the value or the caller.
  const NodeSnapshot before = node.Snapshot();
  for (const char* path : {"0/web/weight", "0/web/memsize", "0/web/highprio", "0/policy",
                           "0/batch/weight", "default_memsize", "0/web/../batch/weight"}) {
    const Status status = web.Write(path, "1", Writer());
    ASSERT_FALSE(status.ok()) << path;
    EXPECT_EQ(status.message().rfind(std::string(path) + "=\"1\": ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find("read-only"), std::string::npos) << status.message();
  }
  EXPECT_EQ(node.setter_calls, 0);
  EXPECT_EQ(node.Snapshot(), before);
}

TEST(ControlTreeTest, ReadsFollowTheNodeAsItChanges) {
  FakeNode node;
  ControlTree tree(&node);
  node.Gpu(0).containers.push_back(ContainerState{"new", 1, false, GiB(1), Bytes(0), {}});
  EXPECT_EQ(Names(*tree.List("0")),
            (std::vector<std::string>{"policy", "max_inst", "free_weight", "prio_ratio", "batch",
                                      "new", "web"}));
  node.Gpu(0).containers.clear();
  EXPECT_FALSE(tree.Read("0/web/weight").ok());
  EXPECT_EQ(Names(*tree.List("0")),
            (std::vector<std::string>{"policy", "max_inst", "free_weight", "prio_ratio"}));
}

TEST(ControlTreeTest, ContainersNamedLikeGpuFilesAreHidden) {
  EXPECT_TRUE(IsControlTreeGpuFileName("policy"));
  EXPECT_TRUE(IsControlTreeGpuFileName("free_weight"));
  EXPECT_FALSE(IsControlTreeGpuFileName("web"));
  EXPECT_FALSE(IsControlTreeGpuFileName("weight"));

  FakeNode node;
  node.Gpu(0).containers.push_back(ContainerState{"policy", 1, false, GiB(1), Bytes(0), {}});
  ControlTree tree(&node);
  EXPECT_EQ(Names(*tree.List("0")), (std::vector<std::string>{"policy", "max_inst", "free_weight",
                                                              "prio_ratio", "batch", "web"}));
  EXPECT_EQ(*tree.Read("0/policy"), "2\n");
  EXPECT_FALSE(tree.Read("0/policy/weight").ok());
}

}  // namespace
}  // namespace tessera::ctl
