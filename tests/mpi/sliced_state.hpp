#pragma once
// The global tensors of the tests of steps of slices (test_mpi_sliced, test_mpi_sliced_tiers), as
// each rank holds its pieces and as one process holds them whole.

#include "mpi_test.hpp"

#include <ckpt/mpi.hpp>
#include <ckpt/params.hpp>

#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder

#include <Eigen/Core>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ckpt_mpi_test {

// The global tensors: "w" [13, 7] split by rows, "mu" [1000] and "big" [600 * 1024] (2.4 MiB,
// so that the digest's 1 MiB chunks cut across pieces) split flat, "b" replicated.
constexpr Eigen::Index w_rows = 13, w_cols = 7, mu_size = 1000, big_size = 600 * 1024;

inline float w_at(Eigen::Index i, Eigen::Index j) { return static_cast<float>(100 * i + j); }
inline float mu_at(Eigen::Index k) { return 0.5f * static_cast<float>(k); }
inline float big_at(Eigen::Index k) { return static_cast<float>(k % 9973) - 0.25f; }

// Part `part` of `parts` of n things: [n * part / parts, n * (part + 1) / parts).
inline Eigen::Index part_begin(Eigen::Index n, int part, int parts) { return n * part / parts; }

struct rank_state {
  Eigen::MatrixXf w;                                       // column-major block of rows
  Eigen::VectorXf mu;                                      // flat range
  Eigen::Matrix<float, Eigen::Dynamic, 1> big;             // flat range
  Eigen::VectorXd b;                                       // replicated
  Eigen::Index w_first = 0, mu_first = 0, big_first = 0;
};

// Rank `rank` of `size`'s pieces (`plus` added to every float value): even splits, except that
// "mu" leaves rank 0 empty when there are several ranks.
inline rank_state pieces_of(int rank, int size, float plus = 0) {
  rank_state s;
  s.w_first = part_begin(w_rows, rank, size);
  s.w.resize(part_begin(w_rows, rank + 1, size) - s.w_first, w_cols);
  for (Eigen::Index i = 0; i < s.w.rows(); ++i)
    for (Eigen::Index j = 0; j < w_cols; ++j) s.w(i, j) = w_at(s.w_first + i, j) + plus;
  const int mu_parts = size > 1 ? size - 1 : 1, mu_part = size > 1 ? rank - 1 : 0;
  s.mu_first = mu_part < 0 ? 0 : part_begin(mu_size, mu_part, mu_parts);
  s.mu.resize(mu_part < 0 ? 0 : part_begin(mu_size, mu_part + 1, mu_parts) - s.mu_first);
  for (Eigen::Index k = 0; k < s.mu.size(); ++k) s.mu[k] = mu_at(s.mu_first + k) + plus;
  s.big_first = part_begin(big_size, rank, size);
  s.big.resize(part_begin(big_size, rank + 1, size) - s.big_first);
  for (Eigen::Index k = 0; k < s.big.size(); ++k) s.big[k] = big_at(s.big_first + k) + plus;
  s.b = Eigen::VectorXd::LinSpaced(5, 1.0, 5.0);
  return s;
}

inline std::vector<ckpt::mpi::slice> slices_of(const rank_state& s) {
  return {ckpt::mpi::slice::rows("w", {w_rows, w_cols}, s.w_first, s.w),
          ckpt::mpi::slice::flat("mu", {mu_size}, s.mu_first, s.mu),
          ckpt::mpi::slice::flat("big", {big_size}, s.big_first, s.big)};
}

// The same tensors whole, as one process holds them (`plus` added to every float value).
inline ckpt::checkpoint whole_tensors(float plus = 0) {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w(w_rows, w_cols);
  for (Eigen::Index i = 0; i < w_rows; ++i)
    for (Eigen::Index j = 0; j < w_cols; ++j) w(i, j) = w_at(i, j) + plus;
  Eigen::VectorXf mu(mu_size), big(big_size);
  for (Eigen::Index k = 0; k < mu_size; ++k) mu[k] = mu_at(k) + plus;
  for (Eigen::Index k = 0; k < big_size; ++k) big[k] = big_at(k) + plus;
  return ckpt::concat({ckpt::of_params(w, "w"), ckpt::of_params(mu, "mu"), ckpt::of_params(big, "big"),
                       ckpt::of_params(Eigen::VectorXd(Eigen::VectorXd::LinSpaced(5, 1.0, 5.0)), "b")});
}

inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::filesystem::path shard_of(const std::filesystem::path& folder, std::int64_t step) {
  return ckpt::mpi::detail::step_folder(folder, step) / "model-00001-of-00001.safetensors";
}

}  // namespace ckpt_mpi_test
