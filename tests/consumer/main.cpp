// Uses an installed ckpt: saves a struct holding Eigen leaves and a step counter, loads the
// file back and checks every value. Exits 0 on success. argv[1]: the file to write.
#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace {

struct linear {
  Eigen::MatrixXf w;
  Eigen::VectorXd b;
};

int fail(const char* what) {
  std::cerr << "ckpt_consumer: FAILED: " << what << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: ckpt_consumer FILE.safetensors\n";
    return 2;
  }
  const std::filesystem::path path = argv[1];
  try {
    linear params{Eigen::MatrixXf(2, 3), Eigen::VectorXd(2)};
    params.w << 1, 2, 3, 4, 5, 6;
    params.b << -0.5, 0.25;

    ckpt::save(path, ckpt::concat({ckpt::of_params(params, "model"), ckpt::of_int("step", 42)}));
    const ckpt::checkpoint loaded = ckpt::load(path);

    const linear like{Eigen::MatrixXf::Zero(2, 3), Eigen::VectorXd::Zero(2)};
    const linear back = ckpt::to_params(loaded, like, ckpt::extract_options{.prefix = "model"});
    if (back.w != params.w) return fail("model.w differs after the round trip");
    if (back.b != params.b) return fail("model.b differs after the round trip");
    if (ckpt::to_int("step", loaded) != 42) return fail("step differs after the round trip");

    // The file holds C (row-major) order whatever Eigen's storage order: w[0][1] == w(0, 1).
    const ckpt::tensor& w = loaded.get("model.w");
    if (ckpt::to_string(w.dtype()) != "F32") return fail("model.w is not F32");
    if (w.as<float>().size() != 6 || w.as<float>()[1] != 2.0f) return fail("model.w is not in C order");
    if (loaded.names().size() != 3) return fail("the file does not hold exactly 3 entries");
  } catch (const std::exception& e) {
    std::cerr << "ckpt_consumer: FAILED with an exception: " << e.what() << '\n';
    return 1;
  }
  std::cout << "ckpt_consumer: OK (" << path.string() << ")\n";
  return 0;
}
