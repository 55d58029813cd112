// MIG in the placement engine (docs/contracts.md `mig` nodes): which MIG profile a request names,
// what a GPU in MIG mode holds, how many of its memory slices are stranded, and where an instance
// for a request goes on a node.
//
// A MIG request asks for one instance of one profile ("3g.40gb"); profiles are named by an id over
// the distinct names of every model's profiles (src/mig's tables), because a request does not know
// the model: "1g.10gb" is one memory slice on an H100-80GB and two on an A100-40GB, so a profile
// is looked up on each node's model. A GPU in MIG mode holds a layout (mig::Layout: its instances
// at their start slots) and which of them are taken; a request takes one free instance of its
// profile. A node whose layouts may change (NodeSpec::mig_relayout; `tessera sim` only, see
// docs/architecture.md) may also cut a GPU again while all of that GPU's instances are free, which
// is when `tessera mig apply` can: the new layout is one of mig::FeasibleLayouts holding the
// profile, the one that strands the fewest memory slices.
//
// Stranded memory slices of a GPU: those no asked profile can use until the GPU is cut again,
// i.e. slices no instance holds plus free instances of profiles nobody asks for (a GPU that may
// be cut again because all of it is free strands nothing). Which profiles are asked is the MIG
// part of the target workload (MigDemand), weighted by how often each is asked.
//
// The choice among a node's candidates, best first: the fewest memory slices newly stranded; a
// free instance before cutting a GPU again; for a new layout, the most memory in free instances
// of the most asked profiles; the node with the least left free (bin packing, so whole GPUs stay
// free for re-cutting and large profiles); then the lowest GPU and start slot. Every policy
// places MIG requests with this one rule (MakePolicy wraps each). Pure computation; no
// Kubernetes, no JSON, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mig/planner.h"
#include "mig/profiles.h"

namespace tessera::placement {

class Cluster;
struct Request;
struct Assignment;

// Profile ids: dense from 0 over the distinct profile names of every model, in the order of
// mig::AllProfileNames() (whose text lists them for messages).
int MigProfileCount();
// The id of `name` ("3g.40gb", exactly as the tables spell it), or -1 when no model has it.
int MigProfileId(std::string_view name);
std::string_view MigProfileName(int id);
// The profile `id` stands for on `model`, or nullptr when `model` has none of that name.
const mig::MigProfile* MigProfileOn(const mig::GpuModel& model, int id);
// Every layout of `model` (mig::FeasibleLayouts), computed once per model; thread-safe.
const std::vector<mig::Layout>& MigLayoutsOf(const mig::GpuModel& model);

// A GPU in MIG mode: its instances and which are taken.
struct MigGpu {
  mig::Layout layout;
  uint32_t taken = 0;  // bit i: layout.instances[i] is held by a request

  bool AllFree() const { return taken == 0; }
  bool Taken(size_t i) const { return ((taken >> i) & 1) != 0; }
  // The index of the free instance of `profile` with the lowest start slot, or -1.
  int FreeInstanceOf(const mig::MigProfile& profile) const;
  // The index of the instance starting at memory slice `start`, or -1.
  int InstanceAt(int start) const;
  // The same instances at the same places, the same of them taken.
  bool operator==(const MigGpu& other) const;
};

// How often each MIG profile is asked, as a weight per profile id summing to 1 over the MIG
// requests of a workload. Empty (no MIG request seen): every profile counts as asked, weight 1.
struct MigDemand {
  std::vector<double> weight;  // by profile id; empty or MigProfileCount() entries

  double Weight(int id) const;
  bool Asks(int id) const { return Weight(id) > 0; }
  bool operator==(const MigDemand&) const = default;
};

// Memory slices of `gpu` stranded for `demand` (see the file comment). `relayout`: the GPU's node
// may cut it again, so an all-free GPU strands nothing.
int StrandedSlices(const MigGpu& gpu, bool relayout, const MigDemand& demand);

// Where `request` (a MIG request the node fits) would go on `node`: the GPU, the instance's start
// slot and, when the GPU is cut again first, the index of its new layout in MigLayoutsOf. Also
// the candidate's standing, for comparing nodes: `newly_stranded` slices, whether it re-cuts, the
// asked memory it leaves in free instances, and the memory slices of the node left free after it.
struct MigChoice {
  int gpu = -1;
  int start = -1;
  int layout = -1;  // -1: the GPU keeps its layout
  int newly_stranded = 0;
  double asked_free_after = 0;
  int free_slices_after = 0;

  // The candidate's standing as a policy's node score (higher is better): primary counts the
  // newly stranded slices twice and a re-cut once, secondary the asked memory left in free
  // instances (x1000) less the slices left free.
  double Primary() const;
  double Secondary() const;
  // Better first, as the file comment orders them (the caller's scan order breaks the last ties:
  // lower GPU, start slot, layout, node).
  bool BetterThan(const MigChoice& other) const;
};
std::optional<MigChoice> ChooseMigInstance(const Cluster& cluster, int node, const Request& request,
                                           const MigDemand& demand);
// A new layout for a GPU of `model` whose instances are all free, holding a free instance of
// `profile` (a MigProfileId), chosen by the rule ChooseMigInstance applies to a re-cut: the fewest
// memory slices stranded for `demand` once the instance is taken, then the most memory in free
// instances of the most asked profiles, then the first in MigLayoutsOf order. Its index in
// MigLayoutsOf(model), or -1 when the model has no such profile. What the extender asks a node to
// cut a GPU into for a MIG pod that finds no free instance anywhere.
int ChooseRecutLayout(const mig::GpuModel& model, int profile, const MigDemand& demand);

// The same as an Assignment (node, the GPU's bit, mig_start, mig_layout), or nullopt.
std::optional<Assignment> MigAssignmentOn(const Cluster& cluster, int node, const Request& request,
                                          const MigDemand& demand);

}  // namespace tessera::placement
