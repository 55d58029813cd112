// simgpu's MIG mode: the NVML calls that list profiles and placements, create and destroy GPU and
// compute instances and hand out MIG device handles (called in this process through the built
// library, as `tessera mig apply` and tesserad do), and what CUDA in another process sees when
// given a MIG- UUID: one device of the instance's memory, with a device clock of its own.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "driver/nvml_api.h"
#include "mig/planner.h"
#include "process/child_process.h"
#include "simgpu/test_sim_library.h"

namespace {

using namespace std::chrono_literals;
using tessera::process::BuildDir;
using tessera::process::ChildProcess;
using tessera::process::UniqueName;

constexpr uint64_t kGiB = 1ull << 30;
// GPU 0: an H100-80GB cut into slices of 1 GiB (8 GiB in all, so tests stay light); GPU 1 is
// not MIG-capable.
constexpr const char* kGpus = "SimH:8GiB:132:mig=H100-80GB,Plain:4GiB";

// The library with its own simulated machine, opened once for the whole program.
struct Sim {
  static tessera::sim::testing::SimLibrary& Get() {
    return tessera::sim::testing::SimLibrary::Get("mig", kGpus);
  }
};

#define NVML(name) (Sim::Get().Fn_<decltype(&::name)>(#name))

const tessera::mig::GpuModel& H100() { return *tessera::mig::FindGpuModel("H100-80GB").value(); }
unsigned int ProfileId(std::string_view name) {
  return tessera::mig::FindProfile(H100(), name, "p").value()->id;
}

class SimMigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(NVML(nvmlInit_v2)(), NVML_SUCCESS);
    ASSERT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(0, &gpu_), NVML_SUCCESS);
    ASSERT_EQ(NVML(nvmlDeviceGetHandleByIndex_v2)(1, &plain_), NVML_SUCCESS);
    DestroyAll();
  }
  void TearDown() override {
    DestroyAll();
    NVML(nvmlShutdown)();
  }

  // Destroys every instance of GPU 0, compute instances first.
  void DestroyAll() {
    for (const tessera::mig::MigProfile& p : H100().Profiles()) {
      nvmlGpuInstance_t gis[8];
      unsigned int n = 0;
      ASSERT_EQ(NVML(nvmlDeviceGetGpuInstances)(gpu_, p.id, gis, &n), NVML_SUCCESS);
      for (unsigned int i = 0; i < n; ++i) {
        nvmlComputeInstance_t cis[8];
        unsigned int m = 0;
        const int ci_profile = tessera::mig::NvmlComputeInstanceProfileFor(p.compute_slices);
        ASSERT_EQ(NVML(nvmlGpuInstanceGetComputeInstances)(gis[i], ci_profile, cis, &m),
                  NVML_SUCCESS);
        for (unsigned int j = 0; j < m; ++j) {
          ASSERT_EQ(NVML(nvmlComputeInstanceDestroy)(cis[j]), NVML_SUCCESS);
        }
        ASSERT_EQ(NVML(nvmlGpuInstanceDestroy)(gis[i]), NVML_SUCCESS);
      }
    }
  }

  // Creates a GPU instance of `profile` at `start` and its compute instance; returns the MIG
  // device's UUID.
  std::string CreateMigDevice(std::string_view profile, unsigned int start) {
    const tessera::mig::MigProfile& p = *tessera::mig::FindProfile(H100(), profile, "p").value();
    nvmlGpuInstancePlacement_t placement{start, static_cast<unsigned int>(p.memory_slices)};
    nvmlGpuInstance_t gi = nullptr;
    EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu_, p.id, &placement, &gi),
              NVML_SUCCESS);
    nvmlComputeInstance_t ci = nullptr;
    EXPECT_EQ(NVML(nvmlGpuInstanceCreateComputeInstance)(
                  gi, tessera::mig::NvmlComputeInstanceProfileFor(p.compute_slices), &ci),
              NVML_SUCCESS);
    nvmlComputeInstanceInfo_t info{};
    EXPECT_EQ(NVML(nvmlComputeInstanceGetInfo_v2)(ci, &info), NVML_SUCCESS);
    // The MIG device whose GPU instance this is.
    for (unsigned int i = 0; i < 7; ++i) {
      nvmlDevice_t mig = nullptr;
      if (NVML(nvmlDeviceGetMigDeviceHandleByIndex)(gpu_, i, &mig) != NVML_SUCCESS) break;
      unsigned int gi_id = 0;
      nvmlGpuInstanceInfo_t gi_info{};
      EXPECT_EQ(NVML(nvmlGpuInstanceGetInfo)(gi, &gi_info), NVML_SUCCESS);
      EXPECT_EQ(NVML(nvmlDeviceGetGpuInstanceId)(mig, &gi_id), NVML_SUCCESS);
      if (gi_id != gi_info.id) continue;
      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      EXPECT_EQ(NVML(nvmlDeviceGetUUID)(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
      return uuid;
    }
    ADD_FAILURE() << "no MIG device for the new instance";
    return "";
  }

  // A sim_tenant process on this test's simulated machine.
  std::unique_ptr<ChildProcess> Tenant(const std::vector<std::string>& args,
                                       const std::string& visible) {
    std::vector<std::string> argv = {BuildDir() + "/tests/sim_tenant",
                                     BuildDir() + "/lib/libtessera-simgpu.so"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"TESSERA_SIM_STATE=" + Sim::Get().state(),
                                    std::string("TESSERA_SIM_GPUS=") + kGpus};
    if (!visible.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
    auto child = std::make_unique<ChildProcess>(argv, env);
    EXPECT_TRUE(child->started());
    return child;
  }

  nvmlDevice_t gpu_ = nullptr;
  nvmlDevice_t plain_ = nullptr;
};

TEST_F(SimMigTest, ModeAndProfilesComeFromTheModel) {
  unsigned int current = 9, pending = 9;
  ASSERT_EQ(NVML(nvmlDeviceGetMigMode)(gpu_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned int>(NVML_DEVICE_MIG_ENABLE));
  EXPECT_EQ(NVML(nvmlDeviceGetMigMode)(plain_, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
  for (const tessera::mig::MigProfile& p : H100().Profiles()) {
    nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceProfileInfo)(gpu_, p.nvml_profile, &info), NVML_SUCCESS)
        << p.name;
    EXPECT_EQ(info.id, p.id) << p.name;
    EXPECT_EQ(info.sliceCount, static_cast<unsigned int>(p.compute_slices)) << p.name;
    EXPECT_EQ(info.instanceCount, static_cast<unsigned int>(p.published_max)) << p.name;
    EXPECT_EQ(info.memorySizeMB, 1024ull * static_cast<unsigned>(p.memory_slices)) << p.name;
    nvmlGpuInstancePlacement_t placements[8];
    unsigned int n = 8;
    ASSERT_EQ(NVML(nvmlDeviceGetGpuInstancePossiblePlacements_v2)(gpu_, info.id, placements, &n),
              NVML_SUCCESS);
    std::string starts = "{";
    for (unsigned int i = 0; i < n; ++i) {
      EXPECT_EQ(placements[i].size, static_cast<unsigned int>(p.memory_slices));
      starts += (i ? "," : "") + std::to_string(placements[i].start);
    }
    EXPECT_EQ(starts + "}", tessera::mig::StartSlots(p)) << p.name;
  }
  nvmlGpuInstanceProfileInfo_t info{};
  EXPECT_EQ(NVML(nvmlDeviceGetGpuInstanceProfileInfo)(gpu_, 0x6 /* 6_SLICE */, &info),
            NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(SimMigTest, InstancesObeyThePlacementRules) {
  nvmlGpuInstancePlacement_t at4{4, 4};
  nvmlGpuInstance_t a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu_, ProfileId("3g.40gb"), &at4, &a),
            NVML_SUCCESS);
  // Without a placement the lowest free start is taken; a third 3g has no room.
  ASSERT_EQ(NVML(nvmlDeviceCreateGpuInstance)(gpu_, ProfileId("3g.40gb"), &b), NVML_SUCCESS);
  nvmlGpuInstanceInfo_t info{};
  ASSERT_EQ(NVML(nvmlGpuInstanceGetInfo)(b, &info), NVML_SUCCESS);
  EXPECT_EQ(info.placement.start, 0u);
  EXPECT_EQ(info.device, gpu_);
  EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstance)(gpu_, ProfileId("3g.40gb"), &c),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  unsigned int remaining = 9;
  ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceRemainingCapacity)(gpu_, ProfileId("1g.10gb"), &remaining),
            NVML_SUCCESS);
  EXPECT_EQ(remaining, 0u);
  // A start the profile does not allow, and a size that is not the profile's.
  ASSERT_EQ(NVML(nvmlGpuInstanceDestroy)(a), NVML_SUCCESS);
  nvmlGpuInstancePlacement_t at2{2, 4}, at4_size2{4, 2};
  EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu_, ProfileId("3g.40gb"), &at2, &c),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      NVML(nvmlDeviceCreateGpuInstanceWithPlacement)(gpu_, ProfileId("3g.40gb"), &at4_size2, &c),
      NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceRemainingCapacity)(gpu_, ProfileId("1g.10gb"), &remaining),
            NVML_SUCCESS);
  EXPECT_EQ(remaining, 3u);  // slices 4, 5, 6 (a 1g may not start at 7)
  // Only one instance with media extensions.
  nvmlGpuInstance_t me1 = nullptr, me2 = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceCreateGpuInstance)(gpu_, ProfileId("1g.10gb+me"), &me1), NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstance)(gpu_, ProfileId("1g.10gb+me"), &me2),
            NVML_ERROR_INSUFFICIENT_RESOURCES);
  // The plain GPU has no MIG.
  EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstance)(plain_, ProfileId("1g.10gb"), &c),
            NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(SimMigTest, MigDeviceHandlesUuidsAndTheDestroyOrder) {
  const std::string uuid = CreateMigDevice("2g.20gb", 2);
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  nvmlDevice_t mig = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetHandleByUUID)(uuid.c_str(), &mig), NVML_SUCCESS);
  unsigned int is_mig = 0;
  ASSERT_EQ(NVML(nvmlDeviceIsMigDeviceHandle)(mig, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 1u);
  ASSERT_EQ(NVML(nvmlDeviceIsMigDeviceHandle)(gpu_, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0u);
  nvmlDevice_t parent = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(mig, &parent), NVML_SUCCESS);
  EXPECT_EQ(parent, gpu_);
  nvmlMemory_t mem{};
  ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo)(mig, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, 2 * kGiB);  // 2 of the 8 memory slices of an 8 GiB GPU
  char name[96] = {};
  ASSERT_EQ(NVML(nvmlDeviceGetName)(mig, name, sizeof(name)), NVML_SUCCESS);
  EXPECT_STREQ(name, "SimH MIG 2g.20gb");
  unsigned int max = 0;
  ASSERT_EQ(NVML(nvmlDeviceGetMaxMigDeviceCount)(gpu_, &max), NVML_SUCCESS);
  EXPECT_EQ(max, 7u);
  nvmlUtilization_t util{};
  EXPECT_EQ(NVML(nvmlDeviceGetUtilizationRates)(gpu_, &util), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(NVML(nvmlDeviceGetUtilizationRates)(mig, &util), NVML_SUCCESS);

  // A GPU instance with a compute instance cannot go; MIG mode cannot be turned off with
  // instances; after the compute instance, the GPU instance goes and the handle is dead.
  nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceById)(gpu_, 1, &gi), NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlGpuInstanceDestroy)(gi), NVML_ERROR_IN_USE);
  nvmlReturn_t activation = NVML_SUCCESS;
  EXPECT_EQ(NVML(nvmlDeviceSetMigMode)(gpu_, NVML_DEVICE_MIG_DISABLE, &activation),
            NVML_ERROR_IN_USE);
  nvmlComputeInstance_t ci = nullptr;
  unsigned int n = 0;
  ASSERT_EQ(NVML(nvmlGpuInstanceGetComputeInstances)(gi, 1 /* 2_SLICE */, &ci, &n), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  ASSERT_EQ(NVML(nvmlComputeInstanceDestroy)(ci), NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlDeviceGetMemoryInfo)(mig, &mem), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(NVML(nvmlGpuInstanceDestroy)(gi), NVML_SUCCESS);
  ASSERT_EQ(NVML(nvmlDeviceSetMigMode)(gpu_, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
  unsigned int current = 9, pending = 9;
  ASSERT_EQ(NVML(nvmlDeviceGetMigMode)(gpu_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, 0u);
  nvmlGpuInstance_t none = nullptr;
  EXPECT_EQ(NVML(nvmlDeviceCreateGpuInstance)(gpu_, ProfileId("1g.10gb"), &none),
            NVML_ERROR_INVALID_STATE);
  ASSERT_EQ(NVML(nvmlDeviceSetMigMode)(gpu_, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
  // A re-created instance gets a new UUID.
  EXPECT_NE(CreateMigDevice("2g.20gb", 2), uuid);
}

// Many creators at once (threads here; the word they CAS is the same one processes share) never
// end up with overlapping instances, and every success is an instance that exists.
TEST_F(SimMigTest, ConcurrentCreatorsNeverOverlap) {
  for (int round = 0; round < 20; ++round) {
    DestroyAll();
    std::atomic<int> created{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(static_cast<uint32_t>(round * 31 + t));
        for (int k = 0; k < 4; ++k) {
          const tessera::mig::MigProfile& p = H100().profiles[rng() % H100().profile_count];
          nvmlGpuInstance_t gi = nullptr;
          if (NVML(nvmlDeviceCreateGpuInstance)(gpu_, p.id, &gi) == NVML_SUCCESS) ++created;
        }
      });
    }
    for (auto& th : threads) th.join();
    tessera::mig::Layout layout{&H100(), {}};
    int listed = 0;
    for (const tessera::mig::MigProfile& p : H100().Profiles()) {
      nvmlGpuInstance_t gis[8];
      unsigned int n = 0;
      ASSERT_EQ(NVML(nvmlDeviceGetGpuInstances)(gpu_, p.id, gis, &n), NVML_SUCCESS);
      for (unsigned int i = 0; i < n; ++i) {
        nvmlGpuInstanceInfo_t info{};
        ASSERT_EQ(NVML(nvmlGpuInstanceGetInfo)(gis[i], &info), NVML_SUCCESS);
        layout.instances.push_back({&p, static_cast<int>(info.placement.start)});
        ++listed;
      }
    }
    EXPECT_EQ(listed, created.load()) << "round " << round;
    EXPECT_TRUE(tessera::mig::CheckLayout(layout).ok())
        << tessera::mig::CheckLayout(layout).message() << " "
        << tessera::mig::FormatPlacements(layout);
  }
}

// Each MIG device has the SMs NVIDIA lists for its profile on an H100 SXM5 (132 SMs): NVML's
// profile info and CUDA's MULTIPROCESSOR_COUNT agree, and a tenant that sizes a launch limiter
// from threads per SM x SMs on the MIG device runs.
TEST_F(SimMigTest, MigDevicesHaveTheirProfilesSmCounts) {
  const std::pair<const char*, int> published[] = {{"1g.10gb", 16}, {"1g.20gb", 26},
                                                   {"2g.20gb", 32}, {"3g.40gb", 60},
                                                   {"4g.40gb", 64}, {"7g.80gb", 132}};
  for (const auto& [profile, sms] : published) {
    SCOPED_TRACE(profile);
    const tessera::mig::MigProfile& p = *tessera::mig::FindProfile(H100(), profile, "p").value();
    nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceProfileInfo)(gpu_, p.nvml_profile, &info), NVML_SUCCESS);
    EXPECT_EQ(info.multiprocessorCount, static_cast<unsigned int>(sms));
    DestroyAll();
    const std::string uuid = CreateMigDevice(profile, 0);
    auto tenant = Tenant({"limiter", "50"}, uuid);
    ASSERT_EQ(tenant->Wait(30s), 0);
    tenant->DrainOutput(5s);
    EXPECT_EQ(tenant->values().at("sms"), std::to_string(sms));
    EXPECT_EQ(tenant->values().at("threads_per_sm"), "2048");
    EXPECT_EQ(tenant->values().at("cc"), "9.0");
    EXPECT_EQ(tenant->values().at("launched"), "50");
  }
}

TEST_F(SimMigTest, CudaGivenAMigUuidSeesOneDeviceOfTheInstancesMemory) {
  const std::string a = CreateMigDevice("3g.40gb", 0);
  const std::string b = CreateMigDevice("1g.10gb", 4);
  auto one = Tenant({"devices"}, a);
  ASSERT_EQ(one->Wait(20s), 0);
  one->DrainOutput(5s);
  EXPECT_EQ(one->values().at("count"), "1");
  EXPECT_EQ(one->values().at("total_0"), std::to_string(4 * kGiB));
  EXPECT_EQ(one->values().at("name_0"), "SimH MIG 3g.40gb");
  // Two MIG devices named: CUDA enumerates only the first (CUDA 11/12's one-MIG-device rule).
  auto two = Tenant({"devices"}, b + "," + a);
  ASSERT_EQ(two->Wait(20s), 0);
  two->DrainOutput(5s);
  EXPECT_EQ(two->values().at("count"), "1");
  EXPECT_EQ(two->values().at("total_0"), std::to_string(1 * kGiB));
  // Nothing named: the plain GPU and the MIG GPU's first MIG device (the one at slice 0).
  auto all = Tenant({"devices"}, "");
  ASSERT_EQ(all->Wait(20s), 0);
  all->DrainOutput(5s);
  EXPECT_EQ(all->values().at("count"), "2");
  EXPECT_EQ(all->values().at("name_0"), "SimH MIG 3g.40gb");
  EXPECT_EQ(all->values().at("name_1"), "Plain");
}

TEST_F(SimMigTest, AMigGpuWithoutInstancesIsNoCudaDevice) {
  auto t = Tenant({"devices"}, "0");
  ASSERT_EQ(t->Wait(20s), 0);
  t->DrainOutput(5s);
  EXPECT_EQ(t->values().at("count"), "0");
}

TEST_F(SimMigTest, EachInstancesMemoryIsItsOwn) {
  const std::string a = CreateMigDevice("3g.40gb", 0);
  const std::string b = CreateMigDevice("3g.40gb", 4);
  auto holder = Tenant({"hold", std::to_string(3 * kGiB)}, a);
  ASSERT_EQ(holder->WaitForKey("ready", 30s), "1");
  auto filler = Tenant({"alloc-until-oom", "64"}, b);
  auto got = filler->WaitForKey("allocated", 60s);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, std::to_string(4 * kGiB)) << "all of its own 4 GiB, none of A's";
  EXPECT_EQ(filler->WaitForKey("failure", 5s), "2");  // CUDA_ERROR_OUT_OF_MEMORY
  // NVML: each instance reports its own, the GPU the sum; the GPU lists both processes.
  nvmlDevice_t mig_a = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetHandleByUUID)(a.c_str(), &mig_a), NVML_SUCCESS);
  nvmlMemory_t mem{};
  ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo)(mig_a, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 3 * kGiB);
  ASSERT_EQ(NVML(nvmlDeviceGetMemoryInfo)(gpu_, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 7 * kGiB);
  nvmlProcessInfo_t procs[8];
  unsigned int n = 8;
  ASSERT_EQ(NVML(nvmlDeviceGetComputeRunningProcesses_v3)(gpu_, &n, procs), NVML_SUCCESS);
  ASSERT_EQ(n, 2u);
  std::set<unsigned int> pids = {procs[0].pid, procs[1].pid};
  EXPECT_EQ(pids, (std::set<unsigned int>{static_cast<unsigned int>(holder->pid()),
                                          static_cast<unsigned int>(filler->pid())}));
  EXPECT_NE(procs[0].gpuInstanceId, procs[1].gpuInstanceId);
  // An instance in use cannot lose its compute instance.
  nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(NVML(nvmlDeviceGetGpuInstanceById)(gpu_, procs[0].gpuInstanceId, &gi), NVML_SUCCESS);
  nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(NVML(nvmlGpuInstanceGetComputeInstances)(gi, 2 /* 3_SLICE */, &ci, &n), NVML_SUCCESS);
  EXPECT_EQ(NVML(nvmlComputeInstanceDestroy)(ci), NVML_ERROR_IN_USE);
  filler->CloseStdin();
  EXPECT_EQ(filler->Wait(30s), 0);
  holder->Kill(SIGKILL);
  EXPECT_EQ(holder->Wait(10s), 128 + SIGKILL);
}

