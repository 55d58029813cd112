// kube-scheduler's calls to an extender, for tests.
#include "testing/standins/scheduler_driver.h"

#include <httplib.h>

#include "testing/support/test_objects.h"

namespace tessera::extender::testing {

SchedulerDriver::SchedulerDriver(int port)
    : http_(std::make_unique<httplib::Client>("127.0.0.1", port)),
      url_("http://127.0.0.1:" + std::to_string(port)) {
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);
  http_->set_read_timeout(30, 0);
  http_->set_connection_timeout(5, 0);
}

SchedulerDriver::SchedulerDriver(int port, const SchedulerTls& tls)
    : http_(std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(port),
                                              tls.cert_file, tls.key_file)),
      url_("https://127.0.0.1:" + std::to_string(port)) {
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);
  http_->set_read_timeout(30, 0);
  http_->set_connection_timeout(5, 0);
  // Upstream's makeTransport: with enableHTTPS and no CA, the extender's certificate is not
  // checked (insecure); with one, it is, against the host it calls.
  if (!tls.ca_file.empty()) http_->set_ca_cert_path(tls.ca_file.c_str());
  http_->enable_server_certificate_verification(!tls.ca_file.empty());
}

SchedulerDriver::~SchedulerDriver() = default;

int SchedulerDriver::Post(const std::string& path, const std::string& request, std::string* body) {
  auto res = http_->Post(path, request, "application/json");
  if (!res) {
    last_error_ = httplib::to_string(res.error());
    return 0;
  }
  *body = res->body;
  return res->status;
}

namespace {

// kube-scheduler's message for an answer other than 200 (its send(): the body is not read), and
// for no answer (Go's client error: the URL and what the transport saw).
std::string CodeError(const std::string& verb, const std::string& url, int status,
                      const std::string& why) {
  if (status == 0) return "Post \"" + url + "/" + verb + "\": " + why;
  return "failed " + verb + " with extender at URL " + url + "/" + verb + ", code " +
         std::to_string(status);
}

}  // namespace

ScheduleResult SchedulerDriver::Schedule(const k8s::Json& pod,
                                         const std::vector<std::string>& nodes) {
  ScheduleResult out;
  std::string body;
  int status = Post("/filter", testing::ExtenderArgsBody(pod, nodes), &body);
  if (status != 200) {
    out.error = CodeError("filter", url_, status, last_error_);
    return out;
  }
  k8s::Json filtered = k8s::Json::parse(body, nullptr, false);
  if (filtered.is_discarded()) {
    out.error = "filter: the answer is not JSON: " + body;
    return out;
  }
  if (!filtered.value("Error", "").empty()) {
    out.error = filtered.value("Error", "");
    return out;
  }
  std::vector<std::string> fits;
  if (filtered["NodeNames"].is_array())
    fits = filtered["NodeNames"].get<std::vector<std::string>>();
  if (fits.empty()) {
    for (const char* key : {"FailedNodes", "FailedAndUnresolvableNodes"}) {
      if (!filtered[key].is_object()) continue;
      for (auto it = filtered[key].begin(); it != filtered[key].end(); ++it) {
        out.failures[it.key()] = it->get<std::string>();
      }
    }
    return out;
  }
  std::string best = fits.front();
  if (fits.size() > 1) {  // kube-scheduler skips prioritize when one node is left
    status = Post("/prioritize", testing::ExtenderArgsBody(pod, fits), &body);
    const k8s::Json scores = k8s::Json::parse(body, nullptr, false);
    // An error is no score from the extender (kube-scheduler logs it and goes on).
    if (status == 200 && scores.is_array()) {
      int64_t top = -1;
      for (const k8s::Json& h : scores) {
        if (h.value("Score", int64_t{0}) > top) {
          top = h.value("Score", int64_t{0});
          best = h.value("Host", "");
        }
      }
    }
  }
  const k8s::Json bind = {{"PodName", pod["metadata"]["name"]},
                          {"PodNamespace", pod["metadata"].value("namespace", "default")},
                          {"PodUID", pod["metadata"]["uid"]},
                          {"Node", best}};
  status = Post("/bind", bind.dump(), &body);
  if (status != 200) {
    out.error = CodeError("bind", url_, status, last_error_);
    return out;
  }
  const k8s::Json result = k8s::Json::parse(body, nullptr, false);
  if (result.is_discarded() || !result.value("Error", "").empty()) {
    out.error =
        result.is_discarded() ? "bind: the answer is not JSON: " + body : result.value("Error", "");
    return out;
  }
  out.bound = true;
  out.node = best;
  return out;
}

Result<std::map<std::string, std::vector<std::string>>> SchedulerDriver::Preempt(
    const k8s::Json& pod, const std::map<std::string, std::vector<std::string>>& victims) {
  using Out = Result<std::map<std::string, std::vector<std::string>>>;
  k8s::Json meta = k8s::Json::object();
  for (const auto& [node, uids] : victims) {
    k8s::Json pods = k8s::Json::array();
    for (const std::string& uid : uids) pods.push_back({{"UID", uid}});
    meta[node] = {{"Pods", pods}, {"NumPDBViolations", 0}};
  }
  // Go writes the struct's fields in order; NodeNameToVictims is null for nodeCacheCapable.
  const std::string request = "{\"Pod\":" + pod.dump() + ",\"NodeNameToVictims\":null," +
                              "\"NodeNameToMetaVictims\":" + meta.dump() + "}";
  std::string body;
  const int status = Post("/preempt", request, &body);
  if (status != 200) return Out::Error(CodeError("preempt", url_, status, last_error_));
  const k8s::Json result = k8s::Json::parse(body, nullptr, false);
  if (result.is_discarded() || !result.is_object())
    return Out::Error("preempt: the answer is not a JSON object: " + body);
  std::map<std::string, std::vector<std::string>> out;
  const k8s::Json kept = result.value("NodeNameToMetaVictims", k8s::Json());
  if (kept.is_null()) return out;
  for (auto it = kept.begin(); it != kept.end(); ++it) {
    if (victims.count(it.key()) == 0) {
      return Out::Error("preempt: the extender answers node " + it.key() + ", which was not asked");
    }
    const k8s::Json pods = it->value("Pods", k8s::Json());
    if (!pods.is_array() || pods.empty()) {
      return Out::Error("expected at least one victim pod on node \"" + it.key() + "\"");
    }
    for (const k8s::Json& p : pods) out[it.key()].push_back(p.value("UID", ""));
  }
  return out;
}

}  // namespace tessera::extender::testing
