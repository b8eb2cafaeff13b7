#pragma once
// How the torch.save reader fails, for its three units (src/format/pickle.cpp, src/format/torch_tensors.cpp,
// src/format/torch.cpp): the error that names the file and its broken rule, and the budgets of
// ckpt::torch_options, whose overrun is one. Header only; it calls nothing of the library.

#include <ckpt/error.hpp>

#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>

namespace ckpt::detail {

/// A file is not a `torch.save` file ckpt can read, or holds something the restricted unpickler
/// refuses: a `format_error` whose message says so, `ckpt: '<path>' is not a readable PyTorch
/// file: <broken rule>` (ckpt/torch.hpp).
class torch_format_error : public format_error {
 public:
  /// \param path the file; \param rule what is wrong, naming the record, opcode or global.
  torch_format_error(const std::filesystem::path& path, const std::string& rule)
      : format_error(path, rule, "ckpt: '" + path.string() + "' is not a readable PyTorch file: " + rule) {}
};

/// A budget of bytes in proportion to the input: `factor` bytes for each byte of it, plus `base`.
/// Spending past it fails with a message naming the budget's option and how to raise it.
class torch_budget {
 public:
  torch_budget(const std::filesystem::path& origin, std::string_view what, std::string_view option, std::size_t factor,
               std::string_view input, std::size_t input_size, std::size_t base)
      : origin_(origin), what_(what), option_(option), factor_(factor), input_(input), base_(base) {
    if (__builtin_mul_overflow(factor, input_size, &left_) || __builtin_add_overflow(left_, base, &left_))
      left_ = std::numeric_limits<std::size_t>::max();
    limit_ = left_;
  }
  /// \throws torch_format_error if `n` bytes are more than are left.
  void spend(std::size_t n) {
    if (n <= left_) {
      left_ -= n;
      return;
    }
    throw torch_format_error(origin_, std::string(what_) + " take more than " + std::to_string(limit_) + " bytes (" +
                                          std::to_string(factor_) + " per byte of " + std::string(input_) + ", plus " +
                                          std::to_string(base_ >> 20) + " MiB: the budget torch_options::" +
                                          std::string(option_) +
                                          "; raise it to read this file, in the ckpt tool with --torch-budget)");
  }

 private:
  const std::filesystem::path& origin_;
  std::string_view what_, option_;
  std::size_t factor_;
  std::string_view input_;
  std::size_t base_;
  std::size_t left_ = 0, limit_ = 0;
};

/// What an entry of a hash map costs (its node and bucket), as charged to a budget.
inline constexpr std::size_t map_entry_bytes = 64;

}  // namespace ckpt::detail
