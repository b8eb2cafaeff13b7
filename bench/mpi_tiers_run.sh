#!/usr/bin/env bash
# bench/mpi_tiers_run.sh: ckpt_mpi_tiers_bench (bench/mpi_tiers_bench.cpp) at 4 ranks as 2
# simulated nodes, 256 MiB a rank (a 1 GiB step): the local tier on tmpfs (/dev/shm), the shared
# folder in build-mpi-bench/work/ (the project's disk). Prints the machine's costs, then the table
# of bench/README.md ("What do multi-level checkpoints cost?"). Builds build-mpi-bench/ unless
# --no-build; extra arguments go to the run (--mib-per-rank=N, --reps=N, --work-ms=N). Not part of CI.
source "$(dirname "${BASH_SOURCE[0]}")/mpi_build.sh" ckpt_mpi_tiers_bench -- "$@"
local_tier="/dev/shm/ckpt-mpi-tiers-bench-$$"
trap 'rm -rf "$work" "$local_tier"*' EXIT
echo "| what | median s | GiB/s of the step |"
echo "|---|---|---|"
mpirun --allow-run-as-root --oversubscribe -np 4 "$BUILD/bench/ckpt_mpi_tiers_bench" --ranks-per-node=2 \
  --shared="$work/shared" --local="$local_tier" "${args[@]}" | sed -n 's/^RESULT //p;s/^# /# /p'
