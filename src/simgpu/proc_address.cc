// cuGetProcAddress and cuGetProcAddress_v2 for simgpu: the version- and flag-aware lookup from a
// base name ("cuMemAlloc") to the exact exported variant ("cuMemAlloc_v2", "cuLaunchKernel_ptsz"),
// exactly as the driver resolves them. The variant table (proc_table.inc) holds ABI facts; the
// export table (exports.inc) maps each variant name to simgpu's own function. No I/O, no locks.
#include <cstring>
#include <string>
#include <string_view>

#include "simgpu/runtime.h"

namespace {

struct ProcRow {
  const char* base;
  int version;
  const char* symbol;
};

constexpr ProcRow kProcTable[] = {
#include "simgpu/proc_table.inc"
};

struct Export {
  const char* name;
  void* fn;
};

#define SIM_EXPORT(name) {#name, reinterpret_cast<void*>(&name)},
const Export kExports[] = {
#include "simgpu/exports.inc"
};
#undef SIM_EXPORT

void* FindExport(std::string_view name) {
  for (const Export& e : kExports) {
    if (name == e.name) return e.fn;
  }
  return nullptr;
}

CUresult Lookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = nullptr;
  if (cuda_version > tessera::sim::kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  auto set_status = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  const ProcRow* best = nullptr;
  bool known = false;
  for (const ProcRow& row : kProcTable) {
    if (std::strcmp(row.base, symbol) != 0) continue;
    known = true;
    if (row.version <= cuda_version && (best == nullptr || row.version > best->version)) {
      best = &row;
    }
  }
  if (!known) {
    set_status(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_SUCCESS;  // the documented answer for an unknown symbol: success, no pointer
  }
  if (best == nullptr) {
    set_status(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    return CUDA_SUCCESS;
  }
  void* fn = nullptr;
  if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0) {
    const std::string name(best->symbol);
    fn = FindExport(name + "_ptsz");
    if (fn == nullptr) fn = FindExport(name + "_ptds");
  }
  if (fn == nullptr) fn = FindExport(best->symbol);
  if (fn == nullptr) {
    set_status(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);  // a variant simgpu does not implement
    return CUDA_SUCCESS;
  }
  *pfn = fn;
  set_status(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  return Lookup(symbol, pfn, cuda_version, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, pfn, cuda_version, flags, status);
}

}  // extern "C"
