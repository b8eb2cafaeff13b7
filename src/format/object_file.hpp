#pragma once
// A checkpoint file as an S3 object (issue 40): written by the file writer into an upload
// (src/s3/transfer.hpp), its header read by a ranged GET; and, in src/format/object_file.cpp, the
// S3 side of ckpt::save and ckpt::load of `s3://` URLs and of a sharded checkpoint under a prefix
// (src/format/save.hpp, src/format/remote.hpp). Compiled with S3 support only.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>

#include "s3/client.hpp"
#include "s3/transfer.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace ckpt::detail::s3 {

// Writes a safetensors file of `entries` (laid out, names checked) and `metadata` to `target` by an
// upload: true once the object is there; false, nothing written, if `rule` keeps an object that
// was (upload::commit).
// \throws remote_error; as the file writer (write_file) for the entries.
bool write_object(const config& settings, const object& target, entry_list entries,
                  const metadata_map& metadata, const save_options& options, upload::existing rule);

// The first bytes of the object `o` (a checkpoint file): its first 64 KiB, and as much more as
// the header needs when they begin with a safetensors length within the format's limit (not for
// a torch.save zip): one ranged GET for most files, two for headers of more than some 600
// entries. Fewer bytes if the object is shorter; the header's rules are the parser's to check.
// `size`, the object's size if the caller knows it, is checked against the answers'.
// \throws remote_error.
std::vector<std::byte> read_head(client& c, const object& o, std::optional<std::uint64_t> size = std::nullopt);

}  // namespace ckpt::detail::s3
