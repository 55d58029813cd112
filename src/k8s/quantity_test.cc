// Tests of Quantity: the forms kubectl and the API server write, exact conversion with rounding
// up, and every refusal naming the input and the value.
#include "k8s/quantity.h"

#include <gtest/gtest.h>

#include <utility>

namespace tessera::k8s {
namespace {

int64_t Scaled(std::string_view text, int scale) {
  auto q = Quantity::Parse(text, "cpu");
  EXPECT_TRUE(q.ok()) << q.error();
  if (!q.ok()) return -1;
  auto v = q->Scaled(scale, "cpu");
  EXPECT_TRUE(v.ok()) << v.error();
  return v.ok() ? *v : -1;
}

TEST(QuantityTest, CpuInMilli) {
  EXPECT_EQ(Scaled("500m", 3), 500);
  EXPECT_EQ(Scaled("2", 3), 2000);
  EXPECT_EQ(Scaled("1.5", 3), 1500);
  EXPECT_EQ(Scaled("0.1", 3), 100);
  EXPECT_EQ(Scaled("+3", 3), 3000);
  EXPECT_EQ(Scaled("100u", 3), 1);  // 0.1 milli rounds up
  EXPECT_EQ(Scaled("0.0005", 3), 1);
  EXPECT_EQ(Scaled("1e3", 3), 1000000);
  EXPECT_EQ(Scaled("12E-1", 3), 1200);
  EXPECT_EQ(Scaled("0", 3), 0);
  EXPECT_EQ(Scaled("0.000", 3), 0);
}

TEST(QuantityTest, MemoryInBytes) {
  EXPECT_EQ(Scaled("4Gi", 0), int64_t{4} << 30);
  EXPECT_EQ(Scaled("512Mi", 0), int64_t{512} << 20);
  EXPECT_EQ(Scaled("1.5Gi", 0), int64_t{3} << 29);
  EXPECT_EQ(Scaled("1G", 0), 1000000000);
  EXPECT_EQ(Scaled("129e6", 0), 129000000);
  EXPECT_EQ(Scaled("128974848", 0), 128974848);
  EXPECT_EQ(Scaled("1Ki", 0), 1024);
  EXPECT_EQ(Scaled("1k", 0), 1000);
  EXPECT_EQ(Scaled("7Ei", 0), int64_t{7} << 60);
  EXPECT_EQ(Scaled("2E", 0), 2000000000000000000);
  EXPECT_EQ(Scaled("0.3", 0), 1);  // a fraction of a byte rounds up
  EXPECT_EQ(Scaled("1000000000000000000000m", 0), 1000000000000000000);  // zeros past 18 digits
}

TEST(QuantityTest, WholeRefusesFractions) {
  EXPECT_EQ(*Quantity::Parse("3", "x")->Whole("x"), 3);
  EXPECT_EQ(*Quantity::Parse("3000m", "x")->Whole("x"), 3);
  EXPECT_EQ(*Quantity::Parse("2.0", "x")->Whole("x"), 2);
  EXPECT_EQ(*Quantity::Parse("1Ki", "x")->Whole("x"), 1024);
  auto half =
      Quantity::Parse("1500m", "limits tessera.io/gpu-count")->Whole("limits tessera.io/gpu-count");
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.error(),
            "limits tessera.io/gpu-count=\"1500m\": has a fraction; expected a whole number");
}

TEST(QuantityTest, RefusesMalformedQuantities) {
  for (std::string_view bad : {"", "-1", "abc", "1..2", "1.2.3", "1Gb", "1 Gi", "1e", "1e3.5",
                               "1ee3", "Gi", ".", "+", "1e999", "1e", "1K", "1e+"}) {
    auto q = Quantity::Parse(bad, "requests cpu");
    EXPECT_FALSE(q.ok()) << bad;
    if (!q.ok()) {
      EXPECT_EQ(q.error().rfind("requests cpu=\"", 0), 0u) << q.error();
      EXPECT_NE(q.error().find("expected a Kubernetes quantity"), std::string::npos) << q.error();
    }
  }
}

// Extended resources (tessera.io/gpu-mem, MIG profiles) are whole numbers in any of the forms.
TEST(QuantityTest, WholeQuantitiesOfExtendedResources) {
  EXPECT_EQ(*ParseWholeQuantity("2", "q"), 2);
  EXPECT_EQ(*ParseWholeQuantity("1k", "q"), 1000);
  EXPECT_EQ(*ParseWholeQuantity("2Ki", "q"), 2048);
  EXPECT_EQ(*ParseWholeQuantity("3000m", "q"), 3);
  EXPECT_EQ(*ParseWholeQuantity("2.0", "q"), 2);
  EXPECT_EQ(*ParseWholeQuantity("1e1", "q"), 10);
  EXPECT_EQ(ParseWholeQuantity("1500m", "q").error(),
            "q=\"1500m\": has a fraction; expected a whole number");
  EXPECT_NE(ParseWholeQuantity("1.5", "q").error().find("has a fraction"), std::string::npos);
  EXPECT_NE(ParseWholeQuantity("-1", "q").error().find("is negative"), std::string::npos);
  EXPECT_NE(ParseWholeQuantity("20Ei", "q").error().find("does not fit"), std::string::npos);
}

// Past 19 significant digits a value rounds up, as Kubernetes rounds up what it cannot keep; 19
// digits are kept exactly (9223372036854775807 is the largest int64).
TEST(QuantityTest, RoundsUpPastItsPrecision) {
  EXPECT_EQ(Scaled("9223372036854775807", 0), 9223372036854775807);
  EXPECT_EQ(Scaled("1234567890123456789", 0), 1234567890123456789);
  EXPECT_EQ(Scaled("1.0000000000000000001", 3), 1001);
  EXPECT_EQ(Scaled("1.00000000000000000001", 0), 2);
  EXPECT_EQ(Scaled("0.99999999999999999999", 0), 1);
  // Above 2 (Kubernetes: 2.000000001, whose units round up to 3), and just below it (rounded up
  // to exactly 2): neither is a whole number.
  for (const auto& [inexact, units] :
       {std::pair{"2.00000000000000000001", 3}, std::pair{"1.99999999999999999999", 2}}) {
    auto q = Quantity::Parse(inexact, "q");
    ASSERT_TRUE(q.ok()) << inexact;
    EXPECT_EQ(*q->Scaled(0, "q"), units) << inexact;
    EXPECT_FALSE(q->Whole("q").ok()) << inexact;
  }
  EXPECT_FALSE(Quantity::Parse("92233720368547758071", "q")->Scaled(0, "q").ok());
}

TEST(QuantityTest, RefusesValuesPastInt64) {
  auto q = Quantity::Parse("16Ei", "memory");
  ASSERT_TRUE(q.ok());
  auto v = q->Scaled(0, "memory");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().find("memory=\"16Ei\""), std::string::npos);
  EXPECT_FALSE(Quantity::Parse("10E", "cpu")->Scaled(3, "cpu").ok());
  EXPECT_TRUE(Quantity::Parse("9E", "memory")->Scaled(0, "memory").ok());
}

