#pragma once
// The save of sections (ckpt/section.hpp) to a file in a folder held by its descriptor, as the
// managers save a step (src/structures/section.cpp).

#include <ckpt/file.hpp>
#include <ckpt/section.hpp>

#include "io/atomic_file.hpp"
#include "io/folder.hpp"

#include <span>

namespace ckpt::detail {

// ckpt::save of sections, to `target`: what the managers call for a step, and ckpt::save for a
// path. `path` says how the bytes reach the disk (detail::write_file).
// \throws as ckpt::save.
void save_sections(const file_at& target, std::span<const section> sections, const metadata_map& metadata,
                   const save_options& options, write_path path = write_path::page_cache);

}  // namespace ckpt::detail
