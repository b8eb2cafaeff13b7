#pragma once
// Not part of the API (adam.hpp's training_state uses these): the names of the training state's
// sections, and the entry of its step.

#include <ckpt/detail/entry_source.hpp>
#include <ckpt/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

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

}  // namespace ckpt::detail
