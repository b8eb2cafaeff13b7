#include <ckpt/view.hpp>

#include <stdexcept>
#include <string>

namespace ckpt::detail {

void throw_rank_mismatch(const tensor& x, int wanted) {
  throw std::invalid_argument("ckpt: a view of rank " + std::to_string(wanted) +
                              " cannot show a tensor of shape " + to_string(x.shape()));
}

}  // namespace ckpt::detail
