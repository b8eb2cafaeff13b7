// cereal's binary archive with the hand-written Eigen save/load a user writes (rows, cols, then
// the storage bytes as they are), through std::ofstream, then fsynced. Not atomic, no dtype check.
#include "peers.hpp"

#include <cereal/archives/binary.hpp>
#include <cereal/types/vector.hpp>

#include <fstream>
#include <stdexcept>

namespace Eigen {

template <class Archive, class S, int R, int C, int O, int MR, int MC>
void save(Archive& ar, const Matrix<S, R, C, O, MR, MC>& m) {
  const Index rows = m.rows(), cols = m.cols();
  ar(rows, cols);
  ar(cereal::binary_data(m.data(), static_cast<std::size_t>(m.size()) * sizeof(S)));
}

template <class Archive, class S, int R, int C, int O, int MR, int MC>
void load(Archive& ar, Matrix<S, R, C, O, MR, MC>& m) {
  Index rows = 0, cols = 0;
  ar(rows, cols);
  m.resize(rows, cols);  // a no-op when the preallocated matrix has the shape
  ar(cereal::binary_data(m.data(), static_cast<std::size_t>(m.size()) * sizeof(S)));
}

}  // namespace Eigen

namespace peers {

template <class M>
void cereal_binary::save(const model<M>& m, const fs::path& path) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    cereal::BinaryOutputArchive ar(out);
    ar(m.layers);
    if (!out.flush()) throw std::runtime_error("cereal: write " + path.string());
  }
  fsync_file(path);
}

template <class M>
void cereal_binary::load(model<M>& m, const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  cereal::BinaryInputArchive ar(in);
  // cereal's vector load resizes the vector and then loads each element in place.
  ar(m.layers);
}

PEERS_INSTANTIATE(cereal_binary)

}  // namespace peers
