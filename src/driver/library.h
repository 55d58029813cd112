// DynamicLibrary: a shared library opened by absolute path, and its symbols.
//
// This is how the shims reach the *real* libcuda.so.1 / libnvidia-ml.so.1 (or simgpu): by an
// absolute path (TESSERA_REAL_LIBCUDA, TESSERA_REAL_NVML or an auto-detected one), never by soname,
// because the shim itself carries the sonames libcuda.so.1 and libnvidia-ml.so.1 and a lookup by
// name would find the shim again. The library is opened with RTLD_NOW | RTLD_LOCAL:
//   - RTLD_NOW: an unresolvable dependency fails at Open, not at the first call in a tenant's hot
//     path;
//   - RTLD_LOCAL: the real driver's symbols do not enter the global scope, so they cannot shadow
//     the shim's exports for libraries loaded later.
// RTLD_DEEPBIND is deliberately not used: it breaks symbol interposition that the process relies on
// (malloc replacements, sanitizers) inside the driver.
//
// Errors come back as tessera::Result / Status, with messages naming the path, the symbol and
// dlerror()'s explanation. Nothing here throws, logs, or allocates after Open except to build error
// messages, so Symbol() is safe on the shim's initialisation path.
//
// This file may use only libc and libdl: the shims link it into a guest process.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "core/result.h"

namespace tessera {

class DynamicLibrary {
 public:
  // Opens the library at `absolute_path` with RTLD_NOW | RTLD_LOCAL. Fails if the path is empty or
  // relative, or if dlopen fails (missing file, not an ELF object, unresolved dependencies...).
  // Opening a file that is already loaded (under any path: a symlink, a hard link) returns that
  // object with its reference count raised, as dlopen does; see Contains() to detect "myself".
  static Result<DynamicLibrary> Open(const std::string& absolute_path);

  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // Drops this reference with dlclose. A shim that must keep the driver loaded until the process
  // exits should keep its DynamicLibrary in storage that is never destroyed.
  ~DynamicLibrary();

  // The address of `name` in this library (functions and data alike). Fails, naming the symbol and
  // the library path, if the library does not define it.
  Result<void*> Symbol(const char* name) const;

  // Symbol() cast to the function pointer type `Fn`, e.g.
  //   auto init = lib.Resolve<CUresult (*)(unsigned int)>("cuInit");
  template <typename Fn>
  Result<Fn> Resolve(const char* name) const {
    static_assert(std::is_pointer_v<Fn> && std::is_function_v<std::remove_pointer_t<Fn>>,
                  "Resolve<Fn>: Fn must be a function pointer type");
    Result<void*> address = Symbol(name);
    if (!address.ok()) return address.status();
    return reinterpret_cast<Fn>(*address);
  }

  // Whether the library defines `name`. Never fails.
  bool Has(const char* name) const;

  // Whether `address` (a function or object) lies inside this library. The shim passes one of its
  // own functions to refuse a "real" library that turned out to be the shim itself.
  bool Contains(const void* address) const;

  // The path given to Open.
  const std::string& path() const { return path_; }

  // The dlopen handle, for dlinfo and the like. Owned by this object.
  void* handle() const { return handle_; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_ = nullptr;  // Null only in a moved-from object.
  std::string path_;
};

// Whether two paths name the same file (same device and inode, after following symlinks). Fails,
// naming the path and the OS error, if either cannot be stat'ed.
Result<bool> IsSameFile(const std::string& path_a, const std::string& path_b);

// The path of the loaded object (executable or shared library) that contains `address`, as the
// dynamic loader recorded it. Fails if `address` is in no loaded object.
Result<std::string> PathOfObjectContaining(const void* address);

}  // namespace tessera
