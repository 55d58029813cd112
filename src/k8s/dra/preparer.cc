// ClaimPreparer: preparing and unpreparing claims, and the checkpoint (see the header).
#include "k8s/dra/preparer.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace tessera::k8s::dra {
namespace {

constexpr int kCheckpointVersion = 1;

Json ClaimJson(const PreparedClaim& c) {
  Json gpus = Json::array();
  for (const ClaimGpu& g : c.gpus) {
    gpus.push_back({{"uuid", g.uuid},
                    {"index", g.index},
                    {"memory_bytes", g.memory.count()},
                    {"cores", g.cores},
                    {"whole", g.whole}});
  }
  Json devices = Json::array();
  for (const PreparedDevice& d : c.devices) {
    Json dev = {
        {"request", d.request}, {"pool", d.pool}, {"device", d.device}, {"cdi_ids", d.cdi_ids}};
    if (d.share_id) dev["share_id"] = *d.share_id;
    devices.push_back(std::move(dev));
  }
  return {{"uid", c.ref.uid},
          {"namespace", c.ref.ns},
          {"name", c.ref.name},
          {"container", c.container},
          {"gpus", gpus},
          {"core", c.core ? Json(*c.core) : Json(nullptr)},
          {"weight", c.weight},
          {"high_priority", c.high_priority},
          {"registered", c.registered},
          {"identify", c.identify},
          {"mps_root", c.mps_root},
          {"cdi_file", c.cdi_file},
          {"devices", devices}};
}

PreparedClaim ClaimFromJson(const Json& j) {
  PreparedClaim c;
  c.ref = {j.at("namespace").get<std::string>(), j.at("uid").get<std::string>(),
           j.at("name").get<std::string>()};
  c.container = j.at("container").get<std::string>();
  for (const Json& g : j.at("gpus")) {
    c.gpus.push_back({g.at("uuid").get<std::string>(), g.at("index").get<int>(),
                      Bytes(g.at("memory_bytes").get<uint64_t>()), g.at("cores").get<int>(),
                      g.value("whole", false)});
  }
  if (j.contains("core") && !j["core"].is_null()) c.core = j["core"].get<int>();
  c.weight = j.value("weight", 1u);
  c.high_priority = j.value("high_priority", false);
  c.registered = j.value("registered", false);
  c.identify = j.value("identify", false);  // a claim prepared before specs carried the hook
  c.mps_root = j.value("mps_root", "");
  c.cdi_file = j.value("cdi_file", "");
  for (const Json& d : j.at("devices")) {
    PreparedDevice p;
    p.request = d.at("request").get<std::string>();
    p.pool = d.at("pool").get<std::string>();
    p.device = d.at("device").get<std::string>();
    if (d.contains("share_id")) p.share_id = d["share_id"].get<std::string>();
    p.cdi_ids = d.at("cdi_ids").get<std::vector<std::string>>();
    c.devices.push_back(std::move(p));
  }
  return c;
}

}  // namespace

ClaimPreparer::ClaimPreparer(PreparerConfig config, const TesseradClient* tesserad, ApiClient* api)
    : config_(std::move(config)), tesserad_(tesserad), api_(api) {}

Status ClaimPreparer::Load() {
  std::ifstream in(config_.checkpoint_path);
  if (!in) return Status::Ok();  // none yet
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, PreparedClaim> claims;
  try {
    const Json doc = Json::parse(text.str());
    if (doc.at("version").get<int>() != kCheckpointVersion) {
      return Status::Error("checkpoint " + config_.checkpoint_path + ": version " +
                           doc.at("version").dump() + "; this plugin reads version " +
                           std::to_string(kCheckpointVersion));
    }
    for (const Json& c : doc.at("claims")) {
      PreparedClaim claim = ClaimFromJson(c);
      claims[claim.ref.uid] = std::move(claim);
    }
  } catch (const Json::exception& e) {
    return Status::Error("checkpoint " + config_.checkpoint_path + " does not parse (" + e.what() +
                         "); move it away to start afresh");
  }
  std::lock_guard<std::mutex> lock(mu_);
  claims_ = std::move(claims);
  return Status::Ok();
}

Status ClaimPreparer::Save() const {
  Json list = Json::array();
  for (const auto& [uid, c] : claims_) list.push_back(ClaimJson(c));
  const Json doc = {{"version", kCheckpointVersion}, {"claims", list}};
  if (Status s = WriteFileAtomically(config_.checkpoint_path, doc.dump(1)); !s.ok()) {
    return Status::Error("checkpoint " + s.message());
  }
  return Status::Ok();
}

