// For simgpu's one-process tests: the built libtessera-simgpu.so, opened once per test program by
// path (as the shim opens a real driver) on a simulated machine of its own, and its entry points
// by their exported names. Test tooling only.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <string>

#include "process/child_process.h"

namespace tessera::sim::testing {

class SimLibrary {
 public:
  // The library on a machine named after `prefix` with TESSERA_SIM_GPUS=`gpus`; the first call of
  // the program decides both (the library attaches to one machine per process).
  static SimLibrary& Get(const char* prefix, const char* gpus) {
    static SimLibrary* sim = new SimLibrary(prefix, gpus);
    return *sim;
  }
  // The entry point `name` as a `Fn`.
  template <typename Fn>
  Fn Fn_(const char* name) {
    void* p = dlsym(handle_, name);
    EXPECT_NE(p, nullptr) << name;
    return reinterpret_cast<Fn>(p);
  }
  void* Sym(const char* name) { return dlsym(handle_, name); }
  const std::string& state() const { return state_; }

 private:
  SimLibrary(const char* prefix, const char* gpus) {
    state_ = process::UniqueName(prefix);
    setenv("TESSERA_SIM_STATE", state_.c_str(), 1);
    setenv("TESSERA_SIM_GPUS", gpus, 1);
    const std::string path = process::BuildDir() + "/lib/libtessera-simgpu.so";
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) std::abort();
    static std::string* object = new std::string("/tessera-sim-" + state_);
    std::atexit([] { shm_unlink(object->c_str()); });
  }
  void* handle_ = nullptr;
  std::string state_;
};

}  // namespace tessera::sim::testing
