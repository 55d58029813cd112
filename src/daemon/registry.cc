// Registry implementation: validation of HELLO/CONTAINER fields and ledger slot management.
#include "daemon/registry.h"

#include <signal.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/container_id.h"
#include "core/device_selector.h"
#include "ctl/control_tree.h"
#include "daemon/compute.h"

namespace tessera::daemon {
namespace {

// Whether `pid` is a process that has not exited. A zombie (exited, not yet reaped by its parent)
// counts as dead: its driver state, GPU memory included, went with its exit, so its ledger bytes
// must go too; kill(pid, 0) alone succeeds on a zombie and kept them counted until the reap.
bool PidAlive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  char path[32];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return true;  // no /proc here: kill's answer stands
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses; the state follows the last one.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ') return true;
  return close[2] != 'Z' && close[2] != 'X';
}

// The node's process slots are shared by its containers. Each container is owed an equal part of
// them, counting one container more than are registered (the next one to arrive), and a container
// past its part may take a slot only while what is left still covers what every other container
// is owed, the next one's part included. So neighbours that each stay under their own limit
// cannot fill the node together: a container with fewer processes than its part always finds a
// slot. Returns the refusal's reason, empty when container `c` may register one more process.
std::string SlotRefusal(const ledger::LedgerBook& book, uint32_t c) {
  uint32_t live = 0, containers = 0;
  for (const auto& p : book.processes) live += p.state.load() == ledger::kLive ? 1 : 0;
  for (const auto& k : book.containers) containers += k.state.load() == ledger::kLive ? 1 : 0;
  const uint32_t slots = ledger::kMaxProcesses;
  const uint32_t part = slots / (containers + 1);
  const uint32_t mine = book.containers[c].process_count.load();
  const uint32_t free_slots = live < slots ? slots - live : 0;
  if (mine < part && free_slots > 0) return "";
  uint32_t owed = part;  // the next container's
  for (uint32_t k = 0; k < static_cast<uint32_t>(ledger::kMaxContainers); ++k) {
    if (k == c || book.containers[k].state.load() != ledger::kLive) continue;
    const uint32_t count = book.containers[k].process_count.load();
    owed += count < part ? part - count : 0;
  }
  if (free_slots > owed) return "";
  return "the node has " + std::to_string(free_slots) + " of its " + std::to_string(slots) +
         " process slots free and keeps them for containers with fewer than " +
         std::to_string(part) + " processes (this container has " + std::to_string(mine) + ")";
}

// A valid container id that the control tree can also show: not one of its GPU files' names
// (a container called `policy` would be hidden by the file `<gpu>/policy`).
Status CheckContainerId(const std::string& id, const char* key) {
  if (auto valid = ParseContainerId(id, key); !valid.ok()) return valid.status();
  if (ctl::IsControlTreeGpuFileName(id)) {
    return Status::Error(std::string(key) + "=\"" + id +
                         "\": reserved (a control-tree file of every GPU folder has that name); "
                         "expected another container id");
  }
  return Status::Ok();
}

}  // namespace

Registry::Registry(ledger::MemoryLedger ledger, RegistryOptions options, ComputeService* compute)
    : ledger_(std::move(ledger)), options_(options), compute_(compute) {
  for (const std::string& line : ledger_.open_report()) {
    std::fprintf(stderr, "tesserad: %s\n", line.c_str());
  }
  // A self-declared container whose processes all went while no daemon ran (or were dropped as
  // corrupt) has nobody left to remove it.
  for (uint32_t c = 0; c < ledger::kMaxContainers; ++c) RemoveIfUnused(c);
}

int Registry::Repair() {
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> lines = ledger_.Repair();
  for (const std::string& line : lines) std::fprintf(stderr, "tesserad: %s\n", line.c_str());
  return static_cast<int>(lines.size());
}

