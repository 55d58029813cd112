// tessera: the command-line door onto Tessera. This file only dispatches subcommands; each one
// lives in its own file (demo.cc, ...) and holds no policy of its own.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(
      out,
      "usage: tessera <command> [args]\n"
      "\n"
      "commands:\n"
      "  run       run a command as (part of) a container with a memory cap\n"
      "  smi       show GPUs, containers, their memory and processes\n"
      "  ctl       read and change the node's control tree (tessera ctl get|set|ls PATH)\n"
      "  demo      run tenants on the simulated GPU and show what each one got\n"
      "  sim       replay a cluster trace through a placement policy (tessera sim --help)\n"
      "  mig       plan MIG layouts and create MIG instances (tessera mig --help)\n"
      "  version   print the version\n"
      "  help      print this message\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "version" || command == "--version") return tessera::cli::RunVersion(args);
  if (command == "demo") return tessera::cli::RunDemo(args);
  if (command == "sim") return tessera::cli::RunSim(args);
  if (command == "run") return tessera::cli::RunRun(args);
  if (command == "smi") return tessera::cli::RunSmi(args);
  if (command == "ctl") return tessera::cli::RunCtl(args);
  if (command == "mig") return tessera::cli::RunMig(args);
  if (command == tessera::cli::kDemoTenantCommand) return tessera::cli::RunDemoTenant(args);
  if (command == "help" || command == "--help" || command == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  std::fprintf(stderr,
               "tessera: unknown command \"%s\"; expected one of: run, smi, ctl, demo, sim, mig, version, help\n",
               command.c_str());
  return 2;
}
