// What the torch.save reader must do with arbitrary bytes, checked by the libFuzzer target
// fuzz_torch and by test_torch's replay of tests/corpus/torch/: load or refuse with a
// ckpt::error, never crash, never read out of bounds (the sanitizers see every byte touched).
#pragma once

#include <ckpt/error.hpp>
#include <ckpt/torch.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace ckpt_fuzz {

// Thrown when a loaded checkpoint breaks a rule the reader promises.
struct torch_exercise_failure : std::logic_error {
  using std::logic_error::logic_error;
};

// True if `bytes` loaded; false if they were refused with a ckpt::error. Any other exception
// propagates (a finding).
inline bool exercise_torch(std::span<const std::byte> bytes) {
  ckpt::checkpoint t;
  try {
    t = ckpt::parse_torch(bytes, "fuzz.pt");
  } catch (const ckpt::error&) {
    return false;
  }
  unsigned sum = 0;
  for (const auto& [name, x] : t) {
    if (name.empty()) throw torch_exercise_failure("an entry with an empty name");
    if (x.nbytes() != ckpt::nbytes_of(x.dtype(), x.numel())) throw torch_exercise_failure("entry '" + name + "' has a wrong size");
    for (const std::byte b : x.bytes()) sum += std::to_integer<unsigned>(b);  // every byte is readable
  }
  // Stored where the optimizer cannot drop the reads above.
  static volatile unsigned sink = 0;
  sink = sink + sum;
  return true;
}

}  // namespace ckpt_fuzz