Result<Registry::ComputeFields> Registry::ParseCompute(const protocol::Message& request,
                                                       const char* verb) const {
  ComputeFields out;
  struct Field {
    const char* key;
    uint32_t low, high;
    uint32_t* value;
    const char* meaning;
  };
  const Field fields[] = {{"core", 1, 100, &out.core, "a percentage from 1 to 100"},
                          {"weight", 1, 256, &out.weight, "an integer from 1 to 256 (max_inst)"},
                          {"high_prio", 0, 1, &out.high_priority, "0 or 1"}};
  for (const Field& f : fields) {
    if (!request.Has(f.key)) continue;
    const std::string text = request.Get(f.key);
    char* end = nullptr;
    errno = 0;
    const unsigned long v = std::strtoul(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0 || v < f.low || v > f.high) {
      return Result<ComputeFields>::Error(std::string(verb) + " " + f.key + "=" + text +
                                          ": expected " + f.meaning);
    }
    *f.value = static_cast<uint32_t>(v);
  }
  return out;
}

Status Registry::ApplyCompute(const protocol::Message& request, uint32_t c, const char* verb) {
  auto fields = ParseCompute(request, verb);
  if (!fields.ok()) return fields.status();
  ledger_.SetCompute(c, fields->core, fields->weight, fields->high_priority);
  return Status::Ok();
}

void Registry::RemoveIfUnused(uint32_t c) {
  const ledger::LedgerBook::Container& slot = ledger_.book().containers[c];
  if (slot.state.load() == ledger::kLive && slot.process_count.load() == 0 &&
      (slot.flags.load() & ledger::kContainerRegistered) == 0) {
    (void)ledger_.RemoveContainer(c);
  }
}

Result<std::vector<uint64_t>> Registry::ParseLimits(const std::string& text, int devices) const {
  std::vector<uint64_t> limits;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item == "none") {
      limits.push_back(ledger::kUnlimited);
    } else {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || errno != 0 || item[0] == '-') {
        return Result<std::vector<uint64_t>>::Error(
            "mem=\"" + text + "\": expected a comma list of byte counts or none");
      }
      limits.push_back(v);
    }
    if (comma == text.size()) break;
  }
  if (static_cast<int>(limits.size()) > devices) {
    return Result<std::vector<uint64_t>>::Error(
        "mem=\"" + text + "\": " + std::to_string(limits.size()) + " limits for " +
        std::to_string(devices) + " devices");
  }
  while (static_cast<int>(limits.size()) < devices) limits.push_back(limits.back());
  return limits;
}

