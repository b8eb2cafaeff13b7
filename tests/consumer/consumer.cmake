# Included from tests/CMakeLists.txt: the consumer tests (run.cmake), one for each way a project
# gets ckpt: consumer_find_package (an install of this build, tests/consumer/),
# consumer_add_subdirectory (this source tree, tests/consumer/subdirectory/) and
# consumer_pkg_config (an install of this build, tests/consumer/main.cpp compiled with the flags of
# `pkg-config --cflags --libs ckpt`, with --static for a static ckpt).
foreach(mode find_package add_subdirectory pkg_config)
  add_test(NAME consumer_${mode}
    COMMAND ${CMAKE_COMMAND}
      "-DMODE=${mode}"
      "-DCKPT_BUILD_DIR=${ckpt_BINARY_DIR}"
      "-DCKPT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      "-DCONSUMER_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}"
      "-DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumer_${mode}"
      "-DGENERATOR=${CMAKE_GENERATOR}"
      "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
      "-DCXX_COMPILER=${CMAKE_CXX_COMPILER}"
      "-DCXX_FLAGS=${CMAKE_CXX_FLAGS}"
      "-DUNITY_BUILD=${CKPT_UNITY_BUILD}"
      "-DEXE_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
      "-DBUILD_TYPE=$<CONFIG>"
      "-DLIBDIR=${CMAKE_INSTALL_LIBDIR}"
      "-DPKG_CONFIG=${PKG_CONFIG_EXECUTABLE}"
      "-DCKPT_STATIC=$<STREQUAL:$<TARGET_PROPERTY:ckpt,TYPE>,STATIC_LIBRARY>"
      -P "${CMAKE_CURRENT_LIST_DIR}/run.cmake")
  # Label `packaging`: they check how a project gets ckpt, not the library's code, so the sanitizer
  # stages of scripts/ckpt-dev do not run them again (their ASan build of the whole library, for
  # add_subdirectory, cost more than any suite).
  set_tests_properties(consumer_${mode} PROPERTIES TIMEOUT 900 LABELS packaging)
endforeach()
