# Precompiled headers for GCC builds: the standard library headers most translation units include
# and, for the doors, nlohmann-json. Every C++ target reuses one of two prebuilt headers
# (REUSE_FROM), so each is compiled once per build tree:
# - tessera_pch_std: standard library only, for the compiler-only parts (src/core, src/shim,
#   src/simgpu and the libraries under them: they include no package's header,
#   compiler_only_build_test checks that);
# - tessera_pch_doors: the same plus <nlohmann/json.hpp>, for everything else.
# A target whose flags make a header unusable (GCC rejects a PCH built with other options) falls
# back to reading the headers, so a PCH changes build time only, never what compiles. Clang builds
# (the fuzzers) do without: clang refuses a PCH built with other options instead of falling back.
# Included from the top-level CMakeLists.txt after every target exists.
option(TESSERA_PCH "Precompile the common headers (GCC only)" ON)
if(NOT TESSERA_PCH OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  return()
endif()

set(_tessera_pch_std
  <algorithm> <array> <atomic> <cerrno> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring>
  <fstream> <functional> <map> <memory> <mutex> <optional> <set> <sstream> <string>
  <string_view> <thread> <tuple> <unordered_map> <utility> <vector>)
# Libraries compile with -fPIC and executables with -fPIE, which a PCH must match: a donor of each.
function(_tessera_pch_donor name kind)
  if(kind STREQUAL "exe")
    add_executable(${name} ${PROJECT_SOURCE_DIR}/cmake/pch/pch_main.cc)
  else()
    add_library(${name} STATIC ${PROJECT_SOURCE_DIR}/cmake/pch/pch.cc)
  endif()
  target_precompile_headers(${name} PRIVATE ${ARGN})
endfunction()
_tessera_pch_donor(tessera_pch_std lib ${_tessera_pch_std})
_tessera_pch_donor(tessera_pch_std_exe exe ${_tessera_pch_std})
set(_tessera_pch_donors tessera_pch_std tessera_pch_std_exe)
if(TESSERA_DOORS_FOUND)
  _tessera_pch_donor(tessera_pch_doors lib ${_tessera_pch_std} <nlohmann/json.hpp>)
  _tessera_pch_donor(tessera_pch_doors_exe exe ${_tessera_pch_std} <nlohmann/json.hpp>)
  list(APPEND _tessera_pch_donors tessera_pch_doors tessera_pch_doors_exe)
endif()

# The compiler-only directories (docs/architecture.md).
set(_tessera_compiler_only core driver mig mps ipc protocol ledger arbiter ctl process simgpu shim
    gate metrics)

function(_tessera_pch_apply dir)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS _targets)
    get_target_property(_type ${t} TYPE)
    if(NOT _type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$"
       OR t IN_LIST _tessera_pch_donors)
      continue()
    endif()
    # Hidden visibility (the shims) changes the options a PCH must match; generated code (the
    # protobuf stubs) gains nothing.
    get_target_property(_vis ${t} CXX_VISIBILITY_PRESET)
    get_target_property(_srcs ${t} SOURCES)
    list(FILTER _srcs INCLUDE REGEX "\\.(cc|cpp)$")
    if(_vis OR NOT _srcs OR _srcs MATCHES "\\.pb\\.cc")
      continue()
    endif()
    file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${dir})
    set(_donor tessera_pch_std)
    if(TESSERA_DOORS_FOUND)
      set(_donor tessera_pch_doors)
      foreach(_part IN LISTS _tessera_compiler_only)
        if(_rel STREQUAL "src/${_part}" OR _rel MATCHES "^src/${_part}/")
          set(_donor tessera_pch_std)
        endif()
      endforeach()
    endif()
    if(_type STREQUAL "EXECUTABLE")
      string(APPEND _donor _exe)
    endif()
    target_precompile_headers(${t} REUSE_FROM ${_donor})
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS _subdirs)
    _tessera_pch_apply(${d})
  endforeach()
endfunction()
_tessera_pch_apply(${PROJECT_SOURCE_DIR})
