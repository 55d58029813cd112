// The extender's HTTP routes over src/http: verbs, health, metrics, inspect, the cluster page,
// and which pods the verbs may act on. No policy here.
#include "k8s/extender/extender_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/text.h"
#include "pages/pages.h"

namespace tessera::extender {

namespace {

constexpr char kJson[] = "application/json";
constexpr char kNotReady[] =
    "tessera-extender is still loading Nodes and Pods from the API server; retry shortly";

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

http::Response JsonReply(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.content_type = kJson;
  r.body = std::move(body);
  return r;
}

// The verb a POST path names: its last segment, after any prefix ("/scheduler/filter").
std::string_view VerbOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (path.empty() || path[0] != '/' || slash == std::string_view::npos) return {};
  const std::string_view verb = path.substr(slash + 1);
  return verb == "filter" || verb == "prioritize" || verb == "preempt" || verb == "bind"
             ? verb
             : std::string_view();
}

// ns, name and uid of the v1.Pod in a verb's request ("" where missing).
void PodIdentity(const k8s::Json& pod, std::string* ns, std::string* name, std::string* uid) {
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return;
  auto text = [&](const char* key) {
    auto it = meta->find(key);
    return it != meta->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  *ns = text("namespace");
  *name = text("name");
  *uid = text("uid");
}

}  // namespace

ExtenderServer::ExtenderServer(ClusterState& state, Binder* binder, DoorOptions options)
    : state_(state), binder_(binder), options_(std::move(options)) {}

ExtenderServer::~ExtenderServer() { Stop(); }

Status ExtenderServer::Listen(const ListenOptions& listen) {
  http::HttpServer::Options options;
  options.max_body_bytes = listen.max_body_bytes;
  options.max_connections = listen.max_connections;
  options.log = listen.log;
  options.tls = listen.tls;
  // kube-scheduler keeps its connections between calls (Go's transport closes them after 90 s);
  // one closed earlier is opened again on its next call.
  options.idle_timeout = std::chrono::seconds(30);
  const std::string address =
      FormatHostPort({listen.host, listen.host.find(':') != std::string::npos,
                      static_cast<uint16_t>(listen.port)});
  auto verbs = http::HttpServer::Create(
      address, "--listen", [this](const http::Request& r) { return Route(r, true); }, options);
  if (!verbs.ok()) return verbs.status();
  verbs_ = std::move(*verbs);
  if (listen.metrics_port >= 0) {
    http::HttpServer::Options read_only;
    read_only.max_body_bytes = 4096;  // GETs only: a verb posted here is told where to go
    read_only.max_connections = 32;
    read_only.log = listen.log;
    const std::string metrics_address =
        FormatHostPort({listen.metrics_host, listen.metrics_host.find(':') != std::string::npos,
                        static_cast<uint16_t>(listen.metrics_port)});
    auto created = http::HttpServer::Create(
        metrics_address, "--metrics-listen",
        [this](const http::Request& r) { return Route(r, false); }, read_only);
    if (!created.ok()) return created.status();
    read_only_ = std::move(*created);
  }
  return Status::Ok();
}

int ExtenderServer::port() const { return verbs_ ? verbs_->port() : 0; }

int ExtenderServer::metrics_port() const { return read_only_ ? read_only_->port() : -1; }

bool ExtenderServer::tls() const { return verbs_ && verbs_->tls(); }

Status ExtenderServer::Serve() {
  if (!verbs_) return Status::Error("the extender's HTTP door is not listening");
  if (Status s = verbs_->Start(); !s.ok()) return s;
  if (read_only_) return read_only_->Start();
  return Status::Ok();
}

void ExtenderServer::Stop() {
  if (verbs_) verbs_->Stop();
  if (read_only_) read_only_->Stop();
}

http::Response ExtenderServer::Route(const http::Request& request, bool verbs) {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (const std::string_view verb = VerbOf(path); !verb.empty()) {
    if (!verbs) {
      return http::Response::Text(404, "the verbs are served on the --listen address only");
    }
    if (request.method != "POST") {
      return http::Response::Text(405, std::string(verb) + " takes POST, not " + request.method);
    }
    int status = 200;
    std::string body = verb == "filter"       ? Filter(request.body, &status)
                       : verb == "prioritize" ? Prioritize(request.body, &status)
                       : verb == "preempt"    ? Preempt(request.body, &status)
                                              : Bind(request.body, &status);
    return JsonReply(status, std::move(body));
  }
  const bool inspect_one =
      path.rfind("/inspect/", 0) == 0 && path.size() > 9 && path.find('/', 9) == std::string::npos;
  const bool page = path == "/" || path == "/ui";
  if (path != "/healthz" && path != "/metrics" && path != "/inspect" && !inspect_one && !page) {
    return http::Response::Text(404, "no route for " + path);
  }
  if (!get) return http::Response::Text(405, path + " takes GET, not " + request.method);
  if (page) {
    http::Response r;
    r.content_type = std::string(pages::kContentType);
    r.body = std::string(pages::ClusterPage());
    return r;
  }
  if (path == "/healthz") {
    return ready_ ? http::Response::Text(200, "ok") : http::Response::Text(503, kNotReady);
  }
  if (path == "/metrics") {
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics_.Render(state_.Stats(), ready_);
    return r;
  }
  if (!inspect_one) {
    return JsonReply(
        200,
        state_.Inspect(std::nullopt)->dump(2, ' ', false, k8s::Json::error_handler_t::replace) +
            "\n");
  }
  const std::string node = path.substr(9);
  auto j = state_.Inspect(node);
  if (!j) {
    return JsonReply(404,
                     k8s::Json{{"error", "node " + node + " is not known to the extender"}}.dump(
                         -1, ' ', false, k8s::Json::error_handler_t::replace) +
                         "\n");
  }
  return JsonReply(200, j->dump(2, ' ', false, k8s::Json::error_handler_t::replace) + "\n");
}

std::string ExtenderServer::Admit(const std::string& ns, const std::string& name,
                                  const std::string& uid, std::string* kind) {
  const std::string key = ns + "/" + name;
  if (ns.empty() || name.empty() || uid.empty()) {
    *kind = "pod-unknown";
    return "the pod is not named whole (namespace " + QuoteValue(ns) + ", name " +
           QuoteValue(name) + ", uid " + QuoteValue(uid) + ")";
  }
  std::optional<PodFacts> facts = state_.Observed(uid);
  if (facts && facts->key != key) {
    *kind = "pod-unknown";
    return "pod uid " + uid + " is " + facts->key + ", not " + key;
  }
  if (!facts && options_.lookup) {
    // The watch may not have shown a pod kube-scheduler already has: ask once.
    auto got = options_.lookup(ns, name);
    if (!got.ok()) {
      if (got.kind() == k8s::ApiErrorKind::kNotFound) {
        *kind = "pod-unknown";
        return "pod " + key + " does not exist";
      }
      *kind = "api-error";
      return "pod " + key +
             ": cannot read it from the API server to check it: " + got.error().message;
    }
    auto view = k8s::PodFromJson(*got);
    if (!view.ok()) {
      *kind = "api-error";
      return "pod " + key + " as the API server returned it: " + view.error();
    }
    if (view->uid != uid) {
      *kind = "pod-unknown";
      return "pod " + key + " has uid " + view->uid + ", not " + uid;
    }
    (void)state_.UpsertPod(*got);
    facts = PodFacts{view->Key(), view->node_name, view->scheduler_name, view->Terminal(),
                     view->deleting};
  }
  if (!facts) {
    *kind = "pod-unknown";
    return "pod " + key + " (uid " + uid + ") is not known to the API server";
  }
  if (!facts->node_name.empty()) {
    *kind = "pod-bound";
    return "pod " + key + " is bound to node " + facts->node_name + " already";
  }
  if (facts->terminal) {
    *kind = "pod-ended";
    return "pod " + key + " has ended";
  }
  if (facts->deleting) {
    *kind = "pod-ended";
    return "pod " + key + " is being deleted";
  }
  const auto& names = options_.scheduler_names;
  if (std::find(names.begin(), names.end(), facts->scheduler_name) == names.end()) {
    *kind = "other-scheduler";
    std::string ours;
    for (const std::string& n : names) ours += (ours.empty() ? "" : ", ") + QuoteValue(n);
    return "pod " + key + " names scheduler " + QuoteValue(facts->scheduler_name) +
           "; this extender places pods of " + ours + " only";
  }
  return {};
}

std::string ExtenderServer::Filter(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  auto finish = [&](std::string out, bool ok) {
    metrics_.Request("filter", SecondsSince(start), ok);
    return out;
  };
  (void)status;  // 200: kube-scheduler reads Error, and no body of any other status
  if (!ready_) {
    metrics_.PodRefused("filter", "not-ready");
    return finish(WriteFilterError(kNotReady), false);
  }
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) {
    metrics_.PodRefused("filter", "bad-request");
    return finish(WriteFilterError("filter: " + args.error()), false);
  }
  {
    std::string ns, name, uid, kind;
    PodIdentity(args->pod, &ns, &name, &uid);
    if (std::string why = Admit(ns, name, uid, &kind); !why.empty()) {
      metrics_.PodRefused("filter", kind);
      return finish(WriteFilterError("filter: " + why), false);
    }
  }
  auto outcome = state_.Filter(args->pod, args->nodes);
  if (!outcome.ok()) {
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
  if (outcome->fits.empty())
    metrics_.PodRefused("filter", commonest.empty() ? "no-nodes" : commonest);
  return finish(WriteFilterResult(*args, *outcome), true);
}

std::string ExtenderServer::Prioritize(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  (void)status;  // 200 always (see the header)
  // A bare list has no Error field: an error answers no score, and is logged.
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "tessera-extender: %s; answered no score\n", message.c_str());
    metrics_.Request("prioritize", SecondsSince(start), false);
    return std::string("[]");
  };
  if (!ready_) return fail(std::string("prioritize: ") + kNotReady);
  auto args = ParseExtenderArgs(body);
  if (!args.ok()) return fail("prioritize: " + args.error());
  {
    std::string ns, name, uid, kind;
    PodIdentity(args->pod, &ns, &name, &uid);
    if (std::string why = Admit(ns, name, uid, &kind); !why.empty()) {
      // Nothing to prefer and nothing reserved; kube-scheduler reads no error from prioritize.
      metrics_.PodRefused("prioritize", kind);
      metrics_.Request("prioritize", SecondsSince(start), false);
      std::vector<NodePriority> zero;
      for (const std::string_view node : args->nodes) zero.push_back({std::string(node), 0});
      return WritePriorities(zero);
    }
  }
  auto scores = state_.Prioritize(args->pod, args->nodes);
  if (!scores.ok()) return fail("prioritize: " + scores.error());
  metrics_.Request("prioritize", SecondsSince(start), true);
  return WritePriorities(*scores);
}

