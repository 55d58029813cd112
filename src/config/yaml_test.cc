// Tests for the YAML-subset parser: every supported construct, and every refused one with its
// FILE:LINE:COL position.
#include "config/yaml.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::config {
namespace {

YamlNode Parse(std::string_view text) {
  auto parsed = ParseYaml(text, "t.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? *parsed : YamlNode();
}

const YamlNode& Value(const YamlNode& mapping, std::string_view key) {
  static const YamlNode kMissing;
  const YamlEntry* entry = mapping.Find(key);
  EXPECT_NE(entry, nullptr) << "no key " << key;
  return entry != nullptr ? entry->value : kMissing;
}

TEST(ParseYaml, ReadsBlockMappingsWithComments) {
  const YamlNode root = Parse(
      "# leading comment\n"
      "socket: /run/x.sock   # trailing comment\n"
      "\n"
      "sim: true\n"
      "url: http://a:80/b#frag\n"
      "empty:\n");
  ASSERT_EQ(root.kind, YamlNode::Kind::kMapping);
  ASSERT_EQ(root.entries.size(), 4u);
  EXPECT_EQ(root.entries[0].key, "socket");
  EXPECT_EQ(root.entries[0].key_mark.line, 2);
  EXPECT_EQ(root.entries[0].key_mark.column, 1);
  EXPECT_EQ(Value(root, "socket").scalar, "/run/x.sock");
  EXPECT_EQ(Value(root, "socket").mark.column, 9);
  EXPECT_FALSE(Value(root, "socket").quoted);
  EXPECT_EQ(Value(root, "sim").scalar, "true");
  EXPECT_EQ(Value(root, "url").scalar, "http://a:80/b#frag");  // '#' without a blank before it
  EXPECT_EQ(Value(root, "empty").kind, YamlNode::Kind::kNull);
}

TEST(ParseYaml, ReadsNestedMappingsAndSequences) {
  const YamlNode root = Parse(
      "gpus:\n"
      "  0:\n"
      "    policy: 2\n"
      "  1:\n"
      "    max_inst: 4\n"
      "list:\n"
      "  - a\n"
      "  - b c\n"
      "flat:\n"
      "- x\n"
      "- y\n"
      "items:\n"
      "  - name: one\n"
      "    size: 1\n"
      "  -\n"
      "    name: two\n"
      "  - - nested\n"
      "    - again\n"
      "after: z\n");
  const YamlNode& gpus = Value(root, "gpus");
  ASSERT_EQ(gpus.kind, YamlNode::Kind::kMapping);
  EXPECT_EQ(Value(Value(gpus, "0"), "policy").scalar, "2");
  EXPECT_EQ(Value(Value(gpus, "1"), "max_inst").mark.line, 5);
  const YamlNode& list = Value(root, "list");
  ASSERT_EQ(list.kind, YamlNode::Kind::kSequence);
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_EQ(list.items[1].scalar, "b c");
  EXPECT_EQ(list.items[1].mark.column, 5);
  const YamlNode& flat = Value(root, "flat");
  ASSERT_EQ(flat.items.size(), 2u);
  EXPECT_EQ(flat.items[0].scalar, "x");
  const YamlNode& items = Value(root, "items");
  ASSERT_EQ(items.items.size(), 3u);
  EXPECT_EQ(Value(items.items[0], "size").scalar, "1");
  EXPECT_EQ(Value(items.items[1], "name").scalar, "two");
  ASSERT_EQ(items.items[2].kind, YamlNode::Kind::kSequence);
  EXPECT_EQ(items.items[2].items[1].scalar, "again");
  EXPECT_EQ(Value(root, "after").scalar, "z");
}

TEST(ParseYaml, ReadsQuotedScalarsAndEscapes) {
  const YamlNode root = Parse(
      "single: 'it''s # not a comment'\n"
      "double: \"tab\\there \\\"q\\\" \\\\ \\x41\\u00e9\\U0001F600\"\n"
      "\"quoted key\": 1\n"
      "'colon: key': 2\n"
      "number_text: '010'\n");
  EXPECT_EQ(Value(root, "single").scalar, "it's # not a comment");
  EXPECT_TRUE(Value(root, "single").quoted);
  EXPECT_EQ(Value(root, "double").scalar, "tab\there \"q\" \\ A\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(Value(root, "quoted key").scalar, "1");
  EXPECT_EQ(Value(root, "colon: key").scalar, "2");
  EXPECT_EQ(Value(root, "number_text").scalar, "010");
}

TEST(ParseYaml, ReadsFlowSequencesOfScalars) {
  const YamlNode root = Parse("a: [x, 'y z', \"w\", 3]  # c\nb: []\nc: [ 1 , 2, ]\n");
  const YamlNode& a = Value(root, "a");
  ASSERT_EQ(a.kind, YamlNode::Kind::kSequence);
  ASSERT_EQ(a.items.size(), 4u);
  EXPECT_EQ(a.items[1].scalar, "y z");
  EXPECT_EQ(a.items[3].scalar, "3");
  EXPECT_EQ(a.items[3].mark.column, 20);
  EXPECT_TRUE(Value(root, "b").items.empty());
  ASSERT_EQ(Value(root, "c").items.size(), 2u);
  EXPECT_EQ(Value(root, "c").items[1].scalar, "2");
}

TEST(ParseYaml, AcceptsALeadingDocumentMarkerCrlfAndBom) {
  const YamlNode root = Parse("\xef\xbb\xbf---\r\na: 1\r\nb: two\r\n");
  EXPECT_EQ(Value(root, "a").scalar, "1");
  EXPECT_EQ(Value(root, "b").scalar, "two");
}

TEST(ParseYaml, EmptyAndCommentOnlyDocumentsAreNull) {
  EXPECT_EQ(Parse("").kind, YamlNode::Kind::kNull);
  EXPECT_EQ(Parse("# nothing\n\n   \n").kind, YamlNode::Kind::kNull);
  EXPECT_EQ(Parse("just text").kind, YamlNode::Kind::kScalar);
}

struct BadYaml {
  const char* name;
  const char* text;
  const char* position;  // "LINE:COL"
  const char* fragment;
};

class ParseYamlRejects : public ::testing::TestWithParam<BadYaml> {};

TEST_P(ParseYamlRejects, WithPositionAndReason) {
  const BadYaml& c = GetParam();
  auto parsed = ParseYaml(c.text, "bad.yaml");
  ASSERT_FALSE(parsed.ok()) << c.name;
  const std::string head = std::string("bad.yaml:") + c.position + ": ";
  EXPECT_EQ(parsed.error().rfind(head, 0), 0u) << c.name << ": " << parsed.error();
  EXPECT_NE(parsed.error().find(c.fragment), std::string::npos) << c.name << ": " << parsed.error();
}

INSTANTIATE_TEST_SUITE_P(
    EveryRefusal, ParseYamlRejects,
    ::testing::Values(
        BadYaml{"anchor", "a: &x 1\n", "1:4", "anchors (&)"},
        BadYaml{"alias", "a: 1\nb: *x\n", "2:4", "aliases (*)"},
        BadYaml{"tag", "a: !!int 1\n", "1:4", "tags (!)"},
        BadYaml{"anchor_key", "&k a: 1\n", "1:1", "anchors (&)"},
        BadYaml{"flow_mapping", "a: {b: 1}\n", "1:4", "flow mappings"},
        BadYaml{"block_scalar", "a: |\n  text\n", "1:4", "block scalars"},
        BadYaml{"folded_scalar", "a: >\n  text\n", "1:4", "block scalars"},
        BadYaml{"complex_key", "? a\n: b\n", "1:1", "complex keys"},
        BadYaml{"directive", "%YAML 1.2\na: 1\n", "1:1", "directives"},
        BadYaml{"second_document", "a: 1\n---\nb: 2\n", "2:1", "second document"},
        BadYaml{"two_markers", "---\n---\n", "2:1", "second document"},
        BadYaml{"document_end", "a: 1\n...\n", "2:1", "document end markers"},
        BadYaml{"tab_indent", "a:\n\tb: 1\n", "2:1", "tab used for indentation"},
        BadYaml{"space_tab_indent", "a:\n  \tb: 1\n", "2:3", "tab used for indentation"},
        BadYaml{"duplicate_key", "a: 1\nb: 2\na: 3\n", "3:1", "duplicate key \"a\" (first at line 1)"},
        BadYaml{"duplicate_nested", "g:\n  0:\n    p: 1\n    p: 2\n", "4:5", "duplicate key \"p\""},
        BadYaml{"bad_indent", "a:\n    b: 1\n  c: 2\n", "3:3", "unexpected indentation"},
        BadYaml{"deeper_after_value", "a: 1\n  b: 2\n", "2:3", "multi-line values"},
        BadYaml{"value_with_colon", "a: b: c\n", "1:5", "cannot hold ': '"},
        BadYaml{"item_in_mapping", "a: 1\n- b\n", "2:1", "a sequence item where a key"},
        BadYaml{"key_in_sequence", "- a\nb: 1\n", "2:1", "expected a sequence item"},
        BadYaml{"not_a_key", "a: 1\njust text\n", "2:1", "expected 'key: value'"},
        BadYaml{"item_on_key_line", "a: - b\n", "1:4", "sequence item cannot start"},
        BadYaml{"unclosed_double", "a: \"abc\n", "1:4", "not closed on this line"},
        BadYaml{"unclosed_single", "a: 'abc\n", "1:4", "not closed on this line"},
        BadYaml{"bad_escape", "a: \"\\q\"\n", "1:5", "unknown escape '\\q'"},
        BadYaml{"short_hex", "a: \"\\x4\"\n", "1:8", "2 hex digits"},
        BadYaml{"surrogate", "a: \"\\ud800\"\n", "1:7", "no Unicode character"},
        BadYaml{"after_quoted", "a: 'x' y\n", "1:8", "unexpected text after the quoted value"},
        BadYaml{"unclosed_flow", "a: [1, 2\n", "1:4", "flow sequence not closed"},
        BadYaml{"nested_flow", "a: [1, [2]]\n", "1:8", "nested flow collections"},
        BadYaml{"flow_mapping_item", "a: [b: 1]\n", "1:6", "mappings inside a flow sequence"},
        BadYaml{"empty_flow_item", "a: [1,,2]\n", "1:7", "empty item"},
        BadYaml{"after_flow", "a: [1] x\n", "1:8", "unexpected text after the flow sequence"},
        BadYaml{"flow_anchor", "a: [&x 1]\n", "1:5", "anchors (&)"},
        BadYaml{"missing_key", ": 1\n", "1:1", "missing key"},
        BadYaml{"control_char", "a: b\x01\n", "1:5", "control character 0x01"},
        BadYaml{"reserved", "a: @x\n", "1:4", "reserved indicator"},
        BadYaml{"content_after_marker", "--- a\n", "1:5", "content after '---'"}),
    [](const ::testing::TestParamInfo<BadYaml>& info) { return std::string(info.param.name); });

TEST(ParseYaml, RefusesNestingDeeperThan64) {
  std::string text;
  for (int i = 0; i < 70; ++i) {
    text += std::string(static_cast<size_t>(i) * 2, ' ') + "k" + std::to_string(i) + ":\n";
  }
  auto parsed = ParseYaml(text, "deep.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().find("nesting deeper than 64"), std::string::npos) << parsed.error();
  std::string shallow;
  for (int i = 0; i < 30; ++i) {
    shallow += std::string(static_cast<size_t>(i) * 2, ' ') + "k" + std::to_string(i) + ":\n";
  }
  EXPECT_TRUE(ParseYaml(shallow, "ok.yaml").ok());
}

}  // namespace
}  // namespace tessera::config
