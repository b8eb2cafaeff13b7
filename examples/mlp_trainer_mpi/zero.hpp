#pragma once
// ZeRO-1 for mlp_trainer_mpi --shard-optimizer: the parameters stay replicated, but each rank keeps
// only its slice of Adam's moments. Every tensor is flattened in C order (the order of its entry
// in a checkpoint) and rank r of P holds elements [⌊n·r/P⌋, ⌊n·(r+1)/P⌋) of each, so each rank's
// optimizer memory is about 1/P of the replicated run's. A step: the averaged gradient as in
// data_parallel.hpp (on every rank), Adam on this rank's slice only (the same arithmetic, element
// by element, as the replicated update: the result is bit-identical), then MPI_Allgatherv of the
// updated slices, which every rank writes back into its parameters.
//
// Element by element the same arithmetic needs one thing of the build: Eigen's vectorised float
// sqrt must round as its scalar one does. With EIGEN_FAST_MATH (Eigen's default) the vector path
// approximates it (rsqrt and a Newton step), so an element's update would depend on whether it
// falls in a packet or in the tail of its array, which differs between a whole column-major
// matrix and a C-order slice: the example is built with EIGEN_FAST_MATH=0 (examples/CMakeLists.txt).
//
// Checkpoints are the files of the replicated run (either mode resumes the other's steps). This
// rank's state is the training state of its slices, `ckpt::training_state(p, state)` with `p` its
// slices of the parameters: the same entry names as the replicated run's (a section's prefix, then
// the leaf's name, `l1.w`... in both), and each of its tensor entries is this rank's part of the
// whole entry of that name. The checkpoint manager writes those parts (a section of slices,
// ckpt::mpi::sliced), and the step whole; the restore reads this rank's part of every tensor entry with ckpt::mpi::read_flat (those
// bytes only, whichever rank count wrote the step), reads the training state of its slices out of
// them, as strictly as the replicated run reads its own, and gathers the parameters whole.

#include "data_parallel.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>
#include <ckpt/params.hpp>
#include <ckpt/section.hpp>
#include <ckpt/snapshot.hpp>

#include <mpi.h>

#include <Eigen/Core>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlp_example {

// One rank's C-order slices of the four tensors of an mlp, named as the mlp's leaves.
struct flat_linear {
  Eigen::VectorXf w, b;
};
struct flat_mlp {
  flat_linear l1, l2;
};

// The four tensors of an mlp: its leaf names, and its matrices in the order of flat_mlp's.
inline constexpr std::array<std::string_view, 4> leaf_names{"l1.w", "l1.b", "l2.w", "l2.b"};

// Which of the four tensors the entry `name` of a training state holds (`<section>.l1.w` is l1.w),
// or -1 for an entry of none (the step).
inline int tensor_of(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    const std::string_view leaf = leaf_names[static_cast<std::size_t>(i)];
    if (name.size() > leaf.size() && name.ends_with(leaf) && name[name.size() - leaf.size() - 1] == '.') return i;
  }
  return -1;
}

template <class M, class F>
void for_each_tensor(M& p, F&& f) {
  f(0, p.l1.w);
  f(1, p.l1.b);
  f(2, p.l2.w);
  f(3, p.l2.b);
}
inline Eigen::VectorXf& part(flat_mlp& p, int i) {
  return i == 0 ? p.l1.w : i == 1 ? p.l1.b : i == 2 ? p.l2.w : p.l2.b;
}
inline const Eigen::VectorXf& part(const flat_mlp& p, int i) { return part(const_cast<flat_mlp&>(p), i); }

// Rank r of P's share of n elements.
inline Eigen::Index share_begin(Eigen::Index n, int rank, int ranks) { return n * rank / ranks; }

// The entry shape of a matrix or vector leaf: [rows, cols] or [n].
inline ckpt::dims shape_of(const Eigen::MatrixXf& m) { return {m.rows(), m.cols()}; }
inline ckpt::dims shape_of(const Eigen::VectorXf& v) { return {v.size()}; }

// Element k of `x` in C order.
inline float& c_order(Eigen::MatrixXf& m, Eigen::Index k) { return m(k / m.cols(), k % m.cols()); }
inline float& c_order(Eigen::VectorXf& v, Eigen::Index k) { return v[k]; }
inline float c_order(const Eigen::MatrixXf& m, Eigen::Index k) { return m(k / m.cols(), k % m.cols()); }
inline float c_order(const Eigen::VectorXf& v, Eigen::Index k) { return v[k]; }

