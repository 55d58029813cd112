// Registry implementation: validation of HELLO/CONTAINER fields and ledger slot management.
#include "daemon/registry.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>

#include "core/container_id.h"
#include "core/device_selector.h"

namespace tessera::daemon {
namespace {

bool PidAlive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Registry::Registry(ledger::MemoryLedger ledger, RegistryOptions options)
    : ledger_(std::move(ledger)), options_(options) {}

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

Result<Message> Registry::Hello(const Message& request, pid_t pid, uint32_t* process_slot) {
  if (request.Get("version") != std::to_string(kProtocolVersion)) {
    return Result<Message>::Error("HELLO version=" + request.Get("version", "(missing)") +
                                  ": this tesserad speaks version " +
                                  std::to_string(kProtocolVersion));
  }
  std::string id = request.Get("container", "proc-" + std::to_string(pid));
  if (auto valid = ParseContainerId(id, "container"); !valid.ok()) {
    return Result<Message>::Error(valid.error());
  }
  // The devices the process may see, as physical indices in its ordinal order.
  std::vector<int> visible;
  std::vector<std::string> uuids;
  for (int d = 0; d < ledger_.device_count(); ++d)
    uuids.push_back(ledger_.layout()->devices[d].uuid);
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
      return Result<Message>::Error("container " + id +
                                    " is not registered and this tesserad does not accept "
                                    "self-declared containers (--allow-self-declared=false); "
                                    "start the process with `tessera run`");
    }
    // The declared limits are per visible device (ordinal order); the ledger's are physical.
    auto by_ordinal = ParseLimits(request.Get("mem", "none"), static_cast<int>(visible.size()));
    if (!by_ordinal.ok()) return by_ordinal.status();
    std::vector<uint64_t> limits(static_cast<size_t>(ledger_.device_count()), ledger::kUnlimited);
    for (size_t i = 0; i < visible.size(); ++i)
      limits[static_cast<size_t>(visible[i])] = (*by_ordinal)[i];
    auto added = ledger_.UpsertContainer(id, limits);
    if (!added.ok()) return added.status();
    c = static_cast<int>(*added);
  }
  Message reply{"OK", {}};
  reply.fields["container"] = std::to_string(c);
  reply.fields["devices"] = std::to_string(ledger_.device_count());
  reply.fields["pid"] = std::to_string(pid);
  reply.fields["context_bytes"] = std::to_string(options_.context_bytes);
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
      return Result<Message>::Error("HELLO local_pid=" + text + ": expected a positive process id");
    }
    local_pid = static_cast<int32_t>(v);
  }
  auto p = ledger_.AddProcess(static_cast<uint32_t>(c), pid, local_pid);
  if (!p.ok()) return p.status();
  *process_slot = *p;
  reply.fields["process"] = std::to_string(*p);
  reply.fields["generation"] = std::to_string(ledger_.layout()->processes[*p].generation.load());
  return reply;
}

Result<Message> Registry::SetContainer(const Message& request) {
  const std::string id = request.Get("id");
  if (auto valid = ParseContainerId(id, "id"); !valid.ok()) {
    return Result<Message>::Error(valid.error());
  }
  auto limits = ParseLimits(request.Get("mem", "none"), ledger_.device_count());
  if (!limits.ok()) return limits.status();
  auto c = ledger_.UpsertContainer(id, *limits);
  if (!c.ok()) return c.status();
  return Message{"OK", {{"container", std::to_string(*c)}}};
}

void Registry::Disconnected(uint32_t process_slot) {
  if (process_slot != kNoProcess) ledger_.ReclaimProcess(process_slot);
}

int Registry::ReclaimDeadProcesses() {
  int reclaimed = 0;
  for (int p = 0; p < ledger::kMaxProcesses; ++p) {
    const ledger::ProcessSlot& slot = ledger_.layout()->processes[p];
    if (slot.state.load() == ledger::kLive && !PidAlive(slot.host_pid.load())) {
      ledger_.ReclaimProcess(static_cast<uint32_t>(p));
      ++reclaimed;
    }
  }
  return reclaimed;
}

std::string Registry::StatusJson() const {
  const ledger::LedgerLayout* l = ledger_.layout();
  const int devices = ledger_.device_count();
  std::string out = "{\"devices\":[";
  for (int d = 0; d < devices; ++d) {
    out += (d ? "," : "") + std::string("{\"index\":") + std::to_string(d) +
           ",\"uuid\":" + Json(l->devices[d].uuid) + ",\"name\":" + Json(l->devices[d].name) +
           ",\"total_bytes\":" + std::to_string(l->devices[d].total_bytes) + "}";
  }
  out += "],\"containers\":[";
  bool first = true;
  for (int c = 0; c < ledger::kMaxContainers; ++c) {
    const ledger::ContainerSlot& slot = l->containers[c];
    if (slot.state.load() != ledger::kLive) continue;
    out += (first ? "" : ",") + std::string("{\"id\":") + Json(slot.id) +
           ",\"slot\":" + std::to_string(c) + ",\"limit_bytes\":[";
    for (int d = 0; d < devices; ++d) {
      const uint64_t limit = slot.limit[d].load();
      out += (d ? "," : "") + (limit == ledger::kUnlimited ? "null" : std::to_string(limit));
    }
    out += "],\"used_bytes\":[";
    for (int d = 0; d < devices; ++d) out += (d ? "," : "") + std::to_string(slot.used[d].load());
    out += "],\"processes\":[";
    bool first_p = true;
    for (int p = 0; p < ledger::kMaxProcesses; ++p) {
      const ledger::ProcessSlot& ps = l->processes[p];
      if (ps.state.load() != ledger::kLive || ps.container.load() != static_cast<uint32_t>(c)) {
        continue;
      }
      out += (first_p ? "" : ",") + std::string("{\"pid\":") + std::to_string(ps.host_pid.load()) +
             ",\"used_bytes\":[";
      for (int d = 0; d < devices; ++d) out += (d ? "," : "") + std::to_string(ps.used[d].load());
      out += "]}";
      first_p = false;
    }
    out += "]}";
    first = false;
  }
  return out + "]}";
}

}  // namespace tessera::daemon
