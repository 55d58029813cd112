// AllocationJson and NewShareId (see the header).
#include "k8s/dra/allocation.h"

#include <map>

#include "k8s/api_client.h"

namespace tessera::k8s::dra {
namespace {

// Whether config `requests` names allocated request `name` ("req" or "req/sub").
bool Names(const Json& requests, const std::string& name) {
  for (const Json& r : requests) {
    if (r == name || r == name.substr(0, name.find('/'))) return true;
  }
  return false;
}

}  // namespace

Json AllocationJson(const Json& claim, const std::vector<AllocatedRequest>& requests,
                    const std::vector<ChosenDevice>& chosen, const std::string& node) {
  Json results = Json::array();
  for (const ChosenDevice& c : chosen) {
    Json r = {{"request", c.request}, {"driver", c.driver}, {"pool", c.pool}, {"device", c.device}};
    if (c.share_id) {
      r["shareID"] = *c.share_id;
      Json consumed = Json::object();
      for (const auto& [name, amount] : c.consumed) consumed[name] = amount.text;
      if (!consumed.empty()) r["consumedCapacity"] = consumed;
    }
    results.push_back(std::move(r));
  }
  Json config = Json::array();
  std::map<std::string, std::vector<size_t>> class_configs;  // class -> its entries in `config`
  for (const AllocatedRequest& r : requests) {
    const std::string klass = (*r.device_class)["metadata"].value("name", "");
    auto known = class_configs.find(klass);
    if (known != class_configs.end()) {
      for (size_t i : known->second) config[i]["requests"].push_back(r.name);
      continue;
    }
    auto& entries = class_configs[klass];
    for (const Json& cc : (*r.device_class)["spec"].value("config", Json::array())) {
      Json entry = cc;
      entry["source"] = "FromClass";
      entry["requests"] = Json::array({r.name});
      entries.push_back(config.size());
      config.push_back(std::move(entry));
    }
  }
  for (const Json& cc : claim["spec"]["devices"].value("config", Json::array())) {
    const Json asked = cc.value("requests", Json::array());
    bool applies = asked.empty();
    for (const AllocatedRequest& r : requests) applies = applies || Names(asked, r.name);
    if (!applies) continue;
    Json entry = cc;
    entry["source"] = "FromClaim";
    if (asked.empty()) entry.erase("requests");
    config.push_back(std::move(entry));
  }
  for (Json& entry : config) {
    if (!entry.contains("requests")) continue;
    bool all = true;
    for (const AllocatedRequest& r : requests) all = all && Names(entry["requests"], r.name);
    if (all) entry.erase("requests");
  }
  Json devices = {{"results", results}};
  if (!config.empty()) devices["config"] = config;
  Json allocation = {{"devices", devices}};
  if (!node.empty()) {
    allocation["nodeSelector"] = {
        {"nodeSelectorTerms",
         Json::array({{{"matchFields", Json::array({{{"key", "metadata.name"},
                                                     {"operator", "In"},
                                                     {"values", Json::array({node})}}})}}})}};
  }
  return allocation;
}

std::string NewShareId() { return NewUuid(); }

}  // namespace tessera::k8s::dra
