// Tests for the symbol lists in data/ (what they hold and where it comes from: data/README.md) and
// for nvml_api.h, whose declarations must all name exported NVML symbols.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/library.h"
#include "driver/nvml_api.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// The names CUDA 12.x drivers export and the CUDA 13.0 stub does not (data/README.md).
const char* const kCuda12xOnly[] = {
    "cuEGLApiInit",
    "cuEGLStreamConsumerAcquireFrame",
    "cuEGLStreamConsumerConnect",
    "cuEGLStreamConsumerConnectWithFlags",
    "cuEGLStreamConsumerDisconnect",
    "cuEGLStreamConsumerReleaseFrame",
    "cuEGLStreamProducerConnect",
    "cuEGLStreamProducerDisconnect",
    "cuEGLStreamProducerPresentFrame",
    "cuEGLStreamProducerReturnFrame",
    "cuGLCtxCreate",
    "cuGLCtxCreate_v2",
    "cuGLGetDevices",
    "cuGLGetDevices_v2",
    "cuGLInit",
    "cuGLMapBufferObject",
    "cuGLMapBufferObjectAsync",
    "cuGLMapBufferObjectAsync_v2",
    "cuGLMapBufferObjectAsync_v2_ptsz",
    "cuGLMapBufferObject_v2",
    "cuGLMapBufferObject_v2_ptds",
    "cuGLRegisterBufferObject",
    "cuGLSetBufferObjectMapFlags",
    "cuGLUnmapBufferObject",
    "cuGLUnmapBufferObjectAsync",
    "cuGLUnregisterBufferObject",
    "cuGraphicsEGLRegisterImage",
    "cuGraphicsGLRegisterBuffer",
    "cuGraphicsGLRegisterImage",
    "cuGraphicsResourceGetMappedEglFrame",
    "cuGraphicsVDPAURegisterOutputSurface",
    "cuGraphicsVDPAURegisterVideoSurface",
    "cuMemGetAttribute",
    "cuMemGetAttribute_v2",
    "cuVDPAUCtxCreate",
    "cuVDPAUCtxCreate_v2",
    "cuVDPAUGetDevice",
};

// Entry points the shim hooks or the project calls, including old variants whose declarations
// CUDA 13.0 dropped from cuda.h but whose symbols it still exports.
const char* const kCudaMustHave[] = {
    "cuInit",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
    "cuGetExportTable",
    "cuDriverGetVersion",
    "cuMemAlloc",
    "cuMemAlloc_v2",
    "cuMemAllocPitch_v2",
    "cuMemAllocManaged",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemGetInfo_v2",
    "cuDeviceTotalMem_v2",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel_ptsz",
    "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    "cuCtxCreate",
    "cuCtxCreate_v2",
    "cuCtxCreate_v3",
    "cuCtxCreate_v4",
    "cuCtxAttach",
    "cuCtxDetach",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceGetProperties",
    "cuDeviceComputeCapability",
    "cuMemAdvise",
    "cuMemAdvise_v2",
    "cuMemPrefetchAsync",
    "cuMemPrefetchAsync_v2",
    "cuGraphInstantiate",
    "cuGraphInstantiate_v2",
    "cuModuleGetTexRef",
    "cuTexRefSetArray",
    "cuParamSetv",
    "cuLaunch",
    "cuLaunchGrid",
    "cuLaunchGridAsync",
    "cuFuncSetBlockShape",
    "cuMemcpyHtoD_v2_ptds",
};

// Compiles only if nvml_api.h declares `fn`, without referring to the symbol at link time.
#define NVML_DECLARED(fn) (static_cast<void>(sizeof(&fn)), #fn)

