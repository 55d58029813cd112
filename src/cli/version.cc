// `tessera version`: the program's version and the CUDA driver ABI it declares.
#include <cstdio>

#include "cli/commands.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "0.0.0"
#endif

namespace tessera::cli {

int RunVersion() {
  std::printf("tessera %s (CUDA driver ABI 12.x-13.x, simulated GPU included)\n", TESSERA_VERSION);
  return 0;
}

}  // namespace tessera::cli
