// compute_scenario_bench: the compute-isolation scenarios of docs/contracts.md, end to end. Each
// case starts a private tesserad on simgpu with a policy, runs compute_tenant processes through the
// real shim with their TESSERA_* environment, and judges what the tenants measured themselves
// (device time from their own events): share error over 1 s and 10 s windows, weighted-ratio
// accuracy, device busy fraction, time to reclaim an idle tenant's share, high-priority admission
// latency. Every case runs twice in the same invocation: under its policy ("ours") and under policy
// 5 (native: no compute control, the baseline), and the JSON reports both and their ratio.
//
// It holds no policy logic and reads none of the daemon's state: targets come from
// docs/contracts.md and the measurements from the tenants. It must not judge from NVML or the
// arbiter's books.
//
//   compute_scenario_bench [--duration S] [--quick] [--case GLOB[,GLOB...]] [--repeat N]
//                          [--json PATH] [--trace DIR] [--no-daemon-flags] [--strict] [--list]
//
// --repeat N runs each case N times (both rounds each time) and judges the medians; --trace DIR
// keeps each tenant's per-kernel times and the arbiter's trace of every round there.
//
// Until tesserad knows --policy/--max-inst, it refuses them with a usage error (exit 2); the bench
// notices, says so, and runs both rounds without them (the JSON then says "gated": false).
#include <fnmatch.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ipc/unix_socket.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::ChildProcess;

constexpr double kBucketS = 0.010;  // compute_tenant's bucket: 10 ms
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kNativePolicy = 5;
constexpr uint64_t kHighPrioKernelNs = 200'000;  // the sporadic tenant's kernel: 200 us
constexpr double kHighPrioPeriodMs = 20;         // ... one every 20 ms ± 10 ms

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string Fmt(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// ---- Children we must not leave behind ----------------------------------------------------------
// Pids of running children, so SIGINT/SIGTERM can kill them before the bench dies (kill(2) is
// async-signal-safe). Slots are plain atomics: no allocation in the handler.
std::atomic<pid_t> g_children[16];

void Track(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t empty = 0;
    if (slot.compare_exchange_strong(empty, pid)) return;
  }
}
void Untrack(pid_t pid) {
  for (auto& slot : g_children) {
    pid_t p = pid;
    slot.compare_exchange_strong(p, 0);
  }
}
extern "C" void OnSignal(int sig) {
  for (auto& slot : g_children) {
    const pid_t p = slot.load();
    if (p > 0) kill(p, SIGKILL);
  }
  _exit(128 + sig);
}

// A ChildProcess that the signal handler knows about while it lives.
class Tracked {
 public:
  Tracked(const std::vector<std::string>& argv, const std::vector<std::string>& env)
      : child_(argv, env) {
    if (child_.started()) Track(child_.pid());
  }
  ~Tracked() {
    if (child_.started()) {
      child_.Kill(SIGKILL);
      child_.Wait(10s);
      Untrack(child_.pid());
    }
  }
  ChildProcess& operator*() { return child_; }
  ChildProcess* operator->() { return &child_; }

 private:
  ChildProcess child_;
};

// ---- Cases ------------------------------------------------------------------------------------
enum class Role { kSaturate, kIdleAfter, kHighPrio };

struct TenantPlan {
  std::string name;  // its container id
  Role role = Role::kSaturate;
  double target_pct = 0;                 // its share while every tenant is busy (docs/contracts.md)
  bool judged = true;                    // counted in share error (the HP tenant is not)
  std::vector<std::string> env;          // TESSERA_CORE_LIMIT, TESSERA_WEIGHT, ...
  std::vector<std::string> options;      // compute_tenant options: launch path, streams, --sync
  std::string launch = "plain";          // for the table
  uint64_t kernel_ns = 0;                // 0: the case's kernel (high priority: kHighPrioKernelNs)
  double period_ms = kHighPrioPeriodMs;  // high priority: one kernel this often
};

struct Case {
  std::string name;
  std::string family;
  int policy = 1;
  int max_inst = 0;  // 0: the daemon's default
  uint64_t kernel_ns = 0;
  // Work-conserving policies are judged on shares of the judged tenants' combined time; capped
  // ones (0, 3) on shares of wall time (docs/contracts.md; research/compute-isolation.md §4).
  bool relative = true;
  bool weighted = false;
  bool idle = false;
  bool high_prio = false;
  // Checks beyond the common ones (0: none): the largest share error over the long windows, and
  // the smallest busy fraction relative to native's in the same run.
  double share_limit = 0;
  double busy_ratio_min = 0;
  std::vector<TenantPlan> tenants;
};

TenantPlan Plan(const std::string& name, double target, std::vector<std::string> env) {
  TenantPlan t;
  t.name = name;
  t.target_pct = target;
  t.env = std::move(env);
  return t;
}

