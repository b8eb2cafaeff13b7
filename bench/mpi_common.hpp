#pragma once
// What the MPI benchmarks share: this rank's place, and a sample timed between barriers, as the
// slowest rank sees it.

#include <mpi.h>

#include <functional>

namespace bench {

// This rank in `comm`, and the number of ranks.
inline int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}
inline int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

// The slowest rank's time for `f`, all ranks started together after a barrier.
inline double timed(MPI_Comm comm, const std::function<void()>& f) {
  MPI_Barrier(comm);
  const double start = MPI_Wtime();
  f();
  double mine = MPI_Wtime() - start;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

}  // namespace bench
