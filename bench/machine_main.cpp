// ckpt_machine: what does this machine cost? The costs that ckpt's load and save speeds depend
// on, printed at the top of every table of bench/README.md so that each table says on what kind
// of machine it was measured (bench/machine.hpp says what is measured).
//
//   ckpt_machine [--dir=DIR] [--mib=256] [--reps=5] [--json]

#include "machine.hpp"

#include "common.hpp"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  const bench::args a(argc, argv);
  if (!a.positional.empty() || a.str("help", "") == "1") {
    std::fprintf(stderr, "usage: ckpt_machine [--dir=DIR] [--mib=256] [--reps=5] [--json]\n");
    return 2;
  }
  const fs::path dir = a.str("dir", fs::temp_directory_path().string());
  long mib = 0, reps = 0;
  try {
    mib = a.num("mib", 256);
    reps = a.num("reps", 5);
  } catch (const std::logic_error&) {
    throw std::invalid_argument("--mib and --reps take a whole number");
  }
  if (mib < 2 || mib > (1L << 20)) throw std::invalid_argument("--mib must be between 2 and 1048576");
  if (reps < 1 || reps > 1000) throw std::invalid_argument("--reps must be between 1 and 1000");
  if (!fs::is_directory(dir)) throw std::invalid_argument("--dir: " + dir.string() + " is not a folder");
  const auto bytes = static_cast<std::size_t>(mib) << 20;
  bench::print_machine(dir, bytes, static_cast<int>(reps), a.str("json", "") == "1");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_machine: %s\n", e.what());
  return 1;
}