// `tessera mig apply` on this test's machine: its exit status and what it printed.
std::pair<int, std::string> Apply(const std::string& args) {
  // The environment names this test's machine.
  return tessera::process::RunShell("'" + BuildDir() + "/bin/tessera' mig apply --sim " + args +
                                    " 2>&1");
}

TEST_F(SimMigTest, ApplyRefusesWhatItCannotDoSafely) {
  nvmlReturn_t activation = NVML_SUCCESS;
  ASSERT_EQ(NVML(nvmlDeviceSetMigMode)(gpu_, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
  auto [status, out] = Apply("--gpu H100-80GB 3g.40gb");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, ::testing::HasSubstr(
                       "GPU 0 (SimH): MIG mode is off. Turn it on with `nvidia-smi -i 0 -mig 1`"));
  ASSERT_EQ(NVML(nvmlDeviceSetMigMode)(gpu_, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
  std::tie(status, out) = Apply("--gpu A30 1g.6gb");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, ::testing::HasSubstr("NVML describes 1g.6gb as profile ID 19 with 1 compute "
                                        "slices; the A30 table says ID 14"));
  std::tie(status, out) = Apply("--index 1 --gpu H100-80GB 1g.10gb");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, ::testing::HasSubstr("GPU 1 (Plain) does not support MIG"));
  std::tie(status, out) = Apply("1g.10gb");
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, ::testing::HasSubstr("GPU 0 (SimH) is no MIG-capable model we know by its "
                                        "name; name it with --gpu MODEL"));
  std::tie(status, out) = Apply("--gpu H100-80GB 3g.40gb 1g.10gb=2");
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("GPU 0 (H100-80GB): 3 MIG devices"));
  EXPECT_THAT(out, ::testing::ContainsRegex("3g.40gb +0 .* 4GiB  MIG-"));
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Two processes each queue 1 s of kernels (50 x 20 ms) at the same instant and wait for them. On
// two instances each finishes its own second on its own clock, side by side; on one instance the
// device runs one kernel at a time, so the two seconds follow each other. Booked device time does
// not depend on how fast the host is, only the instant each process starts queueing does: a round
// whose processes did not overlap by half a second (one started late on a loaded machine) is run
// again, up to three times.
TEST_F(SimMigTest, InstancesRunKernelsConcurrentlyOnClocksOfTheirOwn) {
  const std::string a = CreateMigDevice("3g.40gb", 0);
  const std::string b = CreateMigDevice("3g.40gb", 4);
  struct Span {
    double first, end;  // seconds
  };
  auto run_pair = [&](const std::string& first, const std::string& second) {
    const std::string start = std::to_string(NowNs() + 500'000'000ull);
    auto x = Tenant({"queue", "20000", "50", start}, first);
    auto y = Tenant({"queue", "20000", "50", start}, second);
    EXPECT_EQ(x->Wait(30s), 0);
    EXPECT_EQ(y->Wait(30s), 0);
    x->DrainOutput(5s);
    y->DrainOutput(5s);
    auto span = [](const ChildProcess& t) {
      return Span{std::stod(t.values().at("first_ns")) / 1e9,
                  std::stod(t.values().at("end_ns")) / 1e9};
    };
    return std::make_pair(span(*x), span(*y));
  };
  bool judged = false;
  for (int round = 0; round < 3 && !judged; ++round) {
    const auto [x, y] = run_pair(a, b);
    const double overlap = std::min(x.end, y.end) - std::max(x.first, y.first);
    std::printf("two instances: %.3f s and %.3f s for 1 s of kernels each, overlapping %.3f s\n",
                x.end - x.first, y.end - y.first, overlap);
    if (overlap < 0.5) continue;  // not side by side: one started late
    judged = true;
    EXPECT_LT(x.end - x.first, 1.3) << "waited for the other instance's kernels";
    EXPECT_LT(y.end - y.first, 1.3) << "waited for the other instance's kernels";
  }
  EXPECT_TRUE(judged) << "the two processes never ran side by side in three rounds";
  const auto [x, y] = run_pair(a, a);
  const double both = std::max(x.end, y.end) - std::min(x.first, y.first);
  std::printf("one instance: both done %.3f s after the first began\n", both);
  EXPECT_GE(both, 1.95) << "one instance runs one kernel at a time";
}

}  // namespace
