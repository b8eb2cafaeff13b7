// ckpt_s3_bench: a checkpoint in object storage, against the S3 server the environment names
// (AWS_ENDPOINT_URL...; bench/s3_run.sh starts the tests' local server). One measurement a run,
// printed as a RESULT line, so that each run's peak RSS is its own:
//
//   ckpt_s3_bench --what=save --mib=1024 --url=s3://bench/ckpt.safetensors
//
//  - save: ckpt::save of --mib MiB of F32 tensors (4 MiB each, 1024 x 1024, row-major: no
//    transposes) held in memory, digest on; RESULT save <seconds> <MiB/s> <peak RSS above the
//    state's, MiB: the upload's buffers>;
//  - load: ckpt::load of the object, digest verified; RESULT load <seconds> <MiB/s> <peak RSS, MiB>;
//  - partial: ckpt::load of one 4 MiB tensor of the object (`load_options::only`); RESULT partial
//    <seconds> <bytes the server sent> <the object's size in bytes>.

#include <ckpt/ckpt.hpp>

#include "s3/client.hpp"  // s3::bytes_received: what the server sent (private; bench/CMakeLists.txt)

#include <Eigen/Core>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i)
    if (std::string a = argv[i]; a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  return fallback;
}

long peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = flag(argc, argv, "what", "save");
  const long mib = std::atol(flag(argc, argv, "mib", "1024").c_str());
  const std::string url = flag(argc, argv, "url", "s3://bench/ckpt.safetensors");
  using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (what == "save") {
    std::vector<row_major> state(static_cast<std::size_t>(mib / 4), row_major(1024, 1024));
    for (std::size_t i = 0; i < state.size(); ++i) state[i].setConstant(static_cast<float>(i));
    const long before = peak_rss_mib();
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::save(url, {{state, "layers"}}, {}, {.digest = true});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("RESULT save %.3f %.0f %ld\n", s, static_cast<double>(mib) / s, peak_rss_mib() - before);
  } else if (what == "load") {
    const ckpt::checkpoint t = ckpt::load(url, {.verify_digest = true});
    const double s = seconds();
    std::printf("RESULT load %.3f %.0f %ld\n", s, static_cast<double>(mib) / s, peak_rss_mib());
  } else if (what == "partial") {
    const ckpt::checkpoint t = ckpt::load(url, {.only = ckpt::name_pattern(R"(^layers\.17$)")});
    const double s = seconds();
    const std::uint64_t fetched = ckpt::detail::s3::bytes_received();
    if (t.size() != 1) return 1;
    std::printf("RESULT partial %.3f %llu %llu\n", s, static_cast<unsigned long long>(fetched),
                static_cast<unsigned long long>(static_cast<std::uint64_t>(mib) << 20));
  } else {
    std::fprintf(stderr, "unknown --what=%s\n", what.c_str());
    return 2;
  }
  return 0;
}
