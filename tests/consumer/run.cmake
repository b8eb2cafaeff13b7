# The consumer tests: builds and runs a tiny project that uses ckpt the way a user would, under
# WORK_DIR (wiped first), with the compiler and flags of the build under test (so a sanitizer
# build links the sanitizer runtime into the consumer too). MODE says how the project gets ckpt:
#   find_package      installs CKPT_BUILD_DIR into a fresh prefix and builds tests/consumer
#                     against it with find_package(ckpt CONFIG REQUIRED);
#   add_subdirectory  builds tests/consumer/subdirectory, which adds CKPT_SOURCE_DIR with
#                     add_subdirectory (as a vendored or FetchContent copy is built);
#   pkg_config        installs CKPT_BUILD_DIR into a fresh prefix and compiles tests/consumer/main.cpp
#                     with one compiler command and `pkg-config --cflags --libs ckpt` (no CMake),
#                     with PKG_CONFIG_PATH=<prefix>/LIBDIR/pkgconfig; with --static where ckpt is
#                     a static library (CKPT_STATIC true), as pkg-config has it take the private
#                     dependencies; and checks that ckpt.pc names no library file of this machine.
#
# cmake -DMODE=... -DCKPT_BUILD_DIR=... -DCKPT_SOURCE_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=...
#       -DGENERATOR=... [-DMAKE_PROGRAM=...] -DCXX_COMPILER=... [-DCXX_FLAGS=...]
#       [-DEXE_LINKER_FLAGS=...] [-DBUILD_TYPE=...] [-DUNITY_BUILD=ON|OFF] [-DLIBDIR=... -DPKG_CONFIG=... -DCKPT_STATIC=0|1]
#       -P run.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var MODE CKPT_BUILD_DIR CKPT_SOURCE_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run step)
  message(STATUS "consumer: ${step}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer: ${step} failed (${result})")
  endif()
endfunction()

set(config_args)
if(BUILD_TYPE)
  set(config_args --config "${BUILD_TYPE}")
endif()
set(configure_args -B "${build}" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()

if(MODE STREQUAL "find_package")
  run("install ${CKPT_BUILD_DIR} into ${prefix}"
      "${CMAKE_COMMAND}" --install "${CKPT_BUILD_DIR}" --prefix "${prefix}" ${config_args})
  run("configure ${CONSUMER_SOURCE_DIR}" "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" ${configure_args}
      "-DCMAKE_PREFIX_PATH=${prefix}"
      # Only the fresh prefix may provide ckpt: not a package registry, not /usr/local.
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
  # Prove that find_package took the copy just installed.
  file(STRINGS "${build}/CMakeCache.txt" found REGEX "^ckpt_DIR:")
  string(REGEX REPLACE "^ckpt_DIR:[A-Z]+=" "" found "${found}")
  file(REAL_PATH "${prefix}" real_prefix)
  if(EXISTS "${found}")
    file(REAL_PATH "${found}" found)
  endif()
  string(FIND "${found}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "consumer: find_package(ckpt) found '${found}', not the install in ${prefix}")
  endif()
  message(STATUS "consumer: ckpt_DIR=${found}")
elseif(MODE STREQUAL "add_subdirectory")
  # The library alone: no MPI component, whatever the machine has.
  # The library alone, and unoptimized (no build type: the flags of the build under test, its
  # sanitizers, and no -O): what is checked is that ckpt builds and links as a subproject, and a
  # whole library built at -O0 takes a third of the time the build type's flags would.
  run("configure with add_subdirectory(${CKPT_SOURCE_DIR})" "${CMAKE_COMMAND}"
      -S "${CONSUMER_SOURCE_DIR}/subdirectory" ${configure_args} "-DCKPT_SOURCE_DIR=${CKPT_SOURCE_DIR}"
      -DCKPT_BUILD_MPI=OFF -DCMAKE_BUILD_TYPE= "-DCKPT_UNITY_BUILD=${UNITY_BUILD}")
  set(config_args)
elseif(MODE STREQUAL "pkg_config")
  foreach(var LIBDIR PKG_CONFIG)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
      message(FATAL_ERROR "run.cmake: MODE=pkg_config needs -D${var}=...")
    endif()
  endforeach()
  run("install ${CKPT_BUILD_DIR} into ${prefix}"
      "${CMAKE_COMMAND}" --install "${CKPT_BUILD_DIR}" --prefix "${prefix}" ${config_args})
  # Only the fresh prefix may provide ckpt.pc (PKG_CONFIG_PATH is searched first).
  set(ENV{PKG_CONFIG_PATH} "${prefix}/${LIBDIR}/pkgconfig")
  set(pkg_config_args --cflags --libs)
  if(CKPT_STATIC)
    list(PREPEND pkg_config_args --static)
  endif()
  list(JOIN pkg_config_args " " shown_args)
  execute_process(COMMAND "${PKG_CONFIG}" ${pkg_config_args} ckpt RESULT_VARIABLE result
                  OUTPUT_VARIABLE flags ERROR_VARIABLE error OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer: pkg-config ${shown_args} ckpt failed (${result}): ${error}")
  endif()
  message(STATUS "consumer: pkg-config ${shown_args} ckpt: ${flags}")
  # Portable: libraries by name (-lboost_json), in the fields pkg-config means for them.
  file(READ "${prefix}/${LIBDIR}/pkgconfig/ckpt.pc" pc)
  if(pc MATCHES "[^ \n]*/lib[^ /\n]*\\.(so|a|dylib)[^ \n]*")
    message(FATAL_ERROR "consumer: ckpt.pc names the library file '${CMAKE_MATCH_0}', not a library by its name")
  endif()
  if(NOT pc MATCHES "\nLibs\\.private:[^\n]*-lboost_json")
    message(FATAL_ERROR "consumer: ckpt.pc's Libs.private does not name -lboost_json:\n${pc}")
  endif()
  # Prove that the flags name the copy just installed.
  file(REAL_PATH "${prefix}" real_prefix)
  execute_process(COMMAND "${PKG_CONFIG}" --variable=includedir ckpt OUTPUT_VARIABLE includedir
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  file(REAL_PATH "${includedir}" includedir)
  if(NOT includedir STREQUAL "${real_prefix}/include")
    message(FATAL_ERROR "consumer: ckpt.pc's includedir is '${includedir}', not the install in ${prefix}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  separate_arguments(cxx_flags UNIX_COMMAND "${CXX_FLAGS} ${EXE_LINKER_FLAGS}")
  file(MAKE_DIRECTORY "${build}")
  run("compile ${CONSUMER_SOURCE_DIR}/main.cpp with pkg-config's flags"
      "${CXX_COMPILER}" -std=c++20 ${cxx_flags} "${CONSUMER_SOURCE_DIR}/main.cpp" -o "${build}/ckpt_consumer" ${flags})
else()
  message(FATAL_ERROR "run.cmake: MODE must be find_package, add_subdirectory or pkg_config, not '${MODE}'")
endif()

if(NOT MODE STREQUAL "pkg_config")
  run("build" "${CMAKE_COMMAND}" --build "${build}" ${config_args})
endif()
run("run ckpt_consumer" "${build}/ckpt_consumer" "${WORK_DIR}/consumer.safetensors")
