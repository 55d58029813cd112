// Tests for DynamicLibrary (library.h) against real shared objects.
//
// This file is compiled three times (see CMakeLists.txt). With TESSERA_DRIVER_TEST_MODULE unset it
// is the test. With TESSERA_DRIVER_TEST_MODULE=1 it is driver_test_lib, a plugin exporting a known
// function and variable. With TESSERA_DRIVER_TEST_MODULE=2 it is driver_test_unresolved_lib, a
// plugin referring to a function no library defines, which RTLD_NOW must refuse at Open.
#if defined(TESSERA_DRIVER_TEST_MODULE)

#if TESSERA_DRIVER_TEST_MODULE == 1
extern "C" {
__attribute__((visibility("default"))) int tessera_driver_test_answer() { return 42; }
__attribute__((visibility("default"))) int tessera_driver_test_counter = 7;
}
#elif TESSERA_DRIVER_TEST_MODULE == 2
extern "C" int tessera_driver_test_nowhere_defined();
extern "C" __attribute__((visibility("default"))) int tessera_driver_test_calls_missing() {
  return tessera_driver_test_nowhere_defined();
}
#endif

#else  // The test itself.

#include "driver/library.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr const char* kLib = TESSERA_DRIVER_TEST_LIB;
constexpr const char* kUnresolvedLib = TESSERA_DRIVER_TEST_UNRESOLVED_LIB;
constexpr const char* kAnswer = "tessera_driver_test_answer";

using AnswerFn = int (*)();

// Whether the dynamic loader currently has `path` loaded (without loading it).
bool IsLoaded(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

// A fresh directory, removed with everything in it when the fixture ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "tessera_driver_test_XXXXXX";
    char* made = mkdtemp(pattern.data());
    if (made != nullptr) path_ = made;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int FunctionOfTheTestBinary() { return 0; }

TEST(DynamicLibraryTest, OpensByAbsolutePathAndResolvesFunctionsAndData) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(lib.ok()) << lib.error();
  EXPECT_EQ(lib->path(), kLib);
  EXPECT_NE(lib->handle(), nullptr);

  Result<AnswerFn> answer = lib->Resolve<AnswerFn>(kAnswer);
  ASSERT_TRUE(answer.ok()) << answer.error();
  EXPECT_EQ((*answer)(), 42);

  Result<void*> counter = lib->Symbol("tessera_driver_test_counter");
  ASSERT_TRUE(counter.ok()) << counter.error();
  EXPECT_EQ(*static_cast<int*>(*counter), 7);

  EXPECT_TRUE(lib->Has(kAnswer));
}

TEST(DynamicLibraryTest, RejectsRelativePathsNamingThem) {
  for (const char* relative : {"libc.so.6", "lib/libcuda.so.1", "./driver_test_lib.so"}) {
    Result<DynamicLibrary> lib = DynamicLibrary::Open(relative);
    ASSERT_FALSE(lib.ok()) << relative;
    EXPECT_THAT(lib.error(), HasSubstr(std::string("\"") + relative + "\""));
    EXPECT_THAT(lib.error(), HasSubstr("absolute path is required"));
  }
}

TEST(DynamicLibraryTest, RejectsEmptyPath) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open("");
  ASSERT_FALSE(lib.ok());
  EXPECT_THAT(lib.error(), HasSubstr("empty"));
}

TEST(DynamicLibraryTest, MissingFileErrorNamesPathAndLoaderReason) {
  const std::string missing = "/nonexistent-tessera-dir/libcuda.so.1";
  Result<DynamicLibrary> lib = DynamicLibrary::Open(missing);
  ASSERT_FALSE(lib.ok());
  EXPECT_THAT(lib.error(), HasSubstr("\"" + missing + "\""));
  EXPECT_THAT(lib.error(), HasSubstr("No such file"));
}

TEST(DynamicLibraryTest, FileThatIsNotAnElfObjectIsRejected) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string text = dir.path() + "/libnotelf.so";
  std::ofstream(text) << "this is not an ELF object, it is a text file long enough to be read\n";

  Result<DynamicLibrary> lib = DynamicLibrary::Open(text);
  ASSERT_FALSE(lib.ok());
  EXPECT_THAT(lib.error(), HasSubstr("\"" + text + "\": "));
  EXPECT_THAT(lib.error(), HasSubstr("ELF"));  // glibc: "invalid ELF header".
}

TEST(DynamicLibraryTest, UnresolvedReferenceFailsAtOpenNotAtFirstCall) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kUnresolvedLib);
  ASSERT_FALSE(lib.ok()) << "RTLD_NOW should refuse a library with an undefined reference";
  EXPECT_THAT(lib.error(), HasSubstr(kUnresolvedLib));
  EXPECT_THAT(lib.error(), HasSubstr("tessera_driver_test_nowhere_defined"));
}

