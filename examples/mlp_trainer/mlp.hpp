#pragma once
// The model, data and training step of the mlp_trainer example, kept apart from the command
// line so that tests/test_resume.cpp trains exactly the same way through the library API.
//
// The data set and the initial parameters are functions of the seed; the data order is drawn
// from a std::mt19937_64 the checkpoint holds (see shuffled_batches). Together with the
// parameters and Adam's state in the checkpoint, that makes a resumed run bit-identical to an
// uninterrupted one, mid-epoch included.

#include <ckpt/adam.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace mlp_example {

struct linear {
  Eigen::MatrixXf w;  // [out, in]
  Eigen::VectorXf b;  // [out]
};

// Two layers: 2 inputs -> `hidden` tanh units -> 2 class logits. Saved as l1.w, l1.b, l2.w, l2.b.
struct mlp {
  linear l1, l2;
};

// SplitMix64: tiny, portable and fully specified, unlike the standard distributions, whose
// output differs between standard libraries.
class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), from the top 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  std::uint64_t state_;
};

// Independent streams for independent purposes, all from the one user seed.
inline std::uint64_t stream(std::uint64_t seed, std::uint64_t purpose, std::uint64_t index = 0) {
  rng r(seed ^ (purpose * 0xd1b54a32d192ed03ULL));
  const std::uint64_t a = r.next();
  return rng(a ^ (index * 0x9e3779b97f4a7c15ULL)).next();
}

struct dataset {
  Eigen::MatrixXf x;  // [2, n]: one point per column
  std::vector<int> y; // class 0 or 1 per point
};

// Two interleaved spirals of `per_class` noisy points each.
inline dataset two_spirals(std::uint64_t seed, int per_class = 500) {
  constexpr double pi = 3.14159265358979323846;
  rng r(stream(seed, 1));
  dataset d{Eigen::MatrixXf(2, 2 * per_class), std::vector<int>(static_cast<std::size_t>(2 * per_class))};
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < per_class; ++i) {
      const double t = 0.25 + 3.0 * pi * i / per_class;  // angle along the arm
      const double radius = 3.0 * t / (3.0 * pi);  // up to 3: tanh units need inputs of some size
      const double angle = t + c * pi;
      const int j = c * per_class + i;
      d.x(0, j) = static_cast<float>(radius * std::cos(angle) + r.uniform(-0.1, 0.1));
      d.x(1, j) = static_cast<float>(radius * std::sin(angle) + r.uniform(-0.1, 0.1));
      d.y[static_cast<std::size_t>(j)] = c;
    }
  }
  return d;
}

// Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, zero biases.
inline mlp init_mlp(std::uint64_t seed, int hidden = 32) {
  rng r(stream(seed, 2));
  auto layer = [&r](int out, int in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    linear l{Eigen::MatrixXf(out, in), Eigen::VectorXf::Zero(out)};
    for (Eigen::Index k = 0; k < l.w.size(); ++k) l.w.data()[k] = static_cast<float>(r.uniform(-bound, bound));
    return l;
  };
  mlp m;
  m.l1 = layer(hidden, 2);
  m.l2 = layer(2, hidden);
  return m;
}

// The data order: each epoch visits the data set in a fresh shuffle drawn from a
// std::mt19937_64, and a step takes the next `batch` indices of it (the remainder that does not
// fill a batch is skipped). The order depends on every earlier epoch, as a real data loader's
// does, so a resumed run must restore it: what a checkpoint needs is `data_position` below,
// saved as the section "data" (data.rng, data.served).
//
// The recipe for any data loader: save what draws the order as it was at the start of the
// current epoch (a <random> engine is a leaf: its whole state, exactly), and how far into the
// epoch the loop got; on resume, draw the epoch's order again from the engine and skip what was
// served.
struct data_position {
  std::mt19937_64 rng;      // as it was before the current epoch's shuffle was drawn
  std::int64_t served = 0;  // batches of the current epoch already served
};

class shuffled_batches {
 public:
  shuffled_batches(std::uint64_t seed, int size, int batch)
      : position_{std::mt19937_64(stream(seed, 3)), 0}, size_(size), batch_(batch) {}

