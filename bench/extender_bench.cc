// extender_bench: the openb trace replayed through tessera-extender's HTTP verbs, as
// kube-scheduler would drive them, against the stand-in API server
// (testing/standins/test_apiserver.h).
//
// For each sampled pod (FGD's protocol, the same sequence `tessera sim` draws for the seed): the
// pod is created on the API server, then POST /filter with every node's name, POST /prioritize
// with the nodes that passed when more than one did (kube-scheduler binds a lone node without
// scoring), the highest score picked (kube-scheduler's selectHost), and POST /bind, which writes
// the assignment, commits on the node and creates the Binding. --filter-answer picks the
// extender's answer (chosen, its default: the one node; fitting: every node that fits, so every
// pod is prioritized too). The verbs go over HTTPS with kube-scheduler's client certificate, as
// deploy/kubernetes serves them (certificates made by deploy/kubernetes/extender-certs.sh under
// the JSON's folder; one kept-alive connection, as Go's transport keeps it); --tls off measures
// plain HTTP, so the two runs say what TLS costs. It reports:
//   - the GPU allocation ratio at 90/95/100 % arrived, next to `tessera sim`'s on the same seed
//     (placement::Simulate, run in the same process): the acceptance asks for the same ratio;
//   - latency of filter, prioritize (when asked), bind and of the whole round (p50, p99, max) and
//     pods/s;
//   - the baseline, measured in the same run: the same engine's decision in process (Simulate's
//     decision_us p50/p99), and the ratio of the HTTP round to it.
// Larger clusters (--nodes N > 1213) repeat the trace's node list; they measure latency only.
//
// --replay: the replay with departures instead (placement/replay.h, the seed's pods for --load,
// the queue model of kube-scheduler's queue): every pod created on the API server at its arrival,
// scheduled through the verbs (testing/standins/scheduler_replay.h), marked unschedulable when
// it first fails, deleted when it leaves; the same replay in process (tessera sim --replay) in
// the same run, and how many pods were placed elsewhere or waited otherwise (the acceptance asks
// for none). --pods N replays the first N pods only. Attempts the replay knows to fail (no
// departure and no change of the drained nodes since the same request failed) are not sent
// (--every-attempt sends them too: the same result, many more rounds).
// Writes JSON (default build/bench/extender_bench.json). A benchmark, not a test: nothing here
// asserts a speed. Test tooling: the in-process API server is a stand-in.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/number.h"
#include "k8s/extender/extender_app.h"
#include "placement/replay.h"
#include "placement/simulator.h"
#include "placement/trace.h"
#include "testing/standins/scheduler_replay.h"
#include "testing/standins/test_apiserver.h"
#include "testing/support/http_attack.h"
#include "testing/support/test_objects.h"

namespace {

namespace pl = tessera::placement;
using tessera::k8s::Json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir;  // openb trace
  int nodes = 1213;
  int max_pods = 0;  // 0: the whole sampled sequence
  uint64_t seed = 42;
  std::string json = "build/bench/extender_bench.json";
  tessera::extender::FilterAnswer answer = tessera::extender::FilterAnswer::kChosen;
  bool replay = false;
  double load = 1.2;
  bool every_attempt = false;
  bool tls = true;
};

struct Series {
  std::vector<double> us;
  void Add(double v) { us.push_back(v); }
  double Pct(double q) {
    if (us.empty()) return 0;
    std::vector<double> s = us;
    const size_t k = std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())));
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
    return s[k];
  }
  double Max() const { return us.empty() ? 0 : *std::max_element(us.begin(), us.end()); }
  double Sum() const {
    double t = 0;
    for (double v : us) t += v;
    return t;
  }
  Json ToJson() {
    return {{"p50_us", Pct(0.5)}, {"p99_us", Pct(0.99)}, {"max_us", Max()}, {"count", us.size()}};
  }
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// The node list, repeated (names suffixed) up to `count` nodes.
std::vector<pl::NodeSpec> Nodes(const pl::NodeList& list, int count) {
  std::vector<pl::NodeSpec> out;
  for (int i = 0; static_cast<int>(out.size()) < count; ++i) {
    pl::NodeSpec s = list.nodes[static_cast<size_t>(i) % list.nodes.size()];
    const int round = i / static_cast<int>(list.nodes.size());
    if (round > 0) s.name += "-r" + std::to_string(round);
    out.push_back(s);
  }
  return out;
}

