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

// One row per run: policy, seed, `third` (its column name and value), then the curve's points.
template <typename Run>
std::string CurvesCsv(const std::vector<Run>& results, const std::vector<double> Run::*curve,
                      const char* third, double (*third_value)(const Run&)) {
  size_t width = 0;
  for (const Run& r : results) width = std::max(width, (r.*curve).size());
  std::ostringstream out;
  out << "policy,seed," << third;
  for (size_t i = 0; i < width; ++i) out << "," << i;
  out << "\n";
  for (const Run& r : results) {
    out << r.policy << "," << r.seed << "," << third_value(r);
    for (double v : r.*curve) out << "," << Num(v);
    out << "\n";
  }
  return out.str();
}

double TotalGpus(const SimResult& r) { return r.total_gpus; }
double Speedup(const ReplayResult& r) { return r.speedup; }

struct MeanCurve {
  std::string policy;
  std::vector<double> mean;
  int runs = 0;
};

// Per policy, in first-seen order: the mean of `curve` over its runs.
template <typename Run>
std::vector<MeanCurve> MeanCurves(const std::vector<Run>& results,
                                  const std::vector<double> Run::*curve) {
  std::vector<MeanCurve> means;
  std::map<std::string, size_t> index;
  for (const Run& r : results) {
    auto [it, added] = index.emplace(r.policy, means.size());
    if (added) means.push_back({r.policy, std::vector<double>((r.*curve).size(), 0.0), 0});
    MeanCurve& m = means[it->second];
    for (size_t i = 0; i < std::min(m.mean.size(), (r.*curve).size()); ++i) {
      m.mean[i] += (r.*curve)[i];
    }
    ++m.runs;
  }
  for (MeanCurve& m : means) {
    for (double& v : m.mean) v /= m.runs;
  }
  return means;
}

// What a plot says around its lines. The x axis runs over the curves' indices; the legend gives
// each policy's value at index 100 (or its last).
struct PlotStyle {
  const char* x_label;
  const char* y_label;
  double y_max = 100;     // 0: the highest point, rounded up to 1, 2 or 5 x a power of 10
  bool diagonal = false;  // draw y = x (allocation can never pass the arrived workload)
};

