// Tests for ParseBoolFlag.
#include "core/bool_flag.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_DISABLE";

TEST(ParseBoolFlagTest, AcceptsTheFourSpellingsInAnyCase) {
  for (std::string_view text : {"1", "true", "TRUE", "True", "yes", "YES", "on", "On", " 1 "}) {
    Result<bool> result = ParseBoolFlag(text, kName);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_TRUE(*result) << text;
  }
  for (std::string_view text : {"0", "false", "FALSE", "no", "No", "off", "OFF", "\t0\n"}) {
    Result<bool> result = ParseBoolFlag(text, kName);
    ASSERT_TRUE(result.ok()) << result.error();
    EXPECT_FALSE(*result) << text;
  }
}

TEST(ParseBoolFlagTest, RejectsEverythingElse) {
  EXPECT_TRUE(IsRejected(ParseBoolFlag("", kName), kName, "", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParseBoolFlag("  ", kName), kName, "  ", {"empty value"}));
  for (std::string_view text : {"2", "-1", "maybe", "truee", "y", "n", "t", "01", "1 0"}) {
    EXPECT_TRUE(IsRejected(ParseBoolFlag(text, kName), kName, text,
                           {"not a flag; expected 1 or 0, true or false, yes or no, on or off"}));
  }
}

}  // namespace
}  // namespace tessera
