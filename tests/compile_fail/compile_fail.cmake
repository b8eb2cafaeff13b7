# Included from tests/CMakeLists.txt: compile checks. Each case is an OBJECT library excluded
# from `all`; its CTest test builds it with `cmake --build <build dir> --target <it>` through
# check.cmake, which requires the build to fail with the exact "ckpt:" diagnostic and the
# offending type in the compiler's output, or, for the positive control, to succeed.
# The checks run Ninja/Make in this build tree, so they take a lock and run one at a time.

set(CKPT_DIAG_NOT_NAMED "ckpt: this type (see the instantiation below) is neither a leaf")
set(CKPT_DIAG_SCALAR "ckpt: unsupported scalar type (see the instantiation below): safetensors has no dtype for it")

# ckpt_add_compile_check(NAME SOURCE fail|succeed [MESSAGE text] [TYPE_REGEX regex])
function(ckpt_add_compile_check name source expect)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "MESSAGE;TYPE_REGEX" "")
  add_library(${name} OBJECT EXCLUDE_FROM_ALL "${CMAKE_CURRENT_LIST_DIR}/${source}")
  target_link_libraries(${name} PRIVATE ckpt::ckpt ckpt_warnings)
  set(args "-DBUILD_DIR=${ckpt_BINARY_DIR}" "-DTARGET=${name}" "-DEXPECT=${expect}")
  if(DEFINED arg_MESSAGE)
    list(APPEND args "-DEXPECT_MESSAGE=${arg_MESSAGE}")
  endif()
  if(DEFINED arg_TYPE_REGEX)
    list(APPEND args "-DTYPE_REGEX=${arg_TYPE_REGEX}")
  endif()
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} ${args} -P "${CMAKE_CURRENT_LIST_DIR}/check.cmake")
  set_tests_properties(${name} PROPERTIES RESOURCE_LOCK ckpt_build_tree TIMEOUT 300)
endfunction()

ckpt_add_compile_check(compile_check_control control_ok.cpp succeed)
ckpt_add_compile_check(compile_fail_string_field non_leaf_field_string.cpp fail
  MESSAGE "${CKPT_DIAG_NOT_NAMED}" TYPE_REGEX "not_a_named_structure<std::(__cxx11::)?basic_string<char")
ckpt_add_compile_check(compile_fail_set_field non_leaf_field_set.cpp fail
  MESSAGE "${CKPT_DIAG_NOT_NAMED}" TYPE_REGEX "not_a_named_structure<std::set<int")
ckpt_add_compile_check(compile_fail_long_double_field long_double_field.cpp fail
  MESSAGE "${CKPT_DIAG_SCALAR}" TYPE_REGEX "unsupported_scalar<long double>")
ckpt_add_compile_check(compile_fail_char_matrix char_matrix_leaf.cpp fail
  MESSAGE "${CKPT_DIAG_SCALAR}" TYPE_REGEX "unsupported_scalar<char>")
ckpt_add_compile_check(compile_fail_adam_user_leaf adam_user_leaf.cpp fail
  MESSAGE "ckpt: adam cannot train a leaf of this type: wrap it in ckpt::frozen<T>" TYPE_REGEX "(trains<lookup_table>|L = lookup_table)")
ckpt_add_compile_check(compile_fail_adam_half_leaf adam_half_leaf.cpp fail
  MESSAGE "ckpt: adam trains float and double leaves and leaves integer and bool leaves alone; wrap a leaf of another scalar type (Eigen::half, Eigen::bfloat16, std::complex<float>) in ckpt::frozen<T>"
  TYPE_REGEX "Eigen::Matrix<Eigen::half")
