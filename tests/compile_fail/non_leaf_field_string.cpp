// MUST NOT COMPILE: a std::string field is neither a leaf nor a named structure.
// Expected diagnostic: "ckpt: this type (see the instantiation below) is neither a leaf ..."
#include <ckpt/ckpt.hpp>

#include <string>

struct model {
  Eigen::MatrixXf w;
  std::string name;
};

ckpt::checkpoint make(const model& m) { return ckpt::of_params(m, "model"); }