TEST(DynamicLibraryTest, MissingSymbolErrorNamesSymbolAndLibrary) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(lib.ok()) << lib.error();

  Result<void*> symbol = lib->Symbol("cuNoSuchFunction_v9");
  ASSERT_FALSE(symbol.ok());
  EXPECT_THAT(symbol.error(), HasSubstr("\"cuNoSuchFunction_v9\""));
  EXPECT_THAT(symbol.error(), HasSubstr(std::string("\"") + kLib + "\""));

  Result<AnswerFn> resolved = lib->Resolve<AnswerFn>("cuNoSuchFunction_v9");
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.error(), symbol.error());

  EXPECT_FALSE(lib->Has("cuNoSuchFunction_v9"));
  EXPECT_FALSE(lib->Has(""));
  EXPECT_FALSE(lib->Symbol("").ok());
}

TEST(DynamicLibraryTest, SymbolsDoNotLeakIntoTheGlobalScope) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(lib.ok()) << lib.error();
  ASSERT_TRUE(lib->Has(kAnswer));
  EXPECT_EQ(dlsym(RTLD_DEFAULT, kAnswer), nullptr) << "opened without RTLD_LOCAL";
}

TEST(DynamicLibraryTest, MoveTransfersTheReferenceAndDestructionUnloads) {
  ASSERT_FALSE(IsLoaded(kLib));
  {
    Result<DynamicLibrary> opened = DynamicLibrary::Open(kLib);
    ASSERT_TRUE(opened.ok()) << opened.error();
    DynamicLibrary a = std::move(opened).value();
    DynamicLibrary b = std::move(a);
    EXPECT_TRUE(b.Has(kAnswer));
    EXPECT_EQ(b.path(), kLib);
    EXPECT_FALSE(a.Has(kAnswer));                  // NOLINT: the moved-from state is under test.
    Result<void*> from_moved = a.Symbol(kAnswer);  // NOLINT: the moved-from state is under test.
    ASSERT_FALSE(from_moved.ok());
    EXPECT_THAT(from_moved.error(), HasSubstr("moved from"));

    // Move-assigning over a live object drops that object's reference.
    Result<DynamicLibrary> second = DynamicLibrary::Open(kLib);
    ASSERT_TRUE(second.ok()) << second.error();
    b = std::move(second).value();
    EXPECT_TRUE(IsLoaded(kLib));
  }
  EXPECT_FALSE(IsLoaded(kLib)) << "every reference was dropped, the module should be unloaded";
}

TEST(DynamicLibraryTest, ContainsTellsWhetherAnAddressIsInsideTheLibrary) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(lib.ok()) << lib.error();
  Result<void*> answer = lib->Symbol(kAnswer);
  ASSERT_TRUE(answer.ok()) << answer.error();

  EXPECT_TRUE(lib->Contains(*answer));
  EXPECT_FALSE(lib->Contains(reinterpret_cast<const void*>(&FunctionOfTheTestBinary)));
  EXPECT_FALSE(lib->Contains(reinterpret_cast<const void*>(&dlopen)));
  EXPECT_FALSE(lib->Contains(nullptr));
}

TEST(DynamicLibraryTest, SymlinkToALoadedFileYieldsTheSameObject) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string link = dir.path() + "/libcuda.so.1";
  std::filesystem::create_symlink(kLib, link);

  Result<DynamicLibrary> direct = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(direct.ok()) << direct.error();
  Result<DynamicLibrary> via_link = DynamicLibrary::Open(link);
  ASSERT_TRUE(via_link.ok()) << via_link.error();

  // What the shim relies on to refuse loading itself as the "real" driver.
  Result<void*> answer = direct->Symbol(kAnswer);
  ASSERT_TRUE(answer.ok()) << answer.error();
  EXPECT_TRUE(via_link->Contains(*answer));

  Result<bool> same = IsSameFile(link, kLib);
  ASSERT_TRUE(same.ok()) << same.error();
  EXPECT_TRUE(*same);
}

TEST(IsSameFileTest, DistinguishesFilesAndNamesUnreadablePaths) {
  Result<bool> same = IsSameFile(kLib, kLib);
  ASSERT_TRUE(same.ok()) << same.error();
  EXPECT_TRUE(*same);

  Result<bool> different = IsSameFile(kLib, kUnresolvedLib);
  ASSERT_TRUE(different.ok()) << different.error();
  EXPECT_FALSE(*different);

  const std::string missing = "/nonexistent-tessera-dir/libnvidia-ml.so.1";
  Result<bool> error = IsSameFile(kLib, missing);
  ASSERT_FALSE(error.ok());
  EXPECT_THAT(error.error(), HasSubstr("\"" + missing + "\""));
  EXPECT_THAT(error.error(), HasSubstr("No such file"));
}

TEST(PathOfObjectContainingTest, FindsTheFileOfALoadedFunction) {
  Result<DynamicLibrary> lib = DynamicLibrary::Open(kLib);
  ASSERT_TRUE(lib.ok()) << lib.error();
  Result<void*> answer = lib->Symbol(kAnswer);
  ASSERT_TRUE(answer.ok()) << answer.error();

  Result<std::string> path = PathOfObjectContaining(*answer);
  ASSERT_TRUE(path.ok()) << path.error();
  Result<bool> same = IsSameFile(*path, kLib);
  ASSERT_TRUE(same.ok()) << same.error();
  EXPECT_TRUE(*same) << *path;

  EXPECT_FALSE(PathOfObjectContaining(nullptr).ok());
}

}  // namespace
}  // namespace tessera

#endif  // TESSERA_DRIVER_TEST_MODULE
