# The consumer_find_package test: installs the current ckpt build tree into a fresh prefix,
# configures and builds tests/consumer against that prefix with find_package(ckpt CONFIG
# REQUIRED), and runs the result. Everything happens under WORK_DIR, which is wiped first.
#
# cmake -DCKPT_BUILD_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=...
#       [-DMAKE_PROGRAM=...] -DCXX_COMPILER=... [-DCXX_FLAGS=...] [-DEXE_LINKER_FLAGS=...]
#       [-DBUILD_TYPE=...] -P run.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var CKPT_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
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
run("install ${CKPT_BUILD_DIR} into ${prefix}"
    "${CMAKE_COMMAND}" --install "${CKPT_BUILD_DIR}" --prefix "${prefix}" ${config_args})

set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${build}" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
  # Only the fresh prefix may provide ckpt: not a package registry, not /usr/local.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
run("configure ${CONSUMER_SOURCE_DIR}" "${CMAKE_COMMAND}" ${configure_args})

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

run("build" "${CMAKE_COMMAND}" --build "${build}" ${config_args})
run("run ckpt_consumer" "${build}/ckpt_consumer" "${WORK_DIR}/consumer.safetensors")
