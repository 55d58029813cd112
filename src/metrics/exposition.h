// ExpositionWriter: builds a Prometheus text exposition (format version 0.0.4), the body of
// tesserad's GET /metrics.
//
// A family is begun with its name, type and help text, then gets its samples; families follow one
// another (the format needs all lines of a family together, so a family cannot be reopened).
// Everything a scraper would choke on is refused when it is added, with a Status naming the family,
// the label or the value, and leaves the text unchanged:
// - metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and do not
//   start with "__" (reserved for Prometheus); a label name appears at most once per sample;
// - label values are valid UTF-8 and are escaped (\\, \", \n); help text escapes \\ and \n;
// - a family name is used once; a label set at most once in a family;
// - counter values are not negative and not NaN.
// Numbers: integer overloads print exactly; doubles print the shortest text that reads back to the
// same double, with NaN, +Inf and -Inf spelled as Prometheus reads them.
//
// Only text is built here: no I/O, no clocks (samples carry no timestamps), no knowledge of what
// the metrics mean. Not thread-safe; build one per scrape.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/result.h"

namespace tessera::metrics {

// The Content-Type of a text exposition.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kGauge, kCounter, kHistogram };

using Labels = std::vector<std::pair<std::string, std::string>>;

// Whether `name` is a valid metric name / label name (rules above).
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

// The label-value escaping of the text format: \ -> \\, " -> \", newline -> \n.
std::string EscapeLabelValue(std::string_view value);

// The sample-value spelling: "NaN", "+Inf", "-Inf", or the shortest round-trip decimal.
std::string FormatValue(double value);

class ExpositionWriter {
 public:
  ExpositionWriter() = default;
  ExpositionWriter(const ExpositionWriter&) = delete;
  ExpositionWriter& operator=(const ExpositionWriter&) = delete;

  // Writes the # HELP and # TYPE lines of a new family; later samples belong to it.
  Status BeginFamily(std::string_view name, MetricType type, std::string_view help);

  // Adds a sample `family{labels} value` to the current family.
  Status AddSample(const Labels& labels, double value);
  template <std::integral T>
  requires(!std::same_as<T, bool>) Status AddSample(const Labels& labels, T value) {
    if constexpr (std::is_signed_v<T>) {
      return AddInteger(
          labels, value < 0,
          value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
    } else {
      return AddInteger(labels, false, static_cast<uint64_t>(value));
    }
  }

  // Adds one histogram series to the current (histogram) family: `family_bucket{labels,le}` for
  // each upper bound of `bounds` (ascending, finite) with the cumulative count of observations
  // at or below it, then le="+Inf" with `count`, `family_sum` and `family_count`.
  // `cumulative` has one entry per bound and never decreases; `count` is at least its last.
  Status AddHistogram(const Labels& labels, std::span<const double> bounds,
                      std::span<const uint64_t> cumulative, double sum, uint64_t count);

  // The exposition so far.
  const std::string& text() const { return text_; }

 private:
  Status AddInteger(const Labels& labels, bool negative, uint64_t magnitude);
  Status AddFormatted(const Labels& labels, bool negative, bool nan, const std::string& value,
                      std::string_view suffix = {});

  std::string text_;
  std::string family_;  // the current family; empty before the first
  MetricType type_ = MetricType::kGauge;
  std::unordered_set<std::string> families_;    // every family begun
  std::unordered_set<std::string> label_sets_;  // serialized label sets of the current family
};

}  // namespace tessera::metrics
