// The source of the object libraries that build the test executables' shared precompiled header
// (ckpt_test_pch, tests/CMakeLists.txt): the header is all they compile.
