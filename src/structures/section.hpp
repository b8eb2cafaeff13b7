#pragma once
// The save of sections (ckpt/section.hpp) into a byte sink, as a manager saves a step into its
// store (src/structures/section.cpp).

#include <ckpt/file.hpp>
#include <ckpt/section.hpp>

#include "io/atomic_file.hpp"
#include "io/byte_sink.hpp"

#include <span>

namespace ckpt::detail {

// ckpt::save of sections into `sink` (the caller commits it), with `metadata` as given (a
// manager's, merged already): what the managers call for a step. `path` says how the bytes reach
// the disk (detail::write_file).
// \throws as ckpt::save.
void save_sections(byte_sink& sink, std::span<const section> sections, const metadata_map& metadata,
                   const save_options& options, write_path path = write_path::page_cache);

}  // namespace ckpt::detail