void ClaimPreparer::SetNode(NodeMode mode, std::vector<NodeGpu> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
  gpus_ = std::move(gpus);
}

std::vector<PreparedClaim> ClaimPreparer::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : claims_) out.push_back(c);
  return out;
}

CdiEdits ClaimPreparer::Edits(const PreparedClaim& claim) const {
  IsolatedContainer c;
  c.id = claim.container;
  for (const ClaimGpu& g : claim.gpus) {
    c.uuids.push_back(g.uuid);
    c.limits.push_back(g.memory);
  }
  if (claim.core) c.core = Percent::FromInt(*claim.core);
  c.weight = claim.weight;
  c.high_priority = claim.high_priority;
  c.mps_root = claim.mps_root;
  NodeMounts mounts = config_.mounts;
  if (!claim.identify) mounts.oci_hook.clear();  // tesserad waits for no hook of this claim
  CdiEdits edits = IsolatedContainerEdits(mounts, c, claim.registered);
  if (!config_.nvidia_cdi) {
    // No NVIDIA CDI names to hand out: the GPUs go by the variable NVIDIA's runtime reads.
    std::string uuids;
    for (const std::string& u : c.uuids) uuids += (uuids.empty() ? "" : ",") + u;
    edits.env.emplace_back("NVIDIA_VISIBLE_DEVICES", uuids);
  }
  return edits;
}

Status ClaimPreparer::Register(PreparedClaim* claim, const TesseradStatus& status) const {
  IsolatedContainer c;
  c.id = claim->container;
  std::vector<int> indices;
  for (const ClaimGpu& g : claim->gpus) {
    c.uuids.push_back(g.uuid);
    c.limits.push_back(g.memory);
    indices.push_back(g.index);
  }
  if (claim->core) c.core = Percent::FromInt(*claim->core);
  c.weight = claim->weight;
  c.high_priority = claim->high_priority;
  c.identify = claim->identify;
  const bool mps = mode_ == NodeMode::kMps;
  auto root = RegisterIsolated(*tesserad_, c, indices, status.gpus.size(), mps, config_.node);
  if (!root.ok()) {
    claim->registered = false;
    return Status::Error(root.error() +
                         (mps ? "; a claim gets no GPU without MPS on an mps node" : ""));
  }
  claim->registered = true;
  claim->mps_root = *root;
  return Status::Ok();
}

