# ckpt.pc, the pkg-config file of the installed library (for projects that do not use CMake):
#   c++ -std=c++20 main.cpp $(pkg-config --cflags --libs ckpt)
# Written at the end of the configure step (deferred), from what the target `ckpt` links then,
# so a dependency added anywhere in the build is seen. Each private dependency maps to a
# pkg-config module (a PkgConfig::<prefix> target, re2::re2) or to a library file (Boost.JSON,
# which has no .pc). ckpt is static unless BUILD_SHARED_LIBS is on: then every link needs the
# private dependencies, so they go to Requires/Libs rather than Requires.private/Libs.private.
# The file is relocatable: its prefix is found from where the .pc file lies (${pcfiledir}).

function(ckpt_write_pkg_config)
  set(requires "eigen3 >= 3.4")  # Eigen3::Eigen, PUBLIC
  set(requires_private "")
  set(libs_private "")
  set(cflags "-pthread")  # Threads::Threads, PUBLIC
  set(libs "-pthread")
  get_target_property(boost_includes Boost::headers INTERFACE_INCLUDE_DIRECTORIES)  # PUBLIC
  foreach(dir IN LISTS boost_includes)
    if(NOT dir STREQUAL "/usr/include")
      string(APPEND cflags " -I${dir}")
    endif()
  endforeach()

  get_target_property(linked ckpt LINK_LIBRARIES)
  set(unknown "")
  foreach(item IN LISTS linked)
    if(item MATCHES "^\\$<BUILD_INTERFACE:" OR item MATCHES "^(Eigen3::Eigen|Boost::headers|Threads::Threads)$")
      continue()  # build-only, or PUBLIC and written above
    elseif(item MATCHES "^PkgConfig::(.+)$")
      list(APPEND requires_private "${${CMAKE_MATCH_1}_MODULE_NAME}")  # pkg_check_modules' module
    elseif(item STREQUAL "re2::re2")
      list(APPEND requires_private "re2")
    elseif(item STREQUAL "Boost::json")
      list(APPEND libs_private "$<TARGET_LINKER_FILE:Boost::json>")
    else()
      list(APPEND unknown "${item}")
    endif()
  endforeach()
  if(unknown)
    message(WARNING "ckpt: ckpt.pc does not know how to name these dependencies of ckpt for "
                    "pkg-config (add them to cmake/pkg-config.cmake): ${unknown}")
  endif()

  get_target_property(type ckpt TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    list(APPEND requires ${requires_private})
    list(APPEND libs ${libs_private})
    set(requires_private "")
    set(libs_private "")
  endif()
  list(JOIN requires ", " CKPT_PC_REQUIRES)
  list(JOIN requires_private ", " CKPT_PC_REQUIRES_PRIVATE)
  list(JOIN libs " " CKPT_PC_LIBS)
  list(JOIN libs_private " " CKPT_PC_LIBS_PRIVATE)
  set(CKPT_PC_CFLAGS "${cflags}")

  set(CKPT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  if(NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    file(RELATIVE_PATH up "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
    string(REGEX REPLACE "/$" "" up "${up}")
    set(CKPT_PC_PREFIX "\${pcfiledir}/${up}")
  endif()
  foreach(dir LIBDIR INCLUDEDIR)
    set(CKPT_PC_${dir} "${CMAKE_INSTALL_${dir}}")
    if(NOT IS_ABSOLUTE "${CKPT_PC_${dir}}")
      set(CKPT_PC_${dir} "\${prefix}/${CKPT_PC_${dir}}")
    endif()
  endforeach()
  configure_file("${PROJECT_SOURCE_DIR}/cmake/ckpt.pc.in" "${PROJECT_BINARY_DIR}/ckpt.pc.in" @ONLY)
  file(GENERATE OUTPUT "${PROJECT_BINARY_DIR}/ckpt.pc" INPUT "${PROJECT_BINARY_DIR}/ckpt.pc.in")
endfunction()

cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}" CALL ckpt_write_pkg_config)
install(FILES "${PROJECT_BINARY_DIR}/ckpt.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
