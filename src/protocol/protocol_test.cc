// The wire protocol's parser: what it accepts, and that every rejection names the bad token.
#include "protocol/protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::protocol {
namespace {

using ::testing::HasSubstr;

TEST(ProtocolTest, ParsesVerbAndFields) {
  auto m = ParseMessage("HELLO version=1 container=web-1 mem=2147483648,none visible=0,GPU-ab-12");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->verb, "HELLO");
  EXPECT_EQ(m->Get("container"), "web-1");
  EXPECT_EQ(m->Get("mem"), "2147483648,none");
  EXPECT_EQ(m->Get("missing", "fallback"), "fallback");
  EXPECT_EQ(FormatMessage(*m),
            "HELLO container=web-1 mem=2147483648,none version=1 "
            "visible=0,GPU-ab-12");
  auto bare = ParseMessage("STATUS");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->fields.empty());
}

TEST(ProtocolTest, FormatParsesBack) {
  Message m{"OK", {{"container", "3"}, {"process", "17"}, {"visible", "1,0"}}};
  auto back = ParseMessage(FormatMessage(m));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->verb, m.verb);
  EXPECT_EQ(back->fields, m.fields);
}

TEST(ProtocolTest, RejectsMalformedLinesNamingTheToken) {
  struct Case {
    const char* line;
    const char* says;
  } cases[] = {
      {"", "does not start with a verb"},
      {"hello version=1", "must be upper-case"},
      {"TOOLONGVERBTOOLONGVERB", "does not start with a verb"},
      {"HELLO version", "\"version\" is not key=value"},
      {"HELLO Version=1", "key \"Version\""},
      {"HELLO =1", "key \"\""},
      {"HELLO version=", "value of version"},
      {"HELLO container=a;b", "value of container (\"a;b\")"},
      {"HELLO container=a\tb", "value of container"},
      {"HELLO version=1 version=2", "version appears twice"},
      {"HELLO  version=1", "\"\" is not key=value"},
      {"HELLO version=1 ", "\"\" is not key=value"},
  };
  for (const Case& c : cases) {
    auto m = ParseMessage(c.line);
    ASSERT_FALSE(m.ok()) << c.line;
    EXPECT_THAT(m.error(), HasSubstr(c.says)) << c.line;
    EXPECT_THAT(m.error(), HasSubstr("protocol:"));
  }
  EXPECT_FALSE(ParseMessage("HELLO container=" + std::string(513, 'a')).ok());
  EXPECT_FALSE(ParseMessage("HELLO " + std::string(33, 'k') + "=1").ok());
}

}  // namespace
}  // namespace tessera::protocol
