// Tests for ArbiterPolicy names and parsing.
#include "core/arbiter_policy.h"

#include <gtest/gtest.h>

#include "core/test_matchers.h"

namespace tessera {
namespace {

constexpr std::string_view kName = "0/policy";

TEST(ArbiterPolicyTest, NumbersMatchTheControlTree) {
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kFair), 0);
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kPreemptive), 1);
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kWeightedPreemptive), 2);
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kFixedPercentage), 3);
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kWeak), 4);
  EXPECT_EQ(static_cast<int>(ArbiterPolicy::kNative), 5);
}

TEST(ArbiterPolicyTest, Names) {
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kFair), "fair");
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kPreemptive), "preemptive");
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kWeightedPreemptive), "weighted-preemptive");
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kFixedPercentage), "fixed-percentage");
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kWeak), "weak");
  EXPECT_EQ(ArbiterPolicyName(ArbiterPolicy::kNative), "native");
  EXPECT_EQ(ArbiterPolicyName(static_cast<ArbiterPolicy>(9)), "unknown");
}

TEST(ArbiterPolicyTest, FromNumber) {
  EXPECT_EQ(ArbiterPolicyFromNumber(0), ArbiterPolicy::kFair);
  EXPECT_EQ(ArbiterPolicyFromNumber(5), ArbiterPolicy::kNative);
  EXPECT_EQ(ArbiterPolicyFromNumber(6), std::nullopt);
  EXPECT_EQ(ArbiterPolicyFromNumber(-1), std::nullopt);
}

TEST(ArbiterPolicyTest, ParsesNumbersAndNames) {
  for (int i = 0; i < kArbiterPolicyCount; ++i) {
    const auto policy = static_cast<ArbiterPolicy>(i);
    EXPECT_EQ(*ParseArbiterPolicy(std::to_string(i), kName), policy);
    EXPECT_EQ(*ParseArbiterPolicy(ArbiterPolicyName(policy), kName), policy);
  }
  EXPECT_EQ(*ParseArbiterPolicy(" Weighted-Preemptive\n", kName),
            ArbiterPolicy::kWeightedPreemptive);
  EXPECT_EQ(*ParseArbiterPolicy(" 3 ", kName), ArbiterPolicy::kFixedPercentage);
}

TEST(ArbiterPolicyTest, RejectsOthersListingEveryPolicy) {
  EXPECT_TRUE(IsRejected(ParseArbiterPolicy("", kName), kName, "", {"empty value"}));
  for (std::string_view text : {"6", "-1", "05", "fairly", "weighted_preemptive", "2.0", "x"}) {
    EXPECT_TRUE(IsRejected(ParseArbiterPolicy(text, kName), kName, text,
                           {"unknown policy; expected 0 fair, 1 preemptive, 2 weighted-preemptive, "
                            "3 fixed-percentage, 4 weak or 5 native"}));
  }
}

}  // namespace
}  // namespace tessera
