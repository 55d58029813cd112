// DynamicLibrary over dlopen/dlsym/dlclose. See library.h for what it promises.
#include "driver/library.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tessera {
namespace {

// dlerror() text, or `fallback` when the loader left none.
std::string LoaderError(const char* fallback) {
  const char* message = dlerror();
  return message != nullptr ? std::string(message) : std::string(fallback);
}

// The loader's record of the object a handle or an address belongs to, or null.
const link_map* LinkMapOfHandle(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0) return nullptr;
  return map;
}

const link_map* LinkMapOfAddress(const void* address) {
  Dl_info info;
  link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) {
    return nullptr;
  }
  return map;
}

}  // namespace

Result<DynamicLibrary> DynamicLibrary::Open(const std::string& absolute_path) {
  if (absolute_path.empty()) {
    return Result<DynamicLibrary>::Error(
        "cannot open library \"\": the path is empty; an absolute path is required");
  }
  if (absolute_path.front() != '/') {
    return Result<DynamicLibrary>::Error(
        "cannot open library \"" + absolute_path +
        "\": the path is relative; an absolute path is required (a relative path or bare soname "
        "would be searched for and could find the shim itself)");
  }
  dlerror();  // Clear any stale error so the one reported below is ours.
  void* handle = dlopen(absolute_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return Result<DynamicLibrary>::Error("cannot open library \"" + absolute_path +
                                         "\": " + LoaderError("dlopen failed"));
  }
  return DynamicLibrary(handle, absolute_path);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

DynamicLibrary::~DynamicLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

Result<void*> DynamicLibrary::Symbol(const char* name) const {
  if (name == nullptr || *name == '\0') {
    return Result<void*>::Error("cannot look up an empty symbol name in \"" + path_ + "\"");
  }
  if (handle_ == nullptr) {
    return Result<void*>::Error(std::string("cannot look up symbol \"") + name +
                                "\": the library object was moved from");
  }
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) {
    // dlsym may legitimately return null for a symbol whose value is 0; dlerror tells them apart.
    const char* message = dlerror();
    return Result<void*>::Error(std::string("symbol \"") + name + "\" not found in \"" + path_ +
                                "\"" + (message != nullptr ? std::string(": ") + message : ""));
  }
  return address;
}

bool DynamicLibrary::Has(const char* name) const {
  if (handle_ == nullptr || name == nullptr || *name == '\0') return false;
  return dlsym(handle_, name) != nullptr;
}

bool DynamicLibrary::Contains(const void* address) const {
  if (handle_ == nullptr || address == nullptr) return false;
  const link_map* mine = LinkMapOfHandle(handle_);
  return mine != nullptr && mine == LinkMapOfAddress(address);
}

Result<bool> IsSameFile(const std::string& path_a, const std::string& path_b) {
  struct stat a {};
  struct stat b {};
  if (stat(path_a.c_str(), &a) != 0) {
    return Result<bool>::Error("cannot stat \"" + path_a + "\": " + std::strerror(errno));
  }
  if (stat(path_b.c_str(), &b) != 0) {
    return Result<bool>::Error("cannot stat \"" + path_b + "\": " + std::strerror(errno));
  }
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

Result<std::string> PathOfObjectContaining(const void* address) {
  Dl_info info;
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%p", address);
    return Result<std::string>::Error(std::string("address ") + hex +
                                      " is not inside any loaded object");
  }
  return std::string(info.dli_fname);
}

}  // namespace tessera
