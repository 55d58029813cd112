// Tests for ParseDuration and FormatDuration: every unit, fractions, ranges and every error path.
#include "core/duration.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

nanoseconds Parse(std::string_view text) {
  auto parsed = ParseDuration(text, "d");
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? *parsed : nanoseconds(-1);
}

TEST(ParseDuration, ReadsEveryUnit) {
  EXPECT_EQ(Parse("7ns"), nanoseconds(7));
  EXPECT_EQ(Parse("100us"), microseconds(100));
  EXPECT_EQ(Parse("100\xc2\xb5s"), microseconds(100));
  EXPECT_EQ(Parse("2ms"), milliseconds(2));
  EXPECT_EQ(Parse("3s"), seconds(3));
  EXPECT_EQ(Parse("4m"), minutes(4));
  EXPECT_EQ(Parse("5h"), hours(5));
  EXPECT_EQ(Parse("  20ms \n"), milliseconds(20));
  EXPECT_EQ(Parse("0s"), nanoseconds(0));
}

TEST(ParseDuration, ReadsFractionsThatAreWholeNanoseconds) {
  EXPECT_EQ(Parse("1.5s"), milliseconds(1500));
  EXPECT_EQ(Parse("0.25ms"), microseconds(250));
  EXPECT_EQ(Parse("1.000000001s"), nanoseconds(1000000001));
  EXPECT_TRUE(
      IsRejected(ParseDuration("1.5ns", "d"), "d", "1.5ns", {"whole number of nanoseconds"}));
  EXPECT_TRUE(IsRejected(ParseDuration("1.0000000001s", "d"), "d", "1.0000000001s", {"9 digits"}));
  EXPECT_TRUE(IsRejected(ParseDuration("1.s", "d"), "d", "1.s", {"after the decimal point"}));
}

TEST(ParseDuration, RejectsMalformedText) {
  EXPECT_TRUE(IsRejected(ParseDuration("", "quota_min"), "quota_min", "", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParseDuration("20", "d"), "d", "20", {"missing unit", "ms"}));
  EXPECT_TRUE(IsRejected(ParseDuration("-2ms", "d"), "d", "-2ms", {"negative"}));
  EXPECT_TRUE(IsRejected(ParseDuration("ms", "d"), "d", "ms", {"not a duration"}));
  EXPECT_TRUE(IsRejected(ParseDuration("2 ms", "d"), "d", "2 ms", {"unknown unit \" ms\""}));
  EXPECT_TRUE(IsRejected(ParseDuration("2MS", "d"), "d", "2MS", {"unknown unit"}));
  EXPECT_TRUE(IsRejected(ParseDuration("1m30s", "d"), "d", "1m30s", {"unknown unit"}));
  EXPECT_TRUE(IsRejected(ParseDuration("99999999999999999999s", "d"), "d", "99999999999999999999s",
                         {"too large"}));
  EXPECT_TRUE(IsRejected(ParseDuration("9999999999h", "d"), "d", "9999999999h", {"too large"}));
}

TEST(ParseDuration, EnforcesTheRangeAndNamesIt) {
  auto low = ParseDuration("50us", "quota_min", microseconds(100), seconds(1));
  EXPECT_TRUE(IsRejected(low, "quota_min", "50us",
                         {"50us is out of range", "from 100us to 1s", "such as 2ms"}));
  auto high = ParseDuration("2s", "quota_max", microseconds(100), seconds(1));
  EXPECT_TRUE(IsRejected(high, "quota_max", "2s", {"2s is out of range"}));
  auto edge = ParseDuration("1s", "quota_max", microseconds(100), seconds(1));
  ASSERT_TRUE(edge.ok()) << edge.error();
  EXPECT_EQ(*edge, seconds(1));
  // The example in the message stays inside the range.
  auto example = ParseDuration("1ms", "r", seconds(1), seconds(10));
  EXPECT_TRUE(IsRejected(example, "r", "1ms", {"such as 1s"}));
}

TEST(FormatDuration, UsesTheLargestWholeUnitAndParsesBack) {
  EXPECT_EQ(FormatDuration(nanoseconds(0)), "0s");
  EXPECT_EQ(FormatDuration(milliseconds(2)), "2ms");
  EXPECT_EQ(FormatDuration(microseconds(1500)), "1500us");
  EXPECT_EQ(FormatDuration(seconds(90)), "90s");
  EXPECT_EQ(FormatDuration(seconds(120)), "2m");
  EXPECT_EQ(FormatDuration(hours(1)), "1h");
  EXPECT_EQ(FormatDuration(nanoseconds(1000000001)), "1000000001ns");
  for (int64_t n : {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{123456789},
                    int64_t{3} * 3600 * 1000000000}) {
    EXPECT_EQ(Parse(FormatDuration(nanoseconds(n))), nanoseconds(n)) << n;
  }
}

}  // namespace
}  // namespace tessera
