# ckpt.pc, the pkg-config file of the installed library (for projects that do not use CMake):
#   c++ -std=c++20 main.cpp $(pkg-config --static --cflags --libs ckpt)
# Written at the end of the configure step (deferred), from what the target `ckpt` links then,
# so a dependency added anywhere in the build is seen. Each private dependency maps to a
# pkg-config module (a PkgConfig::<prefix> target, re2::re2) or to a library named by its name
# (Boost.JSON, which has no .pc: -lboost_json, with -L<its folder> only where the linker does not
# search anyway), never by a file of this machine. As pkg-config intends, the private ones go to
# Requires.private and Libs.private, whatever the kind of library: a link against a shared ckpt
# needs none of them (`pkg-config --libs ckpt`), a link against a static one (the default, unless
# BUILD_SHARED_LIBS is on) takes them with `pkg-config --static --libs ckpt`.
# The file is relocatable: its prefix is found from where the .pc file lies (${pcfiledir}).

# The link flags that name the library file `file` portably: `-l<name>` (lib<name>.so.1.2.3,
# lib<name>.a, lib<name>.dylib), after `-L<folder>` if the linker does not search its folder by
# itself; the file's path if it is not named so. Sets `out` in the caller.
function(ckpt_pkg_config_library file out)
  get_filename_component(dir "${file}" DIRECTORY)
  get_filename_component(name "${file}" NAME)
  if(NOT name MATCHES "^lib(.+)\\.(so|a|dylib)(\\.[0-9.]+)?$")
    set(${out} "${file}" PARENT_SCOPE)
    return()
  endif()
  set(flags "-l${CMAKE_MATCH_1}")
  if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(flags "-L${dir}" "${flags}")
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

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
    elseif(item STREQUAL "CURL::libcurl")
      # By name, not as a Requires.private module: libcurl.pc's own private dependencies (nghttp2,
      # ssh2, ldap...) have no -dev package installed with libcurl4-openssl-dev, and the shared
      # libcurl that a static ckpt links needs none of them.
      list(APPEND libs_private "-lcurl")
    elseif(item STREQUAL "Boost::json")
      get_target_property(file Boost::json LOCATION)
      ckpt_pkg_config_library("${file}" flags)
      list(APPEND libs_private ${flags})
    else()
      list(APPEND unknown "${item}")
    endif()
  endforeach()
  if(unknown)
    message(WARNING "ckpt: ckpt.pc does not know how to name these dependencies of ckpt for "
                    "pkg-config (add them to cmake/pkg-config.cmake): ${unknown}")
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
