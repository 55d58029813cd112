// The Prometheus text format writer: validation, escaping and number formatting. Builds strings
// only; no I/O, no clocks, no knowledge of tesserad's metrics.
#include "metrics/exposition.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/text.h"

namespace tessera::metrics {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    uint32_t min = 0;
    if ((b0 & 0xe0) == 0xc0) {
      length = 2, code = b0 & 0x1f, min = 0x80;
    } else if ((b0 & 0xf0) == 0xe0) {
      length = 3, code = b0 & 0x0f, min = 0x800;
    } else if ((b0 & 0xf8) == 0xf0) {
      length = 4, code = b0 & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + length > text.size()) {
      return false;
    }
    for (size_t k = 1; k < length; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) {
        return false;
      }
      code = (code << 6) | (b & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
      return false;
    }
    i += length;
  }
  return true;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsAsciiLetter(name[0]) || name[0] == '_' || name[0] == ':')) {
    return false;
  }
  for (char c : name) {
    if (!(IsAsciiLetter(c) || IsDigit(c) || c == '_' || c == ':')) {
      return false;
    }
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || !(IsAsciiLetter(name[0]) || name[0] == '_')) {
    return false;
  }
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') {
    return false;
  }
  for (char c : name) {
    if (!(IsAsciiLetter(c) || IsDigit(c) || c == '_')) {
      return false;
    }
  }
  return true;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) {
    return "NaN";
  }
  if (std::isinf(value)) {
    return value > 0 ? "+Inf" : "-Inf";
  }
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) {
    return "NaN";  // unreachable: 64 bytes hold any double's shortest form
  }
  return std::string(buffer, end);
}

Status ExpositionWriter::BeginFamily(std::string_view name, MetricType type,
                                     std::string_view help) {
  if (!IsValidMetricName(name)) {
    return Status::Error("metric family " + QuoteValue(name) +
                         ": not a valid metric name; expected [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  if (families_.count(std::string(name)) != 0) {
    return Status::Error("metric family " + QuoteValue(name) +
                         ": already written; all samples of a family must follow its TYPE line");
  }
  if (!IsValidUtf8(help)) {
    return Status::Error("metric family " + QuoteValue(name) + ": help text is not valid UTF-8");
  }
  family_ = std::string(name);
  type_ = type;
  families_.insert(family_);
  label_sets_.clear();
  text_ += "# HELP " + family_ + " " + EscapeHelp(help) + "\n";
  text_ += "# TYPE " + family_ +
           (type == MetricType::kCounter     ? " counter\n"
            : type == MetricType::kHistogram ? " histogram\n"
                                             : " gauge\n");
  return Status::Ok();
}

Status ExpositionWriter::AddSample(const Labels& labels, double value) {
  if (type_ == MetricType::kHistogram) {
    return Status::Error("metric " + family_ + ": a histogram takes AddHistogram, not AddSample");
  }
  return AddFormatted(labels, value < 0, std::isnan(value), FormatValue(value));
}

Status ExpositionWriter::AddHistogram(const Labels& labels, std::span<const double> bounds,
                                      std::span<const uint64_t> cumulative, double sum,
                                      uint64_t count) {
  const std::string where = "metric " + family_;
  if (family_.empty() || type_ != MetricType::kHistogram) {
    return Status::Error(where + ": AddHistogram needs a histogram family begun first");
  }
  if (bounds.size() != cumulative.size()) {
    return Status::Error(where + ": " + std::to_string(bounds.size()) + " bounds but " +
                         std::to_string(cumulative.size()) + " bucket counts");
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      return Status::Error(where + ": bucket bounds must be finite and ascending");
    }
    if ((i > 0 && cumulative[i] < cumulative[i - 1]) || cumulative[i] > count) {
      return Status::Error(where + ": bucket counts must be cumulative and at most the count");
    }
  }
  for (const auto& [name, value] : labels) {
    if (name == "le") return Status::Error(where + ": label le is the histogram's own");
  }
  // Validate everything first so a refusal leaves the text unchanged.
  const std::string before = text_;
  const auto before_sets = label_sets_;
  auto undo = [&](Status s) {
    text_ = before;
    label_sets_ = before_sets;
    return s;
  };
  for (size_t i = 0; i <= bounds.size(); ++i) {
    Labels with_le = labels;
    const bool inf = i == bounds.size();
    with_le.emplace_back("le", inf ? "+Inf" : FormatValue(bounds[i]));
    const uint64_t n = inf ? count : cumulative[i];
    if (Status s = AddFormatted(with_le, false, false, std::to_string(n), "_bucket"); !s.ok()) {
      return undo(s);
    }
  }
  if (Status s = AddFormatted(labels, sum < 0, std::isnan(sum), FormatValue(sum), "_sum");
      !s.ok()) {
    return undo(s);
  }
  if (Status s = AddFormatted(labels, false, false, std::to_string(count), "_count"); !s.ok()) {
    return undo(s);
  }
  return Status::Ok();
}

Status ExpositionWriter::AddInteger(const Labels& labels, bool negative, uint64_t magnitude) {
  std::string text = std::to_string(magnitude);
  if (negative && magnitude != 0) {
    text.insert(text.begin(), '-');
  }
  return AddFormatted(labels, negative && magnitude != 0, false, text);
}

Status ExpositionWriter::AddFormatted(const Labels& labels, bool negative, bool nan,
                                      const std::string& value, std::string_view suffix) {
  if (family_.empty()) {
    return Status::Error("metric sample: no family begun; call BeginFamily first");
  }
  const std::string where = "metric " + family_;
  if ((type_ == MetricType::kCounter || type_ == MetricType::kHistogram) && (negative || nan)) {
    return Status::Error(where + ": counter value " + value +
                         " is not allowed; a counter is a number >= 0");
  }
  std::string series;
  if (!labels.empty()) {
    series.push_back('{');
    std::unordered_set<std::string_view> seen;
    for (size_t i = 0; i < labels.size(); ++i) {
      const auto& [name, label_value] = labels[i];
      if (!IsValidLabelName(name)) {
        return Status::Error(where + ": label name " + QuoteValue(name) +
                             " is not valid; expected [a-zA-Z_][a-zA-Z0-9_]* not starting "
                             "with __");
      }
      if (!seen.insert(name).second) {
        return Status::Error(where + ": label " + name + " appears twice");
      }
      if (!IsValidUtf8(label_value)) {
        return Status::Error(where + ": label " + name + "=" + QuoteValue(label_value) +
                             " is not valid UTF-8");
      }
      if (i > 0) {
        series.push_back(',');
      }
      series += name + "=\"" + EscapeLabelValue(label_value) + "\"";
    }
    series.push_back('}');
  }
  // The same labels in another order are the same series: compare them sorted by name.
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key(suffix);
  key += '|';
  for (const auto& [name, label_value] : sorted) {
    key += name + "=\"" + EscapeLabelValue(label_value) + "\",";
  }
  if (!label_sets_.insert(key).second) {
    return Status::Error(where + ": the series " + family_ + std::string(suffix) + series +
                         " was already written in this exposition");
  }
  text_ += family_;
  text_ += suffix;
  text_ += series + " " + value + "\n";
  return Status::Ok();
}

}  // namespace tessera::metrics
