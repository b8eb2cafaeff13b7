#pragma once
/// \file
/// `ckpt::adam`: the Adam optimizer (with optional AdamW decoupled weight decay) over any named
/// parameter structure, and one-call helpers that put the whole training state into a
/// checkpoint and take it back out, under the section names of Raven's `Kaun.Checkpoint`:
///
/// | entries        | holds                                                   |
/// |----------------|---------------------------------------------------------|
/// | `model.*`      | the parameters                                          |
/// | `optim.mu.*`   | Adam's first moments of the trained leaves              |
/// | `optim.nu.*`   | Adam's second moments of the trained leaves             |
/// | `optim.step`   | the number of updates done (see `training_state`)       |
///
/// \code
/// ckpt::adam opt{.lr = 1e-2};
/// auto state = opt.init(params);
/// for (...) { mlp grads = backward(params, batch); opt.update(params, grads, state); }
/// ckpt::save("ckpt.safetensors", ckpt::training_state(params, state));
/// ...
/// ckpt::restore_training_state(ckpt::load("ckpt.safetensors"), params, state);
/// \endcode

#include <ckpt/checkpoint.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/leafwise.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ckpt {

/// Adam's moment estimates for parameters of type `P`: `values` is shaped like the parameters,
/// but only the leaves Adam trains hold moments, and only they are named (an `adam_moments` is
/// a named structure: `of_params(state.mu, "optim.mu")` names `optim.mu.l1.w`, never a frozen
/// leaf, an integer or a random engine). The other leaves of `values` are left empty (dynamic
/// Eigen leaves of size 0) and are never read.
template <class P>
struct adam_moments {
  /// The moments, at the paths of the parameters they belong to.
  P values;
};

/// Adam's state for parameters of type `P`: the first and second moment estimates of the
/// trained leaves, and the number of updates done so far.
template <class P>
struct adam_state {
  /// First moments (running mean of the gradients).
  adam_moments<P> mu;
  /// Second moments (running mean of the squared gradients).
  adam_moments<P> nu;
  /// Updates done so far; the next update is number `step + 1`.
  std::int64_t step = 0;
};

namespace detail {

template <class L>
inline constexpr bool is_frozen_v = false;
template <class T>
inline constexpr bool is_frozen_v<frozen<T>> = true;

// Whether Adam trains the leaf `x`: floating-point Eigen leaves and scalars, and `ckpt::tensor`
// leaves of a floating dtype. Frozen leaves, integers, bools and random engines are saved with
// the model but not trained.
template <class L>
bool trains(const L& x) {
  if constexpr (std::is_same_v<L, tensor>) {
    return is_floating(x.dtype());
  } else if constexpr (is_frozen_v<L> || is_std_engine<L>::value) {
    return false;
  } else if constexpr (flat_leaf<L>) {
    using scalar_type = typename decltype(flat_array(x))::Scalar;
    static_assert(std::is_integral_v<scalar_type> || std::is_floating_point_v<scalar_type>,
                  "ckpt: adam trains float, double and long double leaves and leaves integers alone; wrap a "
                  "leaf of another scalar type in ckpt::frozen<T> to keep it without training it");
    return std::is_floating_point_v<scalar_type>;
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
  else if constexpr (flat_leaf<L> && !is_frozen_v<L>) return std::is_floating_point_v<typename decltype(flat_array(std::declval<L&>()))::Scalar>;
  else return false;
}

// A leaf Adam does not train, emptied in the moments: dynamic Eigen leaves become empty, others
// keep their value (fixed-size, a scalar, an engine: small).
template <class L>
void clear_moment(L& x) {
  if constexpr (is_frozen_v<L>) clear_moment(x.value);
  else if constexpr (is_eigen_dense_v<L> || is_eigen_tensor_v<L>) {
    if constexpr (requires { x.resize(0, 0); }) {
      if constexpr (L::RowsAtCompileTime == Eigen::Dynamic && L::ColsAtCompileTime == Eigen::Dynamic) x.resize(0, 0);
      else if constexpr (L::RowsAtCompileTime == Eigen::Dynamic || L::ColsAtCompileTime == Eigen::Dynamic) x.resize(0);
    } else if constexpr (requires { x.resize(typename L::Dimensions{}); }) {
      x.resize(typename L::Dimensions{});
    }
  } else if constexpr (std::is_same_v<L, tensor>) {
    x = tensor{};
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
                  "ckpt: adam needs floating-point parameters (float, double or long double)");
  }
  const dims shape = leaf_shape(p);
  if (leaf_shape(g) != shape || leaf_shape(m) != shape || leaf_shape(v) != shape)
    throw std::invalid_argument("ckpt: adam: the gradient or state of '" + std::string(name) +
                                "' has another shape than the parameter " + to_string(shape));
}

inline std::string step_entry_name() { return "optim.step"; }

}  // namespace detail