std::string Svg(const std::vector<MeanCurve>& means, const PlotStyle& style) {
  static const char* kColors[] = {"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22"};
  const double w = 720, h = 480, left = 60, right = 170, top = 20, bottom = 50;
  size_t points = 0;
  double highest = 0;
  for (const MeanCurve& m : means) {
    points = std::max(points, m.mean.size());
    for (double v : m.mean) highest = std::max(highest, v);
  }
  const double x_max = std::max<double>(1, static_cast<double>(points) - 1);
  const double y_min = 0;
  double y_max = style.y_max;
  if (y_max <= 0) {  // a round ceiling: 1, 2 or 5 x a power of 10
    y_max = 1;
    for (double unit = 1; y_max < highest; unit *= 10) {
      for (double f : {1.0, 2.0, 5.0, 10.0}) {
        y_max = f * unit;
        if (y_max >= highest) break;
      }
    }
  }
  const double y_step = y_max / 10;
  auto X = [&](double x) { return left + x / x_max * (w - left - right); };
  auto Y = [&](double y) { return top + (y_max - y) / (y_max - y_min) * (h - top - bottom); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (int i = 0; i <= 10; ++i) {
    const double y = y_step * i;
    s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(y) << "\" x2=\"" << X(x_max) << "\" y2=\"" << Y(y)
      << "\" stroke=\"#ddd\"/>\n"
      << "<text x=\"" << left - 8 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << y
      << "</text>\n";
  }
  for (int x = 0; x <= static_cast<int>(x_max); x += 10) {
    s << "<line x1=\"" << X(x) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(x) << "\" y2=\"" << Y(y_max)
      << "\" stroke=\"#eee\"/>\n"
      << "<text x=\"" << X(x) << "\" y=\"" << Y(0) + 18 << "\" text-anchor=\"middle\">" << x
      << "</text>\n";
  }
  s << "<text x=\"" << (X(0) + X(x_max)) / 2 << "\" y=\"" << h - 10 << "\" text-anchor=\"middle\">"
    << style.x_label << "</text>\n"
    << "<text transform=\"translate(16," << (Y(0) + Y(y_max)) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << style.y_label << "</text>\n";
  if (style.diagonal) {
    s << "<line x1=\"" << X(0) << "\" y1=\"" << Y(0) << "\" x2=\"" << X(std::min(y_max, x_max))
      << "\" y2=\"" << Y(std::min(y_max, x_max))
      << "\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n";
  }
  for (size_t p = 0; p < means.size(); ++p) {
    const char* color = kColors[p % (sizeof(kColors) / sizeof(kColors[0]))];
    const std::vector<double>& curve = means[p].mean;
    s << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < curve.size(); ++i) {
      s << Num(X(static_cast<double>(i)), 1) << "," << Num(Y(curve[i]), 1) << " ";
    }
    s << "\"/>\n";
    const double ly = top + 16 + 18 * static_cast<double>(p);
    const double at100 = curve.empty() ? 0 : curve.size() > 100 ? curve[100] : curve.back();
    s << "<line x1=\"" << w - right + 10 << "\" y1=\"" << ly - 4 << "\" x2=\"" << w - right + 30
      << "\" y2=\"" << ly - 4 << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n"
      << "<text x=\"" << w - right + 36 << "\" y=\"" << ly << "\">" << means[p].policy << " "
      << Num(at100) << "</text>\n";
  }
  s << "</svg>\n";
  return s.str();
}

// policy, runs_averaged, then the mean curve's points.
std::string MeansCsv(const std::vector<MeanCurve>& means) {
  std::ostringstream out;
  out << "policy,runs_averaged";
  size_t width = 0;
  for (const MeanCurve& m : means) width = std::max(width, m.mean.size());
  for (size_t i = 0; i < width; ++i) out << "," << i;
  out << "\n";
  for (const MeanCurve& m : means) {
    out << m.policy << "," << m.runs;
    for (double v : m.mean) out << "," << Num(v);
    out << "\n";
  }
  return out.str();
}

Status CreateDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error("--out " + dir + ": cannot create the directory: " + ec.message());
  return Status::Ok();
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
  if (Status made = CreateDirectory(dir); !made.ok()) return made;
  const std::filesystem::path base(dir);
  for (const auto& [name, curve] : {std::pair{"allocation_ratio.csv", &SimResult::allocation_ratio},
                                    std::pair{"frag_amount.csv", &SimResult::frag_amount},
                                    std::pair{"frag_ratio.csv", &SimResult::frag_ratio}}) {
    Status s = WriteFile(base / name, CurvesCsv(results, curve, "total_gpus", &TotalGpus));
    if (!s.ok()) return s;
  }
  const auto means = MeanCurves(results, &SimResult::allocation_ratio);
  Status s = WriteFile(base / "allocation_ratio_mean.csv", MeansCsv(means));
  if (!s.ok()) return s;
  return WriteFile(
      base / "allocation_ratio.svg",
      Svg(means, {"arrived workload (% of cluster GPUs)", "GPU allocation ratio (%)", 100, true}));
}

}  // namespace tessera::placement

