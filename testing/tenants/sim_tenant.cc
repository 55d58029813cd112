// sim_tenant: a test program that plays one tenant process against a driver library opened by
// path (simgpu in the tests), so multi-process tests run real processes through the real ABI.
// It prints `key=value` lines on stdout for the test to parse and exits 0 on success, 1 on a
// CUDA failure it did not expect, 2 on bad usage. It is test tooling: no product code uses it.
//
//   sim_tenant LIB alloc-until-oom CHUNK_MIB     allocate until failure, report, hold until stdin
//   EOF sim_tenant LIB hold BYTES                    allocate BYTES, print ready, sleep until
//   killed sim_tenant LIB spin-loop KERNEL_US WALL_MS [START_NS]  launch+sync spin kernels for
//   WALL_MS
//                                                of wall time, from CLOCK_MONOTONIC START_NS if
//                                                given
//   sim_tenant LIB elapsed SPIN_US               event elapsed time around one spin kernel
//   sim_tenant LIB fill-copy BYTES VALUE         fill kernel then cuMemcpyDtoH, verify every byte
//   sim_tenant LIB meminfo                       print cuMemGetInfo free and total
//   sim_tenant LIB queue KERNEL_US COUNT START_NS  from CLOCK_MONOTONIC START_NS, queue COUNT spin
//                                                kernels without waiting, then synchronise; prints
//                                                first_ns (before the first launch), end_ns
//                                                (after the synchronisation) and late_ms
//   sim_tenant LIB devices                       print count= and, per ordinal i, name_i= and
//                                                total_i= (before any context exists)
//   sim_tenant LIB hello SOCKET CONTAINER        send "HELLO version=1 container=CONTAINER" on
//                                                SOCKET as a raw client (no shim) and print
//                                                reply=THE REPLY LINE
//   sim_tenant LIB processes                     NVML's compute processes on device 0 as this
//                                                process sees them: self= (getpid()), then
//                                                processes=N, pid_i=, mem_i=
//   sim_tenant LIB limiter LAUNCHES              sizes a launch limiter from device 0's
//                                                attributes as a peer interposer does (tokens =
//                                                threads per SM x SMs, refilled every 10 ms, a
//                                                launch takes its grid's blocks) and launches
//                                                LAUNCHES kernels of 1024 blocks x 256 threads
//                                                through it: prints sms=, threads_per_sm=,
//                                                capacity=, cc=, then launched=N, or stalled=1
//                                                (exit 1) when a launch waited over 5 s
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driver/cuda_driver.h"
#include "driver/library.h"
#include "driver/nvml_api.h"

