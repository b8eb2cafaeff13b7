// Boost.Serialization's binary archive with the usual hand-written Eigen serialize (rows, cols,
// make_binary_object over the storage), through std::ofstream, then fsynced. Not atomic, no dtype
// check.
#include "peers.hpp"

#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/binary_object.hpp>
#include <boost/serialization/split_free.hpp>

#include <fstream>
#include <stdexcept>

namespace boost::serialization {

template <class Archive, class S, int R, int C, int O, int MR, int MC>
void save(Archive& ar, const Eigen::Matrix<S, R, C, O, MR, MC>& m, unsigned) {
  const Eigen::Index rows = m.rows(), cols = m.cols();
  ar << rows << cols;
  ar << make_binary_object(const_cast<S*>(m.data()), static_cast<std::size_t>(m.size()) * sizeof(S));
}

template <class Archive, class S, int R, int C, int O, int MR, int MC>
void load(Archive& ar, Eigen::Matrix<S, R, C, O, MR, MC>& m, unsigned) {
  Eigen::Index rows = 0, cols = 0;
  ar >> rows >> cols;
  m.resize(rows, cols);
  ar >> make_binary_object(m.data(), static_cast<std::size_t>(m.size()) * sizeof(S));
}

template <class Archive, class S, int R, int C, int O, int MR, int MC>
void serialize(Archive& ar, Eigen::Matrix<S, R, C, O, MR, MC>& m, unsigned version) {
  split_free(ar, m, version);
}

}  // namespace boost::serialization

namespace peers {

template <class M>
void boost_binary::save(const model<M>& m, const fs::path& path) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    boost::archive::binary_oarchive ar(out);
    for (const auto& x : m.layers) ar << x;
    if (!out.flush()) throw std::runtime_error("boost: write " + path.string());
  }
  fsync_file(path);
}

template <class M>
void boost_binary::load(model<M>& m, const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  boost::archive::binary_iarchive ar(in);
  for (auto& x : m.layers) ar >> x;
}

PEERS_INSTANTIATE(boost_binary)

}  // namespace peers