// Every function nvml_api.h declares.
const char* const kNvmlDeclared[] = {
    NVML_DECLARED(nvmlInit),
    NVML_DECLARED(nvmlInit_v2),
    NVML_DECLARED(nvmlInitWithFlags),
    NVML_DECLARED(nvmlShutdown),
    NVML_DECLARED(nvmlErrorString),
    NVML_DECLARED(nvmlSystemGetDriverVersion),
    NVML_DECLARED(nvmlSystemGetNVMLVersion),
    NVML_DECLARED(nvmlSystemGetCudaDriverVersion),
    NVML_DECLARED(nvmlSystemGetCudaDriverVersion_v2),
    NVML_DECLARED(nvmlDeviceGetCount),
    NVML_DECLARED(nvmlDeviceGetCount_v2),
    NVML_DECLARED(nvmlDeviceGetHandleByIndex),
    NVML_DECLARED(nvmlDeviceGetHandleByIndex_v2),
    NVML_DECLARED(nvmlDeviceGetHandleByUUID),
    NVML_DECLARED(nvmlDeviceGetIndex),
    NVML_DECLARED(nvmlDeviceGetName),
    NVML_DECLARED(nvmlDeviceGetUUID),
    NVML_DECLARED(nvmlDeviceGetMinorNumber),
    NVML_DECLARED(nvmlDeviceGetPciInfo_v3),
    NVML_DECLARED(nvmlDeviceGetMultiGpuBoard),
    NVML_DECLARED(nvmlDeviceGetCudaComputeCapability),
    NVML_DECLARED(nvmlDeviceGetArchitecture),
    NVML_DECLARED(nvmlDeviceGetBrand),
    NVML_DECLARED(nvmlDeviceGetSerial),
    NVML_DECLARED(nvmlDeviceGetClockInfo),
    NVML_DECLARED(nvmlDeviceGetMaxClockInfo),
    NVML_DECLARED(nvmlDeviceGetMemoryBusWidth),
    NVML_DECLARED(nvmlDeviceGetPowerManagementLimit),
    NVML_DECLARED(nvmlDeviceGetPowerManagementDefaultLimit),
    NVML_DECLARED(nvmlDeviceGetEnforcedPowerLimit),
    NVML_DECLARED(nvmlDeviceGetNumGpuCores),
    NVML_DECLARED(nvmlDeviceGetMemoryInfo),
    NVML_DECLARED(nvmlDeviceGetMemoryInfo_v2),
    NVML_DECLARED(nvmlDeviceGetUtilizationRates),
    NVML_DECLARED(nvmlDeviceGetComputeRunningProcesses),
    NVML_DECLARED(nvmlDeviceGetComputeRunningProcesses_v2),
    NVML_DECLARED(nvmlDeviceGetComputeRunningProcesses_v3),
    NVML_DECLARED(nvmlDeviceGetGraphicsRunningProcesses_v3),
    NVML_DECLARED(nvmlDeviceGetProcessUtilization),
};

// Checks the format every data/*.txt list shares: one name per line, each matching `pattern`,
// sorted in byte order without duplicates, no blank lines, no stray whitespace, a final newline.
// On success `names` holds the list.
Status CheckSymbolList(const std::string& text, const std::regex& pattern,
                       std::vector<std::string>* names) {
  names->clear();
  if (text.empty()) return Status::Error("the list is empty");
  if (text.back() != '\n') return Status::Error("the last line has no terminating newline");
  std::istringstream lines(text);
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    const std::string where = "line " + std::to_string(number) + " \"" + line + "\"";
    if (!std::regex_match(line, pattern)) {
      return Status::Error(where + " is not a symbol name of the expected form");
    }
    if (!names->empty() && !(names->back() < line)) {
      return Status::Error(where + (names->back() == line
                                        ? " repeats the previous name"
                                        : " is out of byte order after \"" + names->back() + "\""));
    }
    names->push_back(line);
  }
  return Status::Ok();
}

const std::regex& CudaName() {
  static const std::regex pattern("cu[A-Z][A-Za-z0-9_]*");
  return pattern;
}

const std::regex& NvmlName() {
  static const std::regex pattern("nvml[A-Z][A-Za-z0-9_]*");
  return pattern;
}

std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/" + relative, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Loads and format-checks data/<file>; fails the calling test on any problem.
std::vector<std::string> LoadList(const std::string& file, const std::regex& pattern) {
  std::string text = ReadSourceFile("data/" + file);
  std::vector<std::string> names;
  Status status = CheckSymbolList(text, pattern, &names);
  EXPECT_TRUE(status.ok()) << "data/" << file << ": " << status.message();
  return names;
}

TEST(CheckSymbolListTest, AcceptsAWellFormedList) {
  std::vector<std::string> names;
  Status status = CheckSymbolList("cuInit\ncuMemAlloc\ncuMemAlloc_v2\n", CudaName(), &names);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_THAT(names, ::testing::ElementsAre("cuInit", "cuMemAlloc", "cuMemAlloc_v2"));
}

