// JSON lines, CSV curves and the SVG plot of simulator runs. Formatting and file writing only.
#include "placement/report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace tessera::placement {

namespace {

std::string Num(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string Curve(const std::vector<double>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ",";
    out += '"';
    out += std::to_string(i);
    out += "\":";
    out += Num(v[i]);
  }
  return out + "}";
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
  std::string out = "{";
  out += "\"policy\":" + JsonString(r.policy);
  out += ",\"seed\":" + std::to_string(r.seed);
  out += ",\"pods\":" + std::to_string(r.pods);
  out += ",\"scheduled\":" + std::to_string(r.scheduled);
  out += ",\"failed\":" + std::to_string(r.failed);
  out += ",\"total_gpus\":" + std::to_string(r.total_gpus);
  out += ",\"allocation_ratio\":" + Curve(r.allocation_ratio);
  out += ",\"frag_ratio\":" + Curve(r.frag_ratio);
  out += ",\"frag_amount\":" + Curve(r.frag_amount);
  out += ",\"unallocated_gpus_at_100\":" + Num(r.unallocated_gpus_at_100, 1);
  out += ",\"decision_us_p50\":" + Num(r.decision_us_p50, 1);
  out += ",\"decision_us_p99\":" + Num(r.decision_us_p99, 1);
  out += ",\"decision_us_max\":" + Num(r.decision_us_max, 1);
  out += ",\"seconds\":" + Num(r.seconds, 3);
  return out + "}";
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
  std::string out = "{\"mode\":\"replay\"";
  out += ",\"policy\":" + JsonString(r.policy);
  out += ",\"seed\":" + std::to_string(r.seed);
  out += ",\"pods\":" + std::to_string(r.pods);
  out += ",\"placed\":" + std::to_string(r.placed);
  out += ",\"unplaceable\":" + std::to_string(r.unplaceable);
  out += ",\"never_placed\":" + std::to_string(r.never_placed);
  out += ",\"waited\":" + std::to_string(r.waited);
  out += ",\"total_gpus\":" + std::to_string(r.total_gpus);
  out += ",\"speedup\":" + Num(r.speedup, 3);
  out += ",\"peak_demand_gpus\":" + Num(r.peak_demand_gpus, 1);
  out += ",\"timeline_start_s\":" + Num(r.timeline_start_s, 1);
  out += ",\"last_arrival_s\":" + Num(r.last_arrival_s, 1);
  out += ",\"end_s\":" + Num(r.end_s, 1);
  out += ",\"allocation_ratio\":" + Curve(r.allocation_ratio);
  out += ",\"waiting_pods\":" + Curve(r.waiting_pods);
  out += ",\"waiting_gpus\":" + Curve(r.waiting_gpus);
  out += ",\"allocation_mean\":" + Num(r.allocation_mean);
  out += ",\"allocation_while_waiting\":" + Num(r.allocation_while_waiting);
  out += ",\"waiting_time_share\":" + Num(r.waiting_time_share, 4);
  out += ",\"peak_waiting_pods\":" + std::to_string(r.peak_waiting_pods);
  out += ",\"wait_s_p50\":" + Num(r.wait_s_p50, 1);
  out += ",\"wait_s_p99\":" + Num(r.wait_s_p99, 1);
  out += ",\"wait_s_max\":" + Num(r.wait_s_max, 1);
  out += ",\"wait_s_mean\":" + Num(r.wait_s_mean, 1);
  out += ",\"decision_us_p50\":" + Num(r.decision_us_p50, 1);
  out += ",\"decision_us_p99\":" + Num(r.decision_us_p99, 1);
  out += ",\"seconds\":" + Num(r.seconds, 3);
  return out + "}";
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