/// `adam_moments` names the leaves Adam trains, at the paths of their parameters.
template <class P>
struct leaf_subset<adam_moments<P>> {
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
/// Adam trains the leaves that are Eigen matrices, arrays and tensors of float, double or long
/// double, such scalars, and F32/F64 `ckpt::tensor` leaves (a `ckpt::ptree` of parameters: new
/// tensors are made, since tensors are immutable). It leaves alone, and keeps no moments for,
/// `ckpt::frozen<T>` leaves (a frozen embedding, a running mean the loop updates), integer and
/// bool leaves (a counter) and random engines: they are saved and restored with the model. Their
/// gradients are not read. A leaf of another type must be wrapped in `ckpt::frozen<T>`.
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
    adam_moments<P> zero = detail::moments_like(params);
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
    adam_moments<P>& mu = state.mu;
    adam_moments<P>& nu = state.nu;
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

/// The whole training state as one checkpoint: `params` under `model.*`, `state.mu` under
/// `optim.mu.*`, `state.nu` under `optim.nu.*` and `state.step` at `optim.step` (through
/// `of_int`: I32 up to 2^31 − 1, as Raven's `Kaun.Checkpoint` writes it, I64 beyond). The entries are snapshots:
/// training may change `params` and `state` as soon as this returns.
/// \throws std::invalid_argument if leaf names are invalid (see `of_params`) or the step is
/// negative.
template <class P>
[[nodiscard]] checkpoint training_state(const P& params, const adam_state<P>& state) {
  return concat({of_params(params, "model"), of_params(state.mu, "optim.mu"),
                 of_params(state.nu, "optim.nu"), of_int(detail::step_entry_name(), state.step)});
}

/// Reads back what `training_state` wrote: replaces `params`, `state.mu`, `state.nu` and
/// `state.step` with the entries of `t`. `params` is the template for all three structures
/// (names, shapes and dtypes; `state`'s old contents are not consulted, so a default-constructed
/// `state` will do). Other entries of `t` are ignored. Nothing is changed if anything is missing
/// or mismatched.
/// \throws std::invalid_argument if an entry is missing or has another shape or dtype than its
/// leaf in `params`, or `optim.step` is missing or malformed (the message names the entry).
template <class P>
void restore_training_state(const checkpoint& t, P& params, adam_state<P>& state) {
  // The moments are extracted into copies of the parameters (`state` may hold nothing yet) and
  // the step read before the parameters are filled in place, which checks all of them first.
  constexpr std::string_view function = "restore_training_state";
  adam_moments<P> mu = detail::moments_like(params);
  adam_moments<P> nu = mu;  // not a second copy of the parameters: frozen leaves are empty here
  read_params(t, mu, {.prefix = "optim.mu", .function = function});
  read_params(t, nu, {.prefix = "optim.nu", .function = function});
  const std::int64_t step = to_int(detail::step_entry_name(), t);
  if (step < 0)
    throw std::invalid_argument("ckpt: restore_training_state: entry '" + std::string(detail::step_entry_name()) +
                                "' holds the negative step " + std::to_string(step));
  read_params(t, params, {.prefix = "model", .function = function});
  state.mu = std::move(mu);
  state.nu = std::move(nu);
  state.step = step;
}

}  // namespace ckpt
