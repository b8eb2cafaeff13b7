#pragma once
// Not part of the API (the templates of section.hpp and params.hpp call these): the entry source
// of a live leaf, and the copy of entry sources into a checkpoint.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/leaf.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// An entry that refers to a live leaf, through its traits' optional hooks: its bytes where they
// stand in C order (`contiguous`), else a band of rows at a time (`write_rows`), else a snapshot
// made by `write`. `function` names the caller in the error message.
template <leaf L>
entry_source live_source(std::string name, const L& x, std::string_view function) {
  if constexpr (std::is_same_v<L, tensor>) {
    // A tensor's bytes are shared, not copied: the section holds them, so that the section of a
    // temporary checkpoint (`{ckpt::of_int("step", step)}`) stays valid as long as it does.
    return tensor_source(std::move(name), x);
  }
  using traits = leaf_hooks<L>;
  entry_source out;
  out.name = std::move(name);
  out.dtype = traits::dtype(x);
  out.shape = traits::shape(x);
  out.nbytes = nbytes_of(out.dtype, numel_of(out.shape));
  if (out.nbytes == 0) return out;
  if constexpr (has_contiguous<L>) {
    out.contiguous = traits::contiguous(x);
    if (!out.contiguous.empty()) {
      if (out.contiguous.size() != out.nbytes)
        throw std::invalid_argument("ckpt: " + std::string(function) + ": leaf_traits::contiguous gave " +
                                    std::to_string(out.contiguous.size()) +
                                    " bytes for entry '" + out.name + "' of " + std::to_string(out.nbytes) + " bytes");
      return out;
    }
  }
  if constexpr (has_write_rows<L>) {
    if (!out.shape.empty()) {
      out.write_rows = [&x](std::size_t first, std::size_t count, std::byte* dst) {
        traits::write_rows(x, first, count, dst);
      };
      return out;
    }
  }
  out.keep_alive = to_tensor(x);
  out.contiguous = out.keep_alive.bytes();
  return out;
}

// Sorts `entries` by name and checks the names (none empty, none `__metadata__`, no two equal);
// `function` names the caller in the error messages.
void order_entries(std::vector<const entry_source*>& entries, std::string_view function);

// A checkpoint of a C-order copy of every entry (a tensor's bytes are shared, not copied): large
// entries each in memory of its own, small ones packed together (src/structures/snapshot.cpp,
// entry_memory); a copy of 128 MiB or more is made on up to four threads.
checkpoint copy_entries(const std::vector<entry_source>& entries, std::string_view function);

}  // namespace ckpt::detail
