// RateLimitedLog: a burst of a second's worth, then the rate, and one line a second at most
// saying how many were left out; nothing left out is forgotten.
#include "daemon/rate_limited_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::daemon {
namespace {

using namespace std::chrono_literals;

TEST(RateLimitedLogTest, WritesTheRateAndCountsTheRest) {
  std::vector<std::string> written;
  RateLimitedLog log(10, [&](const std::string& line) { written.push_back(line); });
  const auto t0 = RateLimitedLog::Clock::now();
  for (int i = 0; i < 1000; ++i) log.Log("refused " + std::to_string(i), t0);
  EXPECT_EQ(written.size(), 10u) << "the burst is one second's worth";
  EXPECT_EQ(log.suppressed(), 990u);
  log.Flush(t0);
  ASSERT_EQ(written.size(), 11u);
  EXPECT_NE(written.back().find("990 more refusals not logged"), std::string::npos)
      << written.back();
  EXPECT_EQ(log.suppressed(), 0u);
  // Half a second later: five more lines are allowed, the rest counted; no second note yet.
  for (int i = 0; i < 100; ++i) log.Log("refused again", t0 + 500ms);
  EXPECT_EQ(written.size(), 16u);
  log.Flush(t0 + 500ms);
  EXPECT_EQ(written.size(), 16u) << "at most one note a second";
  log.Flush(t0 + 1s);
  ASSERT_EQ(written.size(), 17u);
  EXPECT_NE(written.back().find("95 more"), std::string::npos) << written.back();
  // A thousand seconds of 5 refusals a second, under the rate: every one written.
  written.clear();
  for (int s = 2; s < 1002; ++s) {
    for (int i = 0; i < 5; ++i) log.Log("steady", t0 + std::chrono::seconds(s) + i * 200ms);
  }
  EXPECT_EQ(written.size(), 5000u);
  EXPECT_EQ(log.suppressed(), 0u);
}

}  // namespace
}  // namespace tessera::daemon
