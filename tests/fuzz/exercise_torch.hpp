// What the torch.save reader must do with arbitrary bytes, checked by the libFuzzer target
// fuzz_torch and by test_torch's replay of tests/corpus/torch/: load or refuse with a
// ckpt::error, never crash, never read out of bounds (the sanitizers see every byte touched).
// The bytes go through ckpt::parse, which hands those that begin as a torch.save file to the
// reader (the rest to the safetensors parser, which fuzz_load exercises on its own).
#pragma once

#include <ckpt/error.hpp>
#include <ckpt/torch.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ckpt_fuzz {

// Thrown when a loaded checkpoint breaks a rule the reader promises.
struct torch_exercise_failure : std::logic_error {
  using std::logic_error::logic_error;
};

// True if `bytes` loaded; false if they were refused with a ckpt::error. Any other exception
// propagates (a finding). What loaded must also stay within the reader's budgets
// (ckpt::torch_options): the names and the tensor bytes in proportion to the file, and tied
// names must be what the reader says they are.
inline bool exercise_torch(std::span<const std::byte> bytes) {
  ckpt::checkpoint t;
  std::vector<std::vector<std::string>> tied;
  try {
    t = ckpt::parse(bytes, "fuzz.pt", {}, {.tied = [&](const std::vector<std::string>& names) { tied.push_back(names); }});
  } catch (const ckpt::error&) {
    return false;
  }
  const ckpt::torch_options budgets;
  // The pickle is part of the file: what is charged per byte of it is bounded per byte of the file.
  const std::size_t names_limit = budgets.name_budget * bytes.size() + (std::size_t{1} << 20);
  const std::size_t data_limit = budgets.data_budget * bytes.size() + (std::size_t{16} << 20);
  std::size_t names = 0, data = 0;
  unsigned sum = 0;
  for (const auto& [name, x] : t) {
    if (name.empty()) throw torch_exercise_failure("an entry with an empty name");
    if (x.nbytes() != ckpt::detail::nbytes_of(x.dtype(), x.numel()))
      throw torch_exercise_failure("entry '" + name + "' has a wrong size");
    names += name.size();
    data += x.nbytes();
    for (const std::byte b : x.bytes()) sum += std::to_integer<unsigned>(b);  // every byte is readable
  }
  for (const auto& [key, value] : t.metadata()) names += key.size();
  if (names > names_limit) throw torch_exercise_failure("the names exceed the name budget");
  if (data > data_limit) throw torch_exercise_failure("the entries' bytes exceed the data budget");
  for (const auto& group : tied) {
    if (group.size() < 2) throw torch_exercise_failure("a tied group of fewer than two names");
    const ckpt::tensor* first = t.find(group.front());
    for (const auto& name : group) {
      const ckpt::tensor* x = t.find(name);
      if (first == nullptr || x == nullptr) throw torch_exercise_failure("a tied name '" + name + "' is not an entry");
      if (x->bytes().data() != first->bytes().data() || !(*x == *first))
        throw torch_exercise_failure("tied name '" + name + "' is not the same tensor as '" + group.front() + "'");
    }
  }
  // Stored where the optimizer cannot drop the reads above.
  static volatile unsigned sink = 0;
  sink = sink + sum;
  return true;
}

}  // namespace ckpt_fuzz
