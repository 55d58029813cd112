// tessera: the command-line door onto Tessera. This file is the command line (CLI11): every
// subcommand, its flags and its --help; `--flag value` and `--flag=value` alike. It checks only
// the shape (known flags, values present, the arguments each subcommand takes); what a value may
// be is checked by the subcommand itself (run.cc, ...) with src/core's parsers. No policy here.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cmdline/cmdline.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "0.0.0"
#endif

namespace {

using tessera::cli::CtlArgs;

// `tessera ctl get|set|ls`: one subcommand each, filling `args`.
void AddCtl(CLI::App& app, CtlArgs* args) {
  CLI::App* ctl = app.add_subcommand(
      "ctl", "read and change the node's control tree (tessera ctl get|set|ls PATH)");
  ctl->require_subcommand(1);
  ctl->footer(
      "paths: version, default_memsize, <gpu>/policy, <gpu>/max_inst, <gpu>/free_weight, "
      "<gpu>/prio_ratio, <gpu>/<container>/{weight,memsize,highprio,meminfo,id}");
  CLI::App* get = ctl->add_subcommand("get", "print a file's text");
  get->add_option("PATH", args->path, "a file of the tree, e.g. 0/policy")->required();
  get->callback([args] { args->op = "get"; });
  CLI::App* ls = ctl->add_subcommand("ls", "list a folder: rw/ro files, dir folders");
  ls->add_option("PATH", args->path, "a folder of the tree (default: the root)");
  ls->callback([args] { args->op = "ls"; });
  CLI::App* set = ctl->add_subcommand("set", "change a file");
  set->add_option("PATH", args->path, "a writable file, e.g. 0/policy")->required();
  set->add_option("VALUE", args->value, "its new value, e.g. 2 or 4GiB")->required();
  set->add_flag("--force", args->force, "let memsize go below the container's usage");
  set->callback([args] { args->op = "set"; });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app{"tessera: share NVIDIA GPUs between containers (memory caps, GPU-time shares).",
               "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);

  RunArgs run;
  CLI::App* run_cmd =
      app.add_subcommand("run", "run a command as (part of) a container with a memory cap");
  run_cmd->add_option("--mem", run.mem, "memory cap, one per visible device: 2GiB or 3GiB,4GiB")
      ->type_name("SIZE[,SIZE..]");
  run_cmd->add_option("--core", run.core, "GPU-time share in percent, 1-100")->type_name("PCT");
  run_cmd->add_option("--weight", run.weight, "scheduling weight, 1-256")->type_name("N");
  run_cmd->add_flag("--high-prio", run.high_prio, "run ahead of the policy when it has work");
  run_cmd->add_option("--devices", run.devices, "GPUs it sees: indices, ranges, UUIDs or all")
      ->type_name("LIST");
  run_cmd->add_option("--container", run.container, "container id (default run-PID)")
      ->type_name("ID");
  run_cmd->add_flag("--sim", run.sim, "use the simulated GPU as the driver");
  run_cmd->add_option("command", run.command, "the command, after --")->required();
  run_cmd->footer("e.g. tessera run --mem 2GiB --core 30 --container web -- python train.py");

  SmiArgs smi;
  CLI::App* smi_cmd =
      app.add_subcommand("smi", "show GPUs, containers, their memory, GPU time and processes");
  smi_cmd->add_flag("--json", smi.json, "print the daemon's snapshot as JSON");
  smi_cmd->add_option("--watch", smi.watch, "redraw every SECONDS (0.1-3600; default 1)")
      ->expected(0, 1)
      ->default_str("1")
      ->type_name("[SECONDS]");
  smi_cmd->add_option("--count", smi.count, "with --watch: stop after N snapshots")->type_name("N");

  CtlArgs ctl;
  AddCtl(app, &ctl);

  DemoArgs demo;
  CLI::App* demo_cmd =
      app.add_subcommand("demo",
                         "run tenants on the simulated GPU and show what each one got, "
                         "then pods placed on a simulated cluster");
  demo_cmd->add_option("act", demo.act, "node or cluster: run that act only (default: both)")
      ->type_name("ACT");
  demo_cmd->add_option("--seconds", demo.seconds, "length of each round, 0.5-600 (default 3)")
      ->type_name("S");
  demo_cmd->add_option("--simgpu", demo.simgpu, "the simulated GPU library")->type_name("PATH");

  // `tessera sim` is the placement engine's own program (tessera-sim, sim_main.cc), so the rest of
  // the command builds without the engine: everything after `sim` is passed on, --help too.
  CLI::App* sim_cmd = app.add_subcommand(
      "sim", "replay a cluster trace through a placement policy (tessera sim --help)");
  sim_cmd->prefix_command();
  sim_cmd->set_help_flag();

  // `tessera mig` parses its own words (mig.cc): everything after it is passed on, --help too.
  std::vector<std::string> mig_args;
  CLI::App* mig_cmd =
      app.add_subcommand("mig", "plan MIG layouts and create MIG instances (tessera mig --help)");
  mig_cmd->prefix_command();
  mig_cmd->set_help_flag();

  CLI::App* version_cmd = app.add_subcommand("version", "print the version");
  CLI::App* help_cmd = app.add_subcommand("help", "print this message");

  std::vector<std::string> tenant_args;
  CLI::App* tenant_cmd = app.add_subcommand(kDemoTenantCommand, "")->group("");
  tenant_cmd->add_option("args", tenant_args);

  // An unknown first word is a mistyped command, which CLI11 would call a missing one.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::fprintf(
          stderr,
          "tessera: unknown command \"%s\"; expected one of: run, smi, ctl, demo, sim, mig, "
          "version, help\n",
          argv[1]);
      return 2;
    }
  }
  if (std::optional<int> exit_status = tessera::cmdline::Parse(app, argc, argv)) {
    return *exit_status;
  }
  if (*run_cmd) return RunRun(run);
  if (*smi_cmd) return RunSmi(smi);
  if (!ctl.op.empty()) return RunCtl(ctl);
  if (*demo_cmd) return RunDemo(demo);
  if (*sim_cmd) return RunSimProgram(argc, argv);
  if (*mig_cmd) return RunMig(mig_cmd->remaining());
  if (*version_cmd) return RunVersion();
  if (*tenant_cmd) return RunDemoTenant(tenant_args);
  if (*help_cmd) {
    // app.help() would describe the subcommand that was named (`help` itself).
    std::fputs(
        app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal).c_str(),
        stdout);
    return 0;
  }
  return 2;
}
