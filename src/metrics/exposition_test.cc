// Tests for ExpositionWriter: the exact text of families and samples, escaping, number formats,
// and every refusal (names, duplicates, counters, UTF-8).
#include "metrics/exposition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace tessera::metrics {
namespace {

TEST(ExpositionWriter, WritesFamiliesWithHelpTypeAndSamples) {
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("tessera_gpu_memory_used_bytes", MetricType::kGauge,
                            "GPU memory in use, by container.")
                  .ok());
  ASSERT_TRUE(w.AddSample({{"gpu", "0"}, {"container", "web"}}, uint64_t{1073741824}).ok());
  ASSERT_TRUE(w.AddSample({{"gpu", "1"}, {"container", "web"}}, 0.5).ok());
  ASSERT_TRUE(w.BeginFamily("tessera_up", MetricType::kGauge, "1 when the daemon runs.").ok());
  ASSERT_TRUE(w.AddSample({}, 1).ok());
  ASSERT_TRUE(
      w.BeginFamily("tessera_reclaims_total", MetricType::kCounter, "Processes reclaimed.").ok());
  ASSERT_TRUE(w.AddSample({}, uint64_t{7}).ok());
  EXPECT_EQ(w.text(),
            "# HELP tessera_gpu_memory_used_bytes GPU memory in use, by container.\n"
            "# TYPE tessera_gpu_memory_used_bytes gauge\n"
            "tessera_gpu_memory_used_bytes{gpu=\"0\",container=\"web\"} 1073741824\n"
            "tessera_gpu_memory_used_bytes{gpu=\"1\",container=\"web\"} 0.5\n"
            "# HELP tessera_up 1 when the daemon runs.\n"
            "# TYPE tessera_up gauge\n"
            "tessera_up 1\n"
            "# HELP tessera_reclaims_total Processes reclaimed.\n"
            "# TYPE tessera_reclaims_total counter\n"
            "tessera_reclaims_total 7\n");
}

TEST(ExpositionWriter, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd\te"), "a\\\\b\\\"c\\nd\te");
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("m", MetricType::kGauge, "line one\nback\\slash \"quotes\" stay").ok());
  ASSERT_TRUE(w.AddSample({{"path", "C:\\dir\n\"x\""}, {"utf8", "caf\xc3\xa9"}}, 2).ok());
  EXPECT_EQ(w.text(),
            "# HELP m line one\\nback\\\\slash \"quotes\" stay\n"
            "# TYPE m gauge\n"
            "m{path=\"C:\\\\dir\\n\\\"x\\\"\",utf8=\"caf\xc3\xa9\"} 2\n");
}

TEST(FormatValue, SpellsSpecialValuesAndRoundTrips) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(0.0), "0");
  EXPECT_EQ(FormatValue(42.0), "42");
  EXPECT_EQ(FormatValue(-1.25), "-1.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  for (double v : {0.1, 1.0 / 3.0, 1e-300, 1.7976931348623157e308, 123456.789e10, -2.5e-7}) {
    EXPECT_EQ(std::strtod(FormatValue(v).c_str(), nullptr), v) << FormatValue(v);
  }
}

TEST(ExpositionWriter, PrintsIntegersExactly) {
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("g", MetricType::kGauge, "h").ok());
  ASSERT_TRUE(w.AddSample({{"k", "max"}}, std::numeric_limits<uint64_t>::max()).ok());
  ASSERT_TRUE(w.AddSample({{"k", "min"}}, std::numeric_limits<int64_t>::min()).ok());
  ASSERT_TRUE(w.AddSample({{"k", "odd"}}, uint64_t{9007199254740993}).ok());  // 2^53 + 1
  ASSERT_TRUE(w.AddSample({{"k", "neg"}}, -3).ok());
  EXPECT_NE(w.text().find("g{k=\"max\"} 18446744073709551615\n"), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("g{k=\"min\"} -9223372036854775808\n"), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("g{k=\"odd\"} 9007199254740993\n"), std::string::npos) << w.text();
  EXPECT_NE(w.text().find("g{k=\"neg\"} -3\n"), std::string::npos) << w.text();
}

TEST(ExpositionWriter, GaugesTakeNaNAndInfinities) {
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("g", MetricType::kGauge, "h").ok());
  ASSERT_TRUE(w.AddSample({{"v", "nan"}}, std::nan("")).ok());
  ASSERT_TRUE(w.AddSample({{"v", "inf"}}, std::numeric_limits<double>::infinity()).ok());
  EXPECT_NE(w.text().find("g{v=\"nan\"} NaN\ng{v=\"inf\"} +Inf\n"), std::string::npos);
}

