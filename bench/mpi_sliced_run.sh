#!/usr/bin/env bash
# bench/mpi_sliced_run.sh: ckpt_mpi_sliced_bench (bench/mpi_sliced_bench.cpp) at 1, 2 and 4 ranks,
# one run per row, and the table of docs/distributed.md ("sliced"). Builds build-mpi-bench/ (as
# bench/mpi_run.sh) unless --no-build; the scratch files go in build-mpi-bench/work/ and are removed
# at the end. Extra arguments go to every run (--mib=N, --tensors=N, --reps=N). Not part of CI.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_build.sh" ckpt_mpi_sliced_bench -- "$@"
bench="$BUILD/bench/ckpt_mpi_sliced_bench"
echo "| what | ranks | MiB in all | median s | MiB/s in all | peak RSS of a rank, MiB | state per rank, MiB |"
echo "|---|---|---|---|---|---|---|"
for n in 1 2 4; do
  for what in independent sliced sliced-nodigest pieces load manager manager-async; do
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$bench" --what="$what" --dir="$work" "${args[@]}" |
      sed -n 's/^RESULT //p'
  done
done
