// Tests for Bytes arithmetic, ParseBytes, ParseBytesList and FormatBytes.
#include "core/bytes.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "TESSERA_MEM_LIMIT";

// Arithmetic is constexpr and never wraps.
static_assert(Bytes::SaturatingAdd(Bytes::Max(), Bytes(1)) == Bytes::Max());
static_assert(Bytes::SaturatingSub(Bytes(0), Bytes(1)) == Bytes::Zero());
static_assert(GiB(1) == Bytes(1073741824));
static_assert(MiB(1536) < GiB(2));

TEST(BytesTest, SaturatingAddClampsAtMax) {
  EXPECT_EQ(Bytes::SaturatingAdd(Bytes(2), Bytes(3)), Bytes(5));
  EXPECT_EQ(Bytes::SaturatingAdd(Bytes::Max(), Bytes(1)), Bytes::Max());
  EXPECT_EQ(Bytes::SaturatingAdd(Bytes(UINT64_MAX - 1), Bytes(1)), Bytes::Max());
  EXPECT_EQ(Bytes::SaturatingAdd(Bytes::Max(), Bytes::Max()), Bytes::Max());
}

TEST(BytesTest, SaturatingSubClampsAtZero) {
  EXPECT_EQ(Bytes::SaturatingSub(Bytes(5), Bytes(3)), Bytes(2));
  EXPECT_EQ(Bytes::SaturatingSub(Bytes(3), Bytes(5)), Bytes::Zero());
  EXPECT_EQ(Bytes::SaturatingSub(Bytes(0), Bytes::Max()), Bytes::Zero());
  EXPECT_EQ(Bytes::SaturatingSub(Bytes::Max(), Bytes::Max()), Bytes::Zero());
}

TEST(BytesTest, SaturatingMulClampsAtMax) {
  EXPECT_EQ(Bytes::SaturatingMul(Bytes(3), 4), Bytes(12));
  EXPECT_EQ(Bytes::SaturatingMul(Bytes::Max(), 2), Bytes::Max());
  EXPECT_EQ(Bytes::SaturatingMul(Bytes::Max(), 0), Bytes::Zero());
  EXPECT_EQ(Bytes::SaturatingMul(Bytes(uint64_t{1} << 32), uint64_t{1} << 32), Bytes::Max());
  EXPECT_EQ(GiB(UINT64_MAX), Bytes::Max());
  EXPECT_EQ(TiB(uint64_t{1} << 24), Bytes::Max());
  EXPECT_EQ(TiB((uint64_t{1} << 24) - 1), Bytes(UINT64_MAX - kBytesPerTiB + 1));
}

TEST(BytesTest, CheckedArithmeticReportsOverflowInsteadOfWrapping) {
  EXPECT_EQ(Bytes::CheckedAdd(Bytes(1), Bytes(2)), Bytes(3));
  EXPECT_EQ(Bytes::CheckedAdd(Bytes::Max(), Bytes(1)), std::nullopt);
  EXPECT_EQ(Bytes::CheckedAdd(Bytes::Max(), Bytes(0)), Bytes::Max());
  EXPECT_EQ(Bytes::CheckedSub(Bytes(2), Bytes(2)), Bytes(0));
  EXPECT_EQ(Bytes::CheckedSub(Bytes(1), Bytes(2)), std::nullopt);
}

TEST(BytesTest, ComparisonsAreByCount) {
  EXPECT_LT(MiB(1023), GiB(1));
  EXPECT_EQ(MiB(1024), GiB(1));
  EXPECT_GT(KiB(1), Bytes(1023));
  EXPECT_NE(Bytes(1), Bytes(2));
  EXPECT_TRUE(Bytes().is_zero());
}

struct Accepted {
  std::string_view text;
  Bytes expected;
};

class ParseBytesAcceptsTest : public ::testing::TestWithParam<Accepted> {};