TEST(Names, FollowThePrometheusRules) {
  EXPECT_TRUE(IsValidMetricName("tessera_gpu_util_ratio"));
  EXPECT_TRUE(IsValidMetricName(":recorded:rule"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("has-dash"));
  EXPECT_FALSE(IsValidMetricName("has space"));
  EXPECT_TRUE(IsValidLabelName("gpu"));
  EXPECT_TRUE(IsValidLabelName("_private"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1gpu"));
  EXPECT_FALSE(IsValidLabelName(""));
}

// A refused call names what was wrong and leaves the text as it was.
template <typename Call>
void ExpectRefused(ExpositionWriter& w, Call call, std::string_view fragment) {
  const std::string before = w.text();
  const Status status = call();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  EXPECT_EQ(w.text(), before);
}

TEST(ExpositionWriter, RefusesWhatAScraperWouldReject) {
  ExpositionWriter w;
  ExpectRefused(
      w, [&] { return w.AddSample({}, 1.0); }, "no family begun");
  ExpectRefused(
      w, [&] { return w.BeginFamily("bad-name", MetricType::kGauge, "h"); },
      "metric family \"bad-name\": not a valid metric name");
  ExpectRefused(
      w, [&] { return w.BeginFamily("m", MetricType::kGauge, "bad \xff help"); },
      "not valid UTF-8");
  ASSERT_TRUE(w.BeginFamily("m", MetricType::kGauge, "h").ok());
  const std::string after_begin = w.text();
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"__name__", "x"}}, 1.0);
      },
      "label name \"__name__\" is not valid");
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"a-b", "x"}}, 1.0);
      },
      "label name \"a-b\"");
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"gpu", "0"}, {"gpu", "1"}}, 1.0);
      },
      "label gpu appears twice");
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"gpu", "\xc3"}}, 1.0);
      },
      "not valid UTF-8");
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"gpu", "\xed\xa0\x80"}}, 1.0);
      },
      "not valid UTF-8");  // surrogate
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"gpu", "\xc0\xaf"}}, 1.0);
      },
      "not valid UTF-8");  // overlong
  ASSERT_TRUE(w.AddSample({{"gpu", "0"}, {"c", "a"}}, 1.0).ok());
  ExpectRefused(
      w,
      [&] {
        return w.AddSample({{"c", "a"}, {"gpu", "0"}}, 2.0);
      },
      "was already written");
  ExpectRefused(
      w, [&] { return w.BeginFamily("m", MetricType::kGauge, "again"); }, "already written");
  EXPECT_NE(w.text().find(after_begin), std::string::npos);
}

TEST(ExpositionWriter, RefusesNegativeAndNaNCounters) {
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("c_total", MetricType::kCounter, "h").ok());
  ExpectRefused(
      w, [&] { return w.AddSample({}, -1.0); }, "counter value -1 is not allowed");
  ExpectRefused(
      w, [&] { return w.AddSample({}, -5); }, "counter value -5");
  ExpectRefused(
      w, [&] { return w.AddSample({}, std::nan("")); }, "counter value NaN");
  EXPECT_TRUE(w.AddSample({}, std::numeric_limits<double>::infinity()).ok());
}

TEST(ExpositionWriter, WritesHistogramsAsBucketsSumAndCount) {
  ExpositionWriter w;
  ASSERT_TRUE(w.BeginFamily("req_seconds", MetricType::kHistogram, "Latency.").ok());
  const std::vector<double> bounds = {0.001, 0.01};
  const std::vector<uint64_t> cumulative = {3, 5};
  ASSERT_TRUE(w.AddHistogram({{"verb", "filter"}}, bounds, cumulative, 0.0125, 6).ok());
  EXPECT_EQ(w.text(),
            "# HELP req_seconds Latency.\n"
            "# TYPE req_seconds histogram\n"
            "req_seconds_bucket{verb=\"filter\",le=\"0.001\"} 3\n"
            "req_seconds_bucket{verb=\"filter\",le=\"0.01\"} 5\n"
            "req_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 6\n"
            "req_seconds_sum{verb=\"filter\"} 0.0125\n"
            "req_seconds_count{verb=\"filter\"} 6\n");
  const std::string before = w.text();
  const std::vector<uint64_t> decreasing = {5, 3};
  EXPECT_FALSE(w.AddHistogram({{"verb", "bind"}}, bounds, decreasing, 1, 6).ok());
  EXPECT_FALSE(w.AddHistogram({{"verb", "filter"}}, bounds, cumulative, 1, 6).ok());  // again
  EXPECT_FALSE(w.AddHistogram({{"le", "x"}}, bounds, cumulative, 1, 6).ok());
  EXPECT_FALSE(w.AddSample({{"verb", "x"}}, 1.0).ok());
  EXPECT_EQ(w.text(), before);
  ASSERT_TRUE(w.BeginFamily("g", MetricType::kGauge, "h").ok());
  EXPECT_FALSE(w.AddHistogram({}, bounds, cumulative, 1, 6).ok());
}

}  // namespace
}  // namespace tessera::metrics
