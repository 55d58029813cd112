// Tests of the extender protocol's JSON: the Go field names kube-scheduler sends and expects,
// both node forms (NodeNames and Nodes), and refusals of malformed bodies.
#include "k8s/extender/wire.h"

#include <gtest/gtest.h>

namespace tessera::extender {
namespace {

using k8s::Json;

TEST(WireTest, ExtenderArgsWithNodeNames) {
  auto args = ParseExtenderArgs(
      R"({"Pod":{"metadata":{"name":"p","namespace":"default","uid":"u"}},"Nodes":null,"NodeNames":["a","b"]})");
  ASSERT_TRUE(args.ok()) << args.error();
  EXPECT_EQ(args->pod["metadata"]["name"], "p");
  EXPECT_EQ(args->nodes, (std::vector<std::string_view>{"a", "b"}));
  EXPECT_FALSE(args->node_objects);
  FilterOutcome out;
  out.fits = {"a"};
  out.failed = {{"b", "tessera: Insufficient cpu", false, "cpu"},
                {"c", "tessera: x", true, "mode"}};
  const Json j = Json::parse(WriteFilterResult(*args, out));
  EXPECT_EQ(j["NodeNames"], Json::array({"a"}));
  EXPECT_TRUE(j["Nodes"].is_null());
  EXPECT_EQ(j["FailedNodes"]["b"], "tessera: Insufficient cpu");
  EXPECT_EQ(j["FailedAndUnresolvableNodes"]["c"], "tessera: x");
  EXPECT_EQ(j["Error"], "");
}

TEST(WireTest, AnswersEscapeWhatJsonStringsMust) {
  // Reasons quote annotations and node names as written: quotes, backslashes, control bytes and
  // UTF-8 must come back from a JSON parser as they went in, at the start, middle and end.
  auto args = ParseExtenderArgs(R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":["a"]})");
  ASSERT_TRUE(args.ok()) << args.error();
  const std::vector<std::string> texts = {"\"quoted\"",
                                          "back\\slash",
                                          "line\nbreak\x01",
                                          "\x1f",
                                          "gr\xc3\xbc\xc3\x9f"
                                          "e",
                                          "plain",
                                          ""};
  for (const std::string& text : texts) {
    FilterOutcome out;
    out.failed = {{"n-" + text, text, false, "cpu"}};
    const Json j = Json::parse(WriteFilterResult(*args, out));
    EXPECT_EQ(j["FailedNodes"]["n-" + text], text);
    EXPECT_EQ(Json::parse(WriteFilterError(text))["Error"], text);
  }
}

TEST(WireTest, ExtenderArgsWithNodeObjectsAnswersWithNodeObjects) {
  auto args = ParseExtenderArgs(
      R"({"pod":{"metadata":{"name":"p"}},"nodes":{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}})");
  ASSERT_TRUE(args.ok()) << args.error();  // keys match ignoring case, as Go's decoder does
  EXPECT_TRUE(args->node_objects);
  EXPECT_EQ(args->nodes, (std::vector<std::string_view>{"a", "b"}));
  FilterOutcome out;
  out.fits = {"b"};
  const Json j = Json::parse(WriteFilterResult(*args, out));
  ASSERT_EQ(j["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["name"], "b");
}

TEST(WireTest, MalformedArgsAreRefusedWithTheKey) {
  auto expect = [](std::string_view body, std::string_view text) {
    auto args = ParseExtenderArgs(body);
    ASSERT_FALSE(args.ok()) << body;
    EXPECT_NE(args.error().find(text), std::string::npos) << args.error();
  };
  expect("{", "not valid JSON");
  expect("[]", "JSON array; expected an object");
  expect(R"({"NodeNames":["a"]})", "Pod is missing");
  expect(R"({"Pod":"x","NodeNames":["a"]})", "Pod is string");
  expect(R"({"Pod":{}})", "neither NodeNames nor Nodes");
  // A NUL byte ends the input for the JSON parser: what follows it must not be half read, by the
  // quick reading of kube-scheduler's name list or by the whole one.
  for (auto read : {&ParseExtenderArgs, &ParseExtenderArgsWhole}) {
    const std::string nul("{\"Pod\":{}}\0x\",\"NodeNames\":[\"a\"]}", 32);
    auto args = read(nul);
    ASSERT_FALSE(args.ok());
    EXPECT_NE(args.error().find("a NUL byte at offset 10"), std::string::npos) << args.error();
  }
  expect(R"({"Pod":{},"NodeNames":"a"})", "NodeNames is string");
  expect(R"({"Pod":{},"NodeNames":[1]})", "NodeNames holds a number");
  expect(R"({"Pod":{},"Nodes":{"items":[{}]}})", "no metadata.name");
}

// The quick reading of kube-scheduler's NodeNames (names read from the end of the body) gives what
// the whole reading gives, on bodies in kube-scheduler's form and on every near miss of it.
void ExpectSameAsWhole(std::string_view body) {
  auto quick = ParseExtenderArgs(body);
  auto whole = ParseExtenderArgsWhole(body);
  ASSERT_EQ(quick.ok(), whole.ok()) << body;
  if (!quick.ok()) {
    EXPECT_EQ(quick.error(), whole.error()) << body;
    return;
  }
  EXPECT_EQ(quick->pod, whole->pod) << body;
  EXPECT_EQ(quick->nodes, whole->nodes) << body;
  EXPECT_EQ(quick->node_objects, whole->node_objects) << body;
  EXPECT_EQ(quick->node_list, whole->node_list) << body;
}

TEST(WireTest, KubeSchedulersNodeNamesReadQuicklyAreReadAsTheWholeBody) {
  const std::string pod =
      R"({"metadata":{"name":"p","annotations":{"k":"\"NodeNames\":[\"x\"]}"}}})";
  const std::vector<std::string> bodies = {
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["a","node-2.example","c"]})",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":[]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["only"]})",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["esc\u0061ped","b"]})",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["gr\u00fc\u00df","b"]})",
      "{\"Pod\":" + pod + ",\"NodeNames\":[\"gr\xc3\xbc\"]}",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["a", "b"]})",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"NodeNames":["a","b"] })",
      R"({"Pod":)" + pod + R"(,"Nodes":null,"nodenames":["a","b"]})",
      R"({"Pod":)" + pod + R"(,"NodeNames":["x"],"NodeNames":["a","b"]})",
      R"({"Pod":)" + pod + R"(,"nodeNames":["x"],"NodeNames":["a"]})",
      R"({"Pod":)" + pod + R"(,"Nodes":{"items":[{"metadata":{"name":"z"}}]},"NodeNames":["a"]})",
      R"({"Pod":{"metadata":{"name":"p"},"NodeNames":["a"]})",
      R"({"Pod":{"metadata":{"name":"p"}},"x":{"NodeNames":["a"]})",
      R"({"Pod":{"metadata":{"name":"p"}},"x":"NodeNames":["a"]})",
      R"({"Pod":"p","NodeNames":["a"]})",
      R"({"NodeNames":["a"]})",
      R"("NodeNames":["a"]})",
      R"(["NodeNames":["a"]})",
      R"({"Pod":{},"NodeNames":["a""b"]})",
      R"({"Pod":{},"NodeNames":["a",]})",
      R"({"Pod":{},"NodeNames":[,"a"]})",
      R"({"Pod":{},"NodeNames":["a"]}})",
      R"({"Pod":{},"NodeNames":[1,"a"]})",
      R"({"Pod":{},"NodeNames":"a"]})",
      R"({"Pod":{},"NodeNames":["a\"b"]})",
      R"({"Pod":{},"NodeNames":["\\"]})",
      "{\"Pod\":{},\"NodeNames\":[\"a\tb\"]}",
      R"({"Pod":{},"NodeNames":["a"]})",
      R"({"Pod":{},"NodeNames":[""]})",
      R"(]})",
      R"(})",
      "",
  };
  for (const std::string& body : bodies) ExpectSameAsWhole(body);
  // Every cut and every one-byte change of a body in kube-scheduler's form.
  const std::string base =
      R"({"Pod":{"metadata":{"name":"p"}},"Nodes":null,"NodeNames":["a","bc"]})";
  for (size_t i = 0; i <= base.size(); ++i) ExpectSameAsWhole(base.substr(0, i));
  for (size_t i = 0; i < base.size(); ++i) {
    for (char c : std::string("\"\\,[]{}: a\x01\xc3")) {
      std::string changed = base;
      changed[i] = c;
      ExpectSameAsWhole(changed);
    }
  }
}

TEST(WireTest, PrioritiesAndBinding) {
  const Json p = Json::parse(WritePriorities({{"a", 10}, {"b", 3}}));
  EXPECT_EQ(p, Json::parse(R"([{"Host":"a","Score":10},{"Host":"b","Score":3}])"));
  auto b = ParseBindingArgs(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":"n"})");
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(b->pod_name, "p");
  EXPECT_EQ(b->pod_namespace, "ns");
  EXPECT_EQ(b->pod_uid, "u");
  EXPECT_EQ(b->node, "n");
  auto missing = ParseBindingArgs(R"({"PodName":"p","PodNamespace":"ns","PodUID":"u"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("Node is missing"), std::string::npos);
  EXPECT_EQ(Json::parse(WriteBindingResult("")), Json::parse(R"({"Error":""})"));
  EXPECT_EQ(Json::parse(WriteFilterError("boom"))["Error"], "boom");
}

}  // namespace
}  // namespace tessera::extender
