// DraSteering: the placement engine's choice for pods with claims (see the header).
#include "k8s/dra/steering.h"

#include <algorithm>

#include "k8s/dra/allocation.h"
#include "k8s/dra/slices.h"

namespace tessera::k8s::dra {

namespace pl = ::tessera::placement;

struct DraSteering::Gpu {
  std::string name;
  Capacities capacities;
  CelDevice cel;
  bool shared = false;
  int64_t memory_mib = 0;
};

struct DraSteering::Node {
  std::string name;
  std::vector<Gpu> gpus;
  std::vector<Consumption> consumed;  // per GPU: what its shares consume
  std::vector<int> whole;             // per GPU: allocations holding it whole
  std::vector<int> shares;            // per GPU: allocations sharing it
};

struct DraSteering::Ask {
  size_t claim = 0;
  std::string request;
  const Json* device_class = nullptr;
  std::vector<std::string> selectors;
  Consumption capacity;
  int count = 1;
  bool whole = false;
  int cores = 100;
  int64_t memory_mib = 0;
};

namespace {

pl::NodeMode ModeOf(const std::string& mode) {
  if (mode == "mem") return pl::NodeMode::kMemoryOnly;
  if (mode == "exclusive") return pl::NodeMode::kWholeGpus;
  return pl::NodeMode::kMemoryAndCompute;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

DraSteering::~DraSteering() = default;

Result<std::unique_ptr<DraSteering>> DraSteering::Create(
    std::vector<SteeringNode> nodes, const std::vector<Json>& slices,
    const std::vector<Json>& classes, std::string_view policy,
    std::shared_ptr<const pl::TargetWorkload> workload) {
  using Out = Result<std::unique_ptr<DraSteering>>;
  std::unique_ptr<DraSteering> s(new DraSteering());
  s->workload_ = std::move(workload);
  for (const Json& c : classes) s->classes_[c["metadata"].value("name", "")] = c;
  std::sort(nodes.begin(), nodes.end(),
            [](const SteeringNode& a, const SteeringNode& b) { return a.name < b.name; });
  // Each node's pool of our driver, when whole: the slices of its highest generation.
  std::map<std::string, std::vector<const Json*>> pools;
  for (const CurrentPool& p : CurrentPools(slices)) {
    if (p.driver == kDriverName && p.complete && (*p.slices[0])["spec"].contains("nodeName")) {
      pools[p.name] = p.slices;
    }
  }
  pl::ModelTable models;
  std::vector<pl::NodeSpec> specs;
  for (const SteeringNode& n : nodes) {
    Node node;
    node.name = n.name;
    pl::NodeSpec spec;
    spec.name = n.name;
    spec.cpu_milli = n.cpu_milli;
    spec.memory_mib = n.memory_mib;
    auto pool = pools.find(n.name);
    if (pool != pools.end()) {
      const std::vector<const Json*>& list = pool->second;
      for (const Json* slice : list) {
        for (const Json& d : (*slice)["spec"].value("devices", Json::array())) {
          const Json attrs = d.value("attributes", Json::object());
          if (attrs.value("type", Json::object()).value("string", "") != "gpu")
            continue;  // MIG: not steered
          Gpu g;
          g.name = d.value("name", "");
          auto caps = ParseCapacities(d.value("capacity", Json::object()), g.name);
          if (!caps.ok()) return caps.status();
          g.capacities = *caps;
          g.cel = CelDevice::FromSliceDevice(kDriverName, d);
          g.shared = d.value("allowMultipleAllocations", false);
          auto mem = g.capacities.find(kCapacityMemory);
          g.memory_mib = mem == g.capacities.end() ? 0 : mem->second.value.milli / 1000 / (1 << 20);
          if (node.gpus.empty()) {
            spec.mode = ModeOf(attrs.value("mode", Json::object()).value("string", ""));
            auto model = models.Intern(
                attrs.value("productName", Json::object()).value("string", "GPU"), g.memory_mib);
            if (!model.ok()) return model.status();
            spec.model = *model;
          }
          node.gpus.push_back(std::move(g));
        }
      }
    }
    spec.gpu_count = static_cast<int>(std::min<size_t>(node.gpus.size(), pl::kMaxGpusPerNode));
    node.gpus.resize(static_cast<size_t>(spec.gpu_count));
    if (spec.gpu_count == 0) spec.model = -1;
    node.consumed.assign(node.gpus.size(), {});
    node.whole.assign(node.gpus.size(), 0);
    node.shares.assign(node.gpus.size(), 0);
    s->node_index_[n.name] = static_cast<int>(s->nodes_.size());
    s->nodes_.push_back(std::move(node));
    specs.push_back(std::move(spec));
  }
  auto cluster = pl::Cluster::Create(std::move(models), std::move(specs));
  if (!cluster.ok()) return cluster.status();
  s->cluster_ = std::make_unique<pl::Cluster>(std::move(*cluster));
  pl::PolicyOptions options;
  options.workload = s->workload_.get();
  auto made = pl::MakePolicy(policy, options);
  if (!made.ok()) return made.status();
  s->policy_ = std::move(*made);
  return Out(std::move(s));
}

Status DraSteering::AddPod(const std::string& node, int64_t cpu, int64_t memory) {
  return Pod(node, cpu, memory, true);
}

Status DraSteering::RemovePod(const std::string& node, int64_t cpu, int64_t memory) {
  return Pod(node, cpu, memory, false);
}

Status DraSteering::Pod(const std::string& node, int64_t cpu, int64_t memory, bool add) {
  auto it = node_index_.find(node);
  if (it == node_index_.end()) return Status::Error("node " + node + " is not in the picture");
  pl::Request r;
  r.cpu_milli = cpu;
  r.memory_mib = memory;
  return add ? cluster_->Place(r, {it->second, 0}) : cluster_->Remove(r, {it->second, 0});
}

Status DraSteering::AddAllocation(const Json& allocation) { return Apply(allocation, true); }
Status DraSteering::RemoveAllocation(const Json& allocation) { return Apply(allocation, false); }

Status DraSteering::Apply(const Json& allocation, bool add) {
  struct Use {
    int node, gpu;
    pl::Request request;
    Consumption consumed;
    bool whole;
  };
  std::vector<Use> uses;
  for (const Json& r :
       allocation.value("devices", Json::object()).value("results", Json::array())) {
    if (r.value("driver", "") != kDriverName) continue;
    auto n = node_index_.find(r.value("pool", ""));
    if (n == node_index_.end())
      return Status::Error("pool " + r.value("pool", "") + " is not in the picture");
    Node& node = nodes_[static_cast<size_t>(n->second)];
    auto g = std::find_if(node.gpus.begin(), node.gpus.end(),
                          [&](const Gpu& x) { return x.name == r.value("device", ""); });
    if (g == node.gpus.end())
      return Status::Error("device " + r.value("device", "") + " is not in pool " + node.name);
    Use use{n->second, static_cast<int>(g - node.gpus.begin()), {}, {}, !r.contains("shareID")};
    use.request.gpu_count = 1;
    if (use.whole) {
      use.request.gpu_milli = pl::kMilliPerGpu;
    } else {
      const Json consumed = r.value("consumedCapacity", Json::object());
      for (const auto& [name, q] : consumed.items()) {
        auto a = ParseAmount(q, name);
        if (!a.ok()) return a.status();
        use.consumed[name] = *a;
      }
      auto cores = use.consumed.find(kCapacityCores);
      auto mem = use.consumed.find(kCapacityMemory);
      const int64_t mib =
          mem == use.consumed.end() ? g->memory_mib : CeilDiv(mem->second.milli / 1000, 1 << 20);
      if (cores == use.consumed.end()) {
        use.request.gpu_milli = 0;  // a memory-only share (a mem node)
      } else {
        use.request.gpu_milli =
            static_cast<int>(std::min<int64_t>(cores->second.milli / 100, pl::kMilliPerGpu));
      }
      use.request.gpu_mem_mib =
          use.request.gpu_milli >= pl::kMilliPerGpu ? pl::kProportionalMemory : mib;
    }
    uses.push_back(std::move(use));
  }
  for (size_t i = 0; i < uses.size(); ++i) {
    const Use& u = uses[i];
    const pl::Assignment a{u.node, 1u << u.gpu};
    Status s = add ? cluster_->Place(u.request, a) : cluster_->Remove(u.request, a);
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) {  // take back what was applied: nothing changes
        const pl::Assignment b{uses[j].node, 1u << uses[j].gpu};
        (void)(add ? cluster_->Remove(uses[j].request, b) : cluster_->Place(uses[j].request, b));
      }
      return Status::Error(
          "allocation on " + nodes_[static_cast<size_t>(u.node)].name + "/" +
          nodes_[static_cast<size_t>(u.node)].gpus[static_cast<size_t>(u.gpu)].name + ": " +
          s.message());
    }
  }
  for (const Use& u : uses) {
    Node& node = nodes_[static_cast<size_t>(u.node)];
    const size_t g = static_cast<size_t>(u.gpu);
    if (u.whole) {
      node.whole[g] += add ? 1 : -1;
      continue;
    }
    node.shares[g] += add ? 1 : -1;
    for (const auto& [name, amount] : u.consumed)
      node.consumed[g][name].milli += add ? amount.milli : -amount.milli;
  }
  return Status::Ok();
}

Result<std::vector<DraSteering::Ask>> DraSteering::AsksOf(const std::vector<Json>& claims) const {
  using Out = Result<std::vector<Ask>>;
  std::vector<Ask> out;
  for (size_t c = 0; c < claims.size(); ++c) {
    const Json& claim = claims[c];
    const std::string who = "claim " + claim["metadata"].value("namespace", "") + "/" +
                            claim["metadata"].value("name", "");
    const Json devices = claim.value("spec", Json::object()).value("devices", Json::object());
    if (!devices.value("constraints", Json::array()).empty()) {
      return Out::Error(who + " has constraints, which steering leaves to kube-scheduler");
    }
    for (const Json& req : devices.value("requests", Json::array())) {
      Ask ask;
      ask.claim = c;
      ask.request = req.value("name", "");
      if (!req.contains("exactly"))
        return Out::Error(who + ", request " + ask.request +
                          ": firstAvailable is left to kube-scheduler");
      const Json& e = req["exactly"];
      if (e.value("allocationMode", "ExactCount") != "ExactCount") {
        return Out::Error(who + ", request " + ask.request + ": allocationMode " +
                          e.value("allocationMode", "") + " is left to kube-scheduler");
      }
      if (e.value("adminAccess", false))
        return Out::Error(who + ", request " + ask.request +
                          ": adminAccess is left to kube-scheduler");
      auto klass = classes_.find(e.value("deviceClassName", ""));
      if (klass == classes_.end()) {
        return Out::Error(who + ", request " + ask.request + ": device class " +
                          e.value("deviceClassName", "") + " is unknown");
      }
      ask.device_class = &klass->second;
      for (const Json& sel : klass->second["spec"].value("selectors", Json::array())) {
        ask.selectors.push_back(sel.value("cel", Json::object()).value("expression", ""));
      }
      for (const Json& sel : e.value("selectors", Json::array())) {
        ask.selectors.push_back(sel.value("cel", Json::object()).value("expression", ""));
      }
      auto cap = ParseCapacityRequests(e, who + ", request " + ask.request);
      if (!cap.ok()) return cap.status();
      ask.capacity = *cap;
      for (const auto& [name, amount] : ask.capacity) {
        if (name != kCapacityMemory && name != kCapacityCores) {
          return Out::Error(who + ", request " + ask.request + ": capacity " + name +
                            " is not one of gpu.tessera.io's");
        }
      }
      ask.count = static_cast<int>(
          std::clamp<int64_t>(e.value("count", int64_t{1}), 1, pl::kMaxGpusPerNode));
      auto cores = ask.capacity.find(kCapacityCores);
      auto memory = ask.capacity.find(kCapacityMemory);
      // Rounded as the devices' policies round: cores 1-100, memory in 256 MiB steps from 256 MiB.
      ask.cores =
          cores == ask.capacity.end()
              ? 100
              : static_cast<int>(std::clamp<int64_t>(CeilDiv(cores->second.milli, 1000), 1, 100));
      if (memory != ask.capacity.end()) {
        const int64_t bytes = std::max<int64_t>(CeilDiv(memory->second.milli, 1000), kMemoryStep);
        ask.memory_mib = CeilDiv(bytes, kMemoryStep) * (kMemoryStep >> 20);
      }
      if (cores == ask.capacity.end() && memory == ask.capacity.end()) {
        ask.whole = true;  // the policies' defaults: all of a GPU
      } else if (cores == ask.capacity.end() || ask.cores >= 100) {
        ask.whole = true;  // all of a GPU's time leaves it to no one else
      } else if (memory == ask.capacity.end()) {
        return Out::Error(who + ", request " + ask.request +
                          " asks cores but no memory (it would take all of a GPU's memory); left "
                          "to kube-scheduler");
      }
      out.push_back(std::move(ask));
    }
  }
  if (out.empty()) return Out::Error("the pod's claims ask no device");
  return out;
}

Result<std::vector<pl::Request>> DraSteering::RequestsOf(int64_t cpu, int64_t memory,
                                                         const std::vector<Json>& claims) const {
  auto asks = AsksOf(claims);
  if (!asks.ok()) return asks.status();
  std::vector<pl::Request> out;
  for (const Ask& a : *asks) {
    pl::Request r;
    if (out.empty()) {
      r.cpu_milli = cpu;
      r.memory_mib = memory;
    }
    r.gpu_count = a.count;
    if (a.whole) {
      r.gpu_milli = pl::kMilliPerGpu;
    } else {
      r.gpu_milli = a.cores * 10;
      r.gpu_mem_mib = a.memory_mib;
    }
    if (Status s = pl::ValidateRequest(r, "claim request " + a.request); !s.ok()) return s;
    out.push_back(r);
  }
  return out;
}

bool DraSteering::DeviceMatches(const Ask& ask, const Gpu& gpu) {
  for (const std::string& expr : ask.selectors) {
    auto key = std::make_pair(&gpu, expr);
    auto it = matches_.find(key);
    if (it == matches_.end()) {
      auto program = cel_.Get(expr);
      auto m = program.ok() ? (*program)->Matches(gpu.cel) : Result<bool>::Error(program.error());
      it = matches_.emplace(key, m.ok() && *m).first;  // an error: no match, as no allocation
    }
    if (!it->second) return false;
  }
  return true;
}

std::optional<std::vector<int>> DraSteering::GpusFor(int n, const Ask& ask, uint32_t preferred) {
  const Node& node = nodes_[static_cast<size_t>(n)];
  auto fits = [&](int g) {
    const Gpu& gpu = node.gpus[static_cast<size_t>(g)];
    if (!DeviceMatches(ask, gpu)) return false;
    if (node.whole[static_cast<size_t>(g)] != 0) return false;
    if (!gpu.shared) return node.shares[static_cast<size_t>(g)] == 0;
    auto ok = FitsCapacity(node.consumed[static_cast<size_t>(g)], ask.capacity, gpu.capacities, {});
    return ok.ok() && *ok;
  };
  std::vector<int> out;
  for (int g = 0;
       g < static_cast<int>(node.gpus.size()) && static_cast<int>(out.size()) < ask.count; ++g) {
    if ((preferred >> g) & 1u) {
      if (!fits(g)) return std::nullopt;  // the policy's choice fails the DRA rules
      out.push_back(g);
    }
  }
  if (static_cast<int>(out.size()) != ask.count) return std::nullopt;
  return out;
}

Result<std::optional<SteeringDecision>> DraSteering::Steer(int64_t cpu, int64_t memory,
                                                           const std::vector<Json>& claims) {
  using Out = Result<std::optional<SteeringDecision>>;
  auto asks = AsksOf(claims);
  if (!asks.ok()) return asks.status();
  auto requests = RequestsOf(cpu, memory, claims);
  if (!requests.ok()) return requests.status();
  // Candidates: nodes with enough devices each request's selectors take.
  std::vector<int> candidates;
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    bool ok = true;
    for (const Ask& a : *asks) {
      int matching = 0;
      for (const Gpu& g : nodes_[static_cast<size_t>(n)].gpus)
        matching += DeviceMatches(a, g) ? 1 : 0;
      ok = ok && matching >= a.count;
    }
    if (ok) candidates.push_back(n);
  }
  while (!candidates.empty()) {
    auto chosen = policy_->SelectAmong(*cluster_, (*requests)[0], candidates, nullptr);
    if (!chosen) return std::optional<SteeringDecision>();
    const int n = chosen->node;
    // The first request where the policy put it; the others one after another on that node.
    std::vector<std::vector<int>> gpus;
    std::optional<pl::Cluster> scratch;
    bool ok = true;
    for (size_t i = 0; i < asks->size() && ok; ++i) {
      const pl::Cluster& view = scratch ? *scratch : *cluster_;
      uint32_t preferred = chosen->gpus;
      if (i > 0) {
        if (view.Fits(n, (*requests)[i]) != pl::FitResult::kFits) {
          ok = false;
          break;
        }
        preferred = policy_->GpusOn(view, n, (*requests)[i]);
      }
      auto g = GpusFor(n, (*asks)[i], preferred);
      if (!g) {
        ok = false;
        break;
      }
      gpus.push_back(*g);
      if (i + 1 < asks->size()) {
        if (!scratch) scratch.emplace(*cluster_);
        if (!scratch->Place((*requests)[i], {n, preferred}).ok()) ok = false;
      }
    }
    if (!ok) {
      // The policy's node fails the DRA rules (or cannot take the rest): choose again without it.
      ++rechosen_;
      candidates.erase(std::find(candidates.begin(), candidates.end(), n));
      continue;
    }
    const Node& node = nodes_[static_cast<size_t>(n)];
    SteeringDecision d;
    d.node = node.name;
    for (size_t c = 0; c < claims.size(); ++c) {
      std::vector<AllocatedRequest> requested;
      std::vector<ChosenDevice> devices;
      for (size_t i = 0; i < asks->size(); ++i) {
        const Ask& a = (*asks)[i];
        if (a.claim != c) continue;
        requested.push_back({a.request, a.device_class});
        for (int g : gpus[i]) {
          const Gpu& gpu = node.gpus[static_cast<size_t>(g)];
          ChosenDevice cd{a.request, kDriverName, node.name, gpu.name, std::nullopt, {}};
          if (gpu.shared) {
            cd.share_id = NewShareId();
            cd.consumed = ConsumedCapacity(a.capacity, gpu.capacities);
          }
          devices.push_back(std::move(cd));
        }
      }
      d.allocations.push_back(AllocationJson(claims[c], requested, devices, node.name));
    }
    // Into the picture, as the caller will write it.
    if (Status s = AddPod(node.name, cpu, memory); !s.ok()) return s;
    for (size_t i = 0; i < d.allocations.size(); ++i) {
      if (Status s = AddAllocation(d.allocations[i]); !s.ok()) {
        for (size_t j = 0; j < i; ++j) (void)RemoveAllocation(d.allocations[j]);
        (void)RemovePod(node.name, cpu, memory);
        return Out::Error("the decision on " + node.name + " does not apply: " + s.message());
      }
    }
    return std::optional<SteeringDecision>(std::move(d));
  }
  return std::optional<SteeringDecision>();
}

}  // namespace tessera::k8s::dra
