// What `tessera run` adds on an MPS node (tesserad --mps): the container's processes become MPS
// clients of their GPU's server, with the container's core share and memory as MPS limits
// (mps/mps.h). Separate from run.cc so the command-line parsing there can change freely.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace tessera::cli {

// The MPS client environment for a `tessera run` whose daemon (at `socket`) answered CONTAINER
// with mps_root=`mps_root`. `devices` is --devices as given ("" when none: the node must have
// exactly one device), `core` and `mem` the --core and --mem values ("" when none; the first
// entry of a --mem list). An MPS client talks to one GPU's server, so more than one device is
// refused, naming the value. *shm_dir: the GPU's MPS /dev/shm, which the command must be given
// (mps::EnterServerShm) to meet its server.
Result<std::vector<std::string>> MpsRunEnvironment(const std::string& socket,
                                                   const std::string& mps_root,
                                                   const std::string& devices,
                                                   const std::string& core, const std::string& mem,
                                                   std::string* shm_dir);

}  // namespace tessera::cli