TEST_P(ParseBytesAcceptsTest, Parses) {
  Result<Bytes> result = ParseBytes(GetParam().text, kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(*result, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, ParseBytesAcceptsTest,
    ::testing::Values(Accepted{"512MiB", MiB(512)}, Accepted{"2GiB", GiB(2)},
                      Accepted{"1.5GiB", Bytes(GiB(1).count() + MiB(512).count())},
                      Accepted{"1536MiB", MiB(1536)}, Accepted{"64KiB", KiB(64)},
                      Accepted{"100B", Bytes(100)}, Accepted{"1TiB", TiB(1)},
                      // Decimal-looking units are binary, as in cGPU.
                      Accepted{"2G", GiB(2)}, Accepted{"2GB", GiB(2)}, Accepted{"512M", MiB(512)},
                      Accepted{"512MB", MiB(512)}, Accepted{"4K", KiB(4)}, Accepted{"4KB", KiB(4)},
                      Accepted{"3T", TiB(3)}, Accepted{"3TB", TiB(3)},
                      // Case and spaces.
                      Accepted{"2gib", GiB(2)}, Accepted{"2GIB", GiB(2)}, Accepted{"2gb", GiB(2)},
                      Accepted{"7b", Bytes(7)}, Accepted{"  2GiB\t", GiB(2)},
                      Accepted{"2 GiB", GiB(2)},
                      // A bare whole number is GiB; 0 is 0.
                      Accepted{"3", GiB(3)}, Accepted{" 3\n", GiB(3)}, Accepted{"0", Bytes(0)},
                      Accepted{"0B", Bytes(0)}, Accepted{"007MiB", MiB(7)},
                      // Fractions round down to a whole byte.
                      Accepted{"0.5GiB", MiB(512)}, Accepted{"0.3KiB", Bytes(307)},
                      Accepted{"1.000000001GiB", Bytes(1073741825)}, Accepted{"1.25M", KiB(1280)},
                      // The edges of uint64_t.
                      Accepted{"17179869183GiB", Bytes(UINT64_MAX - kBytesPerGiB + 1)},
                      Accepted{"18446744073709551615B", Bytes::Max()},
                      Accepted{"16777215.999999999TiB", Bytes(18446744073709550516u)}));

struct Rejected {
  std::string_view text;
  std::string_view reason;
};

class ParseBytesRejectsTest : public ::testing::TestWithParam<Rejected> {};

TEST_P(ParseBytesRejectsTest, RejectsNamingInputValueAndWhatIsAllowed) {
  EXPECT_TRUE(IsRejected(ParseBytes(GetParam().text, kName), kName, GetParam().text,
                         {GetParam().reason, "; expected a size such as 512MiB"}));
}

INSTANTIATE_TEST_SUITE_P(
    BadSizes, ParseBytesRejectsTest,
    ::testing::Values(
        Rejected{"", "empty value"}, Rejected{"  \t", "empty value"},
        Rejected{"-1GiB", "negative sizes are not allowed"},
        Rejected{"-0", "negative sizes are not allowed"}, Rejected{"abc", "not a size"},
        Rejected{"GiB", "not a size"}, Rejected{"+1GiB", "not a size"},
        Rejected{"12x", "unknown unit \"x\"; units are B, KiB, MiB, GiB and TiB"},
        Rejected{"2PiB", "unknown unit \"PiB\""}, Rejected{"2Q", "unknown unit \"Q\""},
        Rejected{"2GiBs", "unknown unit \"GiBs\""}, Rejected{"1.2.3GiB", "malformed number"},
        Rejected{"1 2GiB", "malformed number"}, Rejected{"1e3", "unexpected character \"3\""},
        Rejected{"1GiB,", "unexpected character \",\""},
        Rejected{"1 G iB", "unexpected character \" \""},
        Rejected{"17179869184GiB", "too large; the largest size is 18446744073709551615 bytes"},
        Rejected{"99999999999999999999", "too large"},
        Rejected{"18446744073709551616B", "too large"}, Rejected{"16777216TiB", "too large"},
        Rejected{"16777215.9999999999TiB", "more than 9 digits after the decimal point"},
        Rejected{"1.5", "a fraction needs a unit"},
        Rejected{"1.0000000001GiB", "more than 9 digits after the decimal point"},
        Rejected{".5GiB", "expected a digit before the decimal point"},
        Rejected{"1.GiB", "expected a digit after the decimal point"},
        Rejected{"1.5B", "a number of bytes must be whole"}));

TEST(ParseBytesTest, MessageMatchesTheDocumentedForm) {
  Result<Bytes> result = ParseBytes("-1GiB", "TESSERA_MEM_LIMIT");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(),
            "TESSERA_MEM_LIMIT=\"-1GiB\": negative sizes are not allowed; expected a size such as "
            "512MiB, 2GiB, 1.5GiB or a whole number of GiB");
}

TEST(ParseBytesTest, ControlCharactersInTheValueAreEscapedInTheMessage) {
  Result<Bytes> result = ParseBytes("1\nGiB", kName);
  EXPECT_TRUE(IsRejected(result, kName, "1\nGiB", {"\\x0a"}));
}

TEST(ParseBytesListTest, ParsesCommaListsInOrder) {
  Result<std::vector<Bytes>> result = ParseBytesList("3GiB,4GiB", kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(*result, (std::vector<Bytes>{GiB(3), GiB(4)}));

  result = ParseBytesList(" 512MiB , 2 ,1.5GiB ", kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(*result, (std::vector<Bytes>{MiB(512), GiB(2), MiB(1536)}));

  result = ParseBytesList("2", kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(*result, std::vector<Bytes>{GiB(2)});
}

TEST(ParseBytesListTest, AcceptsSixteenItemsAndRejectsSeventeen) {
  std::string list = "1GiB";
  for (int i = 1; i < 16; ++i) {
    list += ",1GiB";
  }
  Result<std::vector<Bytes>> result = ParseBytesList(list, kName);
  ASSERT_TRUE(result.ok()) << result.error();
  EXPECT_EQ(result->size(), 16u);
  list += ",1GiB";
  EXPECT_TRUE(
      IsRejected(ParseBytesList(list, kName), kName, list, {"17 items; at most 16 are allowed"}));
}

TEST(ParseBytesListTest, RejectsEmptyListsAndEmptyItems) {
  EXPECT_TRUE(IsRejected(ParseBytesList("", kName), kName, "", {"empty value"}));
  EXPECT_TRUE(IsRejected(ParseBytesList(" ", kName), kName, " ", {"empty value"}));
  EXPECT_TRUE(
      IsRejected(ParseBytesList("3GiB,,4GiB", kName), kName, "3GiB,,4GiB", {"item 2 is empty"}));
  EXPECT_TRUE(IsRejected(ParseBytesList("3GiB,", kName), kName, "3GiB,", {"item 2 is empty"}));
  EXPECT_TRUE(IsRejected(ParseBytesList(",3GiB", kName), kName, ",3GiB", {"item 1 is empty"}));
  EXPECT_TRUE(IsRejected(ParseBytesList(",", kName), kName, ",", {"item 1 is empty"}));
}

TEST(ParseBytesListTest, NamesTheBadItem) {
  EXPECT_TRUE(IsRejected(ParseBytesList("3GiB, abc", kName), kName, "3GiB, abc",
                         {"item 2 (\"abc\"): not a size", "or a comma list of them"}));
  EXPECT_TRUE(IsRejected(ParseBytesList("3GiB,-1GiB", kName), kName, "3GiB,-1GiB",
                         {"item 2 (\"-1GiB\"): negative sizes are not allowed"}));
  EXPECT_TRUE(IsRejected(ParseBytesList("1GiB,17179869184GiB", kName), kName, "1GiB,17179869184GiB",
                         {"item 2", "too large"}));
}

TEST(ParseBytesListTest, ASingleBadItemIsReportedLikeParseBytes) {
  Result<std::vector<Bytes>> result = ParseBytesList("-1GiB", kName);
  EXPECT_TRUE(IsRejected(result, kName, "-1GiB", {"negative sizes are not allowed"}));
  EXPECT_EQ(result.error().find("item"), std::string::npos);
}

TEST(FormatBytesTest, UsesTheLargestExactUnit) {
  EXPECT_EQ(FormatBytes(Bytes(0)), "0B");
  EXPECT_EQ(FormatBytes(Bytes(100)), "100B");
  EXPECT_EQ(FormatBytes(Bytes(1023)), "1023B");
  EXPECT_EQ(FormatBytes(KiB(1)), "1KiB");
  EXPECT_EQ(FormatBytes(KiB(64)), "64KiB");
  EXPECT_EQ(FormatBytes(MiB(512)), "512MiB");
  EXPECT_EQ(FormatBytes(GiB(2)), "2GiB");
  EXPECT_EQ(FormatBytes(MiB(1536)), "1.5GiB");
  EXPECT_EQ(FormatBytes(MiB(1152)), "1.125GiB");
  EXPECT_EQ(FormatBytes(MiB(1088)), "1088MiB");  // 1.0625GiB needs 4 decimals
  EXPECT_EQ(FormatBytes(TiB(3)), "3TiB");
  EXPECT_EQ(FormatBytes(Bytes(GiB(1).count() + 1)), "1073741825B");
  EXPECT_EQ(FormatBytes(Bytes::Max()), "18446744073709551615B");
  EXPECT_EQ(FormatBytes(TiB((uint64_t{1} << 24) - 1)), "16777215TiB");
}

// FormatBytes is exact: whatever it prints, ParseBytes reads back to the same value.
TEST(FormatBytesTest, RoundTripsThroughParseBytes) {
  std::vector<uint64_t> values = {0,
                                  1,
                                  1023,
                                  1024,
                                  1025,
                                  kBytesPerMiB - 1,
                                  kBytesPerGiB,
                                  kBytesPerGiB + 1,
                                  UINT64_MAX,
                                  UINT64_MAX - 1,
                                  UINT64_MAX - kBytesPerGiB + 1};
  std::mt19937_64 random(20240601);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t value = random();
    values.push_back(value);
    values.push_back(value >> (value % 64));
    values.push_back((value % 4096) << (10 * (1 + value % 4)));  // multiples of units
  }
  for (uint64_t value : values) {
    const std::string text = FormatBytes(Bytes(value));
    Result<Bytes> parsed = ParseBytes(text, kName);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->count(), value) << text;
  }
}

}  // namespace
}  // namespace tessera
