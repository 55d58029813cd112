// FuseMount: the control tree's FUSE door (`tesserad --ctl-mount DIR`). It mounts a ControlTree at
// a directory, so that `cat DIR/0/policy` and `echo 2 > DIR/0/policy` work with any tool.
//
// What it promises: the filesystem is served from one background thread and unmounted by Stop()
// or the destructor. Folders list; files read as the tree's text; modes show what is writable
// (0644 for rw files, 0444 for ro files, 0555 for folders, all owned by root and the writer
// group). A write must start at offset 0 and carries the whole value, as with /proc files; each
// write() call is one ControlTree::Write. Who may write is decided per request from the caller's
// uid and groups (root, or a member of `writer_group`); others get EACCES when they open a file
// for writing. A write the tree refuses fails with EINVAL and its reason goes to `log`. Attributes
// and names are never cached by the kernel, so what a read shows is the node now.
//
// What it must not do: decide anything about values (the tree does), or touch the node except
// through the tree. FUSE is optional: when the build did not find libfuse3, Available() is false
// and Mount() returns an error saying how to get it; everything else builds without it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "ctl/control_tree.h"

namespace tessera::ctl {

struct FuseMountOptions {
  // An existing, empty directory. Made absolute at Mount().
  std::string mount_point;
  // Besides root, members of this group may write (its gid). nullopt: root only.
  std::optional<gid_t> writer_group;
  // Receives one line per refused write or serving problem (no trailing newline). May be empty.
  // Called from the serving thread.
  std::function<void(std::string_view)> log;
  // Let users other than the mounting one in (they still may not write unless allowed above).
  bool allow_other = true;
};

class FuseMount {
 public:
  // True when this build has FUSE support (libfuse3 was found at configure time).
  static bool Available();

  // Mounts `tree` (a copy; its NodeControl must outlive the mount) and starts serving it. The
  // mount is made with mount(2) directly, so it needs root (CAP_SYS_ADMIN), as tesserad has; there
  // is no fusermount3 fallback. Errors name the directory and the cause (not a directory, no
  // /dev/fuse, mount refused, no FUSE support in this build).
  static Result<std::unique_ptr<FuseMount>> Mount(const ControlTree& tree,
                                                  FuseMountOptions options);

  FuseMount(const FuseMount&) = delete;
  FuseMount& operator=(const FuseMount&) = delete;
  ~FuseMount();  // Stop()

  // Detaches the mount, ends the serving thread and closes the connection: a process that still
  // has a file open there gets ENOTCONN from then on. Never waits on such processes. Safe to call
  // more than once.
  void Stop();

  const std::string& mount_point() const;

  struct Impl;  // defined by the implementation in use (FUSE, or the unavailable stub)

 private:
  explicit FuseMount(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::ctl
