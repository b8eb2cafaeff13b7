#pragma once
// The data-parallel training step of mlp_trainer_mpi, kept apart from the command line so that
// tests/mpi/test_mpi_trainer.cpp trains exactly the same way through the library API.
//
// Determinism across rank counts. Each step's global batch (the same indices as the
// single-process trainer's, from examples/mlp_trainer/mlp.hpp) is cut into `groups` fixed groups
// of batch/groups samples. A group's gradient depends only on the parameters and its samples, so
// it is the same bits whichever rank computes it. Rank r of P computes groups
// [⌊r·G/P⌋, ⌊(r+1)·G/P⌋): the groups split over the ranks as evenly as they can (8 groups on 3
// ranks: 2, 3 and 3; a rank beyond the G-th computes none). The ranks then combine them in one of
// two ways:
//
//  - `reduction::ordered` (the default): MPI_Allgather of every group's gradient, and every rank
//    adds them in group order 0, 1, ..., G−1. The floating-point additions are then the same for
//    any P: a run on 4 ranks, on 3, on 1, or saved on 4 and resumed on 3, gives the same bits.
//  - `reduction::allreduce`: each rank adds its own groups, and MPI_Allreduce(MPI_SUM) adds the
//    ranks' sums. The order of those additions is the MPI library's (it depends on P, and on the
//    algorithm chosen for the message size), so only runs on the same number of ranks, with the
//    same MPI, agree bit for bit; it moves G/P times fewer bytes.
//
// Either way every rank ends the step with the same averaged gradient and applies the same Adam
// update, so the parameters and Adam's state stay replicated (identical) on every rank.

#include "../mlp_trainer/mlp.hpp"

#include <ckpt/adam.hpp>

#include <mpi.h>

#include <Eigen/Core>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <numeric>
#include <vector>

namespace mlp_example {

enum class reduction { ordered, allreduce };

// The gradient as one vector (l1.w, l1.b, l2.w, l2.b, each in Eigen's storage order) and back.
inline Eigen::Index flat_size(const mlp& p) { return p.l1.w.size() + p.l1.b.size() + p.l2.w.size() + p.l2.b.size(); }

inline void flatten(const mlp& g, float* out) {
  Eigen::Map<Eigen::MatrixXf>(out, g.l1.w.rows(), g.l1.w.cols()) = g.l1.w;
  out += g.l1.w.size();
  Eigen::Map<Eigen::VectorXf>(out, g.l1.b.size()) = g.l1.b;
  out += g.l1.b.size();
  Eigen::Map<Eigen::MatrixXf>(out, g.l2.w.rows(), g.l2.w.cols()) = g.l2.w;
  out += g.l2.w.size();
  Eigen::Map<Eigen::VectorXf>(out, g.l2.b.size()) = g.l2.b;
}

inline void unflatten(const float* in, mlp& g) {
  g.l1.w = Eigen::Map<const Eigen::MatrixXf>(in, g.l1.w.rows(), g.l1.w.cols());
  in += g.l1.w.size();
  g.l1.b = Eigen::Map<const Eigen::VectorXf>(in, g.l1.b.size());
  in += g.l1.b.size();
  g.l2.w = Eigen::Map<const Eigen::MatrixXf>(in, g.l2.w.rows(), g.l2.w.cols());
  in += g.l2.w.size();
  g.l2.b = Eigen::Map<const Eigen::VectorXf>(in, g.l2.b.size());
}

// Checks that `batch` samples split into `groups` equal groups.
inline void check_split(int batch, int groups) {
  if (groups < 1 || batch % groups != 0)
    throw std::invalid_argument("the batch of " + std::to_string(batch) + " samples does not split into " +
                                std::to_string(groups) + " equal groups");
}

// The first group rank `rank` of `ranks` computes; its groups are [first_group(rank), first_group(rank + 1)).
inline int first_group(int rank, int ranks, int groups) {
  return static_cast<int>(static_cast<long long>(rank) * groups / ranks);
}

// The indices of step `step`'s mini-batch. Each epoch visits the data in its own shuffled order,
// a permutation of (seed, epoch); a step takes the next `batch` indices of its epoch's order
// (the remainder that does not fill a batch is skipped). Nothing depends on earlier steps, so a
// resumed run, on any number of ranks, needs only the step count to continue the same sequence
// (the single-process trainer checkpoints its shuffling engine instead: see shuffled_batches).
class batch_order {
 public:
  batch_order(std::uint64_t seed, int size, int batch) : seed_(seed), size_(size), batch_(batch) {}

