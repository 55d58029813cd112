// `tessera sim`: replaces this process with tessera-sim, the placement engine's program beside this
// one (build/bin), with the same command line. Nothing is parsed or checked here.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace tessera::cli {

int RunSimProgram(int argc, char** argv) {
  (void)argc;
  const std::string program = ExecutableDir() + "/tessera-sim";
  std::fflush(stdout);
  execv(program.c_str(), argv);
  std::fprintf(stderr,
               "tessera sim: cannot run the placement engine %s: %s; build it with `cmake --build "
               "build --target tessera-sim`\n",
               program.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace tessera::cli
