// TesseradClient: STATUS, CONTAINER and CONTAINER remove=1 over tesserad's socket.
#include "k8s/deviceplugin/tesserad_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ipc/unix_socket.h"
#include "protocol/protocol.h"

namespace tessera::k8s {

using nlohmann::json;

const TesseradContainer* TesseradStatus::Find(const std::string& id) const {
  for (const TesseradContainer& c : containers) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

const TesseradGpu* TesseradStatus::Gpu(const std::string& uuid) const {
  for (const TesseradGpu& g : gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

Result<TesseradStatus> ParseTesseradStatus(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (!doc.is_object())
    return Result<TesseradStatus>::Error("tesserad STATUS is not JSON: " + text.substr(0, 200));
  TesseradStatus out;
  try {
    for (const json& d : doc.at("devices")) {
      TesseradGpu g;
      g.index = d.at("index").get<int>();
      g.uuid = d.at("uuid").get<std::string>();
      g.name = d.at("name").get<std::string>();
      g.total = Bytes(d.at("total_bytes").get<uint64_t>());
      g.max_inst = d.value("max_inst", 16u);
      g.mps = d.value("mps", false);
      out.gpus.push_back(std::move(g));
    }
    for (const json& c : doc.at("containers")) {
      TesseradContainer t;
      t.id = c.at("id").get<std::string>();
      for (const json& l : c.at("limit_bytes")) {
        t.limits.push_back(l.is_null() ? std::nullopt
                                       : std::optional<Bytes>(Bytes(l.get<uint64_t>())));
      }
      for (const json& u : c.at("used_bytes")) t.used.push_back(Bytes(u.get<uint64_t>()));
      t.core_percent = c.value("core_percent", 100u);
      t.weight = c.value("weight", 1u);
      t.high_priority = c.value("high_priority", false);
      for (const json& p : c.value("processes", json::array()))
        t.pids.push_back(p.at("pid").get<pid_t>());
      out.containers.push_back(std::move(t));
    }
    out.mps_root = doc.value("mps_root", std::string());
  } catch (const json::exception& e) {
    return Result<TesseradStatus>::Error(std::string("tesserad STATUS: unexpected shape: ") +
                                         e.what());
  }
  return out;
}

TesseradClient::TesseradClient(std::string socket, std::chrono::milliseconds timeout)
    : socket_(std::move(socket)), timeout_(timeout) {}

Result<std::string> TesseradClient::Call(const std::string& line) const {
  auto reply = ipc::Call(socket_, line, nullptr, timeout_);
  if (!reply.ok()) {
    return Result<std::string>::Error("tesserad at " + socket_ +
                                      " is not reachable: " + reply.error());
  }
  if (reply->rfind("ERR ", 0) == 0)
    return Result<std::string>::Error("tesserad refused: " + reply->substr(4));
  if (reply->rfind("OK", 0) != 0) return Result<std::string>::Error("tesserad answered: " + *reply);
  return *reply;
}

Result<TesseradStatus> TesseradClient::Status() const {
  auto reply = Call("STATUS");
  if (!reply.ok()) return reply.status();
  return ParseTesseradStatus(reply->size() > 3 ? reply->substr(3) : "");
}

Result<RegisterReply> TesseradClient::Register(const ContainerRegistration& c) const {
  protocol::Message m{"CONTAINER", {{"id", c.id}}};
  std::string mem;
  for (const auto& l : c.limits) {
    mem += (mem.empty() ? "" : ",") + (l ? std::to_string(l->count()) : std::string("none"));
  }
  if (!mem.empty()) m.fields["mem"] = mem;
  m.fields["core"] = std::to_string(c.core ? c.core->value() : 100);
  m.fields["weight"] = std::to_string(c.weight);
  m.fields["high_prio"] = c.high_priority ? "1" : "0";
  if (c.identify) m.fields["identify"] = "1";
  auto reply = Call(protocol::FormatMessage(m));
  if (!reply.ok()) {
    return Result<RegisterReply>::Error("registering container " + c.id + ": " + reply.error());
  }
  RegisterReply out;
  if (auto parsed = protocol::ParseMessage(*reply); parsed.ok()) {
    out.mps_root = parsed->Get("mps_root", "");
  }
  return out;
}

Result<uint32_t> TesseradClient::Unregister(const std::string& id) const {
  auto reply = Call(protocol::FormatMessage({"CONTAINER", {{"id", id}, {"remove", "1"}}}));
  if (!reply.ok()) {
    if (reply.error().find("no such container") != std::string::npos) return 0u;
    return reply.status();
  }
  auto parsed = protocol::ParseMessage(*reply);
  if (!parsed.ok()) return 0u;
  return static_cast<uint32_t>(std::strtoul(parsed->Get("processes", "0").c_str(), nullptr, 10));
}

Result<std::set<int>> TesseradClient::SetMpsGpus(const std::set<int>& gpus) const {
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
  auto reply = Call(protocol::FormatMessage({"MPSGPUS", {{"gpus", list.empty() ? "none" : list}}}));
  if (!reply.ok()) return reply.status();
  auto parsed = protocol::ParseMessage(*reply);
  if (!parsed.ok()) return parsed.status();
  // The reply's list is tesserad's own "0-3,5" form.
  std::set<int> out;
  const std::string mps = parsed->Get("mps", "none");
  for (size_t at = 0; mps != "none" && at < mps.size();) {
    const size_t end = std::min(mps.find(',', at), mps.size());
    const std::string item = mps.substr(at, end - at);
    const size_t dash = item.find('-');
    const int first = std::atoi(item.substr(0, dash).c_str());
    const int last = dash == std::string::npos ? first : std::atoi(item.substr(dash + 1).c_str());
    for (int i = first; i <= last && i - first < 256; ++i) out.insert(i);
    at = end + 1;
  }
  return out;
}

Result<int> TesseradClient::CutMigGpu(const std::string& gpu, const std::string& layout) const {
  std::string words;
  for (char c : layout) {
    if (c == ' ') {
      if (!words.empty() && words.back() != ',') words += ',';
    } else {
      words += c == '=' ? ':' : c;
    }
  }
  while (!words.empty() && words.back() == ',') words.pop_back();
  auto reply = Call(protocol::FormatMessage({"MIGCUT", {{"gpu", gpu}, {"layout", words}}}));
  if (!reply.ok()) return reply.status();
  auto parsed = protocol::ParseMessage(*reply);
  if (!parsed.ok()) return parsed.status();
  return static_cast<int>(std::strtol(parsed->Get("devices", "0").c_str(), nullptr, 10));
}

}  // namespace tessera::k8s
