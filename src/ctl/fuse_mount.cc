// FuseMount over libfuse3's high-level (path-based) API: the operations translate between kernel
// requests and ControlTree calls, one serving thread runs the session loop.
//
// Must not: validate values or hold node state (the tree does and the node has it), cache tree
// contents beyond one open file handle, or call libfuse's signal-handler or daemonize helpers
// (this runs inside tesserad, which owns its signals). Compiled only when libfuse3 was found.
#define FUSE_USE_VERSION 35
#include "ctl/fuse_mount.h"

#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::ctl {

struct FuseMount::Impl {
  Impl(const ControlTree& tree, FuseMountOptions options)
      : tree(tree), options(std::move(options)) {}

  ControlTree tree;
  FuseMountOptions options;
  struct fuse* fuse = nullptr;
  int wake_fd = -1;  // an eventfd: Stop() writes to it to end the loop
  // The text each open file handle had at open, by handle. Touched only by the serving thread
  // (and by the destructor after it ended); handles a vanished connection never released go
  // with it.
  std::unordered_map<uint64_t, std::string> open_files;
  uint64_t next_handle = 1;
  std::thread loop;
  bool mounted = false;
  timespec mounted_at{};

  void Log(std::string_view line) const {
    if (options.log) {
      options.log(line);
    }
  }

