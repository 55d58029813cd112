// FuseMount for builds without libfuse3: Mount() explains how to get FUSE support.
//
// Must not: pretend to mount, or need anything beyond the C++ standard library and src/core.
#include <utility>

#include "ctl/fuse_mount.h"

namespace tessera::ctl {

struct FuseMount::Impl {
  FuseMountOptions options;
};

bool FuseMount::Available() { return false; }

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(const ControlTree& /*tree*/,
                                                    FuseMountOptions options) {
  return Result<std::unique_ptr<FuseMount>>::Error(
      "control-tree mount \"" + options.mount_point +
      "\": this build has no FUSE support (libfuse3 was not found at configure time); install "
      "it (apt-get install libfuse3-dev fuse3) and configure again, or use `tessera ctl` or "
      "the daemon's HTTP /v1/ctl/ instead");
}

FuseMount::FuseMount(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseMount::~FuseMount() = default;

void FuseMount::Stop() {}

const std::string& FuseMount::mount_point() const { return impl_->options.mount_point; }

}  // namespace tessera::ctl
