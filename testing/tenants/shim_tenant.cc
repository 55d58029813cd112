// shim_tenant: a test program linked directly against the shim (DT_NEEDED libcuda.so.1, as a
// program built with -lcuda is), run with TESSERA_REAL_LIBCUDA pointing at simgpu. It prints
// key=value lines for the tests and exits 0 on success. Test tooling only.
//
//   shim_tenant alloc-until-oom CHUNK_MIB   allocate until failure; report; hold until stdin EOF
//   shim_tenant hold BYTES                  allocate, print ready=1, sleep until killed
//   shim_tenant bypass SHIM BYPASS          allocate SHIM bytes through the shim and BYPASS bytes
//                                           through the real driver's own cuMemAlloc_v2 (dlsym on
//                                           TESSERA_REAL_LIBCUDA: the shim never sees them), print
//                                           ready=1, then try a 1 MiB allocation through the shim
//                                           every 50 ms, printing shim_alloc=RESULT when the
//                                           result changes, until stdin closes; a line "free" on
//                                           stdin frees the BYPASS bytes (freed=1)
//   shim_tenant meminfo                     cuMemGetInfo_v2 / cuDeviceTotalMem_v2 as the app sees
//   them shim_tenant paths BYTES                 each allocation path once; prints the
//   ledger-visible
//                                           free memory after each (free_after_<path>=N)
//   shim_tenant getproc VERSION FLAGS CHUNK_MIB  allocate until failure through pointers from
//                                           cuGetProcAddress_v2(VERSION, FLAGS)
//   shim_tenant dlopen                      dlopen("libcuda.so.1") + dlsym: same objects as linked?
//   shim_tenant fork-hold BYTES             fork; parent and child each allocate BYTES, report,
//   hold
//   shim_tenant spin KERNEL_US SECONDS START_NS HOW   from CLOCK_MONOTONIC START_NS, launch simgpu
//                                           spin kernels back to back for SECONDS through HOW
//                                           (legacy, ptsz, stream, ex or graph; `sync`: one at a
//                                           time, cuCtxSynchronize after each; `sporadic`: one
//                                           every 20 ms, synchronised); prints kernels=N and the
//                                           longest single launch call
//   shim_tenant cheat HOW KERNEL_US SECONDS  a tenant that takes GPU time its gate does not grant,
//                                           HOW: `around` launches spin kernels through the real
//                                           driver's own cuLaunchKernel (dlsym on
//                                           TESSERA_REAL_LIBCUDA: the gate never sees them);
//                                           `lie` launches through the shim but keeps zeroing its
//                                           own GPU-time counters in the ledger it maps. Prints
//                                           ready=1, then probes a 1 MiB allocation through the
//                                           shim every 50 ms (shim_alloc=RESULT on change) until
//                                           SECONDS pass; prints kernels=N and exits 0
//   shim_tenant churn LIMIT_MIB END_NS SEED KERNEL_US [shared]
//                                           until CLOCK_MONOTONIC END_NS, allocate and free
//                                           random multiples of 2 MiB (cuMemAlloc_v2) while a
//                                           second thread launches spin kernels on its own
//                                           stream; every allocation must succeed or fail with
//                                           CUDA_ERROR_OUT_OF_MEMORY where it would pass the
//                                           container's LIMIT_MIB (with `shared`, the container
//                                           has other processes: any OOM is taken as clean);
//                                           prints held_bytes, allocs, ooms, kernels,
//                                           longest_launch_ms and done=1, holds until stdin EOF,
//                                           frees everything and exits 0 (1 on any other error);
//                                           with `paths` (after `shared` or `alone`), each
//                                           allocation takes a random path of those charged
//                                           exactly: cuMemAlloc_v2, cuMemAllocPitch_v2,
//                                           cuMemAllocManaged or cuMemCreate (VMM)
#include <dlfcn.h>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "driver/cuda_api.h"
#include "ledger/ledger_layout.h"