Result<std::vector<PreparedDevice>> ClaimPreparer::Prepare(const ClaimRef& ref) {
  using Out = Result<std::vector<PreparedDevice>>;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto known = claims_.find(ref.uid); known != claims_.end()) return known->second.devices;
  const std::string who = ref.Describe();
  auto claim = api_->Get(std::string(kResourceApiPrefix) + "/namespaces/" + ref.ns +
                         "/resourceclaims/" + ref.name);
  if (!claim.ok())
    return Out::Error(who + ": reading it from the API server: " + claim.error().message);
  if (Status s = SimStateReachable(config_.mounts); !s.ok())
    return Out::Error(who + ": " + s.message());
  auto status = tesserad_->Status();
  if (!status.ok())
    return Out::Error(who + ": " + status.error() + "; nothing is prepared without it");
  uint32_t max_weight = 256;
  for (const TesseradGpu& g : status->gpus) max_weight = std::min(max_weight, g.max_inst);
  const std::vector<PublishedDevice> devices = PoolDevices(mode_, gpus_);
  auto plan = PlanClaim(*claim, ref, config_.node, mode_, devices, max_weight);
  if (!plan.ok()) return plan.status();

  // The last line of defence: what other prepared claims hold on the same GPUs.
  for (const ClaimGpu& g : plan->gpus) {
    const TesseradGpu* gpu = status->Gpu(g.uuid);
    if (gpu == nullptr) {
      return Out::Error(who + ": tesserad at " + tesserad_->socket() + " no longer has GPU " +
                        g.uuid);
    }
    uint64_t memory = g.memory.count();
    int cores = g.cores;
    std::vector<std::string> holders;
    bool whole_held = false;
    for (const auto& [uid, other] : claims_) {
      for (const ClaimGpu& o : other.gpus) {
        if (o.uuid != g.uuid) continue;
        memory += o.memory.count();
        cores += o.cores;
        whole_held = whole_held || o.whole;
        holders.push_back(other.ref.ns + "/" + other.ref.name);
      }
    }
    std::string list;
    for (const std::string& h : holders) list += (list.empty() ? "" : ", ") + h;
    if (!holders.empty() && (g.whole || whole_held || memory > gpu->total.count() || cores > 100)) {
      return Out::Error(who + ": GPU " + g.uuid + " would be given twice: it asks " +
                        FormatBytes(g.memory) + " and " + std::to_string(g.cores) +
                        "% there, and claims " + list + " hold it already (" +
                        FormatBytes(Bytes(memory - g.memory.count())) + ", " +
                        std::to_string(cores - g.cores) + "%); the scheduler's view is stale");
    }
  }

  PreparedClaim pc;
  pc.ref = ref;
  pc.container = MakeContainerId(kClaimContainerPrefix, ref.ns, ref.name, ref.uid);
  pc.gpus = plan->gpus;
  const bool divides_time = mode_ == NodeMode::kCoreMem || mode_ == NodeMode::kMps;
  if (divides_time && plan->gpus[0].cores < 100) pc.core = plan->gpus[0].cores;
  pc.weight = plan->weight;
  pc.high_priority = plan->high_priority;
  if (ModeIsolates(mode_)) {
    pc.identify = !config_.mounts.oci_hook.empty();
    if (Status s = Register(&pc, *status); !s.ok()) return Out::Error(who + ": " + s.message());
  }
  // The CDI spec: the claim's edits once, a device per allocation result.
  std::vector<CdiDevice> cdi;
  for (size_t i = 0; i < plan->devices.size(); ++i) {
    const ClaimDevice& d = plan->devices[i];
    CdiEdits e;
    e.env.emplace_back("TESSERA_CLAIM_DEVICE_" + std::to_string(i), d.request + ":" + d.device);
    cdi.push_back({ref.uid + "-" + std::to_string(i), std::move(e)});
  }
  auto written = WriteCdiSpec(config_.cdi_dir, kCdiClaimKind, ref.uid, Edits(pc), cdi);
  if (!written.ok()) {
    if (pc.registered) (void)tesserad_->Unregister(pc.container);
    return Out::Error(who + ": " + written.error());
  }
  pc.cdi_file = *written;
  std::set<std::pair<std::string, std::string>> nvidia_given;  // (request, uuid)
  for (size_t i = 0; i < plan->devices.size(); ++i) {
    const ClaimDevice& d = plan->devices[i];
    PreparedDevice p{d.request, d.pool, d.device, d.share_id, {}};
    p.cdi_ids.push_back(CdiQualifiedName(kCdiClaimKind, cdi[i].name));
    if (config_.nvidia_cdi && nvidia_given.insert({d.request, d.uuid}).second) {
      p.cdi_ids.push_back("nvidia.com/gpu=" + d.uuid);
    }
    pc.devices.push_back(std::move(p));
  }
  claims_[ref.uid] = pc;
  if (Status s = Save(); !s.ok()) {
    claims_.erase(ref.uid);
    unlink(pc.cdi_file.c_str());
    if (pc.registered) (void)tesserad_->Unregister(pc.container);
    return Out::Error(who + ": " + s.message());
  }
  return pc.devices;
}

Status ClaimPreparer::Unprepare(const ClaimRef& ref) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = claims_.find(ref.uid);
  if (it == claims_.end()) return Status::Ok();
  if (it->second.registered) {
    auto left = tesserad_->Unregister(it->second.container);
    if (!left.ok()) return Status::Error(ref.Describe() + ": " + left.error());
  }
  if (!it->second.cdi_file.empty()) unlink(it->second.cdi_file.c_str());
  claims_.erase(it);
  return Save();
}

std::vector<std::string> ClaimPreparer::Resync() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  auto read = tesserad_->Status();
  if (!read.ok()) return lines;  // the plugin's own read reports tesserad's absence
  const TesseradStatus& status = *read;
  bool changed = false;
  for (auto& [uid, c] : claims_) {
    if (!c.registered || status.Find(c.container) != nullptr) continue;
    Status s = Register(&c, status);
    changed = true;
    lines.push_back(s.ok() ? "registered " + c.container + " again (tesserad had lost it)"
                           : "cannot register " + c.container + " again: " + s.message());
  }
  for (const TesseradContainer& t : status.containers) {
    if (t.id.rfind(kClaimContainerPrefix, 0) != 0) continue;
    const bool owned = std::any_of(claims_.begin(), claims_.end(),
                                   [&](const auto& kv) { return kv.second.container == t.id; });
    if (owned) continue;
    auto left = tesserad_->Unregister(t.id);
    lines.push_back(left.ok() ? "unregistered " + t.id + ", which no prepared claim owns"
                              : "cannot unregister " + t.id + ": " + left.error());
  }
  if (changed) (void)Save();
  return lines;
}

}  // namespace tessera::k8s::dra
