// tessera-oci-hook: an OCI createRuntime hook that tells tesserad which runtime container is one of
// its containers. The runtime runs it on the host with the container's state on stdin, while the
// container's init process waits; it sends `IDENTIFY id=ID pid=PID runtime_id=R` on tesserad's
// node socket (root only) and exits 0 when tesserad recorded the container's cgroup and
// namespaces, 1 otherwise (the runtime then refuses to start the container: a container Tessera
// could not identify gets no GPU), 2 for a malformed command line.
//
//   tessera-oci-hook --container ID [--socket PATH] [--timeout SECONDS]
//
// The device plugin writes it into each container's CDI spec (containerEdits.hooks).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "cmdline/cmdline.h"
#include "core/container_id.h"
#include "core/env_config.h"
#include "ipc/unix_socket.h"
#include "ocihook/oci_state.h"
#include "protocol/protocol.h"

int main(int argc, char** argv) {
  std::string container, socket(tessera::kDefaultSocketPath);
  double timeout_s = 10;
  CLI::App app{
      "tessera-oci-hook: an OCI createRuntime hook; tells tesserad that the container whose OCI "
      "state is on stdin is Tessera container ID.",
      "tessera-oci-hook"};
  app.add_option("--container", container, "the Tessera container id")->required();
  app.add_option("--socket", socket, "tesserad's node socket")->type_name("PATH");
  app.add_option("--timeout", timeout_s, "give up after this long (default 10)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.1, 300.0));
  if (auto status = tessera::cmdline::Parse(app, argc, argv)) return *status;
  if (auto id = tessera::ParseContainerId(container, "--container"); !id.ok()) {
    std::fprintf(stderr, "tessera-oci-hook: %s\n", id.error().c_str());
    return 2;
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(0, buf, sizeof(buf));
    if (n < 0) {
      std::perror("tessera-oci-hook: reading the OCI state on stdin");
      return 1;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > tessera::ocihook::kMaxStateBytes) break;
  }
  auto state = tessera::ocihook::ParseOciState(text);
  if (!state.ok()) {
    std::fprintf(stderr, "tessera-oci-hook: %s\n", state.error().c_str());
    return 1;
  }
  tessera::protocol::Message request{"IDENTIFY",
                                     {{"id", container}, {"pid", std::to_string(state->pid)}}};
  if (const std::string label = tessera::ocihook::RuntimeIdLabel(state->id); !label.empty()) {
    request.fields["runtime_id"] = label;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto reply =
      tessera::ipc::Call(socket, tessera::protocol::FormatMessage(request), nullptr, timeout);
  if (!reply.ok()) {
    std::fprintf(stderr, "tessera-oci-hook: container %s: tesserad at %s: %s\n", container.c_str(),
                 socket.c_str(), reply.error().c_str());
    return 1;
  }
  if (reply->rfind("OK", 0) != 0) {
    std::fprintf(stderr, "tessera-oci-hook: container %s: tesserad refused: %s\n",
                 container.c_str(),
                 reply->rfind("ERR ", 0) == 0 ? reply->c_str() + 4 : reply->c_str());
    return 1;
  }
  return 0;
}