Result<protocol::Message> Registry::Hello(const protocol::Message& request, pid_t pid,
                                          uint32_t* process_slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request.Get("version") != std::to_string(protocol::kProtocolVersion)) {
    return Result<protocol::Message>::Error("HELLO version=" + request.Get("version", "(missing)") +
                                            ": this tesserad speaks version " +
                                            std::to_string(protocol::kProtocolVersion));
  }
  if (request.Has("resume")) return ResumeLocked(request, pid, process_slot);
  std::string id = request.Get("container", "proc-" + std::to_string(pid));
  if (Status valid = CheckContainerId(id, "container"); !valid.ok()) return valid;
  // The devices the process may see, as physical indices in its ordinal order.
  std::vector<int> visible;
  std::vector<std::string> uuids;
  for (int d = 0; d < ledger_.device_count(); ++d) uuids.push_back(ledger_.book().devices[d].uuid);
  if (request.Has("visible")) {
    auto selector = ParseDeviceSelector(request.Get("visible"), "TESSERA_VISIBLE_DEVICES");
    if (!selector.ok()) return selector.status();
    auto resolved = ResolveDeviceSelector(*selector, uuids, "TESSERA_VISIBLE_DEVICES");
    if (!resolved.ok()) return resolved.status();
    visible = *resolved;
  } else {
    for (int d = 0; d < ledger_.device_count(); ++d) visible.push_back(d);
  }
  int c = ledger_.FindContainer(id);
  if (c < 0) {
    if (!options_.allow_self_declared) {
      return Result<protocol::Message>::Error(
          "container " + id +
          " is not registered and this tesserad does not accept "
          "self-declared containers (--allow-self-declared=false); "
          "start the process with `tessera run`");
    }
    auto compute = ParseCompute(request, "HELLO");
    if (!compute.ok()) return compute.status();
    if (compute_ != nullptr) {
      if (Status s = compute_->CanAdmit(visible, static_cast<int>(compute->weight)); !s.ok()) {
        return Result<protocol::Message>::Error("container " + id +
                                                " cannot start: " + s.message());
      }
    }
    // The declared limits are per visible device (ordinal order); the ledger's are physical. A
    // process that declares none gets the default (`default_memsize`) on every device.
    std::string declared = request.Get("mem", "none");
    if (!request.Has("mem") && default_limit_.load() != ledger::kUnlimited) {
      declared = std::to_string(default_limit_.load());
    }
    auto by_ordinal = ParseLimits(declared, static_cast<int>(visible.size()));
    if (!by_ordinal.ok()) return by_ordinal.status();
    std::vector<uint64_t> limits(static_cast<size_t>(ledger_.device_count()), ledger::kUnlimited);
    for (size_t i = 0; i < visible.size(); ++i)
      limits[static_cast<size_t>(visible[i])] = (*by_ordinal)[i];
    auto added = ledger_.UpsertContainer(id, limits);
    if (!added.ok()) return added.status();
    c = static_cast<int>(*added);
    ledger_.SetFlags(static_cast<uint32_t>(c), 0, ~0u);
    (void)ApplyCompute(request, static_cast<uint32_t>(c), "HELLO");  // validated above
  }
  protocol::Message reply = Welcome(static_cast<uint32_t>(c), pid);
  std::string visible_list;
  for (int v : visible) visible_list += (visible_list.empty() ? "" : ",") + std::to_string(v);
  if (!visible_list.empty()) reply.fields["visible"] = visible_list;
  if (request.Get("observer") == "1") {
    // An observer (the NVML shim in nvidia-smi) reads its container's view; it holds nothing.
    *process_slot = kNoProcess;
    reply.fields["process"] = "none";
    return reply;
  }
  // The pid the process sees for itself (its own pid namespace), for the NVML view inside its
  // container; only a positive integer is taken.
  int32_t local_pid = 0;
  if (request.Has("local_pid")) {
    const std::string text = request.Get("local_pid");  // strtol's end must point into it
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (*end != '\0' || v <= 0 || v > 0x3fffffff) {
      return Result<protocol::Message>::Error("HELLO local_pid=" + text +
                                              ": expected a positive process id");
    }
    local_pid = static_cast<int32_t>(v);
  }
  const uint32_t processes = ledger_.book().containers[c].process_count.load();
  if (processes >= static_cast<uint32_t>(options_.max_processes_per_container)) {
    return Result<protocol::Message>::Error(
        "container " + id + " has " + std::to_string(processes) +
        " processes registered, the most one container may have (container_max_processes " +
        std::to_string(options_.max_processes_per_container) +
        "); this process was not registered");
  }
  if (const std::string refusal = SlotRefusal(ledger_.book(), static_cast<uint32_t>(c));
      !refusal.empty()) {
    return Result<protocol::Message>::Error("container " + id + ": " + refusal +
                                            "; this process was not registered");
  }
  auto p = ledger_.AddProcess(static_cast<uint32_t>(c), pid, local_pid);
  if (!p.ok()) return p.status();
  *process_slot = *p;
  attached_.set(*p);
  reply.fields["process"] = std::to_string(*p);
  reply.fields["generation"] = std::to_string(ledger_.book().processes[*p].generation.load());
  return reply;
}

protocol::Message Registry::Welcome(uint32_t c, pid_t pid) const {
  protocol::Message reply{"OK", {}};
  reply.fields["container"] = std::to_string(c);
  reply.fields["devices"] = std::to_string(ledger_.device_count());
  reply.fields["pid"] = std::to_string(pid);
  reply.fields["context_bytes"] = std::to_string(options_.context_bytes);
  return reply;
}

Result<protocol::Message> Registry::ResumeLocked(const protocol::Message& request, pid_t pid,
                                                 uint32_t* process_slot) {
  const std::string slot_text = request.Get("resume"), generation_text = request.Get("generation");
  char* end = nullptr;
  const unsigned long p = std::strtoul(slot_text.c_str(), &end, 10);
  const bool slot_ok = !slot_text.empty() && *end == '\0' && p < ledger::kMaxProcesses;
  const unsigned long g = std::strtoul(generation_text.c_str(), &end, 10);
  if (!slot_ok || generation_text.empty() || *end != '\0') {
    return Result<protocol::Message>::Error(
        "HELLO resume=" + slot_text + " generation=" + generation_text +
        ": expected a process slot below " + std::to_string(ledger::kMaxProcesses) +
        " and its generation");
  }
  const ledger::LedgerBook::Process& slot = ledger_.book().processes[p];
  if (slot.state.load() != ledger::kLive || slot.host_pid.load() != pid ||
      slot.generation.load() != g) {
    return Result<protocol::Message>::Error("HELLO resume=" + slot_text +
                                            " generation=" + generation_text +
                                            ": that slot does not hold this process (pid " +
                                            std::to_string(pid) + ") any more; register anew");
  }
  if (attached_.test(p)) {
    return Result<protocol::Message>::Error("HELLO resume=" + slot_text + ": already attached");
  }
  attached_.set(p);
  *process_slot = static_cast<uint32_t>(p);
  protocol::Message reply = Welcome(slot.container.load(), pid);
  reply.fields["process"] = std::to_string(p);
  reply.fields["generation"] = std::to_string(g);
  return reply;
}

