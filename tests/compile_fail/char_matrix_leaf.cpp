// MUST NOT COMPILE: char is not a safetensors scalar (int8_t, i.e. signed char, is).
// Expected diagnostic: "ckpt: unsupported scalar type ..."
#include <ckpt/ckpt.hpp>

ckpt::checkpoint make(const Eigen::Matrix<char, 2, 2>& m) { return ckpt::of_params(m, "w"); }
