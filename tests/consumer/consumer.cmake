# Included from tests/CMakeLists.txt: registers consumer_find_package, which installs this
# build tree into a fresh prefix and builds and runs tests/consumer against it with
# find_package(ckpt CONFIG REQUIRED), using this build's compiler and flags (so a sanitizer
# build links the sanitizer runtime into the consumer too).
add_test(NAME consumer_find_package
  COMMAND ${CMAKE_COMMAND}
    "-DCKPT_BUILD_DIR=${ckpt_BINARY_DIR}"
    "-DCONSUMER_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}"
    "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumer"
    "-DGENERATOR=${CMAKE_GENERATOR}"
    "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
    "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
    "-DCXX_FLAGS=${CMAKE_CXX_FLAGS}"
    "-DEXE_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
    "-DBUILD_TYPE=$<CONFIG>"
    -P "${CMAKE_CURRENT_LIST_DIR}/run.cmake")
set_tests_properties(consumer_find_package PROPERTIES TIMEOUT 600)

# consumer_add_subdirectory: a project that builds ckpt from this source tree with
# add_subdirectory (tests/consumer/subdirectory), as a vendored or FetchContent copy is built.
add_test(NAME consumer_add_subdirectory
  COMMAND ${CMAKE_COMMAND}
    "-DCKPT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "-DCONSUMER_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}"
    "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumer_subdirectory"
    "-DGENERATOR=${CMAKE_GENERATOR}"
    "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
    "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
    "-DCXX_FLAGS=${CMAKE_CXX_FLAGS}"
    "-DEXE_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
    "-DBUILD_TYPE=$<CONFIG>"
    -P "${CMAKE_CURRENT_LIST_DIR}/run_subdirectory.cmake")
set_tests_properties(consumer_add_subdirectory PROPERTIES TIMEOUT 900)