  // What a checkpoint saves.
  [[nodiscard]] const data_position& position() const { return position_; }
  // Continues from a saved position: the epoch's order is drawn again from its engine.
  void restore(const data_position& position) {
    position_ = position;
    order_.clear();
  }

  // The indices of the next mini-batch.
  std::vector<int> next() {
    const std::int64_t per_epoch = size_ / batch_;
    if (order_.empty()) draw();  // a new loader, or a restored position
    if (position_.served == per_epoch) {  // the epoch is over: the next one draws from here on
      position_ = {next_epoch_rng_, 0};
      draw();
    }
    const auto first = order_.begin() + position_.served * batch_;
    ++position_.served;
    return {first, first + batch_};
  }

 private:
  data_position position_;
  int size_, batch_;
  std::vector<int> order_;           // the current epoch's order (empty: to be drawn)
  std::mt19937_64 next_epoch_rng_;   // the engine after drawing it

  // The current epoch's order, drawn from `position_.rng` by Fisher-Yates with `r() % n`: the
  // same order on every standard library (unlike std::shuffle), at the price of a bias of n / 2^64.
  void draw() {
    order_.resize(static_cast<std::size_t>(size_));
    std::iota(order_.begin(), order_.end(), 0);
    std::mt19937_64 r = position_.rng;
    for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[r() % (i + 1)]);
    next_epoch_rng_ = r;
  }
};

// Mean cross-entropy of the batch and its gradient with respect to every parameter.
inline float loss_and_grads(const mlp& p, const Eigen::MatrixXf& x, const std::vector<int>& y, mlp& g) {
  const auto n = static_cast<float>(x.cols());
  const Eigen::MatrixXf a1 = ((p.l1.w * x).colwise() + p.l1.b).array().tanh().matrix();
  Eigen::MatrixXf logits = (p.l2.w * a1).colwise() + p.l2.b;
  // Softmax per column, shifted by the column's maximum for stability.
  const Eigen::RowVectorXf top = logits.colwise().maxCoeff();
  Eigen::MatrixXf probs = (logits.rowwise() - top).array().exp().matrix();
  probs.array().rowwise() /= probs.colwise().sum().array();
  float loss = 0;
  for (Eigen::Index j = 0; j < x.cols(); ++j) loss -= std::log(probs(y[static_cast<std::size_t>(j)], j));
  loss /= n;

  Eigen::MatrixXf dlogits = probs;  // d loss / d logits = (softmax - one_hot) / n
  for (Eigen::Index j = 0; j < x.cols(); ++j) dlogits(y[static_cast<std::size_t>(j)], j) -= 1.0f;
  dlogits /= n;
  g.l2.w = dlogits * a1.transpose();
  g.l2.b = dlogits.rowwise().sum();
  const Eigen::MatrixXf dz1 = ((p.l2.w.transpose() * dlogits).array() * (1.0f - a1.array().square())).matrix();
  g.l1.w = dz1 * x.transpose();
  g.l1.b = dz1.rowwise().sum();
  return loss;
}

// One training step: the mini-batch of step `state.step`, gradients, one Adam update (which
// advances `state.step`). Returns the batch loss before the update.
inline float train_step(const dataset& data, shuffled_batches& order, const ckpt::adam& opt, mlp& params,
                        ckpt::adam_state<mlp>& state) {
  const std::vector<int> idx = order.next();
  const Eigen::MatrixXf x = data.x(Eigen::all, idx);
  std::vector<int> y(idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) y[k] = data.y[static_cast<std::size_t>(idx[k])];
  mlp grads;
  const float loss = loss_and_grads(params, x, y, grads);
  opt.update(params, grads, state);
  return loss;
}

// The fraction of the data set classified correctly.
inline double accuracy(const mlp& p, const dataset& data) {
  const Eigen::MatrixXf a1 = ((p.l1.w * data.x).colwise() + p.l1.b).array().tanh().matrix();
  const Eigen::MatrixXf logits = (p.l2.w * a1).colwise() + p.l2.b;
  int right = 0;
  for (Eigen::Index j = 0; j < logits.cols(); ++j) {
    const int guess = logits(1, j) > logits(0, j) ? 1 : 0;
    right += guess == data.y[static_cast<std::size_t>(j)];
  }
  return static_cast<double>(right) / static_cast<double>(logits.cols());
}

}  // namespace mlp_example