class zero_optimizer {
 public:
  // Zero moments for `params` (replicated on every rank of `comm`), this rank's slices.
  zero_optimizer(MPI_Comm comm, const ckpt::adam& opt, const mlp& params) : comm_(comm) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &ranks_);
    for_each_tensor(params, [&](int i, const auto& x) {
      shapes_[static_cast<std::size_t>(i)] = shape_of(x);
      first_[static_cast<std::size_t>(i)] = share_begin(x.size(), rank_, ranks_);
      part(template_, i).resize(share_begin(x.size(), rank_ + 1, ranks_) - first_[static_cast<std::size_t>(i)]);
    });
    state_ = opt.init(template_);
  }

  // One training step (see the top of this file). Returns the loss, as train_step_mpi.
  float step(const dataset& data, batch_order& order, const ckpt::adam& opt, mlp& params, int groups, reduction how) {
    mlp grads;
    const float loss = averaged_gradient(comm_, data, order, params, state_.step, groups, how, grads);
    flat_mlp p = slice_of(params), g = slice_of(grads);
    opt.update(p, g, state_);
    gather(p, params);
    return loss;
  }

  // The updates done so far.
  [[nodiscard]] std::int64_t steps() const { return state_.step; }

  // The bytes of Adam's moments this rank holds.
  [[nodiscard]] std::size_t bytes() const {
    std::size_t n = 0;
    for (int i = 0; i < 4; ++i) n += 2 * sizeof(float) * static_cast<std::size_t>(part(state_.mu.values, i).size());
    return n;
  }

  // Saves step steps() collectively through `manager` (see the top of this file), in the
  // background if `in_background` (the next save or wait() commits it): every tensor entry of the
  // training state of this rank's slices as its part of the whole entry (the parameters too: each
  // rank writes its part of them), the step whole (written once).
  void save(ckpt::checkpoint_manager& manager, const mlp& params, const ckpt::metadata_map& metadata,
            bool in_background) {
    flat_mlp p = slice_of(params);
    const ckpt::checkpoint mine = arena_.snapshot(ckpt::training_state(p, state_));
    std::vector<ckpt::mpi::slice> slices;
    std::vector<ckpt::checkpoint::entry> whole;
    for (const auto& [name, x] : mine) {
      if (const int i = tensor_of(name); i >= 0)
        slices.push_back(ckpt::mpi::slice::flat(name, shapes_[static_cast<std::size_t>(i)],
                                                first_[static_cast<std::size_t>(i)], x));
      else
        whole.emplace_back(name, x);
    }
    const std::vector<ckpt::section> sections{ckpt::mpi::sliced(slices), ckpt::checkpoint(std::move(whole))};
    if (in_background) manager.save_async(state_.step, sections, metadata);
    else manager.save(state_.step, sections, metadata, /*force=*/true);
  }

  // Restores the parameters and this rank's slices of the moments from a step saved on any number
  // of ranks, sliced or not (see the top of this file). Collective: the parameters are gathered.
  void restore(const ckpt::checkpoint& t, mlp& params) {
    std::vector<ckpt::checkpoint> mine;
    for (const auto& [name, x] : t) {
      const int i = tensor_of(name);
      if (i < 0) {
        mine.push_back(ckpt::of_tensor(name, x));
        continue;
      }
      Eigen::VectorXf piece(part(template_, i).size());
      ckpt::mpi::read_flat(t, name, first_[static_cast<std::size_t>(i)], piece);
      mine.push_back(ckpt::of_params(piece, name));
    }
    flat_mlp p = template_;
    ckpt::read_params(ckpt::concat(mine), ckpt::training_state(p, state_));  // strict
    gather(p, params);
  }

 private:
  // This rank's slices of `x`'s tensors.
  flat_mlp slice_of(const mlp& x) const {
    flat_mlp out = template_;
    for_each_tensor(x, [&](int i, const auto& m) {
      Eigen::VectorXf& s = part(out, i);
      for (Eigen::Index k = 0; k < s.size(); ++k) s[k] = c_order(m, first_[static_cast<std::size_t>(i)] + k);
    });
    return out;
  }

  // Every rank's slices `p`, back into every rank's whole tensors `params` (collective).
  void gather(const flat_mlp& p, mlp& params) const {
    for_each_tensor(params, [&](int i, auto& x) {
      std::vector<int> counts(static_cast<std::size_t>(ranks_)), offsets(counts.size());
      for (int r = 0; r < ranks_; ++r) {
        offsets[static_cast<std::size_t>(r)] = static_cast<int>(share_begin(x.size(), r, ranks_));
        counts[static_cast<std::size_t>(r)] =
            static_cast<int>(share_begin(x.size(), r + 1, ranks_)) - offsets[static_cast<std::size_t>(r)];
      }
      std::vector<float> all(static_cast<std::size_t>(x.size()));
      const Eigen::VectorXf& mine = part(p, i);
      MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), counts.data(), offsets.data(),
                     MPI_FLOAT, comm_);
      for (Eigen::Index k = 0; k < x.size(); ++k) c_order(x, k) = all[static_cast<std::size_t>(k)];
    });
  }

  MPI_Comm comm_;
  int rank_ = 0, ranks_ = 1;
  std::array<ckpt::dims, 4> shapes_;  // the whole tensors' shapes
  std::array<Eigen::Index, 4> first_{};
  flat_mlp template_;  // the slices' shapes
  ckpt::adam_state<flat_mlp> state_;
  ckpt::snapshot_arena arena_;  // the saves' copies of this rank's state, in memory reused
};

}  // namespace mlp_example
