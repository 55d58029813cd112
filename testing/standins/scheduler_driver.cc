// kube-scheduler's calls to an extender, for tests.
#include "testing/standins/scheduler_driver.h"

#include <httplib.h>

#include "testing/support/test_objects.h"

namespace tessera::extender::testing {

SchedulerDriver::SchedulerDriver(int port)
    : http_(std::make_unique<httplib::Client>("127.0.0.1", port)) {
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);
  http_->set_read_timeout(30, 0);
  http_->set_connection_timeout(5, 0);
}

SchedulerDriver::SchedulerDriver(int port, const SchedulerTls& tls)
    : http_(std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(port),
                                              tls.cert_file, tls.key_file)) {
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
  if (!res) return 0;
  *body = res->body;
  return res->status;
}

ScheduleResult SchedulerDriver::Schedule(const k8s::Json& pod, const std::vector<std::string>& nodes) {
  ScheduleResult out;
  std::string body;
  int status = Post("/filter", testing::ExtenderArgsBody(pod, nodes), &body);
  k8s::Json filtered = k8s::Json::parse(body, nullptr, false);
  if (status != 200 || filtered.is_discarded() || !filtered.value("Error", "").empty()) {
    out.error = "filter: HTTP " + std::to_string(status) + ": " + body;
    return out;
  }
  std::vector<std::string> fits;
  if (filtered["NodeNames"].is_array()) fits = filtered["NodeNames"].get<std::vector<std::string>>();
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
    if (status != 200 || !scores.is_array()) {
      out.error = "prioritize: HTTP " + std::to_string(status) + ": " + body;
      return out;
    }
    int64_t top = -1;
    for (const k8s::Json& h : scores) {
      if (h.value("Score", int64_t{0}) > top) {
        top = h.value("Score", int64_t{0});
        best = h.value("Host", "");
      }
    }
  }
  const k8s::Json bind = {{"PodName", pod["metadata"]["name"]},
                          {"PodNamespace", pod["metadata"].value("namespace", "default")},
                          {"PodUID", pod["metadata"]["uid"]},
                          {"Node", best}};
  status = Post("/bind", bind.dump(), &body);
  const k8s::Json result = k8s::Json::parse(body, nullptr, false);
  if (status != 200 || result.is_discarded() || !result.value("Error", "").empty()) {
    out.error = "bind: HTTP " + std::to_string(status) + ": " + body;
    return out;
  }
  out.bound = true;
  out.node = best;
  return out;
}

}  // namespace tessera::extender::testing