Json NodeObject(const pl::NodeSpec& s, const pl::ModelTable& models) {
  std::vector<tessera::extender::testing::TestGpu> gpus;
  for (int g = 0; g < s.gpu_count; ++g) {
    const auto& m = models.model(s.model);
    gpus.push_back({m.name, static_cast<uint64_t>(m.memory_mib) / 1024, true});
  }
  Json node = tessera::extender::testing::Node(s.name, gpus, s.gpu_count > 0 ? "core_mem" : "none",
                                               std::to_string(s.cpu_milli) + "m",
                                               std::to_string(s.memory_mib) + "Mi");
  // Memory sizes that are not whole GiB: write the exact bytes.
  if (s.gpu_count > 0) {
    auto inv = tessera::k8s::ParseGpuInventory(
        node["metadata"]["annotations"][tessera::k8s::kInventoryAnnotation].get<std::string>());
    for (auto& g : inv->gpus)
      g.memory = tessera::Bytes(static_cast<uint64_t>(models.model(s.model).memory_mib) << 20);
    node["metadata"]["annotations"][tessera::k8s::kInventoryAnnotation] =
        tessera::k8s::WriteGpuInventory(*inv);
  }
  node["metadata"].erase("uid");
  node["metadata"].erase("resourceVersion");
  return node;
}

Json PodObject(const std::string& name, const pl::Request& r) {
  std::map<std::string, std::string> limits;
  if (r.gpu_count > 0) {
    limits["tessera.io/gpu-count"] = std::to_string(r.gpu_count);
    if (!r.whole_gpus()) limits["tessera.io/gpu-core"] = std::to_string(r.gpu_milli / 10);
  }
  tessera::extender::testing::TestContainer c;
  c.limits = limits;
  c.cpu = std::to_string(r.cpu_milli) + "m";
  c.memory = std::to_string(r.memory_mib) + "Mi";
  Json pod = tessera::extender::testing::Pod(name, std::vector{c});
  pod["metadata"].erase("uid");
  pod["metadata"].erase("resourceVersion");
  return pod;
}