std::vector<Case> AllCases() {
  struct Length {
    const char* suffix;
    uint64_t ns;
  };
  const Length lengths[] = {{"50us", 50'000}, {"1ms", 1'000'000}, {"10ms", 10'000'000}};
  std::vector<Case> cases;
  for (const Length& len : lengths) {
    auto base = [&](const std::string& family, int policy) {
      Case c;
      c.family = family;
      c.name = family + "-" + len.suffix;
      c.policy = policy;
      c.kernel_ns = len.ns;
      return c;
    };
    {  // Fixed percentages: caps that are also reservations.
      Case c = base("policy3-30-70", 3);
      c.relative = false;
      c.tenants = {Plan("a30", 30, {"TESSERA_CORE_LIMIT=30"}),
                   Plan("b70", 70, {"TESSERA_CORE_LIMIT=70"})};
      // The capped-low tenant is the greedier one (two streams): natively it would take more.
      c.tenants[0].options = {"--streams", "2"};
      c.tenants[0].launch = "2 streams";
      cases.push_back(c);
    }
    {  // Weighted preemptive, two tenants.
      Case c = base("policy2-1-2", 2);
      c.weighted = true;
      c.tenants = {Plan("w1", 100.0 / 3, {"TESSERA_WEIGHT=1"}),
                   Plan("w2", 200.0 / 3, {"TESSERA_WEIGHT=2"})};
      cases.push_back(c);
    }
    {  // Weighted preemptive, three tenants on three launch paths.
      Case c = base("policy2-1-2-3", 2);
      c.weighted = true;
      c.tenants = {Plan("w1", 100.0 / 6, {"TESSERA_WEIGHT=1"}),
                   Plan("w2", 200.0 / 6, {"TESSERA_WEIGHT=2"}),
                   Plan("w3", 300.0 / 6, {"TESSERA_WEIGHT=3"})};
      c.tenants[1].options = {"--launch", "ptsz"};
      c.tenants[1].launch = "per-thread";
      c.tenants[2].options = {"--launch", "graph", "--graph-kernels", "4"};
      c.tenants[2].launch = "graph x4";
      cases.push_back(c);
    }
    {  // Preemptive (equal among active); the third tenant stops part-way.
      Case c = base("policy1-idle", 1);
      c.idle = true;
      c.tenants = {Plan("p1", 100.0 / 3, {}), Plan("p2", 100.0 / 3, {}),
                   Plan("p3-idles", 100.0 / 3, {})};
      c.tenants[2].role = Role::kIdleAfter;
      c.tenants[1].options = {"--streams", "2"};
      c.tenants[1].launch = "2 streams";
      cases.push_back(c);
    }
    {  // Fair fixed slots: 4 slots, 2 tenants, half the GPU stays idle.
      Case c = base("policy0-max4", 0);
      c.max_inst = 4;
      c.relative = false;
      c.tenants = {Plan("f1", 25, {}), Plan("f2", 25, {})};
      cases.push_back(c);
    }
    {  // A sporadic high-priority tenant against two saturating best-effort ones.
      Case c = base("hp-policy1", 1);
      c.high_prio = true;
      TenantPlan hp = Plan("hp", 0, {"TESSERA_HIGH_PRIO=1"});
      hp.role = Role::kHighPrio;
      hp.judged = false;
      c.tenants = {hp, Plan("be1", 50, {}), Plan("be2", 50, {})};
      cases.push_back(c);
    }
  }
  {  // `tessera demo`'s tenants: two that synchronise after every kernel (a 1 ms inference
     // service at 30 %, a 4 ms training step at 70 %) and a high-priority job with one 0.5 ms
     // kernel every 20 ms. Natively the two keep each other's kernel queued and the device never
     // idles; with a token the holder's host round trip between kernels idles it unless the
     // arbiter hands over in time. Shares are of the two best-effort tenants' time (the
     // high-priority job's comes off the top); its bound is the longer best-effort kernel + 1 ms.
    Case c;
    c.family = "demo";
    c.name = "demo-policy3";
    c.policy = 3;
    c.kernel_ns = 4'000'000;
    c.high_prio = true;
    c.share_limit = 1.0;
    c.busy_ratio_min = 0.98;
    TenantPlan service = Plan("service", 30, {"TESSERA_CORE_LIMIT=30"});
    service.kernel_ns = 1'000'000;
    service.options = {"--sync"};
    service.launch = "sync, 1 ms";
    TenantPlan trainer = Plan("trainer", 70, {"TESSERA_CORE_LIMIT=70"});
    trainer.kernel_ns = 4'000'000;
    trainer.options = {"--sync"};
    trainer.launch = "sync, 4 ms";
    TenantPlan alerts = Plan("alerts", 0, {"TESSERA_HIGH_PRIO=1"});
    alerts.role = Role::kHighPrio;
    alerts.judged = false;
    alerts.kernel_ns = 500'000;
    alerts.options = {"--jitter-ms", "0"};
    alerts.launch = "0.5 ms every 20 ms";
    c.tenants = {service, trainer, alerts};
    cases.push_back(c);
  }
  std::stable_sort(cases.begin(), cases.end(),
                   [](const Case& a, const Case& b) { return a.family < b.family; });
  return cases;
}

// ---- Running one round ------------------------------------------------------------------------
struct Settings {
  std::string build;
  double duration_s = 12;
  bool quick = false;
  bool daemon_flags = true;  // pass --policy/--max-inst; cleared when tesserad refuses them
  bool flags_refused = false;
  // --trace DIR: each tenant's units (compute_tenant --trace) and the arbiter's trace
  // (TESSERA_TRACE_ARBITER) of every round go there, named CASE-POLICY-RUN.*.
  std::string trace_dir;
  int trace_run = 0;
};

struct TenantResult {
  std::vector<double> busy_ns;  // per 10 ms bucket of [0, duration)
  std::vector<double> latencies_ms;
  double stopped_s = kNaN;  // idle-after: when it stopped launching
  double start_late_ms = 0;
  uint64_t kernels = 0;
};

struct RoundResult {
  bool ok = false;
  std::string error;
  int policy = 0;
  bool gated = false;  // the daemon was given the policy
  std::vector<TenantResult> tenants;
  // Share of the machine's CPU time the hypervisor took during the round (/proc/stat steal; NaN
  // where unknown). Above a few percent the tenants' timing, and so busy and latency, suffer.
  double steal_pct = kNaN;
  // Token grants (hand-offs) per second over the round, from the daemon's STATUS at its end (a
  // cost, reported, never judged); NaN under native or where STATUS says none.
  double grants_per_s = kNaN;
};

// /proc/stat's aggregate steal and total jiffies; {0, 0} where unreadable.
std::pair<double, double> CpuStealAndTotal() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double v[8] = {};
  if (!(in >> cpu) || cpu != "cpu") return {0, 0};
  double total = 0;
  for (double& x : v) {
    if (!(in >> x)) return {0, 0};
    total += x;
  }
  return {v[7], total};  // user nice system idle iowait irq softirq steal
}

bool ParseBuckets(const std::string& text, size_t count, std::vector<double>* out) {
  out->assign(count, 0);
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  long long index = std::strtoll(text.c_str(), nullptr, 10);
  std::stringstream values(text.substr(colon + 1));
  std::string item;
  while (std::getline(values, item, ',')) {
    if (index >= 0 && static_cast<size_t>(index) < count) {
      (*out)[static_cast<size_t>(index)] = std::strtod(item.c_str(), nullptr);
    }
    ++index;
  }
  return true;
}

// Starts tesserad on `socket`; returns nullptr when it did not come up. Sets *refused when it
// exited with a usage error (flags it does not know yet).
std::unique_ptr<Tracked> StartDaemon(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& env, const std::string& socket,
                                     bool* refused) {
  auto daemon = std::make_unique<Tracked>(argv, env);
  *refused = false;
  if (!(*daemon)->started()) return nullptr;
  for (int i = 0; i < 500; ++i) {
    auto fd = tessera::ipc::Connect(socket, 100ms);
    if (fd.ok()) {
      close(*fd);
      return daemon;
    }
    if (auto status = (*daemon)->Wait(10ms)) {
      *refused = *status == 2;
      return nullptr;
    }
  }
  return nullptr;
}

RoundResult RunRound(const Case& c, int policy, Settings* s) {
  RoundResult result;
  result.policy = policy;
  const auto [steal0, total0] = CpuStealAndTotal();
  const std::string state = tessera::process::UniqueName("scenario");
  const std::string socket = "/tmp/" + state + ".sock";
  const std::string simgpu = s->build + "/lib/libtessera-simgpu.so";
  const std::vector<std::string> sim_env = {"TESSERA_SIM_STATE=" + state,
                                            "TESSERA_SIM_GPUS=SimScenario:16GiB:80"};
  auto cleanup = [&] { shm_unlink(("/tessera-sim-" + state).c_str()); };

  std::string trace_prefix;
  if (!s->trace_dir.empty()) {
    trace_prefix = s->trace_dir + "/" + c.name + "-p" + std::to_string(policy) + "-" +
                   std::to_string(s->trace_run++);
  }
  std::unique_ptr<Tracked> daemon;
  for (int attempt = 0; attempt < 2 && !daemon; ++attempt) {
    std::vector<std::string> argv = {s->build + "/bin/tesserad", "--sim", "--socket", socket,
                                     "--ephemeral"};
    const bool flags = s->daemon_flags;
    if (flags) {
      argv.insert(argv.end(), {"--policy", std::to_string(policy)});
      if (c.max_inst > 0) argv.insert(argv.end(), {"--max-inst", std::to_string(c.max_inst)});
    }
    bool refused = false;
    std::vector<std::string> daemon_env = sim_env;
    if (!trace_prefix.empty()) {
      // The daemon's stderr, through a shell: its trace lines, one per publication.
      daemon_env.push_back("TESSERA_TRACE_ARBITER=1");
      std::string cmd = "exec";
      for (const std::string& a : argv) cmd += " '" + a + "'";
      argv = {"/bin/sh", "-c", cmd + " 2>'" + trace_prefix + ".arbiter'"};
    }
    daemon = StartDaemon(argv, daemon_env, socket, &refused);
    if (daemon) {
      result.gated = flags;
    } else if (refused && flags) {
      std::printf(
          "note: tesserad refused --policy/--max-inst (the compute gate has not landed on this "
          "branch); every round from here runs without them, so \"ours\" is ungated.\n");
      s->daemon_flags = false;
      s->flags_refused = true;
    } else {
      result.error = "tesserad did not start on " + socket;
      cleanup();
      return result;
    }
  }
  if (!daemon) {
    result.error = "tesserad did not start on " + socket;
    cleanup();
    return result;
  }

  const double d = s->duration_s;
  const uint64_t start_ns = NowNs() + 1'000'000'000ull;  // every tenant's common start
  std::vector<std::unique_ptr<Tracked>> children;
  for (size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantPlan& t = c.tenants[i];
    std::vector<std::string> argv = {s->build + "/bench/compute_tenant", "--start-ns",
                                     std::to_string(start_ns), "--seed", std::to_string(i + 1)};
    argv.insert(argv.end(), t.options.begin(), t.options.end());
    if (!trace_prefix.empty()) {
      argv.insert(argv.end(), {"--trace", trace_prefix + "." + t.name});
    }
    const std::string k = std::to_string(t.kernel_ns ? t.kernel_ns : c.kernel_ns),
                      secs = Fmt("%.3f", d);
    switch (t.role) {
      case Role::kSaturate:
        argv.insert(argv.end(), {"saturate", k, secs});
        break;
      case Role::kIdleAfter:
        argv.insert(argv.end(), {"idle-after", Fmt("%.3f", d * 0.4), secs, k});
        break;
      case Role::kHighPrio:
        argv.insert(argv.end(),
                    {"sporadic", std::to_string(t.kernel_ns ? t.kernel_ns : kHighPrioKernelNs),
                     Fmt("%g", t.period_ms), secs});
        break;
    }
    std::vector<std::string> env = sim_env;
    env.insert(env.end(), {"TESSERA_SOCKET=" + socket, "TESSERA_REAL_LIBCUDA=" + simgpu,
                           "TESSERA_CONTAINER=" + t.name});
    env.insert(env.end(), t.env.begin(), t.env.end());
    children.push_back(std::make_unique<Tracked>(argv, env));
    if (!(**children.back()).started()) {
      result.error = "cannot start " + argv[0];
      break;
    }
  }
  // Every tenant must be set up before the common start; then each gets the duration plus a
  // bounded drain. Anything still running after that is killed (by Tracked's destructor).
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(1000 + d * 1000 + 30000));
  for (size_t i = 0; result.error.empty() && i < children.size(); ++i) {
    ChildProcess& child = **children[i];
    if (!child.WaitForKey("ready", 20s)) {
      result.error = "tenant " + c.tenants[i].name + " did not get ready (see its error above)";
    }
  }
  // Hand-offs per second, from the daemon's grant counters between 1 s into the round and just
  // before its end (self-declared containers leave with their processes).
  if (result.error.empty() && policy != kNativePolicy && d >= 2) {
    auto grants_at = [&](uint64_t at) -> std::pair<double, uint64_t> {
      const uint64_t now = NowNs();
      if (at > now) std::this_thread::sleep_for(std::chrono::nanoseconds(at - now));
      auto status = tessera::ipc::Call(socket, "STATUS", nullptr, 2s);
      double grants = kNaN;
      if (status.ok() && status->rfind("OK ", 0) == 0) {
        try {
          grants = 0;
          const nlohmann::json doc = nlohmann::json::parse(status->substr(3));
          for (const auto& container : doc.at("containers")) {
            for (const auto& compute : container.at("compute")) {
              grants += compute.value("grants", 0.0);
            }
          }
        } catch (const nlohmann::json::exception&) {
          grants = kNaN;
        }
      }
      return {grants, NowNs()};
    };
    const auto [g0, t0] = grants_at(start_ns + 1'000'000'000ull);
    const auto [g1, t1] = grants_at(start_ns + static_cast<uint64_t>((d - 0.3) * 1e9));
    if (t1 > t0) result.grants_per_s = (g1 - g0) / (static_cast<double>(t1 - t0) / 1e9);
  }
  for (size_t i = 0; result.error.empty() && i < children.size(); ++i) {
    ChildProcess& child = **children[i];
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    child.WaitForKey("ok", std::max(left, 1ms));
    const auto status = child.Wait(std::max(left, 1ms));
    child.DrainOutput(2s);
    if (!status) {
      result.error = "tenant " + c.tenants[i].name + " timed out; killed";
    } else if (*status != 0) {
      result.error = "tenant " + c.tenants[i].name + " exited with " + std::to_string(*status);
    }
  }
  (*daemon)->Kill(SIGTERM);
  (*daemon)->Wait(10s);
  cleanup();
  if (!result.error.empty()) return result;

  const size_t buckets = static_cast<size_t>(std::llround(d / kBucketS));
  for (size_t i = 0; i < children.size(); ++i) {
    const auto& v = (**children[i]).values();
    TenantResult t;
    if (!v.count("buckets") || !ParseBuckets(v.at("buckets"), buckets, &t.busy_ns)) {
      result.error = "tenant " + c.tenants[i].name + " printed no buckets";
      return result;
    }
    t.kernels = v.count("kernels") ? std::stoull(v.at("kernels")) : 0;
    if (v.count("stopped_ns")) t.stopped_s = std::stod(v.at("stopped_ns")) / 1e9;
    if (v.count("start_late_ns")) t.start_late_ms = std::stod(v.at("start_late_ns")) / 1e6;
    if (v.count("latencies_ns")) {
      std::stringstream in(v.at("latencies_ns"));
      std::string item;
      while (std::getline(in, item, ',')) {
        if (!item.empty()) t.latencies_ms.push_back(std::stod(item) / 1e6);
      }
    }
    result.tenants.push_back(std::move(t));
  }
  result.ok = true;
  const auto [steal1, total1] = CpuStealAndTotal();
  if (total1 > total0) result.steal_pct = 100.0 * (steal1 - steal0) / (total1 - total0);
  return result;
}

// ---- Judging ----------------------------------------------------------------------------------
struct Metrics {
  std::vector<double> share_pct;                       // achieved over the whole run
  std::vector<double> target_pct;                      // time-averaged target over the whole run
  double err_short_max = kNaN, err_short_mean = kNaN;  // 1 s windows, points
  double err_long_max = kNaN, err_long_mean = kNaN;    // 10 s windows (or the whole run)
  double long_window_s = 0;
  double ratio_error = kNaN;  // max over pairs of |(a_i/a_1)/(w_i/w_1) - 1|
  double busy_pct = kNaN;
  double reclaim_ms = kNaN;  // +inf: never reclaimed
  double hp_p50_ms = kNaN, hp_p99_ms = kNaN;
  size_t hp_samples = 0;
  double start_late_ms = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Metrics Judge(const Case& c, const RoundResult& r, double duration_s) {
  Metrics m;
  const size_t n = c.tenants.size();
  const size_t nb = r.tenants.empty() ? 0 : r.tenants[0].busy_ns.size();
  const double bucket_ns = kBucketS * 1e9;
  // The idle tenant's stop splits the run in two phases with different targets.
  double stop_s = kNaN;
  size_t idle_index = n;
  for (size_t i = 0; i < n; ++i) {
    if (c.tenants[i].role == Role::kIdleAfter) {
      idle_index = i;
      stop_s = r.tenants[i].stopped_s;
    }
  }
  auto target = [&](size_t i, size_t bucket) -> double {
    if (idle_index == n || std::isnan(stop_s) || (bucket + 1) * kBucketS <= stop_s) {
      return c.tenants[i].target_pct;
    }
    if (i == idle_index) return 0;
    return 100.0 / static_cast<double>(n - 1);  // equal among those still active (policy 1)
  };
  auto window_errors = [&](size_t width, double* max_err, double* mean_err) {
    width = std::min(width, nb);
    if (width == 0) return;
    double worst = 0, sum = 0;
    size_t count = 0;
    for (size_t start = 0; start + width <= nb; start += 10) {
      std::vector<double> busy(n, 0), tgt(n, 0);
      double judged_busy = 0;
      for (size_t i = 0; i < n; ++i) {
        for (size_t b = start; b < start + width; ++b) {
          busy[i] += r.tenants[i].busy_ns[b];
          tgt[i] += target(i, b) / static_cast<double>(width);
        }
        if (c.tenants[i].judged) judged_busy += busy[i];
      }
      const double denom = c.relative ? judged_busy : static_cast<double>(width) * bucket_ns;
      for (size_t i = 0; i < n; ++i) {
        if (!c.tenants[i].judged) continue;
        const double share = denom > 0 ? 100.0 * busy[i] / denom : 0;
        const double err = std::fabs(share - tgt[i]);
        worst = std::max(worst, err);
        sum += err;
        ++count;
      }
      if (start + width == nb) break;
    }
    *max_err = worst;
    *mean_err = count ? sum / static_cast<double>(count) : kNaN;
  };
  window_errors(100, &m.err_short_max, &m.err_short_mean);
  m.long_window_s = std::min(10.0, static_cast<double>(nb) * kBucketS);
  window_errors(1000, &m.err_long_max, &m.err_long_mean);

  // Whole-run shares and busy fraction.
  std::vector<double> total(n, 0);
  double all = 0, judged = 0;
  for (size_t i = 0; i < n; ++i) {
    for (double v : r.tenants[i].busy_ns) total[i] += v;
    all += total[i];
    if (c.tenants[i].judged) judged += total[i];
    m.start_late_ms = std::max(m.start_late_ms, r.tenants[i].start_late_ms);
  }
  const double wall_ns = duration_s * 1e9;
  for (size_t i = 0; i < n; ++i) {
    const double denom = c.relative ? judged : wall_ns;
    m.share_pct.push_back(denom > 0 ? 100.0 * total[i] / denom : 0);
    double t = 0;
    for (size_t b = 0; b < nb; ++b) t += target(i, b);
    m.target_pct.push_back(nb ? t / static_cast<double>(nb) : 0);
  }
  m.busy_pct = 100.0 * all / wall_ns;

  if (c.weighted && total[0] > 0) {
    double worst = 0;
    for (size_t i = 1; i < n; ++i) {
      const double achieved = total[i] / total[0];
      const double wanted = c.tenants[i].target_pct / c.tenants[0].target_pct;
      worst = std::max(worst, std::fabs(achieved / wanted - 1));
    }
    m.ratio_error = worst;
  }
  if (c.idle && !std::isnan(stop_s)) {
    // First 100 ms window starting at or after the stop in which the others together keep the
    // GPU at least 95 % busy; the time from the stop to that window's start.
    m.reclaim_ms = std::numeric_limits<double>::infinity();
    const size_t first = static_cast<size_t>(std::ceil(stop_s / kBucketS));
    for (size_t b = first; b + 10 <= nb; ++b) {
      double others = 0;
      for (size_t i = 0; i < n; ++i) {
        if (i == idle_index) continue;
        for (size_t k = b; k < b + 10; ++k) others += r.tenants[i].busy_ns[k];
      }
      if (others >= 0.95 * 10 * bucket_ns) {
        m.reclaim_ms = (static_cast<double>(b) * kBucketS - stop_s) * 1000;
        break;
      }
    }
  }
  if (c.high_prio) {
    for (size_t i = 0; i < n; ++i) {
      if (c.tenants[i].role != Role::kHighPrio) continue;
      m.hp_samples = r.tenants[i].latencies_ms.size();
      m.hp_p50_ms = Percentile(r.tenants[i].latencies_ms, 0.50);
      m.hp_p99_ms = Percentile(r.tenants[i].latencies_ms, 0.99);
    }
  }
  return m;
}

struct Check {
  std::string what;
  double value;
  double limit;
  bool pass;
};

// The acceptance thresholds of issue 4 (and the case's own), applied to the round under the case's
// own policy; `busy_ratio` is its busy fraction over native's in the same run.
std::vector<Check> Accept(const Case& c, const Metrics& m, double busy_ratio) {
  std::vector<Check> checks;
  const double kernel_ms = static_cast<double>(c.kernel_ns) / 1e6;
  if (!c.high_prio || c.share_limit > 0) {
    const double limit = c.share_limit > 0 ? c.share_limit : kernel_ms <= 1.0 ? 2.0 : 5.0;
    checks.push_back(
        {"share error, long windows (points)", m.err_long_max, limit, m.err_long_max <= limit});
  }
  if (c.weighted) {
    checks.push_back({"weighted ratio error", m.ratio_error, 0.05, m.ratio_error <= 0.05});
  }
  if (c.policy == 1 || c.policy == 2) {
    checks.push_back({"device busy (%)", m.busy_pct, 97.0, m.busy_pct >= 97.0});
  }
  if (c.busy_ratio_min > 0) {
    checks.push_back({"device busy over native's", busy_ratio, c.busy_ratio_min,
                      busy_ratio >= c.busy_ratio_min});
  }
  if (c.idle) {
    checks.push_back({"idle share reclaimed (ms)", m.reclaim_ms, 100.0, m.reclaim_ms <= 100.0});
  }
  if (c.high_prio) {
    const double limit = kernel_ms + 1.0;
    checks.push_back(
        {"high-priority p99 admission (ms)", m.hp_p99_ms, limit, m.hp_p99_ms <= limit});
  }
  return checks;
}

double Median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Each figure's median over the repetitions of a case (shares tenant by tenant).
Metrics MedianMetrics(const std::vector<Metrics>& runs) {
  Metrics m = runs.front();
  auto median = [&](double Metrics::*field) {
    std::vector<double> v;
    for (const Metrics& r : runs) v.push_back(r.*field);
    m.*field = Median(v);
  };
  for (double Metrics::*f :
       {&Metrics::err_short_max, &Metrics::err_short_mean, &Metrics::err_long_max,
        &Metrics::err_long_mean, &Metrics::ratio_error, &Metrics::busy_pct, &Metrics::reclaim_ms,
        &Metrics::hp_p50_ms, &Metrics::hp_p99_ms}) {
    median(f);
  }
  for (size_t i = 0; i < m.share_pct.size(); ++i) {
    std::vector<double> v;
    for (const Metrics& r : runs) v.push_back(r.share_pct[i]);
    m.share_pct[i] = Median(v);
  }
  return m;
}

// The one number that says how much better than native a case is (lower is better for all).
struct Headline {
  const char* metric;
  double ours;
  double native;
};
Headline HeadlineOf(const Case& c, const Metrics& ours, const Metrics& native) {
  if (c.high_prio) return {"hp_p99_admission_ms", ours.hp_p99_ms, native.hp_p99_ms};
  if (c.weighted) return {"weighted_ratio_error", ours.ratio_error, native.ratio_error};
  return {"share_error_long_max_points", ours.err_long_max, native.err_long_max};
}

// ---- Output -------------------------------------------------------------------------------------
using Json = nlohmann::ordered_json;

// A measured number: null when there is none (NaN), "inf" when it is unbounded.
Json Number(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return "inf";
  return v;
}

Json MetricsJson(const Case& c, const RoundResult& r, const Metrics& m) {
  Json shares = Json::array(), kernels = Json::array(), busy = Json::array();
  for (double share : m.share_pct) shares.push_back(Number(share));
  for (const auto& t : r.tenants) kernels.push_back(t.kernels);
  // Each tenant's share of the device per 100 ms, for chasing a failing window.
  for (const auto& t : r.tenants) {
    Json per_100ms = Json::array();
    for (size_t k = 0; k + 10 <= t.busy_ns.size(); k += 10) {
      double sum = 0;
      for (size_t j = k; j < k + 10; ++j) sum += t.busy_ns[j];
      per_100ms.push_back(std::round(1000.0 * sum / (10 * kBucketS * 1e9)) / 10);
    }
    busy.push_back(std::move(per_100ms));
  }
  return {
      {"policy", r.policy},
      {"policy_applied", r.gated},
      {"cpu_steal_pct", Number(r.steal_pct)},
      {"shares_pct", std::move(shares)},
      {"kernels", std::move(kernels)},
      {"busy_pct_per_100ms", std::move(busy)},
      {"share_error_1s", {{"max", Number(m.err_short_max)}, {"mean", Number(m.err_short_mean)}}},
      {"share_error_long",
       {{"window_s", Number(m.long_window_s)},
        {"max", Number(m.err_long_max)},
        {"mean", Number(m.err_long_mean)}}},
      {"weighted_ratio_error", Number(m.ratio_error)},
      {"busy_pct", Number(m.busy_pct)},
      {"grants_per_s", Number(r.grants_per_s)},
      {"reclaim_ms", Number(m.reclaim_ms)},
      {"hp_admission_ms",
       {{"p50", Number(m.hp_p50_ms)},
        {"p99", Number(m.hp_p99_ms)},
        {"samples", m.hp_samples},
        {"longest_queued_be_kernel_ms",
         Number(c.high_prio ? static_cast<double>(c.kernel_ns) / 1e6 : kNaN)}}},
      {"start_late_ms", Number(m.start_late_ms)}};
}

void PrintRow(const char* run, const Metrics& m, double grants_per_s) {
  std::string shares;
  for (double s : m.share_pct) shares += Fmt("%.1f ", s);
  std::printf("  %-7s %-18s %11s %11s %7s %8s %9s %15s %8s\n", run, shares.c_str(),
              (Fmt("%.2f", m.err_short_max) + "/" + Fmt("%.2f", m.err_short_mean)).c_str(),
              (Fmt("%.2f", m.err_long_max) + "/" + Fmt("%.2f", m.err_long_mean)).c_str(),
              Fmt("%.3f", m.ratio_error).c_str(), Fmt("%.1f", m.busy_pct).c_str(),
              std::isinf(m.reclaim_ms) ? "never" : Fmt("%.0f", m.reclaim_ms).c_str(),
              (Fmt("%.2f", m.hp_p50_ms) + "/" + Fmt("%.2f", m.hp_p99_ms)).c_str(),
              Fmt("%.0f", grants_per_s).c_str());
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "compute_scenario_bench: %s\nusage: compute_scenario_bench [--duration S] "
               "[--quick] [--case GLOB[,GLOB...]] [--repeat N] [--json PATH] [--trace DIR] "
               "[--no-daemon-flags] [--strict] [--list]\n",
               why.c_str());
  return 2;
}

bool Selected(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  std::stringstream in(filter);
  std::string glob;
  while (std::getline(in, glob, ',')) {
    if (fnmatch(glob.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // interleave sensibly with the children's stderr
  Settings s;
  s.build = tessera::process::BuildDir();
  std::string json = s.build + "/bench/compute_scenario.json";
  std::string filter;
  bool strict = false, list = false, duration_given = false;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--duration") {
      const char* v = value();
      char* end = nullptr;
      s.duration_s = v ? std::strtod(v, &end) : 0;
      if (v == nullptr || *end != '\0' || !(s.duration_s >= 1 && s.duration_s <= 600)) {
        return Usage("--duration: expected seconds from 1 to 600");
      }
      duration_given = true;
    } else if (a == "--quick") {
      s.quick = true;
    } else if (a == "--case") {
      const char* v = value();
      if (v == nullptr) return Usage("--case needs a name or glob");
      filter = v;
    } else if (a == "--repeat") {
      const char* v = value();
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : 0;
      if (v == nullptr || *end != '\0' || n < 1 || n > 20) {
        return Usage("--repeat: expected a whole number from 1 to 20");
      }
      repeat = static_cast<int>(n);
    } else if (a == "--trace") {
      const char* v = value();
      if (v == nullptr) return Usage("--trace needs a directory");
      s.trace_dir = v;
    } else if (a == "--json") {
      const char* v = value();
      if (v == nullptr) return Usage("--json needs a path");
      json = v;
    } else if (a == "--no-daemon-flags") {
      s.daemon_flags = false;
    } else if (a == "--strict") {
      strict = true;
    } else if (a == "--list") {
      list = true;
    } else {
      return Usage("unknown argument \"" + a + "\"");
    }
  }
  if (s.quick && !duration_given) s.duration_s = 3;
  std::vector<Case> cases;
  for (const Case& c : AllCases()) {
    if (Selected(c.name, filter)) cases.push_back(c);
  }
  if (list) {
    for (const Case& c : AllCases()) std::printf("%s\n", c.name.c_str());
    return 0;
  }
  if (cases.empty()) return Usage("no case matches \"" + filter + "\" (see --list)");
  for (const char* p : {"/bin/tesserad", "/bench/compute_tenant", "/lib/libtessera-simgpu.so",
                        "/lib/tessera/libcuda.so.1"}) {
    if (access((s.build + p).c_str(), R_OK) != 0) {
      std::fprintf(stderr, "compute_scenario_bench: %s%s is missing; build first\n",
                   s.build.c_str(), p);
      return 1;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::printf(
      "compute_scenario_bench: %zu cases, %.1f s per round, each under its policy (ours) and "
      "under policy 5 (native, the baseline)\n",
      cases.size(), s.duration_s);
  Json cases_json = Json::array();
  int failed = 0, broken = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    std::string targets, launches;
    for (const TenantPlan& t : c.tenants) {
      targets += t.judged ? Fmt("%.1f ", t.target_pct) : std::string("hp ");
      launches += t.name + (t.launch == "plain" ? "" : "(" + t.launch + ")") + " ";
    }
    std::printf("\n%s: policy %d%s, kernels %s ms, tenants %s\n", c.name.c_str(), c.policy,
                c.max_inst ? (", max_inst " + std::to_string(c.max_inst)).c_str() : "",
                Fmt("%g", static_cast<double>(c.kernel_ns) / 1e6).c_str(), launches.c_str());
    std::printf("  %-7s %-18s %11s %11s %7s %8s %9s %15s %8s\n", "run", "shares %", "err 1s",
                Fmt("err %gs", std::min(10.0, s.duration_s)).c_str(), "ratio", "busy %", "reclaim",
                "hp p50/p99 ms", "grants/s");
    std::printf("  %-7s %-18s %11s %11s\n", "target", targets.c_str(), "max/mean", "max/mean");
    // Each repetition runs both rounds back to back; the verdict is on the medians.
    std::vector<Metrics> ours_runs, native_runs;
    std::vector<double> busy_ratios;
    Json runs_json = Json::array();
    std::string why_broken;
    for (int rep = 0; rep < repeat && why_broken.empty(); ++rep) {
      const RoundResult ours = RunRound(c, c.policy, &s);
      const RoundResult native = RunRound(c, kNativePolicy, &s);
      if (!ours.ok || !native.ok) {
        why_broken = !ours.ok ? ours.error : native.error;
        break;
      }
      const Metrics mo = Judge(c, ours, s.duration_s);
      const Metrics mn = Judge(c, native, s.duration_s);
      const double busy_ratio = mn.busy_pct > 0 ? mo.busy_pct / mn.busy_pct : kNaN;
      PrintRow(ours.gated ? "ours" : "ungated", mo, ours.grants_per_s);
      PrintRow("native", mn, native.grants_per_s);
      std::printf("  busy ours/native %s", Fmt("%.3f", busy_ratio).c_str());
      if (const double steal = std::max(ours.steal_pct, native.steal_pct); steal > 2) {
        std::printf(
            "; warning: the hypervisor took %.0f %% of the CPU (steal) during a round: its "
            "timing is not this machine's",
            steal);
      }
      if (mo.start_late_ms > 10 || mn.start_late_ms > 10) {
        std::printf("; warning: a tenant started %.0f ms late (machine overloaded?)",
                    std::max(mo.start_late_ms, mn.start_late_ms));
      }
      std::printf("\n");
      ours_runs.push_back(mo);
      native_runs.push_back(mn);
      busy_ratios.push_back(busy_ratio);
      runs_json.push_back({{"ours", MetricsJson(c, ours, mo)},
                           {"native", MetricsJson(c, native, mn)},
                           {"busy_ours_over_native", Number(busy_ratio)}});
    }
    if (!why_broken.empty()) {
      std::printf("  BROKEN: %s\n", why_broken.c_str());
      ++broken;
      continue;
    }
    const Metrics mo = repeat > 1 ? MedianMetrics(ours_runs) : ours_runs.front();
    const Metrics mn = repeat > 1 ? MedianMetrics(native_runs) : native_runs.front();
    const double busy_ratio = Median(busy_ratios);
    if (repeat > 1) {
      std::printf("  median of %d:\n", repeat);
      PrintRow("ours", mo, kNaN);
      PrintRow("native", mn, kNaN);
      std::printf("  busy ours/native %s\n", Fmt("%.3f", busy_ratio).c_str());
    }
    const auto checks = Accept(c, mo, busy_ratio);
    bool pass = true;
    std::string verdicts;
    for (const Check& k : checks) {
      pass = pass && k.pass;
      verdicts += "  " + k.what + " " + Fmt("%.3g", k.value) + (k.pass ? " ok" : " over ") +
                  (k.pass ? "" : Fmt("%.3g", k.limit)) + ";";
    }
    const Headline h = HeadlineOf(c, mo, mn);
    const double ratio = h.native > 0 ? h.ours / h.native : kNaN;
    std::printf("  => %s, %s ours/native %s;%s\n", pass ? "PASS" : "FAIL", h.metric,
                Fmt("%.3f", ratio).c_str(), verdicts.c_str());
    if (!pass) ++failed;

    Json tenants = Json::array(), check_list = Json::array();
    for (size_t i = 0; i < c.tenants.size(); ++i) {
      const TenantPlan& t = c.tenants[i];
      tenants.push_back({{"name", t.name},
                         {"target_pct", Number(t.judged ? mo.target_pct[i] : kNaN)},
                         {"launch", t.launch},
                         {"env", t.env}});
    }
    for (const Check& k : checks) {
      check_list.push_back({{"what", k.what},
                            {"value", Number(k.value)},
                            {"limit", Number(k.limit)},
                            {"pass", k.pass}});
    }
    cases_json.push_back({{"name", c.name},
                          {"family", c.family},
                          {"policy", c.policy},
                          {"max_inst", c.max_inst},
                          {"kernel_ns", c.kernel_ns},
                          {"tenants", std::move(tenants)},
                          {"runs", std::move(runs_json)},
                          {"busy_ours_over_native", Number(busy_ratio)},
                          {"ratio",
                           {{"metric", h.metric},
                            {"ours", Number(h.ours)},
                            {"native", Number(h.native)},
                            {"ours_over_native", Number(ratio)}}},
                          {"checks", std::move(check_list)},
                          {"pass", pass}});
  }

  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(json).parent_path(), ignored);
  const Json report = {
      {"benchmark", "compute_scenario_bench"},
      {"baseline", "the same tenants under policy 5 (native, no compute control), same run"},
      {"duration_s", Number(s.duration_s)},
      {"quick", s.quick},
      {"gated", s.daemon_flags},
      {"daemon_refused_policy_flags", s.flags_refused},
      {"cases", std::move(cases_json)},
      {"failed", failed},
      {"broken", broken}};
  std::ofstream out(json);
  out << report.dump(2) << "\n";
  out.close();
  std::printf("\n%zu cases: %zu passed, %d failed, %d broken%s; wrote %s\n", cases.size(),
              cases.size() - static_cast<size_t>(failed + broken), failed, broken,
              s.daemon_flags ? "" : " (ungated: tesserad took no policy)", json.c_str());
  if (!out) return 1;
  if (broken > 0) return 1;
  return strict && failed > 0 ? 1 : 0;
}
