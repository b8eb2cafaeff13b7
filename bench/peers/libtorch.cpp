// libtorch's torch::save / torch::load of tensors that wrap the matrices' memory (from_blob, the
// storage's own shape: a column-major matrix goes out as its transpose), then copied into the
// preallocated matrices on load. torch::save writes a zip through a stream: not atomic; a load
// checks nothing against the matrices but what this code checks (the element count).
#include "peers.hpp"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

namespace peers {

template <class M>
void libtorch::save(const model<M>& m, const fs::path& path) {
  std::vector<torch::Tensor> tensors;
  tensors.reserve(m.layers.size());
  for (const auto& x : m.layers) {
    const std::int64_t outer = M::IsRowMajor ? x.rows() : x.cols(), inner = M::IsRowMajor ? x.cols() : x.rows();
    tensors.push_back(torch::from_blob(const_cast<float*>(x.data()), {outer, inner}, torch::kFloat32));
  }
  torch::save(tensors, path.string());
  fsync_file(path);
}

template <class M>
void libtorch::load(model<M>& m, const fs::path& path) {
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, path.string());
  if (tensors.size() != m.layers.size()) throw std::runtime_error("libtorch: wrong tensor count");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor t = tensors[i].contiguous();
    if (t.numel() != m.layers[i].size() || t.scalar_type() != torch::kFloat32)
      throw std::runtime_error("libtorch: tensor mismatch");
    std::memcpy(m.layers[i].data(), t.data_ptr<float>(), static_cast<std::size_t>(t.numel()) * sizeof(float));
  }
}

PEERS_INSTANTIATE(libtorch)

}  // namespace peers