// --replay: the replay with departures through the extender, and in process.
int RunReplay(const Options& o) {
  auto list = pl::LoadNodeCsv(o.dir + "/openb_node_list_gpu_node.csv");
  if (!list.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", list.error().c_str());
    return 1;
  }
  auto pods = pl::LoadPodCsv(o.dir + "/openb_pod_list_default.csv", list->models);
  if (!pods.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", pods.error().c_str());
    return 1;
  }
  const pl::Cluster cluster(list->models, list->nodes);
  auto workload =
      std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(pods->requests));
  pl::ReplayOptions ro;
  ro.seed = o.seed;
  ro.load = o.load;
  ro.skip_known_failures = !o.every_attempt;
  // The run's pods (the first --pods of them), as a list played as it is.
  auto run_pods = pl::ReplayPodsFor(pods->requests, pods->times, cluster.gpu_milli_capacity(), ro);
  if (!run_pods.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", run_pods.error().c_str());
    return 1;
  }
  std::vector<pl::Request> requests;
  std::vector<pl::PodTimes> times;
  const size_t count = o.max_pods > 0
                           ? std::min(run_pods->order.size(), static_cast<size_t>(o.max_pods))
                           : run_pods->order.size();
  for (size_t i = 0; i < count; ++i) {
    const auto u = static_cast<size_t>(run_pods->order[i]);
    requests.push_back(pods->requests[u]);
    times.push_back(pods->times[u]);  // played as a list, in this (arrival) order
  }
  ro.resample = false;
  const auto t_sim = Clock::now();
  auto sim = pl::Replay(cluster, requests, times, *workload, "tessera", ro);
  const double sim_s = std::chrono::duration<double>(Clock::now() - t_sim).count();
  if (!sim.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", sim.error().c_str());
    return 1;
  }
  tessera::k8s::TestApiServer api;
  if (auto s = api.Start(0); !s.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", s.message().c_str());
    return 1;
  }
  for (const auto& spec : list->nodes)
    api.CreateNode(tessera::extender::testing::NodeFor(spec, list->models));
  // The extender on the replay's clock (trace seconds), as the simulator's starts are.
  tessera::ManualClock replay_clock;
  tessera::extender::AppConfig config;
  config.state.clock = &replay_clock;
  config.api.server = api.url();
  config.listen_host = "127.0.0.1";
  config.listen_port = 0;
  config.quiet = true;
  config.state.workload = workload;
  config.state.reservation_ttl = std::chrono::minutes(10);
  config.state.filter_answer = o.answer;
  tessera::extender::ExtenderApp app(config);
  if (auto s = app.Start(); !s.ok() || !app.WaitReady(std::chrono::seconds(60))) {
    std::fprintf(stderr, "extender_bench: the extender did not start: %s\n", s.message().c_str());
    return 1;
  }
  tessera::extender::testing::ExtenderReplayScheduler scheduler(api, app, app.port(), cluster,
                                                                {nullptr, &replay_clock});
  const auto t_ext = Clock::now();
  auto ext = pl::ReplayWith(cluster, requests, times, scheduler, ro);
  const double ext_s = std::chrono::duration<double>(Clock::now() - t_ext).count();
  app.Stop();
  api.Stop();
  if (!ext.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", ext.error().c_str());
    return 1;
  }
  int64_t other_place = 0, other_wait = 0;
  for (size_t i = 0; i < sim->pod_waits.size(); ++i) {
    other_place += ext->pod_placements[i] == sim->pod_placements[i] ? 0 : 1;
    other_wait += ext->pod_waits[i] == sim->pod_waits[i] ? 0 : 1;
  }
  auto summary = [](const pl::ReplayResult& r, double wall) {
    return Json{{"pods", r.pods},
                {"placed", r.placed},
                {"waited", r.waited},
                {"allocation_while_waiting", r.allocation_while_waiting},
                {"wait_s_p50", r.wait_s_p50},
                {"wait_s_p99", r.wait_s_p99},
                {"wait_s_max", r.wait_s_max},
                {"wait_s_mean", r.wait_s_mean},
                {"attempts", r.attempts},
                {"decisions", r.decisions},
                {"reservations_made", r.reservations_made},
                {"wall_seconds", wall}};
  };
  Json out = {{"benchmark", "extender_bench"},
              {"mode", "replay"},
              {"seed", o.seed},
              {"load", o.load},
              {"every_attempt", o.every_attempt},
              {"extender", summary(*ext, ext_s)},
              {"tessera_sim", summary(*sim, sim_s)},
              {"rounds", scheduler.rounds()},
              {"pods_placed_elsewhere", other_place},
              {"pods_waiting_otherwise", other_wait}};
  std::printf(
      "extender_bench --replay: %zu pods, seed %llu, load %.2f; %lld HTTP rounds in %.0f s\n",
      count, static_cast<unsigned long long>(o.seed), o.load,
      static_cast<long long>(scheduler.rounds()), ext_s);
  for (const auto& [name, r] : {std::pair{"extender   ", &*ext}, {"tessera sim", &*sim}}) {
    std::printf(
        "  %s: alloc while waiting %.2f %%, waits p99 %.0f s max %.0f s mean %.1f s, "
        "%lld waited, %lld nodes drained\n",
        name, r->allocation_while_waiting, r->wait_s_p99, r->wait_s_max, r->wait_s_mean,
        static_cast<long long>(r->waited), static_cast<long long>(r->reservations_made));
  }
  std::printf("  pods placed elsewhere: %lld, pods waiting otherwise: %lld\n",
              static_cast<long long>(other_place), static_cast<long long>(other_wait));
  std::filesystem::create_directories(std::filesystem::path(o.json).parent_path());
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("  JSON: %s\n", o.json.c_str());
  return other_place == 0 && other_wait == 0 ? 0 : 1;
}

