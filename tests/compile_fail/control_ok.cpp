// MUST COMPILE: the positive control of the compile-fail harness. It is the failing cases with
// their offending member made valid, so a failure here means the harness (or the library),
// not the checks, is broken.
#include <ckpt/ckpt.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

struct layer {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

struct model {
  std::vector<layer> layers;
  std::map<std::string, Eigen::Matrix<std::int8_t, 2, 2>> tables;
  double scale;
};

ckpt::checkpoint make(const model& m) { return ckpt::of_params(m, "model"); }
model read(const ckpt::checkpoint& t, const model& like) {
  return ckpt::to_params(t, like, ckpt::extract_options{.prefix = "model"});
}
