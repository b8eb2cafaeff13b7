#!/usr/bin/env bash
# bench/mpi_run.sh: ckpt_mpi_bench (bench/mpi_bench.cpp) at 1, 2 and 4 ranks, and the table of
# docs/distributed.md. Builds build-mpi-bench/ (Release, -DCKPT_BUILD_BENCH=ON, MPI required) unless
# --no-build; the scratch files go in build-mpi-bench/work/ (same filesystem as the project) and are
# removed at the end. Extra arguments go to every run (--mib-per-rank=N, --tensors-per-rank=N,
# --reps=N). Not part of CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD="${CKPT_MPI_BENCH_DIR:-build-mpi-bench}"
build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    *) args+=("$a") ;;
  esac
done
if [[ $build == 1 ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_BENCH=ON -DCKPT_BUILD_MPI=ON \
    -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$BUILD" --target ckpt_mpi_bench ckpt_machine
fi
bench="$BUILD/bench/ckpt_mpi_bench"
work="$BUILD/work"
trap 'rm -rf "$work"' EXIT
# The machine's costs the table depends on (bench/machine.cpp), printed above it.
mkdir -p "$work"
"$BUILD/bench/ckpt_machine" --dir="$work"
echo
echo "| what | ranks | MiB per rank | median s | MiB/s per writing rank | MiB/s total |"
echo "|---|---|---|---|---|---|"
for n in 1 2 4; do
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$bench" --dir="$work" "${args[@]}" |
    sed -n 's/^RESULT //p'
done
