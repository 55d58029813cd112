// DraSteeringController: steering's rounds over the API server (see the header).
#include "k8s/extender/dra_steering.h"

#include <algorithm>
#include <cstdio>

#include "k8s/dra/steering.h"
#include "k8s/pod_demand.h"
#include "k8s/quantity.h"

namespace tessera::extender {

using k8s::Json;
using namespace std::chrono_literals;

namespace {

constexpr char kResource[] = "/apis/resource.k8s.io/v1";

void Log(const std::string& line) {
  std::fprintf(stderr, "tessera-extender: dra: %s\n", line.c_str());
}

std::string Key(const Json& obj) {
  return obj["metadata"].value("namespace", "") + "/" + obj["metadata"].value("name", "");
}

bool Gated(const Json& pod) {
  for (const Json& g : pod.value("spec", Json::object()).value("schedulingGates", Json::array())) {
    if (g.value("name", "") == kSteeringGate) return true;
  }
  return false;
}

int64_t QuantityOr(const std::map<std::string, std::string>& m, const char* key, int scale,
                   int64_t unit) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  auto q = k8s::Quantity::Parse(it->second, key);
  if (!q.ok()) return 0;
  auto v = q->Scaled(scale, key);
  return v.ok() ? *v / unit : 0;
}

}  // namespace

DraSteeringController::DraSteeringController(k8s::ApiClient* api, DraSteeringOptions options)
    : api_(api), options_(std::move(options)) {}

DraSteeringController::~DraSteeringController() { Stop(); }

void DraSteeringController::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void DraSteeringController::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DraSteeringController::Loop() {
  std::string last_error;
  while (!stop_.load()) {
    auto round = RunOnce();
    if (!round.ok() && round.error() != last_error) Log(round.error() + " (trying again)");
    last_error = round.ok() ? "" : round.error();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, options_.interval, [this] { return stop_.load(); });
  }
}

void DraSteeringController::Event(const Json& pod, const std::string& reason,
                                  const std::string& message) {
  const std::string uid = pod["metadata"].value("uid", "");
  if (told_[uid] == reason + message) return;  // said once
  told_[uid] = reason + message;
  k8s::EventSpec e;
  e.ns = pod["metadata"].value("namespace", "");
  e.name = pod["metadata"].value("name", "");
  e.uid = uid;
  e.reason = reason;
  e.message = message;
  e.warning = reason != "TesseraSteered";
  e.component = "tessera-extender";
  if (auto r = api_->CreateEvent(e); !r.ok())
    Log("event on pod " + Key(pod) + ": " + r.error().message);
}

