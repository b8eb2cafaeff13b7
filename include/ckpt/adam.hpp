#pragma once
/// \file
/// `ckpt::adam`: the Adam optimizer (with optional AdamW decoupled weight decay) over any named
/// parameter structure, and `training_state`, the list of sections the whole training state is
/// saved as and read back from:
///
/// \code
/// ckpt::adam opt{.lr = 1e-2};
/// auto state = opt.init(params);
/// for (...) { mlp grads = backward(params, batch); opt.update(params, grads, state); }
/// ckpt::save("ckpt.safetensors", ckpt::training_state(params, state));
/// ...
/// ckpt::read_params(ckpt::load("ckpt.safetensors"), ckpt::training_state(params, state));  // strict
/// \endcode
///
/// The same list goes to `checkpoint_manager::save_async` and `ckpt::mpi::save`.

#include <ckpt/checkpoint.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/leafwise.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>
#include <ckpt/section.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ckpt {

namespace detail {

// adam_state<P>::moments (see there).
template <class P>
struct adam_moments {
  P values;
};

}  // namespace detail

/// Adam's state for parameters of type `P`: the first and second moment estimates of the
/// trained leaves, and the number of updates done so far.
template <class P>
struct adam_state {
  /// Adam's moment estimates for parameters of type `P`: `values` is shaped like the parameters,
  /// but only the leaves Adam trains hold moments, and only they are named (`moments` is a named
  /// structure, a section of its own: `{state.mu, "optim.mu"}` names `optim.mu.l1.w`, never a
  /// frozen leaf, an integer or a random engine). The other leaves of `values` are left empty
  /// (dynamic Eigen leaves of size 0) and are never read.
  using moments = detail::adam_moments<P>;
  /// First moments (running mean of the gradients).
  moments mu;
  /// Second moments (running mean of the squared gradients).
  moments nu;
  /// Updates done so far; the next update is number `step + 1`.
  std::int64_t step = 0;
};

namespace detail {

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

// `params` copied, with the leaves Adam does not train emptied: the template of the moments.
template <class P>
adam_moments<P> moments_like(const P& params) {
  adam_moments<P> out{params};
  for_each_leaf(
      [](std::string_view, auto& x) {
        if (!trains(std::as_const(x))) clear_moment(x);
      },
      out.values);
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

// The sections of `training_state`: Raven's `Kaun.Checkpoint` names.
inline constexpr std::string_view model_section = "model";
inline constexpr std::string_view mu_section = "optim.mu";
inline constexpr std::string_view nu_section = "optim.nu";
inline constexpr std::string_view step_entry_name = "optim.step";

// The entry of the step, as Kaun's `of_int` stores it (one I32 element, I64 if it does not fit),
// read from `step` when it is written: a list of sections made before an update saves the step
// the update made. Its dtype is chosen now; a step that outgrows it by the save is refused.
inline entry_source step_source(const std::int64_t& step) {
  const bool small = step >= std::numeric_limits<std::int32_t>::min() && step <= std::numeric_limits<std::int32_t>::max();
  entry_source out;
  out.name = std::string(step_entry_name);
  out.dtype = small ? dtype::i32 : dtype::i64;
  out.shape = {1};
  out.nbytes = small ? sizeof(std::int32_t) : sizeof(std::int64_t);
  out.write_rows = [&step, small](std::size_t, std::size_t, std::byte* dst) {
    if (!small) return static_cast<void>(std::memcpy(dst, &step, sizeof step));
    if (step > std::numeric_limits<std::int32_t>::max())
      throw std::invalid_argument("ckpt: the step " + std::to_string(step) + " no longer fits the I32 entry '" +
                                  std::string(step_entry_name) + "' of sections made at a smaller step: make them anew");
    const auto value = static_cast<std::int32_t>(step);
    std::memcpy(dst, &value, sizeof value);
  };
  return out;
}

}  // namespace detail

/// `adam_state<P>::moments` names the leaves Adam trains, at the paths of their parameters.
template <class P>
struct leaf_subset<detail::adam_moments<P>> {
  /// The moments.
  /// \throws nothing
  static auto& inner(auto& self) noexcept { return self.values; }
  /// Whether the leaf has moments: Adam trains it.
  /// \throws nothing
  static bool keeps(const auto& leaf) noexcept { return detail::trains(leaf); }
};

/// The Adam optimizer, with AdamW's decoupled weight decay when `weight_decay` is not zero.
///
/// `update` performs, for every leaf (parameter `p`, gradient `g`, moments `m`, `v`) and with
/// `t = state.step + 1`, `λ = weight_decay`, `α = lr`:
///
///     p ← p · (1 − α·λ)                                  (only if λ ≠ 0: decoupled decay)
///     m ← β1 · m + (1 − β1) · g
///     v ← β2 · v + (1 − β2) · g²
///     p ← p − (α / (1 − β1^t)) · m / (√v · (1 / √(1 − β2^t)) + ε)
///
/// that is `p ← p − α · m̂ / (√v̂ + ε)` with the bias-corrected `m̂ = m / (1 − β1^t)` and
/// `v̂ = v / (1 − β2^t)` (the formula of PyTorch's Adam/AdamW). Then `state.step` becomes `t`.
/// The scalar coefficients (`1 − α·λ`, `β1`, `1 − β1`, `β2`, `1 − β2`, `α / (1 − β1^t)`,
/// `1 / √(1 − β2^t)`, `ε`) are computed in double and rounded once to the leaf's scalar type;
/// the element-wise arithmetic runs in that type, one Eigen expression per line above. For the
/// same inputs, the same build gives bit-identical results, which bit-exact resume relies on.
///
/// Adam trains the leaves of float or double: `Eigen::Matrix` and `Eigen::Array` (fixed or
/// dynamic size, row- or column-major), `Eigen::Tensor` of any rank and `Eigen::TensorFixedSize`
/// (either layout), scalars, and F32/F64 `ckpt::tensor` leaves (a `ckpt::ptree` of parameters:
/// new tensors are made, since tensors are immutable). It leaves alone, and keeps no moments for,
/// `ckpt::frozen<T>` leaves of any of these types (a frozen embedding, a running mean the loop
/// updates), integer and bool leaves (a counter) and random engines: they are saved and restored
/// with the model. Their gradients are not read. A leaf of another type (`Eigen::half`,
/// `Eigen::bfloat16` or complex elements, a leaf type of your own) does not compile, with a
/// `ckpt:` message saying to wrap it in `ckpt::frozen<T>`.
struct adam {
  /// Learning rate α.
  double lr = 1e-3;
  /// Decay of the first-moment average β1, in [0, 1).
  double beta1 = 0.9;
  /// Decay of the second-moment average β2, in [0, 1).
  double beta2 = 0.999;
  /// ε, added to √v̂ to keep the step finite.
  double eps = 1e-8;
  /// Decoupled weight decay λ (AdamW); 0 gives plain Adam.
  double weight_decay = 0;

