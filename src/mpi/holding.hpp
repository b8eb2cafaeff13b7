#pragma once
// What ranks tell each other before a save: a rank's step, the entries and slices it holds, and
// (rank 0) the metadata; exchanged so that every rank plans the step from the same data.

#include <ckpt/detail/entry_source.hpp>
#include <ckpt/detail/sizes.hpp>
#include <ckpt/mpi.hpp>

#include "common.hpp"
#include "step.hpp"
#include "tensor/entry_head.hpp"

#include <mpi.h>

#include <climits>
#include <functional>
#include <optional>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::mpi::detail {

// What one rank brings to a save: its step, what it holds, and (rank 0) the step's metadata.
// `error` is set instead if the rank could not even say.
struct holding {
  std::string error;
  std::int64_t step = 0;
  metadata_map metadata;
  // An entry (`count` < 0), or elements [first, first + count) of one in C order (a slice): then
  // `head.shape` is the global tensor's. `head` is a member, not a base, for the byte codec.
  struct entry {
    ckpt::detail::entry_head head;
    std::int64_t first = 0;
    std::int64_t count = -1;
  };
  std::vector<entry> entries;
};

// What a rank says of the entry `e` it holds: the entry whole, or its slice of the global tensor.
inline holding::entry held_entry(const ckpt::detail::entry_source& e) {
  if (e.first < 0) return {{e.name, e.dtype, e.shape}};
  return {{e.name, e.dtype, e.global_shape}, e.first, ckpt::detail::numel_of(e.shape)};
}

// Every rank's holding, on every rank.
inline std::vector<holding> exchange(MPI_Comm comm, const holding& mine) {
  return gather_all(comm, mine, "the description of the entries");
}

// "F32 [4, 8]", for messages.
inline std::string describe_entry(ckpt::dtype type, std::span<const std::int64_t> shape) {
  return std::string(to_string(type)) + " " + to_string(shape);
}

// Collective: the part of planning a step that every save shares. Every rank's holding, this
// rank's entries and (rank 0) the step's metadata described by `describe_mine` (an exception there
// is reported on every rank as a collective_error), after checking that the ranks agree on the
// step and that it is not committed; fills `plan`'s folder, run (`held`, the run a manager holds,
// or `folder` opened by each rank, a folder created if need be, once the step is agreed), step,
// dir, operation and metadata (rank 0's, then `step`). `function` names the caller in messages.
std::vector<holding> gather_holdings(MPI_Comm comm, step_plan& plan, const std::filesystem::path& folder,
                                     const run_store& held, std::int64_t step,
                                     std::string_view function, const std::function<void(holding& mine)>& describe_mine);

// Collective data, local work: plans a step in which some rank holds slices (src/mpi/sliced.cpp):
// checks that the slices of each global tensor cover it exactly once and that the ranks agree on
// its dtype and shape, and lays out the step's one shard (step_plan::sliced), alike on every rank
// from every rank's holding `all`. `rank` is this rank.
// \throws std::invalid_argument naming the tensor, the ranks and their ranges, dtypes or shapes.
void lay_out_slices(step_plan& plan, const std::vector<holding>& all, int rank);

}  // namespace ckpt::mpi::detail