namespace tessera::placement {

std::string ReplayResultJson(const ReplayResult& r) {
  const nlohmann::ordered_json out = {
      {"mode", "replay"},
      {"policy", r.policy},
      {"seed", r.seed},
      {"queue", r.queue},
      {"reservations", r.reservations},
      {"pods", r.pods},
      {"placed", r.placed},
      {"unplaceable", r.unplaceable},
      {"never_placed", r.never_placed},
      {"waited", r.waited},
      {"total_gpus", r.total_gpus},
      {"speedup", Rounded(r.speedup, 3)},
      {"peak_demand_gpus", Rounded(r.peak_demand_gpus, 1)},
      {"timeline_start_s", Rounded(r.timeline_start_s, 1)},
      {"last_arrival_s", Rounded(r.last_arrival_s, 1)},
      {"end_s", Rounded(r.end_s, 1)},
      {"allocation_ratio", Curve(r.allocation_ratio)},
      {"waiting_pods", Curve(r.waiting_pods)},
      {"waiting_gpus", Curve(r.waiting_gpus)},
      {"allocation_mean", Rounded(r.allocation_mean, 2)},
      {"allocation_while_waiting", Rounded(r.allocation_while_waiting, 2)},
      {"waiting_time_share", Rounded(r.waiting_time_share, 4)},
      {"peak_waiting_pods", r.peak_waiting_pods},
      {"wait_s_p50", Rounded(r.wait_s_p50, 1)},
      {"wait_s_p99", Rounded(r.wait_s_p99, 1)},
      {"wait_s_max", Rounded(r.wait_s_max, 1)},
      {"wait_s_mean", Rounded(r.wait_s_mean, 1)},
      {"attempts", r.attempts},
      {"decisions", r.decisions},
      {"reservations_made", r.reservations_made},
      {"decision_us_p50", Rounded(r.decision_us_p50, 1)},
      {"decision_us_p99", Rounded(r.decision_us_p99, 1)},
      {"seconds", Rounded(r.seconds, 3)}};
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

Status WriteReplayReports(const std::vector<ReplayResult>& results, const std::string& dir) {
  if (Status made = CreateDirectory(dir); !made.ok()) return made;
  const std::filesystem::path base(dir);
  for (const auto& [name, curve] :
       {std::pair{"replay_allocation.csv", &ReplayResult::allocation_ratio},
        std::pair{"replay_waiting_pods.csv", &ReplayResult::waiting_pods},
        std::pair{"replay_waiting_gpus.csv", &ReplayResult::waiting_gpus}}) {
    Status s = WriteFile(base / name, CurvesCsv(results, curve, "speedup", &Speedup));
    if (!s.ok()) return s;
  }
  std::ostringstream waits;
  waits << "policy,seed,speedup,pods,placed,unplaceable,never_placed,waited,allocation_mean,"
           "allocation_while_waiting,waiting_time_share,peak_waiting_pods,wait_s_p50,wait_s_p99,"
           "wait_s_max,wait_s_mean\n";
  for (const ReplayResult& r : results) {
    waits << r.policy << "," << r.seed << "," << Num(r.speedup, 3) << "," << r.pods << ","
          << r.placed << "," << r.unplaceable << "," << r.never_placed << "," << r.waited << ","
          << Num(r.allocation_mean) << "," << Num(r.allocation_while_waiting) << ","
          << Num(r.waiting_time_share, 4) << "," << r.peak_waiting_pods << ","
          << Num(r.wait_s_p50, 1) << "," << Num(r.wait_s_p99, 1) << "," << Num(r.wait_s_max, 1)
          << "," << Num(r.wait_s_mean, 1) << "\n";
  }
  if (Status s = WriteFile(base / "replay_waits.csv", waits.str()); !s.ok()) return s;
  const char* x_label = "time (% of the way from a busy cluster to the last arrival)";
  const auto allocation = MeanCurves(results, &ReplayResult::allocation_ratio);
  if (Status s = WriteFile(base / "replay_allocation.svg",
                           Svg(allocation, {x_label, "GPU allocation ratio (%)", 100, false}));
      !s.ok()) {
    return s;
  }
  return WriteFile(
      base / "replay_waiting.svg",
      Svg(MeanCurves(results, &ReplayResult::waiting_pods), {x_label, "pods waiting", 0, false}));
}

}  // namespace tessera::placement