  /// A fresh state for `params`: zero moments for the leaves Adam trains, step 0.
  /// \throws std::bad_alloc; whatever copying `params` throws.
  template <class P>
  [[nodiscard]] adam_state<P> init(const P& params) const {
    typename adam_state<P>::moments zero = detail::moments_like(params);
    for_each_leaf([](std::string_view, auto& x) { detail::set_leaf_zero(x); }, zero);
    return {zero, zero, 0};
  }

  /// Applies one bias-corrected Adam step (see the formula above) to `params` in place, using
  /// `grads` (shaped like `params`) and `state` (from `init` or restored), and counts it in
  /// `state.step`. All shapes are checked before anything changes.
  /// \throws std::invalid_argument if the hyper-parameters are out of range (`lr` or
  /// `weight_decay` negative or not finite, a β outside [0, 1), `eps` negative), if
  /// `state.step` is negative or at its maximum, if a gradient or moment differs in structure,
  /// shape or (for `ckpt::tensor` leaves) dtype from its parameter, or a `ckpt::tensor` leaf is
  /// not F32 or F64 (each message names the leaf).
  template <class P>
  void update(P& params, const P& grads, adam_state<P>& state) const {
    static_assert(named<P>, "ckpt: adam needs a named structure of parameters");
    check();
    if (state.step < 0 || state.step == std::numeric_limits<std::int64_t>::max())
      throw std::invalid_argument("ckpt: adam: invalid step count " + std::to_string(state.step));
    // Over the trained leaves only: the moments hold nothing for the others.
    typename adam_state<P>::moments& mu = state.mu;
    typename adam_state<P>::moments& nu = state.nu;
    for_each_leaf([](std::string_view name, const auto& m, const auto& p, const auto& g, const auto& v) {
                    if constexpr (detail::may_train<std::remove_cvref_t<decltype(p)>>())
                      detail::check_adam_leaf(name, p, g, m, v);
                  },
                  std::as_const(mu), std::as_const(params), grads, std::as_const(nu));

    const auto t = static_cast<double>(state.step + 1);
    const double bias1 = 1 - std::pow(beta1, t);
    const double bias2 = 1 - std::pow(beta2, t);
    const detail::adam_step step{1 - lr * weight_decay, beta1, beta2, lr / bias1,
                                 1 / std::sqrt(bias2), eps, weight_decay != 0};
    for_each_leaf([&step](std::string_view, auto& m, auto& p, const auto& g, auto& v) {
                    if constexpr (detail::may_train<std::remove_cvref_t<decltype(p)>>()) detail::adam_leaf(p, g, m, v, step);
                  },
                  mu, params, grads, nu);
    ++state.step;
  }

