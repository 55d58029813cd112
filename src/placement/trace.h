// Reading cluster traces: the node and pod lists of the Alibaba openb trace (FGD, ATC'23) and our
// extensions of them, as CSV with a header row.
//
// Node list columns (any order, extra columns ignored): sn, cpu_milli, memory_mib, gpu, model;
// optional: mode ("memory+compute", the default, "memory-only", "whole-gpu", "mps" (memory+compute
// with one GPU per request, as an MPS node gives a container its GPU's server) or "mig"; or each
// GPU's mode in index order as MODE=COUNT parts separated by '|', counts summing to the node's
// GPUs, never mig: "mps=4|memory+compute=4" is GPUs 0-3 mps and 4-7 memory+compute), gpu_memory_mib
// (per GPU; default: the model's known size) and mig. A `mig` node's model is a MIG model of
// `tessera mig profiles` (H100-80GB, A30, ...; its memory, unless given, from its full-GPU
// profile's name), and its mig column says how every GPU of it is cut: profile counts as `tessera
// mig plan` takes them, space separated ("3g.40gb=1 2g.20gb=1 1g.10gb=2"), kept for the whole run;
// "dynamic" (GPUs start uncut, and the engine cuts a GPU whenever all its instances are free:
// placement/mig.h); or "dynamic" followed by counts (that cut first, then dynamic). Pod list
// columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli; optional: gpu_spec (models separated by
// '|'; empty or absent: any model, as in the FGD authors' five-column lists), gpu_mem_mib (per GPU;
// empty or absent: the same fraction of the GPU's memory as gpu_milli), and creation_time and
// deletion_time (whole seconds; what `tessera sim --replay` replays; an empty deletion_time: the
// pod never leaves), and mig_profile (a MIG request for one instance of that profile, e.g. 3g.40gb:
// then num_gpu is 1, the share 0 and no GPU memory is given; it fits only mig nodes). Other columns
// (qos, pod_phase, ...) are ignored. Instead of gpu_milli, a list may use our own request form
// (docs/contracts.md): gpu_core_percent (0..100 in steps of 5; 0 is a memory-only share) and
// gpu_mem_gib (per GPU; empty or 0 with a core share: proportional).
//
// Every malformed row is rejected with the file, the line, the column number and name, the value
// and what was allowed, e.g.
//   pods.csv:17: column 4 (num_gpu): "x" is not a whole number; expected 0 to 32
// Fields are plain (no quoting); surrounding spaces and a trailing \r are ignored; blank lines are
// skipped. Parsing is pure; the Load* functions read a whole file first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "placement/model.h"

namespace tessera::placement {

struct NodeList {
  ModelTable models;
  std::vector<NodeSpec> nodes;
};

// When a pod of the trace arrived and left, in seconds from the trace's start; -1 when the list
// does not say (no such column, or an empty deletion_time: it never left).
struct PodTimes {
  int64_t created = -1;
  int64_t deleted = -1;
};

struct PodList {
  std::vector<std::string> names;
  std::vector<Request> requests;
  std::vector<PodTimes> times;  // one per request
};

Result<NodeList> ParseNodeCsv(std::string_view text, std::string_view file_name);
// Models named in gpu_spec are looked up in `models` (the node list's); names no node has are
// dropped from the set, so a pod that allows only such models fits nowhere.
Result<PodList> ParsePodCsv(std::string_view text, std::string_view file_name,
                            const ModelTable& models);

Result<NodeList> LoadNodeCsv(const std::string& path);
Result<PodList> LoadPodCsv(const std::string& path, const ModelTable& models);

}  // namespace tessera::placement
