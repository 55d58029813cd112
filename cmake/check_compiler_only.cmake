# The script behind compiler_only_build_test (see compiler_only_check.cmake). cmake -P with
# SOURCE_DIR, BUILD_DIR (a finished Ninja build), SCRATCH_DIR, NINJA and READELF. Fails with a
# message naming what broke the rule.

# The compiler-only libraries: what the shims and simgpu are made of.
set(compiler_only_targets tessera_core tessera_driver tessera_ipc tessera_protocol tessera_ledger
    tessera_cuda_shim tessera_nvml_shim tessera_simgpu tessera_simgpu_state)
set(compiler_only_outputs lib/tessera/libcuda.so.1 lib/tessera/libnvidia-ml.so.1
    lib/libtessera-simgpu.so)
set(door_headers "(yaml-cpp/|nlohmann/|httplib\\.h|/CLI/)")

# 1. Configure as a GPU machine would: none of the packages.
file(REMOVE_RECURSE ${SCRATCH_DIR})
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${SCRATCH_DIR} -G Ninja
          -DCMAKE_MAKE_PROGRAM=${NINJA}
          -DCMAKE_DISABLE_FIND_PACKAGE_yaml-cpp=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON
  OUTPUT_VARIABLE configure_out ERROR_VARIABLE configure_out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring without the doors' packages failed:\n${configure_out}")
endif()
foreach(expected
    "tessera: tesserad, tessera CLI and placement OFF: yaml-cpp \\(libyaml-cpp-dev\\), nlohmann-json"
    "tessera: tests OFF" "tessera: FUSE mount OFF")
  if(NOT configure_out MATCHES "${expected}")
    message(FATAL_ERROR "the configure output lacks \"${expected}\":\n${configure_out}")
  endif()
endforeach()
execute_process(COMMAND ${NINJA} -C ${SCRATCH_DIR} -t targets all
  OUTPUT_VARIABLE targets RESULT_VARIABLE rc)
foreach(output IN LISTS compiler_only_outputs)
  if(NOT targets MATCHES "(^|\n)${output}:")
    message(FATAL_ERROR "without the doors' packages, ${output} is not built")
  endif()
endforeach()
if(targets MATCHES "(^|\n)bin/tesserad:")
  message(FATAL_ERROR "without the doors' packages, bin/tesserad is still generated")
endif()
file(REMOVE_RECURSE ${SCRATCH_DIR})
message(STATUS "configure without the packages: OK")

# 2. What the compiler-only objects of this build included.
execute_process(COMMAND ${NINJA} -C ${BUILD_DIR} -t deps
  OUTPUT_VARIABLE deps RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ninja -t deps failed in ${BUILD_DIR}")
endif()
string(REPLACE "\n" ";" lines "${deps}")
set(checked 0)
set(current "")
list(JOIN compiler_only_targets "|" target_pattern)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ].*\\.o): #deps")
    set(current "")
    if(CMAKE_MATCH_1 MATCHES "CMakeFiles/(${target_pattern})\\.dir/")
      set(current "${CMAKE_MATCH_1}")
      math(EXPR checked "${checked} + 1")
    endif()
  elseif(current AND line MATCHES "${door_headers}")
    string(STRIP "${line}" header)
    message(FATAL_ERROR "${current} includes ${header}: the shims and simgpu must build with a "
                        "compiler alone (docs/architecture.md)")
  endif()
endforeach()
# A built tree has at least one object per target (unity batches: one per 8 files; the shims: one
# per file), so fewer than 12 means it was not built.
if(checked LESS 12)
  message(FATAL_ERROR "only ${checked} objects of ${target_pattern} found in ninja's log: build "
                      "${BUILD_DIR} first")
endif()
message(STATUS "${checked} compiler-only objects include no header of the doors' libraries")

# 3. What the shims and simgpu load.
if(NOT READELF)
  message(FATAL_ERROR "readelf not found (binutils)")
endif()
foreach(output IN LISTS compiler_only_outputs)
  execute_process(COMMAND ${READELF} -d ${BUILD_DIR}/${output}
    OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${BUILD_DIR}/${output} failed")
  endif()
  if(dynamic MATCHES "NEEDED[^\n]*(yaml|httplib|ssl|crypto|brotli|libz\\.)")
    message(FATAL_ERROR "${output} needs ${CMAKE_MATCH_1}:\n${dynamic}")
  endif()
endforeach()
message(STATUS "the shims and simgpu need no library of the doors' packages")
