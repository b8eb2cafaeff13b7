#pragma once
// Not part of the API (adam.hpp's training_state makes its sections with it; src/structures/section.cpp
// reads them, and the writers take their entries in order and their metadata): the way into a
// section's members.
// section.hpp includes it at its end, after class section, which it needs: not to be included
// on its own.

#include <ckpt/detail/entry_source.hpp>
#include <ckpt/detail/read_plan.hpp>

#include <cstddef>
#include <functional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::detail {

// For the sections an optimizer makes (ckpt/adam.hpp): a section saved as `saved` is and read by
// `read`, which may stage its leaves and move them in place in a commit.
struct section_access {
  static section with_read(section saved, std::string_view prefix, std::function<void(read_plan&)> read) {
    saved.prefix_ = prefix;
    saved.read_ = std::move(read);
    return saved;
  }
  // A section of the one entry `source`, read by `read`.
  static section of_entry(entry_source source, std::function<void(read_plan&)> read) {
    section out;
    out.prefix_ = source.name;
    out.entries_.push_back(std::move(source));
    out.read_ = std::move(read);
    return out;
  }
  // A section that only saves `entries` (ckpt::mpi::sliced's slices).
  static section of_entries(std::vector<entry_source> entries) {
    section out;
    out.entries_ = std::move(entries);
    return out;
  }
  static void add_to(const section& s, std::size_t index, read_plan& plan);
  // The entries `s` saves, in the order its structure's leaves are walked.
  static const std::vector<entry_source>& entries(const section& s) noexcept { return s.entries_; }
  static std::vector<entry_source>& entries(section& s) noexcept { return s.entries_; }
  // The metadata `s` brings to a save: its checkpoint's, or none.
  static const metadata_map& metadata(const section& s) noexcept { return s.metadata_; }
};

// Whether a save takes slices of global tensors (entry_source::first >= 0): only the MPI saves do.
enum class slices_are : bool { refused, taken };

// The entries of `sections` in name order, after checking their names (none empty, none
// `__metadata__`, no two equal) and, unless `slices` are taken, that none is a slice.
// `function` names the caller in the error messages.
// Throws std::invalid_argument naming a bad name or a slice; std::bad_alloc.
std::vector<const entry_source*> ordered_entries(std::span<const section> sections, std::string_view function,
                                                 slices_are slices = slices_are::refused);

// The metadata a save of `sections` writes (ckpt::save of sections; the managers, before their
// own keys): those of the checkpoint sections, merged (ckpt's digest keys, which a save drops,
// left out), then `metadata` over them. `function` names the caller in the error message.
// Throws std::invalid_argument if two checkpoint sections give one key different values (naming
// the key and both values); std::bad_alloc.
metadata_map merged_metadata(std::span<const section> sections, const metadata_map& metadata,
                             std::string_view function);

// ckpt::read_params of sections, its error messages naming `function` (read_params; a function
// built on the read passes its own name).
// Throws as ckpt::read_params.
read_report read_sections(const checkpoint& t, std::span<const section> sections, const extract_options& options,
                          std::string_view function);

}  // namespace ckpt::detail
