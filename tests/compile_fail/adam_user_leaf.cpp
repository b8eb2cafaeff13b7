// MUST NOT COMPILE: Adam does not know how to train a leaf of the user's own type; the message
// says to wrap it in ckpt::frozen<T> to keep it in the parameters without training it.
// Expected diagnostic: "ckpt: adam cannot train a leaf of this type ..."
#include <ckpt/ckpt.hpp>

struct lookup_table {
  std::vector<std::int32_t> ids;
};

template <>
struct ckpt::leaf_traits<lookup_table> {
  static ckpt::dims shape(const lookup_table& t) { return {static_cast<std::int64_t>(t.ids.size())}; }
  static auto elements(auto& t) { return std::span(t.ids); }
};

struct model {
  Eigen::MatrixXf w;
  lookup_table table;
};

void step(model& m, const model& g, ckpt::adam_state<model>& s) { ckpt::adam{}.update(m, g, s); }
