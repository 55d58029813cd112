// The tessera subcommands. main.cc reads the command line (CLI11) into one of the argument structs
// below; each subcommand validates its values with src/core's parsers (so a message names the
// flag, the value and what is allowed), does its job and returns the exit status (0 success,
// 1 failure, 2 bad usage). They print for people on stdout and errors on stderr.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

// Hidden subcommand the demo re-executes itself with to play one tenant.
inline constexpr const char* kDemoTenantCommand = "__demo-tenant";

// `tessera run`: flags as given (empty: not given), then the command.
struct RunArgs {
  std::string mem, core, weight, devices, container;
  bool high_prio = false;
  bool sim = false;
  std::vector<std::string> command;
};

// `tessera smi`.
struct SmiArgs {
  bool json = false;
  std::optional<std::string> watch;  // seconds between redraws; "1" when --watch has no value
  std::optional<std::string> count;  // snapshots to show with --watch
};

// `tessera ctl get|set|ls`.
struct CtlArgs {
  std::string op;  // "get", "set" or "ls"
  std::string path;
  std::string value;  // set only
  bool force = false;
};

// `tessera demo`.
struct DemoArgs {
  std::optional<std::string> act;  // node or cluster; both when absent
  std::optional<std::string> seconds;
  std::optional<std::string> simgpu;
};

// `tessera sim`.
struct SimArgs {
  std::optional<std::string> nodes, pods, out, policy, seed, seeds, inflation, load, speedup, queue,
      reservations, hold_after;
  bool json = false;
  bool replay = false;
};

int RunVersion();
int RunDemo(const DemoArgs& args);
int RunDemoTenant(const std::vector<std::string>& args);
int RunSim(const SimArgs& args);  // tessera-sim (sim_main.cc, sim.cc)
// `tessera sim` in the CLI: runs tessera-sim with this command line (sim_program.cc).
int RunSimProgram(int argc, char** argv);
int RunRun(const RunArgs& args);
int RunSmi(const SmiArgs& args);
int RunCtl(const CtlArgs& args);
// `tessera mig plan|profiles|apply` (mig.cc): the words after `mig`, parsed there.
int RunMig(const std::vector<std::string>& args);

// The --policy help of `tessera sim`: the policy names, comma-separated.
std::string SimPolicyList();

// Directory holding this executable (build/bin), for finding build/lib next to it.
std::string ExecutableDir();

}  // namespace tessera::cli
