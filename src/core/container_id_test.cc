// Tests for container id validation.
#include "core/container_id.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_CONTAINER";

TEST(ContainerIdTest, AcceptsTheAllowedAlphabetUpTo64Characters) {
  for (std::string_view id : {"a", "web-1", "A_b.c-9", "...", "0", "pod_7f9c.ctr-2"}) {
    Result<std::string> result = ParseContainerId(id, kName);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_EQ(*result, id);
    EXPECT_TRUE(IsValidContainerId(id));
  }
  const std::string longest(64, 'x');
  EXPECT_TRUE(ParseContainerId(longest, kName).ok());
}

TEST(ContainerIdTest, RejectsEmpty) {
  EXPECT_TRUE(IsRejected(ParseContainerId("", kName), kName, "",
                         {"empty value; expected 1 to 64 characters from A-Z"}));
  EXPECT_FALSE(IsValidContainerId(""));
}

TEST(ContainerIdTest, RejectsMoreThan64Characters) {
  const std::string id(65, 'x');
  EXPECT_TRUE(IsRejected(ParseContainerId(id, kName), kName, id, {"65 characters is too long"}));
  EXPECT_FALSE(IsValidContainerId(id));
}

TEST(ContainerIdTest, RejectsDirectoryNames) {
  for (std::string_view id : {".", ".."}) {
    EXPECT_TRUE(IsRejected(ParseContainerId(id, kName), kName, id, {"directory name"}));
    EXPECT_FALSE(IsValidContainerId(id));
  }
}

TEST(ContainerIdTest, RejectsOtherCharactersNamingTheFirstOne) {
  EXPECT_TRUE(IsRejected(ParseContainerId("web 1", kName), kName, "web 1",
                         {"character 4 (\" \") is not allowed"}));
  EXPECT_TRUE(IsRejected(ParseContainerId("a/b", kName), kName, "a/b",
                         {"character 2 (\"/\") is not allowed"}));
  EXPECT_TRUE(IsRejected(ParseContainerId(" web", kName), kName, " web", {"character 1"}));
  EXPECT_TRUE(
      IsRejected(ParseContainerId("a\nb", kName), kName, "a\nb", {"character 2 (\"\\x0a\")"}));
  EXPECT_TRUE(IsRejected(ParseContainerId("caf\xc3\xa9", kName), kName, "caf\xc3\xa9",
                         {"character 4 (\"\\xc3\")"}));
  for (std::string_view id : {"a:b", "a*", "a=b", "a,b"}) {
    EXPECT_FALSE(IsValidContainerId(id)) << id;
  }
}

}  // namespace
}  // namespace tessera
