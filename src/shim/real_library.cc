// RealLibrary implementation: locate, dlopen (RTLD_NOW | RTLD_LOCAL) and dlsym every symbol.
#include "shim/real_library.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

namespace tessera::shim {
namespace {

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::string SelfPath(const void* self) {
  Dl_info info{};
  if (dladdr(self, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // namespace

bool ResolveAll(RealLibrary& lib, std::string* error) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // Already resolved (by this library's earlier call): the first entry is never null afterwards.
  if (__atomic_load_n(&lib.table[0], __ATOMIC_ACQUIRE) != nullptr) {
    return lib.table[lib.count] == nullptr;  // sentinel slot: null when the library was found
  }
  const std::string self = SelfPath(lib.self);
  void* handle = nullptr;
  std::string tried;
  auto try_open = [&](const std::string& path) {
    if (path.empty() || handle != nullptr) return;
    if (path[0] != '/') {
      tried += " " + path + " (not an absolute path)";
      return;
    }
    if (access(path.c_str(), R_OK) != 0) {
      tried += " " + path + " (missing)";
      return;
    }
    if (!self.empty() && SameFile(path, self)) {
      tried += " " + path + " (that is this shim)";
      return;
    }
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      tried += " " + path + " (" + (e ? e : "dlopen failed") + ")";
    }
  };
  const char* from_env = std::getenv(lib.env_var);
  if (from_env != nullptr && *from_env != '\0') {
    try_open(from_env);
    if (handle == nullptr && error != nullptr) {
      *error = std::string(lib.env_var) + "=\"" + from_env + "\": cannot load the real " +
               lib.what + ":" + tried;
    }
  } else {
    for (const char* const* p = lib.search_paths; *p != nullptr && handle == nullptr; ++p) {
      try_open(*p);
    }
    if (handle == nullptr && error != nullptr) {
      *error = std::string("no real ") + lib.what + " found (set " + lib.env_var +
               " to its absolute path); tried:" + tried;
    }
  }
  // Fill every entry but the first, then publish the first: readers test entry 0.
  for (size_t i = lib.count; i-- > 0;) {
    void* fn = handle != nullptr ? dlsym(handle, lib.names[i]) : nullptr;
    if (fn == nullptr) fn = lib.missing;
    __atomic_store_n(&lib.table[i], fn, __ATOMIC_RELEASE);
  }
  lib.table[lib.count] = handle != nullptr ? nullptr : lib.missing;
  return handle != nullptr;
}

}  // namespace tessera::shim
