#pragma once
// Not part of the API (adam.hpp's training_state uses these): the names of the training state's
// sections, the entry of its step, and which of its leaves a background save copies lazily.

#include <ckpt/detail/adam_update.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/named.hpp>
#include <ckpt/section.hpp>
#include <ckpt/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ckpt::detail {

// The sections of `training_state`: Raven's `Kaun.Checkpoint` names.
inline constexpr std::string_view model_section = "model";
inline constexpr std::string_view mu_section = "optim.mu";
inline constexpr std::string_view nu_section = "optim.nu";
inline constexpr std::string_view step_entry_name = "optim.step";

// The entry of the step, as Kaun's `of_int` stores it (one I32 element, I64 if it does not fit),
// read from `step` when it is written: a list of sections made before an update saves the step
// the update made. Its dtype is chosen now; a step that outgrows it by the save is refused.
inline entry_source step_source(const std::int64_t& step) {
  const bool small = step >= std::numeric_limits<std::int32_t>::min() && step <= std::numeric_limits<std::int32_t>::max();
  entry_source out;
  out.name = std::string(step_entry_name);
  out.dtype = small ? dtype::i32 : dtype::i64;
  out.shape = {1};
  out.nbytes = small ? sizeof(std::int32_t) : sizeof(std::int64_t);
  out.write_rows = [&step, small](std::size_t, std::size_t, std::byte* dst) {
    if (!small) return static_cast<void>(std::memcpy(dst, &step, sizeof step));
    if (step > std::numeric_limits<std::int32_t>::max())
      throw std::invalid_argument("ckpt: the step " + std::to_string(step) + " no longer fits the I32 entry '" +
                                  std::string(step_entry_name) + "' of sections made at a smaller step: make them anew");
    const auto value = static_cast<std::int32_t>(step);
    std::memcpy(dst, &value, sizeof value);
  };
  return out;
}

// Marks the entries of `s` (a section of `structure`, whose leaves it walks in the same order) that
// only adam::update changes in place, which calls before_write first: the trained leaves of Eigen
// types and scalars (not `ckpt::tensor` leaves: update replaces those, and a snapshot shares their
// bytes). A save_async may copy them after it returns (detail/lazy_copy.hpp).
template <class S>
section copied_lazily(section s, const S& structure) {
  std::vector<entry_source>& entries = section_access::entries(s);
  std::size_t i = 0;
  for_each_leaf(
      [&](std::string_view, const auto& x) {
        using L = std::remove_cvref_t<decltype(x)>;
        if constexpr (may_train<L>() && !std::is_same_v<L, tensor>)
          if (trains(x) && i < entries.size()) entries[i].lazy_leaf = &x;
        ++i;
      },
      structure);
  return s;
}

}  // namespace ckpt::detail