std::string ExtenderServer::Preempt(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  (void)status;  // 200 always (see the header)
  // ExtenderPreemptionResult has no Error field: an error answers no node (nothing is evicted).
  auto fail = [&](const std::string& kind, const std::string& message) {
    std::fprintf(stderr, "tessera-extender: %s; answered no node to preempt on\n", message.c_str());
    metrics_.PodRefused("preempt", kind);
    metrics_.Request("preempt", SecondsSince(start), false);
    return WritePreemptionResult({});
  };
  if (!ready_) return fail("not-ready", std::string("preempt: ") + kNotReady);
  auto args = ParsePreemptionArgs(body);
  if (!args.ok()) return fail("bad-request", "preempt: " + args.error());
  {
    std::string ns, name, uid, kind;
    PodIdentity(args->pod, &ns, &name, &uid);
    if (std::string why = Admit(ns, name, uid, &kind); !why.empty()) {
      return fail(kind, "preempt: " + why);
    }
  }
  auto kept = state_.Preempt(args->pod, args->nodes);
  if (!kept.ok()) return fail("bad-request", "preempt: " + kept.error());
  if (kept->empty() && !args->nodes.empty()) metrics_.PodRefused("preempt", "no-node");
  metrics_.Request("preempt", SecondsSince(start), true);
  return WritePreemptionResult(*kept);
}

std::string ExtenderServer::Bind(std::string_view body, int* status) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& kind, const std::string& message) {
    metrics_.PodRefused("bind", kind);
    metrics_.Request("bind", SecondsSince(start), false);
    std::fprintf(stderr, "tessera-extender: %s\n", message.c_str());
    return WriteBindingResult(message);
  };
  (void)status;  // 200: kube-scheduler reads Error, and no body of any other status
  if (!ready_) return fail("not-ready", kNotReady);
  auto args = ParseBindingArgs(body);
  if (!args.ok()) return fail("bad-request", "bind: " + args.error());
  if (std::string kind, why = Admit(args->pod_namespace, args->pod_name, args->pod_uid, &kind);
      !why.empty()) {
    return fail(kind, "bind: " + why);
  }
  if (binder_ == nullptr) {
    return fail("read-only",
                "bind: this extender was started without API-server access; it "
                "cannot bind pod " +
                    args->pod_namespace + "/" + args->pod_name);
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
