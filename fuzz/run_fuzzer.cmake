# Runs one libFuzzer target for a fixed time on a copy of its seed corpus (cmake -P script).
#
# Inputs: FUZZER (executable), SEEDS (seed corpus in the source tree, only read), WORK (a
# directory in the build tree: work/corpus grows there, work/artifacts gets crashing inputs),
# DICT (optional dictionary), SECONDS. Fails when the fuzzer finds a crash or a broken invariant.
foreach(var FUZZER SEEDS WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${var}=... is required")
  endif()
endforeach()

file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)

set(args -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
    -artifact_prefix=${WORK}/artifacts/)
if(DICT)
  list(APPEND args -dict=${DICT})
endif()
message(STATUS "running: ${FUZZER} ${args} ${WORK}/corpus")
execute_process(COMMAND ${FUZZER} ${args} ${WORK}/corpus RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed (${rc}); the crashing input is in ${WORK}/artifacts/")
endif()
