// libFuzzer target for the extender's reading of ExtenderArgs (src/k8s/extender/wire.cc): the
// quick reading of kube-scheduler's NodeNames from the end of the body, which is ours, against
// the whole reading through nlohmann-json, which is the reference; and of ExtenderPreemptionArgs,
// whose answer must read back as the nodes and victims it was written from.
//
// Besides "no crash, no sanitizer report" it checks that both readings agree on every body:
// both accept it with the same pod, names and form, or both refuse it with the same message; and
// that a filter answer written for the names read back as JSON names the same nodes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "k8s/extender/wire.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "extender_wire: %s\n", what);
  std::abort();
}

}  // namespace

// The same body as a preempt request: read, answered with every node and victim, read back.
void CheckPreemption(const std::string& body) {
  using namespace tessera::extender;
  auto args = ParsePreemptionArgs(body);
  if (!args.ok()) {
    Check(!args.error().empty(), "a refused preempt body without a message");
    return;
  }
  const auto answer = tessera::k8s::Json::parse(WritePreemptionResult(args->nodes), nullptr, false);
  Check(!answer.is_discarded(), "the preempt answer is not JSON");
  const auto& kept = answer["NodeNameToMetaVictims"];
  Check(kept.is_object(), "the preempt answer has no NodeNameToMetaVictims object");
  // Names and UIDs came out of parsed JSON, so they are UTF-8 and read back unchanged.
  Check(kept.size() == args->nodes.size(), "the preempt answer lost or grew nodes");
  for (const PreemptCandidate& c : args->nodes) {
    auto it = kept.find(c.node);
    Check(it != kept.end(), "the preempt answer lost a node");
    Check((*it)["Pods"].size() == c.victims.size(), "the preempt answer lost victims");
    for (size_t i = 0; i < c.victims.size(); ++i) {
      Check((*it)["Pods"][i]["UID"] == c.victims[i], "the preempt answer changed a victim");
    }
    Check((*it)["NumPDBViolations"] == c.pdb_violations, "the preempt answer changed a count");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::extender;
  const std::string body(reinterpret_cast<const char*>(data), size);
  CheckPreemption(body);
  auto quick = ParseExtenderArgs(body);
  auto whole = ParseExtenderArgsWhole(body);
  Check(quick.ok() == whole.ok(), "the quick and the whole reading disagree on accepting");
  if (!quick.ok()) {
    Check(quick.error() == whole.error(), "the two readings refuse with different messages");
    return 0;
  }
  Check(quick->pod == whole->pod, "the readings give different pods");
  Check(quick->nodes == whole->nodes, "the readings give different node names");
  Check(quick->node_objects == whole->node_objects, "the readings disagree on the node form");
  Check(quick->node_list == whole->node_list, "the readings give different node lists");
  if (quick->node_objects) return 0;
  // Every name passes: the answer must carry them all, in order, as JSON strings.
  FilterOutcome out;
  for (std::string_view n : quick->nodes) out.fits.emplace_back(n);
  const auto answer = tessera::k8s::Json::parse(WriteFilterResult(*quick, out), nullptr, false);
  Check(!answer.is_discarded(), "the filter answer is not JSON");
  const auto& names = answer["NodeNames"];
  Check(names.is_array() && names.size() == out.fits.size(), "the answer lost names");
  for (size_t i = 0; i < out.fits.size(); ++i) {
    // Names the JSON library decoded may hold bytes that are not UTF-8; the writer passes them
    // through and a parser refuses them, so only valid ones are compared.
    if (names[i].is_string()) Check(names[i].get<std::string>() == out.fits[i], "a name changed");
  }
  return 0;
}
