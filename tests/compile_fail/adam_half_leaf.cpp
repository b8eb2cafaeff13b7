// MUST NOT COMPILE: Adam trains float and double leaves; a half-precision matrix in the trained
// parameters is refused, with a message that says to wrap it in ckpt::frozen<T> (the same model
// with `ckpt::frozen<Eigen::Matrix<Eigen::half, ...>>` compiles and keeps the leaf untrained).
// Expected diagnostic: "ckpt: adam trains float and double leaves ..."
#include <ckpt/ckpt.hpp>

struct model {
  Eigen::MatrixXf w;
  Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic> table;
};

void step(model& m, const model& g, ckpt::adam_state<model>& s) { ckpt::adam{}.update(m, g, s); }