 private:
  void check() const {
    auto bad = [](const char* what, double value) {
      throw std::invalid_argument(std::string("ckpt: adam: ") + what + " = " + std::to_string(value) +
                                  " is out of range");
    };
    if (!(lr >= 0) || !std::isfinite(lr)) bad("lr", lr);
    if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", beta1);
    if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", beta2);
    if (!(eps >= 0) || !std::isfinite(eps)) bad("eps", eps);
    if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) bad("weight_decay", weight_decay);
  }
};

/// The model part of the training state: the one section of the parameters (`model.*`), as
/// `training_state(params, state)` saves them. Read it to take the model of a run without its
/// optimizer (a warm start, a fine-tuning run, inference):
/// `ckpt::read_params(ckpt::load(path), ckpt::training_state(params))`.
/// \throws std::bad_alloc; std::invalid_argument as `section` does.
template <class P>
[[nodiscard]] std::vector<section> training_state(P& params) {
  static_assert(named<P>, "ckpt: training_state needs a named structure of parameters");
  std::vector<section> out;
  out.emplace_back(params, detail::model_section);
  return out;
}

/// The training state as one list of sections, the same for saving and for reading back (Raven's
/// `Kaun.Checkpoint` names):
///
/// | entries            | hold                                                          |
/// |--------------------|---------------------------------------------------------------|
/// | `model.*`          | the parameters                                                |
/// | `optim.mu.*`       | Adam's first moments of the trained leaves                    |
/// | `optim.nu.*`       | Adam's second moments of the trained leaves                   |
/// | `optim.step`       | the number of updates done (as Kaun's `of_int`)               |
///
/// \code
/// manager.save_async(state.step, ckpt::training_state(params, state));
/// if (auto latest = manager.load_latest()) ckpt::read_params(*latest, ckpt::training_state(params, state));
/// \endcode
///
/// Saved, the sections refer to `params` and `state` in place, the step too (they must not change
/// until the save has copied or written them), so a list made once serves every save. Read back (`read_params` of
/// sections, strict by default), they replace `params`, `state.mu`, `state.nu` and `state.step`;
/// `params` is the template of the moments too (`state`'s old contents are not consulted, so a
/// default-constructed `state` will do), and nothing changes unless every entry checks. With
/// `{.keep_missing = true}` a parameter added since the save keeps its value and starts its
/// moments at zero (the step goes on from the saved one): a new parameter starts fresh. To add
/// sections of your own, append them to the list (`sections.emplace_back(ema, "ema")`).
/// \throws std::bad_alloc; std::invalid_argument as `section` does.
template <class P>
[[nodiscard]] std::vector<section> training_state(P& params, adam_state<P>& state) {
  static_assert(named<P>, "ckpt: training_state needs a named structure of parameters");
  using moments = typename adam_state<P>::moments;
  // The moments are read into fresh zero moments shaped like the parameters, moved into `state`
  // once every entry is read.
  auto moment_section = [&](moments& saved, std::string_view prefix) {
    return detail::section_access::with_read(
        section(std::as_const(saved), prefix), prefix, [&params, &saved, prefix](detail::read_plan& plan) {
          auto staged = std::make_shared<moments>(detail::moments_like(params));
          for_each_leaf([](std::string_view, auto& x) { detail::set_leaf_zero(x); }, *staged);
          detail::add_leaf_reads(plan.leaves, *staged, prefix);
          plan.prefixes.emplace_back(prefix);
          plan.commits.push_back([&saved, staged] { saved = std::move(*staged); });
        });
  };
  std::vector<section> out = training_state(params);
  out.reserve(4);
  out.push_back(moment_section(state.mu, detail::mu_section));
  out.push_back(moment_section(state.nu, detail::nu_section));
  out.push_back(detail::section_access::of_entry(detail::step_source(state.step), [&state](detail::read_plan& plan) {
    auto staged = std::make_shared<std::int64_t>(-1);
    plan.own.push_back({std::string(detail::step_entry_name), [staged](const checkpoint& t, std::string_view function) {
                          const std::int64_t step = to_int(detail::step_entry_name, t);
                          if (step < 0)
                            throw std::invalid_argument("ckpt: " + std::string(function) + ": entry '" +
                                                        std::string(detail::step_entry_name) +
                                                        "' holds the negative step " + std::to_string(step));
                          *staged = step;
                        }});
    plan.prefixes.emplace_back(detail::step_entry_name);
    plan.commits.push_back([&state, staged] {
      if (*staged >= 0) state.step = *staged;
    });
  }));
  return out;
}

}  // namespace ckpt
