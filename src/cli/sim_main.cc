// tessera-sim: the program behind `tessera sim` (the CLI passes it its command line unchanged), so
// that the placement engine is built with it and not with every other subcommand. This file is its
// command line (CLI11): the flags, their --help and the shape checks; sim.cc validates the values
// and runs the engine. No policy here.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cmdline/cmdline.h"

int main(int argc, char** argv) {
  using namespace tessera::cli;
  CLI::App app{"tessera sim: the placement engine on a cluster trace.", "tessera"};
  app.require_subcommand(1);
  SimArgs sim;
  CLI::App* sim_cmd =
      app.add_subcommand("sim", "replay a cluster trace through a placement policy");
  sim_cmd->footer(
      "Replays the pod list through a placement policy with the FGD paper's protocol: pods are\n"
      "sampled with replacement (seed S) until they ask for F x the cluster's GPUs, then placed\n"
      "one by one with no departures and no retries. Prints the GPU allocation ratio and\n"
      "fragmentation against arrived workload; --json prints one JSON object per policy and seed\n"
      "(JSON Lines). With --replay, pods arrive at their creation times and leave after their run\n"
      "times (deletion - creation); a pod that does not fit waits in a model of kube-scheduler's\n"
      "scheduling queue (backoff 1-10 s, the unschedulable pool, the cluster events that move a\n"
      "pod; --queue fcfs: retried in arrival order whenever capacity frees); it reports GPU\n"
      "allocation over time, pods waiting and each pod's wait. MIG clusters: nodes with mode=mig "
      "and a mig column (a layout such as\n"
      "\"3g.40gb=1 1g.10gb=4\", or dynamic), pods with a mig_profile column; data/mig has an\n"
      "example and docs/placement.md (\"MIG nodes\") the format.");
  sim_cmd
      ->add_option("--nodes", sim.nodes,
                   "node list (sn,cpu_milli,memory_mib,gpu,model); default: the openb trace "
                   "in $TESSERA_OPENB_DIR")
      ->type_name("CSV");
  sim_cmd
      ->add_option("--pods", sim.pods,
                   "pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]); "
                   "default: openb_pod_list_default.csv beside the nodes")
      ->type_name("CSV");
  sim_cmd
      ->add_option("--policy", sim.policy,
                   "one of " + SimPolicyList() + "; all, or a comma list (default tessera)")
      ->type_name("NAME");
  CLI::Option* seed =
      sim_cmd->add_option("--seed", sim.seed, "sampling seed (default 42)")->type_name("S");
  CLI::Option* seeds =
      sim_cmd
          ->add_option("--seeds", sim.seeds, "several seeds: a range or a comma list, e.g. 42-51")
          ->type_name("A-B");
  seed->excludes(seeds);
  sim_cmd
      ->add_option("--inflation", sim.inflation,
                   "workload as a multiple of the cluster's GPUs, 0.01-10 (default 1.3)")
      ->type_name("F");
  sim_cmd->add_option("--out", sim.out, "also write CSV curves and allocation_ratio.svg here")
      ->type_name("DIR");
  sim_cmd->add_flag("--json", sim.json, "JSON Lines instead of the table");
  sim_cmd->add_flag("--replay", sim.replay, "with departures (see below)");
  sim_cmd
      ->add_option("--load", sim.load,
                   "replay: sample pods until the GPU demand at the busiest instant is L x the "
                   "cluster's GPUs, 0.01-100 (default 1.2)")
      ->type_name("L");
  sim_cmd
      ->add_option("--speedup", sim.speedup,
                   "replay: creation times are divided by K, 1e-6-1e12 (default 100; run times "
                   "are not scaled)")
      ->type_name("K");
  sim_cmd
      ->add_option("--queue", sim.queue,
                   "replay: how waiting pods are retried: kube-scheduler (default: a model of its "
                   "scheduling queue) or fcfs (in arrival order whenever capacity frees)")
      ->type_name("MODEL");
  sim_cmd
      ->add_option("--reservations", sim.reservations,
                   "replay: on (default: nodes drained for waiting pods that ask several GPUs, "
                   "or the CPU of several, or that few GPUs serve, where the policy keeps them, "
                   "as tessera does) or off")
      ->type_name("on|off");
  sim_cmd
      ->add_option("--hold-after", sim.hold_after,
                   "replay: seconds a waiting pod waits before it holds a node, "
                   "0-1e9 (default 1200)")
      ->type_name("S");

  // Called as `tessera sim ...` (through the CLI) or as `tessera-sim ...`: the same command line.
  std::vector<char*> args(argv, argv + argc);
  char sim_word[] = "sim";
  if (argc < 2 || std::string(argv[1]) != "sim") args.insert(args.begin() + 1, sim_word);
  if (std::optional<int> exit_status =
          tessera::cmdline::Parse(app, static_cast<int>(args.size()), args.data())) {
    return *exit_status;
  }
  return RunSim(sim);
}
