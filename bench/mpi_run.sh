#!/usr/bin/env bash
# bench/mpi_run.sh: ckpt_mpi_bench (bench/mpi_bench.cpp) at 1, 2 and 4 ranks, and the table of
# docs/distributed.md. Builds build-mpi-bench/ (Release, -DCKPT_BUILD_BENCH=ON, MPI required) unless
# --no-build; the scratch files go in build-mpi-bench/work/ (same filesystem as the project) and are
# removed at the end. Extra arguments go to every run (--mib-per-rank=N, --tensors-per-rank=N,
# --reps=N). Not part of CI.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_build.sh" ckpt_mpi_bench -- "$@"
bench="$BUILD/bench/ckpt_mpi_bench"
echo "| what | ranks | MiB per rank | median s | MiB/s per writing rank | MiB/s total |"
echo "|---|---|---|---|---|---|"
for n in 1 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$bench" --dir="$work" "${args[@]}" |
    sed -n 's/^RESULT //p'
done
