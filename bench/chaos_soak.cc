// chaos_soak: N rounds (default 1000) of chaos against a real tesserad on simgpu, not a CI test
// (a full run takes minutes; the suite's chaos_test runs 12 rounds). Issue 17, item 5.
//
//   chaos_soak [--rounds N] [--round-ms MS] [--restart-percent P] [--restart-gap-ms MS] [--seed S]
//              [--json PATH]
//
// Tenants: two steady ones, never signalled, and a pool of four (two containers of one process,
// one of two), all `shim_tenant churn ... paths` with a 384 MiB limit: each allocates and frees
// random sizes through cuMemAlloc_v2, cuMemAllocPitch_v2, cuMemAllocManaged and cuMemCreate while a
// thread launches spin kernels. Each round does one thing at random: SIGKILL a pool tenant (a new
// one takes its place), SIGSTOP or SIGCONT one, or (P % of rounds) SIGKILL tesserad and start it
// again after up to --restart-gap-ms (default 500). At the end:
//   - every container's bytes in the ledger equal what its live tenants say they hold, no slot is
//     live for a dead process, and after every tenant exits the ledger holds nothing (leaks);
//   - no steady tenant's single launch waited past the bound the daemon's flags give (waits);
//   - every daemon restart listened within 30 s (failed restarts).
// It prints a summary and writes JSON (default build/bench/chaos_soak.json); exit 0 when all three
// are zero.
//
// The wait bound: --quota-max 10 makes a grant last at most 10 ms and a revoked holder's drain at
// most another 10; a stopped holder keeps counting for the 100 ms beat window. So a steady tenant
// waits at most 4 x 20 + 100 + 20 = 200 ms for its turn while a daemon runs. A launch waiting when
// the daemon dies waits at most the 300 ms --daemon-loss-timeout for the next one (then it runs
// ungated), and then for its turn under the new arbiter: 300 + 200 ms. 300 ms of slack is added
// for a loaded 2-core machine, as chaos_test does: 800 ms.
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipc/futex.h"
#include "ipc/unix_socket.h"
#include "ledger/ledger_view.h"
#include "ledger/memory_ledger.h"
#include "process/child_process.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::TenantEnv;
using tessera::process::UniqueName;

constexpr int kQuotaMaxMs = 10, kBeatFreshMs = 100, kLossTimeoutMs = 300, kContainers = 5;
constexpr double kBoundMs =
    kLossTimeoutMs + (kContainers - 1) * 2 * kQuotaMaxMs + kBeatFreshMs + 2 * kQuotaMaxMs + 300;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Options {
  int rounds = 1000;
  int round_ms = 250;
  int restart_percent = 5;
  int restart_gap_ms = 500;  // the longest a daemon stays away before it is started again
  uint64_t seed = 0;
  std::string json;
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "chaos_soak: %s\nusage: chaos_soak [--rounds N] [--round-ms MS] "
               "[--restart-percent P] [--restart-gap-ms MS] [--seed S] [--json PATH]\n",
               why.c_str());
  return 2;
}

class Soak {
 public:
  explicit Soak(const Options& o) : o_(o), rng_(o.seed) {
    state_ = UniqueName("soak");
    socket_ = "/tmp/" + state_ + ".sock";
    ledger_ = "/tessera-ledger-" + state_;
  }
  ~Soak() {
    tenants_.clear();
    if (daemon_) {
      daemon_->Kill(SIGTERM);
      daemon_->Wait(10s);
    }
    tessera::ledger::MemoryLedger::Remove(ledger_);
    shm_unlink(("/tessera-sim-" + state_).c_str());
    unlink(socket_.c_str());
    for (const std::string& f : files_) unlink(f.c_str());
  }

  int Run();

