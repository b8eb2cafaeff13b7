# Runs one compile check: builds TARGET in the build tree BUILD_DIR and
#  - EXPECT=fail:    requires the build to fail with output that contains EXPECT_MESSAGE (the
#                    exact "ckpt:" static_assert text) and matches TYPE_REGEX (the offending
#                    type, from the instantiation context), so it failed for the right reason;
#  - EXPECT=succeed: requires the build to succeed (the harness's positive control).
# Usage: cmake -DBUILD_DIR=... -DTARGET=... -DEXPECT=fail|succeed
#              [-DEXPECT_MESSAGE=...] [-DTYPE_REGEX=...] -P check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var BUILD_DIR TARGET EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check.cmake: -D${var}=... is required")
  endif()
endforeach()

# A failing target leaves no object behind, so every run compiles it again; the control is
# rebuilt whenever a header it includes changes (Ninja and Make track header dependencies).
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")

if(EXPECT STREQUAL "succeed")
  if(NOT result EQUAL 0)
    message("${output}")
    message(FATAL_ERROR "compile check ${TARGET}: the positive control did not build (exit ${result})")
  endif()
  message(STATUS "compile check ${TARGET}: builds, as expected")
  return()
endif()

if(result EQUAL 0)
  message(FATAL_ERROR "compile check ${TARGET}: it built, but it must not compile")
endif()
string(FIND "${output}" "${EXPECT_MESSAGE}" at)
if(at EQUAL -1)
  message("${output}")
  message(FATAL_ERROR "compile check ${TARGET}: the build failed (exit ${result}), but not with "
                      "the expected diagnostic:\n  ${EXPECT_MESSAGE}")
endif()
if(DEFINED TYPE_REGEX AND NOT output MATCHES "${TYPE_REGEX}")
  message("${output}")
  message(FATAL_ERROR "compile check ${TARGET}: the diagnostic does not name the offending type "
                      "(no match for '${TYPE_REGEX}')")
endif()
message(STATUS "compile check ${TARGET}: fails with the expected diagnostic:\n  ${EXPECT_MESSAGE}")
