// Tests for ParseUnsigned, the whole-number parser behind weights and priorities.
#include "core/number.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_WEIGHT";

TEST(ParseUnsignedTest, AcceptsWholeNumbersInRange) {
  EXPECT_EQ(*ParseUnsigned("1", kName, 1, 1024), 1u);
  EXPECT_EQ(*ParseUnsigned(" 1024 ", kName, 1, 1024), 1024u);
  EXPECT_EQ(*ParseUnsigned("0007", kName, 1, 1024), 7u);
  EXPECT_EQ(*ParseUnsigned("18446744073709551615", kName, 0, UINT64_MAX), UINT64_MAX);
}

TEST(ParseUnsignedTest, RejectsWithTheRangeInTheMessage) {
  EXPECT_TRUE(IsRejected(ParseUnsigned("0", kName, 1, 1024), kName, "0",
                         {"0 is out of range; expected a whole number from 1 to 1024"}));
  EXPECT_TRUE(
      IsRejected(ParseUnsigned("1025", kName, 1, 1024), kName, "1025", {"1025 is out of range"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("", kName, 1, 1024), kName, "", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("  ", kName, 1, 1024), kName, "  ", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("-3", kName, 1, 1024), kName, "-3",
                         {"negative numbers are not allowed"}));
  EXPECT_TRUE(
      IsRejected(ParseUnsigned("1.5", kName, 1, 1024), kName, "1.5", {"not a whole number"}));
  EXPECT_TRUE(
      IsRejected(ParseUnsigned("1e3", kName, 1, 1024), kName, "1e3", {"not a whole number"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("ten", kName, 1, 1024), kName, "ten", {"not a number"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("+3", kName, 1, 1024), kName, "+3", {"not a number"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("0x10", kName, 1, 1024), kName, "0x10", {"not a number"}));
  EXPECT_TRUE(IsRejected(ParseUnsigned("99999999999999999999", kName, 1, 1024), kName,
                         "99999999999999999999", {"too large"}));
}

TEST(ParseUnsignedTest, UsesTheCallersDescriptionOfWhatIsAllowed) {
  EXPECT_TRUE(IsRejected(ParseUnsigned("x", kName, 1, 9, "a digit"), kName, "x",
                         {"not a number; expected a digit"}));
}

}  // namespace
}  // namespace tessera
