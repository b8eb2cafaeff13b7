#pragma once
// What a checkpoint holds, from its headers alone: each entry's name, dtype, shape and bytes, and
// the metadata, as ckpt::load would give them, without reading (or, in a bucket, fetching) the
// data. For `ckpt inspect`. The front door is describe (src/format/load.cpp), which tells the
// layouts apart as ckpt::load does; a file on disk is described by its load (mapped: its header
// only is read), an object by a ranged GET of its header (src/format/object_file.cpp), a sharded
// checkpoint in a bucket by its index and its shards' headers (src/format/sharded.cpp). A
// torch.save file has no header to read apart: it is read whole, as ckpt::load reads it.

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include "tensor/entry_head.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ckpt::detail {

struct description {
  struct entry : entry_head {
    std::uint64_t bytes = 0;
  };
  std::vector<entry> entries;  // by name
  metadata_map metadata;
};

// The description of `t` (loaded).
[[nodiscard]] description description_of(const checkpoint& t);

// The checkpoint at `path` (every layout ckpt::load opens), described: its entries as
// `load(path, options, torch)` gives them (those `options.only` chooses), its metadata. The digest
// is not checked; `options.skipped` hears of entries of unknown dtypes and `options.fetched` of
// what was fetched, as for a load; `torch.tied` of a torch.save file's tied names.
// \throws as ckpt::load.
[[nodiscard]] description describe(const std::filesystem::path& path, const load_options& options,
                                   const torch_options& torch);

}  // namespace ckpt::detail
