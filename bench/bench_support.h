// What every Tessera benchmark program shares: a console reporter that also keeps each run's time
// per iteration (so main can compute ratios against the in-run baseline and write its JSON), and
// the `--json PATH` flag taken out of argv before Google Benchmark sees it. Header-only.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace tessera::bench {

struct RunTime {
  std::string name;
  double real_ns = 0;  // wall time per iteration
  double cpu_ns = 0;   // CPU time per iteration
};

class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        const double n = static_cast<double>(r.iterations);
        results.push_back({r.benchmark_name(), r.real_accumulated_time * 1e9 / n,
                           r.cpu_accumulated_time * 1e9 / n});
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // Wall ns per iteration of the named benchmark, 0 if it did not run.
  double RealNs(const std::string& name) const {
    for (const RunTime& r : results) {
      if (r.name == name) return r.real_ns;
    }
    return 0;
  }
  std::vector<RunTime> results;
};

// Removes `--json PATH` from argv (leaving *json as given when absent) and initialises Google
// Benchmark with the rest.
inline void Initialize(int argc, char** argv, std::string* json) {
  static std::vector<char*> args;
  args.clear();
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) {
      *json = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
}

}  // namespace tessera::bench