 private:
  struct Member {
    std::string container;
    bool shared;
    ChildProcess* process = nullptr;
    bool stopped = false;
  };
  std::vector<std::string> SimEnv() const {
    return {"TESSERA_SIM_STATE=" + state_, "TESSERA_SIM_GPUS=SimSoak:16GiB:80"};
  }
  // Starts tesserad; false if it did not listen within 30 s.
  bool StartDaemon() {
    daemon_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildDir() + "/bin/tesserad", "--sim", "--socket", socket_,
                                 "--ledger", ledger_, "--policy", "1", "--quota-max",
                                 std::to_string(kQuotaMaxMs), "--daemon-loss-timeout",
                                 std::to_string(kLossTimeoutMs)},
        SimEnv());
    return daemon_->started() && tessera::ipc::WaitUntilListening(socket_, 30s);
  }
  ChildProcess* Churn(const std::string& container, uint64_t end_ns, bool shared) {
    const std::string err = "/tmp/" + state_ + "-" + std::to_string(files_.size()) + ".err";
    files_.push_back(err);
    const std::string cmd = "exec '" + BuildDir() + "/tests/shim_tenant' churn 384 " +
                            std::to_string(end_ns) + " " + std::to_string(rng_()) + " 500 " +
                            (shared ? "shared" : "alone") + " paths 2>'" + err + "'";
    std::vector<std::string> env = TenantEnv(SimEnv(), socket_, container);
    env.push_back("TESSERA_MEM_LIMIT=384MiB");
    tenants_.push_back(
        std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", cmd}, env));
    stderr_of_[tenants_.back().get()] = err;
    return tenants_.back().get();
  }
  static uint64_t Value(ChildProcess& c, const std::string& key) {
    auto it = c.values().find(key);
    return it == c.values().end() ? ~uint64_t{0} : std::strtoull(it->second.c_str(), nullptr, 10);
  }
  static double Double(ChildProcess& c, const std::string& key) {
    auto it = c.values().find(key);
    return it == c.values().end() ? 1e9 : std::strtod(it->second.c_str(), nullptr);
  }
  // The ledger compared with `expected`, retried for up to `within` (a closed connection is
  // reclaimed by the event loop, a death while no daemon watched by the once-a-second sweep).
  std::string Settle(const tessera::ledger::ExpectedHoldings& expected,
                     std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    std::string diff;
    do {
      tessera::ledger::LedgerView view(ledger_);
      diff = view.Compare(expected);
      if (diff.empty()) break;
      std::this_thread::sleep_for(100ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return diff;
  }

  Options o_;
  std::mt19937_64 rng_;
  // Each daemon restart: when it was killed and when the new one listened (CLOCK_MONOTONIC).
  std::vector<std::pair<uint64_t, uint64_t>> restart_log_;
  // Every round's action on a pool tenant: when, and what ("SIGSTOP pool-1 pid 123").
  std::vector<std::pair<uint64_t, std::string>> action_log_;
  uint64_t run_start_ = 0;
  std::string state_, socket_, ledger_;
  std::unique_ptr<ChildProcess> daemon_;
  std::vector<std::unique_ptr<ChildProcess>> tenants_;
  std::map<ChildProcess*, std::string> stderr_of_;
  std::vector<std::string> files_;
};

int Soak::Run() {
  const auto started = std::chrono::steady_clock::now();
  run_start_ = tessera::ipc::MonotonicNs();
  std::printf("chaos_soak: seed %llu, times below are from CLOCK_MONOTONIC %.6f s\n",
              static_cast<unsigned long long>(o_.seed), static_cast<double>(run_start_) / 1e9);
  int failed_restarts = 0, restarts = 0, kills = 0, stops = 0, conts = 0;
  if (!StartDaemon()) {
    std::fprintf(stderr, "chaos_soak: tesserad did not start\n");
    return 1;
  }
  // Tenants churn until well after the last round (restarts add time: at most 0.5 s each).
  const uint64_t end = tessera::ipc::MonotonicNs() + 3'000'000'000ull +
                       static_cast<uint64_t>(o_.rounds) * o_.round_ms * 1'000'000ull *
                           (100 + o_.restart_percent * 4) / 100;
  std::vector<ChildProcess*> steady = {Churn("steady-0", end, false),
                                       Churn("steady-1", end, false)};
  // Pool tenants take any refusal as clean: a killed predecessor's bytes stay counted until the
  // daemon reclaims them (at once on its socket's close, or by the once-a-second sweep when it
  // died between a daemon restart and its re-attach). Steady tenants are alone in their container
  // and never killed: every refusal below their limit is an error there.
  std::vector<Member> pool = {
      {"pool-0", true}, {"pool-1", true}, {"shared", true}, {"shared", true}};
  for (Member& m : pool) m.process = Churn(m.container, end, m.shared);
  std::vector<pid_t> dead;
  std::this_thread::sleep_for(1000ms);

  for (int round = 0; round < o_.rounds; ++round) {
    if (static_cast<int>(rng_() % 100) < o_.restart_percent) {
      const uint64_t killed = tessera::ipc::MonotonicNs();
      daemon_->Kill(SIGKILL);
      daemon_->Wait(10s);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng_() % (o_.restart_gap_ms + 1)));
      ++restarts;
      const bool listening = StartDaemon();
      restart_log_.push_back({killed, tessera::ipc::MonotonicNs()});
      while (!listening && !StartDaemon()) {
        ++failed_restarts;
        std::fprintf(stderr, "chaos_soak: round %d: tesserad did not listen again\n", round);
        if (daemon_) daemon_->Kill(SIGKILL);
        if (failed_restarts > 3) return 1;
      }
    } else {
      Member& m = pool[rng_() % pool.size()];
      const std::string who = m.container + " pid " + std::to_string(m.process->pid());
      if (rng_() % 2 == 0) {
        action_log_.push_back({tessera::ipc::MonotonicNs(), "SIGKILL " + who});
        if (m.stopped) m.process->Kill(SIGCONT);
        m.process->Kill(SIGKILL);
        m.process->Wait(10s);
        dead.push_back(m.process->pid());
        ++kills;
        m.process = Churn(m.container, end, m.shared);
        m.stopped = false;
      } else if (m.stopped) {
        action_log_.push_back({tessera::ipc::MonotonicNs(), "SIGCONT " + who});
        m.process->Kill(SIGCONT);
        m.stopped = false;
        ++conts;
      } else {
        action_log_.push_back({tessera::ipc::MonotonicNs(), "SIGSTOP " + who});
        m.process->Kill(SIGSTOP);
        m.stopped = true;
        ++stops;
      }
    }
    if ((round + 1) % 100 == 0) {
      std::printf("chaos_soak: round %d/%d: %d kills, %d stops, %d continues, %d restarts\n",
                  round + 1, o_.rounds, kills, stops, conts, restarts);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o_.round_ms));
  }
  for (Member& m : pool) {
    if (m.stopped) m.process->Kill(SIGCONT);
  }

  // The reports (each tenant churns until `end`), then the books.
  nlohmann::ordered_json tenants = nlohmann::ordered_json::array();
  tessera::ledger::ExpectedHoldings expected;
  int waits_past_bound = 0, unreported = 0, tenant_errors = 0;
  double max_wait_ms = 0;
  auto report = [&](ChildProcess& c, const std::string& container, bool judged) {
    const auto timeout =
        std::chrono::nanoseconds(end - std::min(end, tessera::ipc::MonotonicNs())) + 60s;
    if (c.WaitForKey("done", std::chrono::duration_cast<std::chrono::milliseconds>(timeout)) !=
        "1") {
      ++unreported;
      std::fprintf(stderr, "chaos_soak: %s pid %d did not report: %s\n", container.c_str(),
                   static_cast<int>(c.pid()), ReadFile(stderr_of_[&c]).c_str());
      return;
    }
    const double longest = Double(c, "longest_launch_ms");
    if (judged) {
      // Where the longest wait of each steady tenant fell, past the bound or not: the daemon
      // restarts around it (and the daemon's late passes, which it logs with their instants).
      const uint64_t at = Value(c, "longest_launch_start_ns");
      std::printf("chaos_soak: %s: longest launch %.1f ms from %.3f s (CLOCK_MONOTONIC %.3f s)",
                  container.c_str(), longest, static_cast<double>(at - run_start_) / 1e9,
                  static_cast<double>(at) / 1e9);
      for (const auto& [killed, back] : restart_log_) {
        if (killed + 3'000'000'000ull > at && killed < at + 3'000'000'000ull) {
          std::printf("; daemon killed at %.3f s, listening again at %.3f s",
                      static_cast<double>(killed - run_start_) / 1e9,
                      static_cast<double>(back - run_start_) / 1e9);
        }
      }
      for (const auto& [when, what] : action_log_) {
        if (when + 1'000'000'000ull > at && when < at + 1'000'000'000ull) {
          std::printf("; %s at %.3f s", what.c_str(), static_cast<double>(when - run_start_) / 1e9);
        }
      }
      std::printf("\n");
      max_wait_ms = std::max(max_wait_ms, longest);
      if (longest >= kBoundMs) {
        ++waits_past_bound;
        // What happened around the latest slow launch: the daemon restarts near it.
        const uint64_t at = Value(c, "longest_launch_start_ns");
        std::fprintf(stderr, "chaos_soak: %s: a launch took %.1f ms from %.3f s;",
                     container.c_str(), longest, static_cast<double>(at - run_start_) / 1e9);
        for (const auto& [killed, back] : restart_log_) {
          if (killed + 3'000'000'000ull > at && killed < at + 3'000'000'000ull) {
            std::fprintf(stderr, " daemon killed at %.3f s, listening again at %.3f s;",
                         static_cast<double>(killed - run_start_) / 1e9,
                         static_cast<double>(back - run_start_) / 1e9);
          }
        }
        std::fprintf(stderr, "\n  its stderr: %s\n", ReadFile(stderr_of_[&c]).c_str());
      }
    }
    if (Value(c, "launch_error") != 0) {
      ++tenant_errors;
      std::fprintf(stderr, "chaos_soak: %s pid %d: launch error %llu\n", container.c_str(),
                   static_cast<int>(c.pid()),
                   static_cast<unsigned long long>(Value(c, "launch_error")));
    }
    expected[container][c.pid()] = Value(c, "held_bytes");
    tenants.push_back({{"container", container},
                       {"steady", judged},
                       {"allocs", Value(c, "allocs")},
                       {"ooms", Value(c, "ooms")},
                       {"kernels", Value(c, "kernels")},
                       {"held_bytes", Value(c, "held_bytes")},
                       {"longest_launch_ms", longest}});
  };
  for (size_t i = 0; i < steady.size(); ++i)
    report(*steady[i], "steady-" + std::to_string(i), true);
  for (Member& m : pool) report(*m.process, m.container, false);
  const std::string running_diff = Settle(expected, 5s);
  std::vector<std::string> stale;
  {
    tessera::ledger::LedgerView view(ledger_);
    stale = view.LiveSlotsOf(dead);
  }
  for (ChildProcess* c : steady) c->CloseStdin();
  for (Member& m : pool) m.process->CloseStdin();
  auto exited = [&](ChildProcess& c) {
    const auto status = c.Wait(60s);
    if (status == 0) return;
    ++tenant_errors;
    c.DrainOutput(1s);
    auto said = [&](const char* key) {
      auto it = c.values().find(key);
      return it == c.values().end() ? std::string("-") : it->second;
    };
    std::fprintf(
        stderr,
        "chaos_soak: pid %d exited %d (error=%s call=%s bad_free=%s bad_alloc=%s/%s held=%s): %s\n",
        static_cast<int>(c.pid()), status.value_or(-1), said("error").c_str(), said("call").c_str(),
        said("bad_free").c_str(), said("bad_alloc").c_str(), said("bad_alloc_bytes").c_str(),
        said("held_at_bad").c_str(), ReadFile(stderr_of_[&c]).c_str());
  };
  for (ChildProcess* c : steady) exited(*c);
  for (Member& m : pool) exited(*m.process);
  const std::string exit_diff = Settle({}, 5s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const bool leaks = !running_diff.empty() || !exit_diff.empty() || !stale.empty();
  const bool pass = !leaks && waits_past_bound == 0 && failed_restarts == 0 && unreported == 0 &&
                    tenant_errors == 0;
  nlohmann::ordered_json out = {
      {"rounds", o_.rounds},
      {"round_ms", o_.round_ms},
      {"restart_percent", o_.restart_percent},
      {"seed", o_.seed},
      {"seconds", seconds},
      {"kills", kills},
      {"stops", stops},
      {"continues", conts},
      {"daemon_restarts", restarts},
      {"failed_restarts", failed_restarts},
      {"bound_ms", kBoundMs},
      {"max_wait_ms", max_wait_ms},
      {"waits_past_bound", waits_past_bound},
      {"leaks",
       {{"while_running", running_diff}, {"after_exit", exit_diff}, {"stale_slots", stale}}},
      {"unreported_tenants", unreported},
      {"tenant_errors", tenant_errors},
      {"tenants", tenants},
      {"verdict", pass ? "PASS" : "FAIL"}};
  std::filesystem::create_directories(std::filesystem::path(o_.json).parent_path());
  std::ofstream(o_.json) << out.dump(2) << "\n";
  std::printf(
      "chaos_soak: %d rounds in %.0f s (seed %llu): %d kills, %d stops, %d continues, %d daemon "
      "restarts (%d failed); longest steady launch %.1f ms (bound %.0f ms, %d past it); leaks: %s; "
      "%s\nchaos_soak: JSON in %s\n",
      o_.rounds, seconds, static_cast<unsigned long long>(o_.seed), kills, stops, conts, restarts,
      failed_restarts, max_wait_ms, kBoundMs, waits_past_bound, leaks ? "YES" : "none",
      pass ? "PASS" : "FAIL", o_.json.c_str());
  if (leaks) {
    std::printf("  while running: %s\n  after exit: %s\n  stale slots: %zu\n", running_diff.c_str(),
                exit_diff.c_str(), stale.size());
  }
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.seed = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  o.json = BuildDir() + "/bench/chaos_soak.json";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(flag + ": missing its value");
    const std::string value = argv[++i];
    char* rest = nullptr;
    const unsigned long long n = std::strtoull(value.c_str(), &rest, 10);
    const bool number = !value.empty() && value[0] != '-' && *rest == '\0';
    if (flag == "--json") {
      o.json = value;
    } else if (!number) {
      return Usage(flag + " \"" + value + "\": expected a whole number");
    } else if (flag == "--rounds" && n >= 1 && n <= 1000000) {
      o.rounds = static_cast<int>(n);
    } else if (flag == "--round-ms" && n >= 10 && n <= 60000) {
      o.round_ms = static_cast<int>(n);
    } else if (flag == "--restart-percent" && n <= 100) {
      o.restart_percent = static_cast<int>(n);
    } else if (flag == "--restart-gap-ms" && n <= 60000) {
      o.restart_gap_ms = static_cast<int>(n);
    } else if (flag == "--seed") {
      o.seed = n;
    } else {
      return Usage(flag + " " + value +
                   ": unknown flag or out of range (--rounds 1-1000000, --round-ms 10-60000, "
                   "--restart-percent 0-100, --restart-gap-ms 0-60000, --seed N, --json PATH)");
    }
  }
  signal(SIGPIPE, SIG_IGN);
  Soak soak(o);
  return soak.Run();
}
