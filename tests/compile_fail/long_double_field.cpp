// MUST NOT COMPILE: safetensors has no dtype for long double.
// Expected diagnostic: "ckpt: unsupported scalar type ..."
#include <ckpt/ckpt.hpp>

struct model {
  Eigen::MatrixXf w;
  long double scale;
};

ckpt::checkpoint make(const model& m) { return ckpt::of_params(m, "model"); }
