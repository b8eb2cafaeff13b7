#pragma once
// What ranks tell each other before a save: a rank's step, the entries and slices it holds, and
// (rank 0) the metadata; exchanged so that every rank plans the step from the same data.

#include <ckpt/mpi.hpp>

#include "common.hpp"
#include "step.hpp"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <functional>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::mpi::detail {

// The name of shard `number` of `count`, as Hugging Face names them.
inline std::string shard_name(std::size_t number, std::size_t count) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "model-%05zu-of-%05zu.safetensors", number, count);
  return digits;
}

// What one rank brings to a save: its step, what it holds, and (rank 0) the step's metadata.
// `error` is set instead if the rank could not even say.
struct holding {
  std::string error;
  std::int64_t step = 0;
  metadata_map metadata;
  // An entry (`count` < 0), or elements [first, first + count) of one in C order (a slice).
  struct entry {
    std::string name;
    ckpt::dtype type;
    dims shape;
    std::int64_t first = 0;
    std::int64_t count = -1;
  };
  std::vector<entry> entries;
};

// Every rank's holding, on every rank: one MPI_Allgather of the sizes, one MPI_Allgatherv.
inline std::vector<holding> exchange(MPI_Comm comm, const holding& mine) {
  const int size = size_of(comm);
  const std::string bytes = encode(mine);
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw std::length_error("ckpt: mpi::save: the description of this rank's entries is too long");
  const int count = static_cast<int>(bytes.size());
  std::vector<int> counts(static_cast<std::size_t>(size));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  std::vector<int> offsets(counts.size());
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += counts[r];
    if (total > INT_MAX) throw std::length_error("ckpt: mpi::save: the description of the entries is too long");
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(bytes.data(), count, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE, comm);
  std::vector<holding> out;
  out.reserve(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r)
    out.push_back(decode<holding>(std::string_view(all).substr(static_cast<std::size_t>(offsets[r]),
                                                                static_cast<std::size_t>(counts[r]))));
  return out;
}

// "F32 [4, 8]", for messages.
inline std::string describe_entry(ckpt::dtype type, std::span<const std::int64_t> shape) {
  return std::string(to_string(type)) + " " + to_string(shape);
}

// Collective: the part of planning a step that every save shares. Every rank's holding, this
// rank's entries described by `describe_mine` (an exception there is reported on every rank as a
// collective_error), after checking that the ranks agree on the step and that it is not
// committed; fills `plan`'s folder, run (`held`, the folder a manager holds, or `folder` opened
// by each rank, created if need be, once the step is agreed), step, dir, operation and metadata
// (rank 0's `metadata`, then `step`). `function` names the caller in messages.
std::vector<holding> gather_holdings(MPI_Comm comm, step_plan& plan, const std::filesystem::path& folder,
                                     const ckpt::detail::folder_handle* held, std::int64_t step,
                                     const metadata_map& metadata, std::string_view function,
                                     const std::function<void(std::vector<holding::entry>&)>& describe_mine);

}  // namespace ckpt::mpi::detail