Result<SteeringRound> DraSteeringController::RunOnce() {
  SteeringRound round;
  auto list = [&](const std::string& path) -> Result<std::vector<Json>> {
    auto r = api_->Get(path);
    if (!r.ok())
      return Result<std::vector<Json>>::Error("listing " + path + ": " + r.error().message);
    std::vector<Json> items;
    for (const Json& i : (*r)["items"]) items.push_back(i);
    return items;
  };
  auto nodes = list("/api/v1/nodes");
  auto pods = list("/api/v1/pods");
  auto slices = list(std::string(kResource) + "/resourceslices");
  auto classes = list(std::string(kResource) + "/deviceclasses");
  auto claims = list(std::string(kResource) + "/resourceclaims");
  for (auto* r : {&nodes, &pods, &slices, &classes, &claims}) {
    if (!r->ok()) return r->status();
  }
  std::map<std::string, Json> claim_by_key;
  for (const Json& c : *claims) claim_by_key[Key(c)] = c;

  std::vector<k8s::dra::SteeringNode> steering_nodes;
  for (const Json& n : *nodes) {
    auto view = k8s::NodeFromJson(n);
    if (!view.ok()) continue;
    steering_nodes.push_back({view->name, QuantityOr(view->allocatable, "cpu", 3, 1),
                              QuantityOr(view->allocatable, "memory", 0, int64_t{1} << 20)});
  }
  // The claims a pod uses, as it names them; nullopt while one does not exist yet.
  auto claims_of = [&](const Json& pod) -> std::optional<std::vector<Json>> {
    std::vector<Json> out;
    const std::string ns = pod["metadata"].value("namespace", "");
    const Json statuses =
        pod.value("status", Json::object()).value("resourceClaimStatuses", Json::array());
    for (const Json& pc :
         pod.value("spec", Json::object()).value("resourceClaims", Json::array())) {
      std::string name = pc.value("resourceClaimName", "");
      if (name.empty()) {
        for (const Json& s : statuses) {
          if (s.value("name", "") == pc.value("name", "") && s.contains("resourceClaimName") &&
              s["resourceClaimName"].is_string()) {
            name = s["resourceClaimName"].get<std::string>();
          }
        }
      }
      auto it = claim_by_key.find(ns + "/" + name);
      if (name.empty() || it == claim_by_key.end()) return std::nullopt;
      out.push_back(it->second);
    }
    return out;
  };
  struct Demand {
    int64_t cpu = 0, memory_mib = 0;
  };
  auto demand_of = [](const Json& pod) {
    auto view = k8s::PodFromJson(pod);
    if (!view.ok()) return Demand{};
    const k8s::PodDemand d = k8s::ReadPodDemand(*view, pod);
    return Demand{d.cpu_milli, d.memory_bytes >> 20};
  };

  // The target workload: what the cluster's pods ask, unless one was given.
  std::shared_ptr<const placement::TargetWorkload> workload = options_.workload;
  auto probe = k8s::dra::DraSteering::Create(steering_nodes, *slices, *classes, "bestfit", nullptr);
  if (!probe.ok()) return probe.status();
  std::vector<const Json*> gated;
  if (!workload) {
    std::vector<placement::Request> requests;
    for (const Json& p : *pods) {
      auto pod_claims = claims_of(p);
      const Demand d = demand_of(p);
      if (!pod_claims || pod_claims->empty()) {
        placement::Request r;
        r.cpu_milli = d.cpu;
        r.memory_mib = d.memory_mib;
        requests.push_back(r);
        continue;
      }
      auto rs = (*probe)->RequestsOf(d.cpu, d.memory_mib, *pod_claims);
      if (rs.ok()) requests.insert(requests.end(), rs->begin(), rs->end());
    }
    workload = std::make_shared<const placement::TargetWorkload>(
        placement::TargetWorkload::FromRequests(requests));
  }
  auto steering =
      k8s::dra::DraSteering::Create(steering_nodes, *slices, *classes, options_.policy, workload);
  if (!steering.ok()) return steering.status();
  for (const Json& p : *pods) {
    auto view = k8s::PodFromJson(p);
    if (!view.ok()) continue;
    if (!view->node_name.empty() && !view->Terminal()) {
      const Demand d = demand_of(p);
      (void)(*steering)->AddPod(view->node_name, d.cpu, d.memory_mib);
    } else if (view->node_name.empty() && !view->deleting && Gated(p)) {
      gated.push_back(&p);
    }
  }
  for (const Json& c : *claims) {
    const Json status = c.value("status", Json::object());
    if (status.contains("allocation") && !status["allocation"].is_null()) {
      (void)(*steering)->AddAllocation(status["allocation"]);
    }
  }
  std::sort(gated.begin(), gated.end(), [](const Json* a, const Json* b) {
    const std::string ta = (*a)["metadata"].value("creationTimestamp", ""),
                      tb = (*b)["metadata"].value("creationTimestamp", "");
    return ta != tb ? ta < tb : Key(*a) < Key(*b);
  });

  auto ungate = [&](const Json& pod) {
    Json gates = Json::array();
    for (const Json& g : pod["spec"]["schedulingGates"]) {
      if (g.value("name", "") != kSteeringGate) gates.push_back(g);
    }
    const std::string path = "/api/v1/namespaces/" + pod["metadata"].value("namespace", "") +
                             "/pods/" + pod["metadata"].value("name", "");
    auto r =
        api_->MergePatch(path, {{"spec", {{"schedulingGates", gates.empty() ? Json() : gates}}}});
    if (!r.ok()) {
      Log("removing the gate of pod " + Key(pod) + ": " + r.error().message);
      return false;
    }
    return true;
  };
  for (const Json* pod : gated) {
    auto pod_claims = claims_of(*pod);
    if (!pod_claims) {
      ++round.waiting;  // the resourceclaim controller has not made them yet
      continue;
    }
    const bool allocated = std::any_of(pod_claims->begin(), pod_claims->end(), [](const Json& c) {
      return c.value("status", Json::object()).contains("allocation");
    });
    if (pod_claims->empty() || allocated) {
      if (ungate(*pod)) ++round.handed_on;
      continue;
    }
    const Demand d = demand_of(*pod);
    auto decision = (*steering)->Steer(d.cpu, d.memory_mib, *pod_claims);
    if (!decision.ok()) {
      Event(*pod, "TesseraSteeringHandedOn",
            decision.error() + "; kube-scheduler allocates the pod's claims");
      if (ungate(*pod)) ++round.handed_on;
      continue;
    }
    if (!*decision) {
      Event(*pod, "TesseraNoGpu",
            "no node has the CPU, memory and GPUs the pod's claims ask; the pod waits");
      ++round.waiting;
      continue;
    }
    bool written = true;
    for (size_t i = 0; i < pod_claims->size() && written; ++i) {
      Json claim = (*pod_claims)[i];
      Json& status = claim["status"];
      if (!status.is_object()) status = Json::object();
      status["allocation"] = (**decision).allocations[i];
      Json reserved = status.value("reservedFor", Json::array());
      reserved.push_back({{"resource", "pods"},
                          {"name", (*pod)["metadata"].value("name", "")},
                          {"uid", (*pod)["metadata"].value("uid", "")}});
      status["reservedFor"] = reserved;
      const std::string path = std::string(kResource) + "/namespaces/" +
                               claim["metadata"].value("namespace", "") + "/resourceclaims/" +
                               claim["metadata"].value("name", "") + "/status";
      auto r = api_->Update(path, claim);
      if (!r.ok()) {
        written = false;
        if (r.kind() == k8s::ApiErrorKind::kConflict) {
          ++round.conflicts;
        } else {
          Log("allocating claim " + Key(claim) + ": " + r.error().message);
        }
      }
    }
    if (!written) continue;  // the next round reads what changed
    if (ungate(*pod)) {
      ++round.steered;
      Event(*pod, "TesseraSteered", "claims allocated on node " + (**decision).node);
    }
  }
  return round;
}

}  // namespace tessera::extender
