// compute_tenant: one tenant of the compute-isolation scenario benchmark. It is linked against the
// shim (DT_NEEDED libcuda.so.1, as a program built with -lcuda is) and runs simgpu's `spin` kernel
// (or a real GPU's, with a module that exports one), measuring the device time it completed
// itself, from events, so the benchmark never trusts the arbiter's own books. It knows nothing of
// policies or targets and must not read Tessera's shared memory: it only launches and measures.
//
//   compute_tenant [options] saturate KERNEL_NS SECONDS
//       keep the stream full of back-to-back kernels; no synchronisation until the end (with
//       --sync: one kernel at a time, cuCtxSynchronize after each, as a training step that reads
//       its loss back does)
//   compute_tenant [options] sporadic KERNEL_NS PERIOD_MS SECONDS
//       one kernel every PERIOD_MS (± jitter); reports each kernel's admission latency
//   compute_tenant [options] idle-after SECONDS_BUSY SECONDS_TOTAL KERNEL_NS
//       saturate for SECONDS_BUSY, then stop launching but stay registered until SECONDS_TOTAL
//
// Options: --start-ns N (CLOCK_MONOTONIC instant at which every tenant of a case begins; default
// now), --launch plain|ptsz|graph (a created stream; the per-thread default stream through
// cuLaunchKernel_ptsz; cuGraphLaunch of a captured stream), --streams N (round-robin over N
// created streams), --graph-kernels N (kernels per captured graph), --depth-ms MS (most device
// work kept queued per stream; the launch queue is bounded as a real one is), --seed S and
// --jitter-ms J (sporadic), --sync (saturate: synchronise after every launch), --trace PATH (one
// line per completed unit: host ns before its launch call, device begin and end, for chasing idle
// time), --module PATH (a module image for a real GPU; simgpu takes any).
//
// Output (key=value lines, read by compute_scenario_bench): ready=1 once set up, then at the end
// kernels, device_ns, bucket_ns, buckets=FIRST:v0,v1,... (ns of this tenant's device time in each
// 10 ms bucket from START_NS; FIRST is the index of v0, negative before the start), for sporadic
// latencies_ns=l0,l1,... (kernel start on the device minus host time just before the launch call),
// for idle-after stopped_ns (when it stopped launching, from START_NS), start_late_ns, ok=1.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "driver/cuda_api.h"

namespace {

constexpr uint64_t kBucketNs = 10'000'000;  // 10 ms

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SleepUntilNs(uint64_t t) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(t / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(t % 1'000'000'000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

[[noreturn]] void Fail(const char* call, CUresult r) {
  std::printf("error=%d\ncall=%s\n", static_cast<int>(r), call);
  std::fflush(stdout);
  std::fprintf(stderr, "compute_tenant: %s failed with CUresult %d\n", call, static_cast<int>(r));
  std::exit(1);
}
#define CHECK(call)                          \
  do {                                       \
    const CUresult r_ = (call);              \
    if (r_ != CUDA_SUCCESS) Fail(#call, r_); \
  } while (0)

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "compute_tenant: %s\nusage: compute_tenant [--start-ns N] [--launch "
               "plain|ptsz|graph] [--streams N] [--graph-kernels N] [--depth-ms MS] [--seed S] "
               "[--jitter-ms J] [--sync] [--trace PATH] [--module PATH]\n"
               "         saturate KERNEL_NS SECONDS | sporadic KERNEL_NS PERIOD_MS SECONDS |\n"
               "         idle-after SECONDS_BUSY SECONDS_TOTAL KERNEL_NS\n",
               why.c_str());
  std::exit(2);
}

double ParseNumber(const std::string& text, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v)) {
    Usage(std::string(what) + " \"" + text + "\": expected a non-negative number");
  }
  return v;
}

enum class LaunchPath { kPlain, kPerThread, kGraph };

