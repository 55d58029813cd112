// Tests for the text helpers behind every parser's error message.
#include "core/text.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera {
namespace {

TEST(TextTest, TrimSpacesRemovesAsciiWhitespaceAtBothEnds) {
  EXPECT_EQ(TrimSpaces("  a b\t\r\n"), "a b");
  EXPECT_EQ(TrimSpaces(" \t\v\f"), "");
  EXPECT_EQ(TrimSpaces(""), "");
}

TEST(TextTest, EqualsIgnoreCaseFoldsAsciiOnly) {
  EXPECT_TRUE(EqualsIgnoreCase("GiB", "gib"));
  EXPECT_FALSE(EqualsIgnoreCase("GiB", "gi"));
  EXPECT_FALSE(EqualsIgnoreCase("\xc3\x84", "\xc3\xa4"));
  EXPECT_TRUE(StartsWithIgnoreCase("gpu-1234", "GPU-"));
  EXPECT_FALSE(StartsWithIgnoreCase("GP", "GPU-"));
}

TEST(TextTest, QuoteValueEscapesQuotesBackslashesAndControlBytes) {
  EXPECT_EQ(QuoteValue("2GiB"), "\"2GiB\"");
  EXPECT_EQ(QuoteValue("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteValue(std::string("a\nb\0c\xff", 6)), "\"a\\x0ab\\x00c\\xff\"");
}

TEST(TextTest, QuoteValueCutsLongValues) {
  const std::string quoted = QuoteValue(std::string(500, 'x'));
  EXPECT_EQ(quoted, "\"" + std::string(96, 'x') + "...\"");
}

TEST(TextTest, InputErrorHasTheStandardForm) {
  EXPECT_EQ(InputError("NAME", "v", "bad", "good"), "NAME=\"v\": bad; expected good");
  EXPECT_EQ(InputError("NAME", "v", "bad", ""), "NAME=\"v\": bad");
}

TEST(TextTest, ParseDigitsAcceptsOnlyDigitsThatFit) {
  uint64_t value = 7;
  EXPECT_EQ(ParseDigits("0042", &value), DigitsError::kNone);
  EXPECT_EQ(value, 42u);
  EXPECT_EQ(ParseDigits("18446744073709551615", &value), DigitsError::kNone);
  EXPECT_EQ(value, UINT64_MAX);
  EXPECT_EQ(ParseDigits("18446744073709551616", &value), DigitsError::kOverflow);
  EXPECT_EQ(ParseDigits("99999999999999999999x", &value), DigitsError::kNotDigits);
  EXPECT_EQ(ParseDigits("", &value), DigitsError::kEmpty);
  EXPECT_EQ(ParseDigits("+1", &value), DigitsError::kNotDigits);
  EXPECT_EQ(ParseDigits(" 1", &value), DigitsError::kNotDigits);
}

}  // namespace
}  // namespace tessera
