# The consumer_add_subdirectory test: configures, builds and runs tests/consumer/subdirectory,
# which adds ckpt's source folder with add_subdirectory, under WORK_DIR (wiped first), with this
# build's compiler and flags.
#
# cmake -DCKPT_SOURCE_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=...
#       [-DMAKE_PROGRAM=...] -DCXX_COMPILER=... [-DCXX_FLAGS=...] [-DEXE_LINKER_FLAGS=...]
#       [-DBUILD_TYPE=...] -P run_subdirectory.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var CKPT_SOURCE_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_subdirectory.cmake: -D${var}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run step)
  message(STATUS "consumer: ${step}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer: ${step} failed (${result})")
  endif()
endfunction()

set(build "${WORK_DIR}/build")
set(configure_args
  -S "${CONSUMER_SOURCE_DIR}/subdirectory" -B "${build}" -G "${GENERATOR}"
  "-DCKPT_SOURCE_DIR=${CKPT_SOURCE_DIR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${EXE_LINKER_FLAGS}"
  # The library alone: no MPI component, whatever the machine has.
  -DCKPT_BUILD_MPI=OFF)
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
run("configure with add_subdirectory(${CKPT_SOURCE_DIR})" "${CMAKE_COMMAND}" ${configure_args})
run("build" "${CMAKE_COMMAND}" --build "${build}")
run("run ckpt_consumer" "${build}/ckpt_consumer" "${WORK_DIR}/consumer.safetensors")
