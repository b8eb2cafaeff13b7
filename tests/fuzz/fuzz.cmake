# Untrusted input. test_untrusted: claimed sizes at their limits, names and UTF-8. And the
# checks of tests/fuzz/exercise.hpp on arbitrary bytes, run two ways:
#  - test_corpus replays every file of tests/corpus/ in the ordinary builds (g++, clang + ASan),
#  - fuzz_load, the libFuzzer target (-DCKPT_BUILD_FUZZ=ON, clang only), which tests/fuzz/run.sh
#    builds in a folder whose whole build, ckpt included, has
#    -fsanitize=fuzzer-no-link,address,undefined in CMAKE_CXX_FLAGS.
# Beside it fuzz_torch (the torch.save reader) and fuzz_s3_xml (S3's XML answers).

ckpt_add_test(test_corpus IN core test_corpus.cpp)
ckpt_add_test(test_untrusted IN allocations test_untrusted.cpp)
target_compile_definitions(ckpt_tests_core PRIVATE CKPT_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/corpus")

if(CKPT_BUILD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "CKPT_BUILD_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  add_executable(fuzz_load fuzz/fuzz_load.cpp)
  target_link_libraries(fuzz_load PRIVATE ckpt::ckpt ckpt_warnings)
  target_compile_options(fuzz_load PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_load PRIVATE -fsanitize=fuzzer)
  # The torch.save reader (zip records and the restricted unpickler).
  add_executable(fuzz_torch fuzz/fuzz_torch.cpp)
  target_link_libraries(fuzz_torch PRIVATE ckpt::ckpt ckpt_warnings)
  target_compile_options(fuzz_torch PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_torch PRIVATE -fsanitize=fuzzer)
  # The readers of S3's XML answers (src/s3/xml.hpp), when ckpt has S3 support.
  if(CKPT_WITH_S3)
    add_executable(fuzz_s3_xml fuzz/fuzz_s3_xml.cpp)
    target_link_libraries(fuzz_s3_xml PRIVATE ckpt::ckpt ckpt_warnings)
    target_include_directories(fuzz_s3_xml PRIVATE ${PROJECT_SOURCE_DIR}/src)
    target_compile_options(fuzz_s3_xml PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_s3_xml PRIVATE -fsanitize=fuzzer)
  endif()
endif()