int Run(const Options& o) {
  if (o.replay) return RunReplay(o);
  auto list = pl::LoadNodeCsv(o.dir + "/openb_node_list_gpu_node.csv");
  if (!list.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", list.error().c_str());
    return 1;
  }
  auto pods = pl::LoadPodCsv(o.dir + "/openb_pod_list_default.csv", list->models);
  if (!pods.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", pods.error().c_str());
    return 1;
  }
  const std::vector<pl::NodeSpec> specs = Nodes(*list, o.nodes);
  pl::Cluster cluster(list->models, specs);
  auto workload =
      std::make_shared<pl::TargetWorkload>(pl::TargetWorkload::FromRequests(pods->requests));
  // The baseline: the same engine in process, the simulator's protocol, same seed.
  pl::SimOptions so;
  so.seed = o.seed;
  auto sim = pl::Simulate(cluster, pods->requests, *workload, "tessera", so);
  if (!sim.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", sim.error().c_str());
    return 1;
  }
  auto order = pl::SampleWorkload(pods->requests, cluster.gpu_milli_capacity(), 1.3, o.seed);
  const size_t count = o.max_pods > 0
                           ? std::min<size_t>(order->size(), static_cast<size_t>(o.max_pods))
                           : order->size();

  tessera::k8s::TestApiServer api;
  if (auto s = api.Start(0); !s.ok()) {
    std::fprintf(stderr, "extender_bench: %s\n", s.message().c_str());
    return 1;
  }
  std::vector<std::string> names;
  for (const auto& s : specs) {
    api.CreateNode(NodeObject(s, list->models));
    names.push_back(s.name);
  }
  // The FGD protocol has no time: the extender's clock stands still, so every pod is as young as
  // in tessera sim (the age preference plays no part), and the allocation must be the same.
  tessera::ManualClock protocol_clock;
  tessera::extender::AppConfig config;
  config.api.server = api.url();
  config.listen_host = "127.0.0.1";
  config.listen_port = 0;
  config.state.workload = workload;
  config.state.clock = &protocol_clock;
  config.state.reservation_ttl = std::chrono::minutes(10);
  config.state.filter_answer = o.answer;
  std::optional<tessera::testing::TlsFiles> tls;
  if (o.tls) {
    // The certificates go beside the JSON, whose folder may not exist yet (a fresh build's).
    std::error_code ignored;
    std::filesystem::create_directories(std::filesystem::path(o.json).parent_path(), ignored);
    const std::string dir =
        (std::filesystem::path(o.json).parent_path() / "extender_bench_tls").string();
    auto made = tessera::testing::MakeTlsFiles(dir);
    if (!made.ok()) {
      std::fprintf(stderr, "extender_bench: %s\n", made.error().c_str());
      return 1;
    }
    tls = *made;
    config.tls = tessera::http::HttpServer::TlsOptions{tls->cert, tls->key, tls->ca};
  }
  tessera::extender::ExtenderApp app(config);
  if (auto s = app.Start(); !s.ok() || !app.WaitReady(std::chrono::seconds(60))) {
    std::fprintf(stderr, "extender_bench: the extender did not start: %s\n", s.message().c_str());
    return 1;
  }
  httplib::Client http = tls ? httplib::Client(app.url(), tls->client_cert, tls->client_key)
                             : httplib::Client(app.url());
  if (tls) {
    http.set_ca_cert_path(tls->ca.c_str());
    http.enable_server_certificate_verification(true);
  }
  http.set_keep_alive(true);
  http.set_tcp_nodelay(true);  // as Go's net/http client, which kube-scheduler uses
  http.set_read_timeout(30, 0);

  Series filter, prioritize, bind, total;
  const double capacity = static_cast<double>(cluster.gpu_milli_capacity());
  double arrived = 0, allocated = 0;
  std::map<int, double> ratio;  // arrived percent -> allocation ratio, recorded as the sim does
  int64_t bound = 0, failed = 0, errors = 0;
  const auto start = Clock::now();
  for (size_t i = 0; i < count; ++i) {
    const pl::Request& r = pods->requests[static_cast<size_t>((*order)[i])];
    const double after = arrived + static_cast<double>(r.total_gpu_milli());
    for (int point : {90, 95, 100}) {
      if (ratio.count(point) == 0 && point * capacity / 100 < after - 1e-9) {
        ratio[point] = 100 * allocated / capacity;
      }
    }
    arrived = after;
    const std::string name = "p-" + std::to_string(i);
    Json pod = api.CreatePod(PodObject(name, r));
    // Bodies are built before the clock starts, in kube-scheduler's form (Go's field order):
    // they are its work, not ours.
    const std::string filter_body = tessera::extender::testing::ExtenderArgsBody(pod, names);
    const auto t0 = Clock::now();
    auto fr = http.Post("/filter", filter_body, "application/json");
    const double f_us = Since(t0);
    if (!fr || fr->status != 200) {
      ++errors;
      continue;
    }
    const Json fj = Json::parse(fr->body);
    if (fj["NodeNames"].empty()) {
      ++failed;
      filter.Add(f_us);
      continue;
    }
    const std::vector<std::string> fits = fj["NodeNames"].get<std::vector<std::string>>();
    std::string best = fits.front();
    double p_us = 0;
    if (fits.size() > 1) {  // kube-scheduler does not prioritize a single node: it binds there
      const std::string prioritize_body = tessera::extender::testing::ExtenderArgsBody(pod, fits);
      const auto t1 = Clock::now();
      auto pr = http.Post("/prioritize", prioritize_body, "application/json");
      p_us = Since(t1);
      if (!pr || pr->status != 200) {
        ++errors;
        continue;
      }
      int64_t top = -1;
      for (const Json& h : Json::parse(pr->body)) {
        if (h["Score"].get<int64_t>() > top) {
          top = h["Score"].get<int64_t>();
          best = h["Host"].get<std::string>();
        }
      }
      prioritize.Add(p_us);
    }
    const std::string bind_body = Json{
        {"PodName", name},
        {"PodNamespace", "default"},
        {"PodUID", pod["metadata"]["uid"]},
        {"Node", best}}.dump();
    const auto t2 = Clock::now();
    auto br = http.Post("/bind", bind_body, "application/json");
    const double b_us = Since(t2);
    if (!br || br->status != 200 || !Json::parse(br->body)["Error"].get<std::string>().empty()) {
      ++errors;
      if (br) std::fprintf(stderr, "extender_bench: bind: %s\n", br->body.c_str());
      continue;
    }
    filter.Add(f_us);
    bind.Add(b_us);
    total.Add(f_us + p_us + b_us);
    allocated += static_cast<double>(r.total_gpu_milli());
    ++bound;
    if ((i + 1) % 2000 == 0) {
      std::fprintf(stderr, "extender_bench: %zu/%zu pods, %.1f s\n", i + 1, count,
                   std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  for (int point : {90, 95, 100}) {
    if (ratio.count(point) == 0) ratio[point] = 100 * allocated / capacity;
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const tessera::extender::StateStats stats = app.state().Stats();
  app.Stop();
  api.Stop();

  const bool full = count == order->size() && o.nodes == static_cast<int>(list->nodes.size());
  Json out = {{"benchmark", "extender_bench"},
              {"nodes", o.nodes},
              {"gpus", cluster.total_gpus()},
              {"seed", o.seed},
              {"filter_answer",
               o.answer == tessera::extender::FilterAnswer::kChosen ? "chosen" : "fitting"},
              {"transport", o.tls ? "https" : "http"},
              {"pods", count},
              {"bound", bound},
              {"unschedulable", failed},
              {"errors", errors},
              {"filter", filter.ToJson()},
              {"prioritize", prioritize.ToJson()},
              {"bind", bind.ToJson()},
              {"filter_prioritize_bind", total.ToJson()},
              {"pods_per_second",
               total.Sum() > 0 ? 1e6 * static_cast<double>(total.us.size()) / total.Sum() : 0},
              {"wall_seconds", wall},
              {"state_rebuilds", stats.rebuilds},
              {"accounting_conflicts", stats.accounting_conflicts},
              {"baseline_engine_decision_us",
               {{"p50", sim->decision_us_p50}, {"p99", sim->decision_us_p99}}},
              {"ratio_p50_vs_engine",
               sim->decision_us_p50 > 0 ? total.Pct(0.5) / sim->decision_us_p50 : 0}};
  if (full) {
    Json ar = Json::object();
    for (int point : {90, 95, 100}) {
      ar[std::to_string(point)] = {
          {"extender", ratio[point]},
          {"tessera_sim", sim->allocation_ratio[static_cast<size_t>(point)]},
          {"difference", ratio[point] - sim->allocation_ratio[static_cast<size_t>(point)]}};
    }
    out["allocation_ratio"] = ar;
  }
  std::printf(
      "extender_bench: %d nodes, %zu pods over %s (%lld bound, %lld unschedulable, %lld "
      "errors)\n",
      o.nodes, count, o.tls ? "HTTPS" : "HTTP", static_cast<long long>(bound),
      static_cast<long long>(failed), static_cast<long long>(errors));
  std::printf("  filter+prioritize+bind  p50 %.0f us  p99 %.0f us  max %.0f us  %.0f pods/s\n",
              total.Pct(0.5), total.Pct(0.99), total.Max(), out["pods_per_second"].get<double>());
  std::printf("  filter p50/p99 %.0f/%.0f us, prioritize %.0f/%.0f us, bind %.0f/%.0f us\n",
              filter.Pct(0.5), filter.Pct(0.99), prioritize.Pct(0.5), prioritize.Pct(0.99),
              bind.Pct(0.5), bind.Pct(0.99));
  std::printf(
      "  baseline: the engine in process p50 %.1f us p99 %.1f us; HTTP round / engine "
      "p50 = %.0fx\n",
      sim->decision_us_p50, sim->decision_us_p99, out["ratio_p50_vs_engine"].get<double>());
  if (full) {
    for (int point : {90, 95, 100}) {
      std::printf("  allocation at %d %% arrived: extender %.2f %%, tessera sim %.2f %% (%+.2f)\n",
                  point, ratio[point], sim->allocation_ratio[static_cast<size_t>(point)],
                  ratio[point] - sim->allocation_ratio[static_cast<size_t>(point)]);
    }
  }
  std::filesystem::create_directories(std::filesystem::path(o.json).parent_path());
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("  JSON: %s\n", o.json.c_str());
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("TESSERA_OPENB_DIR"); env != nullptr && *env != '\0') {
    o.dir = env;
  } else {
    o.dir = TESSERA_OPENB_DIR;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "extender_bench: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](const char* flag, uint64_t min, uint64_t max) {
      auto v = tessera::ParseUnsigned(value(flag), flag, min, max);
      if (!v.ok()) {
        std::fprintf(stderr, "extender_bench: %s\n", v.error().c_str());
        std::exit(2);
      }
      return *v;
    };
    if (a == "--nodes") {
      o.nodes = static_cast<int>(number("--nodes", 1, 100000));
    } else if (a == "--pods") {
      o.max_pods = static_cast<int>(number("--pods", 1, 10000000));
    } else if (a == "--seed") {
      o.seed = number("--seed", 0, UINT64_MAX);
    } else if (a == "--json") {
      o.json = value("--json");
    } else if (a == "--openb") {
      o.dir = value("--openb");
    } else if (a == "--filter-answer") {
      const std::string v = value("--filter-answer");
      if (v != "chosen" && v != "fitting") {
        std::fprintf(stderr, "extender_bench: --filter-answer %s: expected chosen or fitting\n",
                     v.c_str());
        return 2;
      }
      o.answer = v == "fitting" ? tessera::extender::FilterAnswer::kFitting
                                : tessera::extender::FilterAnswer::kChosen;
    } else if (a == "--replay") {
      o.replay = true;
    } else if (a == "--every-attempt") {
      o.every_attempt = true;
    } else if (a == "--load") {
      char* end = nullptr;
      const std::string v = value("--load");
      o.load = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o.load > 0 && o.load <= 100)) {
        std::fprintf(stderr,
                     "extender_bench: --load %s: expected a multiple of the GPUs in (0, 100]\n",
                     v.c_str());
        return 2;
      }
    } else if (a == "--tls") {
      const std::string v = value("--tls");
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "extender_bench: --tls %s: expected on or off\n", v.c_str());
        return 2;
      }
      o.tls = v == "on";
    } else {
      std::fprintf(stderr,
                   "usage: extender_bench [--nodes N] [--pods N] [--seed S] [--json PATH] "
                   "[--openb DIR] [--filter-answer chosen|fitting] [--tls on|off] "
                   "[--replay [--load L] [--every-attempt]]\n");
      return 2;
    }
  }
  return Run(o);
}
