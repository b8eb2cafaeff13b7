#pragma once
// The machine probe: what does this machine cost? The costs that ckpt's load and save speeds
// depend on. ckpt_machine prints it alone; ckpt_peers prints it above its table.

#include <cstddef>
#include <filesystem>

namespace bench {

// Writes a temporary file of `bytes` bytes in `dir`, keeps it in the page cache, measures each
// figure (bench/machine.cpp lists them) as the median of `reps` runs, and prints them to stdout:
// one `key: value` line a figure, or one JSON object if `json`. The file is removed at the end.
// Throws std::system_error if the file cannot be written or read.
void print_machine(const std::filesystem::path& dir, std::size_t bytes, int reps, bool json);

}  // namespace bench
