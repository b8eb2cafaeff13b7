#pragma once
// Not part of the API (adam.hpp's adam_state, adam and training_state are built on these): Adam's
// moments, which leaves it trains, and the update of one leaf.

#include <ckpt/detail/flat_array.hpp>
#include <ckpt/detail/lazy_copy.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/named.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ckpt::detail {

// adam_state<P>::moments (see there).
template <class P>
struct adam_moments {
  P values;
  // The pending copies of a lazy snapshot are made when the moments end (detail/lazy_copy.hpp).
  lazy_copy_guard guard;
};

template <class L>
inline constexpr bool is_frozen_v = false;
template <class T>
inline constexpr bool is_frozen_v<frozen<T>> = true;

// The scalar type of an Eigen leaf or of a scalar leaf.
template <class L>
using flat_scalar_t = typename decltype(flat_array(std::declval<L&>()))::Scalar;

// Whether Adam trains the leaf `x`: float and double Eigen matrices, arrays and tensors (any
// size, either storage order) and scalars, and `ckpt::tensor` leaves of a floating dtype (F32 and
// F64 are trained, another floating dtype is refused by `update`). Frozen leaves, integer and
// bool leaves, and random engines are saved with the model but not trained.
template <class L>
bool trains(const L& x) {
  if constexpr (std::is_same_v<L, tensor>) {
    return is_floating(x.dtype());
  } else if constexpr (is_frozen_v<L> || is_std_engine<L>::value) {
    return false;
  } else if constexpr (flat_leaf<L>) {
    static_assert(std::is_integral_v<flat_scalar_t<L>> || std::is_floating_point_v<flat_scalar_t<L>>,
                  "ckpt: adam trains float and double leaves and leaves integer and bool leaves alone; wrap a "
                  "leaf of another scalar type (Eigen::half, Eigen::bfloat16, std::complex<float>) in "
                  "ckpt::frozen<T> to keep it in the parameters without training it");
    return std::is_floating_point_v<flat_scalar_t<L>>;
  } else {
    static_assert(always_false<L>, "ckpt: adam cannot train a leaf of this type: wrap it in ckpt::frozen<T> to "
                                   "keep it in the parameters without training it");
    return false;
  }
}

// Whether a leaf of type L can be trained at all (a `ckpt::tensor`, by its dtype at run time).
template <class L>
constexpr bool may_train() {
  if constexpr (std::is_same_v<L, tensor>) return true;
  else if constexpr (flat_leaf<L> && !is_frozen_v<L>) return std::is_floating_point_v<flat_scalar_t<L>>;
  else return false;
}

template <class L>
inline constexpr bool is_dynamic_eigen_tensor_v = false;
template <class S, int N, int O, class I>
inline constexpr bool is_dynamic_eigen_tensor_v<Eigen::Tensor<S, N, O, I>> = true;

// A leaf Adam does not train, emptied in the moments: a dynamic extent of an Eigen leaf becomes 0
// (its fixed extents stay), a `ckpt::tensor` becomes an empty tensor of its dtype (so that the
// moments still know it is not trained); others keep their value (fixed-size Eigen leaves,
// scalars, engines: small).
template <class L>
void clear_moment(L& x) {
  if constexpr (is_frozen_v<L>) {
    clear_moment(x.value);
  } else if constexpr (is_eigen_dense_v<L>) {
    constexpr auto rows = L::RowsAtCompileTime, cols = L::ColsAtCompileTime;
    if constexpr (rows == Eigen::Dynamic || cols == Eigen::Dynamic)
      x.resize(rows == Eigen::Dynamic ? 0 : rows, cols == Eigen::Dynamic ? 0 : cols);
  } else if constexpr (is_dynamic_eigen_tensor_v<L>) {
    typename L::Dimensions none;
    for (auto& extent : none) extent = 0;
    x.resize(none);
  } else if constexpr (std::is_same_v<L, tensor>) {
    x = tensor::make(x.dtype(), {0}, [](std::span<std::byte>) {});
  }
}

// Fresh moments for `params`: `params` copied, the leaves Adam does not train emptied and the
// others set to zero (`adam::init`, and what `training_state` reads saved moments into).
template <class P>
adam_moments<P> zero_moments(const P& params) {
  adam_moments<P> out{params, {}};
  for_each_leaf(
      [](std::string_view, auto& x) {
        if (!trains(std::as_const(x))) clear_moment(x);
      },
      out.values);
  for_each_leaf([](std::string_view, auto& x) { set_leaf_zero(x); }, out);
  return out;
}