  // Serves requests until the connection ends (unmounted or aborted) or wake_fd is written.
  // Like libfuse's own loop, but it also waits on wake_fd, so Stop() never depends on one more
  // request arriving, and the /dev/fuse descriptor is non-blocking so a request withdrawn between
  // poll() and read() cannot stall it.
  void Serve() {
    fuse_session* session = fuse_get_session(fuse);
    const int device_fd = fuse_session_fd(session);
    fcntl(device_fd, F_SETFL, fcntl(device_fd, F_GETFL) | O_NONBLOCK);
    fuse_buf buffer{};
    while (!fuse_session_exited(session)) {
      pollfd fds[2] = {{device_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) {
          continue;
        }
        Log("control-tree mount: poll failed: " + std::string(std::strerror(errno)));
        break;
      }
      if (fds[1].revents != 0 || (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        break;
      }
      const int received = fuse_session_receive_buf(session, &buffer);
      if (received == -EINTR || received == -EAGAIN) {
        continue;
      }
      if (received <= 0) {
        break;  // 0: the connection ended; < 0: an error libfuse has reported
      }
      fuse_session_process_buf(session, &buffer);
    }
    std::free(buffer.mem);
  }
};

namespace {

using Impl = FuseMount::Impl;

Impl* Current() { return static_cast<Impl*>(fuse_get_context()->private_data); }

// Whether the process behind the current request may write: root, or a member of the writer
// group (its primary group or one of its supplementary groups).
bool CallerMayWrite(const Impl& impl) {
  const fuse_context* context = fuse_get_context();
  if (context->uid == 0) {
    return true;
  }
  if (!impl.options.writer_group) {
    return false;
  }
  const gid_t group = *impl.options.writer_group;
  if (context->gid == group) {
    return true;
  }
  std::vector<gid_t> groups(1024);
  const int count = fuse_getgroups(static_cast<int>(groups.size()), groups.data());
  for (int i = 0; i < count && i < static_cast<int>(groups.size()); ++i) {
    if (groups[i] == group) {
      return true;
    }
  }
  return false;
}

void FillAttributes(const Impl& impl, const Entry& entry, size_t size, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_uid = 0;
  st->st_gid = impl.options.writer_group.value_or(0);
  st->st_atim = st->st_mtim = st->st_ctim = impl.mounted_at;
  if (entry.is_directory) {
    st->st_mode = S_IFDIR | 0555;
    st->st_nlink = 2;
    return;
  }
  mode_t mode = 0444;
  if (entry.writable) {
    mode = impl.options.writer_group ? 0664 : 0644;
  }
  st->st_mode = S_IFREG | mode;
  st->st_nlink = 1;
  st->st_size = static_cast<off_t>(size);
}

void* OnInit(fuse_conn_info* /*connection*/, fuse_config* config) {
  // Never let the kernel answer from a cache: containers come and go, values change.
  config->entry_timeout = 0;
  config->attr_timeout = 0;
  config->negative_timeout = 0;
  config->direct_io = 1;
  return fuse_get_context()->private_data;
}

int OnGetattr(const char* path, struct stat* st, fuse_file_info* /*file*/) {
  const Impl& impl = *Current();
  Result<Entry> entry = impl.tree.Stat(path);
  if (!entry.ok()) {
    return -ENOENT;
  }
  size_t size = 0;
  if (!entry->is_directory) {
    Result<std::string> text = impl.tree.Read(path);
    size = text.ok() ? text->size() : 0;
  }
  FillAttributes(impl, *entry, size, st);
  return 0;
}

int OnReaddir(const char* path, void* buffer, fuse_fill_dir_t fill, off_t /*offset*/,
              fuse_file_info* /*file*/, fuse_readdir_flags /*flags*/) {
  const Impl& impl = *Current();
  Result<std::vector<Entry>> entries = impl.tree.List(path);
  if (!entries.ok()) {
    Result<Entry> entry = impl.tree.Stat(path);
    return entry.ok() ? -ENOTDIR : -ENOENT;
  }
  fill(buffer, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buffer, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  for (const Entry& entry : *entries) {
    struct stat st;
    FillAttributes(impl, entry, 0, &st);
    if (fill(buffer, entry.name.c_str(), &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) {
      break;
    }
  }
  return 0;
}

int OnOpen(const char* path, fuse_file_info* file) {
  Impl& impl = *Current();
  Result<Entry> entry = impl.tree.Stat(path);
  if (!entry.ok()) {
    return -ENOENT;
  }
  if (entry->is_directory) {
    return -EISDIR;
  }
  const int access = file->flags & O_ACCMODE;
  if (access != O_RDONLY) {
    if (!entry->writable) {
      return -EACCES;
    }
    if (!CallerMayWrite(impl)) {
      impl.Log(std::string(path + 1) + ": write refused: uid " +
               std::to_string(fuse_get_context()->uid) +
               " is neither root nor in the control tree's writer group");
      return -EACCES;
    }
  }
  // An open file keeps the text it had at open, so that a reader sees one consistent value
  // however it splits its reads.
  std::string snapshot;
  if (access != O_WRONLY) {
    Result<std::string> text = impl.tree.Read(path);
    if (!text.ok()) {
      return -ENOENT;
    }
    snapshot = std::move(text).value();
  }
  file->fh = impl.next_handle++;
  impl.open_files.emplace(file->fh, std::move(snapshot));
  file->direct_io = 1;
  return 0;
}

int OnRead(const char* /*path*/, char* buffer, size_t size, off_t offset, fuse_file_info* file) {
  const Impl& impl = *Current();
  const auto open_file = impl.open_files.find(file->fh);
  if (open_file == impl.open_files.end() || offset < 0) {
    return -EINVAL;
  }
  const std::string& text = open_file->second;
  if (static_cast<size_t>(offset) >= text.size()) {
    return 0;
  }
  const size_t count = std::min(size, text.size() - static_cast<size_t>(offset));
  std::memcpy(buffer, text.data() + offset, count);
  return static_cast<int>(count);
}

int OnWrite(const char* path, const char* data, size_t size, off_t offset,
            fuse_file_info* /*file*/) {
  const Impl& impl = *Current();
  const std::string_view relative = path + 1;  // libfuse paths start with '/'
  if (offset != 0) {
    impl.Log(std::string(relative) + ": write refused: it starts at offset " +
             std::to_string(offset) + "; expected the whole value in one write at offset 0");
    return -EINVAL;
  }
  WriteOptions options;
  options.writer_may_write = CallerMayWrite(impl);
  const Status status = impl.tree.Write(relative, std::string_view(data, size), options);
  if (!status.ok()) {
    impl.Log(status.message());
    return -EINVAL;
  }
  return static_cast<int>(size);
}

// `echo 2 > file` opens with O_TRUNC; truncating a writable file to 0 is accepted and does
// nothing (the value changes on the write that follows).
int OnTruncate(const char* path, off_t size, fuse_file_info* /*file*/) {
  const Impl& impl = *Current();
  Result<Entry> entry = impl.tree.Stat(path);
  if (!entry.ok()) {
    return -ENOENT;
  }
  if (entry->is_directory) {
    return -EISDIR;
  }
  if (!entry->writable || !CallerMayWrite(impl)) {
    return -EACCES;
  }
  return size == 0 ? 0 : -EINVAL;
}

int OnRelease(const char* /*path*/, fuse_file_info* file) {
  Current()->open_files.erase(file->fh);
  file->fh = 0;
  return 0;
}

// The tree's files are fixed: nothing can be created.
int OnCreate(const char* /*path*/, mode_t /*mode*/, fuse_file_info* /*file*/) { return -EACCES; }

fuse_operations MakeOperations() {
  fuse_operations operations;
  std::memset(&operations, 0, sizeof(operations));
  operations.init = OnInit;
  operations.getattr = OnGetattr;
  operations.readdir = OnReaddir;
  operations.open = OnOpen;
  operations.read = OnRead;
  operations.write = OnWrite;
  operations.truncate = OnTruncate;
  operations.release = OnRelease;
  operations.create = OnCreate;
  return operations;
}

std::string ErrnoText(int error) { return std::strerror(error); }

}  // namespace

bool FuseMount::Available() { return true; }

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(const ControlTree& tree,
                                                    FuseMountOptions options) {
  using R = Result<std::unique_ptr<FuseMount>>;
  const std::string requested = options.mount_point;
  auto fail = [&](const std::string& reason) {
    return R::Error("control-tree mount \"" + requested + "\": " + reason);
  };
  // A FUSE mount whose daemon died (a tesserad killed with SIGKILL) answers every call with
  // ENOTCONN until it is unmounted: detach it and mount afresh (crash-only restart).
  struct stat st;
  if (!requested.empty() && stat(requested.c_str(), &st) != 0 && errno == ENOTCONN) {
    if (umount2(requested.c_str(), MNT_DETACH) != 0) {
      return fail(
          "a dead mount is left there (transport endpoint is not connected) and cannot be "
          "detached (" +
          ErrnoText(errno) + "); run `umount -l " + requested + "`");
    }
    if (options.log) options.log("detached the dead mount a previous daemon left at " + requested);
  }
  char resolved[PATH_MAX];
  if (requested.empty() || realpath(requested.c_str(), resolved) == nullptr) {
    return fail("no such directory (" + ErrnoText(errno) + ")");
  }
  if (stat(resolved, &st) != 0) return fail("cannot stat it (" + ErrnoText(errno) + ")");
  if (!S_ISDIR(st.st_mode)) {
    const char* found = S_ISREG(st.st_mode)    ? "a regular file"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISFIFO(st.st_mode) ? "a FIFO"
                        : S_ISCHR(st.st_mode)  ? "a character device"
                        : S_ISBLK(st.st_mode)  ? "a block device"
                                               : "something else";
    return fail(std::string("not a directory: ") + resolved + " is " + found +
                "; expected a directory to mount the control tree on (or a path to create)");
  }
  options.mount_point = resolved;

  auto impl = std::make_unique<Impl>(tree, std::move(options));
  clock_gettime(CLOCK_REALTIME, &impl->mounted_at);
  impl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake_fd < 0) {
    return fail("eventfd failed (" + ErrnoText(errno) + ")");
  }
  std::string program = "tessera-ctl";
  char* argv[] = {program.data(), nullptr};
  fuse_args args = FUSE_ARGS_INIT(1, argv);
  const fuse_operations operations = MakeOperations();
  impl->fuse = fuse_new(&args, &operations, sizeof(operations), impl.get());
  fuse_opt_free_args(&args);
  if (impl->fuse == nullptr) {
    close(impl->wake_fd);
    return fail("libfuse could not set up a filesystem");
  }
  // The mount itself is ours, not libfuse's: we open /dev/fuse, mount it, and hand libfuse the
  // descriptor as "/dev/fd/N". libfuse then owns exactly one thing, that descriptor (closed by
  // fuse_destroy), and never unmounts a path on its own.
  const int device_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (device_fd < 0) {
    const int error = errno;
    fuse_destroy(impl->fuse);
    close(impl->wake_fd);
    return fail("cannot open /dev/fuse (" + ErrnoText(error) +
                "); load the fuse module, or give the container the device");
  }
  std::string data = "fd=" + std::to_string(device_fd) +
                     ",rootmode=40000,user_id=" + std::to_string(getuid()) +
                     ",group_id=" + std::to_string(getgid());
  if (impl->options.allow_other) {
    data += ",allow_other";
  }
  if (mount("tessera-ctl", impl->options.mount_point.c_str(), "fuse.tessera",
            MS_NOSUID | MS_NODEV | MS_NOEXEC, data.c_str()) != 0) {
    const int error = errno;
    close(device_fd);
    fuse_destroy(impl->fuse);
    close(impl->wake_fd);
    return fail("mount refused (" + ErrnoText(error) + ")" +
                (error == EPERM ? "; mounting needs root (CAP_SYS_ADMIN)" : ""));
  }
  const std::string device_path = "/dev/fd/" + std::to_string(device_fd);
  if (fuse_mount(impl->fuse, device_path.c_str()) != 0) {
    umount2(impl->options.mount_point.c_str(), MNT_DETACH);
    close(device_fd);
    fuse_destroy(impl->fuse);
    close(impl->wake_fd);
    return fail("libfuse did not take the /dev/fuse descriptor");
  }
  impl->mounted = true;
  Impl* raw = impl.get();
  impl->loop = std::thread([raw] { raw->Serve(); });
  return std::unique_ptr<FuseMount>(new FuseMount(std::move(impl)));
}

FuseMount::FuseMount(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseMount::~FuseMount() { Stop(); }

const std::string& FuseMount::mount_point() const { return impl_->options.mount_point; }

void FuseMount::Stop() {
  if (!impl_ || !impl_->mounted) {
    return;
  }
  impl_->mounted = false;
  // Detach the directory first: from here on no new path lookup reaches us. When nobody uses the
  // filesystem this also ends its connection; when something still has a file or directory open
  // there, the filesystem lives on detached until fuse_destroy below closes /dev/fuse, which
  // aborts the connection (those users then get ENOTCONN).
  if (umount2(impl_->options.mount_point.c_str(), MNT_DETACH) != 0) {
    impl_->Log("control-tree mount \"" + impl_->options.mount_point +
               "\": unmount failed: " + ErrnoText(errno));
  }
  fuse_exit(impl_->fuse);
  const uint64_t one = 1;
  (void)!write(impl_->wake_fd, &one, sizeof(one));
  impl_->loop.join();
  fuse_destroy(impl_->fuse);
  impl_->fuse = nullptr;
  close(impl_->wake_fd);
  impl_->wake_fd = -1;
}

}  // namespace tessera::ctl
