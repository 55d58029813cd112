// `tessera version`: the program's version and the CUDA driver ABI it declares.
#include <cstdio>

#include "cli/commands.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "0.0.0"
#endif

namespace tessera::cli {

int RunVersion(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::fprintf(stderr, "tessera version: takes no arguments\n");
    return 2;
  }
  std::printf("tessera %s (CUDA driver ABI 12.x-13.x, simulated GPU included)\n", TESSERA_VERSION);
  return 0;
}

}  // namespace tessera::cli
