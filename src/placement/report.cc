// JSON lines, CSV curves and the SVG plot of simulator runs. Formatting and file writing only.
#include "placement/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tessera::placement {

namespace {

std::string Num(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// `v` rounded to `decimals` places, as the JSON numbers are written (the table's precision).
double Rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

// {"0": v0, "1": v1, ...}: a curve keyed by arrived-workload percent.
nlohmann::ordered_json Curve(const std::vector<double>& v) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (size_t i = 0; i < v.size(); ++i) out[std::to_string(i)] = Rounded(v[i], 2);
  return out;
}

Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::Error(path.string() + ": cannot write");
  return Status::Ok();
}

std::string CurvesCsv(const std::vector<SimResult>& results,
                      const std::vector<double> SimResult::*curve) {
  size_t width = 0;
  for (const SimResult& r : results) width = std::max(width, (r.*curve).size());
  std::ostringstream out;
  out << "policy,seed,total_gpus";
  for (size_t i = 0; i < width; ++i) out << "," << i;
  out << "\n";
  for (const SimResult& r : results) {
    out << r.policy << "," << r.seed << "," << r.total_gpus;
    for (double v : r.*curve) out << "," << Num(v);
    out << "\n";
  }
  return out.str();
}

// Per policy, in first-seen order: the mean allocation curve over its runs.
std::vector<std::pair<std::string, std::vector<double>>> MeanCurves(
    const std::vector<SimResult>& results) {
  std::vector<std::pair<std::string, std::vector<double>>> means;
  std::map<std::string, size_t> index;
  std::map<std::string, int> runs;
  for (const SimResult& r : results) {
    auto [it, added] = index.emplace(r.policy, means.size());
    if (added) means.push_back({r.policy, std::vector<double>(r.allocation_ratio.size(), 0.0)});
    std::vector<double>& m = means[it->second].second;
    for (size_t i = 0; i < std::min(m.size(), r.allocation_ratio.size()); ++i) {
      m[i] += r.allocation_ratio[i];
    }
    ++runs[r.policy];
  }
  for (auto& [policy, m] : means) {
    for (double& v : m) v /= runs[policy];
  }
  return means;
}

std::string Svg(const std::vector<std::pair<std::string, std::vector<double>>>& means) {
  static const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22"};
  const double w = 720, h = 480, left = 60, right = 170, top = 20, bottom = 50;
  size_t points = 0;
  for (const auto& m : means) points = std::max(points, m.second.size());
  const double x_max = std::max<double>(1, static_cast<double>(points) - 1);
  const double y_min = 0, y_max = 100;
  auto X = [&](double x) { return left + x / x_max * (w - left - right); };
  auto Y = [&](double y) { return top + (y_max - y) / (y_max - y_min) * (h - top - bottom); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int y = 0; y <= 100; y += 10) {
    s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(y) << "\" x2=\"" << X(x_max) << "\" y2=\"" << Y(y)
      << "\" stroke=\"#ddd\"/>\n"
      << "<text x=\"" << left - 8 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << y
      << "</text>\n";
  }
  for (int x = 0; x <= static_cast<int>(x_max); x += 10) {
    s << "<line x1=\"" << X(x) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(x) << "\" y2=\"" << Y(100)
      << "\" stroke=\"#eee\"/>\n"
      << "<text x=\"" << X(x) << "\" y=\"" << Y(0) + 18 << "\" text-anchor=\"middle\">" << x
      << "</text>\n";
  }
  s << "<text x=\"" << (X(0) + X(x_max)) / 2 << "\" y=\"" << h - 10
    << "\" text-anchor=\"middle\">arrived workload (% of cluster GPUs)</text>\n"
    << "<text transform=\"translate(16," << (Y(0) + Y(100)) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">GPU allocation ratio (%)</text>\n"
    << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(std::min(100.0, x_max))
    << "\" y2=\"" << Y(std::min(100.0, x_max)) << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n";
  for (size_t p = 0; p < means.size(); ++p) {
    const char* color = kColors[p % (sizeof(kColors) / sizeof(kColors[0]))];
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < means[p].second.size(); ++i) {
      s << Num(X(static_cast<double>(i)), 1) << "," << Num(Y(means[p].second[i]), 1) << " ";
    }
    s << "\"/>\n";
    const double ly = top + 16 + 18 * static_cast<double>(p);
    const double at100 =
        means[p].second.size() > 100 ? means[p].second[100] : means[p].second.back();
    s << "<line x1=\"" << w - right + 10 << "\" y1=\"" << ly - 4 << "\" x2=\"" << w - right + 30
      << "\" y2=\"" << ly - 4 << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << w - right + 36 << "\" y=\"" << ly << "\">" << means[p].first << " "
      << Num(at100) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace

std::string SimResultJson(const SimResult& r) {
  const nlohmann::ordered_json out = {
      {"policy", r.policy},
      {"seed", r.seed},
      {"pods", r.pods},
      {"scheduled", r.scheduled},
      {"failed", r.failed},
      {"total_gpus", r.total_gpus},
      {"allocation_ratio", Curve(r.allocation_ratio)},
      {"frag_ratio", Curve(r.frag_ratio)},
      {"frag_amount", Curve(r.frag_amount)},
      {"unallocated_gpus_at_100", Rounded(r.unallocated_gpus_at_100, 1)},
      {"decision_us_p50", Rounded(r.decision_us_p50, 1)},
      {"decision_us_p99", Rounded(r.decision_us_p99, 1)},
      {"decision_us_max", Rounded(r.decision_us_max, 1)},
      {"seconds", Rounded(r.seconds, 3)}};
  // Policy names are ours (ASCII); replace rather than throw on anything else all the same.
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status WriteReports(const std::vector<SimResult>& results, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("--out " + dir + ": cannot create the directory: " + ec.message());
  const std::filesystem::path base(dir);
  for (const auto& [name, curve] : {std::pair{"allocation_ratio.csv", &SimResult::allocation_ratio},
                                    std::pair{"frag_amount.csv", &SimResult::frag_amount},
                                    std::pair{"frag_ratio.csv", &SimResult::frag_ratio}}) {
    Status s = WriteFile(base / name, CurvesCsv(results, curve));
    if (!s.ok()) return s;
  }
  const auto means = MeanCurves(results);
  std::ostringstream mean_csv;
  mean_csv << "policy,runs_averaged";
  size_t width = 0;
  for (const auto& m : means) width = std::max(width, m.second.size());
  for (size_t i = 0; i < width; ++i) mean_csv << "," << i;
  mean_csv << "\n";
  for (const auto& [policy, m] : means) {
    int runs = 0;
    for (const SimResult& r : results) runs += r.policy == policy ? 1 : 0;
    mean_csv << policy << "," << runs;
    for (double v : m) mean_csv << "," << Num(v);
    mean_csv << "\n";
  }
  Status s = WriteFile(base / "allocation_ratio_mean.csv", mean_csv.str());
  if (!s.ok()) return s;
  return WriteFile(base / "allocation_ratio.svg", Svg(means));
}

}  // namespace tessera::placement
