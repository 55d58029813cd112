// simgpu's CUDA driver entry points for modules and graphs (the C ABI): a module offers the
// simulated kernels by name (spin, noop, fill, fault); a graph is the kernel work a stream capture
// recorded, replayed on a stream through the execution model (SubmitKernel). It must not book
// work or touch memory itself (driver_execution.cc, driver_memory.cc). Every entry point opens
// with DriverCall (driver_internal.h), validates its arguments in the driver's order and returns
// a CUresult; none throws.
#include <cstring>
#include <vector>

#include "simgpu/driver_internal.h"

using tessera::sim::KernelWork;
using tessera::sim::Rt;
using tessera::sim::Runtime;
using tessera::sim::driver::DestroyHandle;
using tessera::sim::driver::DriverCall;
using tessera::sim::driver::SubmitKernel;

namespace {

CUresult GraphLaunch(CUgraphExec exec, CUstream h, bool per_thread) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = call.ctx();
  if (Rt().execs.count(exec) == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s = call.Stream(h, per_thread);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const std::vector<KernelWork> nodes = exec->nodes;  // the lock may drop between nodes
  for (const KernelWork& w : nodes) {
    if (CUresult r = SubmitKernel(call.lock(), s, w); r != CUDA_SUCCESS) return r;
    if (Rt().contexts.count(ctx) == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  return CUDA_SUCCESS;
}

CUresult GraphInstantiate(CUgraphExec* out, CUgraph g) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().graphs.count(g) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* exec = new CUgraphExec_st();
  exec->nodes = g->nodes;
  Rt().execs.insert(exec);
  *out = exec;
  return CUDA_SUCCESS;
}

}  // namespace

// ---- The C ABI ----------------------------------------------------------------------------------
extern "C" {

// ---- Modules ----------------------------------------------------------------------------------
static CUresult LoadModule(CUmodule* out, const void* image) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kContext); r != CUDA_SUCCESS) return r;
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new CUmod_st();
  Rt().modules.insert(m);
  *out = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleLoad(CUmodule* out, const char* fname) { return LoadModule(out, fname); }
CUresult cuModuleLoadData(CUmodule* out, const void* image) { return LoadModule(out, image); }
CUresult cuModuleLoadDataEx(CUmodule* out, const void* image, unsigned int, int*, void**) {
  return LoadModule(out, image);
}

CUresult cuModuleUnload(CUmodule m) { return DestroyHandle(&Runtime::modules, m); }

CUresult cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  DriverCall call;
  if (CUresult r = call.Check(DriverCall::kInit); r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Rt().modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strcmp(name, "spin") == 0)
    *out = &m->spin;
  else if (std::strcmp(name, "noop") == 0)
    *out = &m->noop;
  else if (std::strcmp(name, "fill") == 0)
    *out = &m->fill;
  else if (std::strcmp(name, "fault") == 0)
    *out = &m->fault;
  else
    return CUDA_ERROR_NOT_FOUND;
  return CUDA_SUCCESS;
}

// ---- Graphs -----------------------------------------------------------------------------------
CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode*, char*, size_t) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode*, char*, size_t) {
  return GraphInstantiate(out, g);
}
CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) { return GraphLaunch(exec, s, false); }
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) { return GraphLaunch(exec, s, true); }

CUresult cuGraphExecDestroy(CUgraphExec exec) { return DestroyHandle(&Runtime::execs, exec); }

CUresult cuGraphDestroy(CUgraph g) { return DestroyHandle(&Runtime::graphs, g); }

}  // extern "C"
