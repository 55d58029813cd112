// resource.k8s.io/v1 and Pod JSON builders for the DRA tests (see the header).
#include "testing/support/dra_objects.h"

#include "k8s/api_client.h"

namespace tessera::k8s::testing {

Json ClaimSpec(const std::vector<DraRequest>& requests, const std::optional<Json>& parameters) {
  Json list = Json::array();
  for (const DraRequest& r : requests) {
    Json exactly = {{"deviceClassName", r.device_class}};
    if (r.all) {
      exactly["allocationMode"] = "All";
    } else {
      exactly["allocationMode"] = "ExactCount";
      exactly["count"] = r.count;
    }
    if (!r.capacity.empty()) exactly["capacity"] = {{"requests", r.capacity}};
    if (!r.selectors.empty()) {
      Json selectors = Json::array();
      for (const std::string& s : r.selectors) selectors.push_back({{"cel", {{"expression", s}}}});
      exactly["selectors"] = selectors;
    }
    list.push_back({{"name", r.name}, {"exactly", exactly}});
  }
  Json devices = {{"requests", list}};
  if (parameters) {
    devices["config"] =
        Json::array({{{"opaque", {{"driver", "gpu.tessera.io"}, {"parameters", *parameters}}}}});
  }
  return {{"devices", devices}};
}

Json ClaimJson(const std::string& ns, const std::string& name,
               const std::vector<DraRequest>& requests, const std::optional<Json>& parameters) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", ClaimSpec(requests, parameters)}};
}

Json AllocatedStatus(const std::string& node, const std::vector<DraResult>& results,
                     const Json& config, const std::string& pod_name, const std::string& pod_uid) {
  Json list = Json::array();
  for (const DraResult& r : results) {
    Json result = {{"request", r.request},
                   {"driver", "gpu.tessera.io"},
                   {"pool", r.pool.empty() ? node : r.pool},
                   {"device", r.device}};
    if (r.share) result["shareID"] = NewShareId();
    if (!r.consumed.empty()) result["consumedCapacity"] = r.consumed;
    list.push_back(std::move(result));
  }
  Json devices = {{"results", list}};
  if (!config.empty()) devices["config"] = config;
  Json status = {
      {"allocation",
       {{"devices", devices},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           Json::array({{{"matchFields", Json::array({{{"key", "metadata.name"},
                                                       {"operator", "In"},
                                                       {"values", Json::array({node})}}})}}})}}}}}};
  if (!pod_uid.empty()) {
    status["reservedFor"] =
        Json::array({{{"resource", "pods"}, {"name", pod_name}, {"uid", pod_uid}}});
  }
  return status;
}

Json PodWithClaims(const std::string& ns, const std::string& name,
                   const std::map<std::string, std::string>& claims,
                   const std::vector<DraContainer>& containers) {
  Json entries = Json::array();
  for (const auto& [entry, claim] : claims) {
    entries.push_back({{"name", entry}, {"resourceClaimName", claim}});
  }
  Json list = Json::array();
  for (const DraContainer& c : containers) {
    Json refs = Json::array();
    for (const std::string& ref : c.claims) {
      const size_t slash = ref.find('/');
      Json r = {{"name", ref.substr(0, slash)}};
      if (slash != std::string::npos) r["request"] = ref.substr(slash + 1);
      refs.push_back(r);
    }
    list.push_back({{"name", c.name}, {"image", "busybox"}, {"resources", {{"claims", refs}}}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"containers", list}, {"resourceClaims", entries}}}};
}

std::string NewShareId() { return NewUuid(); }

}  // namespace tessera::k8s::testing
