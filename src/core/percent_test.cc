// Tests for Percent and ParsePercent.
#include "core/percent.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_CORE_LIMIT";

static_assert(Percent::Full().value() == 100);
static_assert(!Percent::FromInt(101).has_value());

TEST(PercentTest, FromIntAcceptsZeroToHundredOnly) {
  EXPECT_EQ(Percent::FromInt(0)->value(), 0);
  EXPECT_EQ(Percent::FromInt(100)->value(), 100);
  EXPECT_EQ(Percent::FromInt(-1), std::nullopt);
  EXPECT_EQ(Percent::FromInt(101), std::nullopt);
  EXPECT_EQ(Percent::FromInt(INT64_MIN), std::nullopt);
  EXPECT_EQ(Percent().value(), 0);
  EXPECT_DOUBLE_EQ(Percent::FromInt(25)->fraction(), 0.25);
  EXPECT_LT(*Percent::FromInt(30), *Percent::FromInt(31));
}

TEST(ParsePercentTest, AcceptsWholeNumbersInTheRange) {
  EXPECT_EQ(*ParsePercent("1", kName, 1, 100), *Percent::FromInt(1));
  EXPECT_EQ(*ParsePercent(" 50 ", kName, 1, 100), *Percent::FromInt(50));
  EXPECT_EQ(*ParsePercent("100", kName, 1, 100), Percent::Full());
  EXPECT_EQ(*ParsePercent("0", kName), Percent());
}

TEST(ParsePercentTest, RejectsOutsideTheRange) {
  EXPECT_TRUE(IsRejected(ParsePercent("0", kName, 1, 100), kName, "0",
                         {"0 is out of range; expected a whole percentage from 1 to 100"}));
  EXPECT_TRUE(
      IsRejected(ParsePercent("101", kName, 1, 100), kName, "101", {"101 is out of range"}));
  EXPECT_TRUE(IsRejected(ParsePercent("19", kName, 20, 99), kName, "19", {"from 20 to 99"}));
}

TEST(ParsePercentTest, RejectsAnythingButDigits) {
  EXPECT_TRUE(IsRejected(ParsePercent("", kName, 1, 100), kName, "", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParsePercent("-5", kName, 1, 100), kName, "-5", {"negative"}));
  EXPECT_TRUE(IsRejected(ParsePercent("50%", kName, 1, 100), kName, "50%", {"not a number"}));
  EXPECT_TRUE(
      IsRejected(ParsePercent("12.5", kName, 1, 100), kName, "12.5", {"not a whole number"}));
  EXPECT_TRUE(IsRejected(ParsePercent("half", kName, 1, 100), kName, "half", {"not a number"}));
  EXPECT_TRUE(IsRejected(ParsePercent("99999999999999999999", kName, 1, 100), kName,
                         "99999999999999999999", {"too large"}));
}

TEST(ParsePercentTest, ClampsTheRangeToZeroToHundred) {
  EXPECT_TRUE(IsRejected(ParsePercent("150", kName, -5, 500), kName, "150", {"from 0 to 100"}));
  EXPECT_EQ(*ParsePercent("100", kName, -5, 500), Percent::Full());
}

}  // namespace
}  // namespace tessera
