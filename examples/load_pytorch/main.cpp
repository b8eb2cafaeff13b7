// examples/load_pytorch: loads the weights of a small PyTorch MLP, from a torch.save file
// (pytorch_model.bin) or a safetensors file laid out as torch.nn.Sequential names them, adapts them
// to an Eigen model, and checks a forward pass against the outputs stored in the same file.
//
//   load_pytorch [file]   (default: the torch_mlp.safetensors beside this source; torch_mlp.bin
//                          beside it holds the same tensors, written by torch.save)
//
// The file (written by make_torch_mlp.py) holds, as torch's state_dict of
// Sequential(Linear(4, 8), ReLU(), Linear(8, 3)) in BF16 does, the entries `0.weight` [8, 4],
// `0.bias` [8], `2.weight` [3, 8], `2.bias` [3]; and `test.input` [5, 4], `test.output` [5, 3] in
// F32. Exits 0 if every output is within `tolerance` of the stored one, 1 otherwise, 2 on an error.

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#ifndef CKPT_TORCH_MLP
#define CKPT_TORCH_MLP "torch_mlp.safetensors"
#endif

namespace {

// The model computes y = x W + b on a batch of row vectors, so W is [in, out]: the transpose of
// torch's Linear weight, which is [out, in] for y = x W^T + b.
struct linear {
  Eigen::MatrixXf w;     // [in, out]
  Eigen::RowVectorXf b;  // [out]: a compile-time row vector is saved with shape [out]
};

struct mlp {
  linear l1, l2;
};

Eigen::MatrixXf forward(const mlp& m, const Eigen::MatrixXf& x) {
  const Eigen::MatrixXf h = ((x * m.l1.w).rowwise() + m.l1.b).cwiseMax(0.0f);  // ReLU
  return (h * m.l2.w).rowwise() + m.l2.b;
}

// The outputs are computed here in F32 and in the file from the same BF16 weights in double,
// then rounded to F32. Each output sums 8 products of hidden units, each of which sums 4 products
// and a bias; with |x| <= 2 and |w| <= 0.5, the F32 rounding error of that is a few units of
// F32's 6e-8 times sums below 10, so about 1e-6 at worst. A tolerance of 1e-5 leaves a margin
// while staying far below what a wrong model gives: outputs from the weights before BF16
// rounding (0.4% relative error per weight) differ by about 1e-3.
constexpr float tolerance = 1e-5f;

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : CKPT_TORCH_MLP;
  try {
    // [load_pytorch]
    // A safetensors file or a torch.save file (pytorch_model.bin, *.pt, read without Python):
    // load tells them apart by their content.
    ckpt::checkpoint t = ckpt::load(path);
    // torch.nn.Sequential numbers its modules: 0 is the first Linear, 1 the ReLU (no weights),
    // 2 the second Linear. Name them as the struct does: 0.weight -> l1.w, 2.bias -> l2.b.
    t = ckpt::rename(t, [](std::string_view name) {
      std::string out(name);
      if (out.starts_with("0.")) out.replace(0, 2, "l1.");
      if (out.starts_with("2.")) out.replace(0, 2, "l2.");
      if (out.ends_with(".weight")) out.replace(out.size() - 6, 6, "w");
      if (out.ends_with(".bias")) out.replace(out.size() - 4, 4, "b");
      return out;
    });
    t = ckpt::transpose(t, "l1.w");       // [8, 4] (out, in) -> [4, 8] (in, out)
    t = ckpt::transpose(t, "l2.w");       // [3, 8] -> [8, 3]
    t = ckpt::cast(t, ckpt::dtype::f32);  // BF16 -> F32, exactly; F32 entries are shared

    // The model's shapes are the template: a missing entry or a wrong shape throws, naming it.
    const mlp like{{Eigen::MatrixXf(4, 8), Eigen::RowVectorXf(8)},
                   {Eigen::MatrixXf(8, 3), Eigen::RowVectorXf(3)}};
    const mlp model = ckpt::to_params(t, like);
    // [load_pytorch]

    // Zero-copy views of the test batch; the forward pass copies the input into its product.
    const auto input = ckpt::matrix_view<float>(t.get("test.input"));
    const auto expected = ckpt::matrix_view<float>(t.get("test.output"));
    const Eigen::MatrixXf output = forward(model, input);
    if (output.rows() != expected.rows() || output.cols() != expected.cols()) {
      std::fprintf(stderr, "load_pytorch: '%s': test.output is %ldx%ld but the model gives %ldx%ld\n",
                   path.c_str(), static_cast<long>(expected.rows()), static_cast<long>(expected.cols()),
                   static_cast<long>(output.rows()), static_cast<long>(output.cols()));
      return 1;
    }
    const float max_diff = (output - expected).cwiseAbs().maxCoeff();
    const auto format = t.metadata().find("format");
    std::printf("%s: %zu entries, format '%s'; %ld inputs, max |output - expected| = %.3g (tolerance %.0e)\n",
                path.c_str(), t.size(), format == t.metadata().end() ? "" : format->second.c_str(),
                static_cast<long>(input.rows()), static_cast<double>(max_diff),
                static_cast<double>(tolerance));
    if (!(max_diff <= tolerance)) {
      std::fprintf(stderr, "load_pytorch: '%s': the forward pass differs from test.output by %g > %g\n",
                   path.c_str(), static_cast<double>(max_diff), static_cast<double>(tolerance));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "load_pytorch: %s\n", e.what());
    return 2;
  }
}