  std::vector<int> batch(std::int64_t step) {
    const std::int64_t per_epoch = size_ / batch_;
    const std::int64_t epoch = step / per_epoch;
    if (epoch != epoch_) {
      order_.resize(static_cast<std::size_t>(size_));
      std::iota(order_.begin(), order_.end(), 0);
      rng r(stream(seed_, 3, static_cast<std::uint64_t>(epoch)));
      for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[r.next() % (i + 1)]);
      epoch_ = epoch;
    }
    const auto first = order_.begin() + (step % per_epoch) * batch_;
    return {first, first + batch_};
  }

 private:
  std::uint64_t seed_;
  int size_, batch_;
  std::int64_t epoch_ = -1;
  std::vector<int> order_;
};

// This process's rank in `comm`, and the number of ranks.
struct place {
  int rank = 0;
  int ranks = 0;
};
inline place place_in(MPI_Comm comm) {
  place p;
  MPI_Comm_rank(comm, &p.rank);
  MPI_Comm_size(comm, &p.ranks);
  return p;
}

// The gradient of the global mini-batch of step `step` at `params`, averaged over the ranks of
// `comm` as described above, into `grads` on every rank. Returns the mean loss of the global batch
// (the same on every rank).
inline float averaged_gradient(MPI_Comm comm, const dataset& data, batch_order& order, const mlp& params,
                               std::int64_t step, int groups, reduction how, mlp& grads) {
  const auto [rank, ranks] = place_in(comm);
  const std::vector<int> idx = order.batch(step);
  const int per_group = static_cast<int>(idx.size()) / groups;
  const int first = first_group(rank, ranks, groups);
  const int mine = first_group(rank + 1, ranks, groups) - first;
  const auto n = static_cast<std::size_t>(flat_size(params));
  const std::size_t stride = n + 1;  // the gradient, then the loss

  // This rank's groups: gradient and loss of each, each the mean over its group's samples.
  std::vector<float> local(static_cast<std::size_t>(mine) * stride);
  mlp g;
  for (int k = 0; k < mine; ++k) {
    const int group = first + k;
    const std::vector<int> part(idx.begin() + group * per_group, idx.begin() + (group + 1) * per_group);
    const Eigen::MatrixXf x = data.x(Eigen::all, part);
    std::vector<int> y(part.size());
    for (std::size_t j = 0; j < part.size(); ++j) y[j] = data.y[static_cast<std::size_t>(part[j])];
    float* slot = local.data() + static_cast<std::size_t>(k) * stride;
    slot[n] = loss_and_grads(params, x, y, g);
    flatten(g, slot);
  }

  std::vector<float> sum(stride, 0.0f);
  if (how == reduction::ordered) {
    std::vector<float> all(static_cast<std::size_t>(groups) * stride);
    std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const int from = first_group(r, ranks, groups);
      offsets[static_cast<std::size_t>(r)] = from * static_cast<int>(stride);
      counts[static_cast<std::size_t>(r)] = (first_group(r + 1, ranks, groups) - from) * static_cast<int>(stride);
    }
    MPI_Allgatherv(local.data(), static_cast<int>(local.size()), MPI_FLOAT, all.data(), counts.data(), offsets.data(),
                   MPI_FLOAT, comm);
    // Group 0 first, then 1, ...: the same additions in the same order for any number of ranks.
    for (int group = 0; group < groups; ++group)
      for (std::size_t j = 0; j < stride; ++j) sum[j] += all[static_cast<std::size_t>(group) * stride + j];
  } else {
    std::vector<float> partial(stride, 0.0f);
    for (int k = 0; k < mine; ++k)
      for (std::size_t j = 0; j < stride; ++j) partial[j] += local[static_cast<std::size_t>(k) * stride + j];
    MPI_Allreduce(partial.data(), sum.data(), static_cast<int>(stride), MPI_FLOAT, MPI_SUM, comm);
  }
  const float scale = 1.0f / static_cast<float>(groups);
  for (float& v : sum) v *= scale;
  grads = params;  // shapes
  unflatten(sum.data(), grads);
  return sum[n];
}

// One data-parallel training step on the ranks of `comm`: the averaged gradient of the global
// mini-batch of step `state.step`, one Adam update on every rank. Returns the mean loss of the
// global batch before the update (the same on every rank).
inline float train_step_mpi(MPI_Comm comm, const dataset& data, batch_order& order, const ckpt::adam& opt,
                            mlp& params, ckpt::adam_state<mlp>& state, int groups, reduction how) {
  mlp grads;
  const float loss = averaged_gradient(comm, data, order, params, state.step, groups, how, grads);
  opt.update(params, grads, state);
  return loss;
}

}  // namespace mlp_example
