// RealLibrary: finding, opening and resolving the real driver (or NVML) behind a shim. The shim's
// trampolines jump through `table`; ResolveAll fills it once, on the first call of any entry point
// (never at load time: a preloaded shim must cost nothing in processes that never use CUDA).
// The real library comes from an environment variable (absolute path) or a fixed list of standard
// locations, and is never the shim itself (checked by device and inode). Entry points the real
// library lacks are pointed at `missing`, which returns the library's "not supported" status.
#pragma once

#include <cstddef>
#include <string>

namespace tessera::shim {

struct RealLibrary {
  const char* what;                 // "libcuda.so.1"
  const char* env_var;              // "TESSERA_REAL_LIBCUDA"
  const char* const* search_paths;  // nullptr-terminated
  const char* const* names;         // every exported symbol, by trampoline index
  size_t count;
  void** table;      // count entries, filled by ResolveAll
  void* missing;     // stand-in for symbols the real library lacks
  const void* self;  // an address inside the shim, to refuse loading ourselves
};

// Resolves every entry of `lib.table` once (thread-safe). Returns false, with the reason in
// `error`, when no real library could be opened; the table then points at `missing`.
bool ResolveAll(RealLibrary& lib, std::string* error);

}  // namespace tessera::shim
