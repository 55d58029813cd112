// test_apiserver: the stand-in kube-apiserver (testing/standins/test_apiserver.h) as a program, for
// tests that run several processes (the extender's, a whole-cluster test). Test tooling only.
//   test_apiserver [--port N]   (0 or absent: any free port)
// Prints "port=N" and "url=http://127.0.0.1:N", then serves until stdin reaches end of file or a
// SIGTERM/SIGINT arrives.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/number.h"
#include "testing/standins/test_apiserver.h"

namespace {
volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) {
      auto p = tessera::ParseUnsigned(argv[++i], "--port", 0, 65535);
      if (!p.ok()) {
        std::fprintf(stderr, "test_apiserver: %s\n", p.error().c_str());
        return 2;
      }
      port = static_cast<int>(*p);
    } else {
      std::fprintf(stderr,
                   "test_apiserver: unknown argument \"%s\"\nusage: test_apiserver [--port N]\n",
                   a.c_str());
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  tessera::k8s::TestApiServer server;
  if (auto s = server.Start(port); !s.ok()) {
    std::fprintf(stderr, "test_apiserver: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("port=%d\nurl=%s\n", server.port(), server.url().c_str());
  std::fflush(stdout);
  bool stdin_open = true;
  while (g_stop == 0) {
    pollfd p{0, POLLIN, 0};
    if (stdin_open && poll(&p, 1, 200) > 0) {
      char buf[256];
      if (read(0, buf, sizeof(buf)) <= 0) break;  // end of file: the test is done with us
    } else if (!stdin_open) {
      usleep(200000);
    }
  }
  server.Stop();
  return 0;
}