// The per-step scalars, computed once in double and rounded once to the leaf's scalar type, so
// that every leaf of a type sees exactly the same coefficients.
template <class S>
struct adam_coefficients {
  S decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bias2, eps;
  bool decays;
};

struct adam_step {
  double decay, beta1, beta2, step_size, inv_sqrt_bias2, eps;
  bool decays;
  template <class S>
  [[nodiscard]] adam_coefficients<S> as() const {
    return {static_cast<S>(decay),     static_cast<S>(beta1),
            static_cast<S>(1 - beta1), static_cast<S>(beta2),
            static_cast<S>(1 - beta2), static_cast<S>(step_size),
            static_cast<S>(inv_sqrt_bias2), static_cast<S>(eps),
            decays};
  }
};

// One expression per moment and one for the parameters: Eigen vectorises each.
template <class S, class PArray, class GArray, class MArray, class VArray>
void adam_kernel(PArray&& p, const GArray& g, MArray&& m, VArray&& v, const adam_coefficients<S>& c) {
  if (c.decays) p *= c.decay;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g.square();
  p -= c.step_size * m / (v.sqrt() * c.inv_sqrt_bias2 + c.eps);
}

template <class S>
void adam_tensor_leaf(tensor& p, const tensor& g, tensor& m, tensor& v, const adam_step& step) {
  using array = Eigen::Array<S, Eigen::Dynamic, 1>;
  const auto n = static_cast<Eigen::Index>(p.numel());
  auto view = [n](const tensor& x) { return Eigen::Map<const array>(x.as<S>().data(), n); };
  array pa = view(p), ma = view(m), va = view(v);
  adam_kernel(pa, view(g), ma, va, step.as<S>());
  auto store = [&p](const array& a) {
    return tensor::make(p.dtype(), dims(p.shape().begin(), p.shape().end()),
                        [&a](std::span<std::byte> out) {
                          if (!out.empty()) std::memcpy(out.data(), a.data(), out.size());
                        });
  };
  // Build all three before replacing any, so a failed allocation leaves the leaf as it was.
  tensor new_p = store(pa), new_m = store(ma), new_v = store(va);
  p = std::move(new_p);
  m = std::move(new_m);
  v = std::move(new_v);
}

template <class L>
void adam_leaf(L& p, const L& g, L& m, L& v, const adam_step& step) {
  if constexpr (std::is_same_v<L, tensor>) {
    if (p.dtype() == dtype::f32) adam_tensor_leaf<float>(p, g, m, v, step);
    else adam_tensor_leaf<double>(p, g, m, v, step);
  } else {
    using scalar_type = typename decltype(flat_array(p))::Scalar;
    adam_kernel(flat_array(p), flat_array(g), flat_array(m), flat_array(v), step.as<scalar_type>());
  }
}

// One trained leaf of an update, type-erased for update_leaves (src/training/adam.cpp), which may cut it in
// ranges of elements and update them on several threads. Each element's arithmetic is the same
// whatever the cut: a range starts where every leaf's first element of a packet of Eigen's widest
// vector type would (every `cut_grain` elements from `first_cut`), so that each element takes the
// same path (vector or scalar) as in the update of the whole leaf.
struct adam_task {
  void* p = nullptr;
  const void* g = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  std::size_t size = 0;       // elements
  std::size_t bytes = 0;      // of the parameter
  std::size_t first_cut = 0;  // the first element a range may start at, besides 0
  std::size_t cut_grain = 0;  // 0: the leaf is updated whole
  // Updates elements [first, last) (the whole leaf: adam_leaf).
  void (*run)(const adam_task& task, std::size_t first, std::size_t last, const adam_step& step) = nullptr;

  // Updates elements [first, last), once a pending background save has copied the leaf and its
  // moments (lazy_copy.hpp).
  void update(std::size_t first, std::size_t last, const adam_step& step) const {
    before_write(p);
    before_write(m);
    before_write(v);
    run(*this, first, last, step);
  }
};

// Eigen's widest vector alignment in this build, where a cut may fall.
inline constexpr std::size_t adam_cut_alignment = EIGEN_MAX_ALIGN_BYTES > 0 ? EIGEN_MAX_ALIGN_BYTES : 64;