struct Options {
  uint64_t start_ns = 0;
  LaunchPath path = LaunchPath::kPlain;
  int streams = 1;
  int graph_kernels = 4;
  double depth_ms = 100;
  uint64_t seed = 1;
  double jitter_ms = -1;  // negative: half the period
  bool sync = false;      // saturate: cuCtxSynchronize after every launch
  std::string trace_path;
  std::string module_path;
};

// One queued unit of work: a launch (one kernel, or one graph of several) and the event recorded
// right after it.
struct Pending {
  size_t event = 0;          // index into the stream's event pool
  uint64_t launch_host = 0;  // CLOCK_MONOTONIC just before the launch call
  uint64_t device_ns = 0;    // device time this unit runs for
};

// A stream the tenant launches on, with its pool of reusable events and what is in flight.
struct Lane {
  CUstream stream = nullptr;  // a created stream, or CU_STREAM_PER_THREAD
  CUgraphExec graph = nullptr;
  std::vector<CUevent> events;
  std::vector<size_t> free_events;
  std::deque<Pending> pending;
};

class Tenant {
 public:
  Tenant(const Options& opt, uint64_t kernel_ns) : opt_(opt), kernel_ns_(kernel_ns) {}

  void SetUp() {
    CHECK(cuInit(0));
    CUcontext ctx = nullptr;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    std::string image = "tessera compute_tenant";  // simgpu accepts any image
    if (!opt_.module_path.empty()) {
      std::ifstream in(opt_.module_path, std::ios::binary);
      image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      image.push_back('\0');
    }
    CUmodule mod = nullptr;
    CHECK(cuModuleLoadData(&mod, image.data()));
    CHECK(cuModuleGetFunction(&spin_, mod, "spin"));

    const uint64_t unit_ns =
        kernel_ns_ *
        (opt_.path == LaunchPath::kGraph ? static_cast<uint64_t>(opt_.graph_kernels) : 1);
    // Enough queued work to never starve the device between two host wake-ups, bounded below the
    // driver's launch queue (simgpu: 1024 per stream).
    depth_ = static_cast<size_t>(
        std::clamp<double>(opt_.depth_ms * 1e6 / static_cast<double>(unit_ns), 2, 1000));
    const int lanes = opt_.path == LaunchPath::kPerThread ? 1 : opt_.streams;
    for (int i = 0; i < lanes; ++i) {
      Lane lane;
      if (opt_.path == LaunchPath::kPerThread) {
        lane.stream = TESSERA_CU_STREAM_PER_THREAD;
      } else {
        CHECK(cuStreamCreate(&lane.stream, CU_STREAM_NON_BLOCKING));
      }
      for (size_t e = 0; e < depth_ + 1; ++e) {
        CUevent ev = nullptr;
        CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
        lane.events.push_back(ev);
        lane.free_events.push_back(e);
      }
      if (opt_.path == LaunchPath::kGraph) {
        CHECK(cuStreamBeginCapture_v2(lane.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
        for (int k = 0; k < opt_.graph_kernels; ++k) LaunchOne(lane.stream);
        CUgraph graph = nullptr;
        CHECK(cuStreamEndCapture(lane.stream, &graph));
        CHECK(cuGraphInstantiateWithFlags(&lane.graph, graph, 0));
      }
      lanes_.push_back(std::move(lane));
    }
    Anchor();
  }

  // Launches one unit on lane `i` and records its completion event; waits for room first.
  void Launch(size_t i) {
    Lane& lane = lanes_[i];
    if (lane.pending.size() >= depth_) {
      // Wait for the oldest eighth to finish, then refill: the queue never drains meanwhile.
      const size_t wait_for = std::min(lane.pending.size() - 1, depth_ / 8);
      CHECK(cuEventSynchronize(lane.events[lane.pending[wait_for].event]));
    }
    Harvest(lane);
    Pending p;
    p.event = lane.free_events.back();
    lane.free_events.pop_back();
    p.launch_host = NowNs();
    if (opt_.path == LaunchPath::kGraph) {
      CHECK(cuGraphLaunch(lane.graph, lane.stream));
      p.device_ns = kernel_ns_ * static_cast<uint64_t>(opt_.graph_kernels);
      kernels_ += static_cast<uint64_t>(opt_.graph_kernels);
    } else {
      LaunchOne(lane.stream);
      p.device_ns = kernel_ns_;
      ++kernels_;
    }
    if (opt_.path == LaunchPath::kPerThread) {
      CHECK(cuEventRecord_ptsz(lane.events[p.event], lane.stream));
    } else {
      CHECK(cuEventRecord(lane.events[p.event], lane.stream));
    }
    lane.pending.push_back(p);
  }

  // Saturates every lane until `until` (CLOCK_MONOTONIC).
  void Saturate(uint64_t until) {
    size_t next = 0;
    while (NowNs() < until) {
      Launch(next);
      if (opt_.sync) {
        CHECK(cuCtxSynchronize());
        Harvest(lanes_[next]);
      }
      next = (next + 1) % lanes_.size();
    }
  }

  // Waits for everything launched and records it.
  void Drain() {
    for (Lane& lane : lanes_) {
      while (!lane.pending.empty()) {
        CHECK(cuEventSynchronize(lane.events[lane.pending.front().event]));
        Harvest(lane);
      }
    }
  }

  void set_record_latency(bool v) { record_latency_ = v; }
  void set_trace(FILE* f) { trace_ = f; }
  uint64_t kernels() const { return kernels_; }

  void Print() const {
    uint64_t total = 0;
    int64_t first = 0, last = -1;
    for (const auto& [index, ns] : buckets_) {
      total += ns;
      if (last < first) {
        first = last = index;
      } else {
        first = std::min(first, index);
        last = std::max(last, index);
      }
    }
    std::vector<uint64_t> dense(last >= first ? static_cast<size_t>(last - first + 1) : 0, 0);
    for (const auto& [index, ns] : buckets_) dense[static_cast<size_t>(index - first)] += ns;
    std::printf("kernels=%llu\ndevice_ns=%llu\nbucket_ns=%llu\nbuckets=%lld:",
                static_cast<unsigned long long>(kernels_), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(kBucketNs), static_cast<long long>(first));
    for (size_t i = 0; i < dense.size(); ++i) {
      std::printf(i ? ",%llu" : "%llu", static_cast<unsigned long long>(dense[i]));
    }
    std::printf("\n");
    if (record_latency_) {
      std::printf("latencies_ns=");
      for (size_t i = 0; i < latencies_.size(); ++i) {
        std::printf(i ? ",%lld" : "%lld", static_cast<long long>(latencies_[i]));
      }
      std::printf("\n");
    }
  }

  void set_start(uint64_t start_ns) { start_ns_ = start_ns; }

 private:
  void LaunchOne(CUstream stream) {
    uint64_t ns = kernel_ns_;
    void* params[] = {&ns};
    if (opt_.path == LaunchPath::kPerThread) {
      CHECK(cuLaunchKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    } else {
      CHECK(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
    }
  }

  // Maps the device clock to CLOCK_MONOTONIC: a reference event recorded on an idle stream before
  // any tenant starts; its device time lies between the host instants around record+synchronise,
  // and the midpoint is taken. Re-recording moves the event, so tries stop at the first narrow
  // one (a descheduled try is simply repeated).
  void Anchor() {
    CHECK(cuEventCreate(&reference_, CU_EVENT_DEFAULT));
    for (int i = 0; i < 20; ++i) {
      const uint64_t before = NowNs();
      if (opt_.path == LaunchPath::kPerThread) {
        CHECK(cuEventRecord_ptsz(reference_, lanes_[0].stream));
      } else {
        CHECK(cuEventRecord(reference_, lanes_[0].stream));
      }
      CHECK(cuEventSynchronize(reference_));
      const uint64_t after = NowNs();
      reference_host_ = before + (after - before) / 2;
      if (after - before < 50'000) break;
    }
  }

  // Completion time of `ev` on CLOCK_MONOTONIC.
  uint64_t CompletionNs(CUevent ev) {
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, reference_, ev));
    return reference_host_ + static_cast<uint64_t>(std::llround(static_cast<double>(ms) * 1e6));
  }

  // Records every finished unit at the front of the lane's queue.
  void Harvest(Lane& lane) {
    while (!lane.pending.empty()) {
      const Pending& p = lane.pending.front();
      const CUresult q = cuEventQuery(lane.events[p.event]);
      if (q == CUDA_ERROR_NOT_READY) break;
      if (q != CUDA_SUCCESS) Fail("cuEventQuery", q);
      const uint64_t end = CompletionNs(lane.events[p.event]);
      const uint64_t begin = end > p.device_ns ? end - p.device_ns : 0;
      AddBusy(begin, end);
      if (trace_ != nullptr) {
        std::fprintf(trace_, "%llu %llu %llu\n", static_cast<unsigned long long>(p.launch_host),
                     static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
      }
      if (record_latency_) {
        latencies_.push_back(static_cast<int64_t>(begin) - static_cast<int64_t>(p.launch_host));
      }
      lane.free_events.push_back(p.event);
      lane.pending.pop_front();
    }
  }

  // Spreads the busy interval [begin, end) over 10 ms buckets counted from the start.
  void AddBusy(uint64_t begin, uint64_t end) {
    const int64_t b = static_cast<int64_t>(begin - start_ns_);
    const int64_t e = static_cast<int64_t>(end - start_ns_);
    const int64_t bucket = static_cast<int64_t>(kBucketNs);
    int64_t t = b;
    while (t < e) {
      const int64_t index = t >= 0 ? t / bucket : -((-t + bucket - 1) / bucket);
      const int64_t bucket_end = (index + 1) * bucket;
      const int64_t piece = std::min(e, bucket_end) - t;
      auto it = std::find_if(buckets_.rbegin(), buckets_.rend(),
                             [&](const auto& kv) { return kv.first == index; });
      if (it != buckets_.rend()) {
        it->second += static_cast<uint64_t>(piece);
      } else {
        buckets_.emplace_back(index, static_cast<uint64_t>(piece));
      }
      t += piece;
    }
  }

  Options opt_;
  uint64_t kernel_ns_;
  CUfunction spin_ = nullptr;
  size_t depth_ = 2;
  std::vector<Lane> lanes_;
  CUevent reference_ = nullptr;
  uint64_t reference_host_ = 0;
  uint64_t start_ns_ = 0;
  uint64_t kernels_ = 0;
  bool record_latency_ = false;
  FILE* trace_ = nullptr;
  std::vector<std::pair<int64_t, uint64_t>> buckets_;  // (bucket index, ns), mostly in order
  std::vector<int64_t> latencies_;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--start-ns") {
      const std::string v = value();
      char* end = nullptr;
      opt.start_ns = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') Usage("--start-ns \"" + v + "\": expected nanoseconds");
    } else if (a == "--launch") {
      const std::string v = value();
      if (v == "plain") {
        opt.path = LaunchPath::kPlain;
      } else if (v == "ptsz") {
        opt.path = LaunchPath::kPerThread;
      } else if (v == "graph") {
        opt.path = LaunchPath::kGraph;
      } else {
        Usage("--launch \"" + v + "\": expected plain, ptsz or graph");
      }
    } else if (a == "--streams") {
      opt.streams = static_cast<int>(ParseNumber(value(), "--streams"));
      if (opt.streams < 1 || opt.streams > 64) Usage("--streams: expected 1 to 64");
    } else if (a == "--graph-kernels") {
      opt.graph_kernels = static_cast<int>(ParseNumber(value(), "--graph-kernels"));
      if (opt.graph_kernels < 1 || opt.graph_kernels > 256) Usage("--graph-kernels: 1 to 256");
    } else if (a == "--depth-ms") {
      opt.depth_ms = ParseNumber(value(), "--depth-ms");
    } else if (a == "--seed") {
      opt.seed = static_cast<uint64_t>(ParseNumber(value(), "--seed"));
    } else if (a == "--jitter-ms") {
      opt.jitter_ms = ParseNumber(value(), "--jitter-ms");
    } else if (a == "--trace") {
      opt.trace_path = value();
    } else if (a == "--sync") {
      opt.sync = true;
    } else if (a == "--module") {
      opt.module_path = value();
    } else if (a.rfind("--", 0) == 0) {
      Usage("unknown option \"" + a + "\"");
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty()) Usage("missing mode");
  const std::string mode = pos[0];
  auto seconds_ns = [](double s) { return static_cast<uint64_t>(s * 1e9); };

  uint64_t kernel_ns = 0;
  double run_s = 0, busy_s = 0, period_ms = 0;
  if (mode == "saturate" && pos.size() == 3) {
    kernel_ns = static_cast<uint64_t>(ParseNumber(pos[1], "KERNEL_NS"));
    run_s = ParseNumber(pos[2], "SECONDS");
  } else if (mode == "sporadic" && pos.size() == 4) {
    kernel_ns = static_cast<uint64_t>(ParseNumber(pos[1], "KERNEL_NS"));
    period_ms = ParseNumber(pos[2], "PERIOD_MS");
    run_s = ParseNumber(pos[3], "SECONDS");
    if (period_ms <= 0) Usage("PERIOD_MS must be positive");
  } else if (mode == "idle-after" && pos.size() == 4) {
    busy_s = ParseNumber(pos[1], "SECONDS_BUSY");
    run_s = ParseNumber(pos[2], "SECONDS_TOTAL");
    kernel_ns = static_cast<uint64_t>(ParseNumber(pos[3], "KERNEL_NS"));
    if (busy_s > run_s) Usage("SECONDS_BUSY must not exceed SECONDS_TOTAL");
  } else {
    Usage("bad mode or argument count");
  }
  if (kernel_ns == 0) Usage("KERNEL_NS must be positive");

  Tenant tenant(opt, kernel_ns);
  tenant.SetUp();
  tenant.set_record_latency(mode == "sporadic");
  FILE* trace = nullptr;
  if (!opt.trace_path.empty()) {
    trace = std::fopen(opt.trace_path.c_str(), "w");
    if (trace == nullptr) Usage("--trace \"" + opt.trace_path + "\": cannot write it");
    tenant.set_trace(trace);
  }
  std::printf("ready=1\n");
  std::fflush(stdout);

  const uint64_t start = opt.start_ns != 0 ? opt.start_ns : NowNs();
  tenant.set_start(start);
  const uint64_t now = NowNs();
  const uint64_t late = now > start ? now - start : 0;
  if (now < start) SleepUntilNs(start);

  if (mode == "saturate") {
    tenant.Saturate(start + seconds_ns(run_s));
  } else if (mode == "idle-after") {
    tenant.Saturate(start + seconds_ns(busy_s));
    const uint64_t stopped = NowNs();
    tenant.Drain();
    std::printf("stopped_ns=%llu\n", static_cast<unsigned long long>(stopped - start));
    SleepUntilNs(start + seconds_ns(run_s));
  } else {
    std::mt19937_64 rng(opt.seed);
    const double jitter = opt.jitter_ms >= 0 ? opt.jitter_ms : period_ms / 2;
    std::uniform_real_distribution<double> spread(-jitter, jitter);
    const uint64_t end = start + seconds_ns(run_s);
    uint64_t next = start + static_cast<uint64_t>(std::max(0.0, period_ms + spread(rng)) * 1e6);
    while (next < end) {
      SleepUntilNs(next);
      tenant.Launch(0);
      next += static_cast<uint64_t>(std::max(0.0, period_ms + spread(rng)) * 1e6);
    }
  }
  tenant.Drain();
  CHECK(cuCtxSynchronize());
  std::printf("start_late_ns=%llu\n", static_cast<unsigned long long>(late));
  tenant.Print();
  if (trace != nullptr) std::fclose(trace);
  std::printf("ok=1\n");
  std::fflush(stdout);
  return 0;
}