Result<protocol::Message> Registry::UnregisterLocked(const protocol::Message& request) {
  const std::string id = request.Get("id");
  for (const auto& [key, value] : request.fields) {
    if (key != "id" && key != "remove") {
      return Result<protocol::Message>::Error("CONTAINER remove=1 " + key + "=" + value +
                                              ": a removal takes only id=");
    }
  }
  const int c = ledger_.FindContainer(id);
  if (c < 0)
    return Result<protocol::Message>::Error("CONTAINER id=" + id + " remove=1: no such container");
  ledger_.SetFlags(static_cast<uint32_t>(c), 0, ledger::kContainerRegistered);
  const uint32_t remaining = ledger_.book().containers[c].process_count.load();
  RemoveIfUnused(static_cast<uint32_t>(c));
  return protocol::Message{"OK", {{"processes", std::to_string(remaining)}}};
}

Result<protocol::Message> Registry::SetContainer(const protocol::Message& request) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = request.Get("id");
  if (Status valid = CheckContainerId(id, "id"); !valid.ok()) return valid;
  if (request.Has("remove")) {
    if (request.Get("remove") != "1") {
      return Result<protocol::Message>::Error("CONTAINER remove=" + request.Get("remove") +
                                              ": expected 1");
    }
    return UnregisterLocked(request);
  }
  auto limits = ParseLimits(request.Get("mem", "none"), ledger_.device_count());
  if (!limits.ok()) return limits.status();
  auto compute = ParseCompute(request, "CONTAINER");
  if (!compute.ok()) return compute.status();
  if (compute_ != nullptr && ledger_.FindContainer(id) < 0) {
    std::vector<int> all;
    for (int d = 0; d < ledger_.device_count(); ++d) all.push_back(d);
    if (Status s = compute_->CanAdmit(all, static_cast<int>(compute->weight)); !s.ok()) {
      return Result<protocol::Message>::Error("container " + id + ": " + s.message());
    }
  }
  auto c = ledger_.UpsertContainer(id, *limits);
  if (!c.ok()) return c.status();
  ledger_.SetFlags(*c, ledger::kContainerRegistered, 0);
  (void)ApplyCompute(request, *c, "CONTAINER");
  return protocol::Message{"OK", {{"container", std::to_string(*c)}}};
}

void Registry::Disconnected(uint32_t process_slot, uint32_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (process_slot == kNoProcess || process_slot >= ledger::kMaxProcesses) return;
  const ledger::LedgerBook::Process& slot = ledger_.book().processes[process_slot];
  if (slot.generation.load() != generation) return;  // reclaimed already (and maybe reused)
  attached_.reset(process_slot);
  const uint32_t c = slot.container.load();
  ledger_.ReclaimProcess(process_slot);
  RemoveIfUnused(c);
}

int Registry::ReclaimDeadProcesses() {
  std::lock_guard<std::mutex> lock(mu_);
  int reclaimed = 0;
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::LedgerBook::Process& slot = ledger_.book().processes[p];
    if (slot.state.load() == ledger::kLive && !PidAlive(slot.host_pid.load())) {
      const uint32_t c = slot.container.load();
      ledger_.ReclaimProcess(static_cast<uint32_t>(p));
      attached_.reset(static_cast<size_t>(p));
      RemoveIfUnused(c);
      ++reclaimed;
    }
  }
  return reclaimed;
}

void Registry::SetMpsGpus(std::string root, std::set<int> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  mps_root_ = std::move(root);
  mps_gpus_ = std::move(gpus);
}

