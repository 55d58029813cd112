# Helpers shared by every folder's CMakeLists.txt.

# tessera_test(NAME SOURCES... [LIBS libs...] [LABELS labels...] [TIMEOUT seconds] [ARGS args...])
# ARGS are passed to the test program by CTest (e.g. a --gtest_filter).
# The label `timing` marks a test whose bounds are times or GPU-time shares and which runs several
# tenant processes flat out: such a test runs alone (RUN_SERIAL). Two of them on a 2-core CI
# machine starve each other's launchers, and so does any busy neighbour: with only one another
# timing test kept away (the lock this replaced), the chaos test beside the demo saw a 625 ms
# launch against its 500 ms bound under ASan, and the 30/70 share test got 25/57.
# A GoogleTest executable registered with CTest. Every test has a time bound.
function(tessera_test name)
  if(NOT TESSERA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  # Test files name their helpers freely (kName, Parse, ...): each compiles on its own.
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests
    UNITY_BUILD OFF)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "TESSERA_BUILD_DIR=${CMAKE_BINARY_DIR}")
  if("timing" IN_LIST T_LABELS)
    set_tests_properties(${name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endfunction()
