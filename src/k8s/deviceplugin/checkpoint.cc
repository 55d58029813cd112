// The checkpoint's JSON form and its atomic write.
#include "k8s/deviceplugin/checkpoint.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "k8s/deviceplugin/container_edits.h"

namespace tessera::k8s {

using nlohmann::json;

namespace {
constexpr int kCheckpointVersion = 1;
}

AllocationRecord* Checkpoint::Find(const std::string& pod_uid, const std::string& container) {
  for (AllocationRecord& r : records) {
    if (r.pod_uid == pod_uid && r.container == container) return &r;
  }
  return nullptr;
}

const AllocationRecord* Checkpoint::FindId(const std::string& id) const {
  for (const AllocationRecord& r : records) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

Result<Checkpoint> LoadCheckpoint(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Checkpoint{};
  std::stringstream text;
  text << in.rdbuf();
  Checkpoint out;
  try {
    json doc = json::parse(text.str());
    if (doc.at("version").get<int>() != kCheckpointVersion) {
      return Result<Checkpoint>::Error("checkpoint " + path + ": version " +
                                       doc.at("version").dump() + "; this plugin reads version " +
                                       std::to_string(kCheckpointVersion));
    }
    for (const json& r : doc.at("records")) {
      AllocationRecord rec;
      rec.id = r.at("id");
      rec.pod_uid = r.at("pod_uid");
      rec.ns = r.at("namespace");
      rec.pod = r.at("pod");
      rec.container = r.at("container");
      rec.init = r.value("init", false);
      for (auto it = r.at("devices").begin(); it != r.at("devices").end(); ++it) {
        rec.devices[it.key()] = it.value().get<std::vector<std::string>>();
      }
      for (const json& g : r.at("gpus")) {
        rec.gpus.push_back(
            {g.at("uuid"), g.at("index").get<int>(), Bytes(g.at("mem_bytes").get<uint64_t>()),
             Percent::FromInt(g.at("core_percent").get<int>()).value_or(Percent::Full())});
      }
      if (r.contains("core") && !r["core"].is_null())
        rec.core = Percent::FromInt(r["core"].get<int>());
      rec.weight = r.value("weight", 1u);
      rec.high_priority = r.value("high_priority", false);
      rec.registered = r.value("registered", false);
      rec.cdi_file = r.value("cdi_file", "");
      rec.mps_root = r.value("mps_root", "");
      rec.also_waiting = r.value("also_waiting", std::vector<std::string>{});
      if (r.contains("mode")) {
        auto mode = ParseNodeMode(r["mode"].get<std::string>(), "checkpoint " + path + ": mode");
        if (!mode.ok()) return Result<Checkpoint>::Error(mode.error());
        rec.mode = *mode;
      }
      out.records.push_back(std::move(rec));
    }
    for (auto it = doc.at("rejected").begin(); it != doc.at("rejected").end(); ++it) {
      out.rejected[it.key()] = it.value().get<std::string>();
    }
  } catch (const json::exception& e) {
    return Result<Checkpoint>::Error("checkpoint " + path + " does not parse (" + e.what() +
                                     "); move it away to start afresh");
  }
  return out;
}

Status SaveCheckpoint(const std::string& path, const Checkpoint& c) {
  json records = json::array();
  for (const AllocationRecord& r : c.records) {
    json gpus = json::array();
    for (const AllocatedGpu& g : r.gpus) {
      gpus.push_back({{"uuid", g.uuid},
                      {"index", g.index},
                      {"mem_bytes", g.mem.count()},
                      {"core_percent", g.core.value()}});
    }
    records.push_back({{"id", r.id},
                       {"pod_uid", r.pod_uid},
                       {"namespace", r.ns},
                       {"pod", r.pod},
                       {"container", r.container},
                       {"init", r.init},
                       {"devices", r.devices},
                       {"gpus", gpus},
                       {"core", r.core ? json(r.core->value()) : json(nullptr)},
                       {"weight", r.weight},
                       {"high_priority", r.high_priority},
                       {"registered", r.registered},
                       {"cdi_file", r.cdi_file},
                       {"mps_root", r.mps_root},
                       {"also_waiting", r.also_waiting}});
    if (r.mode) records.back()["mode"] = std::string(NodeModeName(*r.mode));
  }
  const json doc = {
      {"version", kCheckpointVersion}, {"records", records}, {"rejected", c.rejected}};
  const std::string text = doc.dump(1);
  if (Status s = WriteFileAtomically(path, text); !s.ok()) {
    return Status::Error("checkpoint " + s.message());
  }
  return Status::Ok();
}

}  // namespace tessera::k8s
