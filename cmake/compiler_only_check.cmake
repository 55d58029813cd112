# compiler_only_build_test: the shims and simgpu must build with a compiler, CMake and Ninja
# alone (docs/architecture.md). Included from the top-level CMakeLists.txt after every target exists.
#
# It checks three things, none of which compiles anything again (so CI pays seconds for it):
# - a configure in a scratch directory with the doors' packages, pkg-config, GoogleTest and
#   Google Benchmark hidden succeeds, says which parts are OFF, and still generates the shims and
#   simgpu (and not tesserad);
# - in this build, no object of the compiler-only libraries included a header of yaml-cpp,
#   nlohmann-json, cpp-httplib or CLI11 (ninja's recorded dependencies);
# - the shims and simgpu need no shared library of those packages (their DT_NEEDED entries).
if(NOT TESSERA_BUILD_TESTS)
  return()
endif()
if(NOT CMAKE_GENERATOR STREQUAL "Ninja")
  message(STATUS "tessera: compiler_only_build_test OFF: it reads ninja's dependency log")
  return()
endif()
find_program(TESSERA_READELF NAMES readelf)
add_test(NAME compiler_only_build_test
  COMMAND ${CMAKE_COMMAND}
    -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DBUILD_DIR=${CMAKE_BINARY_DIR}
    -DSCRATCH_DIR=${CMAKE_BINARY_DIR}/compiler-only-configure
    -DNINJA=${CMAKE_MAKE_PROGRAM}
    -DREADELF=${TESSERA_READELF}
    -P ${PROJECT_SOURCE_DIR}/cmake/check_compiler_only.cmake)
set_tests_properties(compiler_only_build_test PROPERTIES TIMEOUT 120 LABELS unit)
