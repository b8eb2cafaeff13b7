// The Boost.Test module of the test executables ckpt_tests_<group> (tests/CMakeLists.txt): each of
// their files is a suite named after the file, which CTest runs by name (--run_test=test_adam).
#define BOOST_TEST_MODULE ckpt
#include <boost/test/unit_test.hpp>
