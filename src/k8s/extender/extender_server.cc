// The extender's HTTP routes over cpp-httplib: verbs, health, metrics, inspect and
// the cluster page. No policy here.
#include "k8s/extender/extender_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "pages/pages.h"

namespace tessera::extender {

namespace {

constexpr char kJson[] = "application/json";
constexpr char kNotReady[] =
    "tessera-extender is still loading Nodes and Pods from the API server; retry shortly";

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

struct ExtenderServer::Http {
  httplib::Server server;
  int port = 0;
};

ExtenderServer::ExtenderServer(ClusterState& state, Binder* binder)
    : state_(state), binder_(binder), http_(std::make_unique<Http>()) {
  httplib::Server& s = http_->server;
  s.set_keep_alive_max_count(100000);
  s.set_tcp_nodelay(true);  // answers go out whole at once; Nagle would hold them for an ACK
  s.set_payload_max_length(64 << 20);
  auto verb = [this](std::string (ExtenderServer::*fn)(std::string_view, int*)) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      int status = 200;
      std::string body = (this->*fn)(req.body, &status);
      res.status = status;
      res.set_content(body, kJson);
    };
  };
  s.Post(R"((?:/.*)?/filter)", verb(&ExtenderServer::Filter));
  s.Post(R"((?:/.*)?/prioritize)", verb(&ExtenderServer::Prioritize));
  s.Post(R"((?:/.*)?/bind)", verb(&ExtenderServer::Bind));
  s.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    res.status = ready_ ? 200 : 503;
    res.set_content(ready_ ? "ok\n" : std::string(kNotReady) + "\n", "text/plain");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(state_.Stats(), ready_), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get(R"(/|/ui)", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(pages::ClusterPage()), std::string(pages::kContentType));
  });
  s.Get("/inspect", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(state_.Inspect(std::nullopt)->dump(2, ' ', false, k8s::Json::error_handler_t::replace) + "\n",
                    kJson);
  });
  s.Get(R"(/inspect/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string node = req.matches[1];
    auto j = state_.Inspect(node);
    if (!j) {
      res.status = 404;
      res.set_content(k8s::Json{{"error", "node " + node + " is not known to the extender"}}.dump() + "\n",
                      kJson);
      return;
    }
    res.set_content(j->dump(2, ' ', false, k8s::Json::error_handler_t::replace) + "\n", kJson);
  });
}

ExtenderServer::~ExtenderServer() { Stop(); }

Status ExtenderServer::Listen(const std::string& host, int port) {
  httplib::Server& s = http_->server;
  if (port == 0) {
    const int bound = s.bind_to_any_port(host);
    if (bound < 0) return Status::Error("--listen " + host + ":0: cannot bind an ephemeral port");
    http_->port = bound;
    return Status::Ok();
  }
  if (!s.bind_to_port(host, port)) {
    return Status::Error("--listen " + host + ":" + std::to_string(port) +
                         ": cannot bind (in use, or not an address of this host)");
  }
  http_->port = port;
  return Status::Ok();
}

int ExtenderServer::port() const { return http_->port; }

void ExtenderServer::Serve() { http_->server.listen_after_bind(); }

void ExtenderServer::Stop() {
  if (http_) http_->server.stop();
}

std::string ExtenderServer::Filter(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](std::string out, bool ok) {
    metrics_.Request("filter", SecondsSince(start), ok);
    return out;
  };
  if (!ready_) {
    *status = 503;
    return finish(WriteFilterError(kNotReady), false);
  }
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) {
    *status = 400;
    metrics_.PodRefused("filter", "bad-request");
    return finish(WriteFilterError("filter: " + args.error()), false);
  }
  auto outcome = state_.Filter(args->pod, args->nodes);
  if (!outcome.ok()) {
    *status = 400;
    metrics_.PodRefused("filter", "bad-request");
    return finish(WriteFilterError("filter: " + outcome.error()), false);
  }
  std::string commonest;
  uint64_t most = 0;
  for (const auto& [kind, n] : outcome->rejected) {
    metrics_.NodeRejected(kind, n);
    if (n > most) {
      most = n;
      commonest = kind;
    }
  }
  if (outcome->fits.empty()) metrics_.PodRefused("filter", commonest.empty() ? "no-nodes" : commonest);
  return finish(WriteFilterResult(*args, *outcome), true);
}

std::string ExtenderServer::Prioritize(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](std::string out, bool ok) {
    metrics_.Request("prioritize", SecondsSince(start), ok);
    return out;
  };
  // The answer is a bare list, which has no Error field: errors are an HTTP status and a message.
  auto error = [](const std::string& message) {
    return k8s::Json{{"Error", message}}.dump(-1, ' ', false, k8s::Json::error_handler_t::replace);
  };
  if (!ready_) {
    *status = 503;
    return finish(error(kNotReady), false);
  }
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) {
    *status = 400;
    return finish(error("prioritize: " + args.error()), false);
  }
  auto scores = state_.Prioritize(args->pod, args->nodes);
  if (!scores.ok()) {
    *status = 400;
    return finish(error("prioritize: " + scores.error()), false);
  }
  return finish(WritePriorities(*scores), true);
}

std::string ExtenderServer::Bind(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& kind, const std::string& message) {
    metrics_.PodRefused("bind", kind);
    metrics_.Request("bind", SecondsSince(start), false);
    std::fprintf(stderr, "tessera-extender: %s\n", message.c_str());
    return WriteBindingResult(message);
  };
  if (!ready_) {
    *status = 503;
    return fail("not-ready", kNotReady);
  }
  auto args = ParseBindingArgs(body);
  if (!args.ok()) {
    *status = 400;
    return fail("bad-request", "bind: " + args.error());
  }
  if (binder_ == nullptr) {
    return fail("read-only", "bind: this extender was started without API-server access; it "
                             "cannot bind pod " + args->pod_namespace + "/" + args->pod_name);
  }
  auto plan = state_.PrepareBind(args->pod_namespace, args->pod_name, args->pod_uid, args->node);
  if (!plan.ok()) return fail("no-fit", "bind: " + plan.error());
  Binder::Outcome done = binder_->Commit(*args, *plan);
  state_.FinishBind(args->pod_uid, *plan, done.ok);
  if (!done.ok) return fail(done.kind.empty() ? "api-error" : done.kind, "bind: " + done.error);
  metrics_.Request("bind", SecondsSince(start), true);
  return WriteBindingResult("");
}

}  // namespace tessera::extender
