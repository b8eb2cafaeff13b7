#!/usr/bin/env bash
# bench/mpi_sliced_run.sh: ckpt_mpi_sliced_bench (bench/mpi_sliced_bench.cpp) at 1, 2 and 4 ranks,
# one run per row, and the table of docs/distributed.md ("sliced"). Builds build-mpi-bench/ (as
# bench/mpi_run.sh) unless --no-build; the scratch files go in build-mpi-bench/work/ and are removed
# at the end. Extra arguments go to every run (--mib=N, --tensors=N, --reps=N). Not part of CI.
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
  cmake --build "$BUILD" --target ckpt_mpi_sliced_bench ckpt_machine
fi
bench="$BUILD/bench/ckpt_mpi_sliced_bench"
work="$BUILD/work"
trap 'rm -rf "$work"' EXIT
# The machine's costs the table depends on (bench/machine.cpp), printed above it.
mkdir -p "$work"
"$BUILD/bench/ckpt_machine" --dir="$work"
echo
echo "| what | ranks | MiB in all | median s | MiB/s in all | peak RSS of a rank, MiB | state per rank, MiB |"
echo "|---|---|---|---|---|---|---|"
for n in 1 2 4; do
  for what in independent sliced sliced-nodigest pieces load; do
    mpirun --allow-run-as-root --oversubscribe -np "$n" "$bench" --what="$what" --dir="$work" "${args[@]}" |
      sed -n 's/^RESULT //p'
  done
done
