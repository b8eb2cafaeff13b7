// bench/peers, how does ckpt compare with its peers: the same training state saved and loaded by
// ckpt and by what a C++ user would otherwise write. Each peer is a pair of functions over
// `model<M>`: a vector of Eigen matrices, saved including fsync and loaded into preallocated
// matrices of the right shapes.
#pragma once

#include <Eigen/Core>

#include <filesystem>
#include <string>
#include <vector>

namespace peers {

namespace fs = std::filesystem;

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using col_matrix = Eigen::MatrixXf;

template <class M>
struct model {
  std::vector<M> layers;
};

// One peer: its name, whether it can replace a file atomically, whether a load checks dtypes and
// shapes, and whether another reader sees the matrix (not its transpose) for column-major data.
struct traits {
  std::string name;
  bool atomic, checks, c_order;
};

// Flushes `path` to the disk (for the peers that write through streams).
void fsync_file(const fs::path& path);

// The peers that need their own translation unit (heavy headers): each defines save/load for
// the three model types.
#define PEERS_DECLARE(peer)                                                 \
  namespace peer {                                                          \
  template <class M>                                                        \
  void save(const model<M>& m, const fs::path& path);                      \
  template <class M>                                                        \
  void load(model<M>& m, const fs::path& path);                            \
  }
PEERS_DECLARE(hdf5)
PEERS_DECLARE(cereal_binary)
PEERS_DECLARE(boost_binary)
PEERS_DECLARE(libtorch)
#undef PEERS_DECLARE

// Explicit instantiations for the three cases, in each peer's .cpp.
#define PEERS_INSTANTIATE(peer)                                          \
  template void peer::save(const model<col_matrix>&, const fs::path&);   \
  template void peer::save(const model<row_matrix>&, const fs::path&);   \
  template void peer::save(const model<Eigen::VectorXf>&, const fs::path&); \
  template void peer::load(model<col_matrix>&, const fs::path&);         \
  template void peer::load(model<row_matrix>&, const fs::path&);         \
  template void peer::load(model<Eigen::VectorXf>&, const fs::path&);

}  // namespace peers