template <class L>
void adam_range(const adam_task& task, std::size_t first, std::size_t last, const adam_step& step) {
  L& p = *static_cast<L*>(task.p);
  const L& g = *static_cast<const L*>(task.g);
  L& m = *static_cast<L*>(task.m);
  L& v = *static_cast<L*>(task.v);
  if (first == 0 && last == task.size) return adam_leaf(p, g, m, v, step);
  if constexpr (!std::is_same_v<L, tensor>) {
    using scalar_type = flat_scalar_t<L>;
    using map = Eigen::Map<Eigen::Array<scalar_type, Eigen::Dynamic, 1>>;
    using const_map = Eigen::Map<const Eigen::Array<scalar_type, Eigen::Dynamic, 1>>;
    const auto at = static_cast<Eigen::Index>(first), n = static_cast<Eigen::Index>(last - first);
    adam_kernel(map(flat_array(p).data() + at, n), const_map(flat_array(g).data() + at, n),
                map(flat_array(m).data() + at, n), map(flat_array(v).data() + at, n), step.as<scalar_type>());
  }
}

// The task of one trained leaf: Eigen leaves whose parameter and moments are equally aligned to
// adam_cut_alignment may be cut; scalars and `ckpt::tensor` leaves are updated whole.
template <class L>
adam_task adam_task_of(L& p, const L& g, L& m, L& v) {
  adam_task task{};
  task.p = &p;
  task.g = &g;
  task.m = &m;
  task.v = &v;
  task.run = &adam_range<L>;
  if constexpr (std::is_same_v<L, tensor>) {
    task.size = p.numel();
    task.bytes = p.nbytes();
  } else {
    using scalar_type = flat_scalar_t<L>;
    task.size = static_cast<std::size_t>(flat_array(p).size());
    task.bytes = task.size * sizeof(scalar_type);
    if constexpr (!std::is_arithmetic_v<L>) {
      const auto address = [](const L& x) { return reinterpret_cast<std::uintptr_t>(flat_array(x).data()); };
      const std::uintptr_t at = address(p);
      if (at % sizeof(scalar_type) == 0 && (address(m) - at) % adam_cut_alignment == 0 &&
          (address(v) - at) % adam_cut_alignment == 0) {
        task.first_cut = (adam_cut_alignment - at % adam_cut_alignment) % adam_cut_alignment / sizeof(scalar_type);
        task.cut_grain = adam_cut_alignment / sizeof(scalar_type);
      }
    }
  }
  return task;
}

// Updates every task's leaf (adam::update): on the calling thread in their order below a size
// where threads pay (tuning::parallel_update_bytes), else cut in ranges of about equal size on up
// to `threads` threads (0: usable_threads()) of the process's pool, a leaf's copies for a pending
// background save made before any of its ranges changes. Rethrows the first exception a leaf's
// update threw (a `ckpt::tensor` leaf's allocation), once every range has run.
void update_leaves(std::span<const adam_task> tasks, const adam_step& step, std::size_t threads);

template <class L>
void check_adam_leaf(std::string_view name, const L& p, const L& g, const L& m, const L& v) {
  if constexpr (std::is_same_v<L, tensor>) {
    if (p.dtype() != dtype::f32 && p.dtype() != dtype::f64)
      throw std::invalid_argument("ckpt: adam: parameter '" + std::string(name) + "' is " +
                                  std::string(to_string(p.dtype())) + ", not F32 or F64");
    if (g.dtype() != p.dtype() || m.dtype() != p.dtype() || v.dtype() != p.dtype())
      throw std::invalid_argument("ckpt: adam: the gradient or state of '" + std::string(name) +
                                  "' has another dtype than the parameter");
  } else {
    static_assert(flat_leaf<L>, "ckpt: adam updates Eigen matrices, arrays, tensors and scalars "
                                "(or ckpt::tensor leaves of a ptree)");
    using scalar_type = typename decltype(flat_array(p))::Scalar;
    static_assert(std::is_floating_point_v<scalar_type>,
                  "ckpt: adam needs floating-point parameters (float or double)");
  }
  const dims shape = leaf_shape(p);
  if (leaf_shape(g) != shape || leaf_shape(m) != shape || leaf_shape(v) != shape)
    throw std::invalid_argument("ckpt: adam: the gradient or state of '" + std::string(name) +
                                "' has another shape than the parameter " + to_string(shape));
}

}  // namespace ckpt::detail
