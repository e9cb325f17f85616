# gpupool_test(NAME SOURCES a_test.cc ... LIBS lib ... [LABELS l ...])
# One GoogleTest executable; its cases are listed at test time so ctest shows each, or with
# GPUPOOL_TEST_WHOLE_EXECUTABLES it is one ctest test, named NAME, that runs them all.
# With LABELS slow and GPUPOOL_BUILD_SLOW_TESTS=OFF, neither the executable nor its tests exist.
# GPUPOOL_TEST_COMPILE_OPTIONS (a list) is added to its own sources' flags, after the
# build type's, so a later -O wins.
function(gpupool_test name)
  if(NOT GPUPOOL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if("slow" IN_LIST T_LABELS AND NOT GPUPOOL_BUILD_SLOW_TESTS)
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  if(GPUPOOL_TEST_COMPILE_OPTIONS)
    target_compile_options(${name} PRIVATE ${GPUPOOL_TEST_COMPILE_OPTIONS})
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    GPUPOOL_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    GPUPOOL_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(props ENVIRONMENT "GPUPOOL_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(T_LABELS)
    list(APPEND props LABELS "${T_LABELS}")
  endif()
  if(GPUPOOL_TEST_WHOLE_EXECUTABLES)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES ${props})
  else()
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ${props})
  endif()
endfunction()

include(GoogleTest)