TEST(CheckSymbolListTest, RejectsEachFormatMistakeNamingTheLine) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"", "empty"},
      {"cuInit", "newline"},
      {"cuMemAlloc\ncuInit\n", "line 2 \"cuInit\" is out of byte order after \"cuMemAlloc\""},
      {"cuInit\ncuInit\n", "line 2 \"cuInit\" repeats"},
      {"cuInit\n\ncuMemAlloc\n", "line 2 \"\""},
      {"cuInit \n", "line 1 \"cuInit \""},
      {"cuInit\r\n", "line 1"},
      {"# comment\n", "line 1"},
      {"cudbgMain\n", "line 1 \"cudbgMain\""},
      {"nvmlInit\n", "line 1"},
      // Byte order puts '_' (0x5f) after upper case and before lower case letters.
      {"cuMemAlloc_v2\ncuMemAllocAsync\n", "out of byte order"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> names;
    Status status = CheckSymbolList(c.text, CudaName(), &names);
    EXPECT_FALSE(status.ok()) << "accepted: \"" << c.text << "\"";
    EXPECT_THAT(status.message(), HasSubstr(c.expected)) << "for \"" << c.text << "\"";
  }
}

TEST(CudaDriverSymbolsTest, ListIsWellFormedAndCoversCuda12And13) {
  std::vector<std::string> names = LoadList("cuda_driver_symbols.txt", CudaName());
  const std::set<std::string> listed(names.begin(), names.end());
  EXPECT_GE(listed.size(), 637u + std::size(kCuda12xOnly));
  for (const char* name : kCudaMustHave) EXPECT_TRUE(listed.count(name)) << name;
  for (const char* name : kCuda12xOnly) EXPECT_TRUE(listed.count(name)) << name;
  EXPECT_FALSE(listed.count("cudbgMain")) << "debugger variables are not entry points";
}

TEST(CudaDriverSymbolsTest, TwelveXAdditionsFileMatchesTheDocumentedSet) {
  std::vector<std::string> names = LoadList("cuda_driver_symbols_12x.txt", CudaName());
  const std::set<std::string> expected(std::begin(kCuda12xOnly), std::end(kCuda12xOnly));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
}

// Every listed name outside the 12.x additions must be a real export of the CUDA 13 stub, when one
// is installed (TESSERA_CUDA_STUB, else the toolkit's default location).
TEST(CudaDriverSymbolsTest, NamesOutsideTheTwelveXAdditionsAreExportedByTheStub) {
  const char* env = getenv("TESSERA_CUDA_STUB");
  const std::string stub = env != nullptr ? env : "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub.c_str(), R_OK) != 0) GTEST_SKIP() << "no CUDA stub at " << stub;

  Result<DynamicLibrary> lib = DynamicLibrary::Open(stub);
  ASSERT_TRUE(lib.ok()) << lib.error();
  const std::set<std::string> extra(std::begin(kCuda12xOnly), std::end(kCuda12xOnly));
  size_t checked = 0;
  for (const std::string& name : LoadList("cuda_driver_symbols.txt", CudaName())) {
    if (extra.count(name)) continue;
    EXPECT_TRUE(lib->Has(name.c_str())) << name << " is not exported by " << stub;
    ++checked;
  }
  EXPECT_GE(checked, 637u);
}

TEST(NvmlSymbolsTest, ListIsWellFormedAndHasEverythingNvmlApiDeclares) {
  std::vector<std::string> names = LoadList("nvml_symbols.txt", NvmlName());
  const std::set<std::string> listed(names.begin(), names.end());
  EXPECT_GE(listed.size(), 300u);
  for (const char* name : kNvmlDeclared) EXPECT_TRUE(listed.count(name)) << name;
}

TEST(NvmlApiTest, VersionedStructConstantsFollowTheNvmlEncoding) {
  EXPECT_EQ(nvmlMemory_v2, sizeof(nvmlMemory_v2_t) | (2u << 24));
  EXPECT_EQ(NVML_DEVICE_UUID_V2_BUFFER_SIZE, 96);
  EXPECT_EQ(NVML_SUCCESS, 0);
  EXPECT_EQ(NVML_ERROR_INSUFFICIENT_SIZE, 7);
  EXPECT_EQ(NVML_ERROR_UNKNOWN, 999);
}

}  // namespace
}  // namespace tessera
