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
#include <ckpt/detail/adam_update.hpp>
#include <ckpt/detail/training_state.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/leafwise.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>
#include <ckpt/section.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ckpt {

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
  /// The threads `update` runs on: 0 (the default) for every hardware thread this process may
  /// run on (its CPU affinity, so that MPI ranks bound to cores do not oversubscribe them), 1 for
  /// the calling thread alone. The leaves are cut in ranges of elements (a large leaf in several)
  /// that the calling thread and threads of a pool that ckpt keeps for the process update; an
  /// update of less than 1 MiB of trained parameters stays on the calling thread. The results are
  /// bit-identical whatever the threads: each element is computed by the same operations.
  std::size_t threads = 0;

  /// A fresh state for `params`: zero moments for the leaves Adam trains, step 0.
  /// \throws std::bad_alloc; whatever copying `params` throws.
  template <class P>
  [[nodiscard]] adam_state<P> init(const P& params) const {
    typename adam_state<P>::moments zero = detail::zero_moments(params);
    return {zero, zero, 0};
  }

  /// Applies one bias-corrected Adam step (see the formula above) to `params` in place, using
  /// `grads` (shaped like `params`) and `state` (from `init` or restored), and counts it in
  /// `state.step`. All shapes are checked before anything changes. The leaves are updated on
  /// `threads` threads (see there); a pending background save of `training_state(params, state)`
  /// that has not yet copied a leaf and its moments gets its copy before any of them changes.
  /// \throws std::invalid_argument if the hyper-parameters are out of range (`lr` or
  /// `weight_decay` negative or not finite, a β outside [0, 1), `eps` negative), if
  /// `state.step` is negative or at its maximum, if a gradient or moment differs in structure,
  /// shape or (for `ckpt::tensor` leaves) dtype from its parameter, or a `ckpt::tensor` leaf is
  /// not F32 or F64 (each message names the leaf); all before anything changes.
  /// \throws std::bad_alloc before anything changes, or when a new `ckpt::tensor` leaf cannot be
  /// allocated (the other leaves are updated; that one and its moments keep their values).
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
    std::vector<detail::adam_task> tasks;
    for_each_leaf([&tasks](std::string_view, auto& m, auto& p, const auto& g, auto& v) {
                    if constexpr (detail::may_train<std::remove_cvref_t<decltype(p)>>())
                      tasks.push_back(detail::adam_task_of(p, g, m, v));
                  },
                  mu, params, grads, nu);
    // A save_async of training_state copies each leaf and its moments first if it has not yet.
    detail::update_leaves(tasks, step, threads);
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
/// until the save has copied or written them), so a list made once serves every save, and a
/// `read_params` through it keeps it valid for the saves after: the moments read are copied into
/// `state`'s storage (a list made from a default-constructed `state`, whose moments have no
/// storage yet, is made again after the read).
///
/// **Background saves copy lazily.** `save_async` of this list copies, before it returns, only
/// the leaves Adam does not change (frozen leaves, integers, engines, `ckpt::tensor` leaves) and
/// the step. The trained leaves and their moments are copied after it returns: by the background
/// thread, and by `update`, which copies each leaf it is about to change if the save has not yet
/// (the parameters do not change between two updates). So the loop does not wait for a copy of
/// the whole state. The one rule this asks of the loop: until the next `update` returns (or
/// `wait()`), change the trained leaves and the moments only through `update`, `read_params`
/// (which finishes the copies first) or by ending `state` (which does too). To change them by
/// other means in between, call `manager.wait()` first, or save sections you list yourself
/// (`{{params, "model"}, ...}`), which are copied in the call.
///
/// Read back (`read_params` of
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
  // The moments are read into fresh zero moments shaped like the parameters, copied into `state`
  // once every entry is read: into its own storage where the shapes agree (as after `opt.init`),
  // so that the sections of this list, which refer to that storage, stay valid for the next save.
  auto moment_section = [&](moments& saved, std::string_view prefix) {
    return detail::section_access::with_read(
        detail::copied_lazily(section(std::as_const(saved), prefix), std::as_const(saved)), prefix,
        [&params, &saved, prefix](detail::read_plan& plan) {
          auto staged = std::make_shared<moments>(detail::zero_moments(params));
          detail::add_leaf_reads(plan.leaves, *staged, prefix);
          plan.prefixes.emplace_back(prefix);
          plan.commits.push_back([&saved, staged] { saved = *staged; });
        });
  };
  std::vector<section> out;
  out.reserve(4);
  out.push_back(detail::copied_lazily(section(params, detail::model_section), std::as_const(params)));
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