namespace {

using tessera::CudaDriver;
uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

const CudaDriver* g_cu = nullptr;

#define CHECK_CU(call)                                                       \
  do {                                                                       \
    CUresult r_ = (call);                                                    \
    if (r_ != CUDA_SUCCESS) {                                                \
      std::printf("error=%s call=%s\n", g_cu->ErrorText(r_).c_str(), #call); \
      std::fflush(stdout);                                                   \
      return 1;                                                              \
    }                                                                        \
  } while (0)

int Usage() {
  std::fprintf(stderr, "usage: sim_tenant LIB MODE ARGS... (see the source)\n");
  return 2;
}

void WaitForStdinEof() {
  char buf[64];
  while (read(0, buf, sizeof(buf)) > 0) {
  }
}

CUresult LaunchSpin(CUfunction spin, uint64_t ns, CUstream s) {
  void* params[] = {&ns};
  return g_cu->cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  auto lib = tessera::DynamicLibrary::Open(argv[1]);
  if (!lib.ok()) {
    std::fprintf(stderr, "%s\n", lib.error().c_str());
    return 2;
  }
  // The driver stays loaded until exit (a driver is never unloaded in a running process), so
  // what cuInit allocated stays reachable.
  static tessera::DynamicLibrary* library = new tessera::DynamicLibrary(std::move(*lib));
  auto driver = CudaDriver::Load(*library);
  if (!driver.ok()) {
    std::fprintf(stderr, "%s\n", driver.error().c_str());
    return 2;
  }
  const CudaDriver& cu = *driver;
  g_cu = &cu;
  const std::string mode = argv[2];
  auto arg = [&](int i) -> uint64_t { return i < argc ? std::strtoull(argv[i], nullptr, 10) : 0; };

  if (mode == "hello" && argc > 4) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", argv[3]);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::printf("reply=connect: %s\n", std::strerror(errno));
      return 0;
    }
    const std::string hello = std::string("HELLO version=1 container=") + argv[4] + "\n";
    if (write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) return 1;
    std::string line;
    char c = 0;
    while (line.size() < 4096 && read(fd, &c, 1) == 1 && c != '\n') line += c;
    std::printf("reply=%s\n", line.c_str());
    close(fd);
    return 0;
  }
  if (mode == "processes") {
    auto init = library->Resolve<decltype(&nvmlInit_v2)>("nvmlInit_v2");
    auto handle =
        library->Resolve<decltype(&nvmlDeviceGetHandleByIndex_v2)>("nvmlDeviceGetHandleByIndex_v2");
    auto list = library->Resolve<decltype(&nvmlDeviceGetComputeRunningProcesses_v3)>(
        "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init.ok() || !handle.ok() || !list.ok()) return Usage();
    nvmlDevice_t d = nullptr;
    nvmlProcessInfo_t procs[64];
    unsigned int n = 64;
    if ((*init)() != NVML_SUCCESS || (*handle)(0, &d) != NVML_SUCCESS ||
        (*list)(d, &n, procs) != NVML_SUCCESS) {
      std::printf("error=nvml\n");
      return 1;
    }
    std::printf("self=%d\nprocesses=%u\n", static_cast<int>(getpid()), n);
    for (unsigned int i = 0; i < n; ++i) {
      std::printf("pid_%u=%u\nmem_%u=%llu\n", i, procs[i].pid, i, procs[i].usedGpuMemory);
    }
    return 0;
  }
  CHECK_CU(cu.cuInit(0));
  if (mode == "devices") {
    int count = 0;
    CHECK_CU(cu.cuDeviceGetCount(&count));
    std::printf("count=%d\n", count);
    for (int i = 0; i < count; ++i) {
      char name[128] = {};
      size_t total = 0;
      CHECK_CU(cu.cuDeviceGetName(name, sizeof(name), i));
      CHECK_CU(cu.cuDeviceTotalMem_v2(&total, i));
      std::printf("name_%d=%s\ntotal_%d=%zu\n", i, name, i, total);
    }
    return 0;
  }
  CUdevice dev = 0;
  CHECK_CU(cu.cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CHECK_CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cu.cuCtxSetCurrent(ctx));
  CUmodule mod = nullptr;
  CHECK_CU(cu.cuModuleLoadData(&mod, "simgpu"));
  CUfunction spin = nullptr, fill = nullptr;
  CHECK_CU(cu.cuModuleGetFunction(&spin, mod, "spin"));
  CHECK_CU(cu.cuModuleGetFunction(&fill, mod, "fill"));

  if (mode == "limiter") {
    auto attribute = library->Resolve<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
    if (!attribute.ok()) return Usage();
    int sms = 0, threads_per_sm = 0, major = 0, minor = 0;
    CHECK_CU((*attribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK_CU(
        (*attribute)(&threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev));
    CHECK_CU((*attribute)(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK_CU((*attribute)(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    const int64_t capacity = static_cast<int64_t>(sms) * threads_per_sm;
    std::printf("sms=%d\nthreads_per_sm=%d\ncapacity=%lld\ncc=%d.%d\n", sms, threads_per_sm,
                static_cast<long long>(capacity), major, minor);
    std::fflush(stdout);
    constexpr unsigned kGrid = 1024, kBlock = 256;
    constexpr uint64_t kRefillNs = 10'000'000, kPatienceNs = 5'000'000'000;
    int64_t tokens = capacity;
    uint64_t refilled = MonotonicNs();
    uint64_t launched = 0;
    for (uint64_t i = 0; i < arg(3); ++i) {
      const uint64_t asked = MonotonicNs();
      while (tokens < static_cast<int64_t>(kGrid)) {  // wait for the next refill
        if (MonotonicNs() - asked > kPatienceNs) {
          std::printf("launched=%llu\nstalled=1\n", static_cast<unsigned long long>(launched));
          return 1;
        }
        timespec ts{0, 1'000'000};
        nanosleep(&ts, nullptr);
        if (MonotonicNs() - refilled >= kRefillNs) {
          tokens = capacity;
          refilled = MonotonicNs();
        }
      }
      tokens -= kGrid;
      uint64_t ns = 1000;
      void* params[] = {&ns};
      CHECK_CU(cu.cuLaunchKernel(spin, kGrid, 1, 1, kBlock, 1, 1, 0, nullptr, params, nullptr));
      ++launched;
    }
    CHECK_CU(cu.cuCtxSynchronize());
    std::printf("launched=%llu\n", static_cast<unsigned long long>(launched));
    return 0;
  }
  if (mode == "alloc-until-oom") {
    const uint64_t chunk = arg(3) << 20;
    uint64_t total = 0;
    CUresult failure = CUDA_SUCCESS;
    std::vector<CUdeviceptr> held;
    for (;;) {
      CUdeviceptr p = 0;
      failure = cu.cuMemAlloc_v2(&p, chunk);
      if (failure != CUDA_SUCCESS) break;
      held.push_back(p);
      total += chunk;
    }
    std::printf("allocated=%llu\nfailure=%d\n", static_cast<unsigned long long>(total),
                static_cast<int>(failure));
    std::fflush(stdout);
    WaitForStdinEof();
    for (CUdeviceptr p : held) CHECK_CU(cu.cuMemFree_v2(p));
    return 0;
  }
  if (mode == "hold") {
    CUdeviceptr p = 0;
    CHECK_CU(cu.cuMemAlloc_v2(&p, arg(3)));
    std::printf("ready=1\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  if (mode == "spin-loop") {
    const uint64_t kernel_ns = arg(3) * 1000;
    const uint64_t wall_ns = arg(4) * 1'000'000;
    if (arg(5) != 0 && arg(5) > MonotonicNs()) {
      const uint64_t at = arg(5);
      timespec ts{static_cast<time_t>(at / 1'000'000'000ull),
                  static_cast<long>(at % 1'000'000'000ull)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
    const uint64_t start = MonotonicNs();
    uint64_t kernels = 0;
    while (MonotonicNs() - start < wall_ns) {
      CHECK_CU(LaunchSpin(spin, kernel_ns, nullptr));
      CHECK_CU(cu.cuCtxSynchronize());
      ++kernels;
    }
    const uint64_t end = MonotonicNs();
    std::printf("kernels=%llu\ndevice_ns=%llu\nstart_ns=%llu\nend_ns=%llu\n",
                static_cast<unsigned long long>(kernels),
                static_cast<unsigned long long>(kernels * kernel_ns),
                static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
    return 0;
  }
  if (mode == "queue") {
    const uint64_t start = arg(5);
    while (MonotonicNs() < start) {
      timespec ts{0, 200000};
      nanosleep(&ts, nullptr);
    }
    const uint64_t first = MonotonicNs();
    for (uint64_t i = 0; i < arg(4); ++i) CHECK_CU(LaunchSpin(spin, arg(3) * 1000, nullptr));
    CHECK_CU(cu.cuCtxSynchronize());
    const uint64_t end = MonotonicNs();
    std::printf("first_ns=%llu\nend_ns=%llu\nlate_ms=%.3f\n",
                static_cast<unsigned long long>(first), static_cast<unsigned long long>(end),
                static_cast<double>(first - start) / 1e6);
    return 0;
  }
  if (mode == "elapsed") {
    CUstream s = nullptr;
    CHECK_CU(cu.cuStreamCreate(&s, 0));
    CUevent a = nullptr, b = nullptr;
    CHECK_CU(cu.cuEventCreate(&a, 0));
    CHECK_CU(cu.cuEventCreate(&b, 0));
    CHECK_CU(cu.cuEventRecord(a, s));
    CHECK_CU(LaunchSpin(spin, arg(3) * 1000, s));
    CHECK_CU(cu.cuEventRecord(b, s));
    const uint64_t waited_from = MonotonicNs();
    CHECK_CU(cu.cuEventSynchronize(b));
    const uint64_t waited_ns = MonotonicNs() - waited_from;
    float ms = 0;
    CHECK_CU(cu.cuEventElapsedTime(&ms, a, b));
    std::printf("elapsed_ms=%.4f\nwaited_ms=%.4f\n", static_cast<double>(ms),
                static_cast<double>(waited_ns) / 1e6);
    return 0;
  }
  if (mode == "fill-copy") {
    const uint64_t bytes = arg(3);
    uint32_t value = static_cast<uint32_t>(arg(4));
    CUdeviceptr p = 0;
    CHECK_CU(cu.cuMemAlloc_v2(&p, bytes));
    size_t n = bytes;
    void* params[] = {&p, &n, &value};
    CHECK_CU(cu.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    std::vector<unsigned char> host(bytes, 0);
    CHECK_CU(cu.cuMemcpyDtoH_v2(host.data(), p, bytes));
    size_t wrong = 0;
    for (unsigned char c : host) wrong += c != (value & 0xff);
    std::printf("wrong_bytes=%zu\n", wrong);
    CHECK_CU(cu.cuMemFree_v2(p));
    return wrong == 0 ? 0 : 1;
  }
  if (mode == "meminfo") {
    size_t free_bytes = 0, total = 0;
    CHECK_CU(cu.cuMemGetInfo_v2(&free_bytes, &total));
    std::printf("free=%zu\ntotal=%zu\n", free_bytes, total);
    return 0;
  }
  return Usage();
}
