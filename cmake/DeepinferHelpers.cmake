# Two-line declarations for libraries, executables and tests.
#
#   di_add_library(di_io SOURCES safetensors.cpp config.cpp DEPS di_common nlohmann_json::nlohmann_json)
#   di_add_test(io_safetensors_test SOURCES safetensors_test.cpp DEPS di_io LABELS unit)
#
# Every deepinfer target gets the same warnings and sees `src/` and `include/` as include roots,
# so headers are included as "common/status.h", "io/safetensors.h", "deepinfer/llm.h".

set(DEEPINFER_WARNINGS -Wall -Wextra -Wpedantic -Wno-unused-parameter)

function(_di_common_target_setup target)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DEEPINFER_WARNINGS}>)
endfunction()

function(di_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  _di_common_target_setup(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

function(di_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  _di_common_target_setup(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# di_add_test(name SOURCES ... DEPS ... [LABELS unit|model|gpu ...] [TIMEOUT s] [ENV K=V ...])
# Tests run from the source root so fixture paths like tests/data/... resolve on any clone.
function(di_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS;ENV" ${ARGN})
  if(NOT DEEPINFER_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  _di_common_target_setup(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE DEEPINFER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  if(ARG_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${ARG_ENV}")
  endif()
endfunction()
