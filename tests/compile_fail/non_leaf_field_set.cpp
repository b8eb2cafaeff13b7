// MUST NOT COMPILE: a std::set<int> field is neither a leaf nor a named structure.
// Expected diagnostic: "ckpt: this type (see the instantiation below) is neither a leaf ..."
#include <ckpt/ckpt.hpp>

#include <set>

struct model {
  Eigen::VectorXf b;
  std::set<int> seen;
};

ckpt::checkpoint make(const model& m) { return ckpt::of_params(m); }