std::string Registry::StatusJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  // Who exists and their settings come from the daemon's book; bytes in use are what the
  // processes' counters in the segment say.
  const ledger::LedgerLayout* l = ledger_.layout();
  const ledger::LedgerBook& book = ledger_.book();
  const int devices = ledger_.device_count();
  std::vector<DeviceShares> shares;
  if (compute_ != nullptr) {
    for (int d = 0; d < devices; ++d) shares.push_back(compute_->Shares(d));
  }
  // Percentages to one decimal: what the arbiter's window can tell apart.
  auto percent = [](double v) { return std::round(v * 10) / 10; };
  // ordered_json keeps the members in the order written, as the document has always had them.
  using Json = nlohmann::ordered_json;
  Json out = {{"devices", Json::array()}, {"containers", Json::array()}};
  for (int d = 0; d < devices; ++d) {
    const ledger::LedgerDevice& dev = book.devices[d];
    Json device = {{"index", d},
                   {"uuid", std::string(dev.uuid, strnlen(dev.uuid, sizeof(dev.uuid)))},
                   {"name", std::string(dev.name, strnlen(dev.name, sizeof(dev.name)))},
                   {"total_bytes", dev.total_bytes}};
    if (!shares.empty()) {
      const arbiter::ArbiterConfig& config = shares[d].config;
      device["policy"] = static_cast<int>(config.policy);
      device["max_inst"] = config.max_inst;
      device["prio_ratio"] = config.prio_ratio.value();
      device["free_weight"] = shares[d].free_weight;
      device["holder"] = l->gate.devices[d].holder.load();
      device["gpu_time_until_ns"] = shares[d].gpu_time_until_ns;
    }
    if (!mps_root_.empty()) device["mps"] = mps_gpus_.count(d) != 0;
    out["devices"].push_back(std::move(device));
  }
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::LedgerBook::Container& slot = book.containers[c];
    if (slot.state.load() != ledger::kLive) continue;
    Json limits = Json::array(), used = Json::array(), compute = Json::array();
    for (int d = 0; d < devices; ++d) {
      const uint64_t limit = slot.limit[d].load();
      limits.push_back(limit == ledger::kUnlimited ? Json(nullptr) : Json(limit));
      used.push_back(ledger_.counters(static_cast<uint32_t>(c)).used[d].load());
    }
    for (int d = 0; d < static_cast<int>(shares.size()); ++d) {
      const ContainerShare* share = nullptr;
      for (const ContainerShare& cs : shares[d].containers) {
        if (cs.container == c) share = &cs;
      }
      compute.push_back(
          {{"device", d},
           {"target_percent",
            share != nullptr && share->target ? Json(percent(*share->target)) : Json(nullptr)},
           {"achieved_percent", share != nullptr ? percent(share->achieved) : 0.0},
           {"holder", share != nullptr && share->holder},
           {"gpu_seconds", share != nullptr ? share->gpu_seconds : 0.0},
           {"grants", share != nullptr ? share->grants : uint64_t{0}}});
    }
    Json processes = Json::array();
    for (int p = 0; p < ledger::kMaxProcesses; ++p) {
      const ledger::LedgerBook::Process& ps = book.processes[p];
      if (ps.state.load() != ledger::kLive || ps.container.load() != static_cast<uint32_t>(c)) {
        continue;
      }
      Json process_used = Json::array();
      for (int d = 0; d < devices; ++d)
        process_used.push_back(ledger_.process(static_cast<uint32_t>(p)).used[d].load());
      processes.push_back({{"pid", ps.host_pid.load()},
                           {"attached", attached_.test(static_cast<size_t>(p))},
                           {"used_bytes", std::move(process_used)}});
    }
    out["containers"].push_back({{"id", std::string(slot.id)},
                                 {"slot", c},
                                 {"limit_bytes", std::move(limits)},
                                 {"used_bytes", std::move(used)},
                                 {"core_percent", slot.core_percent.load()},
                                 {"weight", slot.weight.load()},
                                 {"high_priority", slot.high_priority.load() != 0},
                                 {"compute", std::move(compute)},
                                 {"processes", std::move(processes)}});
  }
  if (!mps_root_.empty()) out["mps_root"] = mps_root_;
  // Names come from NVML and ids are validated, but a byte that is not UTF-8 must not throw here.
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tessera::daemon
