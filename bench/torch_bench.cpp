// ckpt_bench_torch: how does reading a torch.save file compare with reading the same tensors as
// safetensors? Load, then extract into a struct of column-major Eigen matrices (to_params), as a
// user would. bench/torch_run.sh writes both files (python3-torch, then `ckpt convert`) and runs:
//
//   ckpt_bench_torch time FILE [--layers=256]
//       seconds to load FILE and extract it, in a fresh process (torch_run.sh alternates the two
//       formats and takes medians: in one process, whichever ran second paid ~0.5 s for the 1 GiB
//       the first had just freed, which skewed any in-process comparison)
//   ckpt_bench_torch rss  FILE [--layers=256]
//       one format in a fresh process; prints its peak RSS (VmHWM) and the data size
//
// The struct is `layers`: `--layers` MatrixXf of the file's shape, named layers.0, layers.1, ...

#include "common.hpp"

#include <ckpt/torch.hpp>

#include <cstdio>

namespace {

using namespace bench;

// A safetensors file or a torch.save one: load tells them apart by their content.
ckpt::checkpoint read(const fs::path& path) { return ckpt::load(path); }

col_model like(const ckpt::checkpoint& t, long layers) {
  const auto shape = t.get("layers.0").shape();
  return make_col_model(layers, static_cast<long>(shape[0]), static_cast<long>(shape[1]), false);
}

double load_extract(const fs::path& path, long layers) {
  const double start = now_s();
  const ckpt::checkpoint t = read(path);
  col_model m = like(t, layers);
  ckpt::read_params(t, m);
  const double seconds = now_s() - start;
  return seconds;
}

}  // namespace

int main(int argc, char** argv) try {
  const args a(argc, argv);
  const long layers = a.num("layers", 256);
  if (a.positional.size() == 2 && a.positional[0] == "time") {
    std::printf("%.4f\n", load_extract(a.positional[1], layers));
    return 0;
  }
  if (a.positional.size() == 2 && a.positional[0] == "rss") {
    const fs::path file = a.positional[1];
    const ckpt::checkpoint t = read(file);
    col_model m = like(t, layers);
    ckpt::read_params(t, m);
    const double data_mib = static_cast<double>(layers) * static_cast<double>(m.layers[0].size()) * 4.0 / (1 << 20);
    const mem_status s = read_status();
    std::printf("RESULT %s peak RSS: %.0f MiB for %.0f MiB of data (%.3fx)\n", file.extension().c_str(),
                static_cast<double>(s.hwm_kib) / 1024, data_mib, static_cast<double>(s.hwm_kib) / 1024 / data_mib);
    return 0;
  }
  std::fprintf(stderr, "usage: ckpt_bench_torch time FILE | rss FILE\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench_torch: %s\n", e.what());
  return 1;
}
