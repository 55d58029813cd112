// libFuzzer target for what stays ours of tesserad's HTTP door: the routes and how they handle a
// request's method, path, query and body (daemon/http_door.cc) over the real control tree
// (ctl/control_tree.cc, which parses every written value) and an in-memory node. cpp-httplib has
// parsed the bytes before a request gets here, so the input is the parsed request:
//   byte 0: method (GET, HEAD, PUT, POST, DELETE, TRACE); byte 1: bit 0 writes allowed, bit 1
//   ?force=1; then the path up to the first '\n'; the rest is the body.
// Invariants: no crash; a known status; a text body ends in '\n' and an error body is one line; a
// JSON body parses; GET /v1/ctl/ of a file or folder is 200 or 404; only a 204 changes the node,
// and only with writes allowed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ctl/control_tree.h"
#include "daemon/http_door.h"

namespace {

using namespace tessera;

// The node as a plain snapshot that the setters change; they refuse nothing themselves, so
// what is refused is the tree's doing.
class MemoryNode : public ctl::NodeControl {
 public:
  MemoryNode() {
    state.version = "tessera fuzz";
    state.default_memsize = GiB(4);
    for (int index : {0, 1}) {
      ctl::GpuState gpu;
      gpu.index = index;
      gpu.max_inst = 8;
      gpu.prio_ratio = *Percent::FromInt(50);
      gpu.memory_free = GiB(8);
      gpu.containers.push_back({"web", 2, false, GiB(4), GiB(1), {{101, GiB(1)}}});
      gpu.containers.push_back({"batch", 1, true, std::nullopt, MiB(256), {{201, MiB(256)}}});
      gpu.free_weight = 5;
      state.gpus.push_back(gpu);
    }
  }
  ctl::NodeSnapshot Snapshot() const override { return state; }
  Status SetDefaultMemsize(Bytes memsize) override {
    state.default_memsize = memsize;
    return Status::Ok();
  }
  Status SetPolicy(int gpu, ArbiterPolicy policy) override {
    state.gpus.at(gpu).policy = policy;
    return Status::Ok();
  }
  Status SetMaxInst(int gpu, int max_inst) override {
    state.gpus.at(gpu).max_inst = max_inst;
    return Status::Ok();
  }
  Status SetPrioRatio(int gpu, Percent prio_ratio) override {
    state.gpus.at(gpu).prio_ratio = prio_ratio;
    return Status::Ok();
  }
  Status SetWeight(int gpu, std::string_view container, int weight) override {
    Container(gpu, container).weight = weight;
    return Status::Ok();
  }
  Status SetMemsize(int gpu, std::string_view container, Bytes memsize, bool) override {
    Container(gpu, container).memsize = memsize;
    return Status::Ok();
  }
  Status SetHighPriority(int gpu, std::string_view container, bool high_priority) override {
    Container(gpu, container).high_priority = high_priority;
    return Status::Ok();
  }
  ctl::NodeSnapshot state;

 private:
  ctl::ContainerState& Container(int gpu, std::string_view id) {
    for (auto& c : state.gpus.at(gpu).containers) {
      if (c.id == id) return c;
    }
    std::abort();  // the tree asked for a container its snapshot did not show
  }
};

void Fail(const char* what, const std::string& path, const tessera::http::Response& response) {
  std::fprintf(stderr, "%s: path \"%s\" status %d body \"%s\"\n", what, path.c_str(),
               response.status, response.body.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static const char* const kMethods[] = {"GET", "HEAD", "PUT", "POST", "DELETE", "TRACE"};
  tessera::http::Request request;
  request.method = kMethods[data[0] % 6];
  const bool allow_write = (data[1] & 1) != 0;
  if ((data[1] & 2) != 0) request.query["force"] = "1";
  const std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const size_t newline = rest.find('\n');
  request.path = std::string(rest.substr(0, newline));
  if (newline != std::string_view::npos) request.body = std::string(rest.substr(newline + 1));
  request.peer = "127.0.0.1:1";

  MemoryNode node;
  const ctl::ControlTree tree(&node);
  daemon::HttpDoor door;
  door.tree = &tree;
  door.state = [] { return std::string(R"({"devices":[],"containers":[]})"); };
  door.metrics = [] { return std::string("tessera_up 1\n"); };
  door.allow_write = allow_write;
  const ctl::NodeSnapshot before = node.state;
  const tessera::http::Response response = daemon::HandleHttp(request, door);

  const int s = response.status;
  if (s != 200 && s != 204 && s != 400 && s != 403 && s != 404 && s != 405) {
    Fail("unexpected status", request.path, response);
  }
  if (s == 204 ? !response.body.empty() : response.body.empty() || response.body.back() != '\n') {
    Fail("body", request.path, response);
  }
  if (s >= 400 && response.body.find('\n') + 1 != response.body.size()) {
    Fail("an error of more than one line", request.path, response);
  }
  if (response.content_type == "application/json" && !nlohmann::json::accept(response.body)) {
    Fail("JSON that does not parse", request.path, response);
  }
  const bool read = request.method == "GET" || request.method == "HEAD";
  if (read && request.path.rfind("/v1/ctl", 0) == 0 && s != 200 && s != 404) {
    Fail("a read of the tree neither 200 nor 404", request.path, response);
  }
  if (!(node.state == before) && (s != 204 || !allow_write)) {
    Fail("the node changed without a 204", request.path, response);
  }
  return 0;
}
