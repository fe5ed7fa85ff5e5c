# Helpers every folder uses. One library per folder; the dependency table below is the single
# place where the direction of docs/architecture.md is written down for the build. The include
# checker (tests/layering/check_layering.py) enforces the same table on #include lines.

# Folder -> folders it may depend on (besides itself).
set(REGCACHE_ALLOWED_base "")
set(REGCACHE_ALLOWED_umr "base")
set(REGCACHE_ALLOWED_hca "base;umr")
set(REGCACHE_ALLOWED_hca_sim "base;umr;hca")
set(REGCACHE_ALLOWED_hca_mlx5 "base;umr;hca;hca/verbs")
set(REGCACHE_ALLOWED_hca_verbs "base;umr;hca")
# The emulated ConnectX (tests only): rdma-core's entry points over the sim's device core.
set(REGCACHE_ALLOWED_hca_mlx5emu "base;umr;hca;hca/sim")
set(REGCACHE_ALLOWED_cache "base;umr;hca")
set(REGCACHE_ALLOWED_odp "base;umr;hca;cache")
set(REGCACHE_ALLOWED_service "base;umr;hca;cache;odp;protocol")
# The two towers over one protocol (docs/architecture.md): the wire formats both ends share, the
# client library on them alone, the daemon's front-ends on the service, the programs on the
# client.
set(REGCACHE_ALLOWED_protocol "base")
set(REGCACHE_ALLOWED_client "base;protocol")
set(REGCACHE_ALLOWED_server "base;umr;hca;cache;odp;service;protocol")
set(REGCACHE_ALLOWED_tools "base;protocol;client")

# Folder path ("hca/sim") -> target name ("regcache_hca_sim").
function(regcache_target_name folder out)
  string(REPLACE "/" "_" t "${folder}")
  set(${out} "regcache_${t}" PARENT_SCOPE)
endfunction()

