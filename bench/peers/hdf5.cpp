// HDF5's C API, as a user would write it: one dataset a matrix, [rows, cols] as Eigen stores them
// (a column-major matrix's bytes go out as they are, so another reader sees its transpose), the
// file flushed and fsynced. Replaces the file in place (H5F_ACC_TRUNC): not atomic.
#include "peers.hpp"

#include <hdf5.h>

#include <fcntl.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

namespace peers {
namespace {

void check(herr_t status, const char* what) {
  if (status < 0) throw std::runtime_error(std::string("hdf5: ") + what);
}

template <class M>
hsize_t rows_of(const M& x) {
  return static_cast<hsize_t>(M::IsRowMajor ? x.rows() : x.cols());
}
template <class M>
hsize_t cols_of(const M& x) {
  return static_cast<hsize_t>(M::IsRowMajor ? x.cols() : x.rows());
}

}  // namespace

template <class M>
void hdf5::save(const model<M>& m, const fs::path& path) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("hdf5: create " + path.string());
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const hsize_t dims[2] = {rows_of(m.layers[i]), cols_of(m.layers[i])};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t set = H5Dcreate2(file, ("layers." + std::to_string(i)).c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT);
    check(H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.layers[i].data()), "write");
    H5Dclose(set);
    H5Sclose(space);
  }
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush");
  int* fd = nullptr;
  check(H5Fget_vfd_handle(file, H5P_DEFAULT, reinterpret_cast<void**>(&fd)), "vfd handle");
  if (::fsync(*fd) != 0) throw std::runtime_error("hdf5: fsync");
  H5Fclose(file);
}

template <class M>
void hdf5::load(model<M>& m, const fs::path& path) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("hdf5: open " + path.string());
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const hid_t set = H5Dopen2(file, ("layers." + std::to_string(i)).c_str(), H5P_DEFAULT);
    if (set < 0) throw std::runtime_error("hdf5: no dataset layers." + std::to_string(i));
    // The shape check a careful user writes: the dataset must match the matrix.
    const hid_t space = H5Dget_space(set);
    hsize_t dims[2] = {0, 0};
    if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, nullptr) != 2 ||
        dims[0] != rows_of(m.layers[i]) || dims[1] != cols_of(m.layers[i]))
      throw std::runtime_error("hdf5: shape mismatch");
    check(H5Dread(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.layers[i].data()), "read");
    H5Sclose(space);
    H5Dclose(set);
  }
  H5Fclose(file);
}

PEERS_INSTANTIATE(hdf5)

}  // namespace peers