TEST(QuantityTest, CanonicalFormsAreTheApiServers) {
  EXPECT_EQ(FormatBinaryQuantity(17179869184), "16Gi");
  EXPECT_EQ(FormatBinaryQuantity(85520809984), "81559Mi");
  EXPECT_EQ(FormatBinaryQuantity(17179869185), "17179869185");
  EXPECT_EQ(FormatBinaryQuantity(1023), "1023");
  EXPECT_EQ(FormatBinaryQuantity(1024), "1Ki");
  EXPECT_EQ(FormatBinaryQuantity(0), "0");
  EXPECT_EQ(FormatDecimalQuantity(100), "100");
  EXPECT_EQ(FormatDecimalQuantity(2000), "2k");
  EXPECT_EQ(FormatDecimalQuantity(1), "1");
  // What is written reads back as the same value.
  for (int64_t v : {int64_t{268435456}, int64_t{85520809984}, int64_t{30}, int64_t{5000000}}) {
    EXPECT_EQ(*Quantity::Parse(FormatBinaryQuantity(v), "q")->Scaled(0, "q"), v);
    EXPECT_EQ(*Quantity::Parse(FormatDecimalQuantity(v), "q")->Scaled(0, "q"), v);
  }
}

}  // namespace
}  // namespace tessera::k8s