# regcache_library(FOLDER <folder> SRCS ... PUBLIC_HEADERS ... [FOLDER_DEPS <folders>]
#                  [EXTERNAL_DEPS <targets>] [OBJECTS <object library>])
#
# Declares the folder's library. FOLDER_DEPS must be a subset of the folder's allowed list;
# anything else is a configure error, so an upward dependency cannot be linked by accident.
#
# PUBLIC_HEADERS are the headers other folders (and applications) may include: paths relative to
# the folder, or to the project root for the client's "include/regcache/..." headers. Everything
# else the folder has is private and lives under <folder>/internal/: a header at the top of the
# folder that is not declared public is a configure error, and tests/layering refuses an include
# of another folder's internal/ headers.
#
# OBJECTS: the archive is made of an object library's objects (compiled once for both the
# archive and a shared library, as client/ does for libregcache.so).
function(regcache_library)
  cmake_parse_arguments(A "" "FOLDER;OBJECTS" "SRCS;PUBLIC_HEADERS;FOLDER_DEPS;EXTERNAL_DEPS" ${ARGN})
  string(REPLACE "/" "_" key "${A_FOLDER}")
  if(NOT DEFINED REGCACHE_ALLOWED_${key})
    message(FATAL_ERROR "regcache_library: unknown folder '${A_FOLDER}' (add it to cmake/Regcache.cmake)")
  endif()
  foreach(dep IN LISTS A_FOLDER_DEPS)
    if(NOT dep IN_LIST REGCACHE_ALLOWED_${key})
      message(FATAL_ERROR "regcache_library: '${A_FOLDER}' may not depend on '${dep}' "
                          "(allowed: ${REGCACHE_ALLOWED_${key}})")
    endif()
  endforeach()
  set(public "")
  set(include_root OFF)
  foreach(h IN LISTS A_PUBLIC_HEADERS)
    if(h MATCHES "^include/")
      set(path ${PROJECT_SOURCE_DIR}/${h})
      set(include_root ON)
    else()
      set(path ${PROJECT_SOURCE_DIR}/${A_FOLDER}/${h})
    endif()
    if(NOT EXISTS ${path})
      message(FATAL_ERROR "regcache_library: '${A_FOLDER}' declares public header '${h}', which does not exist")
    endif()
    list(APPEND public ${path})
  endforeach()
  file(GLOB top_headers ${PROJECT_SOURCE_DIR}/${A_FOLDER}/*.h)
  foreach(h IN LISTS top_headers)
    get_filename_component(name ${h} NAME)
    if(NOT h IN_LIST public AND NOT name STREQUAL "test_util.h")
      message(FATAL_ERROR "regcache_library: ${A_FOLDER}/${name} is not declared in PUBLIC_HEADERS; "
                          "a private header belongs in ${A_FOLDER}/internal/")
    endif()
  endforeach()
  regcache_target_name("${A_FOLDER}" target)
  if(A_OBJECTS)
    add_library(${target} STATIC ${A_SRCS} $<TARGET_OBJECTS:${A_OBJECTS}>)
  else()
    add_library(${target} STATIC ${A_SRCS})
  endif()
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  if(include_root)
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  endif()
  foreach(dep IN LISTS A_FOLDER_DEPS)
    regcache_target_name("${dep}" dep_target)
    target_link_libraries(${target} PUBLIC ${dep_target})
  endforeach()
  target_link_libraries(${target} PUBLIC ${A_EXTERNAL_DEPS})
  set_property(GLOBAL APPEND PROPERTY REGCACHE_LIBRARIES ${target})
endfunction()

# Gives a test (and every process it spawns) the sanitizer settings of this build: under
# ThreadSanitizer, the suppressions for Debian's uninstrumented libraries (tests/tsan.supp).
# Every add_test in the project calls it.
function(regcache_test_env test)
  if(CMAKE_CXX_FLAGS MATCHES "sanitize=thread")
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
                 "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp halt_on_error=1")
  endif()
endfunction()

# Precompiled headers for the tests: the test framework and the Abseil headers nearly every test
# includes are parsed once per build (by regcache_test_pch) instead of once per test file, which
# saves about 1.5 s of each test's compile and a quarter of a cold `make test`. Only headers of
# Debian packages go in, so the header is built once per build folder and never goes stale.
option(REGCACHE_TEST_PCH "Precompile the headers every test includes" ON)
# Flags for the tests' own sources (and their precompiled header, which must match them). The
# dev preset sets -O1 (its -g1 applies to everything): a fifth less compile time than -O2 for
# these template-heavy files, whose work is in the libraries they call.
set(REGCACHE_TEST_FLAGS "" CACHE STRING "Extra compile flags for test sources")
function(regcache_use_test_pch target)
  if(REGCACHE_TEST_FLAGS)
    separate_arguments(flags UNIX_COMMAND "${REGCACHE_TEST_FLAGS}")
    target_compile_options(${target} PRIVATE ${flags})
  endif()
  if(NOT REGCACHE_TEST_PCH)
    return()
  endif()
  # One set of flags for all: GCC uses the header only where the predefined macros match, and
  # some tests get -pthread (so _REENTRANT) from the libraries they link.
  target_compile_options(${target} PRIVATE -pthread)
  if(NOT TARGET regcache_test_pch)
    set(src ${PROJECT_BINARY_DIR}/test_pch/test_pch.cc)
    file(CONFIGURE OUTPUT ${src} CONTENT "// Builds the tests' precompiled header (cmake/Regcache.cmake).\n")
    add_library(regcache_test_pch OBJECT ${src})
    target_link_libraries(regcache_test_pch PRIVATE GTest::gtest GTest::gmock absl::status
                          absl::statusor absl::strings absl::str_format absl::synchronization
                          absl::time absl::flat_hash_map)
    target_compile_options(regcache_test_pch PRIVATE -pthread ${flags})
    target_precompile_headers(regcache_test_pch PRIVATE
      <atomic> <map> <memory> <string> <thread> <vector>
      <gmock/gmock.h> <gtest/gtest.h>
      <absl/container/flat_hash_map.h> <absl/status/status.h> <absl/status/statusor.h>
      <absl/strings/str_cat.h> <absl/strings/str_format.h> <absl/synchronization/mutex.h>
      <absl/time/time.h>)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      # Without a timestamp in it the header is the same bytes each time, so ccache can reuse
      # what was compiled against it.
      target_compile_options(regcache_test_pch PRIVATE "SHELL:-Xclang -fno-pch-timestamp")
    endif()
  endif()
  target_precompile_headers(${target} REUSE_FROM regcache_test_pch)
endfunction()

# regcache_test(NAME <name> SRCS ... DEPS <targets> LABELS <unit|integration|vm|hw> [TIMEOUT s])
# One ctest entry per test binary, labelled so `make test` can pick what this machine can run.
function(regcache_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  regcache_use_test_pch(${A_NAME})
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
  regcache_test_env(${A_NAME})
endfunction()

# regcache_benchmark(NAME <name> SRCS ... DEPS <targets>)
function(regcache_benchmark)
  cmake_parse_arguments(A "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${A_NAME} ${A_SRCS})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} benchmark::benchmark)
endfunction()

# One generated translation unit per public header (every .h under a library folder, except
# test_util.h helpers), compiled into an object library: a header that does not include what it uses
# breaks the build.
function(regcache_check_headers)
  get_property(libs GLOBAL PROPERTY REGCACHE_LIBRARIES)
  if(NOT libs)
    return()
  endif()
  set(srcs "")
  foreach(folder base umr hca cache odp service protocol client server tools include)
    file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${folder}/*.h)
    list(FILTER headers EXCLUDE REGEX "(^|/)test_util\\.h$")  # test-only, needs gtest
    foreach(h IN LISTS headers)
      # A header whose own source includes it first is compiled on its own there already (the
      # library sources build without the tests' precompiled header): no second proof needed.
      string(REGEX REPLACE "\\.h$" ".cc" own ${h})
      if(EXISTS ${PROJECT_SOURCE_DIR}/${own})
        file(STRINGS ${PROJECT_SOURCE_DIR}/${own} first REGEX "^#include " LIMIT_COUNT 1)
        if(first STREQUAL "#include \"${h}\"")
          continue()
        endif()
      endif()
      string(MAKE_C_IDENTIFIER "${h}" id)
      set(tu ${PROJECT_BINARY_DIR}/header_check/${id}.cc)
      file(CONFIGURE OUTPUT ${tu} CONTENT "#include \"${h}\"  // must compile on its own\n")
      list(APPEND srcs ${tu})
    endforeach()
  endforeach()
  add_library(regcache_header_check OBJECT ${srcs})
  target_link_libraries(regcache_header_check PRIVATE ${libs})
  list(LENGTH srcs n)
  message(STATUS "header self-compile: ${n} headers without a source that includes them first")
  # Only whether each compiles matters: no optimiser, no debug info (a fifth of its time).
  target_compile_options(regcache_header_check PRIVATE -O0 -g0)
endfunction()