namespace {

#define CHECK(call)                                                    \
  do {                                                                 \
    CUresult r_ = (call);                                              \
    if (r_ != CUDA_SUCCESS) {                                          \
      std::printf("error=%d\ncall=%s\n", static_cast<int>(r_), #call); \
      std::fflush(stdout);                                             \
      return 1;                                                        \
    }                                                                  \
  } while (0)

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void WaitForStdinEof() {
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
}

// This process's slot in the ledger the shim mapped (found through /proc/self/maps, as any
// process could), or nullptr.
tessera::ledger::ProcessCounters* OwnLedgerSlot() {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return nullptr;
  char line[512];
  const tessera::ledger::LedgerLayout* node = nullptr;  // mapped read-only
  tessera::ledger::ContainerSegment* own = nullptr;     // its container's, writable
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    // The node view is the daemon's memfd; its container's segment a file in /dev/shm.
    if (std::strstr(line, "/memfd:tessera-view:") == nullptr &&
        std::strstr(line, "/dev/shm/tessera-ledger") == nullptr) {
      continue;
    }
    const auto at = std::strtoull(line, nullptr, 16);
    if (std::strstr(line, "r--s") != nullptr &&
        reinterpret_cast<const tessera::ledger::LedgerLayout*>(at)->magic ==
            tessera::ledger::kLedgerMagic) {
      node = reinterpret_cast<const tessera::ledger::LedgerLayout*>(at);
    } else if (std::strstr(line, "rw-s") != nullptr &&
               reinterpret_cast<const tessera::ledger::ContainerSegment*>(at)->magic ==
                   tessera::ledger::kContainerMagic) {
      own = reinterpret_cast<tessera::ledger::ContainerSegment*>(at);
    }
  }
  std::fclose(maps);
  if (node == nullptr || own == nullptr) return nullptr;
  for (int p = 0; p < tessera::ledger::kMaxProcesses; ++p) {
    const auto& slot = node->processes[p];
    if (slot.state.load() == tessera::ledger::kLive && slot.host_pid.load() == getpid()) {
      return &own->processes[p];
    }
  }
  return nullptr;
}

size_t FreeBytes() {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  auto arg = [&](int i) -> uint64_t { return i < argc ? std::strtoull(argv[i], nullptr, 0) : 0; };
  const CUresult init = cuInit(0);
  if (init != CUDA_SUCCESS) {
    std::printf("init_error=%d\n", static_cast<int>(init));
    return 3;
  }
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));

  if (mode == "alloc-until-oom" || mode == "getproc") {
    using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
    AllocFn alloc = &cuMemAlloc_v2;
    uint64_t chunk = arg(2) << 20;
    if (mode == "getproc") {
      void* fn = nullptr;
      CUdriverProcAddressQueryResult st;
      CHECK(cuGetProcAddress_v2("cuMemAlloc", &fn, static_cast<int>(arg(2)), arg(3), &st));
      alloc = reinterpret_cast<AllocFn>(fn);
      void* launch = nullptr;
      CHECK(cuGetProcAddress_v2("cuLaunchKernel", &launch, static_cast<int>(arg(2)), arg(3), &st));
      std::printf("launch_is_ptsz=%d\n", launch == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"));
      std::printf("alloc_is_wrapper=%d\n", fn == reinterpret_cast<void*>(&cuMemAlloc_v2));
      chunk = arg(4) << 20;
    }
    uint64_t total = 0;
    CUresult failure = CUDA_SUCCESS;
    std::vector<CUdeviceptr> held;
    for (;;) {
      CUdeviceptr p = 0;
      failure = alloc(&p, chunk);
      if (failure != CUDA_SUCCESS) break;
      held.push_back(p);
      total += chunk;
    }
    size_t f = 0, t = 0;
    CHECK(cuMemGetInfo_v2(&f, &t));
    std::printf("allocated=%llu\nfailure=%d\ntotal=%zu\nfree=%zu\n",
                static_cast<unsigned long long>(total), static_cast<int>(failure), t, f);
    std::fflush(stdout);
    WaitForStdinEof();
    for (CUdeviceptr p : held) CHECK(cuMemFree_v2(p));
    return 0;
  }
  if (mode == "hold") {
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc_v2(&p, arg(2)));
    std::printf("ready=1\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "bypass") {
    CUdeviceptr p = 0;
    if (arg(2) != 0) CHECK(cuMemAlloc_v2(&p, arg(2)));
    const char* real = std::getenv("TESSERA_REAL_LIBCUDA");
    void* lib = real != nullptr ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
    auto direct = lib != nullptr ? reinterpret_cast<AllocFn>(dlsym(lib, "cuMemAlloc_v2")) : nullptr;
    if (direct == nullptr || direct == &cuMemAlloc_v2) {
      std::printf("error=no direct driver entry point\n");
      return 4;
    }
    CUdeviceptr hidden = 0;
    CHECK(direct(&hidden, arg(3)));
    std::printf("ready=1\n");
    std::fflush(stdout);
    int last = -1;
    for (;;) {
      CUdeviceptr probe = 0;
      const int r = static_cast<int>(cuMemAlloc_v2(&probe, 1 << 20));
      if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(probe));
      if (r != last) {
        std::printf("shim_alloc=%d\n", r);
        std::fflush(stdout);
        last = r;
      }
      pollfd in{0, POLLIN, 0};
      if (poll(&in, 1, 50) > 0) {
        char buf[64];
        const ssize_t n = read(0, buf, sizeof(buf));
        if (n <= 0) break;
        if (hidden != 0 &&
            std::string(buf, static_cast<size_t>(n)).find("free") != std::string::npos) {
          auto direct_free =
              reinterpret_cast<CUresult (*)(CUdeviceptr)>(dlsym(lib, "cuMemFree_v2"));
          CHECK(direct_free(hidden));
          hidden = 0;
          std::printf("freed=1\n");
          std::fflush(stdout);
        }
      }
    }
    return 0;
  }
  if (mode == "meminfo") {
    size_t f = 0, t = 0, total = 0;
    CHECK(cuMemGetInfo_v2(&f, &t));
    CHECK(cuDeviceTotalMem_v2(&total, 0));
    std::printf("free=%zu\ntotal=%zu\ndevice_total=%zu\n", f, t, total);
    return 0;
  }
  if (mode == "paths") {
    // Every allocation path once, through direct calls or (with VERSION FLAGS) through pointers
    // from cuGetProcAddress_v2, as the CUDA runtime resolves them.
    const uint64_t bytes = arg(2);
    const bool via_getproc = argc > 4;
    auto resolve = [&](const char* base, void* direct) -> void* {
      if (!via_getproc) return direct;
      void* fn = nullptr;
      CUdriverProcAddressQueryResult st;
      if (cuGetProcAddress_v2(base, &fn, static_cast<int>(arg(3)), arg(4), &st) != CUDA_SUCCESS ||
          fn == nullptr) {
        std::printf("unresolved=%s\n", base);
        std::exit(1);
      }
      return fn;
    };
#define API(base, exported)                            \
  auto base = reinterpret_cast<decltype(&::exported)>( \
      resolve(#base, reinterpret_cast<void*>(&::exported)))
    API(cuMemAlloc, cuMemAlloc_v2);
    API(cuMemFree, cuMemFree_v2);
    API(cuMemAllocPitch, cuMemAllocPitch_v2);
    API(cuMemAllocManaged, cuMemAllocManaged);
    API(cuStreamCreate, cuStreamCreate);
    API(cuStreamSynchronize, cuStreamSynchronize);
    API(cuMemAllocAsync, cuMemAllocAsync);
    API(cuMemFreeAsync, cuMemFreeAsync);
    API(cuDeviceGetMemPool, cuDeviceGetMemPool);
    API(cuMemPoolTrimTo, cuMemPoolTrimTo);
    API(cuMemPoolCreate, cuMemPoolCreate);
    API(cuMemPoolDestroy, cuMemPoolDestroy);
    API(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync);
    API(cuMemCreate, cuMemCreate);
    API(cuMemRelease, cuMemRelease);
    API(cuArrayCreate, cuArrayCreate_v2);
    API(cuArrayDestroy, cuArrayDestroy);
    API(cuMipmappedArrayCreate, cuMipmappedArrayCreate);
    API(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy);
    API(cuMemHostAlloc, cuMemHostAlloc);
    API(cuMemFreeHost, cuMemFreeHost);
#undef API
    std::printf("free_start=%zu\n", FreeBytes());
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc(&p, bytes));
    std::printf("free_after_alloc=%zu\n", FreeBytes());
    CHECK(cuMemFree(p));
    size_t pitch = 0;
    CHECK(cuMemAllocPitch(&p, &pitch, bytes / 1024, 1024, 4));
    std::printf("free_after_pitch=%zu\npitch=%zu\n", FreeBytes(), pitch);
    CHECK(cuMemFree(p));
    CHECK(cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL));
    std::printf("free_after_managed=%zu\n", FreeBytes());
    CHECK(cuMemFree(p));
    CUstream s = nullptr;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAllocAsync(&p, bytes, s));
    std::printf("free_after_async=%zu\n", FreeBytes());
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CUmemoryPool pool = nullptr;
    CHECK(cuDeviceGetMemPool(&pool, 0));
    CHECK(cuMemPoolTrimTo(pool, 0));
    std::printf("free_after_async_trim=%zu\n", FreeBytes());
    CHECK(cuMemAllocFromPoolAsync(&p, bytes, pool, s));
    std::printf("free_after_frompool=%zu\n", FreeBytes());
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolTrimTo(pool, 0));
    // A pool of our own, destroyed with nothing outstanding: its reservation is uncharged.
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemoryPool own = nullptr;
    CHECK(cuMemPoolCreate(&own, &props));
    CHECK(cuMemAllocFromPoolAsync(&p, bytes, own, s));
    std::printf("free_after_ownpool=%zu\n", FreeBytes());
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    std::printf("free_after_ownpool_sync=%zu\n", FreeBytes());
    CHECK(cuMemPoolDestroy(own));
    std::printf("free_after_ownpool_destroy=%zu\n", FreeBytes());
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemGenericAllocationHandle h = 0;
    CHECK(cuMemCreate(&h, (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20), &prop, 0));
    std::printf("free_after_vmm=%zu\n", FreeBytes());
    CHECK(cuMemRelease(h));
    CUarray a = nullptr;
    CUDA_ARRAY_DESCRIPTOR desc{bytes / 4 / 1024, 1024, CU_AD_FORMAT_FLOAT, 1};
    CHECK(cuArrayCreate(&a, &desc));
    std::printf("free_after_array=%zu\n", FreeBytes());
    CHECK(cuArrayDestroy(a));
    // Two levels: the full size and a quarter of it, together rounded to 2 MiB.
    CUmipmappedArray mip = nullptr;
    CUDA_ARRAY3D_DESCRIPTOR d3{bytes / 4 / 1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CHECK(cuMipmappedArrayCreate(&mip, &d3, 2));
    std::printf("free_after_mipmapped=%zu\n", FreeBytes());
    CHECK(cuMipmappedArrayDestroy(mip));
    void* host = nullptr;
    CHECK(cuMemHostAlloc(&host, bytes, 0));
    std::printf("free_after_host=%zu\n", FreeBytes());
    CHECK(cuMemFreeHost(host));
    std::printf("free_end=%zu\n", FreeBytes());
    // A free of a pointer the shim never saw is still forwarded (and refused by the driver).
    std::printf("foreign_free=%d\n", static_cast<int>(cuMemFree(0xdead0000)));
    return 0;
  }
  if (mode == "dlopen") {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* sym = h != nullptr ? dlsym(h, "cuMemAlloc_v2") : nullptr;
    std::printf("same_object=%d\n", sym == reinterpret_cast<void*>(&cuMemAlloc_v2));
    void* fresh = dlopen("libcuda.so.1", RTLD_NOW);
    std::printf("dlopen_same=%d\n", fresh == h && h != nullptr);
    return 0;
  }
  if (mode == "spin") {
    const uint64_t kernel_ns = arg(2) * 1000;
    const uint64_t start = arg(4), end = start + arg(3) * 1000000000ull;
    const std::string how = argc > 5 ? argv[5] : "legacy";
    CUmodule mod = nullptr;
    CUfunction spin = nullptr;
    CHECK(cuModuleLoadData(&mod, "simgpu"));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    uint64_t ns_param = kernel_ns;
    void* params[] = {&ns_param};
    CUstream stream = nullptr;
    CHECK(cuStreamCreate(&stream, 0));
    CUgraphExec exec = nullptr;
    if (how == "capturing") {
      // A capture begun on a stream of its own and never ended, while the kernels go to another
      // stream: launches into the capture run nothing, the others must stay gated.
      CUstream idle = nullptr;
      CHECK(cuStreamCreate(&idle, 0));
      CHECK(cuStreamBeginCapture_v2(idle, CU_STREAM_CAPTURE_MODE_RELAXED));
    }
    if (how == "graph") {
      // One graph of 4 kernels, captured once and launched repeatedly.
      CUgraph graph = nullptr;
      CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      for (int i = 0; i < 4; ++i) {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
      }
      CHECK(cuStreamEndCapture(stream, &graph));
      CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    }
    while (NowNs() < start) {
      timespec ts{0, 200000};
      nanosleep(&ts, nullptr);
    }
    uint64_t kernels = 0, longest = 0;
    // How late this process reached the common start (slow start-up on a loaded machine): a share
    // measured from the start counts that time against it.
    std::printf("ready=1\nlate_ms=%.3f\n", static_cast<double>(NowNs() - start) / 1e6);
    std::fflush(stdout);
    for (uint64_t now = NowNs(); now < end; now = NowNs()) {
      const uint64_t before = now;
      if (how == "ptsz") {
        CHECK(cuLaunchKernel_ptsz(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
      } else if (how == "stream" || how == "capturing") {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
      } else if (how == "ex") {
        CUlaunchConfig config{};
        config.gridDimX = config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = config.blockDimY = config.blockDimZ = 1;
        config.hStream = stream;
        CHECK(cuLaunchKernelEx(&config, spin, params, nullptr));
      } else if (how == "graph") {
        CHECK(cuGraphLaunch(exec, stream));
        kernels += 3;
      } else if (how == "sync" || how == "sporadic") {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
        CHECK(cuCtxSynchronize());
        if (how == "sporadic") {
          const uint64_t next = before + 20'000'000;
          const uint64_t wait = next > NowNs() ? next - NowNs() : 0;
          timespec ts{static_cast<time_t>(wait / 1'000'000'000),
                      static_cast<long>(wait % 1'000'000'000)};
          nanosleep(&ts, nullptr);
        }
      } else {
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
      }
      ++kernels;
      longest = std::max(longest, NowNs() - before);
    }
    CHECK(cuCtxSynchronize());
    std::printf("kernels=%llu\nlongest_launch_ms=%.3f\n", static_cast<unsigned long long>(kernels),
                static_cast<double>(longest) / 1e6);
    return 0;
  }
  if (mode == "cheat") {
    const std::string how = argc > 2 ? argv[2] : "";
    uint64_t kernel_ns = arg(3) * 1000;
    const uint64_t end = NowNs() + arg(4) * 1000000000ull;
    CUmodule mod = nullptr;
    CUfunction spin = nullptr;
    CHECK(cuModuleLoadData(&mod, "simgpu"));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void**, void**);
    using SyncFn = CUresult (*)();
    LaunchFn launch = &cuLaunchKernel;
    SyncFn sync = &cuCtxSynchronize;
    tessera::ledger::ProcessCounters* slot = nullptr;
    if (how == "around") {
      const char* real = std::getenv("TESSERA_REAL_LIBCUDA");
      void* lib = real != nullptr ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : nullptr;
      launch = lib != nullptr ? reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel")) : nullptr;
      sync = lib != nullptr ? reinterpret_cast<SyncFn>(dlsym(lib, "cuCtxSynchronize")) : nullptr;
      if (launch == nullptr || sync == nullptr || launch == &cuLaunchKernel) {
        std::printf("error=no direct driver entry point\n");
        return 4;
      }
    } else if (how == "lie") {
      slot = OwnLedgerSlot();
      if (slot == nullptr) {
        std::printf("error=no ledger slot of this process in /proc/self/maps\n");
        return 4;
      }
    } else {
      std::printf("error=cheat HOW must be around or lie\n");
      return 2;
    }
    std::atomic<uint64_t> kernels{0};
    std::atomic<int> failure{0};
    std::thread launcher([&] {
      void* params[] = {&kernel_ns};
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) failure.store(-1);
      while (NowNs() < end && failure.load() == 0) {
        CUresult r = launch(spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
        if (r == CUDA_SUCCESS) r = sync();
        if (r != CUDA_SUCCESS) failure.store(static_cast<int>(r));
        kernels.fetch_add(1);
        if (slot != nullptr) {
          // The lie: it never ran (no time, and no intervals: the ring starts over, empty).
          for (auto& ns : slot->gpu_ns) ns.store(0);
          slot->interval_head.store(0);
          for (auto& interval : slot->intervals) interval.seq.store(0);
        }
      }
    });
    std::printf("ready=1\n");
    std::fflush(stdout);
    int last = -1;
    while (NowNs() < end) {
      CUdeviceptr probe = 0;
      const int r = static_cast<int>(cuMemAlloc_v2(&probe, 1 << 20));
      if (r == CUDA_SUCCESS) cuMemFree_v2(probe);
      if (r != last) {
        std::printf("shim_alloc=%d\n", r);
        std::fflush(stdout);
        last = r;
      }
      timespec ts{0, 50'000'000};
      nanosleep(&ts, nullptr);
    }
    launcher.join();
    std::printf("kernels=%llu\nlaunch_error=%d\n", static_cast<unsigned long long>(kernels.load()),
                failure.load());
    return failure.load() == 0 ? 0 : 1;
  }
  if (mode == "churn") {
    constexpr uint64_t kUnit = 2ull << 20;  // the driver's granularity: charged exactly
    const uint64_t limit = arg(2) << 20, end = arg(3), kernel_ns = arg(5) * 1000;
    const bool shared = argc > 6 && std::string(argv[6]) == "shared";
    const bool every_path = argc > 7 && std::string(argv[7]) == "paths";
    std::mt19937_64 rng(arg(4));
    std::atomic<bool> stop{false};
    std::atomic<int> launch_error{0};
    std::atomic<uint64_t> kernels{0}, longest{0}, longest_start{0};
    std::thread launcher([&] {
      // Launches from a thread of its own, so the gate's waits never hold up the allocations.
      auto fail = [&](CUresult r) { launch_error.store(static_cast<int>(r)); };
      CUmodule mod = nullptr;
      CUfunction spin = nullptr;
      CUstream stream = nullptr;
      CUresult r = cuCtxSetCurrent(ctx);
      if (r == CUDA_SUCCESS) r = cuModuleLoadData(&mod, "simgpu");
      if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&spin, mod, "spin");
      if (r == CUDA_SUCCESS) r = cuStreamCreate(&stream, 0);
      if (r != CUDA_SUCCESS) return fail(r);
      uint64_t ns_param = kernel_ns;
      void* params[] = {&ns_param};
      while (!stop.load()) {
        const uint64_t before = NowNs();
        r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
        if (r != CUDA_SUCCESS) return fail(r);
        const uint64_t took = NowNs() - before;
        if (took > longest.load()) {
          longest.store(took);
          longest_start.store(before);
        }
        if (took > 250'000'000) {  // for the soak's diagnosis: when the slowest launches began
          std::printf("slow_launch_ms=%.1f\nslow_launch_start_ns=%llu\n",
                      static_cast<double>(took) / 1e6, static_cast<unsigned long long>(before));
          std::fflush(stdout);
        }
        kernels.fetch_add(1);
      }
      r = cuStreamSynchronize(stream);
      if (r != CUDA_SUCCESS) fail(r);
    });
    enum class Path { kAlloc, kPitch, kManaged, kCreate };
    struct Block {
      CUdeviceptr ptr;
      uint64_t bytes;
      Path path;
      CUmemGenericAllocationHandle handle;
    };
    // One allocation through `path`; every one of these is charged exactly `bytes` (a multiple of
    // 2 MiB; the pitch is 1 MiB wide, a multiple of any pitch alignment).
    auto allocate = [](Path path, uint64_t bytes, Block* b) {
      *b = {0, bytes, path, 0};
      switch (path) {
        case Path::kAlloc:
          return cuMemAlloc_v2(&b->ptr, bytes);
        case Path::kPitch: {
          size_t pitch = 0;
          return cuMemAllocPitch_v2(&b->ptr, &pitch, 1 << 20, bytes >> 20, 4);
        }
        case Path::kManaged:
          return cuMemAllocManaged(&b->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
        case Path::kCreate: {
          CUmemAllocationProp prop{};
          prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
          prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
          prop.location.id = 0;
          return cuMemCreate(&b->handle, bytes, &prop, 0);
        }
      }
      return CUDA_ERROR_INVALID_VALUE;
    };
    auto release = [](const Block& b) {
      return b.path == Path::kCreate ? cuMemRelease(b.handle) : cuMemFree_v2(b.ptr);
    };
    std::vector<Block> held;
    uint64_t held_bytes = 0, allocs = 0, ooms = 0;
    CUresult bad = CUDA_SUCCESS;
    while (NowNs() < end && bad == CUDA_SUCCESS) {
      // Mostly allocations (so the limit is reached), sizes up to a quarter of the limit.
      if (held.empty() || rng() % 3 != 0) {
        const uint64_t bytes = (1 + rng() % std::max<uint64_t>(limit / kUnit / 4, 1)) * kUnit;
        const Path path = every_path ? static_cast<Path>(rng() % 4) : Path::kAlloc;
        Block b{};
        const CUresult r = allocate(path, bytes, &b);
        if (r == CUDA_SUCCESS) {
          held.push_back(b);
          held_bytes += bytes;
          ++allocs;
        } else if (r == CUDA_ERROR_OUT_OF_MEMORY && (shared || held_bytes + bytes > limit)) {
          ++ooms;
        } else {
          std::printf("bad_alloc=%d\nbad_alloc_bytes=%llu\nheld_at_bad=%llu\n", static_cast<int>(r),
                      static_cast<unsigned long long>(bytes),
                      static_cast<unsigned long long>(held_bytes));
          bad = r == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : r;
        }
      } else {
        const size_t i = rng() % held.size();
        const CUresult r = release(held[i]);
        if (r != CUDA_SUCCESS) {
          std::printf("bad_free=%d\n", static_cast<int>(r));
          bad = r;
        }
        held_bytes -= held[i].bytes;
        held[i] = held.back();
        held.pop_back();
      }
      timespec ts{0, 500000};  // a few hundred operations a second: churn, not a CPU hog
      nanosleep(&ts, nullptr);
    }
    stop.store(true);
    launcher.join();
    std::printf(
        "held_bytes=%llu\nallocs=%llu\nooms=%llu\nkernels=%llu\n"
        "longest_launch_ms=%.3f\nlongest_launch_start_ns=%llu\nlaunch_error=%d\ndone=1\n",
        static_cast<unsigned long long>(held_bytes), static_cast<unsigned long long>(allocs),
        static_cast<unsigned long long>(ooms), static_cast<unsigned long long>(kernels.load()),
        static_cast<double>(longest.load()) / 1e6,
        static_cast<unsigned long long>(longest_start.load()), launch_error.load());
    std::fflush(stdout);
    WaitForStdinEof();
    for (const Block& b : held) CHECK(release(b));
    return bad == CUDA_SUCCESS && launch_error.load() == 0 ? 0 : 1;
  }
  if (mode == "fork-hold") {
    const pid_t child = fork();
    if (child == 0) {
      // CUDA is not usable across fork: the child initialises its own driver state.
      CHECK(cuInit(0));
      CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
      CHECK(cuCtxSetCurrent(ctx));
    }
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc_v2(&p, arg(2));
    std::printf("%s_alloc=%d\n", child == 0 ? "child" : "parent", static_cast<int>(r));
    std::fflush(stdout);
    if (child == 0) {
      WaitForStdinEof();
      _exit(0);
    }
    WaitForStdinEof();
    int status = 0;
    waitpid(child, &status, 0);
    return 0;
  }
  return 2;
}
