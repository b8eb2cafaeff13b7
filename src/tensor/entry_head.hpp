#pragma once
// What a header says of an entry before its bytes: its name, dtype and shape. The one record of
// them for what describes entries apart from their bytes: the description of a checkpoint
// (src/format/describe.hpp), what a rank holds before an MPI save and the global tensors of a
// step of slices (src/mpi/holding.hpp, src/mpi/step.hpp).

#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <string>

namespace ckpt::detail {

// A plain aggregate (no base, no constructor): the MPI byte codec (src/mpi/common.hpp) walks it
// field by field.
struct entry_head {
  std::string name;
  ckpt::dtype type = ckpt::dtype::f32;
  dims shape;
};

}  // namespace ckpt::detail
